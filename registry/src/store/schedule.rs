//! Schedule ticks: exactly one job per (schedule, connection, tick) for the
//! whole fleet. Every scheduler of every process claims the ticks it sees
//! come due; the primary key of `schedule_ticks` lets one claim win, and the
//! winner's job row is written in the same transaction, so a tick is never
//! claimed without its job nor queued twice, on SQLite or PostgreSQL.

use super::webhooks::{QueuedJob, job_insert_sql, new_ulid};
use super::{Store, in_tx, now_ms};
use crate::error::Result;

impl Store {
    /// Claim `tick_at_ms` of `schedule` for `connection_id` and, when this
    /// call won the claim, queue `job` to run at `run_at_ms`. Returns
    /// whether it won.
    pub async fn claim_tick(
        &self,
        schedule: &str,
        connection_id: &str,
        tick_at_ms: i64,
        job: &QueuedJob,
        run_at_ms: i64,
    ) -> Result<bool> {
        let backend = self.backend();
        let now = now_ms();
        let won = in_tx!(self, tx => {
            let n = sqlx::query(
                "INSERT INTO schedule_ticks (schedule, connection_id, tick_at, queued_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (schedule, connection_id, tick_at) DO NOTHING",
            )
            .bind(schedule).bind(connection_id).bind(tick_at_ms).bind(now)
            .execute(&mut *tx).await?.rows_affected();
            if n == 1 {
                sqlx::query(job_insert_sql(backend))
                    .bind(&job.payload)
                    .bind(new_ulid())
                    .bind(&job.queue)
                    .bind(job.max_attempts)
                    .bind(run_at_ms / 1000)
                    .execute(&mut *tx).await?;
            }
            n == 1
        });
        Ok(won)
    }

    /// The ticks claimed of `schedule`, as (connection, tick) pairs in
    /// order: what a fleet's schedulers queued.
    pub async fn claimed_ticks(&self, schedule: &str) -> Result<Vec<(String, i64)>> {
        let rows: Vec<(String, i64)> = super::on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT connection_id, tick_at FROM schedule_ticks WHERE schedule = $1 ORDER BY tick_at, connection_id",
            )
            .bind(schedule).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Forget claims of ticks before `before_ms` (they can never come due
    /// again). Returns how many went.
    pub async fn prune_ticks(&self, before_ms: i64) -> Result<u64> {
        let n = super::on_pool!(self, pool => {
            sqlx::query("DELETE FROM schedule_ticks WHERE tick_at < $1")
                .bind(before_ms).execute(pool).await?.rows_affected()
        });
        Ok(n)
    }
}
