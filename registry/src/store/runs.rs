//! Sync runs and their figures: every run is recorded, whatever its outcome,
//! so an operator can see what each one read and changed.

use cmcp_domain::{RunFigures, RunOutcome, RunTrigger};
use serde::Serialize;

use super::{Store, now_ms, on_pool};
use crate::error::{RegistryError, Result};

#[derive(Debug, Clone, Serialize)]
pub struct SyncRunRow {
    pub id: String,
    pub connection_id: String,
    pub triggered_by: RunTrigger,
    pub worker: Option<String>,
    pub outcome: RunOutcome,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub figures: RunFigures,
    pub error: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RawRun {
    id: String,
    connection_id: String,
    triggered_by: String,
    worker: Option<String>,
    outcome: String,
    started_at: i64,
    finished_at: Option<i64>,
    pages: i64,
    requests: i64,
    not_modified: i64,
    retries: i64,
    rate_limit_waits: i64,
    items_seen: i64,
    created: i64,
    updated: i64,
    renamed: i64,
    unchanged: i64,
    missing: i64,
    skipped_foreign: i64,
    duration_ms: i64,
    error: Option<String>,
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl TryFrom<RawRun> for SyncRunRow {
    type Error = RegistryError;

    fn try_from(r: RawRun) -> Result<Self> {
        Ok(SyncRunRow {
            outcome: r.outcome.parse().map_err(|_| RegistryError::Corrupt {
                what: format!("run {} outcome {:?}", r.id, r.outcome),
            })?,
            triggered_by: r.triggered_by.parse().map_err(|_| RegistryError::Corrupt {
                what: format!("run {} trigger {:?}", r.id, r.triggered_by),
            })?,
            figures: RunFigures {
                pages: u(r.pages),
                requests: u(r.requests),
                not_modified: u(r.not_modified),
                retries: u(r.retries),
                rate_limit_waits: u(r.rate_limit_waits),
                items_seen: u(r.items_seen),
                created: u(r.created),
                updated: u(r.updated),
                renamed: u(r.renamed),
                unchanged: u(r.unchanged),
                missing: u(r.missing),
                skipped_foreign: u(r.skipped_foreign),
                duration_ms: u(r.duration_ms),
            },
            id: r.id,
            connection_id: r.connection_id,
            worker: r.worker,
            started_at: r.started_at,
            finished_at: r.finished_at,
            error: r.error,
        })
    }
}

const SELECT: &str = "SELECT id, connection_id, triggered_by, worker, outcome, started_at, finished_at, \
    pages, requests, not_modified, retries, rate_limit_waits, items_seen, created, updated, renamed, \
    unchanged, missing, skipped_foreign, duration_ms, error FROM sync_runs";

impl Store {
    pub async fn start_run(
        &self,
        connection_id: &str,
        triggered_by: RunTrigger,
        worker: &str,
    ) -> Result<String> {
        self.start_run_as(None, connection_id, triggered_by, worker)
            .await
    }

    /// Like [`Store::start_run`], with the id `wanted` when given (a caller
    /// waiting for this very run chose it). A run of that id may exist
    /// already (its job was picked up again after its worker died): the new
    /// run then gets a fresh id.
    pub async fn start_run_as(
        &self,
        wanted: Option<&str>,
        connection_id: &str,
        triggered_by: RunTrigger,
        worker: &str,
    ) -> Result<String> {
        let now = now_ms();
        if let Some(id) = wanted {
            let n = on_pool!(self, pool => {
                sqlx::query(
                    "INSERT INTO sync_runs (id, connection_id, triggered_by, worker, outcome, started_at) \
                     VALUES ($1, $2, $3, $4, 'running', $5) ON CONFLICT (id) DO NOTHING",
                )
                .bind(id).bind(connection_id).bind(triggered_by.as_str()).bind(worker).bind(now)
                .execute(pool).await?.rows_affected()
            });
            if n == 1 {
                return Ok(id.to_owned());
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO sync_runs (id, connection_id, triggered_by, worker, outcome, started_at) \
                 VALUES ($1, $2, $3, $4, 'running', $5)",
            )
            .bind(&id).bind(connection_id).bind(triggered_by.as_str()).bind(worker).bind(now)
            .execute(pool).await?;
        });
        Ok(id)
    }

    pub async fn finish_run(
        &self,
        id: &str,
        outcome: RunOutcome,
        f: &RunFigures,
        error: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        on_pool!(self, pool => {
            sqlx::query(
                "UPDATE sync_runs SET outcome = $1, finished_at = $2, pages = $3, requests = $4, \
                 not_modified = $5, retries = $6, rate_limit_waits = $7, items_seen = $8, created = $9, \
                 updated = $10, renamed = $11, unchanged = $12, missing = $13, skipped_foreign = $14, \
                 duration_ms = $15, error = $16 WHERE id = $17",
            )
            .bind(outcome.as_str()).bind(now)
            .bind(i(f.pages)).bind(i(f.requests)).bind(i(f.not_modified)).bind(i(f.retries))
            .bind(i(f.rate_limit_waits)).bind(i(f.items_seen)).bind(i(f.created)).bind(i(f.updated))
            .bind(i(f.renamed)).bind(i(f.unchanged)).bind(i(f.missing)).bind(i(f.skipped_foreign))
            .bind(i(f.duration_ms)).bind(error).bind(id)
            .execute(pool).await?;
        });
        Ok(())
    }

    /// Ends a run still `running` as failed with `error`, keeping the
    /// figures its progress last wrote (a run whose work stopped on an
    /// error before it could record its end). Returns whether it was open.
    pub async fn fail_open_run(&self, id: &str, error: &str) -> Result<bool> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE sync_runs SET outcome = 'failed', finished_at = $1, error = $2 \
                 WHERE id = $3 AND outcome = 'running'",
            )
            .bind(now).bind(error).bind(id)
            .execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// The figures of a run still going, so its progress can be read
    /// before it ends. A run already finished is left as it is: a late
    /// progress write never overwrites its final figures.
    pub async fn record_run_progress(&self, id: &str, f: &RunFigures) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "UPDATE sync_runs SET pages = $1, requests = $2, not_modified = $3, retries = $4, \
                 rate_limit_waits = $5, items_seen = $6, created = $7, updated = $8, renamed = $9, \
                 unchanged = $10, skipped_foreign = $11 WHERE id = $12 AND outcome = 'running'",
            )
            .bind(i(f.pages)).bind(i(f.requests)).bind(i(f.not_modified)).bind(i(f.retries))
            .bind(i(f.rate_limit_waits)).bind(i(f.items_seen)).bind(i(f.created)).bind(i(f.updated))
            .bind(i(f.renamed)).bind(i(f.unchanged)).bind(i(f.skipped_foreign)).bind(id)
            .execute(pool).await?;
        });
        Ok(())
    }

    pub async fn get_run(&self, id: &str) -> Result<SyncRunRow> {
        let sql = format!("{SELECT} WHERE id = $1");
        let raw: Option<RawRun> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?
        });
        raw.ok_or_else(|| RegistryError::not_found(format!("sync run {id}")))?
            .try_into()
    }

    /// Newest first; all connections when `connection_id` is `None`.
    pub async fn list_runs(
        &self,
        connection_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<SyncRunRow>> {
        let sql = format!(
            "{SELECT} WHERE ($1 IS NULL OR connection_id = $1) ORDER BY started_at DESC, id DESC LIMIT $2"
        );
        let raws: Vec<RawRun> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(connection_id).bind(limit).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn last_run(&self, connection_id: &str) -> Result<Option<SyncRunRow>> {
        Ok(self
            .list_runs(Some(connection_id), 1)
            .await?
            .into_iter()
            .next())
    }
}

impl Store {
    /// Close the runs of a connection left `running` by a holder whose lease
    /// lapsed. Only the current lease holder may call this (`holder`); the
    /// check is part of the statement, so a caller without the lease closes
    /// nothing, and since the lease is not re-entrant no live run can be
    /// among those closed.
    pub async fn abandon_running_runs(&self, connection_id: &str, holder: &str) -> Result<u64> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE sync_runs SET outcome = 'failed', finished_at = $1, \
                 error = 'abandoned: its worker stopped before finishing' \
                 WHERE connection_id = $2 AND outcome = 'running' \
                 AND EXISTS (SELECT 1 FROM connections c WHERE c.id = $2 \
                   AND c.lease_owner = $3 AND c.lease_until >= $1)",
            )
            .bind(now).bind(connection_id).bind(holder).execute(pool).await?.rows_affected()
        });
        Ok(n)
    }
}
