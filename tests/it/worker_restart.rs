//! A queue worker whose poll fails (no database connection free in time)
//! is started again: the fleet bench found both queue workers of a process
//! stopped for good by one `PoolTimedOut` under load, while the process
//! went on looking healthy. And a run whose work stops on a store error
//! ends failed with that error, not left running for the next holder to
//! close as "abandoned". On SQLite and PostgreSQL.

use std::time::Duration;

use cmcp_domain::{RunOutcome, RunTrigger};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Store, StoreOptions};
use cmcp_tests::{
    CONNECTION, Harness, eventually_within, exec, fast_http, start_worker, sync_context,
};
use cmcp_worker::{Queue, QueueConfig, SyncConnection};

both_backends!(
    a_worker_whose_poll_timed_out_goes_on_taking_jobs,
    a_run_stopped_by_a_store_error_ends_failed_with_it,
);

/// A harness over an upstream of five repositories.
async fn five_repos(db: TestDb) -> Harness {
    Harness::start(
        db,
        GithubSimConfig {
            repos: 5,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await
}

pub async fn a_run_stopped_by_a_store_error_ends_failed_with_it(db: TestDb) {
    let h = five_repos(db).await;
    // Every write of the listing's records fails inside the store.
    exec(h.store(), "ALTER TABLE aliases RENAME TO aliases_gone").await;
    let result = cmcp_worker::run_sync(&h.ctx, CONNECTION, RunTrigger::Test).await;
    exec(h.store(), "ALTER TABLE aliases_gone RENAME TO aliases").await;
    let runs = h.store().list_runs(Some(CONNECTION), 5).await.unwrap();
    let run = runs.first().expect("a run was recorded");
    match &result {
        Err(e) => {
            assert_eq!(run.outcome, RunOutcome::Failed, "{run:?}");
            assert_eq!(
                run.error.as_deref(),
                Some(e.to_string().as_str()),
                "{run:?}"
            );
        }
        // A store error the run could record itself is as good.
        Ok(done) => assert_eq!(done.run_outcome(), Some(RunOutcome::Failed), "{done:?}"),
    }
    assert!(run.finished_at.is_some(), "{run:?}");
    // The next run is not told to close an abandoned one, and completes.
    let next = cmcp_worker::run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert_eq!(next.run_outcome(), Some(RunOutcome::Complete), "{next:?}");
}

pub async fn a_worker_whose_poll_timed_out_goes_on_taking_jobs(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = five_repos(db).await;
    // The worker's own small pool, which the test can take whole.
    let small = StoreOptions {
        max_connections: 2,
        connect_timeout: Duration::from_secs(1),
        ..StoreOptions::default()
    };
    let store = Store::connect(&h.db.url, &small).await.unwrap();
    let worker = start_worker(&store, &sync_context(&store, fast_http()));
    // Longer than an acquire may wait (SQLite's pool waits at least 10 s),
    // while the worker polls every 50 ms.
    let hold = match &store {
        Store::Sqlite(_) => Duration::from_secs(12),
        Store::Postgres(_) => Duration::from_secs(3),
    };
    macro_rules! starve {
        ($pool:expr) => {{
            let mut held = Vec::new();
            for _ in 0..2 {
                held.push($pool.acquire().await.unwrap());
            }
            tokio::time::sleep(hold).await;
            drop(held);
        }};
    }
    match &store {
        Store::Sqlite(pool) => starve!(pool),
        Store::Postgres(pool) => starve!(pool),
    }
    Queue::new(h.store(), &QueueConfig::default())
        .push(
            SyncConnection::new(CONNECTION, RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();
    eventually_within(
        "the worker to run the job queued after its poll failed",
        Duration::from_secs(60),
        || async {
            let runs = h.store().list_runs(Some(CONNECTION), 5).await.unwrap();
            runs.iter()
                .any(|r| r.outcome == RunOutcome::Complete)
                .then_some(())
        },
    )
    .await;
    worker.stop().await;
}
