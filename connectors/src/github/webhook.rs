//! GitHub deliveries: the event name is the `X-GitHub-Event` header, the
//! sub-kind the body's `action`. Repositories are keyed by their numeric
//! `repository.id`; `full_name` and the owner's login are aliases that a
//! rename or transfer changes.

use std::borrow::Cow;

use cmcp_domain::{Platform, SpaceKind};
use http::HeaderMap;
use serde_json::Value;

use crate::webhook::{Fields, HookEvent, ParseError, Plan, id_text, required_header};

pub const EVENT_HEADER: &str = "x-github-event";
pub const DELIVERY_HEADER: &str = "x-github-delivery";
pub const HOOK_ID_HEADER: &str = "x-github-hook-id";

/// What the gateway keeps of a delivery's headers.
pub const KEPT_HEADERS: &[&str] = &[
    EVENT_HEADER,
    DELIVERY_HEADER,
    HOOK_ID_HEADER,
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
    "content-type",
    "user-agent",
];

const PLATFORM: Platform = Platform::Github;

/// GitHub caps payloads at 25 MB and does not deliver larger ones.
pub const MAX_BODY_BYTES: usize = 25 * 1024 * 1024;

/// A hook is created with `content_type` `json` or `form` (the default):
/// `form` sends the same JSON as the `payload` field of an
/// `application/x-www-form-urlencoded` body, signed over the raw form bytes.
pub const CONTENT_TYPES: &[&str] = &["application/json", FORM];

const FORM: &str = "application/x-www-form-urlencoded";

/// A repository as named in a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubRepo {
    /// `repository.id`, the stable id.
    pub id: String,
    pub full_name: String,
    /// The owner's login after the event.
    pub owner: String,
}

/// The `action` of a `repository` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoAction {
    Created,
    Deleted,
    /// `changes.repository.name.from`: the previous name, now an old alias.
    Renamed {
        from_name: String,
    },
    /// The previous owner's login (`changes.owner.from.{organization|user}`).
    Transferred {
        from_owner: Option<String>,
    },
    Archived,
    Unarchived,
    Edited,
    Privatized,
    Publicized,
}

/// `installation_repositories` `added` / `removed`: the App gained or lost
/// access to some repositories (not a creation or deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoMembership {
    Added,
    Removed,
}

/// `installation` actions. Kept apart from `Unknown` because a deleted or
/// suspended installation hides every repository it covered: the catalogue
/// must not read that as deletions (trap 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallationAction {
    Created,
    Deleted,
    Suspend,
    Unsuspend,
    NewPermissionsAccepted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GithubEvent {
    Repository {
        action: RepoAction,
        repo: GithubRepo,
    },
    InstallationRepositories {
        action: RepoMembership,
        installation_id: Option<String>,
        /// Repository ids from `repositories_added`.
        added: Vec<String>,
        /// Repository ids from `repositories_removed`.
        removed: Vec<String>,
    },
    Installation {
        action: InstallationAction,
        installation_id: String,
        account: Option<String>,
    },
    /// `organization` `renamed`: the org keeps its id, its login changes.
    OrganizationRenamed {
        org_id: String,
        login: String,
        from_login: Option<String>,
    },
    /// Sent once when a hook is created.
    Ping { hook_id: String },
    /// `meta` `deleted`: the hook delivering this was itself deleted.
    HookDeleted { hook_id: String },
}

impl GithubEvent {
    /// The event and action as GitHub names them (`repository.renamed`).
    pub fn label(&self) -> &'static str {
        match self {
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
                InstallationAction::NewPermissionsAccepted => {
                    "installation.new_permissions_accepted"
                }
            },
            GithubEvent::OrganizationRenamed { .. } => "organization.renamed",
            GithubEvent::Ping { .. } => "ping",
            GithubEvent::HookDeleted { .. } => "meta.deleted",
        }
    }

    pub fn plan(&self) -> Plan {
        match self {
            // Made private: this credential may no longer see it, which
            // says nothing about whether it exists.
            GithubEvent::Repository {
                repo,
                action: RepoAction::Privatized,
            } => Plan::Recheck(vec![(SpaceKind::GithubRepo, repo.id.clone())]),
            GithubEvent::Repository { repo, .. } => {
                Plan::Refresh(vec![(SpaceKind::GithubRepo, repo.id.clone())])
            }
            // The App gained or lost access; no repository was created or
            // deleted by it.
            GithubEvent::InstallationRepositories { added, removed, .. } => Plan::Recheck(
                added
                    .iter()
                    .chain(removed)
                    .map(|id| (SpaceKind::GithubRepo, id.clone()))
                    .collect(),
            ),
            // A deleted or suspended installation hides every repository it
            // covered; that is not a deletion of any of them (trap 1).
            GithubEvent::Installation { action, .. } => match action {
                InstallationAction::Deleted | InstallationAction::Suspend => {
                    Plan::Nothing("installation lost access; spaces are not deleted")
                }
                _ => Plan::FullSync("installation access changed"),
            },
            // Every repository's full name changes with its org's login.
            GithubEvent::OrganizationRenamed { .. } => Plan::FullSync("organization renamed"),
            GithubEvent::Ping { .. } => Plan::Nothing("ping"),
            GithubEvent::HookDeleted { .. } => Plan::HookDeleted,
        }
    }
}

/// The JSON of a delivery: the body itself, or the `payload` field of a
/// form-encoded one (a form without it yields nothing, which is not JSON).
fn payload<'b>(headers: &HeaderMap, body: &'b [u8]) -> Cow<'b, [u8]> {
    if crate::webhook::intake::media_type(headers).as_deref() != Some(FORM) {
        return Cow::Borrowed(body);
    }
    let field = url::form_urlencoded::parse(body).find(|(k, _)| k == "payload");
    Cow::Owned(
        field
            .map(|(_, v)| v.into_owned().into_bytes())
            .unwrap_or_default(),
    )
}

/// Every member [`parse`] reads: nothing else of a payload is built.
pub(crate) const READS: &[&str] = &[
    "/action",
    "/repository/id",
    "/repository/full_name",
    "/repository/owner/login",
    "/changes/repository/name/from",
    "/changes/owner/from/organization/login",
    "/changes/owner/from/user/login",
    "/changes/login/from",
    "/installation/id",
    "/installation/account/login",
    "/repositories_added/*/id",
    "/repositories_removed/*/id",
    "/organization/id",
    "/organization/login",
    "/hook_id",
    "/hook/id",
];

pub(crate) fn parse(headers: &HeaderMap, body: &[u8]) -> Result<HookEvent, ParseError> {
    let event = required_header(headers, PLATFORM, EVENT_HEADER)?;
    let f = Fields::of(PLATFORM, event, &payload(headers, body), READS)?;
    let action = f.opt_str("/action");
    let parsed = match (event, action.as_deref()) {
        ("repository", Some(a)) => match repo_action(&f, a)? {
            Some(action) => GithubEvent::Repository {
                action,
                repo: repo(&f)?,
            },
            None => return Ok(unknown(event, action)),
        },
        ("installation_repositories", Some(a @ ("added" | "removed"))) => {
            GithubEvent::InstallationRepositories {
                action: if a == "added" {
                    RepoMembership::Added
                } else {
                    RepoMembership::Removed
                },
                installation_id: f.opt_id("/installation/id"),
                added: repo_ids(&f, "/repositories_added", "/repositories_added/*/id")?,
                removed: repo_ids(&f, "/repositories_removed", "/repositories_removed/*/id")?,
            }
        }
        ("installation", Some(a)) => match installation_action(a) {
            Some(action) => GithubEvent::Installation {
                action,
                installation_id: f.id("/installation/id")?,
                account: f.opt_str("/installation/account/login"),
            },
            None => return Ok(unknown(event, action)),
        },
        ("organization", Some("renamed")) => GithubEvent::OrganizationRenamed {
            org_id: canonical(SpaceKind::GithubOrg, f.id("/organization/id")?),
            login: f.str("/organization/login")?,
            from_login: f.opt_str("/changes/login/from"),
        },
        ("ping", _) => GithubEvent::Ping {
            hook_id: hook_id(&f)?,
        },
        ("meta", Some("deleted")) => GithubEvent::HookDeleted {
            hook_id: hook_id(&f)?,
        },
        ("push", _) => {
            return Ok(HookEvent::Ignored {
                platform: PLATFORM,
                event: event.to_owned(),
            });
        }
        _ => return Ok(unknown(event, action)),
    };
    Ok(HookEvent::Github(parsed))
}

fn unknown(event: &str, action: Option<String>) -> HookEvent {
    HookEvent::Unknown {
        platform: PLATFORM,
        event: event.to_owned(),
        action,
    }
}

fn canonical(kind: SpaceKind, raw: String) -> String {
    kind.canonical_id(&raw)
}

fn repo(f: &Fields<'_>) -> Result<GithubRepo, ParseError> {
    Ok(GithubRepo {
        id: canonical(SpaceKind::GithubRepo, f.id("/repository/id")?),
        full_name: f.str("/repository/full_name")?,
        owner: f.str("/repository/owner/login")?,
    })
}

fn repo_action(f: &Fields<'_>, action: &str) -> Result<Option<RepoAction>, ParseError> {
    Ok(Some(match action {
        "created" => RepoAction::Created,
        "deleted" => RepoAction::Deleted,
        "renamed" => RepoAction::Renamed {
            from_name: f.str("/changes/repository/name/from")?,
        },
        "transferred" => RepoAction::Transferred {
            from_owner: f
                .opt_str("/changes/owner/from/organization/login")
                .or_else(|| f.opt_str("/changes/owner/from/user/login")),
        },
        "archived" => RepoAction::Archived,
        "unarchived" => RepoAction::Unarchived,
        "edited" => RepoAction::Edited,
        "privatized" => RepoAction::Privatized,
        "publicized" => RepoAction::Publicized,
        _ => return Ok(None),
    }))
}

fn installation_action(action: &str) -> Option<InstallationAction> {
    Some(match action {
        "created" => InstallationAction::Created,
        "deleted" => InstallationAction::Deleted,
        "suspend" => InstallationAction::Suspend,
        "unsuspend" => InstallationAction::Unsuspend,
        "new_permissions_accepted" => InstallationAction::NewPermissionsAccepted,
        _ => return None,
    })
}

/// The ids of a `repositories_added`/`_removed` list; an absent list is
/// empty, an entry without an id is an error (it cannot be acted on).
fn repo_ids(
    f: &Fields<'_>,
    list: &str,
    entry_field: &'static str,
) -> Result<Vec<String>, ParseError> {
    match f.at(list) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(entries)) => entries
            .iter()
            .map(|e| {
                e.get("id")
                    .and_then(id_text)
                    .map(|id| SpaceKind::GithubRepo.canonical_id(&id))
                    .ok_or_else(|| f.missing(entry_field))
            })
            .collect(),
        Some(_) => Err(f.missing(entry_field)),
    }
}

/// The top-level `hook_id` names the hook that delivered; `hook.id` is the
/// fallback (the docs' org-hook ping example disagrees between the two).
fn hook_id(f: &Fields<'_>) -> Result<String, ParseError> {
    f.opt_id("/hook_id")
        .or_else(|| f.opt_id("/hook/id"))
        .ok_or_else(|| f.missing("/hook_id"))
}

pub(crate) fn delivery_key(headers: &HeaderMap) -> Result<String, ParseError> {
    let hook = required_header(headers, PLATFORM, HOOK_ID_HEADER)?;
    let guid = required_header(headers, PLATFORM, DELIVERY_HEADER)?;
    Ok(format!("github:{hook}:{}", guid.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn parse_json(event: &'static str, body: Value) -> Result<HookEvent, ParseError> {
        let mut h = HeaderMap::new();
        h.insert(EVENT_HEADER, HeaderValue::from_static(event));
        parse(&h, body.to_string().as_bytes())
    }

    #[test]
    fn form_encoded_delivery_is_read_from_its_payload_field() {
        let json = repo_body("archived").to_string();
        let form: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &json)
            .finish();
        let mut h = HeaderMap::new();
        h.insert(EVENT_HEADER, HeaderValue::from_static("repository"));
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let from_form = parse(&h, form.as_bytes()).unwrap();
        assert_eq!(
            from_form,
            parse_json("repository", repo_body("archived")).unwrap()
        );
        // A form without `payload` is an error, never an empty event.
        assert!(matches!(
            parse(&h, b"other=1"),
            Err(ParseError::NotJson { .. })
        ));
    }

    fn repo_body(action: &str) -> Value {
        json!({"action": action, "repository": {"id": 42, "full_name": "acme/widgets",
            "owner": {"login": "acme"}}})
    }

    #[test]
    fn every_plain_repository_action_is_modelled() {
        for (a, expected) in [
            ("created", RepoAction::Created),
            ("deleted", RepoAction::Deleted),
            ("archived", RepoAction::Archived),
            ("unarchived", RepoAction::Unarchived),
            ("edited", RepoAction::Edited),
            ("privatized", RepoAction::Privatized),
            ("publicized", RepoAction::Publicized),
        ] {
            let HookEvent::Github(GithubEvent::Repository { action, repo }) =
                parse_json("repository", repo_body(a)).unwrap()
            else {
                panic!("{a} did not parse as a repository event");
            };
            assert_eq!(action, expected);
            assert_eq!(repo.id, "42");
        }
    }

    #[test]
    fn renamed_without_its_old_name_is_an_error() {
        let err = parse_json("repository", repo_body("renamed")).unwrap_err();
        assert!(
            err.to_string().contains("/changes/repository/name/from"),
            "{err}"
        );
    }

    #[test]
    fn organization_rename_keeps_the_org_id() {
        let body = json!({"action": "renamed", "changes": {"login": {"from": "old-acme"}},
            "organization": {"id": 9919, "login": "acme"}});
        assert_eq!(
            parse_json("organization", body).unwrap(),
            HookEvent::Github(GithubEvent::OrganizationRenamed {
                org_id: "9919".into(),
                login: "acme".into(),
                from_login: Some("old-acme".into()),
            })
        );
    }

    fn repo_event(action: RepoAction) -> HookEvent {
        HookEvent::Github(GithubEvent::Repository {
            action,
            repo: GithubRepo {
                id: "42".into(),
                full_name: "acme/w".into(),
                owner: "acme".into(),
            },
        })
    }

    #[test]
    fn repository_events_refresh_the_repo_by_id() {
        for action in [
            RepoAction::Created,
            RepoAction::Deleted,
            RepoAction::Renamed {
                from_name: "v".into(),
            },
            RepoAction::Archived,
        ] {
            assert_eq!(
                repo_event(action).plan(),
                Plan::Refresh(vec![(SpaceKind::GithubRepo, "42".into())])
            );
        }
    }

    #[test]
    fn access_changes_are_rechecked_never_deleted() {
        assert_eq!(
            repo_event(RepoAction::Privatized).plan(),
            Plan::Recheck(vec![(SpaceKind::GithubRepo, "42".into())])
        );
        let removed = HookEvent::Github(GithubEvent::InstallationRepositories {
            action: RepoMembership::Removed,
            installation_id: Some("9".into()),
            added: vec![],
            removed: vec!["42".into()],
        });
        assert_eq!(
            removed.plan(),
            Plan::Recheck(vec![(SpaceKind::GithubRepo, "42".into())])
        );
    }

    #[test]
    fn org_rename_syncs_and_lost_installations_delete_nothing() {
        let renamed = HookEvent::Github(GithubEvent::OrganizationRenamed {
            org_id: "1".into(),
            login: "a".into(),
            from_login: None,
        });
        assert!(matches!(renamed.plan(), Plan::FullSync(_)));
        let gone = HookEvent::Github(GithubEvent::Installation {
            action: InstallationAction::Deleted,
            installation_id: "9".into(),
            account: None,
        });
        assert!(matches!(gone.plan(), Plan::Nothing(_)));
        let meta = HookEvent::Github(GithubEvent::HookDeleted {
            hook_id: "1".into(),
        });
        assert_eq!(meta.plan(), Plan::HookDeleted);
    }

    #[test]
    fn odd_input_is_an_error_or_unknown_never_a_panic() {
        assert!(
            parse_json("repository", json!([1, 2]))
                .is_ok_and(|e| matches!(e, HookEvent::Unknown { action: None, .. }))
        );
        assert!(parse_json("repository", json!({"action": "created"})).is_err());
        assert!(parse_json("repository", json!({"action": 3})).is_ok());
        let bad_list = json!({"action": "removed", "repositories_removed": [{"name": "x"}]});
        assert!(parse_json("installation_repositories", bad_list).is_err());
        let mut h = HeaderMap::new();
        h.insert(EVENT_HEADER, HeaderValue::from_static("repository"));
        assert!(matches!(
            parse(&h, b"payload=%7B%7D"),
            Err(ParseError::NotJson { .. })
        ));
        assert!(matches!(
            parse(&HeaderMap::new(), b"{}"),
            Err(ParseError::MissingHeader { .. })
        ));
    }
}
