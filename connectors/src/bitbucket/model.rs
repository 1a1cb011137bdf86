//! Bitbucket Cloud wire types: only the fields the catalogue needs.
//!
//! Uuids arrive in braces (`{673a6070-…}`); they are kept as sent here and
//! canonicalised only when an address is built, so that what goes back to
//! the API is exactly what came from it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `{"href": "…"}` as every `links` entry is shaped.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Href {
    #[serde(default)]
    pub href: Option<String>,
}

/// A clone link: `{"name": "https"|"ssh", "href": "…"}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CloneLink {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub href: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Links {
    #[serde(default)]
    pub html: Option<Href>,
    #[serde(default)]
    pub clone: Vec<CloneLink>,
}

impl Links {
    pub fn html(&self) -> Option<&str> {
        self.html.as_ref()?.href.as_deref()
    }
}

/// `GET /2.0/workspaces/{workspace}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Workspace {
    pub uuid: String,
    pub slug: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub is_private: Option<bool>,
    #[serde(default)]
    pub links: Links,
}

/// A project of `GET /2.0/workspaces/{workspace}/projects`.
#[derive(Debug, Clone, Deserialize)]
pub struct Project {
    /// "The project's immutable id."
    pub uuid: String,
    /// Changes when an admin edits it: an alias, never the identity.
    pub key: String,
    pub name: String,
    #[serde(default)]
    pub is_private: Option<bool>,
    #[serde(default)]
    pub links: Links,
}

/// The project a repository sits in, as embedded in the repository.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectRef {
    pub uuid: String,
    #[serde(default)]
    pub key: Option<String>,
}

/// The workspace a repository names (`{"uuid": "{…}", "slug": …}`).
#[derive(Debug, Clone, Deserialize)]
pub struct WorkspaceRef {
    pub uuid: String,
}

/// A repository of `GET /2.0/repositories/{workspace}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Repo {
    /// "The repository's immutable id": survives renames and transfers.
    pub uuid: String,
    pub full_name: String,
    pub name: String,
    #[serde(default)]
    pub slug: Option<String>,
    #[serde(default)]
    pub is_private: Option<bool>,
    #[serde(default)]
    pub project: Option<ProjectRef>,
    /// The workspace it belongs to: must be the connection's.
    #[serde(default)]
    pub workspace: Option<WorkspaceRef>,
    #[serde(default)]
    pub links: Links,
}

/// The paginated envelope; `next` is absent on the last page and is
/// followed exactly as given.
#[derive(Debug, Clone, Deserialize)]
pub struct Page<T> {
    #[serde(default = "Vec::new")]
    pub values: Vec<T>,
    #[serde(default)]
    pub next: Option<String>,
    /// Everything else (`pagelen`, `size`, `page`) is informational.
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}
