//! The neutral record every connector produces, and the connection it came
//! from. Platforms differ; what reaches the registry does not.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::address::{Platform, SpaceAddress};
use crate::alias::Alias;

/// Who a connection (and so every space it writes) belongs to. A person's
/// token only ever writes that person's spaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "type", content = "id")]
pub enum Owner {
    Company,
    Person(String),
}

impl Owner {
    pub fn as_db(&self) -> String {
        match self {
            Owner::Company => "company".to_owned(),
            Owner::Person(p) => format!("person:{p}"),
        }
    }

    pub fn from_db(s: &str) -> Owner {
        match s.strip_prefix("person:") {
            Some(p) => Owner::Person(p.to_owned()),
            None => Owner::Company,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_db())
    }
}

crate::string_enum! {
    pub enum Visibility: "visibility" {
        Public = "public",
        Private = "private",
        Internal = "internal",
    }
}

/// The platform-reported state of a space at the time of reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SpaceState {
    pub archived: bool,
    pub visibility: Option<Visibility>,
    /// In a recycle bin / trash (Jira soft delete, Drive trash): not gone yet.
    #[serde(default)]
    pub trashed: bool,
}

/// One space as a connector read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceRecord {
    pub address: SpaceAddress,
    pub display_name: String,
    /// The space that contains this one (a repo's org or project).
    pub container: Option<SpaceAddress>,
    pub aliases: Vec<Alias>,
    pub state: SpaceState,
}

impl SpaceRecord {
    /// Aliases sorted and deduplicated, so that comparing two readings of the
    /// same space does not depend on the order a connector listed them in.
    pub fn canonical_aliases(&self) -> Vec<Alias> {
        let mut a = self.aliases.clone();
        a.sort_by(|x, y| (x.kind, &x.value).cmp(&(y.kind, &y.value)));
        a.dedup_by(|x, y| x.kind == y.kind && x.value == y.value);
        a
    }
}

crate::string_enum! {
    /// Where a space stands in the registry's life cycle (not the
    /// platform's).
    pub enum SpaceStatus: "space status" {
        /// Seen in the last complete listing (or confirmed by a direct read).
        Active = "active",
        /// Absent from a complete listing. Not deleted: the token may see less.
        Missing = "missing",
        /// Confirmed gone by the platform (404/410 on a direct read by id).
        Tombstoned = "tombstoned",
    }
}

/// A risk noticed on a connection's credential, shown to the ADMIN. The fleet
/// never refuses a token for it; it says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskNotice {
    pub code: RiskCode,
    pub message: String,
}

/// The figures of one sync run, recorded whatever its outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFigures {
    pub pages: u64,
    pub requests: u64,
    pub not_modified: u64,
    pub retries: u64,
    pub rate_limit_waits: u64,
    pub items_seen: u64,
    pub created: u64,
    pub updated: u64,
    pub renamed: u64,
    pub unchanged: u64,
    pub missing: u64,
    pub skipped_foreign: u64,
    pub duration_ms: u64,
}

crate::string_enum! {
    pub enum RunOutcome: "run outcome" {
        Running = "running",
        /// Every page succeeded: unseen spaces were marked missing.
        Complete = "complete",
        /// Some page failed: nothing was marked missing.
        Partial = "partial",
        /// Nothing could be read (bad token, unreachable platform).
        Failed = "failed",
        /// Another worker held the connection; this run did nothing.
        Deferred = "deferred",
    }
}

crate::string_enum! {
    /// Who or what started a sync run.
    pub enum RunTrigger: "run trigger" {
        /// `cmcp-discovery sync`.
        Cli = "cli",
        /// The schedule.
        Schedule = "schedule",
        /// A job queued again after a failure that may pass.
        Retry = "retry",
        /// A webhook delivery that needs a full sync.
        Webhook = "webhook",
        /// A Drive change notification read through the changes feed.
        DriveChanges = "drive-changes",
        /// The `demo` command.
        Demo = "demo",
        /// A nightly (or `reconcile`) complete listing that records what
        /// webhooks missed.
        Reconcile = "reconcile",
        /// A person linked their account: its first sync.
        Link = "link",
        /// A test or benchmark.
        Test = "test",
        Bench = "bench",
    }
}

crate::string_enum! {
    /// Whether the ADMIN lets a connection sync.
    pub enum ConnectionStatus: "connection status" {
        Enabled = "enabled",
        Disabled = "disabled",
        /// A complete listing would have marked too many spaces missing:
        /// nothing was marked, and an ADMIN confirms or a later listing
        /// that agrees clears it. It still syncs.
        Held = "held",
        /// A person unlinked it: its token is erased and it never syncs
        /// again; the row stays for the audit trail.
        Unlinked = "unlinked",
        /// The platform refused the credential for good (revoked, expired,
        /// lost its permission). It keeps its nightly reconcile, so the
        /// first complete listing after the token is replaced enables it
        /// again; its webhooks are still taken in.
        Rejected = "rejected",
    }
}

impl ConnectionStatus {
    /// Whether the connection is read: by syncs, reconciles and its
    /// deliveries. Only an ADMIN's `disabled` and a person's `unlinked`
    /// stop it.
    pub fn reads(self) -> bool {
        matches!(
            self,
            ConnectionStatus::Enabled | ConnectionStatus::Held | ConnectionStatus::Rejected
        )
    }
}

crate::string_enum! {
    /// The stable machine code of a [`RiskNotice`].
    pub enum RiskCode: "risk code" {
        /// The credential can write to the platform (the fleet only reads).
        WriteScope = "write-scope",
        /// The platform reports the connection's webhook deleted.
        WebhookDeleted = "webhook-deleted",
        /// A complete listing lacked too many spaces at once; the
        /// connection is held and nothing was marked missing.
        MassMissing = "mass-missing",
        /// The platform refused the credential for good (revoked, expired,
        /// lost its permission); the next complete listing clears it.
        CredentialRejected = "credential-rejected",
        /// A person's sync held new private spaces back: the daily cap.
        PrivateSpaceCap = "private-space-cap",
    }
}

/// Connection settings that are not secret, per platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionSpec {
    pub platform: Platform,
    /// The org / workspace / site / domain the connection lists.
    pub scope: String,
    /// API base URL (`https://api.github.com`, `https://ghe.example.com/api/v3`).
    pub base_url: String,
}
