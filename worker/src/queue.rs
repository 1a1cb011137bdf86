//! The job queue: apalis on the store's own database. SQLite keeps the
//! queue in the registry file (tables `Jobs`/`Workers`); PostgreSQL keeps it
//! in the `apalis` schema. The backend follows the store, so one URL picks
//! both.

use std::time::Duration;

use apalis::prelude::{TaskBuilder, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use cmcp_registry::Store;
use serde::Deserialize;

use crate::error::{Result, WorkerError};
use crate::jobs::sync_connection::SyncConnection;

/// Queue names are fixed strings: the default (the Rust type's path) would
/// orphan queued jobs whenever a type moved.
pub const SYNC_QUEUE: &str = "sync-connection";

#[derive(Debug, Clone, Deserialize)]
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

/// A handle that pushes sync jobs, whichever backend holds them.
#[derive(Clone)]
pub enum Queue {
    Sqlite(SqliteStorage<SyncConnection>),
    Postgres(PostgresStorage<SyncConnection>),
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Sqlite(_) => "Queue::Sqlite",
            Queue::Postgres(_) => "Queue::Postgres",
        })
    }
}

/// Create the queue's tables (idempotent). apalis keeps its own migration
/// history: the registry's lives in `_cmcp_migrations`, so they never clash.
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
    Ok(())
}

impl Queue {
    pub fn new(store: &Store, cfg: &QueueConfig) -> Queue {
        match store {
            Store::Sqlite(pool) => Queue::Sqlite(
                SqliteStorage::new(pool).with_config(
                    apalis_sqlite::Config::default()
                        .queue(SYNC_QUEUE)
                        .heartbeat_interval(cfg.heartbeat)
                        .missed_heartbeats(cfg.missed_heartbeats),
                ),
            ),
            Store::Postgres(pool) => Queue::Postgres(
                PostgresStorage::new(pool).with_config(
                    apalis_postgres::Config::default()
                        .queue(SYNC_QUEUE)
                        .heartbeat_interval(cfg.heartbeat)
                        .missed_heartbeats(cfg.missed_heartbeats),
                ),
            ),
        }
    }

    /// Queue a sync job, to run after `delay` when given. With an
    /// idempotency key, a second push of the same key is a no-op on both
    /// backends (PostgreSQL reports it as a unique violation; that is
    /// "already queued", not an error).
    pub async fn push(
        &self,
        job: SyncConnection,
        delay: Option<Duration>,
        key: Option<String>,
    ) -> Result<()> {
        let mut builder = TaskBuilder::new(job).max_attempts(3);
        if let Some(d) = delay {
            builder = builder.run_after(d);
        }
        if let Some(k) = &key {
            builder = builder.idempotency_key(k);
        }
        let task = builder.build();
        let result = match self.clone() {
            Queue::Sqlite(mut s) => s.push_task(task).await.map_err(|e| e.to_string()),
            Queue::Postgres(mut s) => s.push_task(task).await.map_err(|e| e.to_string()),
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if key.is_some() && e.contains("idx_jobs_idempotency_key") => Ok(()),
            Err(e) => Err(WorkerError::Queue(format!("push: {e}"))),
        }
    }
}
