//! Bitbucket Cloud deliveries: the event is the `X-Event-Key` header.
//! Repositories and projects are keyed by uuid, which Bitbucket sends in
//! braces and treats case-insensitively; every uuid here goes through
//! [`SpaceKind::canonical_id`] so `{673A…}` and `673a…` are one space.
//!
//! There are no project created/deleted hooks (only `project:updated`), so
//! projects still have to be polled. Data Center deliveries
//! (`repo:modified`, `repo:refs_changed`, numeric ids) are a different API
//! and come out as `Unknown`.

use cmcp_domain::{Platform, SpaceKind};
use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::webhook::{Fields, HookEvent, ParseError, Plan, required_header};

pub const EVENT_HEADER: &str = "x-event-key";
pub const REQUEST_UUID_HEADER: &str = "x-request-uuid";
pub const HOOK_UUID_HEADER: &str = "x-hook-uuid";

/// What the gateway keeps of a delivery's headers.
pub const KEPT_HEADERS: &[&str] = &[
    EVENT_HEADER,
    REQUEST_UUID_HEADER,
    HOOK_UUID_HEADER,
    "x-attempt-number",
    "content-type",
    "user-agent",
];

/// Bitbucket Cloud does not send payloads over 256 KB (it drops them);
/// four times that leaves room for escaping without holding megabytes for
/// a caller that cannot be Bitbucket.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Bitbucket Cloud sends JSON only.
pub const CONTENT_TYPES: &[&str] = &["application/json"];

const PLATFORM: Platform = Platform::Bitbucket;

/// A repository as named in a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitbucketRepo {
    /// `repository.uuid`, canonical (no braces, lower-case).
    pub uuid: String,
    pub full_name: Option<String>,
    pub name: Option<String>,
    /// `repository.project.uuid`, canonical.
    pub project_uuid: Option<String>,
    /// `repository.workspace.uuid`, canonical, when the payload has it.
    pub workspace_uuid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitbucketProject {
    /// `project.uuid`, canonical.
    pub uuid: String,
    pub key: Option<String>,
    pub name: Option<String>,
}

/// An `{old, new}` pair from a payload's `changes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub old: String,
    pub new: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BitbucketEvent {
    RepoCreated {
        repo: BitbucketRepo,
    },
    RepoDeleted {
        repo: BitbucketRepo,
    },
    /// `repo:updated`; `name` and `full_name` are present when they changed.
    RepoUpdated {
        repo: BitbucketRepo,
        name: Option<Change>,
        full_name: Option<Change>,
    },
    /// `repo:transfer`: the repository moved to another workspace.
    RepoTransferred {
        repo: BitbucketRepo,
        /// The previous workspace's uuid (canonical) when the payload says.
        previous_workspace: Option<String>,
    },
    ProjectUpdated {
        project: BitbucketProject,
        name: Option<Change>,
        key: Option<Change>,
    },
}

impl BitbucketEvent {
    /// The `X-Event-Key` the event came with.
    pub fn label(&self) -> &'static str {
        match self {
            BitbucketEvent::RepoCreated { .. } => "repo:created",
            BitbucketEvent::RepoDeleted { .. } => "repo:deleted",
            BitbucketEvent::RepoUpdated { .. } => "repo:updated",
            BitbucketEvent::RepoTransferred { .. } => "repo:transfer",
            BitbucketEvent::ProjectUpdated { .. } => "project:updated",
        }
    }

    /// Every event names one repository or project: re-read it by uuid (a
    /// rename or transfer keeps the uuid, the re-read brings the new names).
    pub fn plan(&self) -> Plan {
        Plan::Refresh(vec![match self {
            BitbucketEvent::RepoCreated { repo }
            | BitbucketEvent::RepoDeleted { repo }
            | BitbucketEvent::RepoUpdated { repo, .. }
            | BitbucketEvent::RepoTransferred { repo, .. } => {
                (SpaceKind::BitbucketRepo, repo.uuid.clone())
            }
            BitbucketEvent::ProjectUpdated { project, .. } => {
                (SpaceKind::BitbucketProject, project.uuid.clone())
            }
        }])
    }
}

/// Every member [`parse`] reads: nothing else of a payload is built.
pub(crate) const READS: &[&str] = &[
    "/repository/uuid",
    "/repository/full_name",
    "/repository/name",
    "/repository/project/uuid",
    "/repository/workspace/uuid",
    "/changes/name",
    "/changes/full_name",
    "/changes/key",
    "/previous_workspace/uuid",
    "/previous_owner/uuid",
    "/project/uuid",
    "/project/key",
    "/project/name",
];

pub(crate) fn parse(headers: &HeaderMap, body: &[u8]) -> Result<HookEvent, ParseError> {
    let event = required_header(headers, PLATFORM, EVENT_HEADER)?;
    let f = Fields::of(PLATFORM, event, body, READS)?;
    let parsed = match event {
        "repo:created" => BitbucketEvent::RepoCreated { repo: repo(&f)? },
        "repo:deleted" => BitbucketEvent::RepoDeleted { repo: repo(&f)? },
        "repo:updated" => BitbucketEvent::RepoUpdated {
            repo: repo(&f)?,
            name: change(&f, "/changes/name"),
            full_name: change(&f, "/changes/full_name"),
        },
        "repo:transfer" => BitbucketEvent::RepoTransferred {
            repo: repo(&f)?,
            previous_workspace: f
                .opt_str("/previous_workspace/uuid")
                .or_else(|| f.opt_str("/previous_owner/uuid"))
                .map(|u| SpaceKind::BitbucketWorkspace.canonical_id(&u)),
        },
        "project:updated" => BitbucketEvent::ProjectUpdated {
            project: BitbucketProject {
                uuid: SpaceKind::BitbucketProject.canonical_id(&f.str("/project/uuid")?),
                key: f.opt_str("/project/key"),
                name: f.opt_str("/project/name"),
            },
            name: change(&f, "/changes/name"),
            key: change(&f, "/changes/key"),
        },
        "repo:push" => {
            return Ok(HookEvent::Ignored {
                platform: PLATFORM,
                event: event.to_owned(),
            });
        }
        _ => {
            return Ok(HookEvent::Unknown {
                platform: PLATFORM,
                event: event.to_owned(),
                action: None,
            });
        }
    };
    Ok(HookEvent::Bitbucket(parsed))
}

fn repo(f: &Fields<'_>) -> Result<BitbucketRepo, ParseError> {
    let uuid = |pointer: &str, kind: SpaceKind| f.opt_str(pointer).map(|u| kind.canonical_id(&u));
    Ok(BitbucketRepo {
        uuid: SpaceKind::BitbucketRepo.canonical_id(&f.str("/repository/uuid")?),
        full_name: f.opt_str("/repository/full_name"),
        name: f.opt_str("/repository/name"),
        project_uuid: uuid("/repository/project/uuid", SpaceKind::BitbucketProject),
        workspace_uuid: uuid("/repository/workspace/uuid", SpaceKind::BitbucketWorkspace),
    })
}

/// `changes.<field>.{old,new}` when both are strings. An absent or odd
/// change is `None`: the stable id is what matters, a re-read fills the rest.
fn change(f: &Fields<'_>, pointer: &str) -> Option<Change> {
    Some(Change {
        old: f.at(&format!("{pointer}/old"))?.as_str()?.to_owned(),
        new: f.at(&format!("{pointer}/new"))?.as_str()?.to_owned(),
    })
}

pub(crate) fn delivery_key(headers: &HeaderMap, body: &[u8]) -> Result<String, ParseError> {
    let request = required_header(headers, PLATFORM, REQUEST_UUID_HEADER)?;
    let digest = hex::encode(Sha256::digest(body));
    Ok(format!(
        "bitbucket:{}:{digest}",
        request.to_ascii_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::{Value, json};

    fn parse_json(event: &'static str, body: Value) -> Result<HookEvent, ParseError> {
        let mut h = HeaderMap::new();
        h.insert(EVENT_HEADER, HeaderValue::from_static(event));
        parse(&h, body.to_string().as_bytes())
    }

    #[test]
    fn created_deleted_and_transfer_carry_the_canonical_uuid() {
        let body = json!({"repository": {"uuid": "{ABCDEF01-2345-6789-ABCD-EF0123456789}",
            "workspace": {"uuid": "{11111111-2222-3333-4444-555555555555}"}},
            "previous_workspace": {"uuid": "{AAAAAAAA-2222-3333-4444-555555555555}"}});
        let uuid = "abcdef01-2345-6789-abcd-ef0123456789";
        for key in ["repo:created", "repo:deleted", "repo:transfer"] {
            let HookEvent::Bitbucket(e) = parse_json(key, body.clone()).unwrap() else {
                panic!("{key} not parsed");
            };
            let repo = match &e {
                BitbucketEvent::RepoCreated { repo } | BitbucketEvent::RepoDeleted { repo } => repo,
                BitbucketEvent::RepoTransferred {
                    repo,
                    previous_workspace,
                } => {
                    assert_eq!(
                        previous_workspace.as_deref(),
                        Some("aaaaaaaa-2222-3333-4444-555555555555")
                    );
                    repo
                }
                other => panic!("{key} parsed as {other:?}"),
            };
            assert_eq!(repo.uuid, uuid);
            assert_eq!(
                repo.workspace_uuid.as_deref(),
                Some("11111111-2222-3333-4444-555555555555")
            );
        }
    }

    #[test]
    fn project_updated_carries_uuid_key_and_changes() {
        let body = json!({"project": {"uuid": "{3B7898DC-6891-4225-AE60-24613BB83080}",
            "key": "NEW", "name": "Platform"}, "changes": {"key": {"old": "OLD", "new": "NEW"}}});
        assert_eq!(
            parse_json("project:updated", body).unwrap(),
            HookEvent::Bitbucket(BitbucketEvent::ProjectUpdated {
                project: BitbucketProject {
                    uuid: "3b7898dc-6891-4225-ae60-24613bb83080".into(),
                    key: Some("NEW".into()),
                    name: Some("Platform".into()),
                },
                name: None,
                key: Some(Change {
                    old: "OLD".into(),
                    new: "NEW".into()
                }),
            })
        );
    }

    #[test]
    fn a_known_event_without_its_uuid_is_an_error() {
        assert!(parse_json("repo:deleted", json!({"repository": {}})).is_err());
        assert!(parse_json("project:updated", json!({"project": {"uuid": 7}})).is_err());
        assert!(matches!(
            parse_json("pullrequest:created", json!({})).unwrap(),
            HookEvent::Unknown { .. }
        ));
    }
}
