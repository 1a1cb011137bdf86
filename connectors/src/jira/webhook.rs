//! Jira Cloud (admin) webhook deliveries: the event is the body's
//! `webhookEvent`. Projects are keyed by their id, which webhooks send as a
//! number and REST as a string; it is always a string here so both paths
//! name the same space. The project key is an alias (keys change and old ones
//! keep redirecting).

use cmcp_domain::{Platform, SpaceKind};
use http::HeaderMap;

use crate::webhook::{Fields, HookEvent, ParseError, Plan, required_header};

pub const IDENTIFIER_HEADER: &str = "x-atlassian-webhook-identifier";
pub const RETRY_HEADER: &str = "x-atlassian-webhook-retry";

/// What the gateway keeps of a delivery's headers.
pub const KEPT_HEADERS: &[&str] = &[
    IDENTIFIER_HEADER,
    RETRY_HEADER,
    "content-type",
    "user-agent",
];

const PLATFORM: Platform = Platform::Jira;

/// Jira publishes no cap; project and issue events are a few KB, an issue
/// with a long description and many fields well under a megabyte.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Jira Cloud admin webhooks send JSON only.
pub const CONTENT_TYPES: &[&str] = &["application/json"];
const EVENT_FIELD: &str = "/webhookEvent";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JiraProject {
    /// `project.id` as a string, canonical.
    pub id: String,
    pub key: Option<String>,
    pub name: Option<String>,
}

/// The project lifecycle events an admin webhook can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectChange {
    Created,
    Updated,
    Deleted,
    SoftDeleted,
    RestoredDeleted,
    Archived,
    RestoredArchived,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JiraEvent {
    Project {
        change: ProjectChange,
        project: JiraProject,
    },
}

impl JiraEvent {
    /// The body's `webhookEvent`.
    pub fn label(&self) -> &'static str {
        let JiraEvent::Project { change, .. } = self;
        match change {
            ProjectChange::Created => "project_created",
            ProjectChange::Updated => "project_updated",
            ProjectChange::Deleted => "project_deleted",
            ProjectChange::SoftDeleted => "project_soft_deleted",
            ProjectChange::RestoredDeleted => "project_restored_deleted",
            ProjectChange::Archived => "project_archived",
            ProjectChange::RestoredArchived => "project_restored_archived",
        }
    }

    pub fn plan(&self) -> Plan {
        let JiraEvent::Project { project, .. } = self;
        Plan::Refresh(vec![(SpaceKind::JiraProject, project.id.clone())])
    }
}

/// Every member [`parse`] reads: nothing else of a payload is built.
pub(crate) const READS: &[&str] = &[EVENT_FIELD, "/project/id", "/project/key", "/project/name"];

pub(crate) fn parse(_headers: &HeaderMap, body: &[u8]) -> Result<HookEvent, ParseError> {
    let unnamed = Fields::of(PLATFORM, "(unnamed)", body, READS)?;
    let event = unnamed.str(EVENT_FIELD)?;
    let f = unnamed.named(&event);
    let change = match event.as_str() {
        "project_created" => ProjectChange::Created,
        "project_updated" => ProjectChange::Updated,
        "project_deleted" => ProjectChange::Deleted,
        "project_soft_deleted" => ProjectChange::SoftDeleted,
        "project_restored_deleted" => ProjectChange::RestoredDeleted,
        "project_archived" => ProjectChange::Archived,
        "project_restored_archived" => ProjectChange::RestoredArchived,
        _ => {
            return Ok(HookEvent::Unknown {
                platform: PLATFORM,
                event,
                action: None,
            });
        }
    };
    let project = JiraProject {
        id: SpaceKind::JiraProject.canonical_id(&f.id("/project/id")?),
        key: f.opt_str("/project/key"),
        name: f.opt_str("/project/name"),
    };
    Ok(HookEvent::Jira(JiraEvent::Project { change, project }))
}

pub(crate) fn delivery_key(headers: &HeaderMap) -> Result<String, ParseError> {
    let id = required_header(headers, PLATFORM, IDENTIFIER_HEADER)?;
    Ok(format!("jira:{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(body: serde_json::Value) -> Result<HookEvent, ParseError> {
        parse(&HeaderMap::new(), body.to_string().as_bytes())
    }

    #[test]
    fn every_project_event_is_modelled_and_the_id_is_a_string() {
        for (name, change) in [
            ("project_created", ProjectChange::Created),
            ("project_updated", ProjectChange::Updated),
            ("project_deleted", ProjectChange::Deleted),
            ("project_soft_deleted", ProjectChange::SoftDeleted),
            ("project_restored_deleted", ProjectChange::RestoredDeleted),
            ("project_archived", ProjectChange::Archived),
            ("project_restored_archived", ProjectChange::RestoredArchived),
        ] {
            for id in [json!(10000), json!("10000")] {
                let body = json!({"webhookEvent": name, "project": {"id": id, "key": "EX"}});
                assert_eq!(
                    parse_json(body).unwrap(),
                    HookEvent::Jira(JiraEvent::Project {
                        change,
                        project: JiraProject {
                            id: "10000".into(),
                            key: Some("EX".into()),
                            name: None
                        }
                    })
                );
            }
        }
    }

    #[test]
    fn odd_bodies() {
        assert!(parse_json(json!({"project": {"id": 1}})).is_err());
        assert!(parse_json(json!({"webhookEvent": "project_created"})).is_err());
        assert!(matches!(
            parse_json(json!({"webhookEvent": "jira:issue_created"})).unwrap(),
            HookEvent::Unknown { .. }
        ));
    }
}
