//! A listing run finds what it did not see in the store: the pages it
//! applied stamped their sightings with the run, and only the sightings
//! without that stamp go missing.

use cmcp_domain::{Owner, SpaceRecord, SpaceStatus};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SightingState, Store};

use crate::support::{add_connection, addr, repo};

both_backends!(
    a_run_marks_exactly_the_sightings_it_did_not_stamp,
    a_run_counts_the_spaces_it_had_already_listed,
    a_persons_run_decides_only_about_her_spaces,
);

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

async fn a_run_counts_the_spaces_it_had_already_listed(db: TestDb) {
    let s = &db.store;
    add_connection(s, "c1", Owner::Company).await;
    let company = Owner::Company;
    let repeated = |records: Vec<SpaceRecord>, run: &'static str| {
        let (s, company) = (s.clone(), company.clone());
        async move {
            s.apply_listed_page("c1", &company, run, &records)
                .await
                .unwrap()
                .0
                .repeated
        }
    };
    assert_eq!(repeated(page(1..=3), "run-1").await, 0);
    // An offset shift: the next page starts one early.
    assert_eq!(repeated(page(3..=5), "run-1").await, 1);
    // A page that repeats itself, and one that repeats earlier pages.
    let mut twice = page(6..=7);
    twice.push(repo(6, "acme", "r6"));
    assert_eq!(repeated(twice, "run-1").await, 1);
    assert_eq!(repeated(page(1..=7), "run-1").await, 7);
    // The next run lists everything once: nothing repeated, though every
    // sighting is fresh.
    assert_eq!(repeated(page(1..=4), "run-2").await, 0);
    assert_eq!(repeated(page(5..=7), "run-2").await, 0);
    // Outside a listing (a webhook's re-read) nothing counts.
    let stats = s.apply_page("c1", &company, &page(1..=2)).await.unwrap();
    assert_eq!(stats.repeated, 0);
    let stats = s.apply_page("c1", &company, &page(1..=2)).await.unwrap();
    assert_eq!(stats.repeated, 0);
}

async fn a_run_marks_exactly_the_sightings_it_did_not_stamp(db: TestDb) {
    let s = &db.store;
    add_connection(s, "c1", Owner::Company).await;
    add_connection(s, "c2", Owner::Company).await;
    let company = Owner::Company;
    s.apply_listed_page("c1", &company, "run-1", &page(1..=6))
        .await
        .unwrap();
    // Another connection still sees 5 (not 6).
    s.apply_page("c2", &company, &page(5..=5)).await.unwrap();

    // The next run lists 1..4 over two pages; a webhook re-reads 6 during
    // it, which is no evidence of the listing having seen it.
    s.apply_listed_page("c1", &company, "run-2", &page(1..=2))
        .await
        .unwrap();
    s.apply_page("c1", &company, &page(6..=6)).await.unwrap();
    s.apply_listed_page("c1", &company, "run-2", &page(3..=4))
        .await
        .unwrap();

    let preview = s.missing_preview_of_run("c1", "run-2").await.unwrap();
    assert_eq!(preview.seen_before, 6);
    assert_eq!(
        preview.would_miss,
        vec![addr(5).to_string(), addr(6).to_string()]
    );
    // Only 6 goes: c2 still sees 5.
    assert_eq!(s.mark_unseen_by_run("c1", "run-2").await.unwrap(), 1);
    assert_eq!(status_of(s, 5).await, SpaceStatus::Active);
    assert_eq!(status_of(s, 6).await, SpaceStatus::Missing);
    for id in 1..=4 {
        assert_eq!(state_of(s, "c1", id).await, Some(SightingState::Seen));
    }
    for id in 5..=6 {
        assert_eq!(state_of(s, "c1", id).await, Some(SightingState::Missing));
    }
    assert_eq!(state_of(s, "c2", 5).await, Some(SightingState::Seen));
    // The same verdict again changes no space (they are already missing).
    assert_eq!(s.mark_unseen_by_run("c1", "run-2").await.unwrap(), 0);

    // A run that lists everything again finds nothing unseen, and the
    // spaces it saw are active again.
    s.apply_listed_page("c1", &company, "run-3", &page(1..=6))
        .await
        .unwrap();
    let preview = s.missing_preview_of_run("c1", "run-3").await.unwrap();
    assert_eq!((preview.seen_before, preview.would_miss.len()), (6, 0));
    assert_eq!(s.mark_unseen_by_run("c1", "run-3").await.unwrap(), 0);
    assert_eq!(status_of(s, 6).await, SpaceStatus::Active);
}

async fn a_persons_run_decides_only_about_her_spaces(db: TestDb) {
    let s = &db.store;
    let alice = Owner::Person("alice".into());
    add_connection(s, "company", Owner::Company).await;
    add_connection(s, "alice", alice.clone()).await;
    // 1 is the company's, 2 is alice's own; alice's token sees both.
    s.apply_page("company", &Owner::Company, &page(1..=1))
        .await
        .unwrap();
    s.apply_listed_page("alice", &alice, "run-a", &page(1..=2))
        .await
        .unwrap();
    // The company's listing no longer sees 1: alice still does.
    assert_eq!(s.mark_unseen_by_run("company", "run-c").await.unwrap(), 0);
    // Alice's next listing sees neither: both her sightings go missing,
    // but only her own space does; she never decides about the company's.
    assert_eq!(s.mark_unseen_by_run("alice", "run-b").await.unwrap(), 1);
    assert_eq!(status_of(s, 2).await, SpaceStatus::Missing);
    assert_eq!(status_of(s, 1).await, SpaceStatus::Active);
    assert_eq!(state_of(s, "alice", 1).await, Some(SightingState::Missing));
}
