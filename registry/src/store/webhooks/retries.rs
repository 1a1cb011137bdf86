//! Deliveries after their first attempt: retries that survive a restart,
//! the `failed` end state, replays an ADMIN asks for, and the reads behind
//! `deliveries list|show` and `/v1/deliveries`.
//!
//! A retry is a new `handle-delivery` job row due at a later time, written
//! in the same transaction that counts the attempt on the delivery: the
//! queue is durable, so a worker that dies between attempts loses nothing,
//! and no worker slot sleeps through a backoff.

use super::{
    DELIVERY_SELECT, DeliveryRow, DeliveryStatus, QueuedJob, RawDelivery, job_insert_sql, new_ulid,
};
use crate::error::{RegistryError, Result};
use crate::store::audit::{NewAuditEntry, insert_audit};
use crate::store::{Store, in_tx, now_ms, on_pool};

/// Which deliveries to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub status: Option<DeliveryStatus>,
    pub connection_id: Option<String>,
    /// At most this many (capped at 1,000).
    pub limit: usize,
}

impl Store {
    /// Count a failed attempt of a `received` delivery, keep its error, and
    /// queue its next job due at `run_at_ms`, in one transaction. Returns
    /// the attempts so far, or `None` when the delivery is no longer
    /// `received` (another copy of the job finished it).
    pub async fn retry_delivery_at(
        &self,
        id: &str,
        error: &str,
        run_at_ms: i64,
    ) -> Result<Option<i64>> {
        let backend = self.backend();
        let job = QueuedJob::handle_delivery(id);
        let attempts = in_tx!(self, tx => {
            let row: Option<(i64,)> = sqlx::query_as(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, error = $2, next_attempt_at = $3 \
                 WHERE id = $1 AND status = 'received' RETURNING attempts",
            )
            .bind(id).bind(error).bind(run_at_ms)
            .fetch_optional(&mut *tx).await?;
            if row.is_some() {
                insert_job!(&mut *tx, backend, &job, run_at_ms.div_euclid(1000))?;
            }
            row.map(|(n,)| n)
        });
        Ok(attempts)
    }

    /// Give a delivery back to the workers: `received` again with a fresh
    /// job, its attempts reset. Audited with who and why. Refused for one
    /// still `received` (its job is pending) or `ignored` (nothing to do).
    pub async fn replay_delivery(
        &self,
        id: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<String> {
        let row = self.get_delivery(id).await?;
        if !matches!(
            row.status,
            DeliveryStatus::Failed | DeliveryStatus::Processed
        ) {
            return Err(RegistryError::Invalid {
                what: format!(
                    "delivery {id:?} is {}; only failed or processed ones are replayed",
                    row.status.as_str()
                ),
            });
        }
        let backend = self.backend();
        let job = QueuedJob::handle_delivery(id);
        let now = now_ms();
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: "delivery.replayed".to_owned(),
            target: format!("delivery:{id}"),
            reason: reason.map(str::to_owned),
            before: Some(serde_json::json!({
                "status": row.status.as_str(),
                "attempts": row.attempts,
                "error": row.error,
            })),
            after: Some(serde_json::json!({ "status": "received" })),
        };
        let job_id = in_tx!(self, tx => {
            sqlx::query(
                "UPDATE webhook_deliveries SET status = 'received', attempts = 0, error = NULL, \
                 processed_at = NULL, next_attempt_at = NULL WHERE id = $1",
            )
            .bind(id).execute(&mut *tx).await?;
            let job_id = insert_job!(&mut *tx, backend, &job)?;
            insert_audit!(&mut *tx, &entry, now)?;
            job_id
        });
        Ok(job_id)
    }

    /// Deliveries matching `filter`, newest first.
    pub async fn find_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<DeliveryRow>> {
        let sql = format!(
            "{DELIVERY_SELECT} WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR connection_id = $2) \
             ORDER BY received_at DESC, id DESC LIMIT $3"
        );
        let status = filter.status.map(|s| s.as_str().to_owned());
        let limit = i64::try_from(filter.limit.clamp(1, 1000)).unwrap_or(1000);
        let raws: Vec<RawDelivery> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(&status).bind(&filter.connection_id).bind(limit)
                .fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// Deliveries per status, for metrics and the screen.
    pub async fn delivery_counts(&self) -> Result<Vec<(DeliveryStatus, i64)>> {
        let rows: Vec<(String, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT status, COUNT(*) FROM webhook_deliveries GROUP BY status ORDER BY status")
                .fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|(s, n)| {
                let status = s.parse().map_err(|_| RegistryError::Corrupt {
                    what: format!("delivery status {s:?}"),
                })?;
                Ok((status, n))
            })
            .collect()
    }
}
