//! What a worker process hands its jobs: the sync context, the sync queue
//! (for retries and webhook-triggered syncs) and the queue settings. The
//! runner unpacks it into the pieces each job asks for, so jobs never name
//! this type and the modules stay free of import cycles.

use crate::jobs::sync_connection::SyncConnection;
use crate::queue::{Queue, QueueConfig};
use crate::sync::SyncContext;

pub struct WorkerState {
    pub ctx: SyncContext,
    pub queue: Queue<SyncConnection>,
    pub queue_config: QueueConfig,
}
