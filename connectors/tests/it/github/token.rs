//! The credential: rejected tokens, classic-token scope risks, redaction.

use cmcp_connectors::{Connector, ConnectorError, GithubConnector};
use cmcp_domain::Token;
use cmcp_fixtures::GithubSimConfig;
use tokio::sync::mpsc;

use super::{TOKEN, connector, sim};
use crate::support::{fast_cfg, list};

async fn risks_for(scopes: Option<&str>) -> Vec<cmcp_domain::RiskNotice> {
    let sim = sim(GithubSimConfig {
        repos: 3,
        oauth_scopes: scopes.map(str::to_owned),
        ..GithubSimConfig::default()
    })
    .await;
    let listed = list(&connector(&sim, fast_cfg())).await;
    let report = listed.result.expect("listing");
    assert!(report.complete);
    report.risks
}

#[tokio::test]
async fn classic_repo_scope_is_reported_as_a_write_risk() {
    let risks = risks_for(Some("repo, read:org")).await;
    assert_eq!(risks.len(), 1, "{risks:?}");
    assert_eq!(risks[0].code, "write-scope");
    assert!(
        risks[0].message.contains("scopes: repo)"),
        "{}",
        risks[0].message
    );
    assert!(
        risks[0].message.contains("fine-grained"),
        "{}",
        risks[0].message
    );
}

#[tokio::test]
async fn read_only_or_fine_grained_tokens_raise_no_risk() {
    assert!(risks_for(Some("read:org")).await.is_empty());
    assert!(risks_for(None).await.is_empty());
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized_and_not_retried() {
    let sim = sim(GithubSimConfig {
        repos: 3,
        ..GithubSimConfig::default()
    })
    .await;
    let c = GithubConnector::new(
        &sim.base_url(),
        &sim.org(),
        Token::new("ghp_wrong"),
        fast_cfg(),
    )
    .unwrap();
    let listed = list(&c).await;
    match &listed.result {
        Err(e @ ConnectorError::Unauthorized { detail, .. }) => {
            assert_eq!(detail, "Bad credentials");
            assert!(!e.is_retryable());
            assert!(!e.to_string().contains("ghp_wrong"));
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(listed.batches.is_empty());
    assert_eq!(sim.stats().requests, 1);
    assert_eq!(sim.stats().unauthorized, 1);
}

#[tokio::test]
async fn an_unknown_org_is_not_found() {
    let sim = sim(GithubSimConfig::default()).await;
    let c = GithubConnector::new(&sim.base_url(), "nope", Token::new(TOKEN), fast_cfg()).unwrap();
    match list(&c).await.result {
        Err(ConnectorError::NotFound { what, .. }) => assert!(what.contains("nope"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn the_token_is_never_printed() {
    let sim = sim(GithubSimConfig::default()).await;
    let c = connector(&sim, fast_cfg());
    let debug = format!("{c:?}");
    assert!(!debug.contains(TOKEN), "{debug}");
    assert!(!debug.contains("simulated_token"), "{debug}");
}

#[tokio::test]
async fn a_closed_sink_stops_the_listing() {
    let sim = sim(GithubSimConfig {
        repos: 300,
        ..GithubSimConfig::default()
    })
    .await;
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let result = connector(&sim, fast_cfg()).list(tx).await;
    assert!(
        matches!(result, Err(ConnectorError::SinkClosed { .. })),
        "{result:?}"
    );
    assert_eq!(sim.stats().requests, 1, "nothing more is read for nobody");
}
