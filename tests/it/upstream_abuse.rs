//! No allocation or request count sized by a number an upstream sends.
//! Simulators that lie (Jira's `total` of five billion, GitHub's
//! `rel="last"` of four billion pages, a `next` chain without end, a body
//! without end) make a run partial with a clear error, quickly, and the
//! process lives on. On SQLite and PostgreSQL.

use cmcp_connectors::HttpConfig;
use cmcp_domain::RunTrigger;
use cmcp_fixtures::{GithubSimConfig, ListingAbuse};
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, Harness, fast_http};
use cmcp_worker::{SyncOutcome, run_sync};

use crate::listing_integrity::{JIRA, assert_every_project_registered, jira, partial};

both_backends!(
    jira_total_of_five_billion_is_capped_and_partial,
    github_last_of_four_billion_pages_is_capped_and_partial,
    github_endless_next_chain_stops_at_the_cap,
    github_endless_body_is_cut_at_the_response_limit,
);

pub async fn jira_total_of_five_billion_is_capped_and_partial(db: TestDb) {
    let (sim, ctx) = jira(&db, 30, fast_http()).await;
    sim.set_total_skew(5_000_000_000);
    let why = partial(&ctx, JIRA).await;
    assert!(why.contains("above the sanity cap of 100000"), "{why}");
    assert_every_project_registered(&db.store, &sim).await;
}

async fn github(db: TestDb, http: HttpConfig, abuse: ListingAbuse) -> (Harness, String) {
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 5,
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    h.sim.set_listing_abuse(abuse);
    let why = match run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .expect("the run ends, and the process with it does not")
    {
        SyncOutcome::Partial { figures, why, .. } => {
            assert_eq!(figures.missing, 0, "nothing is marked missing");
            why
        }
        SyncOutcome::Failed { why, .. } => why,
        other => panic!("a lying listing is never complete: {other:?}"),
    };
    (h, why)
}

pub async fn github_last_of_four_billion_pages_is_capped_and_partial(db: TestDb) {
    let (h, why) = github(db, fast_http(), ListingAbuse::ClaimedLast(4_000_000_000)).await;
    assert!(why.contains("claims 4000000000 pages"), "{why}");
    assert!(why.contains("sanity cap of 1000"), "{why}");
    assert!(h.sim.stats().requests < 10, "no page past page 1 was read");
}

pub async fn github_endless_next_chain_stops_at_the_cap(db: TestDb) {
    let (h, why) = github(db, fast_http(), ListingAbuse::EndlessNext).await;
    assert!(
        why.contains("next chain goes past the sanity cap of 1000"),
        "{why}"
    );
    assert!(h.sim.stats().requests <= 1010);
}

pub async fn github_endless_body_is_cut_at_the_response_limit(db: TestDb) {
    let http = HttpConfig {
        max_response_bytes: 1 << 20,
        ..fast_http()
    };
    let (_h, why) = github(db, http, ListingAbuse::EndlessBody).await;
    assert!(why.contains("larger than 1048576 bytes"), "{why}");
}
