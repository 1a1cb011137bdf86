//! Every metric the worker emits, declared once: sync runs at the job
//! level, the rate budgets of the fleet's credentials, delivery
//! processing, and the gauges a sampler reads from the store (the queues,
//! connections by status, the age of each platform's oldest complete
//! listing). Recording goes through the `metrics` facade: a no-op until a
//! process installs a recorder.
//!
//! Labels are bounded: platforms and outcomes are closed sets, a queue or
//! job status outside the known ones is `other`, and a budget is named by
//! its credential fingerprint (never the token).

use std::time::Duration;

use cmcp_domain::{ConnectionStatus, Platform};
use cmcp_registry::Store;

use crate::error::Result;

/// Sync runs by `platform` and `outcome` (`complete`, `partial`, `failed`,
/// `deferred`, or `error` when the job could not run the sync at all).
pub const SYNC_RUNS: &str = "cmcp_sync_runs_total";
/// Seconds a sync job spent on its run, by `platform`.
pub const SYNC_SECONDS: &str = "cmcp_sync_duration_seconds";
/// The budget's remaining requests as the platform last reported them, by
/// `credential` (fingerprint).
pub const BUDGET_REMAINING: &str = "cmcp_rate_budget_remaining";
/// Times a request found its credential's budget spent (it waited for the
/// reset, or its job was rescheduled for it), by `credential`.
pub const BUDGET_WAITS: &str = "cmcp_rate_budget_waits_total";
/// Jobs in the apalis tables by `queue` and `state`. A `handle-delivery`
/// job names every delivery one batch stored, so the deliveries waiting
/// are the gateway's `cmcp_webhook_stored_deliveries{status="received"}`.
pub const QUEUE_JOBS: &str = "cmcp_queue_jobs";
/// Per `queue`, how long the earliest due job has waited for a worker.
pub const QUEUE_OLDEST_SECONDS: &str = "cmcp_queue_oldest_job_age_seconds";
/// Connections by `status` (`held` ones wait for an ADMIN).
pub const CONNECTIONS: &str = "cmcp_connections";
/// Per `platform`, the longest any syncing connection has gone without a
/// complete listing.
pub const SYNC_STALENESS_SECONDS: &str = "cmcp_sync_oldest_complete_age_seconds";
/// Deliveries a worker processed, by `platform` and `outcome`.
pub const DELIVERIES_PROCESSED: &str = "cmcp_webhook_deliveries_processed_total";
/// Seconds to process one delivery (parse, re-read, apply), by `platform`.
pub const DELIVERY_SECONDS: &str = "cmcp_webhook_delivery_processing_seconds";

/// A run takes from well under a second (a small org, cached pages) to an
/// hour (50,000 repos under a tight budget).
pub const SYNC_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// A delivery re-reads one or a few entities.
pub const DELIVERY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Every histogram of this crate with its buckets, for the process that
/// installs the recorder.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (SYNC_SECONDS, SYNC_BUCKETS),
    (DELIVERY_SECONDS, DELIVERY_BUCKETS),
];

/// The queues a worker runs; any other `job_type` is `other`.
pub const QUEUES: [&str; 3] = [
    crate::jobs::sync_connection::QUEUE,
    crate::jobs::handle_delivery::QUEUE,
    crate::jobs::scheduled::SCHEDULED_QUEUE,
];
/// apalis's job statuses, as the `state` label spells them.
const STATES: [(&str, &str); 6] = [
    ("Pending", "pending"),
    ("Queued", "queued"),
    ("Running", "running"),
    ("Done", "done"),
    ("Failed", "failed"),
    ("Killed", "killed"),
];

cmcp_domain::string_enum! {
    /// What became of one sync job (the `outcome` label).
    pub enum SyncJobOutcome: "sync job outcome" {
        Complete = "complete",
        Partial = "partial",
        Failed = "failed",
        /// Another holder had the connection; the job waits for it.
        Deferred = "deferred",
        /// The sync could not run (the store failed, the connection is
        /// gone).
        JobFailed = "error",
    }
}

cmcp_domain::string_enum! {
    /// What became of one delivery a worker took (the `outcome` label).
    pub enum DeliveryOutcome: "delivery processing outcome" {
        Processed = "processed",
        /// Failed for good (unparseable, a permanent upstream refusal, or
        /// past the retry horizon).
        Failed = "failed",
        /// Failed for now; a later attempt is queued.
        Retry = "retry",
        /// Already finished by an earlier attempt.
        Skipped = "skipped",
        /// The job itself failed (the store); apalis tries it again.
        JobFailed = "error",
    }
}

pub fn sync_run(platform: Option<Platform>, outcome: SyncJobOutcome, elapsed: Duration) {
    let platform = platform.map_or("unknown", Platform::as_str);
    metrics::counter!(SYNC_RUNS, "platform" => platform, "outcome" => outcome.as_str())
        .increment(1);
    // A deferred job ran nothing: its few milliseconds would only blur
    // the durations of real runs.
    if outcome != SyncJobOutcome::Deferred {
        metrics::histogram!(SYNC_SECONDS, "platform" => platform).record(elapsed.as_secs_f64());
    }
}

pub fn delivery_processed(platform: Platform, outcome: DeliveryOutcome, elapsed: Duration) {
    metrics::counter!(DELIVERIES_PROCESSED, "platform" => platform.as_str(), "outcome" => outcome.as_str())
        .increment(1);
    metrics::histogram!(DELIVERY_SECONDS, "platform" => platform.as_str())
        .record(elapsed.as_secs_f64());
}

pub fn budget_remaining(credential: &str, remaining: i64) {
    metrics::gauge!(BUDGET_REMAINING, "credential" => credential.to_owned()).set(remaining as f64);
}

pub fn budget_in_use(credential: &str) {
    metrics::counter!(BUDGET_WAITS, "credential" => credential.to_owned()).increment(0);
}

pub fn budget_wait(credential: &str) {
    metrics::counter!(BUDGET_WAITS, "credential" => credential.to_owned()).increment(1);
}

fn queue_label(queue: &str) -> &'static str {
    QUEUES.into_iter().find(|q| *q == queue).unwrap_or("other")
}

fn state_label(status: &str) -> &'static str {
    STATES
        .into_iter()
        .find(|(s, _)| *s == status)
        .map_or("other", |(_, label)| label)
}

/// Read the store's gauges once: every known queue and state, and every
/// connection status, is set (0 when none), so a dashboard's series exist
/// from the first scrape and a drained queue reads 0, not stale.
pub async fn sample(store: &Store) -> Result<()> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut jobs = std::collections::BTreeMap::<(&str, &str), i64>::new();
    for q in QUEUES {
        for (_, s) in STATES {
            jobs.insert((q, s), 0);
        }
    }
    for (queue, status, n) in store.queue_job_counts().await? {
        *jobs
            .entry((queue_label(&queue), state_label(&status)))
            .or_default() += n;
    }
    for ((queue, state), n) in jobs {
        metrics::gauge!(QUEUE_JOBS, "queue" => queue, "state" => state).set(n as f64);
    }
    let mut oldest = std::collections::BTreeMap::<&str, f64>::new();
    for q in QUEUES {
        oldest.insert(q, 0.0);
    }
    for (queue, due_s) in store.oldest_waiting_jobs(now_ms / 1000).await? {
        let age = (now_ms / 1000 - due_s).max(0) as f64;
        let slot = oldest.entry(queue_label(&queue)).or_default();
        *slot = slot.max(age);
    }
    for (queue, age) in oldest {
        metrics::gauge!(QUEUE_OLDEST_SECONDS, "queue" => queue).set(age);
    }
    let counts = store.connection_status_counts().await?;
    for status in ConnectionStatus::ALL {
        let n = counts
            .iter()
            .filter(|(s, _)| s == status.as_str())
            .map(|(_, n)| *n)
            .sum::<i64>();
        metrics::gauge!(CONNECTIONS, "status" => status.as_str()).set(n as f64);
    }
    let stale = store.oldest_last_complete_runs().await?;
    for platform in Platform::ALL {
        let age = stale
            .iter()
            .filter(|(p, _)| p == platform.as_str())
            .map(|(_, at)| (now_ms - at).max(0) as f64 / 1000.0)
            .fold(0.0, f64::max);
        metrics::gauge!(SYNC_STALENESS_SECONDS, "platform" => platform.as_str()).set(age);
    }
    Ok(())
}

/// Help texts for the exporter, the drift counter's included.
pub fn describe() {
    crate::drift::describe();
    metrics::describe_counter!(SYNC_RUNS, "Sync jobs by platform and outcome");
    metrics::describe_histogram!(
        SYNC_SECONDS,
        metrics::Unit::Seconds,
        "Time a sync job spent on its run"
    );
    metrics::describe_gauge!(
        BUDGET_REMAINING,
        "Requests left in a credential's rate budget, as the platform last reported"
    );
    metrics::describe_counter!(
        BUDGET_WAITS,
        "Requests held back because their credential's rate budget was spent"
    );
    metrics::describe_gauge!(QUEUE_JOBS, "Jobs in the queue tables by queue and state");
    metrics::describe_gauge!(
        QUEUE_OLDEST_SECONDS,
        metrics::Unit::Seconds,
        "How long the earliest due job of a queue has waited for a worker"
    );
    metrics::describe_gauge!(CONNECTIONS, "Connections by status");
    metrics::describe_gauge!(
        SYNC_STALENESS_SECONDS,
        metrics::Unit::Seconds,
        "Longest time any syncing connection of the platform has gone without a complete listing"
    );
    metrics::describe_counter!(
        DELIVERIES_PROCESSED,
        "Webhook deliveries processed by a worker, by platform and outcome"
    );
    metrics::describe_histogram!(
        DELIVERY_SECONDS,
        metrics::Unit::Seconds,
        "Time to process one webhook delivery"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_outside_the_known_sets_are_other() {
        assert_eq!(queue_label("sync-connection"), "sync-connection");
        assert_eq!(queue_label("evil\nqueue"), "other");
        assert_eq!(state_label("Pending"), "pending");
        assert_eq!(state_label("Weird"), "other");
    }
}
