//! Deliveries never vanish: the upstream is down for 30 s while
//! deliveries arrive; their jobs fail, are retried with backoff as durable
//! jobs (one worker is replaced half-way, as a restart would), and once the
//! upstream is back every delivery is applied and none is left `received`.
//! On SQLite and PostgreSQL.

use std::time::Duration;

use cmcp_domain::AliasKind;
use cmcp_fixtures::{Faults, GithubSimConfig};
use cmcp_registry::DeliveryStatus;
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, Harness, fast_http, repo_address};
use cmcp_tests::{eventually_within, start_worker};
use cmcp_worker::run_sync;

both_backends!(
    upstream_down_for_30_s_loses_no_delivery,
    past_the_horizon_a_delivery_fails_and_a_replay_applies_it,
);

/// With a short horizon, a delivery whose upstream stays down ends
/// `failed` with its last error; once the upstream is back, an ADMIN's
/// replay (audited) applies it.
pub async fn past_the_horizon_a_delivery_fails_and_a_replay_applies_it(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let mut h = Harness::start(
        db,
        GithubSimConfig {
            repos: 3,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    h.ctx.sync.delivery_retry_horizon = Duration::from_secs(2);
    run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap();
    let gateway = h.hook_gateway(9).await;
    let worker = start_worker(h.store(), &h.ctx);
    h.sim.set_faults(Faults {
        server_error: 1.0,
        ..Faults::default()
    });
    let id = h.sim.repos()[0].id;
    h.sim.rename_repo(id, "renamed-after-replay");
    let failed = eventually_within("the delivery fails", Duration::from_secs(20), || async {
        let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
        rows.into_iter()
            .find(|r| r.status == DeliveryStatus::Failed)
    })
    .await;
    let error = failed.error.clone().unwrap_or_default();
    assert!(error.starts_with("gave up after"), "{error}");
    assert!(
        h.store()
            .delivery_counts()
            .await
            .unwrap()
            .contains(&(DeliveryStatus::Failed, 1))
    );
    h.sim.set_faults(Faults::default());
    h.store()
        .replay_delivery(&failed.id, "test-admin", Some("upstream is back"))
        .await
        .unwrap();
    eventually_within("the replay is applied", Duration::from_secs(20), || async {
        let row = h.store().get_delivery(&failed.id).await.unwrap();
        (row.status == DeliveryStatus::Processed).then_some(())
    })
    .await;
    let audit = h.store().list_audit(20).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "delivery.replayed"
        && a.actor == "test-admin"
        && a.reason.as_deref() == Some("upstream is back")));
    worker.stop().await;
    gateway.abort();
}

pub async fn upstream_down_for_30_s_loses_no_delivery(db: TestDb) {
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
    run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap();
    let gateway = h.hook_gateway(9).await;
    let worker = start_worker(h.store(), &h.ctx);
    // Every API answer is a 500 from now on.
    h.sim.set_faults(Faults {
        server_error: 1.0,
        ..Faults::default()
    });
    let ids: Vec<u64> = h.sim.repos().iter().take(4).map(|r| r.id).collect();
    for (i, id) in ids.iter().enumerate() {
        h.sim.rename_repo(*id, &format!("renamed-while-down-{i}"));
    }
    eventually_within(
        "the deliveries are stored",
        Duration::from_secs(10),
        || async {
            let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
            (rows.len() == ids.len()).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    // A restart in the middle of the outage.
    worker.stop().await;
    let worker = start_worker(h.store(), &h.ctx);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
    assert!(
        rows.iter()
            .all(|r| r.status == DeliveryStatus::Received && r.attempts >= 3),
        "still waiting, tried again and again: {rows:?}"
    );
    h.sim.set_faults(Faults::default());
    eventually_within(
        "every delivery is applied once the upstream is back",
        Duration::from_secs(30),
        || async {
            let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
            rows.iter()
                .all(|r| r.status == DeliveryStatus::Processed)
                .then_some(())
        },
    )
    .await;
    for (i, id) in ids.iter().enumerate() {
        let active = h
            .store()
            .alias_history(&repo_address(*id))
            .await
            .unwrap()
            .into_iter()
            .find(|a| a.is_active() && a.kind == AliasKind::Name)
            .map(|a| a.raw);
        assert_eq!(active, Some(format!("renamed-while-down-{i}")));
    }
    worker.stop().await;
    gateway.abort();
}
