//! A person's GitHub, end to end: alice and bob link their own tokens to a
//! simulated GitHub whose org the company already syncs; their repos
//! become their private spaces, the org's stay the company's, and unlinking
//! takes alice's token and sightings away without touching bob.

use cmcp_domain::{AliasKind, Owner, RunOutcome, RunTrigger, SpaceStatus, Token};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Resolved, SpaceFilter, SpaceRow, Store, Viewer};
use cmcp_tests::{CONNECTION, Harness, cipher, fast_http, repo_address};
use cmcp_worker::people::{LinkGithub, Linked, link_github};
use cmcp_worker::run_sync;

const ALICE_TOKEN: &str = "ghp_aliceClassicTokenThatMustNeverLeak1";
const BOB_TOKEN: &str = "github_pat_bobFineGrainedNeverLeaks0002";

/// The org (6 repos), synced by the company; alice owns three repos (the
/// first a fork of org repo 1) and collaborates on org repos 1–4; bob owns
/// one and collaborates on org repo 5.
struct World {
    h: Harness,
    org: Vec<u64>,
    alice_repos: Vec<u64>,
    bob_repo: u64,
}

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
    // A classic token with `repo`: it can write, and must be shown so.
    h.sim
        .add_user("alice", 7_001, ALICE_TOKEN, Some("repo, read:org"));
    h.sim.add_user("bob", 7_002, BOB_TOKEN, None);
    let alice_repos = vec![
        h.sim.fork_repo(org[0], "alice", "api-fork"),
        h.sim.create_user_repo("alice", "notes", true),
        h.sim.create_user_repo("alice", "dotfiles", false),
    ];
    for id in &org[..4] {
        h.sim.add_collaborator("alice", *id);
    }
    let bob_repo = h.sim.create_user_repo("bob", "tools", true);
    h.sim.add_collaborator("bob", org[4]);
    run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    World {
        h,
        org,
        alice_repos,
        bob_repo,
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
    let out = run_sync(&w.h.ctx, &linked.connection_id, RunTrigger::Test)
        .await
        .expect("sync");
    let runs =
        w.h.store()
            .list_runs(Some(&linked.connection_id), 1)
            .await
            .unwrap();
    assert_eq!(runs[0].outcome, RunOutcome::Complete, "{out:?}");
    linked
}

async fn owned_by(store: &Store, owner: &Owner) -> Vec<SpaceRow> {
    let all = store
        .list_spaces(&SpaceFilter {
            limit: 10_000,
            ..SpaceFilter::default()
        })
        .await
        .unwrap();
    all.into_iter()
        .filter(|s| &s.owner == owner && s.status != SpaceStatus::Tombstoned)
        .collect()
}

async fn found_for(store: &Store, input: &str, viewer: &Viewer) -> bool {
    matches!(
        store.resolve_one(input, Some(viewer)).await.unwrap(),
        Resolved::Found(r) if r.space.status != SpaceStatus::Tombstoned
    )
}

/// Bytes of the connection's sealed token as stored.
async fn sealed_len(store: &Store, id: &str) -> i64 {
    let sql = "SELECT CAST(length(token_sealed) AS BIGINT) FROM connections WHERE id = $1";
    let (n,): (i64,) = match store {
        Store::Sqlite(p) => sqlx::query_as(sql).bind(id).fetch_one(p).await,
        Store::Postgres(p) => sqlx::query_as(sql).bind(id).fetch_one(p).await,
    }
    .unwrap();
    n
}

fn alice() -> Owner {
    Owner::Person("alice".into())
}

pub async fn personal_repos_become_private_spaces_and_org_repos_stay_company(db: TestDb) {
    let w = world(db).await;
    let a = link(&w, "alice", ALICE_TOKEN).await;
    let b = link(&w, "bob", BOB_TOKEN).await;
    assert_eq!((a.login.as_str(), b.login.as_str()), ("alice", "bob"));
    let store = w.h.store();

    let mine: Vec<_> = owned_by(store, &alice()).await;
    let mut ids: Vec<_> = mine.iter().map(|s| s.address.clone()).collect();
    ids.sort();
    let mut want: Vec<_> = w.alice_repos.iter().map(|id| repo_address(*id)).collect();
    want.sort();
    assert_eq!(ids, want, "alice has exactly her three repos");
    for id in &w.org[..4] {
        let s = store.get_space(&repo_address(*id)).await.unwrap().unwrap();
        assert_eq!(s.owner, Owner::Company, "org repo {id} stays the company's");
        let seen = store.sighting(&a.connection_id, &s.address).await.unwrap();
        assert!(seen.is_some(), "alice gains a sighting of org repo {id}");
    }
    let bobs = owned_by(store, &Owner::Person("bob".into())).await;
    assert_eq!(
        bobs.iter().map(|s| s.address.clone()).collect::<Vec<_>>(),
        [repo_address(w.bob_repo)]
    );

    let notes = w.h.sim.repo(w.alice_repos[1]).unwrap().full_name;
    assert!(found_for(store, &notes, &Viewer::Person("alice".into())).await);
    assert!(!found_for(store, &notes, &Viewer::Person("bob".into())).await);
    assert!(!found_for(store, &notes, &Viewer::Company).await);

    // The classic `repo` token is accepted and shown as a risk; bob's is not.
    let risky = |c: &cmcp_registry::ConnectionRow| c.risks.iter().any(|r| r.code == "write-scope");
    assert!(a.risks.iter().any(|r| r.code == "write-scope"));
    assert!(risky(
        &store.get_connection(&a.connection_id).await.unwrap()
    ));
    assert!(!risky(
        &store.get_connection(&b.connection_id).await.unwrap()
    ));
    // The link queued the first sync.
    assert_eq!(store.person_connections("alice").await.unwrap().len(), 1);
}

pub async fn unlink_removes_the_token_and_sightings_and_leaves_bob_alone(db: TestDb) {
    let w = world(db).await;
    let a = link(&w, "alice", ALICE_TOKEN).await;
    let b = link(&w, "bob", BOB_TOKEN).await;
    let store = w.h.store();
    let bob_before = store
        .sighting(&b.connection_id, &repo_address(w.org[4]))
        .await
        .unwrap();

    // Bob cannot unlink alice's connection, nor learn it exists.
    assert!(
        store
            .unlink_connection("bob", &a.connection_id, "member:bob")
            .await
            .is_err()
    );
    let gone = store
        .unlink_connection("alice", &a.connection_id, "member:alice")
        .await
        .unwrap();
    assert_eq!(gone.tombstoned, 3, "{gone:?}");
    assert!(gone.sightings >= 7, "{gone:?}");

    assert!(
        store
            .connection_token(&cipher(), &a.connection_id)
            .await
            .is_err()
    );
    assert_eq!(sealed_len(store, &a.connection_id).await, 0, "token erased");
    assert!(sealed_len(store, &b.connection_id).await > 0);
    for id in w.alice_repos.iter().chain(&w.org[..4]) {
        let at = repo_address(*id);
        assert_eq!(store.sighting(&a.connection_id, &at).await.unwrap(), None);
    }
    assert!(owned_by(store, &alice()).await.is_empty());
    for id in &w.org[..4] {
        let s = store.get_space(&repo_address(*id)).await.unwrap().unwrap();
        assert_eq!((s.owner, s.status), (Owner::Company, SpaceStatus::Active));
    }
    assert!(store.person_connections("alice").await.unwrap().is_empty());
    // A sync of the unlinked connection has nothing to sync with.
    assert!(
        run_sync(&w.h.ctx, &a.connection_id, RunTrigger::Test)
            .await
            .is_err()
    );

    // Bob is untouched.
    let bob_after = store
        .sighting(&b.connection_id, &repo_address(w.org[4]))
        .await
        .unwrap();
    assert_eq!(bob_before, bob_after);
    assert_eq!(owned_by(store, &Owner::Person("bob".into())).await.len(), 1);
    assert!(
        store
            .connection_token(&cipher(), &b.connection_id)
            .await
            .is_ok()
    );
    run_sync(&w.h.ctx, &b.connection_id, RunTrigger::Test)
        .await
        .expect("bob still syncs");
    let audit = store.list_audit(50).await.unwrap();
    assert!(audit.iter().any(|e| e.action == "person.unlink"));
}

fn commits_asked(stats: &cmcp_fixtures::SimStats) -> u64 {
    stats
        .by_path
        .get("/repos/{owner}/{repo}/commits")
        .copied()
        .unwrap_or(0)
}

/// The active `first-commit` alias of a repo space, if any.
async fn first_commit(store: &Store, id: u64) -> Option<String> {
    let aliases = store.alias_history(&repo_address(id)).await.unwrap();
    aliases
        .into_iter()
        .find(|a| a.kind == AliasKind::FirstCommit && a.is_active())
        .map(|a| a.value)
}

pub async fn root_commits_are_recorded_once_and_skip_empty_repos(db: TestDb) {
    let w = world(db).await;
    let empty = w.h.sim.create_user_repo("alice", "empty", false);
    w.h.sim.set_commits(empty, 0);
    let store = w.h.store();
    // A company connection asks root commits only when its settings say
    // so (two requests per repository): this one does not.
    assert_eq!(first_commit(store, w.org[0]).await, None);
    let a = link(&w, "alice", ALICE_TOKEN).await;
    // The fork shares its source's history: the same root commit.
    let fork = first_commit(store, w.alice_repos[0]).await;
    assert!(fork.is_some());
    assert_eq!(fork, w.h.sim.root_commit(w.org[0]));
    assert_ne!(first_commit(store, w.alice_repos[1]).await, fork);
    // An empty repository (409) is a space without a root commit.
    assert!(
        store
            .get_space(&repo_address(empty))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(first_commit(store, empty).await, None);

    // Nothing pushed: the next sync asks no commits at all.
    w.h.sim.reset_stats();
    run_sync(&w.h.ctx, &a.connection_id, RunTrigger::Test)
        .await
        .unwrap();
    let again = w.h.sim.stats();
    assert_eq!(commits_asked(&again), 0, "{again:?}");
    // A push asks again, and the root commit stays.
    w.h.sim.set_commits(w.alice_repos[1], 9);
    run_sync(&w.h.ctx, &a.connection_id, RunTrigger::Test)
        .await
        .unwrap();
    let pushed = w.h.sim.stats();
    assert!(commits_asked(&pushed) >= 1, "{pushed:?}");
    assert_eq!(
        first_commit(store, w.alice_repos[1]).await,
        w.h.sim.root_commit(w.alice_repos[1])
    );
}

pub async fn the_daily_cap_on_new_private_spaces_holds(db: TestDb) {
    let mut w = world(db).await;
    for n in 0..5 {
        w.h.sim
            .create_user_repo("alice", &format!("extra-{n}"), false);
    }
    // Eight repos of her own, a cap of five a day.
    w.h.ctx.sync.private_spaces_per_day = 5;
    let a = link(&w, "alice", ALICE_TOKEN).await;
    let store = &w.h.store().clone();
    assert_eq!(owned_by(store, &alice()).await.len(), 5);
    // Company spaces she sees are not new: every org repo still gets her
    // sighting.
    for id in &w.org[..4] {
        let at = repo_address(*id);
        assert!(
            store
                .sighting(&a.connection_id, &at)
                .await
                .unwrap()
                .is_some()
        );
    }
    let shown = store.get_connection(&a.connection_id).await.unwrap().risks;
    let cap = shown.iter().find(|r| r.code == "private-space-cap");
    assert!(
        cap.is_some_and(|r| r.message.starts_with("3 new private spaces wait")),
        "{shown:?}"
    );
    // The same day, a second sync creates nothing more.
    run_sync(&w.h.ctx, &a.connection_id, RunTrigger::Test)
        .await
        .unwrap();
    assert_eq!(owned_by(store, &alice()).await.len(), 5);
    // Bob's cap is his own.
    link(&w, "bob", BOB_TOKEN).await;
    assert_eq!(owned_by(store, &Owner::Person("bob".into())).await.len(), 1);
    // With room again (as on the next day), the rest arrive.
    w.h.ctx.sync.private_spaces_per_day = 8;
    run_sync(&w.h.ctx, &a.connection_id, RunTrigger::Test)
        .await
        .unwrap();
    assert_eq!(owned_by(store, &alice()).await.len(), 8);
    let shown = store.get_connection(&a.connection_id).await.unwrap().risks;
    assert!(
        shown.iter().all(|r| r.code != "private-space-cap"),
        "{shown:?}"
    );
}

pub async fn a_fine_grained_token_reporting_write_is_a_risk(db: TestDb) {
    let w = world(db).await;
    // Carol's token sends no scopes (fine-grained) but was granted write:
    // only the repositories' `permissions` say so.
    const CAROL_TOKEN: &str = "github_pat_carolFineGrainedWrites000003";
    w.h.sim.add_user("carol", 7_003, CAROL_TOKEN, None);
    w.h.sim.create_user_repo("carol", "site", false);
    w.h.sim.add_collaborator("carol", w.org[5]);
    w.h.sim.grant_write(CAROL_TOKEN);
    let c = link(&w, "carol", CAROL_TOKEN).await;
    let b = link(&w, "bob", BOB_TOKEN).await;
    let write = |risks: &[cmcp_domain::RiskNotice]| {
        risks
            .iter()
            .find(|r| r.code == "write-scope")
            .map(|r| r.message.clone())
    };
    let at_link = write(&c.risks).expect("shown when linking");
    assert!(
        at_link.starts_with("token reports write permissions on 2 repositories"),
        "{at_link}"
    );
    let store = w.h.store();
    let shown = store.get_connection(&c.connection_id).await.unwrap().risks;
    assert!(write(&shown).is_some(), "and after the sync: {shown:?}");
    // Bob's fine-grained token is read-only: nothing to show.
    assert_eq!(write(&b.risks), None);
    let bobs = store.get_connection(&b.connection_id).await.unwrap().risks;
    assert_eq!(write(&bobs), None, "{bobs:?}");
}

both_backends!(
    a_fine_grained_token_reporting_write_is_a_risk,
    the_daily_cap_on_new_private_spaces_holds,
    root_commits_are_recorded_once_and_skip_empty_repos,
    personal_repos_become_private_spaces_and_org_repos_stay_company,
    unlink_removes_the_token_and_sightings_and_leaves_bob_alone,
);
