//! Spaces and aliases: pages applied, renames and transfers with history,
//! missing and revived, ownership, tombstones, resolution.

use std::collections::HashSet;

use cmcp_domain::{AliasKind, Owner, SpaceAddress, SpaceRecord, SpaceStatus, Visibility};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SpaceFilter, TombstoneOutcome};

use crate::support::{add_connection, addr, org, repo, try_exec};

both_backends!(
    apply_page_creates_spaces_with_aliases,
    unchanged_page_writes_nothing,
    rename_keeps_space_id_and_old_alias_resolves,
    renaming_back_reopens_the_old_value,
    transfer_retires_old_owner_aliases,
    complete_listing_marks_unseen_missing_and_revives,
    person_connection_cannot_write_company_space,
    reused_name_resolves_to_both_active_first,
    tombstone_keeps_aliases,
    a_space_is_never_deleted_so_nothing_outlives_it,
    resolve_by_address_and_unknown_input,
);

async fn apply_page_creates_spaces_with_aliases(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let page: Vec<SpaceRecord> = (1..=150)
        .map(|i| repo(i, "acme", &format!("repo-{i}")))
        .collect();
    let stats = db
        .store
        .apply_page("c", &Owner::Company, &page)
        .await
        .unwrap();
    assert_eq!(stats.created, 150);
    assert_eq!(
        db.store
            .count_spaces(Some("c"), Some(SpaceStatus::Active))
            .await
            .unwrap(),
        150
    );
    let space = db.store.get_space(&addr(7)).await.unwrap().unwrap();
    assert_eq!(space.display_name, "acme/repo-7");
    assert_eq!(space.container, Some(org()));
    assert_eq!(space.visibility, Some(Visibility::Private));
    let history = db.store.alias_history(&addr(7)).await.unwrap();
    // Two remote spellings normalise to one alias.
    assert_eq!(history.len(), 5, "{history:#?}");
    for input in [
        "git@github.com:ACME/repo-7.git",
        "https://github.com/acme/repo-7",
        "acme/repo-7",
        "R_node7",
    ] {
        let found = db.store.resolve(input).await.unwrap();
        assert_eq!(found.len(), 1, "{input}");
        assert_eq!(found[0].space.address, addr(7), "{input}");
        assert!(!found[0].retired);
    }
}

async fn unchanged_page_writes_nothing(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let page: Vec<SpaceRecord> = (1..=20)
        .map(|i| repo(i, "acme", &format!("r{i}")))
        .collect();
    db.store
        .apply_page("c", &Owner::Company, &page)
        .await
        .unwrap();
    let before = db.store.list_spaces(&SpaceFilter::default()).await.unwrap();
    let aliases_before = db.store.active_aliases("c").await.unwrap();
    let stats = db
        .store
        .apply_page("c", &Owner::Company, &page)
        .await
        .unwrap();
    assert_eq!(stats.unchanged, 20);
    assert_eq!((stats.created, stats.updated, stats.renamed), (0, 0, 0));
    assert_eq!(
        db.store.list_spaces(&SpaceFilter::default()).await.unwrap(),
        before
    );
    assert_eq!(db.store.active_aliases("c").await.unwrap(), aliases_before);
}

async fn rename_keeps_space_id_and_old_alias_resolves(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    db.store
        .apply_page("c", &Owner::Company, &[repo(42, "acme", "old-name")])
        .await
        .unwrap();
    let stats = db
        .store
        .apply_page("c", &Owner::Company, &[repo(42, "acme", "new-name")])
        .await
        .unwrap();
    assert_eq!(stats.renamed, 1);
    assert_eq!(db.store.count_spaces(None, None).await.unwrap(), 1);
    let new = db
        .store
        .resolve("git@github.com:acme/new-name.git")
        .await
        .unwrap();
    assert_eq!(new[0].space.address, addr(42));
    assert!(!new[0].retired);
    let old = db
        .store
        .resolve("https://github.com/acme/old-name.git")
        .await
        .unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].space.address, addr(42));
    assert!(old[0].retired, "the old remote must say it is retired");
    let history = db.store.alias_history(&addr(42)).await.unwrap();
    let full: Vec<_> = history
        .iter()
        .filter(|a| a.kind == AliasKind::FullName)
        .collect();
    assert_eq!(full.len(), 2);
    assert_eq!(full[0].value, "acme/old-name");
    assert!(full[0].valid_to.is_some());
    assert_eq!(full[1].value, "acme/new-name");
    assert!(full[1].valid_to.is_none());
    // The host id did not change, so it was not retired.
    assert_eq!(
        history
            .iter()
            .filter(|a| a.kind == AliasKind::HostId)
            .count(),
        1
    );
}

async fn renaming_back_reopens_the_old_value(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    for name in ["a", "b", "a"] {
        db.store
            .apply_page("c", &Owner::Company, &[repo(1, "acme", name)])
            .await
            .unwrap();
    }
    let history = db.store.alias_history(&addr(1)).await.unwrap();
    let full: Vec<_> = history
        .iter()
        .filter(|a| a.kind == AliasKind::FullName)
        .map(|a| (a.value.as_str(), a.is_active()))
        .collect();
    assert_eq!(
        full,
        vec![("acme/a", false), ("acme/b", false), ("acme/a", true)]
    );
}

async fn transfer_retires_old_owner_aliases(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    db.store
        .apply_page("c", &Owner::Company, &[repo(5, "acme", "tool")])
        .await
        .unwrap();
    let stats = db
        .store
        .apply_page("c", &Owner::Company, &[repo(5, "other-org", "tool")])
        .await
        .unwrap();
    assert_eq!(stats.renamed, 1);
    let old = db.store.resolve("acme/tool").await.unwrap();
    assert!(old[0].retired);
    assert_eq!(old[0].space.address, addr(5));
    let new = db.store.resolve("other-org/tool").await.unwrap();
    assert!(!new[0].retired);
}

async fn complete_listing_marks_unseen_missing_and_revives(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let page: Vec<SpaceRecord> = (1..=10)
        .map(|i| repo(i, "acme", &format!("r{i}")))
        .collect();
    db.store
        .apply_page("c", &Owner::Company, &page)
        .await
        .unwrap();
    let seen: HashSet<SpaceAddress> = (1..=8).map(addr).collect();
    assert_eq!(db.store.mark_missing("c", &seen).await.unwrap(), 2);
    assert_eq!(
        db.store.mark_missing("c", &seen).await.unwrap(),
        0,
        "already missing"
    );
    let nine = db.store.get_space(&addr(9)).await.unwrap().unwrap();
    assert_eq!(nine.status, SpaceStatus::Missing);
    assert!(nine.missing_since.is_some());
    // Seen again: active again, and that counts as an update.
    let stats = db
        .store
        .apply_page("c", &Owner::Company, &page[8..9])
        .await
        .unwrap();
    assert_eq!(stats.updated, 1);
    let nine = db.store.get_space(&addr(9)).await.unwrap().unwrap();
    assert_eq!(nine.status, SpaceStatus::Active);
    assert_eq!(nine.missing_since, None);
}

async fn person_connection_cannot_write_company_space(db: TestDb) {
    add_connection(&db.store, "company", Owner::Company).await;
    add_connection(&db.store, "alice", Owner::Person("alice".into())).await;
    db.store
        .apply_page("company", &Owner::Company, &[repo(1, "acme", "shared")])
        .await
        .unwrap();
    let alice = Owner::Person("alice".into());
    let stats = db
        .store
        .apply_page(
            "alice",
            &alice,
            &[
                repo(1, "acme", "renamed-by-alice"),
                repo(2, "alice", "mine"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(stats.skipped_foreign, 1);
    assert_eq!(stats.created, 1);
    let shared = db.store.get_space(&addr(1)).await.unwrap().unwrap();
    assert_eq!(shared.display_name, "acme/shared");
    assert_eq!(shared.owner, Owner::Company);
    let mine = db.store.get_space(&addr(2)).await.unwrap().unwrap();
    assert_eq!(mine.owner, alice);
    // Alice's complete listing never marks company spaces missing.
    assert_eq!(
        db.store
            .mark_missing("alice", &HashSet::new())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.store.get_space(&addr(1)).await.unwrap().unwrap().status,
        SpaceStatus::Active
    );
}

async fn reused_name_resolves_to_both_active_first(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    db.store
        .apply_page("c", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    db.store
        .apply_page("c", &Owner::Company, &[repo(1, "acme", "api-legacy")])
        .await
        .unwrap();
    // A new repo takes the old name: the alias now names another space.
    db.store
        .apply_page("c", &Owner::Company, &[repo(2, "acme", "api")])
        .await
        .unwrap();
    let found = db
        .store
        .resolve("git@github.com:acme/api.git")
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].space.address, addr(2));
    assert!(!found[0].retired);
    assert_eq!(found[1].space.address, addr(1));
    assert!(found[1].retired);
}

async fn tombstone_keeps_aliases(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    db.store
        .apply_page("c", &Owner::Company, &[repo(3, "acme", "gone")])
        .await
        .unwrap();
    assert_eq!(
        db.store.tombstone("c", &addr(3), true).await.unwrap(),
        TombstoneOutcome::Tombstoned
    );
    assert_eq!(
        db.store.tombstone("c", &addr(3), true).await.unwrap(),
        TombstoneOutcome::AlreadyTombstoned
    );
    let found = db.store.resolve("acme/gone").await.unwrap();
    assert_eq!(found[0].space.status, SpaceStatus::Tombstoned);
}

/// A space leaves by its status, never by a DELETE: the store refuses one,
/// tombstoned or not, so its aliases and sightings (which on PostgreSQL
/// have no foreign key to it: a sync writes them beside it) never outlive
/// it.
async fn a_space_is_never_deleted_so_nothing_outlives_it(db: TestDb) {
    let s = &db.store;
    add_connection(s, "c", Owner::Company).await;
    s.apply_page(
        "c",
        &Owner::Company,
        &[repo(3, "acme", "gone"), repo(4, "acme", "kept")],
    )
    .await
    .unwrap();
    s.tombstone("c", &addr(3), true).await.unwrap();
    for delete in [
        "DELETE FROM spaces WHERE address = 'space:github-repo:github.com/3'",
        "DELETE FROM spaces",
    ] {
        let err = try_exec(s, delete).await.unwrap_err().to_string();
        assert!(err.contains("never deleted"), "{delete}: {err}");
    }
    assert_eq!(s.resolve("acme/gone").await.unwrap().len(), 1);
    assert_eq!(s.resolve("acme/kept").await.unwrap().len(), 1);
}

async fn resolve_by_address_and_unknown_input(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    db.store
        .apply_page("c", &Owner::Company, &[repo(8, "acme", "x")])
        .await
        .unwrap();
    let found = db
        .store
        .resolve("space:github-repo:github.com/8")
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert!(found[0].alias.is_none());
    assert!(
        db.store
            .resolve("git@github.com:acme/nothing.git")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        db.store
            .resolve("space:github-repo:github.com/999")
            .await
            .unwrap()
            .is_empty()
    );
}
