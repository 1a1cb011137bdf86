//! Every GitHub webhook sample parses into the event the catalogue expects.

use cmcp_connectors::webhook::HookEvent;
use cmcp_connectors::webhook::{
    GithubEvent, GithubRepo, InstallationAction, RepoAction, RepoMembership,
};
use cmcp_domain::Platform;

use crate::support::{delivery_id, fixture, parse_verified, payload_files, verified};

fn hello_world() -> GithubRepo {
    GithubRepo {
        id: "186853261".into(),
        full_name: "Octocoders/Hello-World".into(),
        owner: "Octocoders".into(),
    }
}

fn repository(action: RepoAction) -> HookEvent {
    HookEvent::Github(GithubEvent::Repository {
        action,
        repo: hello_world(),
    })
}

fn installation(action: InstallationAction, id: &str, account: &str) -> HookEvent {
    HookEvent::Github(GithubEvent::Installation {
        action,
        installation_id: id.into(),
        account: Some(account.into()),
    })
}

/// (sample, `X-GitHub-Event` it is delivered with, expected event).
fn expectations() -> Vec<(&'static str, &'static str, HookEvent)> {
    use InstallationAction as I;
    let ping = |hook_id: &str| {
        HookEvent::Github(GithubEvent::Ping {
            hook_id: hook_id.into(),
        })
    };
    vec![
        (
            "webhook-installation-created.json",
            "installation",
            installation(I::Created, "957387", "Codertocat"),
        ),
        (
            "webhook-installation-deleted.json",
            "installation",
            installation(I::Deleted, "2", "octocat"),
        ),
        (
            "webhook-installation-new_permissions_accepted.json",
            "installation",
            installation(I::NewPermissionsAccepted, "957387", "Codertocat"),
        ),
        (
            "webhook-installation-suspend.json",
            "installation",
            installation(I::Suspend, "16598467", "Codertocat"),
        ),
        (
            "webhook-installation_repositories-added.json",
            "installation_repositories",
            HookEvent::Github(GithubEvent::InstallationRepositories {
                action: RepoMembership::Added,
                installation_id: Some("957387".into()),
                added: vec!["186853007".into()],
                removed: vec![],
            }),
        ),
        (
            "webhook-meta-deleted.json",
            "meta",
            HookEvent::Github(GithubEvent::HookDeleted {
                hook_id: "101047067".into(),
            }),
        ),
        ("webhook-ping-github-app.json", "ping", ping("109948940")),
        // The docs' org example has hook_id 109948940 but hook.id 266738161;
        // hook_id is the documented "hook that triggered the ping".
        ("webhook-ping-org-hook.json", "ping", ping("109948940")),
        ("webhook-ping-repo-hook.json", "ping", ping("109948940")),
        (
            "webhook-push.json",
            "push",
            HookEvent::Ignored {
                platform: Platform::Github,
                event: "push".into(),
            },
        ),
        (
            "webhook-repository-created.json",
            "repository",
            repository(RepoAction::Created),
        ),
        (
            "webhook-repository-edited-default-branch.json",
            "repository",
            repository(RepoAction::Edited),
        ),
        (
            "webhook-repository-edited.json",
            "repository",
            repository(RepoAction::Edited),
        ),
        (
            "webhook-repository-renamed.json",
            "repository",
            repository(RepoAction::Renamed {
                from_name: "Hello-World".into(),
            }),
        ),
        (
            "webhook-repository-transferred.json",
            "repository",
            repository(RepoAction::Transferred {
                from_owner: Some("octocat".into()),
            }),
        ),
    ]
}

#[test]
fn every_github_sample_parses_into_its_event() {
    let table = expectations();
    let covered: Vec<&str> = table.iter().map(|(f, _, _)| *f).collect();
    assert_eq!(
        payload_files("github"),
        covered,
        "a sample has no expectation"
    );
    for (file, event, expected) in table {
        let v = verified(
            Platform::Github,
            &[
                ("X-GitHub-Event", event),
                ("X-GitHub-Hook-ID", "1"),
                ("X-GitHub-Delivery", "00000000-0000-0000-0000-000000000001"),
            ],
            &fixture("github", file),
        );
        assert_eq!(parse_verified(&v).unwrap(), expected, "{file}");
    }
}

#[test]
fn a_sample_under_an_unmodelled_event_name_is_unknown() {
    let v = verified(
        Platform::Github,
        &[("X-GitHub-Event", "star")],
        &fixture("github", "webhook-repository-created.json"),
    );
    assert_eq!(
        parse_verified(&v).unwrap(),
        HookEvent::Unknown {
            platform: Platform::Github,
            event: "star".into(),
            action: Some("created".into())
        }
    );
}

#[test]
fn redelivery_keeps_the_key_and_another_hook_does_not() {
    let body = fixture("github", "webhook-repository-renamed.json");
    let key = |hook: &str| {
        let v = verified(
            Platform::Github,
            &[
                ("X-GitHub-Event", "repository"),
                ("X-GitHub-Hook-ID", hook),
                ("X-GitHub-Delivery", "72D3162E-CC78-11E3-81AB-4C9367DC0958"),
            ],
            &body,
        );
        delivery_id(&v).unwrap()
    };
    assert_eq!(key("7"), key("7"));
    assert_ne!(key("7"), key("8"));
    assert_eq!(
        key("7").to_string(),
        "github:7:72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    let no_hook = verified(Platform::Github, &[("X-GitHub-Delivery", "x")], &body);
    assert!(delivery_id(&no_hook).is_err());
}

#[test]
fn a_signed_body_that_is_not_json_is_a_parse_error() {
    let v = verified(
        Platform::Github,
        &[("X-GitHub-Event", "repository")],
        b"payload=%7B%7D",
    );
    assert!(parse_verified(&v).is_err());
}
