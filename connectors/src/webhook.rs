//! From an authenticated delivery to a neutral [`HookEvent`], its
//! [`DeliveryId`] and the [`Plan`] the worker follows.
//!
//! Each platform names its events differently (GitHub's `X-GitHub-Event`
//! plus body `action`, Bitbucket's `X-Event-Key`, Jira's body
//! `webhookEvent`, Drive's `X-Goog-Resource-State`); each platform's
//! `webhook.rs` turns its own into one vocabulary, and this module is the one
//! place that names the four. Callers hand in the parts of a delivery whose
//! origin is already established: the gateway a verified one, the worker one
//! read back from the delivery store (which holds nothing else). Nothing here
//! verifies; the gateway does, before anything parses.
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

use std::fmt;

use cmcp_domain::{Platform, SpaceKind};
use http::HeaderMap;
use serde_json::Value;

use crate::{bitbucket, drive, github, jira};

pub mod intake;
mod sparse;

pub use crate::bitbucket::webhook::{BitbucketEvent, BitbucketProject, BitbucketRepo, Change};
pub use crate::drive::webhook::{DriveEvent, ResourceState};
pub use crate::github::webhook::{
    GithubEvent, GithubRepo, InstallationAction, RepoAction, RepoMembership,
};
pub use crate::jira::webhook::{JiraEvent, JiraProject, ProjectChange};

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
    /// Parse an authenticated delivery according to its platform (which
    /// comes from the route or the stored row, never from the payload).
    pub fn parse(
        platform: Platform,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<HookEvent, ParseError> {
        match platform {
            Platform::Github => github::webhook::parse(headers, body),
            Platform::Bitbucket => bitbucket::webhook::parse(headers, body),
            Platform::Jira => jira::webhook::parse(headers, body),
            Platform::Drive => drive::webhook::parse(headers),
        }
    }

    /// A short name for logs, metrics and the delivery table, in the
    /// platform's own words: `repository.renamed`, `repo:updated`,
    /// `project_created`, `change`.
    pub fn label(&self) -> String {
        match self {
            HookEvent::Github(e) => e.label().to_owned(),
            HookEvent::Bitbucket(e) => e.label().to_owned(),
            HookEvent::Jira(e) => e.label().to_owned(),
            HookEvent::Drive(e) => e.label().to_owned(),
            HookEvent::Ignored { event, .. } => event.clone(),
            HookEvent::Unknown { event, action, .. } => match action {
                Some(a) => format!("{event}.{a}"),
                None => event.clone(),
            },
        }
    }

    /// What the catalogue should do about this event. Pure, so every
    /// platform's mapping is testable alone.
    pub fn plan(&self) -> Plan {
        match self {
            HookEvent::Github(e) => e.plan(),
            HookEvent::Bitbucket(e) => e.plan(),
            HookEvent::Jira(e) => e.plan(),
            HookEvent::Drive(e) => e.plan(),
            HookEvent::Ignored { .. } | HookEvent::Unknown { .. } => Plan::Nothing("not modelled"),
        }
    }
}

/// What a delivery asks of the catalogue. A payload is never trusted for an
/// entity's state: it only says what to re-read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Re-read these `(kind, stable id)` entities by id.
    Refresh(Vec<(SpaceKind, String)>),
    /// Too much may have changed for targeted reads.
    FullSync(&'static str),
    /// The hook itself was deleted on the platform: flag the connection.
    HookDeleted,
    /// Something changed that only the connector's change feed can say:
    /// read it from its stored positions.
    ChangeFeed,
    /// The connection may have lost sight of these (a repository made
    /// private, removed from an installation): re-read them by id, and take
    /// a Gone as lost access, never as a deletion.
    Recheck(Vec<(SpaceKind, String)>),
    /// Acknowledged, nothing to do.
    Nothing(&'static str),
}

/// The headers kept with a stored delivery: everything parsing and dedupe
/// read, nothing that authenticates (signatures, Drive channel tokens).
pub fn kept_headers(platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Github => github::webhook::KEPT_HEADERS,
        Platform::Bitbucket => bitbucket::webhook::KEPT_HEADERS,
        Platform::Jira => jira::webhook::KEPT_HEADERS,
        Platform::Drive => drive::webhook::KEPT_HEADERS,
    }
}

/// The header in which a sender names its delivery, for logs of refused
/// deliveries (it is not trusted for anything else).
pub fn claimed_id_header(platform: Platform) -> &'static str {
    match platform {
        Platform::Github => github::webhook::DELIVERY_HEADER,
        Platform::Bitbucket => bitbucket::webhook::REQUEST_UUID_HEADER,
        Platform::Jira => jira::webhook::IDENTIFIER_HEADER,
        Platform::Drive => drive::webhook::MESSAGE_NUMBER_HEADER,
    }
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
    /// The identity of an authenticated delivery of `platform`.
    pub fn of(
        platform: Platform,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<DeliveryId, ParseError> {
        let key = match platform {
            Platform::Github => github::webhook::delivery_key(headers)?,
            Platform::Bitbucket => bitbucket::webhook::delivery_key(headers, body)?,
            Platform::Jira => jira::webhook::delivery_key(headers)?,
            Platform::Drive => drive::webhook::delivery_key(headers)?,
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

/// A delivery's JSON, with only the members on `reads` (the JSON pointers
/// its platform's parser reads, `*` for every element of an array) built:
/// see [`sparse`]. A body that is not JSON is refused as by a full parse.
fn json_body(platform: Platform, body: &[u8], reads: &[&str]) -> Result<Value, ParseError> {
    sparse::parse(body, reads).map_err(|source| ParseError::NotJson { platform, source })
}

/// Typed reads from a JSON body by JSON pointer; a missing required field
/// names the event and the pointer.
pub(crate) struct Fields<'a> {
    pub platform: Platform,
    pub event: &'a str,
    root: Value,
    /// The pointers `root` was built along; a debug build checks every
    /// read against them, so a parser that reads a member nobody listed
    /// fails its tests instead of finding it missing.
    reads: &'static [&'static str],
}

impl<'a> Fields<'a> {
    /// The fields of `body` along `reads`, the parser's whole list of what
    /// it reads.
    pub fn of(
        platform: Platform,
        event: &'a str,
        body: &[u8],
        reads: &'static [&'static str],
    ) -> Result<Fields<'a>, ParseError> {
        Ok(Fields {
            platform,
            event,
            root: json_body(platform, body, reads)?,
            reads,
        })
    }

    /// The same fields under another event name (Jira's is in the body).
    pub fn named<'b>(self, event: &'b str) -> Fields<'b> {
        Fields { event, ..self }
    }

    /// The value at `pointer`, when there is one.
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        debug_assert!(
            sparse::covers(self.reads, pointer),
            "{} parser reads {pointer}, which its list of reads does not name",
            self.platform
        );
        self.root.pointer(pointer)
    }

    /// A trimmed, non-empty string.
    pub fn opt_str(&self, pointer: &str) -> Option<String> {
        let s = self.at(pointer)?.as_str()?.trim();
        (!s.is_empty()).then(|| s.to_owned())
    }

    pub fn str(&self, pointer: &'static str) -> Result<String, ParseError> {
        self.opt_str(pointer).ok_or_else(|| self.missing(pointer))
    }

    /// An id sent as a JSON integer or string, as a string.
    pub fn opt_id(&self, pointer: &str) -> Option<String> {
        id_text(self.at(pointer)?)
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
        let body = json!({"a": {"b": "x", "n": 3}}).to_string();
        let f = Fields::of(Platform::Jira, "project_created", body.as_bytes(), &["/a"]).unwrap();
        assert_eq!(f.str("/a/b").unwrap(), "x");
        assert_eq!(f.id("/a/n").unwrap(), "3");
        let err = f.str("/a/c").unwrap_err().to_string();
        assert_eq!(err, "jira project_created delivery has no usable /a/c");
    }

    /// Every concrete pointer a read path names in `full` (`*` expanded to
    /// the indices of the array there).
    fn concrete(full: &Value, path: &str) -> Vec<String> {
        let mut at = vec![String::new()];
        for segment in path.split('/').skip(1) {
            at = at
                .into_iter()
                .flat_map(|p| match (segment, full.pointer(&p)) {
                    ("*", Some(Value::Array(items))) => {
                        (0..items.len()).map(|i| format!("{p}/{i}")).collect()
                    }
                    ("*", _) => Vec::new(),
                    _ => vec![format!("{p}/{segment}")],
                })
                .collect();
        }
        at
    }

    /// Every stored sample delivery of the platforms that parse JSON: along
    /// each path its parser lists, the sparse build reads as the whole
    /// value does, and the sample parses (a debug build also checks each
    /// read against the list).
    #[test]
    fn sparse_bodies_read_as_whole_ones_on_every_sample() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/data");
        let mut seen = 0;
        for (platform, dir, reads) in [
            (Platform::Github, "github", github::webhook::READS),
            (Platform::Bitbucket, "bitbucket", bitbucket::webhook::READS),
            (Platform::Jira, "jira", jira::webhook::READS),
        ] {
            for entry in std::fs::read_dir(root.join(dir).join("webhooks")).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if !name.ends_with(".json") || name.contains("signature-test-vector") {
                    continue;
                }
                let body = std::fs::read(&path).unwrap();
                let full: Value = serde_json::from_slice(&body).unwrap();
                let sparse = json_body(platform, &body, reads).unwrap();
                for read in reads {
                    for p in concrete(&full, read) {
                        assert_eq!(sparse.pointer(&p), full.pointer(&p), "{name} {p}");
                    }
                }
                // GitHub and Bitbucket name the event in a header, here
                // taken from the file's name (`webhook-<event>-<action>.json`);
                // Jira names it in the body.
                let mut headers = HeaderMap::new();
                let named = name
                    .trim_start_matches("webhook-")
                    .trim_end_matches(".json");
                let event = match platform {
                    Platform::Github => Some((
                        github::webhook::EVENT_HEADER,
                        named.split('-').next().unwrap().to_owned(),
                    )),
                    Platform::Bitbucket => Some((
                        bitbucket::webhook::EVENT_HEADER,
                        named.replacen('-', ":", 1),
                    )),
                    _ => None,
                };
                if let Some((header, value)) = event {
                    headers.insert(header, value.parse().unwrap());
                }
                let parsed = HookEvent::parse(platform, &headers, &body);
                assert!(parsed.is_ok(), "{name}: {parsed:?}");
                seen += 1;
            }
        }
        assert!(seen >= 15, "{seen} samples");
    }
}
