//! `handle_delivery`: turn one stored webhook delivery into a targeted
//! refresh.
//!
//! The gateway stored the delivery (verified at receipt) and this job in one
//! transaction. Here the stored bytes are parsed again by the platform's own
//! code (`cmcp_connectors::webhook`), which also says what the event asks
//! for (its [`Plan`]); each affected entity is re-read by its stable id
//! through `Connector::read`, then applied with `Store::apply_page`, the
//! same path as a sync. A payload is
//! never trusted for the entity's state: it only says what to re-read, so a
//! late or reordered delivery cannot roll the registry back. A deletion is
//! believed only when the direct read answers Gone, and then only on the
//! connection's authority (`gone::confirm_gone`); an access change
//! (`Plan::Recheck`) never deletes. Every connector comes from the one
//! factory (`budget::connector`), so every platform with a connector is served.
//!
//! Events that change more than one entity's identity (an org rename) queue
//! a full sync instead; a change notification (Drive's) reads the
//! connector's change feed through `change_feed::run_incremental`.

use std::sync::Arc;
use std::time::Instant;

use apalis::prelude::{BoxDynError, Data};
use cmcp_connectors::webhook::{HookEvent, Plan};
use cmcp_domain::{RiskCode, RiskNotice, RunTrigger, SpaceAddress};
use cmcp_registry::{DeliveryStatus, NewAuditEntry, StoredDelivery};
use tokio::sync::Semaphore;
use tracing::{Instrument, info, instrument, warn};

use crate::error::{Result, WorkerError};
use crate::jobs::sync_connection::{SyncConnection, backoff};
use crate::metrics::{self, DeliveryOutcome};
use crate::queue::{Job, Queue};
use crate::sync::SyncContext;

pub const NAME: &str = "handle_delivery";
pub use cmcp_registry::store::HANDLE_DELIVERY_QUEUE as QUEUE;

impl Job for HandleDelivery {
    const QUEUE: &'static str = QUEUE;
}

/// The job's arguments, as the store writes them: `{"delivery_id": …}`
/// for one delivery, `{"delivery_ids": [...]}` for the deliveries a batch
/// stored together.
pub use cmcp_registry::DeliveryJob as HandleDelivery;

/// The deliveries one worker process handles at once, across its jobs: a
/// batch's job names many, and the worker's `concurrency` bounds the
/// deliveries in flight (upstream reads, store writes), not the jobs.
#[derive(Debug, Clone)]
pub struct DeliverySlots(Arc<Semaphore>);

impl DeliverySlots {
    pub fn new(concurrency: usize) -> DeliverySlots {
        DeliverySlots(Arc::new(Semaphore::new(concurrency.max(1))))
    }
}

/// Handle every delivery the job names, each on its own (processed,
/// failed or retried later, as one job a delivery was). The job fails only
/// when a delivery could not be handled at all (the store unreachable, the
/// row unreadable): apalis then runs it again, and the deliveries it
/// finished the first time are skipped.
#[instrument(skip_all, fields(job = NAME, deliveries = job.ids().len()))]
pub async fn handle(
    job: HandleDelivery,
    ctx: Data<SyncContext>,
    queue: Data<Queue<SyncConnection>>,
    slots: Data<DeliverySlots>,
) -> std::result::Result<String, BoxDynError> {
    handle_all(&job, &ctx, &queue, &slots).await
}

/// [`handle`] without apalis's wrappers.
pub async fn handle_all(
    job: &HandleDelivery,
    ctx: &SyncContext,
    queue: &Queue<SyncConnection>,
    slots: &DeliverySlots,
) -> std::result::Result<String, BoxDynError> {
    let runs = job.ids().iter().map(|id| {
        let span = tracing::info_span!("delivery", delivery_id = %id);
        async {
            // The semaphore is never closed.
            let _slot = slots.0.acquire().await;
            handle_one(ctx, queue, id).await
        }
        .instrument(span)
    });
    let results = futures::future::join_all(runs).await;
    let mut done = Vec::with_capacity(results.len());
    let mut failed = None;
    for (id, result) in job.ids().iter().zip(results) {
        match result {
            Ok(d) if job.ids().len() == 1 => done.push(d),
            Ok(d) => done.push(format!("{id}: {d}")),
            Err(e) => {
                warn!(delivery_id = %id, error = %e, "delivery not handled; its job runs again");
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(done.join("; ")),
    }
}

async fn handle_one(
    ctx: &SyncContext,
    queue: &Queue<SyncConnection>,
    id: &str,
) -> std::result::Result<String, BoxDynError> {
    let started = Instant::now();
    let row = ctx.store.stored_delivery(id).await?;
    let result = process(ctx, queue, &row).await;
    let outcome = match &result {
        Ok((outcome, _)) => *outcome,
        Err(_) => DeliveryOutcome::JobFailed,
    };
    metrics::delivery_processed(row.platform(), outcome, started.elapsed());
    Ok(result?.1)
}

/// The delivery's processing, with what became of it.
async fn process(
    ctx: &SyncContext,
    queue: &Queue<SyncConnection>,
    row: &StoredDelivery,
) -> std::result::Result<(DeliveryOutcome, String), BoxDynError> {
    let store = &ctx.store;
    if row.status() != DeliveryStatus::Received {
        let done = format!("already {}", row.status().as_str());
        return Ok((DeliveryOutcome::Skipped, done));
    }
    let event = match HookEvent::parse(row.platform(), row.headers(), row.body()) {
        Ok(e) => e,
        Err(e) => {
            store
                .finish_delivery(row.id(), DeliveryStatus::Failed, Some(&e.to_string()))
                .await?;
            return Ok((DeliveryOutcome::Failed, format!("failed: {e}")));
        }
    };
    let plan = event.plan();
    match apply(ctx, queue, row, &plan).await {
        Ok(done) => {
            store
                .finish_delivery(row.id(), DeliveryStatus::Processed, None)
                .await?;
            info!(connection_id = %row.connection_id(), event = %row.event(), %done, "delivery processed");
            Ok((DeliveryOutcome::Processed, done))
        }
        Err(e) if e.intent().is_permanent() => {
            // A rejected credential or a missing permission does not pass
            // by retrying: the delivery fails now, with the reason.
            store
                .finish_delivery(row.id(), DeliveryStatus::Failed, Some(&e.to_string()))
                .await?;
            warn!(connection_id = %row.connection_id(), event = %row.event(), error = %e, "delivery failed for good; not retried");
            Ok((DeliveryOutcome::Failed, format!("failed: {e}")))
        }
        Err(e) => retry_later(ctx, row, &e.to_string()).await,
    }
}

/// A failure that may pass (upstream down, rate limited, the connection
/// busy): count it and queue the next attempt with exponential backoff and
/// jitter, as a durable job due later, until the horizon after arrival;
/// then the delivery is `failed` with its last error. The job itself ends
/// well either way, so apalis's own quick retries are not spent on it.
async fn retry_later(
    ctx: &SyncContext,
    row: &StoredDelivery,
    error: &str,
) -> std::result::Result<(DeliveryOutcome, String), BoxDynError> {
    let cfg = &ctx.sync;
    let attempts = u32::try_from(row.attempts()).unwrap_or(u32::MAX);
    let now = chrono::Utc::now().timestamp_millis();
    let delay = backoff(attempts, cfg.delivery_retry_min, cfg.delivery_retry_max);
    let at = now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
    let horizon = i64::try_from(cfg.delivery_retry_horizon.as_millis()).unwrap_or(i64::MAX);
    if at > row.received_at().saturating_add(horizon) {
        let why = format!("gave up after {} attempts: {error}", attempts + 1);
        ctx.store
            .finish_delivery(row.id(), DeliveryStatus::Failed, Some(&why))
            .await?;
        warn!(connection_id = %row.connection_id(), event = %row.event(), error = %why, "delivery failed: retry horizon reached");
        return Ok((DeliveryOutcome::Failed, format!("failed: {why}")));
    }
    match ctx.store.retry_delivery_at(row.id(), error, at).await? {
        Some(n) => {
            warn!(connection_id = %row.connection_id(), event = %row.event(), attempts = n, retry_in_ms = delay.as_millis() as u64, %error, "delivery processing failed; retry queued");
            Ok((
                DeliveryOutcome::Retry,
                format!("retry {n} queued in {delay:?}: {error}"),
            ))
        }
        None => Ok((
            DeliveryOutcome::Skipped,
            "already finished by another attempt".to_owned(),
        )),
    }
}

async fn apply(
    ctx: &SyncContext,
    queue: &Queue<SyncConnection>,
    row: &StoredDelivery,
    plan: &Plan,
) -> Result<String> {
    match plan {
        Plan::Nothing(why) => Ok(format!("nothing to do: {why}")),
        Plan::FullSync(why) => full_sync(queue, row, why).await,
        Plan::ChangeFeed => {
            match crate::change_feed::run_incremental(ctx, row.connection_id()).await? {
                crate::change_feed::IncrementalOutcome::Applied(r) => Ok(format!(
                    "feed changes applied: {} changes, {} created, {} renamed, {} tombstoned",
                    r.changes, r.created, r.renamed, r.tombstoned
                )),
                crate::change_feed::IncrementalOutcome::FullSync(_) => {
                    Ok("no feed positions yet: a full sync ran".to_owned())
                }
                // A run that may have started before this change holds the
                // connection: fail so apalis tries again after it.
                crate::change_feed::IncrementalOutcome::Deferred { holder, .. } => {
                    Err(WorkerError::Sync {
                        connection_id: row.connection_id().to_owned(),
                        detail: format!(
                            "{holder} holds the connection; feed changes retried later"
                        ),
                    })
                }
            }
        }
        Plan::HookDeleted => {
            let conn = ctx.store.get_connection(row.connection_id()).await?;
            let mut risks = conn.risks.clone();
            if !risks.iter().any(|r| r.code == RiskCode::WebhookDeleted) {
                risks.push(RiskNotice {
                    code: RiskCode::WebhookDeleted,
                    message: "the platform reports this connection's webhook was deleted; changes now arrive only with scheduled syncs".to_owned(),
                });
            }
            ctx.store.set_connection_risks(&conn.id, &risks).await?;
            ctx.store
                .append_audit(&NewAuditEntry {
                    actor: "webhook".to_owned(),
                    action: "connection.webhook-deleted".to_owned(),
                    target: format!("connection:{}", conn.id),
                    reason: Some(format!("delivery {}", row.id())),
                    before: None,
                    after: None,
                })
                .await?;
            Ok("connection flagged: webhook deleted".to_owned())
        }
        Plan::Refresh(targets) | Plan::Recheck(targets) => {
            // Only a plain refresh may end in a tombstone.
            let may_delete = matches!(plan, Plan::Refresh(_));
            let conn = ctx.store.get_connection(row.connection_id()).await?;
            let mut done = Vec::new();
            // Built like a sync's: the re-reads spend the fleet's budget.
            let c = crate::budget::connector(&ctx.store, &ctx.cipher, &ctx.http, &conn).await??;
            for (kind, id) in targets {
                let Some(tenant) = ctx.store.connection_tenant(&conn.id, *kind).await? else {
                    // Never synced: the first sync reads everything anyway.
                    return full_sync(queue, row, "connection not synced yet").await;
                };
                let address =
                    SpaceAddress::new(*kind, &tenant, id).map_err(|e| WorkerError::Sync {
                        connection_id: conn.id.clone(),
                        detail: format!("cannot address {kind} {id}: {e}"),
                    })?;
                let outcome = c.read(&address).await?;
                match outcome {
                    cmcp_connectors::ReadOutcome::Found(record) => {
                        let stats = ctx
                            .store
                            .apply_page(&conn.id, &conn.owner, &[record])
                            .await?;
                        done.push(format!(
                            "{address}: {} created, {} updated, {} renamed",
                            stats.created, stats.updated, stats.renamed
                        ));
                    }
                    cmcp_connectors::ReadOutcome::Gone if may_delete => {
                        let outcome =
                            crate::gone::confirm_gone(&ctx.store, &*c, &conn.id, &address).await?;
                        done.push(format!("{address}: gone ({outcome:?})"));
                    }
                    cmcp_connectors::ReadOutcome::Gone => {
                        crate::gone::lose_access(&ctx.store, &conn.id, &address).await?;
                        done.push(format!("{address}: out of sight (access lost)"));
                    }
                }
            }
            Ok(done.join("; "))
        }
    }
}

/// Queue a full sync of the delivery's connection, once per delivery even
/// if this job runs again.
async fn full_sync(
    queue: &Queue<SyncConnection>,
    row: &StoredDelivery,
    why: &str,
) -> Result<String> {
    queue
        .push(
            SyncConnection::new(row.connection_id(), RunTrigger::Webhook),
            None,
            Some(format!("delivery:{}", row.id())),
        )
        .await?;
    Ok(format!("full sync queued: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_arguments_read_the_stores_payload() {
        let job = cmcp_registry::QueuedJob::handle_delivery("01XYZ");
        let args: HandleDelivery = serde_json::from_slice(&job.payload).unwrap();
        assert_eq!(args.ids(), ["01XYZ"]);
        assert_eq!(job.queue, QUEUE);
    }
}
