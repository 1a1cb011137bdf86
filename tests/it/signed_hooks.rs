//! Signed Bitbucket Cloud and Jira Cloud deliveries end to end over real
//! sockets: the simulators sign each change (HMAC computed in the fixtures,
//! not with the gateway's code) and send it to a gateway served on
//! `127.0.0.1:0`; a worker turns it into a targeted re-read. Each behaviour
//! on SQLite and PostgreSQL.

use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_fixtures::bitbucket::HookTarget;
use cmcp_fixtures::{BitbucketSim, BitbucketSimConfig, JiraSim, JiraSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, Store};
use cmcp_tests::cipher;
use cmcp_tests::{eventually, serve_gateway, start_worker};
use cmcp_worker::{SyncContext, SyncOutcome, run_sync};

both_backends!(
    bitbucket_signed_deliveries_rename_and_rekey_without_a_full_sync,
    jira_signed_deliveries_rename_and_rekey_without_a_full_sync,
    deliveries_signed_with_another_secret_are_refused,
);

const BB: &str = "bitbucket-hooks";
const JIRA: &str = "jira-hooks";

async fn synced(store: &Store, ctx: &SyncContext, id: &str) {
    cmcp_worker::queue::setup(store).await.unwrap();
    assert!(matches!(
        run_sync(ctx, id, cmcp_domain::RunTrigger::Test)
            .await
            .unwrap(),
        SyncOutcome::Complete { .. }
    ));
}

async fn active(store: &Store, a: &SpaceAddress, kind: AliasKind) -> Vec<String> {
    let mut v: Vec<String> = store
        .alias_history(a)
        .await
        .unwrap()
        .into_iter()
        .filter(|x| x.is_active() && x.kind == kind)
        .map(|x| x.raw)
        .collect();
    v.sort();
    v
}

async fn full_syncs(store: &Store, id: &str) -> usize {
    store
        .list_runs(Some(id), 100)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.triggered_by == "test")
        .count()
}

async fn all_processed(store: &Store, id: &str, n: usize) {
    eventually("every delivery is processed", || async {
        let rows = store.list_deliveries(id).await.unwrap();
        (rows.len() == n && rows.iter().all(|r| r.status == DeliveryStatus::Processed))
            .then_some(())
    })
    .await;
}

async fn bitbucket(db: &TestDb) -> (BitbucketSim, SyncContext) {
    let cfg = BitbucketSimConfig {
        repos: 8,
        projects: 3,
        ..Default::default()
    };
    cmcp_tests::bitbucket(db, BB, cfg).await
}

async fn jira(db: &TestDb) -> (JiraSim, SyncContext) {
    let cfg = JiraSimConfig {
        projects: 6,
        ..Default::default()
    };
    cmcp_tests::jira(db, JIRA, cfg).await
}

pub async fn bitbucket_signed_deliveries_rename_and_rekey_without_a_full_sync(db: TestDb) {
    let (sim, ctx) = bitbucket(&db).await;
    synced(&db.store, &ctx, BB).await;
    let secret = db
        .store
        .current_webhook_secret(&cipher(), BB)
        .await
        .unwrap();
    let (base, gateway) = serve_gateway(&db.store).await;
    let worker = start_worker(&db.store, &ctx);
    sim.set_webhook(Some(HookTarget {
        url: format!("{base}/hooks/bitbucket/{BB}"),
        secret: secret.expose().to_owned(),
    }));
    let ws = sim.workspace_uuid();
    let repo = sim.repos()[2].clone();
    let project = sim.projects()[1].clone();
    let repo_addr = SpaceAddress::new(SpaceKind::BitbucketRepo, &ws, &repo.uuid).unwrap();
    let project_addr = SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &project.uuid).unwrap();

    sim.rename_repo(&repo.uuid, "billing-service");
    sim.change_project_key(&project.uuid, "BILL");
    eventually("the repo's new name is active", || async {
        (active(&db.store, &repo_addr, AliasKind::Name).await == ["billing-service"]).then_some(())
    })
    .await;
    eventually("the project's new key is active", || async {
        active(&db.store, &project_addr, AliasKind::Key)
            .await
            .contains(&"BILL".to_owned())
            .then_some(())
    })
    .await;
    let old = db.store.resolve(&repo.ssh_url).await.unwrap();
    assert!(
        old.iter()
            .any(|r| r.space.address == repo_addr && r.retired)
    );

    all_processed(&db.store, BB, 2).await;
    let sent = sim.webhook_deliveries();
    assert_eq!(
        sent.iter().map(|s| s.event.as_str()).collect::<Vec<_>>(),
        ["repo:updated", "project:updated"]
    );
    assert!(sent.iter().all(|s| s.status == Some(202)), "{sent:?}");
    assert_eq!(full_syncs(&db.store, BB).await, 1, "no full sync ran");
    worker.stop().await;
    gateway.abort();
}

pub async fn jira_signed_deliveries_rename_and_rekey_without_a_full_sync(db: TestDb) {
    let (sim, ctx) = jira(&db).await;
    synced(&db.store, &ctx, JIRA).await;
    let secret = db
        .store
        .current_webhook_secret(&cipher(), JIRA)
        .await
        .unwrap();
    let (base, gateway) = serve_gateway(&db.store).await;
    let worker = start_worker(&db.store, &ctx);
    sim.set_webhook(Some(HookTarget {
        url: format!("{base}/hooks/jira/{JIRA}"),
        secret: secret.expose().to_owned(),
    }));
    let p = sim.projects()[1].clone();
    let a = SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), &p.id).unwrap();

    sim.change_project_key(&p.id, "PAY");
    sim.rename_project(&p.id, "Payments");
    eventually("the new name is active", || async {
        (active(&db.store, &a, AliasKind::Name).await == ["Payments"]).then_some(())
    })
    .await;
    eventually("the new key is active", || async {
        active(&db.store, &a, AliasKind::Key)
            .await
            .contains(&"PAY".to_owned())
            .then_some(())
    })
    .await;

    all_processed(&db.store, JIRA, 2).await;
    let sent = sim.webhook_deliveries();
    assert_eq!(
        sent.iter().map(|s| s.event.as_str()).collect::<Vec<_>>(),
        ["project_updated", "project_updated"]
    );
    assert!(sent.iter().all(|s| s.status == Some(202)), "{sent:?}");
    assert_eq!(full_syncs(&db.store, JIRA).await, 1, "no full sync ran");
    worker.stop().await;
    gateway.abort();
}

pub async fn deliveries_signed_with_another_secret_are_refused(db: TestDb) {
    let (bb, bb_ctx) = bitbucket(&db).await;
    let (jira, _) = jira(&db).await;
    synced(&db.store, &bb_ctx, BB).await;
    let (base, gateway) = serve_gateway(&db.store).await;
    // The connections have secrets, but the simulators sign with another.
    db.store
        .current_webhook_secret(&cipher(), BB)
        .await
        .unwrap();
    db.store
        .current_webhook_secret(&cipher(), JIRA)
        .await
        .unwrap();
    let wrong = || "not-the-connection-secret".to_owned();
    bb.set_webhook(Some(HookTarget {
        url: format!("{base}/hooks/bitbucket/{BB}"),
        secret: wrong(),
    }));
    jira.set_webhook(Some(HookTarget {
        url: format!("{base}/hooks/jira/{JIRA}"),
        secret: wrong(),
    }));
    let repo = bb.repos()[0].clone();
    bb.rename_repo(&repo.uuid, "forged-name");
    let p = jira.projects()[0].clone();
    jira.rename_project(&p.id, "Forged");
    let bb_sent = eventually("the bitbucket delivery was answered", || async {
        bb.webhook_deliveries().pop()
    })
    .await;
    let jira_sent = eventually("the jira delivery was answered", || async {
        jira.webhook_deliveries().pop()
    })
    .await;
    assert_eq!(bb_sent.status, Some(401));
    assert_eq!(jira_sent.status, Some(401));
    assert!(db.store.list_deliveries(BB).await.unwrap().is_empty());
    assert!(db.store.list_deliveries(JIRA).await.unwrap().is_empty());
    gateway.abort();
}
