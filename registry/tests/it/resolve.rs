//! Resolving what a tool sees to one space: spellings, ranks, ambiguity,
//! pasted forms and who may see what.

use cmcp_domain::{Alias, AliasKind, Owner, SpaceAddress, SpaceKind, SpaceRecord, SpaceState};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{InlineReads, MatchRank, Resolved, Store, Viewer};

use crate::support::{add_connection, repo};

both_backends!(
    five_spellings_and_a_retired_remote_resolve_to_one_space,
    a_key_outranks_a_repo_of_the_same_name_and_ties_are_ambiguous,
    pasted_forms_resolve,
    a_bare_id_on_two_platforms_is_ambiguous,
    a_private_space_resolves_only_for_its_person,
);

pub fn space(
    kind: SpaceKind,
    tenant: &str,
    id: &str,
    name: &str,
    aliases: &[(AliasKind, &str)],
) -> SpaceRecord {
    SpaceRecord {
        address: SpaceAddress::new(kind, tenant, id).unwrap(),
        display_name: name.to_owned(),
        container: None,
        aliases: aliases
            .iter()
            .filter_map(|(k, v)| Alias::new(*k, v))
            .collect(),
        state: SpaceState::default(),
    }
}

/// The pool's answer; on a SQLite file the API's inline reader must give
/// the very same one, so every case here checks both readers.
async fn one(store: &Store, input: &str, viewer: &Viewer) -> Resolved {
    let pooled = store.resolve_one(input, Some(viewer)).await.unwrap();
    if let Some(inline) = InlineReads::of(store) {
        let read = inline
            .resolve_one(input, Some(viewer))
            .expect("the inline reader answers")
            .unwrap();
        assert_eq!(format!("{read:?}"), format!("{pooled:?}"), "{input}");
    } else {
        assert!(
            matches!(store, Store::Postgres(_)),
            "a SQLite file reads inline"
        );
    }
    pooled
}

fn found(r: Resolved) -> (String, MatchRank, bool) {
    match r {
        Resolved::Found(r) => (r.space.address.to_string(), r.rank, r.retired),
        other => panic!("expected one space, got {other:?}"),
    }
}

async fn five_spellings_and_a_retired_remote_resolve_to_one_space(db: TestDb) {
    add_connection(&db.store, "gh", Owner::Company).await;
    db.store
        .apply_page("gh", &Owner::Company, &[repo(1, "acme", "old-api")])
        .await
        .unwrap();
    db.store
        .apply_page("gh", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    let want = "space:github-repo:github.com/1";
    let c = Viewer::Company;
    for s in [
        "https://github.com/acme/api.git",
        "git@github.com:acme/api.git",
        "ssh://git@github.com/acme/api.git",
        "https://github.com/Acme/API",
        "https://user@github.com:443/acme/api.git/",
    ] {
        let (addr, rank, retired) = found(one(&db.store, s, &c).await);
        assert_eq!(
            (addr.as_str(), rank, retired),
            (want, MatchRank::Url, false),
            "{s}"
        );
    }
    let (addr, _, retired) = found(one(&db.store, "git@github.com:acme/old-api.git", &c).await);
    assert_eq!((addr.as_str(), retired), (want, true));
    assert!(matches!(
        one(&db.store, "git@github.com:acme/nothing.git", &c).await,
        Resolved::Unknown
    ));
    // Two repos with one name in two orgs: the bare name is ambiguous.
    db.store
        .apply_page("gh", &Owner::Company, &[repo(2, "other", "api")])
        .await
        .unwrap();
    match one(&db.store, "api", &c).await {
        Resolved::Ambiguous(all) => assert_eq!(all.len(), 2),
        other => panic!("expected ambiguous, got {other:?}"),
    }
}

async fn a_key_outranks_a_repo_of_the_same_name_and_ties_are_ambiguous(db: TestDb) {
    add_connection(&db.store, "gh", Owner::Company).await;
    let jira = space(
        SpaceKind::JiraProject,
        "acme.atlassian.net",
        "10001",
        "Platform",
        &[(AliasKind::Key, "PLAT"), (AliasKind::Name, "Platform")],
    );
    let plat_repo = repo(7, "acme", "PLAT");
    db.store
        .apply_page("gh", &Owner::Company, &[jira, plat_repo])
        .await
        .unwrap();
    let (addr, rank, _) = found(one(&db.store, "PLAT", &Viewer::Company).await);
    assert_eq!(
        (addr.as_str(), rank),
        (
            "space:jira-project:acme.atlassian.net/10001",
            MatchRank::Key
        )
    );
    let bb = space(
        SpaceKind::BitbucketProject,
        "acme",
        "{b0000000-0000-4000-8000-000000000001}",
        "Plat",
        &[(AliasKind::Key, "PLAT")],
    );
    db.store
        .apply_page("gh", &Owner::Company, &[bb])
        .await
        .unwrap();
    match one(&db.store, "PLAT", &Viewer::Company).await {
        Resolved::Ambiguous(all) => {
            assert_eq!(all.len(), 2);
            assert!(all.iter().all(|r| r.rank == MatchRank::Key));
        }
        other => panic!("expected ambiguous, got {other:?}"),
    }
}

async fn pasted_forms_resolve(db: TestDb) {
    add_connection(&db.store, "gh", Owner::Company).await;
    let uuid = "1b2c3d4e-0000-4000-8000-00000000000a";
    let bb = space(
        SpaceKind::BitbucketRepo,
        "acme",
        &format!("{{{uuid}}}"),
        "billing",
        &[
            (AliasKind::WebUrl, "https://bitbucket.org/acme/billing"),
            (AliasKind::GitRemote, "git@bitbucket.org:acme/billing.git"),
        ],
    );
    let folder = space(
        SpaceKind::DriveFolder,
        "0AbcDrive",
        "1FoLdEr_xYz",
        "Specs",
        &[(AliasKind::Name, "Specs")],
    );
    db.store
        .apply_page("gh", &Owner::Company, &[repo(3, "acme", "web"), bb, folder])
        .await
        .unwrap();
    let c = Viewer::Company;
    let cases = [
        (
            "https://www.github.com/acme/web/tree/main/src",
            "space:github-repo:github.com/3",
        ),
        (
            "https://github.com/acme/web/blob/main/README.md",
            "space:github-repo:github.com/3",
        ),
        (
            "https://bitbucket.org/acme/billing/src/main/README.md",
            "space:bitbucket-repo:acme/1b2c3d4e-0000-4000-8000-00000000000a",
        ),
        (
            "{1B2C3D4E-0000-4000-8000-00000000000A}",
            "space:bitbucket-repo:acme/1b2c3d4e-0000-4000-8000-00000000000a",
        ),
        (
            uuid,
            "space:bitbucket-repo:acme/1b2c3d4e-0000-4000-8000-00000000000a",
        ),
        ("1FoLdEr_xYz", "space:drive-folder:0AbcDrive/1FoLdEr_xYz"),
        (
            "https://drive.google.com/drive/u/0/folders/1FoLdEr_xYz?usp=sharing",
            "space:drive-folder:0AbcDrive/1FoLdEr_xYz",
        ),
        ("R_node3", "space:github-repo:github.com/3"),
        (
            "space:github-repo:github.com/3",
            "space:github-repo:github.com/3",
        ),
    ];
    for (input, want) in cases {
        let (addr, _, _) = found(one(&db.store, input, &c).await);
        assert_eq!(addr.to_lowercase(), want.to_lowercase(), "{input}");
    }
    // Drive ids are case-sensitive: another case is another folder.
    assert!(matches!(
        one(&db.store, "1folder_xyz", &c).await,
        Resolved::Unknown
    ));
}

async fn a_bare_id_on_two_platforms_is_ambiguous(db: TestDb) {
    add_connection(&db.store, "gh", Owner::Company).await;
    let jira = space(
        SpaceKind::JiraProject,
        "acme.atlassian.net",
        "10001",
        "Platform",
        &[(AliasKind::Key, "PLAT")],
    );
    db.store
        .apply_page("gh", &Owner::Company, &[jira])
        .await
        .unwrap();
    let (addr, rank, _) = found(one(&db.store, "10001", &Viewer::Company).await);
    assert_eq!(
        (addr.as_str(), rank),
        ("space:jira-project:acme.atlassian.net/10001", MatchRank::Id)
    );
    db.store
        .apply_page("gh", &Owner::Company, &[repo(10001, "acme", "numbers")])
        .await
        .unwrap();
    match one(&db.store, "10001", &Viewer::Company).await {
        Resolved::Ambiguous(all) => assert_eq!(all.len(), 2),
        other => panic!("expected ambiguous, got {other:?}"),
    }
}

async fn a_private_space_resolves_only_for_its_person(db: TestDb) {
    let alice = Owner::Person("alice".into());
    add_connection(&db.store, "gh-alice", alice.clone()).await;
    db.store
        .apply_page("gh-alice", &alice, &[repo(50, "alice", "notes")])
        .await
        .unwrap();
    let remote = "git@github.com:alice/notes.git";
    let (addr, _, _) = found(one(&db.store, remote, &Viewer::Person("alice".into())).await);
    assert_eq!(addr, "space:github-repo:github.com/50");
    for v in [Viewer::Person("bob".into()), Viewer::Company] {
        assert!(
            matches!(one(&db.store, remote, &v).await, Resolved::Unknown),
            "{v:?}"
        );
        assert!(matches!(
            one(&db.store, "space:github-repo:github.com/50", &v).await,
            Resolved::Unknown
        ));
    }
    // Another person's same-named repo never makes alice's answer ambiguous.
    let bob = Owner::Person("bob".into());
    add_connection(&db.store, "gh-bob", bob.clone()).await;
    db.store
        .apply_page("gh-bob", &bob, &[repo(51, "bob", "notes")])
        .await
        .unwrap();
    let (addr, _, _) = found(one(&db.store, "notes", &Viewer::Person("alice".into())).await);
    assert_eq!(addr, "space:github-repo:github.com/50");
}
