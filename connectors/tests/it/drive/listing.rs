//! Full listings: exact results, pagination traps, faults, auth and scopes.

use std::collections::BTreeSet;

use cmcp_connectors::ConnectorError;
use cmcp_fixtures::{DriveSimConfig, Faults};

use super::{connector, connector_with, expected, row, settings, start};
use crate::support::list;

fn small_pages() -> DriveSimConfig {
    DriveSimConfig {
        drives: 5,
        folders_per_level: 3,
        depth: 3,
        max_drives_page: 2,
        max_files_page: 7,
        ..DriveSimConfig::default()
    }
}

#[tokio::test]
async fn full_listing_gives_every_drive_and_folder_within_depth_with_paths_and_containers() {
    let sim = start(small_pages()).await;
    let listed = list(&connector(&sim, 2)).await;
    let report = listed.result.as_ref().expect("listing").clone();
    assert!(report.complete, "{:?}", report.failures);
    assert!(report.risks.is_empty());
    let got: BTreeSet<_> = listed.records().into_iter().map(row).collect();
    let want = expected(&sim, 2);
    // 5 drives, 3 + 9 folders each within depth 2 (depth 3 exists upstream).
    assert_eq!(want.len(), 5 + 5 * 12);
    assert_eq!(got, want);
    // Containers arrive before their children.
    let mut seen = BTreeSet::new();
    for r in listed.records() {
        if let Some(c) = &r.container {
            assert!(seen.contains(c), "{} before its container {c}", r.address);
        }
        seen.insert(r.address.clone());
    }
    // Ids keep their case.
    assert!(
        got.iter()
            .any(|r| r.0.chars().any(|c| c.is_ascii_uppercase()))
    );
    let deeper = list(&connector(&sim, 3)).await;
    assert_eq!(deeper.records().len(), 5 + 5 * (3 + 9 + 27));
}

#[tokio::test]
async fn an_empty_page_with_a_next_token_does_not_end_the_listing() {
    let sim = start(DriveSimConfig {
        empty_page_rate: 0.6,
        ..small_pages()
    })
    .await;
    let listed = list(&connector(&sim, 3)).await;
    let report = listed.result.as_ref().expect("listing").clone();
    assert!(report.complete);
    let got: BTreeSet<_> = listed.records().into_iter().map(row).collect();
    assert_eq!(got, expected(&sim, 3));
    // Empty pages were served (more pages than the content needs).
    let content_pages = 3 + 5 * (39_u64).div_ceil(7);
    assert!(report.figures.pages > content_pages, "{:?}", report.figures);
}

#[tokio::test]
async fn ten_percent_faults_including_403_user_rate_limits_still_list_everything() {
    let sim = start(DriveSimConfig {
        faults: Faults {
            server_error: 0.03,
            rate_limited_429: 0.02,
            secondary_403: 0.03,
            drop_connection: 0.01,
            truncated_body: 0.01,
            ..Faults::default()
        },
        seed: 7,
        ..small_pages()
    })
    .await;
    let listed = list(&connector(&sim, 3)).await;
    let report = listed.result.as_ref().expect("listing").clone();
    assert!(report.complete, "{:?}", report.failures);
    let got: BTreeSet<_> = listed.records().into_iter().map(row).collect();
    assert_eq!(got, expected(&sim, 3));
    let stats = sim.stats();
    assert!(stats.rate_limited > 0, "{stats:?}");
    assert!(report.figures.retries > 0);
}

#[tokio::test]
async fn a_page_failing_after_retries_makes_the_listing_incomplete() {
    let sim = start(DriveSimConfig {
        faults: Faults {
            failing_pages: [2].into_iter().collect(),
            ..Faults::default()
        },
        ..small_pages()
    })
    .await;
    let listed = list(&connector(&sim, 3)).await;
    let report = listed.result.as_ref().expect("listing").clone();
    assert!(!report.complete);
    assert!(
        report.failures.iter().any(|f| f.contains("folders page 2")),
        "{:?}",
        report.failures
    );
    // Drives are all there; folders of page 1 of each drive were placed.
    assert!(listed.records().len() < expected(&sim, 3).len());
}

#[tokio::test]
async fn a_delegation_that_can_write_is_reported_as_a_write_scope_risk() {
    let sim = start(small_pages()).await;
    sim.set_granted_scopes(Some(
        "https://www.googleapis.com/auth/drive.readonly https://www.googleapis.com/auth/drive"
            .into(),
    ));
    let report = list(&connector(&sim, 1)).await.result.expect("listing");
    assert_eq!(report.risks.len(), 1);
    assert_eq!(report.risks[0].code, "write-scope");
    assert!(
        report.risks[0]
            .message
            .contains("https://www.googleapis.com/auth/drive")
    );
}

#[tokio::test]
async fn impersonating_someone_the_delegation_does_not_cover_is_unauthorized() {
    let sim = start(small_pages()).await;
    let mut s = settings(&sim, 2);
    s.subject = "intruder@example.com".into();
    match list(&connector_with(&sim, s)).await.result {
        Err(ConnectorError::Unauthorized { detail, .. }) => {
            assert!(detail.contains("unauthorized_client"), "{detail}");
            assert!(!detail.contains("PRIVATE KEY"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_revoked_access_token_is_replaced_by_a_fresh_one() {
    let sim = start(small_pages()).await;
    let c = connector(&sim, 1);
    assert!(list(&c).await.result.expect("first").complete);
    sim.revoke_tokens();
    let listed = list(&c).await;
    assert!(listed.result.as_ref().expect("second").complete);
    let got: BTreeSet<_> = listed.records().into_iter().map(row).collect();
    assert_eq!(got, expected(&sim, 1));
    assert!(sim.stats().unauthorized >= 1);
}

#[tokio::test]
async fn an_access_token_near_its_end_is_refreshed_before_use() {
    // Tokens live 60 s, inside the 5-minute refresh margin: every request
    // asks for a fresh one instead of risking an expired one.
    let sim = start(DriveSimConfig {
        token_lifetime: std::time::Duration::from_secs(60),
        ..small_pages()
    })
    .await;
    let listed = list(&connector(&sim, 1)).await;
    assert!(listed.result.as_ref().expect("listing").complete);
    let stats = sim.stats();
    let grants = stats.by_path.get("/token").copied().unwrap_or(0);
    let api = stats.by_path.get("/drive/v3/files").copied().unwrap_or(0);
    assert!(grants > api, "{stats:?}");
    assert_eq!(stats.unauthorized, 0);

    // Long-lived tokens are reused.
    let sim = start(small_pages()).await;
    assert!(
        list(&connector(&sim, 1))
            .await
            .result
            .expect("listing")
            .complete
    );
    assert_eq!(sim.stats().by_path.get("/token").copied(), Some(1));
}
