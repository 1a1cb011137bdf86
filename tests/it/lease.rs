//! One sync of a connection at a time: the lease is not re-entrant, a job
//! that finds it held defers without touching the holder's run, and every
//! holder (the Drive change-feed pass too) renews its lease.

use std::time::Duration;

use cmcp_connectors::HttpConfig;
use cmcp_domain::RunOutcome;
use cmcp_fixtures::{DriveSimConfig, GithubSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{LeaseAttempt, SyncRunRow};
use cmcp_tests::{
    CONNECTION, DRIVE_CONNECTION, DriveHarness, Harness, eventually_within, fast_http, start_worker,
};
use cmcp_worker::change_feed::{IncrementalOutcome, run_full, run_incremental};
use cmcp_worker::{Queue, QueueConfig, SyncConnection, SyncOutcome};

both_backends!(
    five_queued_syncs_of_one_connection_run_one_after_another,
    drive_incremental_pass_keeps_its_lease_past_the_ttl,
);

const MAX_CONCURRENCY: usize = 4;

/// A generous limit for the waits below, never a timing assertion.
const WAIT: Duration = Duration::from_secs(120);

/// No two runs of one connection overlap in time, and none was closed as
/// abandoned (every worker lived).
pub fn assert_runs_never_overlap(runs: &[SyncRunRow]) {
    let mut runs: Vec<&SyncRunRow> = runs.iter().collect();
    runs.sort_by_key(|r| r.started_at);
    for pair in runs.windows(2) {
        let finished = pair[0].finished_at.expect("finished");
        assert!(
            finished <= pair[1].started_at,
            "run {} ({}..{finished}) overlaps run {} (from {})",
            pair[0].id,
            pair[0].started_at,
            pair[1].id,
            pair[1].started_at
        );
    }
    for r in &runs {
        assert!(
            !r.error.as_deref().unwrap_or_default().contains("abandoned"),
            "a live worker's run was closed as abandoned: {r:?}"
        );
    }
}

async fn five_queued_syncs_of_one_connection_run_one_after_another(db: TestDb) {
    let http = HttpConfig {
        per_page: 20,
        max_concurrency: MAX_CONCURRENCY,
        ..fast_http()
    };
    let mut h = Harness::start(
        db,
        GithubSimConfig {
            repos: 200,
            latency: Duration::from_millis(10),
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    // A short lease, so deferred jobs look again soon.
    h.ctx.sync.lease_ttl = Duration::from_secs(1);
    cmcp_worker::queue::setup(h.store()).await.unwrap();
    let queue = Queue::new(h.store(), &QueueConfig::default());
    for _ in 0..5 {
        queue
            .push(
                SyncConnection::new(CONNECTION, cmcp_domain::RunTrigger::Test),
                None,
                None,
            )
            .await
            .unwrap();
    }
    // One worker with room for four jobs at once: it picks up four of the
    // five together, and only one may sync.
    let worker = start_worker(h.store(), &h.ctx);
    let runs = eventually_within("five finished runs", WAIT, || async {
        let runs = h.store().list_runs(Some(CONNECTION), 20).await.unwrap();
        (runs.len() == 5 && runs.iter().all(|r| r.outcome != RunOutcome::Running)).then_some(runs)
    })
    .await;
    worker.stop().await;
    for r in &runs {
        assert_eq!(r.outcome, RunOutcome::Complete, "{r:?}");
        assert_eq!(r.figures.items_seen, 201, "{r:?}");
    }
    assert_runs_never_overlap(&runs);
    let stats = h.sim.stats();
    assert!(
        stats.max_in_flight <= MAX_CONCURRENCY as u64,
        "{} requests in flight against max_concurrency {MAX_CONCURRENCY}: {stats:?}",
        stats.max_in_flight
    );
    // Every request upstream saw belongs to one of the five runs: no job
    // read the catalogue beside another.
    let recorded: u64 = runs.iter().map(|r| r.figures.requests).sum();
    assert_eq!(stats.requests, recorded, "{stats:?}");
}

async fn drive_incremental_pass_keeps_its_lease_past_the_ttl(db: TestDb) {
    let mut h = DriveHarness::start(
        db,
        DriveSimConfig {
            drives: 2,
            folders_per_level: 3,
            depth: 3,
            latency: Duration::from_millis(60),
            ..DriveSimConfig::default()
        },
        3,
    )
    .await;
    let ttl = Duration::from_secs(2);
    h.ctx.sync.lease_ttl = ttl;
    match run_full(&h.ctx, DRIVE_CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap()
    {
        SyncOutcome::Complete { .. } => {}
        other => panic!("{other:?}"),
    }
    // Renaming the top folders makes the pass re-read everything below
    // them, one request at a time: far longer than the TTL.
    for f in h.sim.folders().into_iter().filter(|f| f.depth == 1) {
        h.sim.rename_folder(&f.id, &format!("{} renamed", f.name));
    }
    let ctx = h.ctx.clone();
    let started = tokio::time::Instant::now();
    let pass = tokio::spawn(async move { run_incremental(&ctx, DRIVE_CONNECTION).await });
    eventually_within("the pass to take the lease", WAIT, || async {
        let c = h.store().get_connection(DRIVE_CONNECTION).await.unwrap();
        (c.lease_owner.as_deref() == Some("test-worker")).then_some(())
    })
    .await;
    // Another worker tries to take the connection all through the pass.
    let mut attempts = Vec::new();
    while !pass.is_finished() {
        let at = tokio::time::Instant::now();
        let got = h
            .store()
            .try_acquire_lease(DRIVE_CONNECTION, "intruder", 60_000)
            .await
            .unwrap();
        // Stamped when the answer is in: an attempt sent just before the
        // run finished may be answered after the pass released the lease,
        // and must then not count as taken during the pass.
        let answered_ms = chrono::Utc::now().timestamp_millis();
        attempts.push((at, answered_ms, got));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outcome = pass.await.unwrap().unwrap();
    let report = match outcome {
        IncrementalOutcome::Applied(r) => r,
        other => panic!("{other:?}"),
    };
    assert!(report.renamed >= 6, "{report:?}");
    let run = h.store().get_run(&report.run_id).await.unwrap();
    assert_eq!(run.outcome, RunOutcome::Complete, "{run:?}");
    // Only attempts before the run finished count: the pass releases the
    // lease right after.
    let finished_ms = run.finished_at.expect("finished");
    let during: Vec<_> = attempts
        .iter()
        .filter(|(_, answered_ms, _)| *answered_ms < finished_ms)
        .collect();
    // The premise: the intruder still tried after the TTL had run out.
    assert!(
        during.iter().any(|(at, _, _)| *at > started + ttl * 2),
        "the pass was not longer than its TTL; the test proves nothing"
    );
    for (at, _, got) in &during {
        assert!(
            matches!(got, LeaseAttempt::HeldBy { holder, .. } if holder == "test-worker"),
            "the lease lapsed {:?} into the pass: {got:?}",
            at.duration_since(started)
        );
    }
    // Released at the end, not left to lapse (an intruder attempt after the
    // run finished may have taken it since; the pass must not hold it).
    let connection = h.store().get_connection(DRIVE_CONNECTION).await.unwrap();
    assert_ne!(
        connection.lease_owner.as_deref(),
        Some("test-worker"),
        "{connection:?}"
    );
}
