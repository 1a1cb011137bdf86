//! API keys, the admin screen's sessions, and the ADMIN's connection
//! switch: only hashes stored, revocation ends sessions, all audited.

use cmcp_domain::{ConnectionStatus, Owner};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{NewApiKey, Power, Powers, RegistryError, Role, SESSIONS_PER_KEY};

use crate::support::add_connection;

both_backends!(
    keys_are_checked_found_by_hash_and_revoked,
    a_session_lives_until_it_expires_or_its_key_is_revoked,
    connection_switch_is_audited_with_its_reason,
    a_key_keeps_only_its_newest_sessions,
);

async fn keys_are_checked_found_by_hash_and_revoked(db: TestDb) {
    let s = &db.store;
    let powers = Powers::new([Power::Mappings]);
    let key = s
        .create_api_key(
            &NewApiKey {
                id: "k1",
                name: "alice",
                key_hash: "hash-1",
                role: Role::Admin,
                powers: &powers,
                person: None,
            },
            "cli",
        )
        .await
        .unwrap();
    assert!(key.has_power(Power::Mappings));
    assert!(!key.has_power(Power::Connections));
    // Powers are for admin keys only.
    let refused = s
        .create_api_key(
            &NewApiKey {
                id: "k2",
                name: "bad",
                key_hash: "hash-2",
                role: Role::Member,
                powers: &powers,
                person: None,
            },
            "cli",
        )
        .await;
    assert!(
        matches!(refused, Err(RegistryError::Invalid { .. })),
        "{refused:?}"
    );
    assert_eq!(s.list_api_keys().await.unwrap(), std::slice::from_ref(&key));
    assert_eq!(s.key_by_hash("hash-1").await.unwrap(), Some(key.clone()));
    assert_eq!(s.key_by_hash("hash-x").await.unwrap(), None);
    // On a SQLite file the API's inline reader gives the same answers,
    // and sees a revocation committed through the pool at once.
    let inline = cmcp_registry::InlineReads::of(s);
    assert_eq!(
        inline.is_some(),
        matches!(s, cmcp_registry::Store::Sqlite(_))
    );
    if let Some(inline) = &inline {
        assert_eq!(inline.key_by_hash("hash-1"), Some(Some(key)));
        assert_eq!(inline.key_by_hash("hash-x"), Some(None));
    }
    assert!(s.revoke_api_key("k1", "cli").await.unwrap());
    assert!(!s.revoke_api_key("k1", "cli").await.unwrap(), "once");
    assert_eq!(s.key_by_hash("hash-1").await.unwrap(), None);
    if let Some(inline) = &inline {
        assert_eq!(inline.key_by_hash("hash-1"), Some(None), "revoked");
    }
    assert!(s.get_api_key("k1").await.unwrap().revoked_at.is_some());
    let actions: Vec<String> = s
        .list_audit(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, ["key.revoke", "key.create"]);
}

async fn a_session_lives_until_it_expires_or_its_key_is_revoked(db: TestDb) {
    let s = &db.store;
    for (id, hash) in [("k1", "hash-1"), ("k2", "hash-2")] {
        s.create_api_key(
            &NewApiKey {
                id,
                name: id,
                key_hash: hash,
                role: Role::Member,
                powers: &Powers::default(),
                person: None,
            },
            "cli",
        )
        .await
        .unwrap();
    }
    s.create_session("sess-1", "k1", "csrf-1", 60_000)
        .await
        .unwrap();
    s.create_session("sess-2", "k2", "csrf-2", 60_000)
        .await
        .unwrap();
    s.create_session("sess-old", "k2", "csrf-3", -1)
        .await
        .unwrap();
    // A configured lifetime past the clock's range ends at its end
    // instead of overflowing.
    s.create_session("sess-long", "k1", "csrf-4", i64::MAX)
        .await
        .unwrap();
    assert!(s.session_by_hash("sess-long").await.unwrap().is_some());
    let live = s.session_by_hash("sess-1").await.unwrap().unwrap();
    assert_eq!(
        (live.key.id.as_str(), live.csrf_hash.as_str()),
        ("k1", "csrf-1")
    );
    assert!(
        s.session_by_hash("sess-old").await.unwrap().is_none(),
        "expired"
    );
    s.delete_session("sess-1").await.unwrap();
    assert!(
        s.session_by_hash("sess-1").await.unwrap().is_none(),
        "signed out"
    );
    s.revoke_api_key("k2", "cli").await.unwrap();
    assert!(
        s.session_by_hash("sess-2").await.unwrap().is_none(),
        "a revoked key's sessions end"
    );
}

async fn connection_switch_is_audited_with_its_reason(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    assert!(
        s.set_connection_status(
            "gh",
            ConnectionStatus::Disabled,
            "admin:alice",
            Some("offboarding")
        )
        .await
        .unwrap()
    );
    assert!(
        !s.set_connection_status("gh", ConnectionStatus::Disabled, "admin:alice", None)
            .await
            .unwrap(),
        "already disabled"
    );
    assert_eq!(
        s.get_connection("gh").await.unwrap().status,
        ConnectionStatus::Disabled
    );
    let audit = s.list_audit(1).await.unwrap();
    assert_eq!(audit[0].action, "connection.status");
    assert_eq!(audit[0].reason.as_deref(), Some("offboarding"));
    assert_eq!(
        audit[0].after,
        Some(serde_json::json!({"status": "disabled"}))
    );
}

/// A key signing in over and over keeps at most `SESSIONS_PER_KEY` live
/// sessions, the newest; another key's are untouched.
async fn a_key_keeps_only_its_newest_sessions(db: TestDb) {
    let s = &db.store;
    for id in ["k1", "k2"] {
        s.create_api_key(
            &NewApiKey {
                id,
                name: id,
                key_hash: &format!("hash-{id}"),
                role: Role::Admin,
                powers: &Powers::default(),
                person: None,
            },
            "cli",
        )
        .await
        .unwrap();
    }
    s.create_session("other", "k2", "csrf", 60_000)
        .await
        .unwrap();
    let n = SESSIONS_PER_KEY + 5;
    for i in 0..n {
        s.create_session(&format!("sess-{i:03}"), "k1", "csrf", 60_000)
            .await
            .unwrap();
    }
    let mut live = Vec::new();
    for i in 0..n {
        if s.session_by_hash(&format!("sess-{i:03}"))
            .await
            .unwrap()
            .is_some()
        {
            live.push(i);
        }
    }
    let newest: Vec<i64> = (n - SESSIONS_PER_KEY..n).collect();
    assert_eq!(live, newest, "the oldest five ended");
    assert!(s.session_by_hash("other").await.unwrap().is_some());
}
