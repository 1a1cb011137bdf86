use thiserror::Error;

pub type Result<T, E = DomainError> = std::result::Result<T, E>;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DomainError {
    #[error("invalid space address {given:?}: {why}")]
    InvalidAddress { given: String, why: String },
    /// A name outside its closed set (a platform, an alias kind, …).
    #[error(transparent)]
    Unknown(#[from] crate::names::UnknownName),
}
