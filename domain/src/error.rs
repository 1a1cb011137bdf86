use thiserror::Error;

use crate::address::{Platform, SpaceKind};

pub type Result<T, E = DomainError> = std::result::Result<T, E>;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DomainError {
    #[error("invalid space address {given:?}: {why}")]
    InvalidAddress { given: String, why: String },
    /// A name outside its closed set (a platform, an alias kind, …).
    #[error(transparent)]
    Unknown(#[from] crate::names::UnknownName),
    /// A platform record whose stable id is not one of that platform's ids.
    #[error("invalid {kind} id {given:?}: {why}")]
    InvalidStableId {
        kind: SpaceKind,
        given: String,
        why: &'static str,
    },
    /// A connection whose tenant cannot be told from its configuration.
    #[error("invalid {platform} tenant {given:?}: {why}")]
    InvalidTenant {
        platform: Platform,
        given: String,
        why: String,
    },
}
