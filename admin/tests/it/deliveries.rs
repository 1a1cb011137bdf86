//! `/v1/deliveries` over real HTTP: the connections power reads them, a
//! failed one shows its error, a replay of one that is not finished is
//! refused (the replay itself is exercised end to end in `cmcp-tests`).

use cmcp_domain::Platform;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, NewDelivery, Recorded};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::serve;
use crate::support::connection;

both_backends!(deliveries_are_listed_shown_and_replay_is_checked);

pub async fn deliveries_are_listed_shown_and_replay_is_checked(db: TestDb) {
    connection(&db.store, "bb").await;
    let new = |key: &str, status, error: Option<&str>| NewDelivery {
        connection_id: "bb".into(),
        platform: Platform::Bitbucket,
        delivery_key: key.into(),
        event: "repo:updated".into(),
        headers: vec![],
        body: b"{}".to_vec(),
        verification: "hmac-sha256".into(),
        status,
        error: error.map(str::to_owned),
        replay_key: None,
    };
    let Recorded::Stored { id: failed, .. } = db
        .store
        .record_delivery(&new("k1", DeliveryStatus::Failed, Some("upstream down")))
        .await
        .unwrap()
    else {
        panic!("stored");
    };
    let Recorded::Stored { id: ignored, .. } = db
        .store
        .record_delivery(&new("k2", DeliveryStatus::Ignored, None))
        .await
        .unwrap()
    else {
        panic!("stored");
    };
    let srv = serve(&db).await;
    let key = cmcp_admin::create_key(&db.store, "ops", "admin", &["connections".into()], "test")
        .await
        .unwrap()
        .1;
    let (status, body) = srv
        .call(
            Method::GET,
            "/v1/deliveries?state=failed",
            Some(&key),
            &Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], json!(failed));
    assert_eq!(items[0]["error"], json!("upstream down"));
    let (status, body) = srv
        .call(
            Method::GET,
            &format!("/v1/deliveries/{failed}"),
            Some(&key),
            &Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], json!("failed"));
    assert!(body.get("body").is_none(), "the body is never returned");
    let (status, _) = srv
        .call(
            Method::POST,
            &format!("/v1/deliveries/{ignored}/replay"),
            Some(&key),
            &json!({"reason": "try"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an ignored delivery is not replayed"
    );
    let (status, _) = srv
        .call(Method::GET, "/v1/deliveries/nope", Some(&key), &Value::Null)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
