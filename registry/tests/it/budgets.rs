//! The fleet's shared rate budgets: reservations never exceed what the
//! platform allows, settlements only lower a window, pauses hold everyone.

use cmcp_registry::testing::TestDb;
use cmcp_registry::{BudgetGrant, BudgetSettlement, BudgetTiming};

both_backends!(
    an_unknown_budget_admits_one_probe_then_concurrent_workers_split_what_is_left,
    settling_only_lowers_a_window_and_ignores_late_answers_of_an_old_one,
    a_free_answer_gives_its_reserved_unit_back,
    a_pause_holds_every_worker_back,
    connections_show_the_budget_they_spend,
    a_probe_settling_between_a_miss_and_its_read_does_not_wait_for_the_reset,
);

const T0: i64 = 1_800_000_000_000;

fn reading(remaining: i64, reset_at: i64) -> BudgetSettlement {
    BudgetSettlement {
        remaining: Some(remaining),
        reset_at: Some(reset_at),
        limit: Some(10),
        paused_until: None,
        free: false,
    }
}

async fn grant(db: &TestDb, now: i64) -> BudgetGrant {
    db.store
        .reserve_budget("github:abc:core", 1, now, BudgetTiming::default())
        .await
        .unwrap()
}

async fn an_unknown_budget_admits_one_probe_then_concurrent_workers_split_what_is_left(db: TestDb) {
    assert_eq!(grant(&db, T0).await, BudgetGrant::Go, "the probe");
    assert!(matches!(grant(&db, T0).await, BudgetGrant::WaitUntilMs(_)));
    db.store
        .settle_budget("github:abc:core", reading(10, T0 + 60_000), T0)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..24 {
        let store = db.store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .reserve_budget("github:abc:core", 1, T0 + 1, BudgetTiming::default())
                .await
                .unwrap()
        }));
    }
    let mut granted = 0;
    for t in tasks {
        match t.await.unwrap() {
            BudgetGrant::Go => granted += 1,
            BudgetGrant::WaitUntilMs(at) => assert_eq!(at, T0 + 60_000),
        }
    }
    // 10 left and a reserve of 1: exactly 9 requests may go.
    assert_eq!(granted, 9, "{:?}", db.store.budget("github:abc:core").await);
    let row = db.store.budget("github:abc:core").await.unwrap().unwrap();
    assert_eq!((row.remaining, row.in_flight), (Some(1), 9));
}

async fn settling_only_lowers_a_window_and_ignores_late_answers_of_an_old_one(db: TestDb) {
    assert_eq!(grant(&db, T0).await, BudgetGrant::Go);
    let key = "github:abc:core";
    db.store
        .settle_budget(key, reading(8, T0 + 60_000), T0)
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(grant(&db, T0 + 1).await, BudgetGrant::Go);
    }
    // The server saw fewer requests than reserved: keep our lower figure.
    db.store
        .settle_budget(key, reading(7, T0 + 60_000), T0)
        .await
        .unwrap();
    assert_eq!(
        db.store.budget(key).await.unwrap().unwrap().remaining,
        Some(5)
    );
    // Another process spent more: take the server's lower figure,
    // less the other request still in flight.
    db.store
        .settle_budget(key, reading(2, T0 + 60_000), T0)
        .await
        .unwrap();
    assert_eq!(
        db.store.budget(key).await.unwrap().unwrap().remaining,
        Some(1)
    );
    // After the reset (and margin) the window rolls over to the limit,
    // less the one request still in flight.
    assert_eq!(grant(&db, T0 + 61_000).await, BudgetGrant::Go);
    let row = db.store.budget(key).await.unwrap().unwrap();
    assert_eq!(
        (row.remaining, row.reset_at, row.in_flight),
        (Some(8), None, 2)
    );
    // A late answer of the old window changes nothing but in-flight.
    db.store
        .settle_budget(key, reading(0, T0 + 60_000), T0)
        .await
        .unwrap();
    let row = db.store.budget(key).await.unwrap().unwrap();
    assert_eq!(
        (row.remaining, row.reset_at, row.in_flight),
        (Some(8), None, 1)
    );
    // The first answer of the new window sets its reset.
    db.store
        .settle_budget(key, reading(9, T0 + 120_000), T0)
        .await
        .unwrap();
    let row = db.store.budget(key).await.unwrap().unwrap();
    assert_eq!(
        (row.remaining, row.reset_at, row.in_flight),
        (Some(8), Some(T0 + 120_000), 0)
    );
}

async fn a_pause_holds_every_worker_back(db: TestDb) {
    let key = "github:abc:core";
    assert_eq!(grant(&db, T0).await, BudgetGrant::Go);
    let pause = BudgetSettlement {
        paused_until: Some(T0 + 30_000),
        ..reading(100, T0 + 60_000)
    };
    db.store.settle_budget(key, pause, T0).await.unwrap();
    assert_eq!(
        grant(&db, T0 + 1).await,
        BudgetGrant::WaitUntilMs(T0 + 30_000)
    );
    assert_eq!(grant(&db, T0 + 30_000).await, BudgetGrant::Go);
}

async fn connections_show_the_budget_they_spend(db: TestDb) {
    let key = "github:abc:core";
    assert_eq!(grant(&db, T0).await, BudgetGrant::Go);
    db.store
        .settle_budget(key, reading(42, T0 + 60_000), T0)
        .await
        .unwrap();
    db.store.note_budget_user("github-acme", key).await.unwrap();
    db.store.note_budget_user("github-acme", key).await.unwrap();
    db.store
        .note_budget_user("github-other", key)
        .await
        .unwrap();
    let all = db.store.connection_budgets().await.unwrap();
    let ids: Vec<&str> = all.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(ids, ["github-acme", "github-other"]);
    assert!(all.iter().all(|(_, b)| b.remaining == Some(42)));
}

async fn a_free_answer_gives_its_reserved_unit_back(db: TestDb) {
    let key = "github:abc:core";
    assert_eq!(grant(&db, T0).await, BudgetGrant::Go);
    db.store
        .settle_budget(key, reading(5, T0 + 60_000), T0)
        .await
        .unwrap();
    // Twenty 304s, two at a time, each answered with the unchanged figure:
    // nothing is spent.
    for _ in 0..10 {
        assert_eq!(grant(&db, T0 + 1).await, BudgetGrant::Go);
        assert_eq!(grant(&db, T0 + 1).await, BudgetGrant::Go);
        for _ in 0..2 {
            let free = BudgetSettlement {
                free: true,
                ..reading(5, T0 + 60_000)
            };
            db.store.settle_budget(key, free, T0 + 2).await.unwrap();
        }
    }
    let row = db.store.budget(key).await.unwrap().unwrap();
    assert_eq!((row.remaining, row.in_flight), (Some(5), 0));
    // A free answer without a reading gives the unit back too.
    assert_eq!(grant(&db, T0 + 3).await, BudgetGrant::Go);
    let bare = BudgetSettlement {
        free: true,
        ..BudgetSettlement::default()
    };
    db.store.settle_budget(key, bare, T0 + 4).await.unwrap();
    let row = db.store.budget(key).await.unwrap().unwrap();
    assert_eq!((row.remaining, row.in_flight), (Some(5), 0));
}

/// A worker whose reservation misses because the probe is in flight, and
/// then reads the row just after the probe settled a full window, must
/// reserve again: it once waited for the window's reset (an hour on
/// GitHub), and the fleet's first reconcile failed as rate limited. Many
/// rounds of one probe and a few workers racing it on a fresh budget.
async fn a_probe_settling_between_a_miss_and_its_read_does_not_wait_for_the_reset(db: TestDb) {
    let reset = T0 + 3_600_000;
    let poll = BudgetTiming::default().poll_ms;
    for round in 0..150 {
        let key = format!("github:race{round}:core");
        assert_eq!(
            db.store
                .reserve_budget(&key, 1, T0, BudgetTiming::default())
                .await
                .unwrap(),
            BudgetGrant::Go,
            "the probe"
        );
        let mut workers = Vec::new();
        for _ in 0..3 {
            let store = db.store.clone();
            let key = key.clone();
            workers.push(tokio::spawn(async move {
                loop {
                    match store
                        .reserve_budget(&key, 1, T0 + 1, BudgetTiming::default())
                        .await
                        .unwrap()
                    {
                        BudgetGrant::Go => return None,
                        BudgetGrant::WaitUntilMs(at) if at > T0 + 1 + poll => return Some(at),
                        BudgetGrant::WaitUntilMs(_) => tokio::task::yield_now().await,
                    }
                }
            }));
        }
        tokio::task::yield_now().await;
        db.store
            .settle_budget(&key, reading(5000, reset), T0)
            .await
            .unwrap();
        for w in workers {
            let waited = w.await.unwrap();
            assert_eq!(
                waited,
                None,
                "round {round}: told to wait for the reset with 5,000 left: {:?}",
                db.store.budget(&key).await
            );
        }
    }
}
