//! A failed sync is retried as its failure says: a rejected credential
//! queues nothing, an unavailable upstream queues a retry.

use cmcp_domain::Owner;
use cmcp_fixtures::{Faults, GithubSim, GithubSimConfig};
use cmcp_registry::Store;
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, Harness, add_connection, fast_http};
use cmcp_worker::jobs::sync_connection::{self, QUEUE};
use cmcp_worker::{Queue, QueueConfig, SyncConnection};

/// The sync jobs waiting in the queue, decoded.
async fn queued(store: &Store) -> Vec<SyncConnection> {
    let rows: Vec<(Vec<u8>,)> = match store {
        Store::Sqlite(pool) => {
            sqlx::query_as("SELECT CAST(job AS BLOB) FROM Jobs WHERE job_type = ?")
                .bind(QUEUE)
                .fetch_all(pool)
                .await
        }
        Store::Postgres(pool) => {
            sqlx::query_as("SELECT job FROM apalis.jobs WHERE job_type = $1")
                .bind(QUEUE)
                .fetch_all(pool)
                .await
        }
    }
    .expect("queued jobs");
    rows.into_iter()
        .map(|(job,)| serde_json::from_slice(&job).expect("a sync job"))
        .collect()
}

/// Runs the sync job once, as a worker would, for connection `id`.
async fn run_job(h: &Harness, id: &str) -> String {
    cmcp_worker::queue::setup(h.store()).await.unwrap();
    let cfg = QueueConfig::default();
    let queue = Queue::new(h.store(), &cfg);
    sync_connection::run(
        &SyncConnection::new(id, cmcp_domain::RunTrigger::Test),
        &h.ctx,
        &queue,
        &cfg,
    )
    .await
    .expect("the job ran")
}

pub async fn rejected_credential_queues_no_retry(db: TestDb) {
    let h = Harness::start(db, GithubSimConfig::default(), fast_http()).await;
    // An upstream that knows another token answers 401.
    let refusing = GithubSim::start(GithubSimConfig {
        repos: 3,
        token: Some("another".into()),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    add_connection(
        h.store(),
        "github-refused",
        &refusing.base_url(),
        Owner::Company,
    )
    .await;
    let said = run_job(&h, "github-refused").await;
    assert!(said.contains("401"), "{said}");
    assert_eq!(queued(h.store()).await, vec![], "a 401 is not retried");
}

pub async fn unavailable_upstream_queues_a_retry(db: TestDb) {
    let mut http = fast_http();
    http.max_attempts = 2;
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 3,
            faults: Faults {
                server_error: 1.0,
                ..Faults::default()
            },
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    let said = run_job(&h, CONNECTION).await;
    assert!(said.contains("retry 1"), "{said}");
    assert_eq!(
        queued(h.store()).await,
        vec![SyncConnection {
            connection_id: CONNECTION.to_owned(),
            trigger: cmcp_domain::RunTrigger::Retry,
            attempt: 1,
            run_id: None,
        }],
        "a 5xx is retried"
    );
}

both_backends!(
    rejected_credential_queues_no_retry,
    unavailable_upstream_queues_a_retry,
);
