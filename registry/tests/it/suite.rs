use std::collections::HashSet;

use cmcp_domain::{
    Alias, AliasKind, ConnectionSpec, Owner, Platform, RunFigures, RunOutcome, SpaceAddress,
    SpaceKind, SpaceRecord, SpaceState, SpaceStatus, Token, Visibility,
};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{
    Cipher, LeaseAttempt, NewAuditEntry, NewConnection, RegistryError, SpaceFilter, Store,
    TombstoneOutcome,
};

const TOKEN: &str = "ghp_conformanceSECRET0123456789";

pub(crate) fn cipher() -> Cipher {
    Cipher::from_key_bytes(&[9u8; 32]).unwrap()
}

pub(crate) async fn add_connection(store: &Store, id: &str, owner: Owner) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "acme".to_owned(),
                    base_url: "https://api.github.com".to_owned(),
                },
                owner,
                token: Token::new(TOKEN),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
}

pub(crate) fn org() -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubOrg, "github.com", "9000001").unwrap()
}

pub(crate) fn repo(id: u64, owner: &str, name: &str) -> SpaceRecord {
    let full = format!("{owner}/{name}");
    SpaceRecord {
        address: SpaceAddress::new(SpaceKind::GithubRepo, "github.com", &id.to_string()).unwrap(),
        display_name: full.clone(),
        container: Some(org()),
        aliases: [
            Alias::new(AliasKind::Name, name),
            Alias::new(AliasKind::FullName, &full),
            Alias::new(AliasKind::WebUrl, &format!("https://github.com/{full}")),
            Alias::new(
                AliasKind::GitRemote,
                &format!("https://github.com/{full}.git"),
            ),
            Alias::new(AliasKind::GitRemote, &format!("git@github.com:{full}.git")),
            Alias::new(AliasKind::HostId, &format!("R_node{id}")),
        ]
        .into_iter()
        .flatten()
        .collect(),
        state: SpaceState {
            archived: false,
            visibility: Some(Visibility::Private),
            trashed: false,
        },
    }
}

pub(crate) fn addr(id: u64) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubRepo, "github.com", &id.to_string()).unwrap()
}

pub async fn migrations_are_idempotent(db: &TestDb) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}

pub async fn connection_token_is_sealed_and_opens(db: &TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let token = db
        .store
        .connection_token(&cipher(), "gh-acme")
        .await
        .unwrap();
    assert_eq!(token.expose(), TOKEN);
    // The row carries no token, and its Debug/JSON cannot leak one.
    let row = db.store.get_connection("gh-acme").await.unwrap();
    assert!(!format!("{row:?}").contains(TOKEN));
    assert!(!serde_json::to_string(&row).unwrap().contains(TOKEN));
    // Another master key cannot open it.
    let other = Cipher::from_key_bytes(&[1u8; 32]).unwrap();
    assert!(db.store.connection_token(&other, "gh-acme").await.is_err());
    // Creating it was audited.
    let audit = db.store.list_audit(10).await.unwrap();
    assert_eq!(audit[0].action, "connection.create");
    assert_eq!(audit[0].target, "connection:gh-acme");
    assert!(!serde_json::to_string(&audit).unwrap().contains(TOKEN));
}

pub async fn duplicate_and_invalid_connections_are_refused(db: &TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let again = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "gh-acme".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(
        matches!(again, Err(RegistryError::AlreadyExists { .. })),
        "{again:?}"
    );
    let bad = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "Bad Id!".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(matches!(bad, Err(RegistryError::Invalid { .. })), "{bad:?}");
    let missing = db.store.get_connection("nope").await;
    assert!(matches!(missing, Err(RegistryError::NotFound { .. })));
}

pub async fn apply_page_creates_spaces_with_aliases(db: &TestDb) {
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

pub async fn unchanged_page_writes_nothing(db: &TestDb) {
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

pub async fn rename_keeps_space_id_and_old_alias_resolves(db: &TestDb) {
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

pub async fn renaming_back_reopens_the_old_value(db: &TestDb) {
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

pub async fn transfer_retires_old_owner_aliases(db: &TestDb) {
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

pub async fn complete_listing_marks_unseen_missing_and_revives(db: &TestDb) {
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

pub async fn person_connection_cannot_write_company_space(db: &TestDb) {
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

pub async fn reused_name_resolves_to_both_active_first(db: &TestDb) {
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

pub async fn lease_excludes_a_second_holder_until_it_lapses(db: &TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    assert_eq!(
        db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
        LeaseAttempt::Acquired
    );
    assert!(
        matches!(db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap(), LeaseAttempt::HeldBy { holder, .. } if holder == "w1")
    );
    assert!(db.store.renew_lease("c", "w1", 60_000).await.unwrap());
    assert!(!db.store.renew_lease("c", "w2", 60_000).await.unwrap());
    db.store.release_lease("c", "w2").await.unwrap();
    assert!(
        matches!(
            db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap(),
            LeaseAttempt::HeldBy { .. }
        ),
        "a stranger cannot release"
    );
    db.store.release_lease("c", "w1").await.unwrap();
    assert_eq!(
        db.store.try_acquire_lease("c", "w2", 1).await.unwrap(),
        LeaseAttempt::Acquired
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    // w2 was killed: its lease lapsed, so w3 takes over.
    assert_eq!(
        db.store.try_acquire_lease("c", "w3", 60_000).await.unwrap(),
        LeaseAttempt::Acquired
    );
    assert!(
        !db.store.renew_lease("c", "w2", 60_000).await.unwrap(),
        "the lapsed holder lost it"
    );
}

pub async fn runs_record_their_figures(db: &TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let id = db
        .store
        .start_run("c", cmcp_domain::RunTrigger::Cli, "worker-1")
        .await
        .unwrap();
    assert_eq!(
        db.store.get_run(&id).await.unwrap().outcome,
        RunOutcome::Running
    );
    let figures = RunFigures {
        pages: 3,
        requests: 5,
        items_seen: 250,
        created: 250,
        retries: 2,
        duration_ms: 1234,
        ..Default::default()
    };
    db.store
        .finish_run(&id, RunOutcome::Partial, &figures, Some("page 3: 500"))
        .await
        .unwrap();
    let run = db.store.last_run("c").await.unwrap().unwrap();
    assert_eq!(run.id, id);
    assert_eq!(run.outcome, RunOutcome::Partial);
    assert_eq!(run.figures, figures);
    assert_eq!(run.error.as_deref(), Some("page 3: 500"));
    assert!(run.finished_at.is_some());
    assert_eq!(db.store.list_runs(None, 10).await.unwrap().len(), 1);
}

pub async fn audit_log_is_append_only(db: &TestDb) {
    db.store
        .append_audit(&NewAuditEntry {
            actor: "admin:alice".into(),
            action: "mapping.approve".into(),
            target: "proposal:1".into(),
            reason: Some("obvious".into()),
            before: Some(serde_json::json!({"state": "proposed"})),
            after: Some(serde_json::json!({"state": "approved"})),
        })
        .await
        .unwrap();
    let entries = db.store.list_audit(5).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].before,
        Some(serde_json::json!({"state": "proposed"}))
    );
    let update = match &db.store {
        Store::Sqlite(p) => sqlx::query("UPDATE audit_log SET actor = 'mallory'")
            .execute(p)
            .await
            .map(|_| ()),
        Store::Postgres(p) => sqlx::query("UPDATE audit_log SET actor = 'mallory'")
            .execute(p)
            .await
            .map(|_| ()),
    };
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = match &db.store {
        Store::Sqlite(p) => sqlx::query("DELETE FROM audit_log")
            .execute(p)
            .await
            .map(|_| ()),
        Store::Postgres(p) => sqlx::query("DELETE FROM audit_log")
            .execute(p)
            .await
            .map(|_| ()),
    };
    assert!(delete.is_err());
    assert_eq!(
        db.store.list_audit(5).await.unwrap()[0].actor,
        "admin:alice"
    );
}

pub async fn tombstone_keeps_aliases(db: &TestDb) {
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

pub async fn resolve_by_address_and_unknown_input(db: &TestDb) {
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
