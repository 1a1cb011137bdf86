//! The space registry: connections, spaces, aliases with history, sync runs
//! and the audit log, behind one store API over SQLite and PostgreSQL; and
//! the cipher that keeps secrets sealed at rest.

pub mod cipher;
pub mod error;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cipher::{Cipher, KeySource, MissingKey};
pub use error::{RegistryError, Result};
pub use store::DrivePageToken;
pub use store::{
    Accepted, CHECKPOINT_BESIDE_AFTER_BYTES, DeliveryFilter, DeliveryJob, DeliveryRow,
    DeliveryStatus, DeliveryWriter, IntakeSecret, IntakeState, NewDelivery, Premise, QueuedJob,
    Recorded, StoredDelivery, WalSync,
};
pub use store::{
    AliasRow, ApiKeyRow, AuditEntry, Backend, ConnectionRow, Decision, LeaseAttempt,
    MIN_SQLITE_CACHE_KIB, MappingRow, MatchAliasRow, MatchSpaceRow, NewApiKey, NewAuditEntry,
    NewConnection, NewProposal, PING_IF_IDLE_FOR, PageStats, PlaceAliasKind, PlaceAliasRow,
    PlaceFigures, PlaceInput, PlaceRow, Power, Powers, ProposalFigures, ProposalFilter,
    ProposalRow, ProposalState, ProposalTarget, Resolution, Role, SessionRow, SpaceFilter,
    SpaceRow, Store, StoreOptions, SyncRunRow,
};
pub use store::{BudgetGrant, BudgetRow, BudgetSettlement, BudgetTiming, CachedPageRow};
pub use store::{
    ChangeKind, ChangePage, ChangeRow, Cursor, Manifest, ManifestEntry, MatchRank, PlaceRef,
    Recogniser, Resolved, Unlinked, Viewer,
};
pub use store::{Denial, OwnerChangeRow, SightingRow, SightingState, TombstoneOutcome};
pub use store::{DirtyRow, InlineReads, KeyCache, MatchBacklog, MatchingTurn, SharingRow};
pub use store::{
    DriftKind, DriftLine, HoldRow, MissingPreview, REPEAT_OFFENDER_NIGHTS, SpaceChange,
};
pub use store::{DriveChannelRow, NewDriveChannel};
pub use store::{
    NewSuggestion, SuggestionAnswer, SuggestionFigures, SuggestionKind, SuggestionRow,
    SuggestionState,
};
pub use store::{PruneBefore, Pruned, SESSIONS_PER_KEY};
