//! Mapping proposals: which cMCP place (project, team, client) each
//! container space (Bitbucket project, Jira project, GitHub org, shared
//! drive) belongs to, with the evidence in words and a confidence. Matching
//! only proposes; an ADMIN decides (DESIGN rule 5).
//!
//! [`ladder`] is the pure, in-memory ladder (benchmarked on its own);
//! [`refresh`] runs it against the whole registry (reconciliation), and
//! [`incremental`] against only what changed since the last run (after
//! every sync).

pub mod evidence;
pub mod incremental;
pub mod ladder;
pub mod refresh;
pub mod similarity;
pub mod suggest;

pub use evidence::{Evidence, FingerprintKind, combined_confidence, evidence_hash};
pub use incremental::{company_changes_reach, refresh_after_sync, refresh_changed};
pub use ladder::{
    Candidate, Place, PlaceAlias, PlaceIndex, Settings, Space, Target, propose, propose_for,
};
pub use refresh::{load_input, place_of, refresh_proposals, spaces_from_rows, to_new_proposal};
pub use suggest::{
    EveryoneRefreshed, input_near, people_reached, private_spaces, refresh_all_suggestions,
    refresh_suggestions, refresh_suggestions_after_decision,
};

#[derive(Debug, thiserror::Error)]
pub enum MatchingError {
    #[error(transparent)]
    Registry(#[from] cmcp_registry::RegistryError),
}

pub type Result<T, E = MatchingError> = std::result::Result<T, E>;
