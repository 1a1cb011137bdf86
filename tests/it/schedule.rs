//! Schedules as jobs: two schedulers (two processes of a fleet) on one
//! store claim an every-minute schedule for three minutes, and exactly one
//! reconcile per connection per tick is queued and run. The schedulers'
//! clock is driven by the test, so three minutes take a second; the store,
//! the queue and the worker are the real ones. On SQLite and PostgreSQL.

use std::time::Duration;

use cmcp_domain::{Owner, RunTrigger};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, Harness, add_connection, eventually_within, fast_http, start_worker};
use cmcp_worker::{ReconcileConfig, Scheduler};

const SECOND: &str = "github-acme-second";

pub async fn two_schedulers_queue_one_reconcile_per_connection_per_tick(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 3,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    add_connection(h.store(), SECOND, &h.sim.base_url(), Owner::Company).await;
    let cfg = ReconcileConfig {
        schedule: "* * * * *".to_owned(),
        spread: Duration::ZERO,
        // Not in the three minutes below (the test runs in December).
        prune_schedule: "0 0 1 1 *".to_owned(),
        check_every: Duration::ZERO,
    };
    // Three minutes that have just passed, starting a second after a
    // minute: ticks at +59 s, +119 s and +179 s.
    let now = chrono::Utc::now().timestamp_millis();
    let start = (now / 60_000 - 4) * 60_000 + 1_000;
    let scheduler = |holder: &str| {
        let mut ctx = h.ctx.clone();
        ctx.holder = holder.to_owned();
        Scheduler::new(ctx, &cfg, Duration::from_secs(30 * 86_400), 3, start).unwrap()
    };
    let (mut a, mut b) = (scheduler("process-a"), scheduler("process-b"));
    let mut queued = 0;
    // Both look every 5 s of the simulated clock, b a little later than a,
    // concurrently on the one store.
    for step in 1..=36 {
        let t = start + step * 5_000;
        let (qa, qb) = tokio::join!(a.claim_due(t), b.claim_due(t + 700));
        queued += qa.unwrap() + qb.unwrap();
    }
    let ticks: Vec<i64> = (1..=3).map(|m| start - 1_000 + m * 60_000).collect();
    let mut expected: Vec<(String, i64)> = ticks
        .iter()
        .flat_map(|t| [(CONNECTION.to_owned(), *t), (SECOND.to_owned(), *t)])
        .collect();
    expected.sort_by_key(|(c, t)| (*t, c.clone()));
    assert_eq!(
        h.store().claimed_ticks("reconcile").await.unwrap(),
        expected
    );
    assert_eq!(queued, 6, "one job per connection per tick");
    assert_eq!(
        h.store().queued_job_count("sync-connection").await.unwrap(),
        6
    );

    // A worker runs them: three reconciles of each connection.
    let worker = start_worker(h.store(), &h.ctx);
    for id in [CONNECTION, SECOND] {
        eventually_within(
            "three reconciles of the connection ran",
            Duration::from_secs(120),
            || async {
                let runs = h.store().list_runs(Some(id), 100).await.unwrap();
                let done = runs
                    .iter()
                    .filter(|r| {
                        r.triggered_by == RunTrigger::Reconcile
                            && r.outcome == cmcp_domain::RunOutcome::Complete
                    })
                    .count();
                (done == 3).then_some(())
            },
        )
        .await;
    }
    worker.stop().await;
    let runs = h.store().list_runs(None, 100).await.unwrap();
    let reconciles = runs
        .iter()
        .filter(|r| r.triggered_by == RunTrigger::Reconcile)
        .count();
    assert_eq!(reconciles, 6, "no tick ran twice");
}

both_backends!(two_schedulers_queue_one_reconcile_per_connection_per_tick);
