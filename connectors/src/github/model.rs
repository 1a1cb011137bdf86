//! GitHub wire types: only the fields the catalogue needs.
//!
//! A repository object has about a hundred fields and GitHub adds more over
//! time; deserialising all of them would make every addition (or a `null`
//! where the docs promise a string) a decode failure. So unknown fields are
//! ignored and everything that is not identity is optional.

use serde::Deserialize;

/// `GET /orgs/{org}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Org {
    pub login: String,
    /// The stable id of the organisation.
    pub id: u64,
    #[serde(default)]
    pub node_id: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
}

/// One item of `GET /orgs/{org}/repos`, or `GET /repositories/{id}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Repo {
    /// The stable id: survives renames and transfers. Never key on
    /// `full_name` or `node_id`.
    pub id: u64,
    #[serde(default)]
    pub node_id: Option<String>,
    pub name: String,
    pub full_name: String,
    pub owner: Owner,
    #[serde(default)]
    pub private: Option<bool>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub clone_url: Option<String>,
    #[serde(default)]
    pub ssh_url: Option<String>,
    #[serde(default)]
    pub archived: Option<bool>,
    /// `public`, `private` or `internal` (missing on old GHES versions).
    #[serde(default)]
    pub visibility: Option<String>,
    /// With `pushed_at`, what decides whether the root commit is asked
    /// again ([`super::first_commit`]).
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub pushed_at: Option<String>,
    /// What the caller may do with it; write access is a risk
    /// ([`super::permissions`]).
    #[serde(default)]
    pub permissions: Option<super::permissions::Permissions>,
}

/// The `owner` of a repository: the organisation for an org listing.
#[derive(Debug, Clone, Deserialize)]
pub struct Owner {
    pub login: String,
    pub id: u64,
    #[serde(default)]
    pub html_url: Option<String>,
}

/// GitHub's error body: `{"message": "...", "documentation_url": "..."}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub message: Option<String>,
}
