//! `scheduled`: the fleet's periodic upkeep that is not a sync, queued by
//! the [`crate::schedule::Scheduler`] once per tick: push-channel upkeep of
//! one connection, and retention pruning.

use apalis::prelude::{BoxDynError, Data};
use serde::{Deserialize, Serialize};
use tracing::instrument;

use crate::queue::Job;
use crate::retention::RetentionConfig;
use crate::sync::SyncContext;

/// The queue's fixed name.
pub const SCHEDULED_QUEUE: &str = "scheduled";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "task")]
pub enum Scheduled {
    /// Open, renew or replace the connection's push channels
    /// ([`crate::push_channels::ensure_channels`]).
    PushChannels { connection_id: String },
    /// Prune what retention no longer keeps.
    Prune,
}

impl Job for Scheduled {
    const QUEUE: &'static str = SCHEDULED_QUEUE;
}

/// What the scheduled jobs need besides the sync context.
#[derive(Debug, Clone)]
pub struct UpkeepSettings {
    /// The base URL platforms reach the gateway at (channel addresses).
    pub public_url: String,
    pub retention: RetentionConfig,
}

#[instrument(skip_all, fields(job = SCHEDULED_QUEUE, task = ?job))]
pub async fn handle(
    job: Scheduled,
    ctx: Data<SyncContext>,
    settings: Data<UpkeepSettings>,
) -> Result<String, BoxDynError> {
    Ok(run(&job, &ctx, &settings).await?)
}

pub async fn run(
    job: &Scheduled,
    ctx: &SyncContext,
    settings: &UpkeepSettings,
) -> crate::Result<String> {
    match job {
        Scheduled::PushChannels { connection_id } => {
            let r = crate::push_channels::ensure_channels(ctx, connection_id, &settings.public_url)
                .await?;
            Ok(format!(
                "push channels of {connection_id}: {} opened, {} renewed, {} lapsed, {} failed",
                r.opened, r.renewed, r.lapsed, r.failed
            ))
        }
        Scheduled::Prune => {
            let now = chrono::Utc::now().timestamp_millis();
            let p = crate::retention::prune(&ctx.store, &settings.retention, now).await?;
            Ok(format!("pruned: {p:?}"))
        }
    }
}
