//! The audit log: append-only.

use cmcp_domain::Owner;
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewApiKey, NewAuditEntry, Power, Powers, Role, Store};

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

/// On SQLite an audited change (an ADMIN's decision and its entry), and a
/// sign-out, return only after the WAL is synced, as a delivery's answer
/// does: the store's `synchronous = NORMAL` commit alone would survive the
/// process but not the machine, and the screen has already said "saved"
/// (or "signed out"). An unaudited write (a connection's risks, which the
/// next sync sets again; a sign-in) syncs nothing. Counted per WAL file,
/// as a sync cannot be seen from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audited_change_or_a_sign_out_on_sqlite_returns_after_its_wal_sync() {
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

    s.create_api_key(
        &NewApiKey {
            id: "k1",
            name: "alice",
            key_hash: "hash-1",
            role: Role::Admin,
            powers: &Powers::new([Power::Mappings]),
            person: None,
        },
        "cli",
    )
    .await
    .unwrap();
    assert_eq!(wal.count(), before + 4, "create_api_key");
    s.create_session("sess-1", "k1", "csrf-1", 60_000)
        .await
        .unwrap();
    assert_eq!(wal.count(), before + 4, "a sign-in");
    s.delete_session("sess-1").await.unwrap();
    assert_eq!(wal.count(), before + 5, "a sign-out");
}
