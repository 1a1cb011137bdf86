//! Two workers (separate store pools, as two processes would have) syncing
//! two connections that share one token draw on one rate budget and
//! together never exceed what the platform grants.

use std::time::Duration;

use cmcp_domain::{Owner, RunOutcome};
use cmcp_fixtures::{GithubSimConfig, RateLimitConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Store, StoreOptions};
use cmcp_tests::{CONNECTION, Harness, add_connection, fast_http};
use cmcp_worker::{SyncContext, SyncOutcome, run_sync};

const SECOND: &str = "github-acme-mirror";
const LIMIT: u32 = 12;

fn finished(r: SyncOutcome) -> (RunOutcome, cmcp_domain::RunFigures, Option<String>) {
    match r {
        SyncOutcome::Deferred { holder, .. } => panic!("deferred by {holder}"),
        done => (
            done.run_outcome().expect("a run"),
            done.figures().cloned().unwrap_or_default(),
            done.error().map(str::to_owned),
        ),
    }
}

pub async fn two_workers_sharing_a_token_never_exceed_the_budget(db: TestDb) {
    let http = cmcp_connectors::HttpConfig {
        per_page: 20,
        ..fast_http()
    };
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 300,
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    // The first connection's spaces exist; the second connection is a
    // person's, so its syncs read everything and write none of them (the
    // two never race on the same rows).
    let (outcome, _, error) = finished(
        run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
            .await
            .expect("seed"),
    );
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    add_connection(
        h.store(),
        SECOND,
        &h.sim.base_url(),
        Owner::Person("alice".into()),
    )
    .await;
    // No page is cached any more: both syncs spend budget on every page.
    h.store().forget_cached_pages(CONNECTION).await.unwrap();
    h.sim.set_rate_limit(Some(RateLimitConfig {
        limit: LIMIT,
        window: Duration::from_secs(1),
    }));
    h.sim.reset_stats();

    // A second "process": its own pool on the same database.
    let other_store = Store::connect(&h.db.url, &StoreOptions::default())
        .await
        .expect("second pool");
    let other = SyncContext {
        store: other_store,
        holder: "worker-2".into(),
        ..h.ctx.clone()
    };
    let (a, b) = tokio::join!(
        run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test),
        run_sync(&other, SECOND, cmcp_domain::RunTrigger::Test)
    );
    let (a_outcome, a_figures, a_error) = finished(a.expect("first sync"));
    let (b_outcome, b_figures, b_error) = finished(b.expect("second sync"));
    assert_eq!(a_outcome, RunOutcome::Complete, "{a_error:?}");
    assert_eq!(b_outcome, RunOutcome::Complete, "{b_error:?}");
    assert_eq!(a_figures.items_seen, 301);
    assert_eq!(b_figures.items_seen, 301);
    assert_eq!(a_figures.unchanged, 301);

    let stats = h.sim.stats();
    assert_eq!(stats.over_budget, 0, "{stats:?}");
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    // Together they needed more than one window: the budget really bound.
    assert!(stats.requests > u64::from(LIMIT) * 2, "{stats:?}");
    // Both connections show the one budget they share.
    let budgets = h.store().connection_budgets().await.unwrap();
    assert_eq!(budgets.len(), 2, "{budgets:?}");
    assert_eq!(budgets[0].1.budget_key, budgets[1].1.budget_key);
    assert!(!budgets[0].1.budget_key.contains(cmcp_tests::TOKEN));
}

both_backends!(two_workers_sharing_a_token_never_exceed_the_budget);
