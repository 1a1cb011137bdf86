//! Sync runs and the connection lease.

use cmcp_domain::{Owner, RunFigures, RunOutcome};
use cmcp_registry::LeaseAttempt;
use cmcp_registry::testing::TestDb;

use crate::support::{add_connection, now_ms};

both_backends!(
    lease_excludes_a_second_holder_until_it_lapses,
    a_lease_freed_while_it_is_refused_is_never_held_by_no_one,
    runs_record_their_figures,
    progress_is_recorded_only_while_a_run_goes,
);

/// A running run's figures can be read before it ends; once it is
/// finished, a late progress write changes nothing.
async fn progress_is_recorded_only_while_a_run_goes(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let id = db
        .store
        .start_run("c", cmcp_domain::RunTrigger::Cli, "worker-1")
        .await
        .unwrap();
    let so_far = RunFigures {
        pages: 2,
        requests: 3,
        rate_limit_waits: 1,
        items_seen: 200,
        created: 150,
        ..RunFigures::default()
    };
    db.store.record_run_progress(&id, &so_far).await.unwrap();
    let run = db.store.get_run(&id).await.unwrap();
    assert_eq!(run.outcome, RunOutcome::Running);
    assert_eq!(run.figures, so_far);
    let last = RunFigures {
        pages: 5,
        requests: 6,
        items_seen: 500,
        duration_ms: 900,
        ..RunFigures::default()
    };
    db.store
        .finish_run(&id, RunOutcome::Complete, &last, None)
        .await
        .unwrap();
    db.store.record_run_progress(&id, &so_far).await.unwrap();
    assert_eq!(db.store.get_run(&id).await.unwrap().figures, last);
}

async fn lease_excludes_a_second_holder_until_it_lapses(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    assert_eq!(
        db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
        LeaseAttempt::Acquired
    );
    assert!(
        matches!(db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap(), LeaseAttempt::HeldBy { holder, .. } if holder == "w1")
    );
    assert!(db.store.renew_lease("c", "w1", 60_000).await.unwrap());
    assert!(!db.store.renew_lease("c", "w2", 60_000).await.unwrap());
    db.store.release_lease("c", "w2").await.unwrap();
    assert!(
        matches!(
            db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap(),
            LeaseAttempt::HeldBy { .. }
        ),
        "a stranger cannot release"
    );
    db.store.release_lease("c", "w1").await.unwrap();
    assert_eq!(
        db.store.try_acquire_lease("c", "w2", 1).await.unwrap(),
        LeaseAttempt::Acquired
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    // w2 was killed: its lease lapsed, so w3 takes over.
    assert_eq!(
        db.store.try_acquire_lease("c", "w3", 60_000).await.unwrap(),
        LeaseAttempt::Acquired
    );
    assert!(
        !db.store.renew_lease("c", "w2", 60_000).await.unwrap(),
        "the lapsed holder lost it"
    );
    // The longest lease a worker can ask for (its TTL in ms saturates at
    // i64::MAX) is renewed to the clock's end, not overflowed past it.
    assert!(db.store.renew_lease("c", "w3", i64::MAX).await.unwrap());
    assert!(
        matches!(
            db.store.try_acquire_lease("c", "w4", 60_000).await.unwrap(),
            LeaseAttempt::HeldBy { holder, until_ms } if holder == "w3" && until_ms == i64::MAX
        ),
        "still held, until the clock's end"
    );
}

/// One worker takes the lease, holds it a moment, gives it up and waits a
/// moment, over and over; another keeps asking for it. The second either
/// gets it or is told who holds it: a lease given up between its attempt
/// and the reading of the holder used to come back held by "" until now,
/// a sync skipped while the lease was free.
async fn a_lease_freed_while_it_is_refused_is_never_held_by_no_one(db: TestDb) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    add_connection(&db.store, "c", Owner::Company).await;
    let stop = Arc::new(AtomicBool::new(false));
    let churn = tokio::spawn({
        let store = db.store.clone();
        let stop = Arc::clone(&stop);
        async move {
            while !stop.load(Ordering::Relaxed) {
                if store.try_acquire_lease("c", "w1", 60_000).await.unwrap()
                    == LeaseAttempt::Acquired
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    store.release_lease("c", "w1").await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let (mut acquired, mut held, mut by_no_one) = (0, 0, Vec::new());
    for _ in 0..400 {
        let asked = now_ms();
        match db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap() {
            LeaseAttempt::Acquired => {
                acquired += 1;
                db.store.release_lease("c", "w2").await.unwrap();
            }
            LeaseAttempt::HeldBy { holder, until_ms } if holder == "w1" => {
                assert!(
                    until_ms >= asked,
                    "a refusal names a live lease: until {until_ms}, asked at {asked}"
                );
                held += 1;
            }
            other => by_no_one.push(other),
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.await.unwrap();
    assert!(
        by_no_one.is_empty(),
        "{} of 400 refusals named no live holder: {:?}",
        by_no_one.len(),
        &by_no_one[..by_no_one.len().min(3)]
    );
    assert!(
        acquired > 0 && held > 0,
        "the two contended: {acquired} taken, {held} refused"
    );
}

async fn runs_record_their_figures(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let id = db
        .store
        .start_run("c", cmcp_domain::RunTrigger::Cli, "worker-1")
        .await
        .unwrap();
    assert_eq!(
        db.store.get_run(&id).await.unwrap().outcome,
        RunOutcome::Running
    );
    let figures = RunFigures {
        pages: 3,
        requests: 5,
        items_seen: 250,
        created: 250,
        retries: 2,
        duration_ms: 1234,
        ..Default::default()
    };
    db.store
        .finish_run(&id, RunOutcome::Partial, &figures, Some("page 3: 500"))
        .await
        .unwrap();
    let run = db.store.last_run("c").await.unwrap().unwrap();
    assert_eq!(run.id, id);
    assert_eq!(run.outcome, RunOutcome::Partial);
    assert_eq!(run.figures, figures);
    assert_eq!(run.error.as_deref(), Some("page 3: 500"));
    assert!(run.finished_at.is_some());
    assert_eq!(db.store.list_runs(None, 10).await.unwrap().len(), 1);
}
