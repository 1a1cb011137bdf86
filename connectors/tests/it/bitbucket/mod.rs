//! The Bitbucket connector against the simulated workspace.

use std::collections::BTreeSet;

use cmcp_connectors::{BitbucketConnector, Connector, ConnectorError, ReadOutcome};
use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind, Token};
use cmcp_fixtures::{BitbucketSim, BitbucketSimConfig, Faults};

use crate::support::{fast_cfg, list};

const TOKEN: &str = "bbat_secret_token";

async fn sim(repos: usize, email: Option<&str>) -> BitbucketSim {
    BitbucketSim::start(BitbucketSimConfig {
        repos,
        projects: 4,
        token: Some(TOKEN.into()),
        email: email.map(str::to_owned),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn connector(sim: &BitbucketSim, token: &str) -> BitbucketConnector {
    BitbucketConnector::new(
        &sim.base_url(),
        &sim.workspace(),
        Token::new(token),
        fast_cfg(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_listing_gives_the_workspace_every_project_and_every_repo_containers_first() {
    let sim = sim(250, None).await;
    let c = connector(&sim, &format!("bearer:{TOKEN}"));
    let listed = list(&c).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete, "{:?}", report.failures);
    let records = listed.records();
    assert_eq!(records.len(), 1 + 4 + 250);
    assert_eq!(records[0].address.kind(), SpaceKind::BitbucketWorkspace);
    let ws = sim.workspace_uuid();
    let repos: BTreeSet<String> = records
        .iter()
        .filter(|r| r.address.kind() == SpaceKind::BitbucketRepo)
        .map(|r| r.address.stable_id().to_owned())
        .collect();
    let want: BTreeSet<String> = sim.repos().into_iter().map(|r| r.uuid).collect();
    assert_eq!(repos, want);
    let first = &sim.repos()[0];
    let rec = records
        .iter()
        .find(|r| r.address.stable_id() == first.uuid)
        .unwrap();
    assert_eq!(rec.address.tenant(), ws);
    assert_eq!(
        rec.container,
        Some(SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &first.project_uuid).unwrap())
    );
    assert!(
        rec.aliases
            .iter()
            .any(|a| a.kind == AliasKind::Slug && a.value == first.slug)
    );
    // pagelen 100: 3 repo pages, 1 project page.
    assert_eq!(report.figures.pages, 4);
}

#[tokio::test]
async fn an_api_token_goes_as_basic_with_the_email() {
    let sim = sim(3, Some("me@acme.com")).await;
    let ok = list(&connector(&sim, &format!("basic:me@acme.com:{TOKEN}"))).await;
    assert!(ok.result.unwrap().complete);
    let bad = list(&connector(&sim, &format!("bearer:{TOKEN}"))).await;
    assert!(matches!(
        bad.result,
        Err(ConnectorError::Unauthorized { .. })
    ));
}

#[tokio::test]
async fn an_app_password_is_refused_before_any_request() {
    let e = BitbucketConnector::new(
        "http://127.0.0.1:1",
        "acme",
        Token::new("basic:jdoe:pw"),
        fast_cfg(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("July 28, 2026"), "{e}");
}

#[tokio::test]
async fn bare_429s_and_server_errors_are_retried_to_a_complete_listing() {
    let sim = sim(300, None).await;
    sim.set_faults(Faults {
        server_error: 0.1,
        rate_limited_429: 0.1,
        drop_connection: 0.05,
        truncated_body: 0.05,
        ..Faults::default()
    });
    let listed = list(&connector(&sim, &format!("bearer:{TOKEN}"))).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete, "{:?}", report.failures);
    assert!(report.figures.retries > 0);
    assert_eq!(listed.records().len(), 1 + 4 + 300);
}

#[tokio::test]
async fn a_failing_page_makes_the_listing_incomplete() {
    let sim = sim(250, None).await;
    sim.set_faults(Faults {
        failing_pages: [2].into(),
        ..Faults::default()
    });
    let listed = list(&connector(&sim, &format!("bearer:{TOKEN}"))).await;
    let report = listed.result.as_ref().unwrap();
    assert!(!report.complete);
    assert_eq!(report.failures.len(), 1);
}

#[tokio::test]
async fn write_scopes_are_reported_as_a_risk() {
    let sim = BitbucketSim::start(BitbucketSimConfig {
        oauth_scopes: Some("repository:write".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let report = list(&connector(&sim, "bearer:x")).await.result.unwrap();
    assert_eq!(report.risks.len(), 1);
    assert_eq!(report.risks[0].code, "write-scope");
}

#[tokio::test]
async fn read_by_uuid_finds_repos_and_projects_and_gone_after_delete() {
    let sim = sim(5, None).await;
    let c = connector(&sim, &format!("bearer:{TOKEN}"));
    let ws = sim.workspace_uuid();
    let repo = sim.repos()[1].clone();
    // An upper-case spelling of the uuid is the same space.
    let address = SpaceAddress::new(
        SpaceKind::BitbucketRepo,
        &ws,
        &format!("{{{}}}", repo.uuid.to_uppercase()),
    )
    .unwrap();
    match c.read(&address).await.unwrap() {
        ReadOutcome::Found(r) => assert_eq!(r.display_name, repo.full_name),
        ReadOutcome::Gone => panic!("gone"),
    }
    let project = sim.projects()[2].clone();
    sim.change_project_key(&project.uuid, "NEWKEY");
    let paddr = SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &project.uuid).unwrap();
    match c.read(&paddr).await.unwrap() {
        ReadOutcome::Found(r) => assert!(
            r.aliases
                .iter()
                .any(|a| a.kind == AliasKind::Key && a.value == "newkey")
        ),
        ReadOutcome::Gone => panic!("gone"),
    }
    sim.delete_repo(&repo.uuid);
    assert_eq!(c.read(&address).await.unwrap(), ReadOutcome::Gone);
}
