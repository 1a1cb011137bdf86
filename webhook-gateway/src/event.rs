//! From a verified delivery to a neutral [`HookEvent`].
//!
//! Each platform names its events differently (GitHub's `X-GitHub-Event`
//! plus body `action`, Bitbucket's `X-Event-Key`, Jira's body
//! `webhookEvent`, Drive's `X-Goog-Resource-State`); this module turns them
//! into one vocabulary the gateway's jobs can match on. Only a [`Verified`]
//! delivery can be parsed, so nothing here ever reads an unauthenticated
//! body.
//!
//! Events carry stable ids (the space key) as canonical strings, made with
//! [`cmcp_domain::SpaceKind::canonical_id`]: Bitbucket uuids lose their
//! braces and case, Jira's numeric project id becomes a string. Names, keys
//! and full names are aliases, carried alongside for the registry's alias
//! history.
//!
//! Parsing never panics. An event or action this code does not model is
//! [`HookEvent::Unknown`] (kept, counted, not acted on); a known content
//! event the catalogue does not care about (a push) is
//! [`HookEvent::Ignored`]; a signed body that is not JSON, or a known event
//! without its stable id, is a [`ParseError`] the gateway stores as failed.

pub mod bitbucket;
pub mod drive;
pub mod github;
pub mod jira;

use std::fmt;

use axum::http::HeaderMap;
use cmcp_domain::Platform;
use serde_json::Value;

use crate::verify::Verified;

pub use bitbucket::{BitbucketEvent, BitbucketProject, BitbucketRepo, Change};
pub use drive::{DriveEvent, ResourceState};
pub use github::{GithubEvent, GithubRepo, InstallationAction, RepoAction, RepoMembership};
pub use jira::{JiraEvent, JiraProject, ProjectChange};

/// What a delivery means to the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookEvent {
    Github(GithubEvent),
    Bitbucket(BitbucketEvent),
    Jira(JiraEvent),
    Drive(DriveEvent),
    /// A known event about content rather than spaces (a push): nothing to do.
    Ignored {
        platform: Platform,
        event: String,
    },
    /// An event, or an action of a known event, that is not modelled here.
    Unknown {
        platform: Platform,
        event: String,
        action: Option<String>,
    },
}

impl HookEvent {
    /// Parse a verified delivery according to its platform.
    pub fn parse(delivery: &Verified) -> Result<HookEvent, ParseError> {
        let (headers, body) = (delivery.headers(), delivery.body());
        match delivery.platform() {
            Platform::Github => github::parse(headers, body),
            Platform::Bitbucket => bitbucket::parse(headers, body),
            Platform::Jira => jira::parse(headers, body),
            Platform::Drive => drive::parse(headers),
        }
    }
}

impl HookEvent {
    /// A short name for logs, metrics and the delivery table, in the
    /// platform's own words: `repository.renamed`, `repo:updated`,
    /// `project_created`, `change`.
    pub fn label(&self) -> String {
        match self {
            HookEvent::Github(e) => github_label(e),
            HookEvent::Bitbucket(e) => match e {
                BitbucketEvent::RepoCreated { .. } => "repo:created",
                BitbucketEvent::RepoDeleted { .. } => "repo:deleted",
                BitbucketEvent::RepoUpdated { .. } => "repo:updated",
                BitbucketEvent::RepoTransferred { .. } => "repo:transfer",
                BitbucketEvent::ProjectUpdated { .. } => "project:updated",
            }
            .to_owned(),
            HookEvent::Jira(JiraEvent::Project { change, .. }) => match change {
                ProjectChange::Created => "project_created",
                ProjectChange::Updated => "project_updated",
                ProjectChange::Deleted => "project_deleted",
                ProjectChange::SoftDeleted => "project_soft_deleted",
                ProjectChange::RestoredDeleted => "project_restored_deleted",
                ProjectChange::Archived => "project_archived",
                ProjectChange::RestoredArchived => "project_restored_archived",
            }
            .to_owned(),
            HookEvent::Drive(e) => match e.state {
                ResourceState::Sync => "sync",
                ResourceState::Change => "change",
            }
            .to_owned(),
            HookEvent::Ignored { event, .. } => event.clone(),
            HookEvent::Unknown { event, action, .. } => match action {
                Some(a) => format!("{event}.{a}"),
                None => event.clone(),
            },
        }
    }
}

fn github_label(e: &GithubEvent) -> String {
    let action = match e {
        GithubEvent::Repository { action, .. } => match action {
            RepoAction::Created => "repository.created",
            RepoAction::Deleted => "repository.deleted",
            RepoAction::Renamed { .. } => "repository.renamed",
            RepoAction::Transferred { .. } => "repository.transferred",
            RepoAction::Archived => "repository.archived",
            RepoAction::Unarchived => "repository.unarchived",
            RepoAction::Edited => "repository.edited",
            RepoAction::Privatized => "repository.privatized",
            RepoAction::Publicized => "repository.publicized",
        },
        GithubEvent::InstallationRepositories { action, .. } => match action {
            RepoMembership::Added => "installation_repositories.added",
            RepoMembership::Removed => "installation_repositories.removed",
        },
        GithubEvent::Installation { action, .. } => match action {
            InstallationAction::Created => "installation.created",
            InstallationAction::Deleted => "installation.deleted",
            InstallationAction::Suspend => "installation.suspend",
            InstallationAction::Unsuspend => "installation.unsuspend",
            InstallationAction::NewPermissionsAccepted => "installation.new_permissions_accepted",
        },
        GithubEvent::OrganizationRenamed { .. } => "organization.renamed",
        GithubEvent::Ping { .. } => "ping",
        GithubEvent::HookDeleted { .. } => "meta.deleted",
    };
    action.to_owned()
}

/// Why a verified delivery could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{platform} delivery body is not JSON: {source}")]
    NotJson {
        platform: Platform,
        #[source]
        source: serde_json::Error,
    },
    #[error("{platform} delivery has no usable {header} header")]
    MissingHeader {
        platform: Platform,
        header: &'static str,
    },
    /// A known event without a field it cannot do without (its stable id).
    #[error("{platform} {event} delivery has no usable {field}")]
    MissingField {
        platform: Platform,
        event: String,
        field: &'static str,
    },
}

/// The dedupe key of a delivery, prefixed by platform so keys of different
/// platforms never collide:
///
/// - GitHub `github:<X-GitHub-Hook-ID>:<X-GitHub-Delivery>`: the delivery GUID
///   is per event and shared by every hook subscribed to it, and kept on
///   redelivery, so the hook id is part of the key.
/// - Bitbucket `bitbucket:<X-Request-UUID>:<sha256 of body>`: whether a retry
///   keeps the request uuid is undocumented, so the content is part of it.
/// - Jira `jira:<X-Atlassian-Webhook-Identifier>`: unchanged across retries.
/// - Drive `drive:<X-Goog-Channel-ID>:<X-Goog-Message-Number>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryId(String);

impl DeliveryId {
    pub fn from_verified(delivery: &Verified) -> Result<DeliveryId, ParseError> {
        let (headers, body) = (delivery.headers(), delivery.body());
        let key = match delivery.platform() {
            Platform::Github => github::delivery_key(headers)?,
            Platform::Bitbucket => bitbucket::delivery_key(headers, body)?,
            Platform::Jira => jira::delivery_key(headers)?,
            Platform::Drive => drive::delivery_key(headers)?,
        };
        Ok(DeliveryId(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A header's value as trimmed, non-empty text.
pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then_some(value)
}

pub(crate) fn required_header<'h>(
    headers: &'h HeaderMap,
    platform: Platform,
    name: &'static str,
) -> Result<&'h str, ParseError> {
    header(headers, name).ok_or(ParseError::MissingHeader {
        platform,
        header: name,
    })
}

pub(crate) fn json_body(platform: Platform, body: &[u8]) -> Result<Value, ParseError> {
    serde_json::from_slice(body).map_err(|source| ParseError::NotJson { platform, source })
}

/// Typed reads from a JSON body by JSON pointer; a missing required field
/// names the event and the pointer.
pub(crate) struct Fields<'a> {
    pub platform: Platform,
    pub event: &'a str,
    pub root: &'a Value,
}

impl Fields<'_> {
    /// A trimmed, non-empty string.
    pub fn opt_str(&self, pointer: &str) -> Option<String> {
        let s = self.root.pointer(pointer)?.as_str()?.trim();
        (!s.is_empty()).then(|| s.to_owned())
    }

    pub fn str(&self, pointer: &'static str) -> Result<String, ParseError> {
        self.opt_str(pointer).ok_or_else(|| self.missing(pointer))
    }

    /// An id sent as a JSON integer or string, as a string.
    pub fn opt_id(&self, pointer: &str) -> Option<String> {
        id_text(self.root.pointer(pointer)?)
    }

    pub fn id(&self, pointer: &'static str) -> Result<String, ParseError> {
        self.opt_id(pointer).ok_or_else(|| self.missing(pointer))
    }

    pub fn missing(&self, field: &'static str) -> ParseError {
        ParseError::MissingField {
            platform: self.platform,
            event: self.event.to_owned(),
            field,
        }
    }
}

/// Ids are integers on some platforms and strings on others (and Jira's
/// project id is both, depending on the API): accept either, refuse floats,
/// booleans and empty strings.
pub(crate) fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .map(|u| u.to_string())
            .or_else(|| n.as_i64().map(|i| i.to_string())),
        Value::String(s) => {
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_owned())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_come_as_numbers_or_strings() {
        assert_eq!(id_text(&json!(12345)).as_deref(), Some("12345"));
        assert_eq!(id_text(&json!("12345")).as_deref(), Some("12345"));
        assert_eq!(id_text(&json!(" 7 ")).as_deref(), Some("7"));
        for odd in [json!(1.5), json!(""), json!(null), json!(true), json!({})] {
            assert_eq!(id_text(&odd), None, "{odd}");
        }
    }

    #[test]
    fn fields_name_what_is_missing() {
        let root = json!({"a": {"b": "x", "n": 3}});
        let f = Fields {
            platform: Platform::Jira,
            event: "project_created",
            root: &root,
        };
        assert_eq!(f.str("/a/b").unwrap(), "x");
        assert_eq!(f.id("/a/n").unwrap(), "3");
        let err = f.str("/a/c").unwrap_err().to_string();
        assert_eq!(err, "jira project_created delivery has no usable /a/c");
    }
}
