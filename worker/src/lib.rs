//! Jobs and workers. One file per job (`jobs/`), the sync engine they run
//! (`sync`), the queue that holds them (`queue`) and the wiring of worker
//! processes (`runner`).

pub mod breaker;
pub mod budget;
pub mod change_feed;
pub mod drift;
pub mod enqueue;
pub mod error;
pub mod gone;
pub mod jobs;
pub mod lease;
pub mod metrics;
pub mod people;
pub mod private_cap;
pub mod progress;
pub mod push_channels;
pub mod queue;
pub mod retention;
pub mod runner;
pub mod schedule;
pub mod state;
pub mod sync;
pub mod trashed;

pub use error::{Result, WorkerError};
pub use jobs::handle_delivery::HandleDelivery;
pub use jobs::scheduled::{Scheduled, UpkeepSettings};
pub use jobs::sync_connection::SyncConnection;
pub use lease::{ConnectionLease, LeaseHeld};
pub use queue::{Job, Queue, QueueConfig};
pub use retention::RetentionConfig;
pub use runner::{WorkerOptions, run_workers};
pub use schedule::{ReconcileConfig, Scheduler};
pub use state::{ScheduleSettings, WorkerState};
pub use sync::{SyncConfig, SyncContext, SyncOutcome, run_sync, run_sync_as};
