//! The audit log: append-only.

use cmcp_registry::NewAuditEntry;
use cmcp_registry::testing::TestDb;

use crate::support::try_exec;

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
