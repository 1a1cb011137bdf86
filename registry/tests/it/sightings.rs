//! Sightings and owner sides: which connections see a space, who may
//! change it, and what a 404 may do.

use std::collections::HashSet;

use cmcp_domain::{Owner, SpaceAddress, SpaceRecord, SpaceStatus};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Denial, SightingState, Store, TombstoneOutcome};

use crate::support::{add_connection, addr, repo};

both_backends!(
    two_company_connections_share_spaces,
    person_reading_company_space_records_only_a_sighting,
    person_never_writes_another_persons_space,
    company_takes_over_a_private_space_and_records_it,
    tombstone_only_on_authority,
    private_owner_may_tombstone_her_space,
    unchanged_resighting_writes_nothing,
    access_lost_sighting_keeps_no_space_alive,
);

fn alice() -> Owner {
    Owner::Person("alice".into())
}

fn page(ids: std::ops::RangeInclusive<u64>) -> Vec<SpaceRecord> {
    ids.map(|i| repo(i, "acme", &format!("r{i}"))).collect()
}

async fn state_of(store: &Store, connection: &str, id: u64) -> Option<SightingState> {
    store
        .sighting(connection, &addr(id))
        .await
        .unwrap()
        .map(|s| s.state)
}

async fn status_of(store: &Store, id: u64) -> SpaceStatus {
    store.get_space(&addr(id)).await.unwrap().unwrap().status
}

async fn two_company_connections_share_spaces(db: TestDb) {
    add_connection(&db.store, "c1", Owner::Company).await;
    add_connection(&db.store, "c2", Owner::Company).await;
    let p = page(1..=6);
    assert_eq!(
        db.store
            .apply_page("c1", &Owner::Company, &p)
            .await
            .unwrap()
            .created,
        6
    );
    let before = db.store.get_space(&addr(1)).await.unwrap().unwrap();
    let second = db
        .store
        .apply_page("c2", &Owner::Company, &p)
        .await
        .unwrap();
    assert_eq!(
        (second.created, second.updated, second.unchanged),
        (0, 0, 6)
    );
    assert_eq!(
        db.store.get_space(&addr(1)).await.unwrap().unwrap(),
        before,
        "the second connection takes nothing from the first"
    );
    let both: Vec<String> = db
        .store
        .sightings(&addr(1))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.connection_id)
        .collect();
    assert_eq!(both, ["c1", "c2"]);
    assert_eq!(db.store.count_spaces(Some("c1"), None).await.unwrap(), 6);
    assert_eq!(db.store.count_spaces(Some("c2"), None).await.unwrap(), 6);

    // c2 completes a listing without 5 and 6: c1 still sees them.
    let seen: HashSet<SpaceAddress> = (1..=4).map(addr).collect();
    assert_eq!(db.store.mark_missing("c2", &seen).await.unwrap(), 0);
    assert_eq!(status_of(&db.store, 5).await, SpaceStatus::Active);
    assert_eq!(
        state_of(&db.store, "c2", 5).await,
        Some(SightingState::Missing)
    );
    assert_eq!(
        state_of(&db.store, "c1", 5).await,
        Some(SightingState::Seen)
    );
    // Once c1 completes without them too, every sighting is missing.
    assert_eq!(db.store.mark_missing("c1", &seen).await.unwrap(), 2);
    assert_eq!(status_of(&db.store, 6).await, SpaceStatus::Missing);
    // Seen again by c2 alone: active, and c2's sighting is seen again.
    db.store
        .apply_page("c2", &Owner::Company, &p[4..5])
        .await
        .unwrap();
    assert_eq!(status_of(&db.store, 5).await, SpaceStatus::Active);
    assert_eq!(
        state_of(&db.store, "c2", 5).await,
        Some(SightingState::Seen)
    );
    assert_eq!(
        state_of(&db.store, "c1", 5).await,
        Some(SightingState::Missing)
    );
}

async fn person_reading_company_space_records_only_a_sighting(db: TestDb) {
    add_connection(&db.store, "company", Owner::Company).await;
    add_connection(&db.store, "alice", alice()).await;
    db.store
        .apply_page("company", &Owner::Company, &[repo(1, "acme", "shared")])
        .await
        .unwrap();
    let space = db.store.get_space(&addr(1)).await.unwrap().unwrap();
    let aliases = db.store.alias_history(&addr(1)).await.unwrap();
    let stats = db
        .store
        .apply_page("alice", &alice(), &[repo(1, "acme", "renamed")])
        .await
        .unwrap();
    assert_eq!(stats.skipped_foreign, 1);
    assert_eq!(db.store.get_space(&addr(1)).await.unwrap().unwrap(), space);
    assert_eq!(db.store.alias_history(&addr(1)).await.unwrap(), aliases);
    assert_eq!(
        state_of(&db.store, "alice", 1).await,
        Some(SightingState::Seen)
    );
    // The company stops seeing it; alice still does, so it is not missing,
    // and alice's own complete listing never marks it missing either.
    db.store
        .mark_missing("company", &HashSet::new())
        .await
        .unwrap();
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Active);
    assert_eq!(
        db.store
            .mark_missing("alice", &HashSet::new())
            .await
            .unwrap(),
        0
    );
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Active);
    // The company's next complete listing decides.
    assert_eq!(
        db.store
            .mark_missing("company", &HashSet::new())
            .await
            .unwrap(),
        1
    );
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Missing);
}

async fn person_never_writes_another_persons_space(db: TestDb) {
    add_connection(&db.store, "alice", alice()).await;
    let bob = Owner::Person("bob".into());
    add_connection(&db.store, "bob", bob.clone()).await;
    db.store
        .apply_page("alice", &alice(), &[repo(7, "alice", "notes")])
        .await
        .unwrap();
    let space = db.store.get_space(&addr(7)).await.unwrap().unwrap();
    let stats = db
        .store
        .apply_page("bob", &bob, &[repo(7, "alice", "notes-by-bob")])
        .await
        .unwrap();
    assert_eq!(stats.skipped_foreign, 1);
    assert_eq!(db.store.get_space(&addr(7)).await.unwrap().unwrap(), space);
    db.store
        .mark_missing("alice", &HashSet::new())
        .await
        .unwrap();
    db.store.mark_missing("bob", &HashSet::new()).await.unwrap();
    assert_eq!(
        status_of(&db.store, 7).await,
        SpaceStatus::Active,
        "bob decides nothing about alice's space"
    );
    assert_eq!(
        db.store.tombstone("bob", &addr(7), true).await.unwrap(),
        TombstoneOutcome::Refused(Denial::NotWriter)
    );
    assert_eq!(status_of(&db.store, 7).await, SpaceStatus::Active);
}

async fn company_takes_over_a_private_space_and_records_it(db: TestDb) {
    add_connection(&db.store, "company", Owner::Company).await;
    add_connection(&db.store, "alice", alice()).await;
    db.store
        .apply_page("alice", &alice(), &[repo(3, "acme", "api")])
        .await
        .unwrap();
    assert_eq!(
        db.store.get_space(&addr(3)).await.unwrap().unwrap().owner,
        alice()
    );
    assert!(db.store.owner_changes(0, 0).await.unwrap().is_empty());
    let stats = db
        .store
        .apply_page("company", &Owner::Company, &[repo(3, "acme", "api")])
        .await
        .unwrap();
    assert_eq!(stats.taken_over, 1);
    assert_eq!(
        db.store.get_space(&addr(3)).await.unwrap().unwrap().owner,
        Owner::Company
    );
    let changes = db.store.owner_changes(0, 0).await.unwrap();
    assert_eq!(changes.len(), 1);
    let c = &changes[0];
    assert_eq!(c.space_address, addr(3));
    assert_eq!((&c.from, &c.to), (&alice(), &Owner::Company));
    assert_eq!(c.person.as_deref(), Some("alice"));
    assert_eq!(c.connection_id, "company");
    assert!(db.store.owner_changes(c.id, 0).await.unwrap().is_empty());
    // From now on alice's readings change nothing but her sighting.
    let again = db
        .store
        .apply_page("alice", &alice(), &[repo(3, "acme", "api-by-alice")])
        .await
        .unwrap();
    assert_eq!(again.skipped_foreign, 1);
    assert_eq!(
        db.store
            .get_space(&addr(3))
            .await
            .unwrap()
            .unwrap()
            .display_name,
        "acme/api"
    );
    // A second company reading records no second change.
    db.store
        .apply_page("company", &Owner::Company, &[repo(3, "acme", "api")])
        .await
        .unwrap();
    assert_eq!(db.store.owner_changes(0, 0).await.unwrap().len(), 1);
}

async fn tombstone_only_on_authority(db: TestDb) {
    add_connection(&db.store, "company", Owner::Company).await;
    add_connection(&db.store, "other", Owner::Company).await;
    add_connection(&db.store, "alice", alice()).await;
    db.store
        .apply_page("company", &Owner::Company, &page(1..=2))
        .await
        .unwrap();
    db.store
        .apply_page("alice", &alice(), &page(1..=2))
        .await
        .unwrap();
    // A person's 404 for a company space: only her sighting changes.
    assert_eq!(
        db.store.tombstone("alice", &addr(1), true).await.unwrap(),
        TombstoneOutcome::Refused(Denial::NotWriter)
    );
    assert_eq!(
        state_of(&db.store, "alice", 1).await,
        Some(SightingState::AccessLost)
    );
    // A connection that never saw it.
    assert_eq!(
        db.store.tombstone("other", &addr(1), true).await.unwrap(),
        TombstoneOutcome::Refused(Denial::SightingInactive)
    );
    assert_eq!(state_of(&db.store, "other", 1).await, None);
    // The company's token no longer reads the org: lost access, not gone.
    assert_eq!(
        db.store
            .tombstone("company", &addr(1), false)
            .await
            .unwrap(),
        TombstoneOutcome::Refused(Denial::ContainerUnreadable)
    );
    assert_eq!(
        state_of(&db.store, "company", 1).await,
        Some(SightingState::AccessLost)
    );
    // And while its sighting is access-lost, a later 404 decides nothing.
    assert_eq!(
        db.store.tombstone("company", &addr(1), true).await.unwrap(),
        TombstoneOutcome::Refused(Denial::SightingInactive)
    );
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Active);
    // Seen again, then a 404 with the org still readable: gone.
    db.store
        .apply_page("company", &Owner::Company, &page(1..=1))
        .await
        .unwrap();
    assert_eq!(
        db.store.tombstone("company", &addr(1), true).await.unwrap(),
        TombstoneOutcome::Tombstoned
    );
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Tombstoned);
    assert_eq!(
        db.store.tombstone("company", &addr(1), true).await.unwrap(),
        TombstoneOutcome::AlreadyTombstoned
    );
    assert_eq!(
        db.store
            .tombstone("company", &addr(99), true)
            .await
            .unwrap(),
        TombstoneOutcome::Unknown
    );
    // Losing access touches only the sighting.
    assert!(db.store.lose_access("company", &addr(2)).await.unwrap());
    assert!(!db.store.lose_access("company", &addr(2)).await.unwrap());
    assert_eq!(status_of(&db.store, 2).await, SpaceStatus::Active);
}

async fn private_owner_may_tombstone_her_space(db: TestDb) {
    add_connection(&db.store, "alice", alice()).await;
    db.store
        .apply_page("alice", &alice(), &[repo(4, "alice", "scratch")])
        .await
        .unwrap();
    assert_eq!(
        db.store.tombstone("alice", &addr(4), true).await.unwrap(),
        TombstoneOutcome::Tombstoned
    );
}

async fn unchanged_resighting_writes_nothing(db: TestDb) {
    add_connection(&db.store, "c", Owner::Company).await;
    let p = page(1..=3);
    db.store.apply_page("c", &Owner::Company, &p).await.unwrap();
    let before = db.store.sighting("c", &addr(1)).await.unwrap().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    db.store.apply_page("c", &Owner::Company, &p).await.unwrap();
    assert_eq!(
        db.store.sighting("c", &addr(1)).await.unwrap().unwrap(),
        before
    );
    // A sighting that was missing is seen again at once.
    db.store.mark_missing("c", &HashSet::new()).await.unwrap();
    db.store.apply_page("c", &Owner::Company, &p).await.unwrap();
    let after = db.store.sighting("c", &addr(1)).await.unwrap().unwrap();
    assert_eq!(after.state, SightingState::Seen);
    assert_eq!(after.first_seen_at, before.first_seen_at);
    assert!(after.last_seen_at > before.last_seen_at);
}

async fn access_lost_sighting_keeps_no_space_alive(db: TestDb) {
    add_connection(&db.store, "company", Owner::Company).await;
    add_connection(&db.store, "alice", alice()).await;
    for (conn, owner) in [("company", Owner::Company), ("alice", alice())] {
        db.store
            .apply_page(conn, &owner, &page(1..=1))
            .await
            .unwrap();
    }
    // Alice can no longer read it: her sighting no longer counts as seeing.
    db.store.lose_access("alice", &addr(1)).await.unwrap();
    assert_eq!(
        db.store
            .mark_missing("company", &HashSet::new())
            .await
            .unwrap(),
        1
    );
    assert_eq!(status_of(&db.store, 1).await, SpaceStatus::Missing);
}
