//! What a worker process hands its jobs: the sync context, the sync queue
//! (for retries and webhook-triggered syncs) and the queue settings. The
//! runner unpacks it into the pieces each job asks for, so jobs never name
//! this type and the modules stay free of import cycles.

use std::time::Duration;

use crate::jobs::scheduled::UpkeepSettings;
use crate::jobs::sync_connection::SyncConnection;
use crate::queue::{Queue, QueueConfig};
use crate::schedule::ReconcileConfig;
use crate::sync::SyncContext;

pub struct WorkerState {
    pub ctx: SyncContext,
    pub queue: Queue<SyncConnection>,
    pub queue_config: QueueConfig,
    /// Set for a long-running worker (`serve`, `worker`): it runs the
    /// fleet's scheduler and the scheduled jobs. A worker started only to
    /// wait for one run (`sync --wait`) leaves them to the fleet.
    pub schedule: Option<ScheduleSettings>,
}

/// The fleet's schedules and what their jobs need.
#[derive(Debug, Clone)]
pub struct ScheduleSettings {
    pub reconcile: ReconcileConfig,
    /// Push channels are checked every so long.
    pub channels_every: Duration,
    pub upkeep: UpkeepSettings,
}
