use thiserror::Error;

pub type Result<T, E = DomainError> = std::result::Result<T, E>;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DomainError {
    #[error("invalid space address {given:?}: {why}")]
    InvalidAddress { given: String, why: String },
    #[error("unknown platform {given:?}; known platforms: {known}")]
    UnknownPlatform { given: String, known: String },
    #[error("unknown alias kind {0:?}")]
    UnknownAliasKind(String),
}
