//! Direct reads by stable id.

use cmcp_connectors::{Connector, ConnectorError, ReadOutcome};
use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_fixtures::GithubSimConfig;

use super::{assert_same, connector, expected, sim};
use crate::support::fast_cfg;

fn repo_address(host: &str, id: u64) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubRepo, host, &id.to_string()).unwrap()
}

#[tokio::test]
async fn read_finds_a_repo_and_reports_gone_after_delete() {
    let sim = sim(GithubSimConfig {
        repos: 10,
        ..GithubSimConfig::default()
    })
    .await;
    let c = connector(&sim, fast_cfg());
    let snap = sim.repos()[3].clone();
    let address = repo_address(&sim.web_host(), snap.id);
    match c.read(&address).await.unwrap() {
        ReadOutcome::Found(r) => assert_same(&r, &expected(&snap, &sim.web_host())),
        ReadOutcome::Gone => panic!("gone"),
    }
    sim.delete_repo(snap.id);
    assert_eq!(c.read(&address).await.unwrap(), ReadOutcome::Gone);
}

#[tokio::test]
async fn rename_keeps_space_id() {
    let sim = sim(GithubSimConfig {
        repos: 2,
        ..GithubSimConfig::default()
    })
    .await;
    let c = connector(&sim, fast_cfg());
    let id = sim.repos()[0].id;
    sim.rename_repo(id, "brand-new-name");
    let ReadOutcome::Found(r) = c.read(&repo_address(&sim.web_host(), id)).await.unwrap() else {
        panic!("gone")
    };
    assert_eq!(r.address, repo_address(&sim.web_host(), id));
    assert!(
        r.aliases
            .iter()
            .any(|a| a.kind == AliasKind::Name && a.value == "brand-new-name")
    );
}

#[tokio::test]
async fn ghes_reads_use_the_web_host_tenant() {
    let sim = sim(GithubSimConfig {
        repos: 2,
        path_prefix: "/api/v3".into(),
        web_host: Some("ghe.example.com".into()),
        ..GithubSimConfig::default()
    })
    .await;
    let c = connector(&sim, fast_cfg());
    let snap = sim.repos()[1].clone();
    let got = c
        .read(&repo_address("ghe.example.com", snap.id))
        .await
        .unwrap();
    match got {
        ReadOutcome::Found(r) => assert_same(&r, &expected(&snap, "ghe.example.com")),
        ReadOutcome::Gone => panic!("gone"),
    }
}

#[tokio::test]
async fn addresses_of_another_host_or_kind_are_refused() {
    let sim = sim(GithubSimConfig {
        repos: 2,
        ..GithubSimConfig::default()
    })
    .await;
    let c = connector(&sim, fast_cfg());
    let id = sim.repos()[0].id;
    for address in [
        repo_address("ghe.other.example", id),
        SpaceAddress::new(
            SpaceKind::GithubOrg,
            &sim.web_host(),
            &sim.org_id().to_string(),
        )
        .unwrap(),
        SpaceAddress::new(SpaceKind::GithubRepo, &sim.web_host(), "not-a-number").unwrap(),
    ] {
        let e = c.read(&address).await.unwrap_err();
        assert!(
            matches!(e, ConnectorError::UnsupportedAddress { .. }),
            "{address}: {e}"
        );
    }
}
