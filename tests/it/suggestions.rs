//! A person's suggestions, end to end: the company syncs its org (root
//! commits on) and maps it to a place; alice's fork of an org repo then
//! becomes one suggestion for her alone, to that place, with the shared
//! root commit as evidence. Bob gets nothing about alice, and no mapping or
//! proposal ever comes from a person's token.

use cmcp_domain::{Owner, RunOutcome, RunTrigger, SpaceKind, Token};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::{TestDb, settle_changes};
use cmcp_registry::{
    Decision, PlaceInput, ProposalFilter, ProposalState, ProposalTarget, Store, SuggestionAnswer,
    SuggestionKind, SuggestionRow, SuggestionState,
};
use cmcp_tests::{Harness, add_connection_with, cipher, fast_http, repo_address};
use cmcp_worker::people::{LinkGithub, Linked, link_github};
use cmcp_worker::run_sync;

const ALICE_TOKEN: &str = "github_pat_aliceFineGrainedNeverLeaks01";
const BOB_TOKEN: &str = "github_pat_bobFineGrainedNeverLeaks0002";
/// A company connection that records root commits.
const ROOTS: &str = "github-acme-roots";
const PLACE: &str = "acme-platform";

struct World {
    h: Harness,
    org: Vec<u64>,
    alice_repos: Vec<u64>,
}

fn place(members: Option<&[&str]>) -> PlaceInput {
    PlaceInput {
        id: PLACE.to_owned(),
        kind: "project".to_owned(),
        name: "Acme".to_owned(),
        key: None,
        aliases: vec![],
        members: members.map(|m| m.iter().map(|p| (*p).to_owned()).collect()),
    }
}

/// The org synced with root commits and mapped (through its container) to
/// the place; alice owns three repos, the first a fork of org repo 1, and
/// collaborates on org repos 1–4; bob owns one.
async fn world(db: TestDb) -> World {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 6,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let org: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    h.sim.add_user("alice", 7_001, ALICE_TOKEN, None);
    h.sim.add_user("bob", 7_002, BOB_TOKEN, None);
    let alice_repos = vec![
        h.sim.fork_repo(org[0], "alice", "api-fork"),
        h.sim.create_user_repo("alice", "notes", true),
        h.sim.create_user_repo("alice", "dotfiles", false),
    ];
    for id in &org[..4] {
        h.sim.add_collaborator("alice", *id);
    }
    h.sim.create_user_repo("bob", "tools", true);
    let store = h.store().clone();
    add_connection_with(
        &store,
        ROOTS,
        &h.sim.base_url(),
        Owner::Company,
        serde_json::json!({ "first_commits": true }),
    )
    .await;
    run_sync(&h.ctx, ROOTS, RunTrigger::Test).await.unwrap();
    store
        .put_places(&[place(None)], "admin:test")
        .await
        .unwrap();
    cmcp_matching::refresh_proposals(&store, &Default::default())
        .await
        .unwrap();
    let org_proposal = store
        .list_proposals(&ProposalFilter {
            limit: 1000,
            ..ProposalFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .find(|p| {
            p.container.kind() == SpaceKind::GithubOrg
                && p.target == ProposalTarget::Place(PLACE.to_owned())
        })
        .expect("the org is proposed for the place by name");
    store
        .decide_proposals(&[org_proposal.id], Decision::Approve, "admin:test", None)
        .await
        .unwrap();
    World {
        h,
        org,
        alice_repos,
    }
}

async fn link(w: &World, person: &str, token: &str) -> Linked {
    let linked = link_github(
        w.h.store(),
        &cipher(),
        fast_http(),
        LinkGithub {
            person: person.to_owned(),
            token: Token::new(token),
            base_url: w.h.sim.base_url(),
            actor: format!("member:{person}"),
        },
    )
    .await
    .expect("link");
    sync(w, &linked.connection_id).await;
    linked
}

async fn sync(w: &World, connection: &str) {
    run_sync(&w.h.ctx, connection, RunTrigger::Test)
        .await
        .expect("sync");
    let runs = w.h.store().list_runs(Some(connection), 1).await.unwrap();
    assert_eq!(runs[0].outcome, RunOutcome::Complete);
}

async fn counts(store: &Store) -> (usize, usize) {
    let mappings = store.list_mappings().await.unwrap().len();
    let proposals = store
        .list_proposals(&ProposalFilter {
            limit: 10_000,
            ..ProposalFilter::default()
        })
        .await
        .unwrap()
        .len();
    (mappings, proposals)
}

fn open(rows: &[SuggestionRow]) -> Vec<&SuggestionRow> {
    rows.iter()
        .filter(|s| s.state == SuggestionState::Open)
        .collect()
}

pub async fn a_fork_of_a_mapped_repo_is_one_suggestion_for_its_owner_alone(db: TestDb) {
    let w = world(db).await;
    let store = w.h.store().clone();
    let before = counts(&store).await;
    link(&w, "alice", ALICE_TOKEN).await;
    link(&w, "bob", BOB_TOKEN).await;
    assert_eq!(
        counts(&store).await,
        before,
        "a person's token creates no mapping and no proposal"
    );
    for id in &w.org[..4] {
        let s = store.get_space(&repo_address(*id)).await.unwrap().unwrap();
        assert_eq!(s.owner, Owner::Company);
    }

    let alice = store.list_suggestions("alice").await.unwrap();
    assert_eq!(alice.len(), 1, "{alice:?}");
    let s = &alice[0];
    assert_eq!(s.space_address, repo_address(w.alice_repos[0]));
    assert_eq!(s.place_id.as_deref(), Some(PLACE));
    assert_eq!(s.kind, SuggestionKind::RequestToJoin, "alice is no member");
    assert_eq!(s.state, SuggestionState::Open);
    let root = w.h.sim.root_commit(w.org[0]).unwrap();
    assert_eq!(
        s.evidence[0]["kind"], "same-first-commit",
        "{:?}",
        s.evidence
    );
    assert_eq!(s.evidence[0]["sha"], root.as_str());
    assert_eq!(
        s.evidence[0]["mapped_space"],
        repo_address(w.org[0]).to_string()
    );
    assert!(
        s.evidence_text[0].contains(&root[..7]),
        "{:?}",
        s.evidence_text
    );
    assert!(s.confidence >= 60);
    assert!(store.list_suggestions("bob").await.unwrap().is_empty());

    // A second sync with nothing new changes nothing.
    let alice_conn = &store.person_connections("alice").await.unwrap()[0].id;
    sync(&w, alice_conn).await;
    assert_eq!(store.list_suggestions("alice").await.unwrap(), alice);

    // Unlinked, her spaces are never shown again: nor their suggestions.
    store
        .unlink_connection("alice", alice_conn, "member:alice")
        .await
        .unwrap();
    assert!(store.list_suggestions("alice").await.unwrap().is_empty());
    assert!(
        store
            .decide_suggestion("alice", s.id, SuggestionAnswer::Accept, "member:alice")
            .await
            .is_err()
    );
}

pub async fn declined_stays_declined_until_the_evidence_changes_and_a_link_files_the_space(
    db: TestDb,
) {
    let w = world(db).await;
    let store = w.h.store().clone();
    let a = link(&w, "alice", ALICE_TOKEN).await;
    let id = store.list_suggestions("alice").await.unwrap()[0].id;
    // Bob may not answer it: it is not found for him.
    assert!(
        store
            .decide_suggestion("bob", id, SuggestionAnswer::Decline, "member:bob")
            .await
            .is_err()
    );
    let declined = store
        .decide_suggestion("alice", id, SuggestionAnswer::Decline, "member:alice")
        .await
        .unwrap();
    assert_eq!(declined.state, SuggestionState::Declined);
    sync(&w, &a.connection_id).await;
    let rows = store.list_suggestions("alice").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, SuggestionState::Declined, "stays declined");

    // Alice joins the place: a link now, which is new evidence.
    store
        .put_places(&[place(Some(&["alice"]))], "admin:test")
        .await
        .unwrap();
    cmcp_matching::refresh_all_suggestions(&store)
        .await
        .unwrap();
    let rows = store.list_suggestions("alice").await.unwrap();
    assert_eq!(open(&rows).len(), 1, "{rows:?}");
    assert_eq!((rows[0].id, rows[0].kind), (id, SuggestionKind::Link));

    // The version is the feed's head: on PostgreSQL it may still stand
    // before the sync's own changes while another test's transaction is
    // open, and the diff would then list the fork as added, not changed.
    settle_changes(&store).await;
    let version = store.manifest("alice", None, 1000).await.unwrap().version;
    let fork = repo_address(w.alice_repos[0]);
    let accepted = store
        .decide_suggestion("alice", id, SuggestionAnswer::Accept, "member:alice")
        .await
        .unwrap();
    assert_eq!(accepted.state, SuggestionState::Accepted);
    let m = store.manifest("alice", None, 1000).await.unwrap();
    let entry = m.spaces.iter().find(|e| e.address == fork).unwrap();
    let placed = entry.place.as_ref().expect("the link files the space");
    assert_eq!(placed.path, format!("project/{PLACE}"));
    // The diff since before the link says so too, once the feed has every
    // committed change (on PostgreSQL it waits for older transactions in
    // the whole cluster, other tests' included).
    settle_changes(&store).await;
    let diff = store.manifest("alice", Some(version), 1000).await.unwrap();
    assert!(!diff.full);
    assert!(diff.changed.iter().any(|e| e.address == fork), "{diff:?}");
    // Bob's manifest neither shows alice's space nor her link.
    let bobs = store.manifest("bob", None, 1000).await.unwrap();
    assert!(bobs.spaces.iter().all(|e| e.address != fork));
    // A decided suggestion is not decided twice.
    assert!(
        store
            .decide_suggestion("alice", id, SuggestionAnswer::Decline, "member:alice")
            .await
            .is_err()
    );
    let audit = store.list_audit(50).await.unwrap();
    for action in ["suggestion.decline", "suggestion.link"] {
        assert!(audit.iter().any(|e| e.action == action), "{action}");
    }
}

pub async fn a_space_nothing_matches_can_be_asked_for_and_admins_see_the_request(db: TestDb) {
    let w = world(db).await;
    let store = w.h.store().clone();
    link(&w, "alice", ALICE_TOKEN).await;
    let notes = repo_address(w.alice_repos[1]);
    let fork = repo_address(w.alice_repos[0]);
    assert!(store.list_requests().await.unwrap().is_empty());
    // The fork matches a place: answer that suggestion instead.
    assert!(
        store
            .request_create("alice", &fork, None, "member:alice")
            .await
            .is_err()
    );
    // Bob cannot ask for alice's space.
    assert!(
        store
            .request_create("bob", &notes, None, "member:bob")
            .await
            .is_err()
    );
    let asked = store
        .request_create("alice", &notes, Some("Notes"), "member:alice")
        .await
        .unwrap();
    assert_eq!(asked.kind, SuggestionKind::RequestToCreate);
    assert_eq!(asked.create_name.as_deref(), Some("Notes"));
    let requests = store.list_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].person.as_str(), &requests[0].space_address),
        ("alice", &notes)
    );
    // Asking twice is refused; a later round keeps the request.
    assert!(
        store
            .request_create("alice", &notes, None, "member:alice")
            .await
            .is_err()
    );
    cmcp_matching::refresh_all_suggestions(&store)
        .await
        .unwrap();
    assert_eq!(store.list_requests().await.unwrap().len(), 1);
    // Accepting a request to join sends it too.
    let join = store.list_suggestions("alice").await.unwrap();
    let join = join
        .iter()
        .find(|s| s.kind == SuggestionKind::RequestToJoin)
        .unwrap();
    store
        .decide_suggestion("alice", join.id, SuggestionAnswer::Accept, "member:alice")
        .await
        .unwrap();
    assert_eq!(store.list_requests().await.unwrap().len(), 2);
    assert!(
        store
            .list_proposals(&ProposalFilter {
                state: Some(ProposalState::Proposed),
                limit: 1000,
                ..ProposalFilter::default()
            })
            .await
            .unwrap()
            .iter()
            .all(|p| p.space_name != "alice/notes"),
        "a request is no company proposal"
    );
    let audit = store.list_audit(50).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.action == "suggestion.request-create")
    );
}

both_backends!(
    a_fork_of_a_mapped_repo_is_one_suggestion_for_its_owner_alone,
    declined_stays_declined_until_the_evidence_changes_and_a_link_files_the_space,
    a_space_nothing_matches_can_be_asked_for_and_admins_see_the_request,
);
