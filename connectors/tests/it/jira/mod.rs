//! The Jira connector against the simulated site.

use std::collections::BTreeSet;

use cmcp_connectors::{Connector, ConnectorError, HttpConfig, JiraConnector, ReadOutcome};
use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind, Token};
use cmcp_fixtures::{Faults, JiraSim, JiraSimConfig};

use crate::support::{fast_cfg, list};

const EMAIL: &str = "me@acme.com";
const TOKEN: &str = "ATATT_secret";

async fn sim(projects: usize) -> JiraSim {
    JiraSim::start(JiraSimConfig {
        projects,
        token: Some(TOKEN.into()),
        email: Some(EMAIL.into()),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn connector(base: &str, sim: &JiraSim) -> JiraConnector {
    let cfg = HttpConfig {
        per_page: 100,
        ..fast_cfg()
    };
    JiraConnector::new(
        base,
        &sim.site(),
        Token::new(format!("basic:{EMAIL}:{TOKEN}")),
        cfg,
    )
    .unwrap()
}

#[tokio::test]
async fn a_listing_reads_every_status_in_capped_concurrent_windows() {
    let sim = sim(333).await;
    let listed = list(&connector(&sim.base_url(), &sim)).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete, "{:?}", report.failures);
    let got: BTreeSet<String> = listed
        .records()
        .iter()
        .map(|r| r.address.stable_id().to_owned())
        .collect();
    let want: BTreeSet<String> = sim.projects().into_iter().map(|p| p.id).collect();
    assert_eq!(got, want);
    assert_eq!(got.len(), 333);
    // 100 asked, 50 served: 7 pages, none read twice.
    assert_eq!(report.figures.pages, 7);
    assert!(listed.records().iter().any(|r| r.state.trashed));
    assert!(listed.records().iter().any(|r| r.state.archived));
    assert!(
        listed
            .records()
            .iter()
            .all(|r| r.address.tenant() == sim.cloud_id())
    );
}

#[tokio::test]
async fn the_gateway_base_url_works_with_the_same_basic_auth() {
    let sim = sim(60).await;
    let listed = list(&connector(&sim.gateway_url(), &sim)).await;
    assert!(listed.result.as_ref().unwrap().complete);
    assert_eq!(listed.records().len(), 60);
}

#[tokio::test]
async fn old_keys_stay_aliases_after_a_key_change() {
    let sim = sim(3).await;
    let p = sim.projects()[0].clone();
    sim.change_project_key(&p.id, "PAY");
    let listed = list(&connector(&sim.base_url(), &sim)).await;
    let rec = listed
        .records()
        .into_iter()
        .find(|r| r.address.stable_id() == p.id)
        .unwrap()
        .clone();
    let keys: BTreeSet<&str> = rec
        .aliases
        .iter()
        .filter(|a| a.kind == AliasKind::Key)
        .map(|a| a.value.as_str())
        .collect();
    assert_eq!(keys, BTreeSet::from(["pay", "key1"]));
}

#[tokio::test]
async fn faults_with_retry_after_still_end_complete() {
    let sim = sim(200).await;
    sim.set_faults(Faults {
        server_error: 0.1,
        rate_limited_429: 0.05,
        drop_connection: 0.05,
        retry_after_secs: 0,
        ..Faults::default()
    });
    let listed = list(&connector(&sim.base_url(), &sim)).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete, "{:?}", report.failures);
    assert_eq!(listed.records().len(), 200);
}

#[tokio::test]
async fn a_failing_window_makes_the_listing_incomplete() {
    let sim = sim(200).await;
    sim.set_faults(Faults {
        failing_pages: [3].into(),
        ..Faults::default()
    });
    let report = list(&connector(&sim.base_url(), &sim))
        .await
        .result
        .unwrap();
    assert!(!report.complete);
}

#[tokio::test]
async fn wrong_credentials_are_unauthorized() {
    let sim = sim(1).await;
    let c = JiraConnector::new(
        &sim.base_url(),
        &sim.site(),
        Token::new("basic:me@acme.com:wrong"),
        fast_cfg(),
    )
    .unwrap();
    assert!(matches!(
        list(&c).await.result,
        Err(ConnectorError::Unauthorized { .. })
    ));
}

#[tokio::test]
async fn read_by_id_is_found_then_gone() {
    let sim = sim(3).await;
    let c = connector(&sim.base_url(), &sim);
    let p = sim.projects()[1].clone();
    let a = SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), &p.id).unwrap();
    assert!(matches!(c.read(&a).await.unwrap(), ReadOutcome::Found(r) if r.display_name == p.name));
    sim.delete_project(&p.id);
    assert_eq!(c.read(&a).await.unwrap(), ReadOutcome::Gone);
}
