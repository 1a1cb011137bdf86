//! The `/v1` API over real HTTP: authentication, powers, bulk decisions.

use std::sync::Arc;

use cmcp_admin::testing::Contract;
use cmcp_admin::{AdminState, create_key};
use cmcp_registry::testing::TestDb;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{connection, place, project, proposals, put, refresh};

both_backends!(
    every_route_answers_401_without_a_key,
    every_route_answers_403_without_the_power,
    member_and_service_keys_cannot_decide,
    admin_without_mappings_power_cannot_decide,
    bulk_approve_of_1000_writes_1000_mappings_and_audit_entries,
    bulk_with_one_invalid_item_leaves_nothing,
    connection_disable_is_audited,
    revoked_key_is_refused,
    openapi_document_lists_the_routes,
    drift_report_has_a_line_per_connection,
);

pub struct Server {
    pub base: String,
    pub http: reqwest::Client,
    /// Every `/v1` answer this server gives is checked against the
    /// OpenAPI document; a test that received one the document does not
    /// describe fails when its server is dropped.
    pub contract: Arc<Contract>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let broken = self.contract.broken();
        if !std::thread::panicking() {
            assert!(
                broken.is_empty(),
                "answers the OpenAPI document does not describe:\n{}",
                broken.join("\n")
            );
        }
    }
}

pub async fn serve(db: &TestDb) -> Server {
    serve_with(AdminState::new(db.store.clone())).await
}

pub async fn serve_with(state: AdminState) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let contract = Contract::of_this_api();
    let app = contract.layer(cmcp_admin::router(state));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base,
        http: reqwest::Client::new(),
        contract,
    }
}

async fn key(db: &TestDb, role: &str, powers: &[&str]) -> String {
    let powers: Vec<String> = powers.iter().map(|p| (*p).to_owned()).collect();
    create_key(&db.store, &format!("{role} key"), role, &powers, "test")
        .await
        .unwrap()
        .1
}

/// Every protected route with a harmless body.
fn routes() -> Vec<(Method, &'static str, Value)> {
    vec![
        (Method::GET, "/v1/proposals", Value::Null),
        (
            Method::POST,
            "/v1/proposals/decisions",
            json!({"ids": [], "decision": "approve"}),
        ),
        (Method::GET, "/v1/mappings", Value::Null),
        (Method::PUT, "/v1/places", json!([])),
        (Method::GET, "/v1/connections", Value::Null),
        (
            Method::POST,
            "/v1/connections/bb/status",
            json!({"status": "enabled"}),
        ),
        (Method::GET, "/v1/audit", Value::Null),
        (Method::GET, "/v1/drift", Value::Null),
        (Method::GET, "/v1/deliveries", Value::Null),
        (Method::GET, "/v1/deliveries/bb", Value::Null),
        (Method::POST, "/v1/deliveries/bb/replay", json!({})),
    ]
}

impl Server {
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: &Value,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if !body.is_null() {
            req = req.json(body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body = resp.json().await.unwrap_or(Value::Null);
        (status, body)
    }
}

pub async fn every_route_answers_401_without_a_key(db: TestDb) {
    let srv = serve(&db).await;
    for (method, path, body) in routes() {
        let (status, _) = srv.call(method.clone(), path, None, &body).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a key"
        );
        let (status, _) = srv
            .call(method.clone(), path, Some("cmcp_not-a-key"), &body)
            .await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a wrong key"
        );
    }
}

pub async fn every_route_answers_403_without_the_power(db: TestDb) {
    let srv = serve(&db).await;
    let member = key(&db, "member", &[]).await;
    let powerless = key(&db, "admin", &[]).await;
    for (method, path, body) in routes() {
        let (status, _) = srv.call(method.clone(), path, Some(&member), &body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} as a member");
        if path != "/v1/audit" {
            let (status, _) = srv
                .call(method.clone(), path, Some(&powerless), &body)
                .await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {path} as an admin without powers"
            );
        }
    }
    let (status, _) = srv
        .call(Method::GET, "/v1/audit", Some(&powerless), &Value::Null)
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the audit log needs an admin key, no named power"
    );
}

async fn one_proposal(db: &TestDb) -> i64 {
    connection(&db.store, "bb").await;
    put(&db.store, &[project(1, "PAY", "Payments")]).await;
    db.store
        .put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(&db.store).await;
    proposals(&db.store, "proposed").await[0].id
}

pub async fn member_and_service_keys_cannot_decide(db: TestDb) {
    let id = one_proposal(&db).await;
    let srv = serve(&db).await;
    for role in ["member", "service"] {
        let k = key(&db, role, &[]).await;
        let (status, _) = srv
            .call(
                Method::POST,
                "/v1/proposals/decisions",
                Some(&k),
                &json!({"ids": [id], "decision": "approve"}),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role}");
    }
    assert!(db.store.list_mappings().await.unwrap().is_empty());
}

pub async fn admin_without_mappings_power_cannot_decide(db: TestDb) {
    let id = one_proposal(&db).await;
    let srv = serve(&db).await;
    let k = key(&db, "admin", &["connections"]).await;
    let (status, body) = srv
        .call(
            Method::POST,
            "/v1/proposals/decisions",
            Some(&k),
            &json!({"ids": [id], "decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"].as_str().unwrap().contains("mappings power"));
    assert!(db.store.list_mappings().await.unwrap().is_empty());
    let ok = key(&db, "admin", &["mappings"]).await;
    let (status, body) = srv
        .call(
            Method::POST,
            "/v1/proposals/decisions",
            Some(&ok),
            &json!({"ids": [id], "decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(db.store.list_mappings().await.unwrap().len(), 1);
}

/// 1,000 projects, each with a place of the same key.
async fn thousand(db: &TestDb) -> Vec<i64> {
    connection(&db.store, "bb").await;
    let projects: Vec<_> = (0..1000)
        .map(|i| project(i, &format!("K{i}"), &format!("Project {i}")))
        .collect();
    put(&db.store, &projects).await;
    let places: Vec<_> = (0..1000)
        .map(|i| {
            place(
                &format!("p{i}"),
                &format!("Place {i}"),
                Some(&format!("K{i}")),
            )
        })
        .collect();
    let srv = serve(db).await;
    let admin = key(db, "admin", &["mappings"]).await;
    let (status, body) = srv
        .call(Method::PUT, "/v1/places", Some(&admin), &json!(places))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["proposals"]["proposed"], 1000);
    proposals(&db.store, "proposed")
        .await
        .iter()
        .map(|p| p.id)
        .collect()
}

pub async fn bulk_approve_of_1000_writes_1000_mappings_and_audit_entries(db: TestDb) {
    let ids = thousand(&db).await;
    assert_eq!(ids.len(), 1000);
    let srv = serve(&db).await;
    let admin = key(&db, "admin", &["mappings"]).await;
    let audit_before = db.store.list_audit(100_000).await.unwrap().len();
    let (status, body) = srv
        .call(
            Method::POST,
            "/v1/proposals/decisions",
            Some(&admin),
            &json!({"ids": ids, "decision": "approve", "reason": "bulk: keys equal"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["decided"], 1000);
    assert_eq!(db.store.list_mappings().await.unwrap().len(), 1000);
    let audit = db.store.list_audit(100_000).await.unwrap();
    assert_eq!(audit.len() - audit_before, 1000);
    assert!(
        audit[..1000]
            .iter()
            .all(|a| a.action == "proposal.approve"
                && a.reason.as_deref() == Some("bulk: keys equal"))
    );
}

pub async fn bulk_with_one_invalid_item_leaves_nothing(db: TestDb) {
    let mut ids = thousand(&db).await;
    ids.push(987_654_321); // no such proposal
    let srv = serve(&db).await;
    let admin = key(&db, "admin", &["mappings"]).await;
    let audit_before = db.store.list_audit(100_000).await.unwrap().len();
    let (status, _) = srv
        .call(
            Method::POST,
            "/v1/proposals/decisions",
            Some(&admin),
            &json!({"ids": ids, "decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(db.store.list_mappings().await.unwrap().is_empty());
    assert_eq!(
        db.store.list_audit(100_000).await.unwrap().len(),
        audit_before
    );
    assert_eq!(proposals(&db.store, "proposed").await.len(), 1000);
}

pub async fn connection_disable_is_audited(db: TestDb) {
    connection(&db.store, "bb").await;
    let srv = serve(&db).await;
    let k = key(&db, "admin", &["connections"]).await;
    let (status, body) = srv
        .call(
            Method::POST,
            "/v1/connections/bb/status",
            Some(&k),
            &json!({"status": "disabled", "reason": "token leaked"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        db.store.get_connection("bb").await.unwrap().status,
        "disabled"
    );
    let (_, list) = srv
        .call(Method::GET, "/v1/connections", Some(&k), &Value::Null)
        .await;
    assert_eq!(list["items"][0]["connection"]["status"], "disabled");
    assert!(
        !list.to_string().contains("t0ken-for-tests"),
        "a token reached the API"
    );
    let audit = db.store.list_audit(1).await.unwrap();
    assert_eq!(audit[0].action, "connection.status");
    assert_eq!(audit[0].reason.as_deref(), Some("token leaked"));
    assert_eq!(audit[0].before.as_ref().unwrap()["status"], "enabled");
    let (status, log) = srv
        .call(Method::GET, "/v1/audit?limit=5", Some(&k), &Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(log["items"][0]["action"], "connection.status");
    assert_eq!(log["items"][0]["after"]["status"], "disabled");
}

pub async fn revoked_key_is_refused(db: TestDb) {
    let srv = serve(&db).await;
    let powers = vec!["mappings".to_owned()];
    let (row, secret) = create_key(&db.store, "temp", "admin", &powers, "test")
        .await
        .unwrap();
    let (status, _) = srv
        .call(Method::GET, "/v1/mappings", Some(&secret), &Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(db.store.revoke_api_key(&row.id, "test").await.unwrap());
    let (status, _) = srv
        .call(Method::GET, "/v1/mappings", Some(&secret), &Value::Null)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let stored = db.store.list_api_keys().await.unwrap();
    assert!(
        !format!("{stored:?}").contains(&secret),
        "the key itself is stored"
    );
}

pub async fn openapi_document_lists_the_routes(db: TestDb) {
    let srv = serve(&db).await;
    let (status, doc) = srv
        .call(Method::GET, "/v1/openapi.json", None, &Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    for (_, path, _) in routes() {
        let path = path.replace("/bb", "/{id}");
        assert!(
            doc["paths"].get(&path).is_some(),
            "{path} missing from the OpenAPI document"
        );
    }
}

pub async fn drift_report_has_a_line_per_connection(db: TestDb) {
    use cmcp_domain::{RunFigures, RunOutcome, RunTrigger, SpaceAddress, SpaceKind};
    use cmcp_registry::{DriftKind, SpaceChange};
    connection(&db.store, "bb").await;
    connection(&db.store, "quiet").await;
    let run = db
        .store
        .start_run("bb", RunTrigger::Reconcile, "w")
        .await
        .unwrap();
    let change = |n: &str, kind| SpaceChange {
        address: SpaceAddress::new(SpaceKind::GithubRepo, "github.com", n).unwrap(),
        kind,
    };
    let changes = [
        change("1", DriftKind::Created),
        change("2", DriftKind::Renamed),
        change("3", DriftKind::Renamed),
    ];
    db.store.record_drift("bb", &run, &changes).await.unwrap();
    db.store
        .finish_run(&run, RunOutcome::Complete, &RunFigures::default(), None)
        .await
        .unwrap();
    let srv = serve(&db).await;
    let k = key(&db, "admin", &["connections"]).await;
    let (status, body) = srv
        .call(Method::GET, "/v1/drift", Some(&k), &Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["connection_id"], "bb");
    assert_eq!(items[0]["missed"], 3);
    assert_eq!(items[0]["by_kind"]["renamed"], 2);
    assert_eq!(
        items[0]["summary"],
        "webhooks missed 3 changes last night: 1 new space, 2 renames"
    );
    assert_eq!(items[1]["summary"], "no reconcile has run yet");
    let (status, one) = srv
        .call(
            Method::GET,
            "/v1/drift?connection=quiet",
            Some(&k),
            &Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    let (status, _) = srv
        .call(
            Method::GET,
            "/v1/drift?connection=nope",
            Some(&k),
            &Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
