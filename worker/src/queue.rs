//! The job queue: apalis on the store's own database. SQLite keeps the
//! queue in the registry file (tables `Jobs`/`Workers`); PostgreSQL keeps it
//! in the `apalis` schema. The backend follows the store, so one URL picks
//! both.

use std::time::Duration;

use apalis::prelude::{TaskBuilder, TaskSink, TaskSinkError};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use cmcp_registry::Store;
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::{PgPool, SqlitePool};

use crate::error::{Result, WorkerError};

/// A job's arguments, and the queue that holds them. Queue names are fixed
/// strings: the default (the Rust type's path) would orphan queued jobs
/// whenever a type moved.
pub trait Job: Serialize + DeserializeOwned + Send + Sync + Unpin + 'static {
    const QUEUE: &'static str;
}

#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// How often an idle worker looks for new jobs.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub poll_interval: Duration,
    /// Worker heartbeat; a worker silent for `missed_heartbeats` of these is
    /// presumed dead and its running jobs are queued again.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub heartbeat: Duration,
    pub missed_heartbeats: usize,
    /// Sync jobs one worker process runs at once.
    pub concurrency: usize,
    /// Attempts (retries with backoff, then give up) for a sync job.
    pub max_attempts: u32,
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub retry_backoff_min: Duration,
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub retry_backoff_max: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            poll_interval: Duration::from_millis(500),
            heartbeat: Duration::from_secs(10),
            missed_heartbeats: 3,
            concurrency: 4,
            max_attempts: 5,
            retry_backoff_min: Duration::from_secs(5),
            retry_backoff_max: Duration::from_secs(600),
        }
    }
}

/// A handle that pushes jobs of one kind, whichever backend holds them.
/// Every push carries the configured attempt limit.
pub struct Queue<J> {
    backend: Backend<J>,
    max_attempts: u32,
}

/// The apalis storage under a [`Queue`]; the runner builds its workers on it.
pub(crate) enum Backend<J> {
    Sqlite(SqliteStorage<J>),
    Postgres(PostgresStorage<J>),
}

impl<J> Clone for Queue<J> {
    fn clone(&self) -> Self {
        Queue {
            backend: match &self.backend {
                Backend::Sqlite(s) => Backend::Sqlite(s.clone()),
                Backend::Postgres(s) => Backend::Postgres(s.clone()),
            },
            max_attempts: self.max_attempts,
        }
    }
}

impl<J> std::fmt::Debug for Queue<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.backend {
            Backend::Sqlite(_) => "Queue::Sqlite",
            Backend::Postgres(_) => "Queue::Postgres",
        })
    }
}

/// Create the queue's tables (idempotent), then fit them to the fleet
/// ([`Store::fit_queue_tables`]). apalis keeps its own migration history:
/// the registry's lives in `_cmcp_migrations`, so they never clash.
pub async fn setup(store: &Store) -> Result<()> {
    match store {
        Store::Sqlite(pool) => SqliteStorage::migrations()
            .run(pool)
            .await
            .map_err(|e| WorkerError::Queue(format!("sqlite queue migrations: {e}")))?,
        Store::Postgres(pool) => PostgresStorage::setup(pool)
            .await
            .map_err(|e| WorkerError::Queue(format!("postgres queue migrations: {e}")))?,
    }
    store
        .fit_queue_tables()
        .await
        .map_err(|e| WorkerError::Queue(format!("fitting the queue tables: {e}")))?;
    Ok(())
}

/// The apalis storage of queue `name` on SQLite, with the fleet's heartbeat.
pub fn sqlite_storage<T>(pool: &SqlitePool, name: &str, cfg: &QueueConfig) -> SqliteStorage<T> {
    SqliteStorage::new(pool).with_config(
        apalis_sqlite::Config::default()
            .queue(name)
            .heartbeat_interval(cfg.heartbeat)
            .missed_heartbeats(cfg.missed_heartbeats),
    )
}

/// The apalis storage of queue `name` on PostgreSQL.
pub fn postgres_storage<T>(pool: &PgPool, name: &str, cfg: &QueueConfig) -> PostgresStorage<T> {
    PostgresStorage::new(pool).with_config(
        apalis_postgres::Config::default()
            .queue(name)
            .heartbeat_interval(cfg.heartbeat)
            .missed_heartbeats(cfg.missed_heartbeats),
    )
}

impl<J: Job> Queue<J> {
    pub fn new(store: &Store, cfg: &QueueConfig) -> Queue<J> {
        let backend = match store {
            Store::Sqlite(pool) => Backend::Sqlite(sqlite_storage(pool, J::QUEUE, cfg)),
            Store::Postgres(pool) => Backend::Postgres(postgres_storage(pool, J::QUEUE, cfg)),
        };
        Queue {
            backend,
            max_attempts: cfg.max_attempts,
        }
    }

    pub(crate) fn backend(&self) -> &Backend<J> {
        &self.backend
    }

    /// Queue a job, to run after `delay` when given. With an idempotency
    /// key, a second push of the same key is a no-op on both backends
    /// (SQLite ignores the conflict; PostgreSQL reports a unique violation,
    /// which here means "already queued", not an error).
    pub async fn push(&self, job: J, delay: Option<Duration>, key: Option<String>) -> Result<()> {
        let attempts = usize::try_from(self.max_attempts.max(1)).unwrap_or(usize::MAX);
        let mut builder = TaskBuilder::new(job).max_attempts(attempts);
        if let Some(d) = delay {
            builder = builder.run_after(d);
        }
        if let Some(k) = &key {
            builder = builder.idempotency_key(k);
        }
        let task = builder.build();
        let result = match self.clone().backend {
            Backend::Sqlite(mut s) => s.push_task(task).await.map_err(|e| {
                let unique = matches!(&e, TaskSinkError::PushError(apalis_sqlite::Error::Database(d)) if is_unique_violation(d));
                (unique, e.to_string())
            }),
            Backend::Postgres(mut s) => s.push_task(task).await.map_err(|e| {
                let unique = matches!(&e, TaskSinkError::PushError(apalis_postgres::Error::Database(d)) if is_unique_violation(d));
                (unique, e.to_string())
            }),
        };
        match result {
            Ok(()) => Ok(()),
            Err((true, _)) if key.is_some() => Ok(()),
            Err((_, e)) => Err(WorkerError::Queue(format!("push: {e}"))),
        }
    }
}

/// Recognised by the database's error code, never by the message text.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

#[cfg(test)]
mod tests {
    use cmcp_registry::testing::TestDb;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Ping {
        n: u32,
    }

    impl Job for Ping {
        const QUEUE: &'static str = "ping-queue";
    }

    /// (max_attempts, idempotency key) of every job row of the test queue.
    async fn rows(store: &Store) -> Vec<(i64, Option<String>)> {
        match store {
            Store::Sqlite(pool) => sqlx::query_as(
                "SELECT max_attempts, idempotency_key FROM Jobs WHERE job_type = ? ORDER BY run_at",
            )
            .bind(Ping::QUEUE)
            .fetch_all(pool)
            .await
            .unwrap(),
            Store::Postgres(pool) => sqlx::query_as(
                "SELECT max_attempts::bigint, idempotency_key FROM apalis.jobs WHERE job_type = $1 ORDER BY run_at",
            )
            .bind(Ping::QUEUE)
            .fetch_all(pool)
            .await
            .unwrap(),
        }
    }

    async fn pushed_jobs_carry_the_configured_attempt_limit(db: TestDb) {
        setup(&db.store).await.unwrap();
        let cfg = QueueConfig {
            max_attempts: 7,
            ..QueueConfig::default()
        };
        let queue = Queue::<Ping>::new(&db.store, &cfg);
        queue.push(Ping { n: 1 }, None, None).await.unwrap();
        assert_eq!(rows(&db.store).await, vec![(7, None)]);
    }

    async fn second_push_of_a_key_is_already_queued(db: TestDb) {
        setup(&db.store).await.unwrap();
        let queue = Queue::<Ping>::new(&db.store, &QueueConfig::default());
        let key = Some("delivery:01ABC".to_owned());
        queue.push(Ping { n: 1 }, None, key.clone()).await.unwrap();
        queue
            .push(Ping { n: 2 }, None, key.clone())
            .await
            .expect("a duplicate key is not an error");
        assert_eq!(rows(&db.store).await, vec![(5, key)], "one job, not two");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_pushed_jobs_carry_the_configured_attempt_limit() {
        pushed_jobs_carry_the_configured_attempt_limit(TestDb::sqlite().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_pushed_jobs_carry_the_configured_attempt_limit() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        pushed_jobs_carry_the_configured_attempt_limit(db).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_second_push_of_a_key_is_already_queued() {
        second_push_of_a_key_is_already_queued(TestDb::sqlite().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_second_push_of_a_key_is_already_queued() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        second_push_of_a_key_is_already_queued(db).await;
    }

    /// After setup (twice: it is idempotent), `apalis.jobs` has no
    /// trigger, no index that repeats another and no index entry for a
    /// NULL `lock_by` or idempotency key, and a pushed job still lands;
    /// apalis's own setup alone leaves all three (so this can fail). A key
    /// still refuses its second push through the partial index:
    /// `postgres_second_push_of_a_key_is_already_queued`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_queue_tables_are_fitted_to_the_fleet() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        let Store::Postgres(pool) = &db.store else {
            unreachable!()
        };
        let shape = || async {
            let triggers: Vec<(String,)> = sqlx::query_as(
                "SELECT tgname::text FROM pg_trigger \
                 WHERE tgrelid = 'apalis.jobs'::regclass AND NOT tgisinternal ORDER BY 1",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            let indexes: Vec<(String,)> = sqlx::query_as(
                "SELECT indexname::text || CASE WHEN indexdef LIKE '% WHERE %' \
                   THEN ' (partial)' ELSE '' END FROM pg_indexes \
                 WHERE schemaname = 'apalis' AND tablename = 'jobs' ORDER BY 1",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            let names = |v: Vec<(String,)>| v.into_iter().map(|(n,)| n).collect::<Vec<_>>();
            (names(triggers), names(indexes))
        };
        PostgresStorage::setup(pool).await.unwrap();
        let (triggers, indexes) = shape().await;
        assert_eq!(triggers, ["notify_workers"], "apalis's own setup");
        assert!(indexes.iter().any(|i| i == "unique_job_id"));
        assert!(indexes.iter().any(|i| i == "lidx"));
        assert!(indexes.iter().any(|i| i == "idx_apalis_jobs_lock_by"));
        assert!(indexes.iter().any(|i| i == "idx_jobs_idempotency_key"));
        setup(&db.store).await.unwrap();
        setup(&db.store).await.unwrap();
        let (triggers, indexes) = shape().await;
        assert!(triggers.is_empty(), "{triggers:?}");
        assert_eq!(
            indexes,
            [
                "idx_apalis_jobs_fetch_partial (partial)",
                "idx_apalis_jobs_lock_by (partial)",
                "idx_jobs_idempotency_key (partial)",
                "jobs_pkey"
            ]
        );
        let queue = Queue::<Ping>::new(&db.store, &QueueConfig::default());
        queue.push(Ping { n: 1 }, None, None).await.unwrap();
        assert_eq!(rows(&db.store).await, vec![(5, None)]);
        // Fitted tables take no lock to fit again: a writer's transaction
        // left open on the table does not hold the next process's setup
        // (nor, behind it, every other writer).
        let mut open = pool.begin().await.unwrap();
        sqlx::query("LOCK TABLE apalis.jobs IN ROW EXCLUSIVE MODE")
            .execute(&mut *open)
            .await
            .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(20), setup(&db.store))
            .await
            .expect("setup waited for the open transaction's lock")
            .unwrap();
        open.rollback().await.unwrap();
    }
}
