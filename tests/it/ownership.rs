//! Who sees a space, who owns it, and who may change it, end to end: a
//! simulated GitHub org read by company and personal connections with their
//! own tokens, over real sockets for the webhooks.

use std::time::Duration;

use cmcp_domain::{
    ConnectionSpec, Owner, Platform, RunOutcome, RunTrigger, SpaceKind, SpaceStatus, Token,
};
use cmcp_fixtures::{Faults, GithubSimConfig, WebhookTarget};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{AliasRow, DeliveryStatus, NewConnection, SightingState, SpaceRow, Store};
use cmcp_tests::{CONNECTION, Harness, cipher, eventually_within, fast_http, repo_address};
use cmcp_tests::{serve_gateway, start_worker};
use cmcp_worker::run_sync;

const ALICE: &str = "github-alice";
const ALICE_TOKEN: &str = "ghp_aliceOwnTokenThatMustNeverLeak0001";
const SECOND: &str = "github-acme-2";
const SECOND_TOKEN: &str = "ghp_secondCompanyTokenNeverLeaks00002";
const LIMIT: Duration = Duration::from_secs(60);

/// A simulated org of `repos` repositories and the company's connection,
/// with the queue tables in place. Nothing is synced yet.
async fn org(db: TestDb, repos: usize, per_page: u32) -> Harness {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let mut h = Harness::start(
        db,
        GithubSimConfig {
            repos,
            ..GithubSimConfig::default()
        },
        cmcp_connectors::HttpConfig {
            per_page,
            ..fast_http()
        },
    )
    .await;
    // These orgs are a handful of repos: one going is more than the
    // breaker's share. The behaviours here are about who may mark what;
    // the breaker has its own (`reconcile.rs`).
    h.ctx.sync.max_missing_fraction = 1.0;
    h
}

/// Another connection over the same org with its own token.
async fn connect(h: &Harness, id: &str, token: &str, owner: Owner) {
    h.sim.add_token(token);
    h.store()
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: h.sim.org(),
                    base_url: h.sim.base_url(),
                },
                owner,
                token: Token::new(token),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .expect("add connection");
}

/// Sync `connection` and return how its run ended.
async fn sync(h: &Harness, connection: &str) -> RunOutcome {
    run_sync(&h.ctx, connection, RunTrigger::Test)
        .await
        .expect("sync");
    let runs = h.store().list_runs(Some(connection), 1).await.unwrap();
    runs[0].outcome
}

fn alice() -> Owner {
    Owner::Person("alice".into())
}

/// Everything a space is to its owner: the row and every alias ever.
async fn space_state(store: &Store, id: u64) -> (SpaceRow, Vec<AliasRow>) {
    let a = repo_address(id);
    (
        store.get_space(&a).await.unwrap().expect("space"),
        store.alias_history(&a).await.unwrap(),
    )
}

async fn sighting(store: &Store, connection: &str, id: u64) -> Option<SightingState> {
    store
        .sighting(connection, &repo_address(id))
        .await
        .unwrap()
        .map(|s| s.state)
}

/// Point the simulator's webhook at `connection`'s hook, signed with its
/// secret.
async fn hook_to(h: &Harness, base: &str, connection: &str) {
    let secret = h
        .store()
        .current_webhook_secret(&cipher(), connection)
        .await
        .unwrap();
    h.sim.set_webhook(Some(WebhookTarget {
        url: format!("{base}/hooks/github/{connection}"),
        secret: secret.expose().to_owned(),
        hook_id: 77,
    }));
}

async fn processed(store: &Store, connection: &str, n: usize) {
    eventually_within("the deliveries are processed", LIMIT, || async {
        let rows = store.list_deliveries(connection).await.unwrap();
        (rows.len() == n && rows.iter().all(|r| r.status == DeliveryStatus::Processed))
            .then_some(())
    })
    .await;
}

pub async fn person_webhook_and_sync_leave_company_space_unchanged(db: TestDb) {
    let h = org(db, 6, 100).await;
    connect(&h, ALICE, ALICE_TOKEN, alice()).await;
    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    assert_eq!(sync(&h, ALICE).await, RunOutcome::Complete);
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    let (hidden, deleted, renamed) = (ids[1], ids[2], ids[3]);
    let before: Vec<_> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(space_state(h.store(), *id).await);
        }
        v
    };
    assert!(before.iter().all(|(s, _)| s.owner == Owner::Company));
    assert_eq!(
        sighting(h.store(), ALICE, hidden).await,
        Some(SightingState::Seen)
    );

    // Signed with alice's secret, naming company repos by id.
    let (base, gateway) = serve_gateway(h.store()).await;
    let worker = start_worker(h.store(), &h.ctx);
    hook_to(&h, &base, ALICE).await;
    h.sim.hide_repo_from(ALICE_TOKEN, hidden);
    h.sim.set_private(hidden, true);
    h.sim.delete_repo(deleted);
    processed(h.store(), ALICE, 2).await;
    for id in [hidden, deleted] {
        let i = ids.iter().position(|x| *x == id).unwrap();
        assert_eq!(space_state(h.store(), id).await, before[i], "{id}");
        assert_eq!(
            sighting(h.store(), ALICE, id).await,
            Some(SightingState::AccessLost),
            "{id}"
        );
        assert_eq!(
            sighting(h.store(), CONNECTION, id).await,
            Some(SightingState::Seen)
        );
    }

    // Alice's sync reads a rename the company has not read yet.
    h.sim.set_webhook(None);
    h.sim.rename_repo(renamed, "renamed-upstream");
    assert_eq!(sync(&h, ALICE).await, RunOutcome::Complete);
    for (i, id) in ids.iter().enumerate() {
        let now = space_state(h.store(), *id).await;
        assert_eq!(now, before[i], "{id}: alice's sync changed a company space");
    }
    assert_eq!(
        sighting(h.store(), ALICE, renamed).await,
        Some(SightingState::Seen)
    );
    assert_eq!(
        sighting(h.store(), ALICE, hidden).await,
        Some(SightingState::Missing),
        "alice's complete listing no longer has it"
    );

    // The company's own reading then decides: the deletion is missing (no
    // sighting still sees it), the rename lands.
    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    let gone = h
        .store()
        .get_space(&repo_address(deleted))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone.status, SpaceStatus::Missing);
    let moved = h
        .store()
        .get_space(&repo_address(renamed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.display_name, "acme/renamed-upstream");
    assert_eq!(
        h.store()
            .get_space(&repo_address(hidden))
            .await
            .unwrap()
            .unwrap()
            .status,
        SpaceStatus::Active
    );
    worker.stop().await;
    gateway.abort();
}

pub async fn person_listing_before_company_sync_is_taken_over(db: TestDb) {
    let h = org(db, 5, 100).await;
    connect(&h, ALICE, ALICE_TOKEN, alice()).await;
    assert_eq!(sync(&h, ALICE).await, RunOutcome::Complete);
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    for id in &ids {
        let space = h
            .store()
            .get_space(&repo_address(*id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            space.owner,
            alice(),
            "alice's reading registered it as hers"
        );
    }
    assert!(h.store().owner_changes(0, 0).await.unwrap().is_empty());

    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    let changes = h.store().owner_changes(0, 0).await.unwrap();
    // The org and every repository.
    assert_eq!(changes.len(), ids.len() + 1, "{changes:#?}");
    for id in &ids {
        let space = h
            .store()
            .get_space(&repo_address(*id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(space.owner, Owner::Company, "{id}");
        let change = changes
            .iter()
            .find(|c| c.space_address == repo_address(*id))
            .unwrap_or_else(|| panic!("no owner change for {id}"));
        assert_eq!((&change.from, &change.to), (&alice(), &Owner::Company));
        assert_eq!(change.person.as_deref(), Some("alice"));
        assert_eq!(change.connection_id, CONNECTION);
        // Both keep seeing it.
        assert_eq!(
            sighting(h.store(), ALICE, *id).await,
            Some(SightingState::Seen)
        );
        assert_eq!(
            sighting(h.store(), CONNECTION, *id).await,
            Some(SightingState::Seen)
        );
    }
    // From now on alice's readings write nothing of them.
    let company_view = space_state(h.store(), ids[0]).await;
    h.sim.rename_repo(ids[0], "renamed-for-alice");
    assert_eq!(sync(&h, ALICE).await, RunOutcome::Complete);
    let runs = h.store().list_runs(Some(ALICE), 1).await.unwrap();
    assert_eq!(runs[0].figures.skipped_foreign, ids.len() as u64 + 1);
    assert_eq!(
        space_state(h.store(), ids[0]).await,
        company_view,
        "the company's name stands"
    );
    assert_eq!(
        h.store().owner_changes(0, 0).await.unwrap().len(),
        ids.len() + 1
    );
}

pub async fn two_company_connections_share_an_org(db: TestDb) {
    // Three pages of two, so one page can fail.
    let h = org(db, 6, 2).await;
    connect(&h, SECOND, SECOND_TOKEN, Owner::Company).await;
    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    assert_eq!(sync(&h, SECOND).await, RunOutcome::Complete);
    let second = h.store().list_runs(Some(SECOND), 1).await.unwrap();
    assert_eq!(second[0].figures.created, 0, "the spaces are shared");
    assert_eq!(h.store().count_spaces(None, None).await.unwrap(), 7);
    for conn in [CONNECTION, SECOND] {
        assert_eq!(h.store().count_spaces(Some(conn), None).await.unwrap(), 7);
    }
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    for id in &ids {
        let s = h.store().sightings(&repo_address(*id)).await.unwrap();
        assert_eq!(s.len(), 2, "{id}");
        let space = h
            .store()
            .get_space(&repo_address(*id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            space.connection_id, CONNECTION,
            "the first reader stays the registrant"
        );
    }
    assert!(h.store().owner_changes(0, 0).await.unwrap().is_empty());

    // A repository goes; the second connection's listing fails on a page.
    let gone = ids[5];
    h.sim.delete_repo(gone);
    h.sim.set_faults(Faults {
        failing_pages: [2].into(),
        ..Faults::default()
    });
    assert_eq!(sync(&h, SECOND).await, RunOutcome::Partial);
    assert_eq!(
        h.store()
            .count_spaces(None, Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        0,
        "an incomplete listing marks nothing missing"
    );
    assert_eq!(
        sighting(h.store(), SECOND, gone).await,
        Some(SightingState::Seen)
    );

    // Complete, but the first connection still sees it.
    h.sim.set_faults(Faults::default());
    assert_eq!(sync(&h, SECOND).await, RunOutcome::Complete);
    assert_eq!(
        sighting(h.store(), SECOND, gone).await,
        Some(SightingState::Missing)
    );
    assert_eq!(
        h.store()
            .get_space(&repo_address(gone))
            .await
            .unwrap()
            .unwrap()
            .status,
        SpaceStatus::Active
    );
    // Once every connection has completed without it, it is missing.
    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    assert_eq!(
        h.store()
            .get_space(&repo_address(gone))
            .await
            .unwrap()
            .unwrap()
            .status,
        SpaceStatus::Missing
    );
    assert_eq!(
        h.store()
            .count_spaces(None, Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        1
    );
}

pub async fn company_404_tombstones_only_while_the_org_still_reads(db: TestDb) {
    // Web host = API host, so a re-read needs no org read to learn the
    // tenant (which would fail once the org is lost).
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 6,
            web_host: Some("127.0.0.1".into()),
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let space = |id: u64| {
        cmcp_domain::SpaceAddress::new(SpaceKind::GithubRepo, "127.0.0.1", &id.to_string()).unwrap()
    };
    let sighting = |id: u64| {
        let store = h.store().clone();
        async move {
            store
                .sighting(CONNECTION, &space(id))
                .await
                .unwrap()
                .map(|s| s.state)
        }
    };
    assert_eq!(sync(&h, CONNECTION).await, RunOutcome::Complete);
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    let (base, gateway) = serve_gateway(h.store()).await;
    let worker = start_worker(h.store(), &h.ctx);
    hook_to(&h, &base, CONNECTION).await;

    // Made private out of the token's sight: lost access, never deleted.
    h.sim.hide_repo_from(cmcp_tests::TOKEN, ids[0]);
    h.sim.set_private(ids[0], true);
    processed(h.store(), CONNECTION, 1).await;
    let status = |id: u64| {
        let store = h.store().clone();
        async move { store.get_space(&space(id)).await.unwrap().unwrap().status }
    };
    assert_eq!(status(ids[0]).await, SpaceStatus::Active);
    assert_eq!(sighting(ids[0]).await, Some(SightingState::AccessLost));

    // Deleted while the token still reads the org: gone.
    h.sim.delete_repo(ids[1]);
    processed(h.store(), CONNECTION, 2).await;
    assert_eq!(status(ids[1]).await, SpaceStatus::Tombstoned);

    // The token loses the org: a 404 then says nothing about the repo.
    h.sim.revoke_org(cmcp_tests::TOKEN);
    h.sim.delete_repo(ids[2]);
    processed(h.store(), CONNECTION, 3).await;
    assert_eq!(status(ids[2]).await, SpaceStatus::Active);
    assert_eq!(sighting(ids[2]).await, Some(SightingState::AccessLost));
    worker.stop().await;
    gateway.abort();
}

both_backends!(
    person_webhook_and_sync_leave_company_space_unchanged,
    person_listing_before_company_sync_is_taken_over,
    two_company_connections_share_an_org,
    company_404_tombstones_only_while_the_org_still_reads,
);
