use cmcp_connectors::{ConnectorError, RetryIntent};
use thiserror::Error;

pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error(transparent)]
    Registry(#[from] cmcp_registry::RegistryError),
    /// Kept typed to the job, which decides on [`ConnectorError::intent`].
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    #[error("queue: {0}")]
    Queue(String),
    #[error("schedule {0}")]
    Schedule(String),
    #[error("sync of connection {connection_id} did not finish: {detail}")]
    Sync {
        connection_id: String,
        detail: String,
    },
}

impl WorkerError {
    /// What running the job again would do. Only a connector knows a
    /// failure to be permanent; the registry, the queue and a sync that did
    /// not finish may all pass with time.
    pub fn intent(&self) -> RetryIntent {
        match self {
            WorkerError::Connector(e) => e.intent(),
            WorkerError::Registry(_)
            | WorkerError::Queue(_)
            | WorkerError::Schedule(_)
            | WorkerError::Sync { .. } => RetryIntent::Transient,
        }
    }
}
