//! What the metrics sampler reads from the store: the apalis queue tables
//! (jobs by queue and status, the oldest job waiting past its due time),
//! connections by status, and how long ago each platform's least recently
//! complete connection last completed a listing. Read only, one grouped
//! query each, on either backend.

use super::{Backend, Store, on_pool};
use crate::error::Result;

/// Statuses of a syncing connection (it is read and should complete).
const SYNCING: &str = "('enabled', 'held', 'rejected')";

impl Store {
    /// `(queue, status, jobs)` for every queue and apalis status present.
    pub async fn queue_job_counts(&self) -> Result<Vec<(String, String, i64)>> {
        let sql = match self.backend() {
            Backend::Sqlite => {
                "SELECT job_type, status, COUNT(*) FROM Jobs GROUP BY job_type, status"
            }
            Backend::Postgres => {
                "SELECT job_type, status, COUNT(*) FROM apalis.jobs GROUP BY job_type, status"
            }
        };
        let rows: Vec<(String, String, i64)> = on_pool!(self, pool => {
            sqlx::query_as(sql).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// `(queue, due_at_s)`: per queue, the due time (epoch seconds) of the
    /// earliest job that is due by `now_s` and still waits for a worker.
    /// A queue with none is absent.
    pub async fn oldest_waiting_jobs(&self, now_s: i64) -> Result<Vec<(String, i64)>> {
        let sql = match self.backend() {
            Backend::Sqlite => {
                "SELECT job_type, MIN(run_at) FROM Jobs \
                 WHERE status IN ('Pending', 'Queued') AND run_at <= $1 GROUP BY job_type"
            }
            Backend::Postgres => {
                "SELECT job_type, CAST(EXTRACT(EPOCH FROM MIN(run_at)) AS BIGINT) FROM apalis.jobs \
                 WHERE status IN ('Pending', 'Queued') AND run_at <= to_timestamp($1::bigint) \
                 GROUP BY job_type"
            }
        };
        let rows: Vec<(String, i64)> = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(now_s).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// `(status, connections)` for every status present.
    pub async fn connection_status_counts(&self) -> Result<Vec<(String, i64)>> {
        let rows: Vec<(String, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT status, COUNT(*) FROM connections GROUP BY status")
                .fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// `(platform, at_ms)`: per platform, the oldest of its syncing
    /// connections' last complete runs (a connection that never completed
    /// counts from its creation). `now - at_ms` is how long the worst
    /// connection of the platform has gone without a complete listing.
    pub async fn oldest_last_complete_runs(&self) -> Result<Vec<(String, i64)>> {
        let sql = format!(
            "SELECT c.platform, MIN(COALESCE(( \
                 SELECT MAX(r.finished_at) FROM sync_runs r \
                 WHERE r.connection_id = c.id AND r.outcome = 'complete'), c.created_at)) \
             FROM connections c WHERE c.status IN {SYNCING} GROUP BY c.platform"
        );
        let rows: Vec<(String, i64)> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
        });
        Ok(rows)
    }
}
