//! The audit log: append-only.

use cmcp_domain::Owner;
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewAuditEntry, Store};

use crate::support::{add_connection, try_exec};

both_backends!(audit_log_is_append_only,);

async fn audit_log_is_append_only(db: TestDb) {
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
    let update = try_exec(&db.store, "UPDATE audit_log SET actor = 'mallory'").await;
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = try_exec(&db.store, "DELETE FROM audit_log").await;
    assert!(delete.is_err());
    assert_eq!(
        db.store.list_audit(5).await.unwrap()[0].actor,
        "admin:alice"
    );
}

/// On SQLite an audited change (an ADMIN's decision and its entry) returns
/// only after the WAL is synced, as a delivery's does: the store's
/// `synchronous = NORMAL` commit alone would survive the process but not
/// the machine, and the screen has already said "saved". An unaudited
/// write (a connection's risks, which the next sync sets again) syncs
/// nothing. Counted per WAL file, as a sync cannot be seen from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audited_change_on_sqlite_returns_after_its_wal_sync() {
    let db = TestDb::sqlite().await;
    let s = &db.store;
    assert!(matches!(s, Store::Sqlite(_)));
    let wal = s.wal_sync().expect("SQLite has a WAL");
    let before = wal.count();
    add_connection(s, "gh", Owner::Company).await;
    assert_eq!(wal.count(), before + 1, "create_connection");
    s.rotate_webhook_secret(&cipher(), "gh", 0, "admin:alice")
        .await
        .unwrap();
    assert_eq!(wal.count(), before + 2, "rotate_webhook_secret");
    s.append_audit(&NewAuditEntry {
        actor: "admin:alice".into(),
        action: "mapping.approve".into(),
        target: "proposal:1".into(),
        reason: None,
        before: None,
        after: None,
    })
    .await
    .unwrap();
    assert_eq!(wal.count(), before + 3, "append_audit");
    s.set_connection_risks("gh", &[]).await.unwrap();
    assert_eq!(wal.count(), before + 3, "an unaudited write");
    assert_eq!(s.list_audit(10).await.unwrap().len(), 3);
}
