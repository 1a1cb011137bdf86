//! The Jira webhook sample parses; its numeric project id becomes a string.

use cmcp_connectors::webhook::HookEvent;
use cmcp_connectors::webhook::{JiraEvent, JiraProject, ProjectChange};
use cmcp_domain::Platform;

use crate::support::{delivery_id, fixture, parse_verified, payload_files, verified};

const SAMPLE: &str = "webhook-project_created.third-party-doc-example.json";

#[test]
fn every_jira_sample_parses_into_its_event() {
    assert_eq!(
        payload_files("jira"),
        [SAMPLE],
        "a sample has no expectation"
    );
    let body = fixture("jira", SAMPLE);
    let raw: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        raw["project"]["id"].is_number(),
        "the sample sends a number"
    );
    let v = verified(
        Platform::Jira,
        &[("X-Atlassian-Webhook-Identifier", "3f2e1d")],
        &body,
    );
    assert_eq!(
        parse_verified(&v).unwrap(),
        HookEvent::Jira(JiraEvent::Project {
            change: ProjectChange::Created,
            project: JiraProject {
                id: "12345".into(),
                key: Some("ACTP".into()),
                name: Some("Agent Connector Test Project".into()),
            },
        })
    );
    assert_eq!(delivery_id(&v).unwrap().as_str(), "jira:3f2e1d");
}

/// The same project as REST would name it (`"id": "12345"`) is the same id.
#[test]
fn string_and_number_ids_agree() {
    let body = String::from_utf8(fixture("jira", SAMPLE)).unwrap();
    let as_string = body.replacen("\"id\": 12345", "\"id\": \"12345\"", 1);
    assert_ne!(body, as_string);
    let id = |b: &str| match parse_verified(&verified(Platform::Jira, &[], b.as_bytes())) {
        Ok(HookEvent::Jira(JiraEvent::Project { project, .. })) => project.id,
        other => panic!("{other:?}"),
    };
    assert_eq!(id(&body), id(&as_string));
}
