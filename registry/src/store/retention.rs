//! Retention: what a week of history no longer needs. Rows that say what
//! happened stay (a delivery and its outcome); what only made the database
//! grow goes (bodies already handled, old runs, finished jobs, page-cache
//! rows nobody refreshed).

use serde::Serialize;

use super::{Backend, Store, on_pool};
use crate::error::Result;

/// What one pruning removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub delivery_bodies: u64,
    /// Rows of processed and ignored deliveries past their keep.
    pub deliveries: u64,
    pub runs: u64,
    pub drift_changes: u64,
    pub finished_jobs: u64,
    pub page_cache_rows: u64,
    pub schedule_ticks: u64,
    /// Rows of the change feed past their keep.
    pub changes: u64,
}

/// The cut-off times (epoch milliseconds) before which each kind goes.
#[derive(Debug, Clone, Copy)]
pub struct PruneBefore {
    pub delivery_bodies: i64,
    /// Processed and ignored deliveries received before this go whole
    /// (failed ones and those still to process stay).
    pub deliveries: i64,
    pub runs: i64,
    pub finished_jobs: i64,
    pub page_cache: i64,
    /// Change-feed rows written before this go, oldest first (a reader
    /// still behind them is then told so, never given a hole).
    pub changes: i64,
}

impl Store {
    /// Remove what is older than the cut-offs, in short statements (each
    /// its own transaction, so pruning never holds writers back for long).
    pub async fn prune(&self, before: &PruneBefore) -> Result<Pruned> {
        let empty: Vec<u8> = Vec::new();
        let delivery_bodies = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhook_deliveries SET body = $1 WHERE status IN ('processed', 'ignored') \
                 AND processed_at < $2 AND length(body) > 0",
            )
            .bind(&empty).bind(before.delivery_bodies).execute(pool).await?.rows_affected()
        });
        let deliveries = self.prune_deliveries(before.deliveries).await?;
        let drift_changes = on_pool!(self, pool => {
            sqlx::query("DELETE FROM drift_changes WHERE at < $1")
                .bind(before.runs).execute(pool).await?.rows_affected()
        });
        let runs = on_pool!(self, pool => {
            sqlx::query("DELETE FROM sync_runs WHERE outcome <> 'running' AND finished_at < $1")
                .bind(before.runs).execute(pool).await?.rows_affected()
        });
        let page_cache_rows = on_pool!(self, pool => {
            sqlx::query("DELETE FROM http_cache WHERE fetched_at < $1")
                .bind(before.page_cache).execute(pool).await?.rows_affected()
        });
        let schedule_ticks = self.prune_ticks(before.runs).await?;
        let finished_jobs = self.prune_finished_jobs(before.finished_jobs).await?;
        let changes = self.prune_changes(before.changes).await?;
        Ok(Pruned {
            delivery_bodies,
            deliveries,
            runs,
            drift_changes,
            finished_jobs,
            page_cache_rows,
            schedule_ticks,
            changes,
        })
    }

    /// The change feed's rows written before `before_ms`, up to the newest
    /// such row every reader may already have read (PostgreSQL: written by
    /// a transaction older than every one still running, so no row can
    /// commit later below it). The position pruned through is recorded
    /// first: from then on a cursor behind it is refused, and a manifest
    /// diff from behind it is answered whole, so no reader ever reads past
    /// the hole without being told.
    pub async fn prune_changes(&self, before_ms: i64) -> Result<u64> {
        const BATCH: i64 = 5_000;
        let horizon = match self.backend() {
            Backend::Sqlite => "1 = 1",
            Backend::Postgres => super::changes::PG_HORIZON,
        };
        let sql = format!(
            "SELECT tx, id FROM space_changes WHERE at < $1 AND {horizon} \
             ORDER BY tx DESC, id DESC LIMIT 1"
        );
        let through: Option<(i64, i64)> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(before_ms).fetch_optional(pool).await?
        });
        let Some((tx, id)) = through else {
            return Ok(0);
        };
        let now = chrono::Utc::now().timestamp_millis();
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO space_changes_pruned (one, tx, id, pruned_at) VALUES (1, $1, $2, $3) \
                 ON CONFLICT (one) DO UPDATE SET tx = excluded.tx, id = excluded.id, pruned_at = excluded.pruned_at \
                 WHERE (space_changes_pruned.tx, space_changes_pruned.id) < (excluded.tx, excluded.id)",
            )
            .bind(tx).bind(id).bind(now).execute(pool).await?;
        });
        // SQLite's `tx` is always 0 (see `changes_settled`): the id alone
        // is the position there, and walks its primary key.
        let mut total = 0;
        loop {
            let n = match self {
                Store::Sqlite(pool) => sqlx::query(
                    "DELETE FROM space_changes WHERE id IN \
                     (SELECT id FROM space_changes WHERE id <= $1 ORDER BY id LIMIT $2)",
                )
                .bind(id)
                .bind(BATCH)
                .execute(pool)
                .await?
                .rows_affected(),
                Store::Postgres(pool) => sqlx::query(
                    "DELETE FROM space_changes WHERE (tx, id) IN \
                     (SELECT tx, id FROM space_changes WHERE (tx, id) <= ($1, $2) ORDER BY tx, id LIMIT $3)",
                )
                .bind(tx)
                .bind(id)
                .bind(BATCH)
                .execute(pool)
                .await?
                .rows_affected(),
            };
            total += n;
            if n < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Processed and ignored delivery rows received before `before_ms`, in
    /// batches so that a first prune of a long history never holds the
    /// writers (the gateway's acceptance) back for long.
    async fn prune_deliveries(&self, before_ms: i64) -> Result<u64> {
        const BATCH: i64 = 5_000;
        let mut total = 0;
        loop {
            let n = on_pool!(self, pool => {
                sqlx::query(
                    "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries \
                     WHERE status IN ('processed', 'ignored') AND received_at < $1 LIMIT $2)",
                )
                .bind(before_ms).bind(BATCH).execute(pool).await?.rows_affected()
            });
            total += n;
            if n < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Jobs apalis finished (done, killed, or failed for the last time)
    /// before `before_ms`, on either queue backend.
    async fn prune_finished_jobs(&self, before_ms: i64) -> Result<u64> {
        let finished =
            "(status IN ('Done', 'Killed') OR (status = 'Failed' AND attempts >= max_attempts))";
        let sql = match self.backend() {
            Backend::Sqlite => {
                format!(
                    "DELETE FROM Jobs WHERE {finished} AND done_at IS NOT NULL AND done_at < $1"
                )
            }
            Backend::Postgres => format!(
                "DELETE FROM apalis.jobs WHERE {finished} AND done_at IS NOT NULL AND done_at < to_timestamp($1::bigint)"
            ),
        };
        let n = on_pool!(self, pool => {
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(before_ms / 1000).execute(pool).await?.rows_affected()
        });
        Ok(n)
    }
}
