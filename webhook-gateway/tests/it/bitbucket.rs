//! Every Bitbucket webhook sample parses; uuids come out canonical.

use cmcp_connectors::webhook::HookEvent;
use cmcp_connectors::webhook::{BitbucketEvent, BitbucketRepo, Change};
use cmcp_domain::{Platform, SpaceAddress, SpaceKind};

use crate::support::{delivery_id, fixture, parse_verified, payload_files, verified};

const REPO_UUID: &str = "673a6070-3421-46c9-9d48-90745f7bfe8e";

fn parse(event_key: &str, file: &str) -> HookEvent {
    let v = verified(
        Platform::Bitbucket,
        &[("X-Event-Key", event_key)],
        &fixture("bitbucket", file),
    );
    parse_verified(&v).unwrap()
}

#[test]
fn every_bitbucket_sample_parses_into_its_event() {
    let table = [
        // Data Center is a different API (numeric ids, its own event keys):
        // recognised as Unknown rather than misread as Cloud.
        ("datacenter-webhook-repo-modified.json", "repo:modified"),
        (
            "datacenter-webhook-repo-refs-changed.json",
            "repo:refs_changed",
        ),
        ("webhook-repo-push.json", "repo:push"),
        ("webhook-repo-updated.json", "repo:updated"),
    ];
    let covered: Vec<&str> = table.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        payload_files("bitbucket"),
        covered,
        "a sample has no expectation"
    );

    for (file, key) in &table[..2] {
        assert_eq!(
            parse(key, file),
            HookEvent::Unknown {
                platform: Platform::Bitbucket,
                event: (*key).into(),
                action: None
            },
            "{file}"
        );
    }
    assert_eq!(
        parse("repo:push", "webhook-repo-push.json"),
        HookEvent::Ignored {
            platform: Platform::Bitbucket,
            event: "repo:push".into()
        }
    );
    assert_eq!(
        parse("repo:updated", "webhook-repo-updated.json"),
        HookEvent::Bitbucket(BitbucketEvent::RepoUpdated {
            repo: BitbucketRepo {
                uuid: REPO_UUID.into(),
                full_name: Some("team_name/repo_name".into()),
                name: Some("repo_name".into()),
                project_uuid: Some("3b7898dc-6891-4225-ae60-24613bb83080".into()),
                workspace_uuid: None,
            },
            name: Some(Change {
                old: "repository_name".into(),
                new: "repository".into()
            }),
            full_name: Some(Change {
                old: "teamawesome/repository_name".into(),
                new: "teamawesome/repository".into()
            }),
        })
    );
}

/// The sample's braced uuid, an upper-case copy and the bare form name one
/// space.
#[test]
fn braced_and_upper_case_uuids_are_one_space() {
    let raw = String::from_utf8(fixture("bitbucket", "webhook-repo-updated.json")).unwrap();
    assert!(raw.contains("{673a6070-3421-46c9-9d48-90745f7bfe8e}"));
    let upper = raw.replace(
        "{673a6070-3421-46c9-9d48-90745f7bfe8e}",
        "{673A6070-3421-46C9-9D48-90745F7BFE8E}",
    );
    let uuid_of = |body: &[u8]| {
        let v = verified(
            Platform::Bitbucket,
            &[("X-Event-Key", "repo:deleted")],
            body,
        );
        match parse_verified(&v).unwrap() {
            HookEvent::Bitbucket(BitbucketEvent::RepoDeleted { repo }) => repo.uuid,
            other => panic!("{other:?}"),
        }
    };
    let (a, b) = (uuid_of(raw.as_bytes()), uuid_of(upper.as_bytes()));
    assert_eq!(a, REPO_UUID);
    assert_eq!(a, b);
    assert_eq!(
        a,
        SpaceKind::BitbucketRepo.canonical_id("{673A6070-3421-46C9-9D48-90745F7BFE8E}")
    );
    let address = SpaceAddress::new(SpaceKind::BitbucketRepo, "ws", &a).unwrap();
    assert_eq!(address.stable_id(), REPO_UUID);
}

#[test]
fn delivery_key_is_request_uuid_and_content() {
    let body = fixture("bitbucket", "webhook-repo-updated.json");
    let key = |request: &str, body: &[u8]| {
        let v = verified(Platform::Bitbucket, &[("X-Request-UUID", request)], body);
        delivery_id(&v).unwrap()
    };
    let a = key("6b6c3a9e-0000-4000-8000-000000000001", &body);
    assert_eq!(a, key("6B6C3A9E-0000-4000-8000-000000000001", &body));
    assert_ne!(a, key("6b6c3a9e-0000-4000-8000-000000000002", &body));
    assert_ne!(a, key("6b6c3a9e-0000-4000-8000-000000000001", b"{}"));
    assert!(
        a.as_str()
            .starts_with("bitbucket:6b6c3a9e-0000-4000-8000-000000000001:")
    );
    let none = verified(Platform::Bitbucket, &[], &body);
    assert!(delivery_id(&none).is_err());
}
