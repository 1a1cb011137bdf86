//! A person's manifest: their spaces with recognisers, versions and diffs.

use cmcp_domain::{AliasKind, Owner};
use cmcp_registry::testing::{TestDb, settle_changes};

use crate::support::{add_connection, addr, repo};

both_backends!(
    the_manifest_lists_company_and_own_spaces_with_recognisers,
    a_manifest_since_a_version_lists_exactly_what_changed_after_it,
    a_version_too_old_to_diff_answers_the_whole_manifest,
);

async fn the_manifest_lists_company_and_own_spaces_with_recognisers(db: TestDb) {
    let s = &db.store;
    let alice = Owner::Person("alice".into());
    let bob = Owner::Person("bob".into());
    add_connection(s, "gh", Owner::Company).await;
    add_connection(s, "gh-alice", alice.clone()).await;
    add_connection(s, "gh-bob", bob.clone()).await;
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "old")])
        .await
        .unwrap();
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    s.apply_page("gh-alice", &alice, &[repo(2, "alice", "notes")])
        .await
        .unwrap();
    s.apply_page("gh-bob", &bob, &[repo(3, "bob", "diary")])
        .await
        .unwrap();
    let m = s.manifest("alice", None, 1000).await.unwrap();
    assert!(m.full && !m.too_old);
    let got: Vec<_> = m.spaces.iter().map(|e| e.address.clone()).collect();
    assert_eq!(got, [addr(1), addr(2)]);
    let api = &m.spaces[0];
    let remotes: Vec<&str> = api
        .recognisers
        .iter()
        .filter(|r| r.kind == AliasKind::GitRemote.as_str())
        .map(|r| r.value.as_str())
        .collect();
    assert_eq!(remotes, ["github.com/acme/api"]);
    let remote = api
        .recognisers
        .iter()
        .find(|r| r.kind == "git-remote")
        .unwrap();
    assert!(
        remote
            .spellings
            .contains(&"git@github.com:acme/api.git".to_owned())
    );
    assert!(
        api.recognisers
            .iter()
            .any(|r| r.kind == "host-id" && r.value == "R_node1")
    );
    assert!(api.retired.iter().any(|r| r.value == "github.com/acme/old"));
    let for_bob = s.manifest("bob", None, 1000).await.unwrap();
    let got: Vec<_> = for_bob.spaces.iter().map(|e| e.address.clone()).collect();
    assert_eq!(got, [addr(1), addr(3)]);
}

async fn a_manifest_since_a_version_lists_exactly_what_changed_after_it(db: TestDb) {
    let s = &db.store;
    let alice = Owner::Person("alice".into());
    add_connection(s, "gh", Owner::Company).await;
    add_connection(s, "gh-alice", alice.clone()).await;
    s.apply_page(
        "gh",
        &Owner::Company,
        &[
            repo(1, "acme", "api"),
            repo(2, "acme", "web"),
            repo(5, "acme", "doomed"),
        ],
    )
    .await
    .unwrap();
    settle_changes(s).await;
    let v1 = s.manifest("alice", None, 1000).await.unwrap().version;
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "api-renamed")])
        .await
        .unwrap();
    s.apply_page("gh-alice", &alice, &[repo(3, "alice", "notes")])
        .await
        .unwrap();
    s.apply_page("gh", &Owner::Company, &[repo(4, "acme", "new")])
        .await
        .unwrap();
    s.tombstone("gh", &addr(5), true).await.unwrap();
    settle_changes(s).await;
    let d = s.manifest("alice", Some(v1), 1000).await.unwrap();
    assert!(!d.full && !d.too_old && d.spaces.is_empty());
    let added: Vec<_> = d.added.iter().map(|e| e.address.clone()).collect();
    let changed: Vec<_> = d.changed.iter().map(|e| e.address.clone()).collect();
    assert_eq!(added, [addr(3), addr(4)]);
    assert_eq!(changed, [addr(1)]);
    assert_eq!(d.removed, [addr(5)]);
    assert!(
        d.changed[0]
            .recognisers
            .iter()
            .any(|r| r.value == "github.com/acme/api-renamed")
    );
    // Bob's diff never mentions alice's private space.
    let b = s.manifest("bob", Some(v1), 1000).await.unwrap();
    assert!(!b.added.iter().any(|e| e.address == addr(3)));
    // Nothing since the latest version.
    let again = s.manifest("alice", Some(d.version), 1000).await.unwrap();
    assert!(again.added.is_empty() && again.changed.is_empty() && again.removed.is_empty());
}

async fn a_version_too_old_to_diff_answers_the_whole_manifest(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    settle_changes(s).await;
    let v0 = s.manifest("alice", None, 1000).await.unwrap().version;
    let many: Vec<_> = (1..=5).map(|i| repo(i, "acme", &format!("r{i}"))).collect();
    s.apply_page("gh", &Owner::Company, &many).await.unwrap();
    settle_changes(s).await;
    // Five changes (a row a new space), one more than the diff may hold.
    let m = s.manifest("alice", Some(v0), 4).await.unwrap();
    assert!(m.full && m.too_old);
    assert_eq!(m.spaces.len(), 5);
    // A version this store never gave is not diffed either.
    let future = cmcp_registry::Cursor {
        tx: i64::MAX / 2,
        id: 1,
    };
    let m = s.manifest("alice", Some(future), 1000).await.unwrap();
    assert!(m.full && m.too_old);
}
