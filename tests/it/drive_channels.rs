//! Drive push channels end to end over real sockets: channels opened
//! against the simulated domain, the gateway served on `127.0.0.1:0`, a
//! worker running. A change upstream makes the simulator notify; the gateway
//! accepts only notifications of a live channel of the connection; the
//! worker reads the changes feed. Renewal and lapsed channels are driven by
//! `ensure_channels_at` with the time given. Each behaviour on SQLite and
//! PostgreSQL.

use cmcp_domain::{AliasKind, Platform};
use cmcp_fixtures::DriveSimConfig;
use cmcp_fixtures::drive::ChannelEvent;
use cmcp_fixtures::drive::webhook::{Notification, post_notification};
use cmcp_registry::store::HANDLE_DELIVERY_QUEUE;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, DriveChannelRow};
use cmcp_tests::{DRIVE_CONNECTION, DriveHarness};
use cmcp_tests::{eventually, serve_gateway, start_worker};
use cmcp_worker::SyncOutcome;
use cmcp_worker::change_feed::{IncrementalOutcome, run_full};
use cmcp_worker::push_channels::{
    ChannelPolicy, ensure_channels, ensure_channels_at, hook_address,
};

both_backends!(
    notified_rename_changes_the_alias_without_a_full_sync,
    forged_notifications_are_refused_and_make_no_job,
    renewal_opens_the_new_channel_before_stopping_the_old,
    lapsed_channel_triggers_an_incremental_sync,
    channel_calls_wait_for_the_shared_budget,
);

/// Two drives, fully synced (so each has a changes position), with the
/// queue tables in place.
async fn synced(db: TestDb) -> DriveHarness {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = DriveHarness::start(
        db,
        DriveSimConfig {
            drives: 2,
            folders_per_level: 2,
            depth: 2,
            ..DriveSimConfig::default()
        },
        2,
    )
    .await;
    assert!(matches!(
        run_full(&h.ctx, DRIVE_CONNECTION, cmcp_domain::RunTrigger::Test)
            .await
            .unwrap(),
        SyncOutcome::Complete { .. }
    ));
    assert_eq!(
        h.store()
            .drive_page_tokens(DRIVE_CONNECTION)
            .await
            .unwrap()
            .len(),
        2
    );
    h
}

async fn active_name(h: &DriveHarness, folder: &str) -> Option<String> {
    h.store()
        .alias_history(&h.folder_address(folder))
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.is_active() && a.kind == AliasKind::Name)
        .map(|a| a.raw)
}

async fn live(h: &DriveHarness) -> Vec<DriveChannelRow> {
    h.store()
        .unstopped_drive_channels(DRIVE_CONNECTION)
        .await
        .unwrap()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A depth-1 folder of the first drive.
fn top_folder(h: &DriveHarness) -> cmcp_fixtures::FolderSnapshot {
    let drive = h.sim.drives()[0].id.clone();
    h.sim
        .folders()
        .into_iter()
        .find(|f| f.depth == 1 && f.drive_id == drive)
        .unwrap()
}

pub async fn notified_rename_changes_the_alias_without_a_full_sync(db: TestDb) {
    let h = synced(db).await;
    let (base, gateway) = serve_gateway(h.store()).await;
    let worker = start_worker(h.store(), &h.ctx);
    let report = ensure_channels(&h.ctx, DRIVE_CONNECTION, &base)
        .await
        .unwrap();
    assert_eq!((report.opened, report.failed), (2, 0), "{report:?}");
    let channels = live(&h).await;
    assert_eq!(channels.len(), 2);
    let address = hook_address(&base, Platform::Drive, DRIVE_CONNECTION);
    let upstream = h.sim.channels();
    assert_eq!(upstream.len(), 2);
    for ch in &channels {
        let up = upstream.iter().find(|u| u.id == ch.channel_id).unwrap();
        assert_eq!(
            (&up.resource_id, &up.address, &up.drive_id),
            (&ch.resource_id, &address, &ch.drive_id)
        );
        assert_eq!(up.expiration, ch.expiration);
    }

    let folder = top_folder(&h);
    h.sim.rename_folder(&folder.id, "Renamed By Push");
    eventually("the new name is the active alias", || async {
        (active_name(&h, &folder.id).await.as_deref() == Some("Renamed By Push")).then_some(())
    })
    .await;

    // The change came through the gateway and a delivery job, not a sync.
    let runs = h
        .store()
        .list_runs(Some(DRIVE_CONNECTION), 100)
        .await
        .unwrap();
    assert_eq!(
        runs.iter()
            .filter(|r| r.triggered_by != "drive-changes")
            .count(),
        1,
        "only the initial full sync: {runs:?}"
    );
    let change_channel = channels
        .iter()
        .find(|c| c.drive_id.as_deref() == Some(folder.drive_id.as_str()))
        .unwrap();
    let sent = h.sim.notifications();
    assert!(
        sent.iter()
            .any(|n| n.channel_id == change_channel.channel_id
                && n.state == "change"
                && n.status == Some(202)),
        "{sent:?}"
    );
    eventually("the change delivery is processed", || async {
        let rows = h.store().list_deliveries(DRIVE_CONNECTION).await.unwrap();
        rows.iter()
            .any(|r| r.event.contains("change") && r.status == DeliveryStatus::Processed)
            .then_some(())
    })
    .await;
    worker.stop().await;
    gateway.abort();
}

pub async fn forged_notifications_are_refused_and_make_no_job(db: TestDb) {
    let h = synced(db).await;
    let (base, gateway) = serve_gateway(h.store()).await;
    ensure_channels(&h.ctx, DRIVE_CONNECTION, &base)
        .await
        .unwrap();
    // The `sync` notifications of the new channels may still be on their
    // way: wait until each one was answered before counting.
    eventually("the sync notifications were answered", || async {
        let sent = h.sim.notifications();
        (sent.iter().filter(|n| n.state == "sync").count() == 2).then_some(())
    })
    .await;
    let deliveries = h
        .store()
        .list_deliveries(DRIVE_CONNECTION)
        .await
        .unwrap()
        .len();
    let jobs = h
        .store()
        .queued_job_count(HANDLE_DELIVERY_QUEUE)
        .await
        .unwrap();
    let ch = live(&h).await.remove(0);
    let address = hook_address(&base, Platform::Drive, DRIVE_CONNECTION);
    let forged = |channel_id: &str, token: Option<&str>, resource_id: &str| Notification {
        address: address.clone(),
        channel_id: channel_id.to_owned(),
        token: token.map(str::to_owned),
        resource_id: resource_id.to_owned(),
        resource_uri: "https://www.googleapis.com/drive/v3/changes".to_owned(),
        expiration: ch.expiration,
        state: "change".to_owned(),
        message_number: 9_000,
    };
    for (n, want) in [
        (
            forged(&ch.channel_id, Some("not-the-token"), &ch.resource_id),
            401,
        ),
        (forged(&ch.channel_id, None, &ch.resource_id), 401),
        // No live channel answers as a forgery does (no oracle).
        (forged("no-such-channel", Some("x"), &ch.resource_id), 401),
    ] {
        assert_eq!(post_notification(&n).await, Some(want), "{n:?}");
    }
    // The channel id is the connection's own: another connection's route
    // does not know it.
    let mut elsewhere = forged(&ch.channel_id, Some("x"), &ch.resource_id);
    elsewhere.address = format!("{base}/hooks/drive/no-such-connection");
    assert_eq!(post_notification(&elsewhere).await, Some(401));

    assert_eq!(
        h.store()
            .list_deliveries(DRIVE_CONNECTION)
            .await
            .unwrap()
            .len(),
        deliveries
    );
    assert_eq!(
        h.store()
            .queued_job_count(HANDLE_DELIVERY_QUEUE)
            .await
            .unwrap(),
        jobs
    );
    gateway.abort();
}

pub async fn renewal_opens_the_new_channel_before_stopping_the_old(db: TestDb) {
    let h = synced(db).await;
    let (base, gateway) = serve_gateway(h.store()).await;
    let policy = ChannelPolicy::default();
    let first = ensure_channels_at(&h.ctx, DRIVE_CONNECTION, &base, &policy, now_ms())
        .await
        .unwrap();
    assert_eq!(first.opened, 2);
    let old = live(&h).await;
    // Still far from expiry: nothing to do.
    let again = ensure_channels_at(&h.ctx, DRIVE_CONNECTION, &base, &policy, now_ms())
        .await
        .unwrap();
    assert_eq!((again.kept, again.opened, again.renewed), (2, 0, 0));

    // Within the margin of expiry.
    let soon = old.iter().map(|c| c.expiration).min().unwrap()
        - i64::try_from(policy.renew_margin.as_millis()).unwrap() / 2;
    let renewal = ensure_channels_at(&h.ctx, DRIVE_CONNECTION, &base, &policy, soon)
        .await
        .unwrap();
    assert_eq!(
        (
            renewal.renewed,
            renewal.stopped,
            renewal.lapsed,
            renewal.failed
        ),
        (2, 2, 0, 0),
        "{renewal:?}"
    );
    assert!(renewal.incremental.is_none());
    let new = live(&h).await;
    assert_eq!(new.len(), 2);
    let log = h.sim.channel_log();
    let at = |e: ChannelEvent| log.iter().position(|x| *x == e).unwrap();
    for o in &old {
        let successor = new.iter().find(|n| n.drive_id == o.drive_id).unwrap();
        assert_ne!(successor.channel_id, o.channel_id);
        assert!(
            at(ChannelEvent::Watched {
                id: successor.channel_id.clone()
            }) < at(ChannelEvent::Stopped {
                id: o.channel_id.clone()
            }),
            "the new channel opens before the old one stops: {log:?}"
        );
    }
    let all = h.store().drive_channels(DRIVE_CONNECTION).await.unwrap();
    assert_eq!(all.len(), 4);
    for o in &old {
        let row = all.iter().find(|r| r.channel_id == o.channel_id).unwrap();
        assert!(row.stopped_at.is_some());
        assert!(
            h.sim
                .channels()
                .iter()
                .any(|u| u.id == o.channel_id && u.stopped)
        );
        // A notification naming the stopped channel finds no live channel.
        let n = Notification {
            address: hook_address(&base, Platform::Drive, DRIVE_CONNECTION),
            channel_id: o.channel_id.clone(),
            token: Some("whatever".to_owned()),
            resource_id: o.resource_id.clone(),
            resource_uri: String::new(),
            expiration: o.expiration,
            state: "change".to_owned(),
            message_number: 1,
        };
        assert_eq!(post_notification(&n).await, Some(401));
    }
    gateway.abort();
}

pub async fn lapsed_channel_triggers_an_incremental_sync(db: TestDb) {
    let h = synced(db).await;
    // Notifications go to a port nobody listens on: they are lost, as when
    // a channel expires unnoticed.
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let policy = ChannelPolicy::default();
    let first = ensure_channels_at(&h.ctx, DRIVE_CONNECTION, &dead, &policy, now_ms())
        .await
        .unwrap();
    assert_eq!(first.opened, 2);
    let old = live(&h).await;
    let folder = top_folder(&h);
    let before = active_name(&h, &folder.id).await;
    h.sim.rename_folder(&folder.id, "Renamed While Lapsed");
    eventually("the lost notification was attempted", || async {
        h.sim
            .notifications()
            .iter()
            .any(|n| n.state == "change" && n.status.is_none())
            .then_some(())
    })
    .await;
    assert_eq!(active_name(&h, &folder.id).await, before);

    let after_expiry = old.iter().map(|c| c.expiration).max().unwrap() + 1;
    let report = ensure_channels_at(&h.ctx, DRIVE_CONNECTION, &dead, &policy, after_expiry)
        .await
        .unwrap();
    assert_eq!((report.lapsed, report.failed), (2, 0), "{report:?}");
    match &report.incremental {
        Some(IncrementalOutcome::Applied(r)) => assert!(r.renamed >= 1, "{r:?}"),
        other => panic!("expected an incremental pass, got {other:?}"),
    }
    assert_eq!(
        active_name(&h, &folder.id).await.as_deref(),
        Some("Renamed While Lapsed")
    );
    let all = h.store().drive_channels(DRIVE_CONNECTION).await.unwrap();
    for o in &old {
        let row = all.iter().find(|r| r.channel_id == o.channel_id).unwrap();
        assert!(
            row.stopped_at.is_some(),
            "the lapsed channel is recorded stopped"
        );
    }
    assert_eq!(live(&h).await.len(), 2);
    let runs = h
        .store()
        .list_runs(Some(DRIVE_CONNECTION), 100)
        .await
        .unwrap();
    assert_eq!(
        runs.iter()
            .filter(|r| r.triggered_by == "drive-changes")
            .count(),
        1
    );
}

/// `changes.watch` is sent through the connector's executor, so it waits
/// for the credential's fleet budget like every read: with the budget
/// paused for an hour (past `max_rate_limit_wait`), no channel is opened
/// and the platform receives no call. A POST on a client of its own would
/// open both channels here.
pub async fn channel_calls_wait_for_the_shared_budget(db: TestDb) {
    let h = synced(db).await;
    let (_, budget) = h
        .store()
        .connection_budgets()
        .await
        .unwrap()
        .into_iter()
        .find(|(c, _)| c == DRIVE_CONNECTION)
        .expect("the full sync recorded the connection's budget");
    let now = chrono::Utc::now().timestamp_millis();
    h.store()
        .settle_budget(
            &budget.budget_key,
            cmcp_registry::BudgetSettlement {
                paused_until: Some(now + 3_600_000),
                ..Default::default()
            },
            now,
        )
        .await
        .unwrap();
    // The settlement above gave back a unit it never reserved; take the
    // in-flight count as it now stands.
    let paused = h.store().budget(&budget.budget_key).await.unwrap().unwrap();

    let report = ensure_channels(&h.ctx, DRIVE_CONNECTION, "https://hooks.example.com")
        .await
        .unwrap();
    assert_eq!((report.opened, report.failed), (0, 2), "{report:?}");
    assert!(
        h.sim.channel_log().is_empty(),
        "no call reached the platform"
    );
    assert!(h.sim.channels().is_empty());
    let after = h.store().budget(&budget.budget_key).await.unwrap().unwrap();
    assert_eq!(after.in_flight, paused.in_flight, "nothing was reserved");
}
