//! Two workers (separate store pools, as two processes would have) syncing
//! two Bitbucket connections that share one user API token draw on one
//! shared budget, and together never send a request the platform would
//! refuse, although Bitbucket reports no budget at all (a bare 429).

use std::time::Duration;

use cmcp_domain::{Owner, RunFigures, RunOutcome};
use cmcp_fixtures::{BitbucketSimConfig, RateLimitConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{NewConnection, Store, StoreOptions};
use cmcp_tests::{ATLASSIAN_SECRET, atlassian_token, bitbucket, bitbucket_spec};
use cmcp_tests::{cipher, fast_http, sync_context};
use cmcp_worker::{SyncContext, SyncOutcome, run_sync};

both_backends!(two_workers_sharing_a_bitbucket_token_never_exceed_its_allowance);

const FIRST: &str = "bitbucket-acme";
const SECOND: &str = "bitbucket-acme-mirror";
/// Requests per window, on the simulator and in the connector's config.
const LIMIT: u32 = 48;
const WINDOW: Duration = Duration::from_secs(2);
const REPOS: usize = 500;
const PROJECTS: usize = 5;

fn finished(r: SyncOutcome) -> (RunOutcome, RunFigures, Option<String>) {
    match r {
        SyncOutcome::Deferred { holder, .. } => panic!("deferred by {holder}"),
        done => (
            done.run_outcome().expect("a run"),
            done.figures().cloned().unwrap_or_default(),
            done.error().map(str::to_owned),
        ),
    }
}

pub async fn two_workers_sharing_a_bitbucket_token_never_exceed_its_allowance(db: TestDb) {
    let cfg = BitbucketSimConfig {
        repos: REPOS,
        projects: PROJECTS,
        ..Default::default()
    };
    let (sim, _) = bitbucket(&db, FIRST, cfg).await;
    db.store
        .create_connection(
            &cipher(),
            NewConnection {
                id: SECOND.to_owned(),
                spec: bitbucket_spec(&sim),
                owner: Owner::Person("alice".into()),
                token: atlassian_token(),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .expect("second connection");
    let http = cmcp_connectors::HttpConfig {
        per_page: 20,
        budget_reserve: 0,
        bitbucket_hourly_limit: LIMIT,
        bitbucket_limit_window: WINDOW,
        ..fast_http()
    };
    let ctx = sync_context(&db.store, http);
    // The first connection's spaces exist; the second connection is a
    // person's, so its syncs read everything and write none of them (the
    // two never race on the same rows). The seed, before the simulator
    // limits anything, may spend far more.
    let seed = sync_context(
        &db.store,
        cmcp_connectors::HttpConfig {
            bitbucket_hourly_limit: LIMIT * 100,
            ..ctx.http.clone()
        },
    );
    let (outcome, _, error) = finished(
        run_sync(&seed, FIRST, cmcp_domain::RunTrigger::Test)
            .await
            .expect("seed"),
    );
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    sim.set_rate_limit(Some(RateLimitConfig {
        limit: LIMIT,
        window: WINDOW,
    }));
    let before = sim.stats();

    // A second "process": its own pool on the same database.
    let other = SyncContext {
        store: Store::connect(&db.url, &StoreOptions::default())
            .await
            .expect("second pool"),
        holder: "worker-2".into(),
        ..ctx.clone()
    };
    let (a, b) = tokio::join!(
        run_sync(&ctx, FIRST, cmcp_domain::RunTrigger::Test),
        run_sync(&other, SECOND, cmcp_domain::RunTrigger::Test)
    );
    let (a_outcome, a_figures, a_error) = finished(a.expect("first sync"));
    let (b_outcome, b_figures, b_error) = finished(b.expect("second sync"));
    assert_eq!(a_outcome, RunOutcome::Complete, "{a_error:?}");
    assert_eq!(b_outcome, RunOutcome::Complete, "{b_error:?}");
    let spaces = (1 + PROJECTS + REPOS) as u64;
    assert_eq!(a_figures.items_seen, spaces);
    assert_eq!(b_figures.items_seen, spaces);

    assert_eq!(a_figures.unchanged, spaces);

    let stats = sim.stats();
    // Not one request was refused: the shared budget held both back.
    assert_eq!(stats.over_budget, 0, "{before:?} {stats:?}");
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    // Together they needed more than one window: the budget really bound.
    assert!(
        stats.requests - before.requests > u64::from(LIMIT),
        "{before:?} then {stats:?}"
    );
    // Both connections show the one budget they share, named without the
    // token.
    let budgets = db.store.connection_budgets().await.unwrap();
    assert_eq!(budgets.len(), 2, "{budgets:?}");
    assert_eq!(budgets[0].1.budget_key, budgets[1].1.budget_key);
    assert!(budgets[0].1.budget_key.starts_with("bitbucket:"));
    assert!(budgets[0].1.budget_key.ends_with(":repository"));
    assert!(!budgets[0].1.budget_key.contains(ATLASSIAN_SECRET));
    // The allowance Bitbucket never reported reached the shared budget as
    // a slice's share of the configured limit.
    assert_eq!(
        budgets[0].1.request_limit,
        Some(i64::from(cmcp_connectors::bitbucket::budget::slice_quota(
            LIMIT
        )))
    );
    sim.shutdown().await;
}
