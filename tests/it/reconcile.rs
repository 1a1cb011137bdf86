//! Reconciliation end to end over real sockets: the drift a reconcile
//! reports (what no webhook delivered), the breaker against mass missing,
//! and tombstones after repeated complete listings. Each behaviour runs on
//! SQLite and PostgreSQL (`both_backends!`).

use std::collections::BTreeMap;

use cmcp_domain::{AliasKind, ConnectionStatus, RiskCode, RunTrigger, SpaceStatus, Token};
use cmcp_fixtures::{DriveSimConfig, GithubSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, DriftKind, Store};
use cmcp_tests::{CONNECTION, Harness, TOKEN, cipher, fast_http, repo_address};
use cmcp_tests::{DRIVE_CONNECTION, DriveHarness, eventually, start_worker};
use cmcp_worker::change_feed::run_full;
use cmcp_worker::{SyncOutcome, run_sync};

async fn synced(db: TestDb, repos: usize) -> Harness {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let first = run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert!(matches!(first, SyncOutcome::Complete { .. }), "{first:?}");
    h
}

async fn reconcile(h: &Harness) -> SyncOutcome {
    run_sync(&h.ctx, CONNECTION, RunTrigger::Reconcile)
        .await
        .unwrap()
}

async fn active_name(store: &Store, id: u64) -> Option<String> {
    store
        .alias_history(&repo_address(id))
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.is_active() && a.kind == AliasKind::Name)
        .map(|a| a.raw)
}

async fn count(store: &Store, status: SpaceStatus) -> u64 {
    store
        .count_spaces(Some(CONNECTION), Some(status))
        .await
        .unwrap()
}

/// Three renames upstream, one of them announced by a signed webhook that
/// a worker processes; one deletion and two creations, all quiet. The
/// reconcile finds exactly the five changes no webhook delivered.
pub async fn drift_counts_exactly_the_changes_webhooks_missed(db: TestDb) {
    let h = synced(db, 13).await;
    let gateway = h.hook_gateway(77).await;
    let worker = start_worker(h.store(), &h.ctx);
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    h.sim.rename_repo(ids[0], "announced-rename");
    eventually("the announced rename is applied", || async {
        let processed = h
            .store()
            .list_deliveries(CONNECTION)
            .await
            .unwrap()
            .iter()
            .any(|d| d.status == DeliveryStatus::Processed);
        (processed && active_name(h.store(), ids[0]).await.as_deref() == Some("announced-rename"))
            .then_some(())
    })
    .await;
    worker.stop().await;

    // The hook stops reaching the fleet: everything else is quiet.
    h.sim.set_webhook(None);
    h.sim.rename_repo(ids[1], "quiet-rename-1");
    h.sim.rename_repo(ids[2], "quiet-rename-2");
    h.sim.delete_repo(ids[3]);
    h.sim.create_repo("quiet-new-1");
    h.sim.create_repo("quiet-new-2");

    let outcome = reconcile(&h).await;
    assert!(
        matches!(outcome, SyncOutcome::Complete { .. }),
        "{outcome:?}"
    );
    let report = h.store().drift_report(Some(CONNECTION)).await.unwrap();
    assert_eq!(report.len(), 1);
    let line = &report[0];
    assert_eq!(line.run_id.as_deref(), outcome.run_id());
    assert_eq!(line.missed, 5, "{line:?}");
    assert_eq!(
        line.by_kind,
        BTreeMap::from([
            (DriftKind::Created, 2),
            (DriftKind::Renamed, 2),
            (DriftKind::Missing, 1)
        ])
    );
    assert_eq!(
        line.summary,
        "webhooks missed 5 changes last night: 2 new spaces, 2 renames, 1 deletion"
    );
    let renamed: Vec<String> = h
        .store()
        .drift_of_run(outcome.run_id().unwrap())
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, k)| *k == DriftKind::Renamed)
        .map(|(a, _)| a)
        .collect();
    assert!(
        !renamed.contains(&repo_address(ids[0]).to_string()),
        "the delivered rename is not drift"
    );
    assert!(!line.flagged, "one night is not a habit");

    // A second reconcile with nothing changed finds nothing.
    reconcile(&h).await;
    let line = &h.store().drift_report(Some(CONNECTION)).await.unwrap()[0];
    assert_eq!(line.missed, 0);
    assert_eq!(line.summary, "webhooks missed nothing last night");
    gateway.abort();
}

/// Night after night of missed changes flags the connection, with a hint.
pub async fn webhooks_that_miss_every_night_are_flagged(db: TestDb) {
    let h = synced(db, 3).await;
    let id = h.sim.repos()[0].id;
    for night in 0..cmcp_registry::REPEAT_OFFENDER_NIGHTS {
        h.sim.rename_repo(id, &format!("night-{night}"));
        reconcile(&h).await;
    }
    let line = &h.store().drift_report(Some(CONNECTION)).await.unwrap()[0];
    assert!(line.flagged, "{line:?}");
    assert_eq!(line.nights_in_a_row, cmcp_registry::REPEAT_OFFENDER_NIGHTS);
    assert!(
        line.hint
            .as_deref()
            .unwrap()
            .contains("is the hook registered")
    );
}

/// Two thirds of the org vanish at once: nothing is marked missing, the
/// connection is held with a notice; an ADMIN's confirmation marks them.
pub async fn mass_missing_holds_until_an_admin_confirms(db: TestDb) {
    let h = synced(db, 12).await;
    let gone: Vec<u64> = h.sim.repos().iter().take(8).map(|r| r.id).collect();
    for id in &gone {
        h.sim.delete_repo(*id);
    }
    let outcome = reconcile(&h).await;
    assert!(
        matches!(outcome, SyncOutcome::Complete { .. }),
        "{outcome:?}"
    );
    assert_eq!(count(h.store(), SpaceStatus::Missing).await, 0);
    for id in &gone {
        let s = h
            .store()
            .get_space(&repo_address(*id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s.status, SpaceStatus::Active);
    }
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert_eq!(conn.status, ConnectionStatus::Held);
    let notice = conn
        .risks
        .iter()
        .find(|r| r.code == RiskCode::MassMissing)
        .expect("a risk notice");
    assert!(notice.message.contains("8 of 13"), "{}", notice.message);
    assert!(
        notice.message.contains("confirm-missing"),
        "{}",
        notice.message
    );
    // The drift report does not count what the breaker held back.
    let line = &h.store().drift_report(Some(CONNECTION)).await.unwrap()[0];
    assert_eq!(line.by_kind.get(&DriftKind::Missing), None);

    let err = h
        .store()
        .confirm_missing(CONNECTION, "admin:alice", " ")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("reason"), "{err}");
    let marked = h
        .store()
        .confirm_missing(CONNECTION, "admin:alice", "the team archived its old org")
        .await
        .unwrap();
    assert_eq!(marked, 8);
    assert_eq!(count(h.store(), SpaceStatus::Missing).await, 8);
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert_eq!(conn.status, ConnectionStatus::Enabled);
    let audit = h.store().list_audit(10).await.unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "connection.confirm-missing")
        .expect("the confirmation is audited");
    assert_eq!(entry.actor, "admin:alice");
    assert_eq!(
        entry.reason.as_deref(),
        Some("the team archived its old org")
    );
    assert!(h.store().get_hold(CONNECTION).await.unwrap().is_none());

    // The next complete listing keeps the risk notice away.
    reconcile(&h).await;
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert!(conn.risks.iter().all(|r| r.code != RiskCode::MassMissing));
}

/// A token that lost most of the org trips the breaker; once access is
/// back, the next complete listing agrees and the hold clears by itself.
pub async fn hold_clears_when_a_later_listing_agrees(db: TestDb) {
    let h = synced(db, 12).await;
    let hidden: Vec<u64> = h.sim.repos().iter().take(9).map(|r| r.id).collect();
    for id in &hidden {
        h.sim.hide_repo_from(TOKEN, *id);
    }
    run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert_eq!(conn.status, ConnectionStatus::Held);
    assert_eq!(count(h.store(), SpaceStatus::Missing).await, 0);

    for id in &hidden {
        h.sim.show_repo_to(TOKEN, *id);
    }
    run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert_eq!(conn.status, ConnectionStatus::Enabled);
    assert!(conn.risks.iter().all(|r| r.code != RiskCode::MassMissing));
    assert!(h.store().get_hold(CONNECTION).await.unwrap().is_none());
    assert_eq!(count(h.store(), SpaceStatus::Missing).await, 0);
}

/// A space absent from `tombstone_after` consecutive complete listings is
/// tombstoned, not before; seeing it again in between resets the count.
pub async fn tombstoned_after_consecutive_complete_listings(db: TestDb) {
    let mut h = synced(db, 12).await;
    h.ctx.sync.tombstone_after = 3;
    let id = h.sim.repos()[4].id;
    h.sim.hide_repo_from(TOKEN, id);
    for _ in 0..2 {
        run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
            .await
            .unwrap();
    }
    let status = |h: &Harness| {
        let store = h.store().clone();
        async move {
            store
                .get_space(&repo_address(id))
                .await
                .unwrap()
                .unwrap()
                .status
        }
    };
    assert_eq!(status(&h).await, SpaceStatus::Missing);
    // Seen again: the count starts over.
    h.sim.show_repo_to(TOKEN, id);
    run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert_eq!(status(&h).await, SpaceStatus::Active);
    h.sim.hide_repo_from(TOKEN, id);
    for _ in 0..2 {
        run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
            .await
            .unwrap();
    }
    assert_eq!(status(&h).await, SpaceStatus::Missing);
    run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert_eq!(status(&h).await, SpaceStatus::Tombstoned);
}

/// A trashed Drive folder (restorable) leaves the listing like a deleted
/// one; the reconcile's direct read tells them apart: the trashed one
/// stays, marked trashed, and only the deleted one is missing.
pub async fn trashed_drive_folder_is_trashed_not_missing(db: TestDb) {
    let h = DriveHarness::start(
        db,
        DriveSimConfig {
            drives: 2,
            folders_per_level: 3,
            ..DriveSimConfig::default()
        },
        2,
    )
    .await;
    let first = run_full(&h.ctx, DRIVE_CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert!(matches!(first, SyncOutcome::Complete { .. }), "{first:?}");
    let leaves: Vec<String> = h
        .sim
        .folders()
        .into_iter()
        .filter(|f| f.depth == 2)
        .map(|f| f.id)
        .collect();
    let (trashed, deleted) = (&leaves[0], &leaves[1]);
    h.sim.trash_folder(trashed);
    h.sim.delete_folder(deleted);
    let outcome = run_full(&h.ctx, DRIVE_CONNECTION, RunTrigger::Reconcile)
        .await
        .unwrap();
    assert!(
        matches!(outcome, SyncOutcome::Complete { .. }),
        "{outcome:?}"
    );
    let t = h
        .store()
        .get_space(&h.folder_address(trashed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.status, t.trashed), (SpaceStatus::Active, true));
    let d = h
        .store()
        .get_space(&h.folder_address(deleted))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.status, d.trashed), (SpaceStatus::Missing, false));
    let line = &h
        .store()
        .drift_report(Some(DRIVE_CONNECTION))
        .await
        .unwrap()[0];
    assert_eq!(
        line.by_kind,
        BTreeMap::from([(DriftKind::Trashed, 1), (DriftKind::Missing, 1)])
    );
}

/// The nightly reconcile re-verifies the credential: a revoked token and
/// scopes widened to write show on the connection that night; a good
/// listing clears the refusal.
pub async fn credential_changes_show_after_the_nightly_reconcile(db: TestDb) {
    let h = synced(db, 3).await;
    let base = h.sim.base_url();
    let revoke = |token: &'static str| {
        let store = h.store().clone();
        let base = base.clone();
        async move {
            store
                .update_connection_endpoint(
                    &cipher(),
                    CONNECTION,
                    &base,
                    &Token::new(token),
                    None,
                    "test",
                )
                .await
                .unwrap();
        }
    };
    revoke("ghp_revokedTokenTheSimulatorRefuses").await;
    let outcome = reconcile(&h).await;
    assert!(matches!(outcome, SyncOutcome::Failed { .. }), "{outcome:?}");
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    assert!(
        conn.risks
            .iter()
            .any(|r| r.code == RiskCode::CredentialRejected),
        "{:?}",
        conn.risks
    );
    assert_eq!(
        conn.status,
        ConnectionStatus::Rejected,
        "the status says so too"
    );

    revoke(TOKEN).await;
    h.sim.set_oauth_scopes(Some("repo, read:org".to_owned()));
    let outcome = reconcile(&h).await;
    assert!(
        matches!(outcome, SyncOutcome::Complete { .. }),
        "{outcome:?}"
    );
    let conn = h.store().get_connection(CONNECTION).await.unwrap();
    let codes: Vec<RiskCode> = conn.risks.iter().map(|r| r.code).collect();
    assert_eq!(codes, vec![RiskCode::WriteScope]);
    assert_eq!(conn.status, ConnectionStatus::Enabled, "enabled again");
    // Both changes of status are audited, with the worker as the actor.
    let audit = h.store().list_audit(50).await.unwrap();
    let changes: Vec<_> = audit
        .iter()
        .filter(|e| {
            e.target == format!("connection:{CONNECTION}") && e.actor.starts_with("worker:")
        })
        .collect();
    assert_eq!(changes.len(), 2, "{changes:#?}");
}

both_backends!(
    credential_changes_show_after_the_nightly_reconcile,
    trashed_drive_folder_is_trashed_not_missing,
    drift_counts_exactly_the_changes_webhooks_missed,
    webhooks_that_miss_every_night_are_flagged,
    mass_missing_holds_until_an_admin_confirms,
    hold_clears_when_a_later_listing_agrees,
    tombstoned_after_consecutive_complete_listings,
);
