use thiserror::Error;

pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error(transparent)]
    Registry(#[from] cmcp_registry::RegistryError),
    #[error(transparent)]
    Connector(#[from] cmcp_connectors::ConnectorError),
    #[error("queue: {0}")]
    Queue(String),
    #[error("sync of connection {connection_id} did not finish: {detail}")]
    Sync {
        connection_id: String,
        detail: String,
    },
}
