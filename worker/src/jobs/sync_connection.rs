//! `sync_connection`: read one connection's whole catalogue into the
//! registry.
//!
//! Retries are the job's own: a run that failed in a way time may cure (5xx,
//! dropped connections, a rate limit) queues its successor with exponential
//! backoff and jitter, or at the platform's reset time, as a new durable job.
//! A worker slot is never held asleep, and a restart loses no retry.

use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::{BoxDynError, Data};
use cmcp_domain::RunOutcome;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tracing::{error, info, instrument, warn};

use crate::runner::WorkerState;
use crate::sync::{SyncResult, run_sync};

pub const NAME: &str = "sync_connection";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncConnection {
    pub connection_id: String,
    /// Who asked: `cli`, `schedule`, `retry`, `webhook`…
    pub trigger: String,
    /// 0 for a first try; retries count up.
    #[serde(default)]
    pub attempt: u32,
}

impl SyncConnection {
    pub fn new(connection_id: impl Into<String>, trigger: impl Into<String>) -> Self {
        SyncConnection {
            connection_id: connection_id.into(),
            trigger: trigger.into(),
            attempt: 0,
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
    state: Data<Arc<WorkerState>>,
) -> Result<String, BoxDynError> {
    let state: &WorkerState = &state;
    // A Drive full sync also records each drive's change-feed position, so
    // webhook notifications can read only what changed since.
    let platform = state
        .ctx
        .store
        .get_connection(&job.connection_id)
        .await?
        .platform;
    let result = if platform == cmcp_domain::Platform::Drive {
        crate::drive::run_full(&state.ctx, &job.connection_id, &job.trigger).await?
    } else {
        run_sync(&state.ctx, &job.connection_id, &job.trigger).await?
    };
    match result {
        SyncResult::Deferred { holder, until_ms } => {
            let wait_ms = (until_ms - chrono::Utc::now().timestamp_millis()).max(0);
            let delay = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0))
                + backoff(0, Duration::from_millis(200), Duration::from_secs(2));
            state.queue.push(job.clone(), Some(delay), None).await?;
            Ok(format!(
                "deferred: {holder} holds the connection; retrying in {delay:?}"
            ))
        }
        SyncResult::Finished {
            outcome: RunOutcome::Complete,
            run_id,
            figures,
            ..
        } => Ok(format!(
            "complete: run {run_id}, {} seen, {} created, {} renamed, {} missing",
            figures.items_seen, figures.created, figures.renamed, figures.missing
        )),
        SyncResult::Finished {
            outcome,
            run_id,
            error,
            retryable,
            retry_at,
            ..
        } => {
            let why = error.unwrap_or_default();
            let cfg = &state.queue_config;
            if !retryable {
                error!(run_id, outcome = outcome.as_str(), error = %why, "sync failed and will not be retried: the connection needs attention");
                return Ok(format!("{}: {why}", outcome.as_str()));
            }
            if job.attempt + 1 >= cfg.max_attempts {
                error!(run_id, attempts = job.attempt + 1, error = %why, "sync gave up after its last attempt");
                return Ok(format!("gave up after {} attempts: {why}", job.attempt + 1));
            }
            let delay = match retry_at {
                Some(at) => {
                    (at - chrono::Utc::now()).to_std().unwrap_or_default()
                        + backoff(0, Duration::from_millis(500), Duration::from_secs(5))
                }
                None => backoff(job.attempt, cfg.retry_backoff_min, cfg.retry_backoff_max),
            };
            let next = SyncConnection {
                attempt: job.attempt + 1,
                trigger: "retry".to_owned(),
                ..job.clone()
            };
            state.queue.push(next, Some(delay), None).await?;
            warn!(run_id, outcome = outcome.as_str(), error = %why, retry_in_ms = delay.as_millis() as u64, "sync incomplete; retry queued");
            info!(run_id, "retry queued");
            Ok(format!(
                "{}: {why}; retry {} in {delay:?}",
                outcome.as_str(),
                job.attempt + 1
            ))
        }
    }
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
}
