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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    Public,
    Private,
    Internal,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Private => "private",
            Visibility::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<Visibility> {
        match s {
            "public" => Some(Visibility::Public),
            "private" => Some(Visibility::Private),
            "internal" => Some(Visibility::Internal),
            _ => None,
        }
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

/// Where a space stands in the registry's life cycle (not the platform's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpaceStatus {
    /// Seen in the last complete listing (or confirmed by a direct read).
    Active,
    /// Absent from a complete listing. Not deleted: the token may see less.
    Missing,
    /// Confirmed gone by the platform (404/410 on a direct read by id).
    Tombstoned,
}

impl SpaceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceStatus::Active => "active",
            SpaceStatus::Missing => "missing",
            SpaceStatus::Tombstoned => "tombstoned",
        }
    }

    pub fn parse(s: &str) -> Option<SpaceStatus> {
        match s {
            "active" => Some(SpaceStatus::Active),
            "missing" => Some(SpaceStatus::Missing),
            "tombstoned" => Some(SpaceStatus::Tombstoned),
            _ => None,
        }
    }
}

/// A risk noticed on a connection's credential, shown to the ADMIN. The fleet
/// never refuses a token for it; it says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskNotice {
    /// Stable machine code, e.g. `write-scope`.
    pub code: String,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    Running,
    /// Every page succeeded: unseen spaces were marked missing.
    Complete,
    /// Some page failed: nothing was marked missing.
    Partial,
    /// Nothing could be read (bad token, unreachable platform).
    Failed,
    /// Another worker held the connection; this run did nothing.
    Deferred,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Running => "running",
            RunOutcome::Complete => "complete",
            RunOutcome::Partial => "partial",
            RunOutcome::Failed => "failed",
            RunOutcome::Deferred => "deferred",
        }
    }

    pub fn parse(s: &str) -> Option<RunOutcome> {
        match s {
            "running" => Some(RunOutcome::Running),
            "complete" => Some(RunOutcome::Complete),
            "partial" => Some(RunOutcome::Partial),
            "failed" => Some(RunOutcome::Failed),
            "deferred" => Some(RunOutcome::Deferred),
            _ => None,
        }
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
