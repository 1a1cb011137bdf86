//! Connections: the token sealed at rest, ids checked, duplicates refused.

use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{Cipher, NewConnection, RegistryError};

use crate::support::{TOKEN, add_connection};

both_backends!(
    connection_token_is_sealed_and_opens,
    duplicate_and_invalid_connections_are_refused,
);

async fn connection_token_is_sealed_and_opens(db: TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let token = db
        .store
        .connection_token(&cipher(), "gh-acme")
        .await
        .unwrap();
    assert_eq!(token.expose(), TOKEN);
    // The row carries no token, and its Debug/JSON cannot leak one.
    let row = db.store.get_connection("gh-acme").await.unwrap();
    assert!(!format!("{row:?}").contains(TOKEN));
    assert!(!serde_json::to_string(&row).unwrap().contains(TOKEN));
    // Another master key cannot open it.
    let other = Cipher::from_key_bytes(&[1u8; 32]).unwrap();
    assert!(db.store.connection_token(&other, "gh-acme").await.is_err());
    // Creating it was audited.
    let audit = db.store.list_audit(10).await.unwrap();
    assert_eq!(audit[0].action, "connection.create");
    assert_eq!(audit[0].target, "connection:gh-acme");
    assert!(!serde_json::to_string(&audit).unwrap().contains(TOKEN));
}

async fn duplicate_and_invalid_connections_are_refused(db: TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let again = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "gh-acme".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(
        matches!(again, Err(RegistryError::AlreadyExists { .. })),
        "{again:?}"
    );
    let bad = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "Bad Id!".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(matches!(bad, Err(RegistryError::Invalid { .. })), "{bad:?}");
    let missing = db.store.get_connection("nope").await;
    assert!(matches!(missing, Err(RegistryError::NotFound { .. })));
}
