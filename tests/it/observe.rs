//! What the metrics sampler reads from the store, on both backends: jobs
//! by queue and status and the oldest due one from the apalis tables,
//! connections by status, and per platform the oldest last complete
//! listing of a syncing connection.

use std::time::Duration;

use cmcp_domain::{
    ConnectionSpec, ConnectionStatus, Owner, Platform, RunFigures, RunOutcome, RunTrigger, Token,
};
use cmcp_registry::NewConnection;
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_worker::{Queue, QueueConfig, SyncConnection};

both_backends!(the_sampler_reads_queues_connections_and_staleness);

async fn connection(db: &TestDb, id: &str) {
    db.store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: id.to_owned(),
                    base_url: "https://api.github.com".into(),
                },
                owner: Owner::Company,
                token: Token::new("ghp_x"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
}

pub async fn the_sampler_reads_queues_connections_and_staleness(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let store = &db.store;
    for id in ["a", "b", "c"] {
        connection(&db, id).await;
    }
    store
        .set_connection_status("c", ConnectionStatus::Disabled, "test", None)
        .await
        .unwrap();

    // Two due jobs and one due in an hour: three pending, the oldest due
    // one at most a few seconds old; the later one is not waiting yet.
    let queue = Queue::<SyncConnection>::new(store, &QueueConfig::default());
    let before_s = chrono::Utc::now().timestamp() - 1;
    queue
        .push(SyncConnection::new("a", RunTrigger::Test), None, None)
        .await
        .unwrap();
    queue
        .push(SyncConnection::new("b", RunTrigger::Test), None, None)
        .await
        .unwrap();
    queue
        .push(
            SyncConnection::new("a", RunTrigger::Test),
            Some(Duration::from_secs(3600)),
            None,
        )
        .await
        .unwrap();
    let counts = store.queue_job_counts().await.unwrap();
    assert!(
        counts.contains(&("sync-connection".to_owned(), "Pending".to_owned(), 3)),
        "{counts:?}"
    );
    let now_s = chrono::Utc::now().timestamp();
    let oldest = store.oldest_waiting_jobs(now_s).await.unwrap();
    let due = oldest
        .iter()
        .find(|(q, _)| q == "sync-connection")
        .map(|(_, at)| *at)
        .expect("a due job");
    assert!(
        due >= before_s && due <= now_s,
        "{due} in {before_s}..={now_s}"
    );
    let none_due = store.oldest_waiting_jobs(before_s - 60).await.unwrap();
    assert!(
        none_due.is_empty(),
        "nothing was due a minute ago: {none_due:?}"
    );

    let mut statuses = store.connection_status_counts().await.unwrap();
    statuses.sort();
    assert_eq!(
        statuses,
        vec![("disabled".to_owned(), 1), ("enabled".to_owned(), 2)]
    );

    // Never complete: the oldest syncing connection counts from its
    // creation. Once both syncing ones complete, from the older run; the
    // disabled one never counts.
    let created = store.get_connection("a").await.unwrap().created_at;
    let stale = store.oldest_last_complete_runs().await.unwrap();
    assert_eq!(stale, vec![("github".to_owned(), created)]);
    for id in ["a", "b"] {
        let run = store.start_run(id, RunTrigger::Test, "w").await.unwrap();
        store
            .finish_run(&run, RunOutcome::Complete, &RunFigures::default(), None)
            .await
            .unwrap();
    }
    let stale = store.oldest_last_complete_runs().await.unwrap();
    let (platform, at) = &stale[0];
    assert_eq!(platform, "github");
    let finished: Vec<i64> = store
        .list_runs(None, 10)
        .await
        .unwrap()
        .iter()
        .filter_map(|r| r.finished_at)
        .collect();
    assert_eq!(Some(at), finished.iter().min(), "{stale:?} vs {finished:?}");
}
