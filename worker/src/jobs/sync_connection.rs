//! `sync_connection`: read one connection's whole catalogue into the
//! registry.
//!
//! Retries are the job's own and follow the run's [`RetryIntent`]: a run
//! that failed in a way time may cure (5xx, dropped connections) queues its
//! successor with exponential backoff and jitter, a rate-limited one at the
//! platform's reset time, each as a new durable job. A permanent failure (a
//! rejected credential, a missing permission or organisation) queues
//! nothing: the connection needs an operator. A worker slot is never held
//! asleep, and a restart loses no retry.

use std::time::{Duration, Instant};

use apalis::prelude::{BoxDynError, Data};
use cmcp_connectors::RetryIntent;
use cmcp_domain::{RunOutcome, RunTrigger};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tracing::{error, instrument, warn};

use crate::metrics::{self, SyncJobOutcome};
use crate::queue::{Job, Queue, QueueConfig};
use crate::sync::{SyncContext, SyncOutcome};

pub const NAME: &str = "sync_connection";
/// The queue's fixed name.
pub const QUEUE: &str = "sync-connection";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncConnection {
    pub connection_id: String,
    /// Who asked.
    pub trigger: RunTrigger,
    /// 0 for a first try; retries count up.
    #[serde(default)]
    pub attempt: u32,
    /// The id the run gets, chosen by a caller that waits for this very run
    /// (`sync --wait`). A deferred job keeps it; a retry is another run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Job for SyncConnection {
    const QUEUE: &'static str = QUEUE;
}

impl SyncConnection {
    pub fn new(connection_id: impl Into<String>, trigger: RunTrigger) -> Self {
        SyncConnection {
            connection_id: connection_id.into(),
            trigger,
            attempt: 0,
            run_id: None,
        }
    }

    /// A job whose run gets a fresh id, known before it runs: the caller
    /// can wait for exactly that run (`Store::get_run`).
    pub fn awaited(connection_id: impl Into<String>, trigger: RunTrigger) -> Self {
        SyncConnection {
            run_id: Some(uuid::Uuid::new_v4().to_string()),
            ..SyncConnection::new(connection_id, trigger)
        }
    }
}

/// Exponential backoff with jitter: `min · 2^attempt`, capped at `max`, then
/// a random point in its upper half so that a fleet's retries spread out.
pub fn backoff(attempt: u32, min: Duration, max: Duration) -> Duration {
    let exp = min.saturating_mul(2u32.saturating_pow(attempt.min(20)));
    let capped = exp.min(max);
    let half = capped / 2;
    let jitter_ms =
        rand::rng().random_range(0..=u64::try_from(half.as_millis()).unwrap_or(u64::MAX).max(1));
    half + Duration::from_millis(jitter_ms)
}

#[instrument(skip_all, fields(job = NAME, connection_id = %job.connection_id, attempt = job.attempt))]
pub async fn handle(
    job: SyncConnection,
    ctx: Data<SyncContext>,
    queue: Data<Queue<SyncConnection>>,
    cfg: Data<QueueConfig>,
) -> Result<String, BoxDynError> {
    Ok(run(&job, &ctx, &queue, &cfg).await?)
}

/// The job itself, apart from apalis: sync the connection, then queue its
/// successor when the run says so. Returns what the job reports.
pub async fn run(
    job: &SyncConnection,
    ctx: &SyncContext,
    queue: &Queue<SyncConnection>,
    cfg: &QueueConfig,
) -> crate::Result<String> {
    // A connector with a change feed also records where each feed starts,
    // so notifications can read only what changed since.
    let started = Instant::now();
    let result = crate::change_feed::run_full_as(
        ctx,
        &job.connection_id,
        job.trigger,
        job.run_id.as_deref(),
    )
    .await;
    let platform = ctx
        .store
        .get_connection(&job.connection_id)
        .await
        .ok()
        .map(|c| c.platform);
    let outcome = match &result {
        Ok(SyncOutcome::Complete { .. }) => SyncJobOutcome::Complete,
        Ok(SyncOutcome::Partial { .. }) => SyncJobOutcome::Partial,
        Ok(SyncOutcome::Failed { .. }) => SyncJobOutcome::Failed,
        Ok(SyncOutcome::Deferred { .. }) => SyncJobOutcome::Deferred,
        Err(_) => SyncJobOutcome::JobFailed,
    };
    metrics::sync_run(platform, outcome, started.elapsed());
    match result? {
        SyncOutcome::Deferred { holder, until_ms } => {
            // The holder's run is its own business: this job only waits for
            // the lease to end, then runs.
            let delay = crate::lease::deferral_delay(until_ms, ctx.sync.lease_ttl)
                + backoff(0, Duration::from_millis(200), Duration::from_secs(2));
            queue.push(job.clone(), Some(delay), None).await?;
            Ok(format!(
                "deferred: {holder} holds the connection; retrying in {delay:?}"
            ))
        }
        SyncOutcome::Complete { run_id, figures } => Ok(format!(
            "complete: run {run_id}, {} seen, {} created, {} renamed, {} missing",
            figures.items_seen, figures.created, figures.renamed, figures.missing
        )),
        SyncOutcome::Partial {
            run_id,
            why,
            intent,
            ..
        } => retry(job, queue, cfg, RunOutcome::Partial, &run_id, &why, intent).await,
        SyncOutcome::Failed {
            run_id,
            why,
            intent,
            ..
        } => retry(job, queue, cfg, RunOutcome::Failed, &run_id, &why, intent).await,
    }
}

/// When the job's successor should run, if at all.
fn next_delay(job: &SyncConnection, cfg: &QueueConfig, intent: RetryIntent) -> Option<Duration> {
    match intent {
        RetryIntent::Permanent => None,
        _ if job.attempt + 1 >= cfg.max_attempts => None,
        RetryIntent::RetryAfter(at) => Some(
            (at - chrono::Utc::now()).to_std().unwrap_or_default()
                + backoff(0, Duration::from_millis(500), Duration::from_secs(5)),
        ),
        RetryIntent::Transient => Some(backoff(
            job.attempt,
            cfg.retry_backoff_min,
            cfg.retry_backoff_max,
        )),
    }
}

/// Queue the successor of a run that did not complete, as its intent says.
async fn retry(
    job: &SyncConnection,
    queue: &Queue<SyncConnection>,
    cfg: &QueueConfig,
    outcome: RunOutcome,
    run_id: &str,
    why: &str,
    intent: RetryIntent,
) -> crate::Result<String> {
    let Some(delay) = next_delay(job, cfg, intent) else {
        if intent.is_permanent() {
            error!(run_id, outcome = outcome.as_str(), error = %why, "sync failed and will not be retried: the connection needs attention");
            return Ok(format!("{}: {why}", outcome.as_str()));
        }
        error!(run_id, attempts = job.attempt + 1, error = %why, "sync gave up after its last attempt");
        return Ok(format!("gave up after {} attempts: {why}", job.attempt + 1));
    };
    let next = SyncConnection {
        attempt: job.attempt + 1,
        trigger: RunTrigger::Retry,
        run_id: None,
        ..job.clone()
    };
    queue.push(next, Some(delay), None).await?;
    warn!(run_id, outcome = outcome.as_str(), error = %why, retry_in_ms = delay.as_millis() as u64, "sync incomplete; retry queued");
    Ok(format!(
        "{}: {why}; retry {} in {delay:?}",
        outcome.as_str(),
        job.attempt + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let min = Duration::from_secs(1);
        let max = Duration::from_secs(60);
        for attempt in 0..10 {
            let d = backoff(attempt, min, max);
            let full = (min * 2u32.pow(attempt)).min(max);
            assert!(
                d >= full / 2 && d <= full + Duration::from_millis(1),
                "attempt {attempt}: {d:?} vs {full:?}"
            );
        }
        let samples: std::collections::HashSet<_> = (0..20).map(|_| backoff(5, min, max)).collect();
        assert!(samples.len() > 1, "jitter must vary the delay");
    }

    #[test]
    fn only_a_passing_failure_is_tried_again() {
        let cfg = QueueConfig::default();
        let job = SyncConnection::new("c", RunTrigger::Test);
        assert_eq!(next_delay(&job, &cfg, RetryIntent::Permanent), None);
        assert!(next_delay(&job, &cfg, RetryIntent::Transient).is_some());
        let at = chrono::Utc::now() + chrono::TimeDelta::minutes(10);
        let delay = next_delay(&job, &cfg, RetryIntent::RetryAfter(at)).unwrap();
        assert!(
            delay >= Duration::from_secs(9 * 60),
            "waits for the reset: {delay:?}"
        );
        let last = SyncConnection {
            attempt: cfg.max_attempts - 1,
            ..job
        };
        assert_eq!(next_delay(&last, &cfg, RetryIntent::Transient), None);
    }
}
