//! The vocabulary of cmcp-discovery, shared by every crate and depending on
//! none of them: space addresses, aliases and their normalisation, the
//! neutral record connectors produce, run figures, and the redacting token.

pub mod address;
pub mod alias;
pub mod error;
pub mod ids;
pub mod names;
pub mod record;
pub mod secret;
pub mod tenant;

pub use address::{Platform, SpaceAddress, SpaceKind};
pub use alias::{Alias, AliasKind, normalise_git_remote, normalise_web_url};
pub use error::{DomainError, Result};
pub use ids::canonical_uuid;
pub use names::UnknownName;
pub use record::{
    ConnectionSpec, ConnectionStatus, Owner, RiskCode, RiskNotice, RunFigures, RunOutcome,
    RunTrigger, SpaceRecord, SpaceState, SpaceStatus, Visibility,
};
pub use secret::{Credential, CredentialError, Token};
pub use tenant::{WEB_HOST_SETTING, github_tenant};
