//! The OpenAPI document against the answers the server really gives. Every
//! test server checks each `/v1` answer against the document (see
//! `cmcp_admin::testing`); here every route is called for every status its
//! document lists, so no route, status or error body goes unchecked, and a
//! route added to the document without a call here fails
//! `every_documented_answer_is_given_and_fits`.

use std::collections::BTreeSet;

use cmcp_admin::testing::Contract;
use cmcp_admin::{create_key, create_key_for};
use cmcp_domain::{Owner, Platform, SpaceRecord};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, NewDelivery, Recorded, Store};
use reqwest::Method;
use serde_json::{Value, json};

use crate::api::{Server, serve};
use crate::support::{connection, connection_of, place, project, proposals, put, refresh, repo};

both_backends!(every_documented_answer_is_given_and_fits);

/// Answers no test in this suite can give, and where they are checked.
const GIVEN_ELSEWHERE: &[(&str, &str, u16)] = &[
    // Linking asks GitHub through the binary's linker; the suite has none.
    // `cmcp-discovery/tests/people_api.rs` checks it against the document.
    ("POST", "/v1/people/{person}/github", 201),
    // A replay queues a job in apalis's tables, which the worker's queue
    // set-up creates; `cmcp-tests`' `delivery_retries` replays end to end.
    ("POST", "/v1/deliveries/{id}/replay", 200),
];

/// One request of the table.
struct Call {
    method: Method,
    path: String,
    key: Option<String>,
    person: Option<&'static str>,
    body: Option<Value>,
    want: u16,
}

fn call(method: Method, path: impl Into<String>, key: Option<&str>, want: u16) -> Call {
    Call {
        method,
        path: path.into(),
        key: key.map(str::to_owned),
        person: None,
        body: None,
        want,
    }
}

impl Call {
    fn body(mut self, body: Value) -> Call {
        self.body = Some(body);
        self
    }

    fn person(mut self, person: &'static str) -> Call {
        self.person = Some(person);
        self
    }
}

async fn send(srv: &Server, c: &Call) -> (u16, Value) {
    let mut req = srv
        .http
        .request(c.method.clone(), format!("{}{}", srv.base, c.path));
    if let Some(k) = &c.key {
        req = req.bearer_auth(k);
    }
    if let Some(p) = c.person {
        req = req.header("X-CMCP-Person", p);
    }
    match &c.body {
        // A string is sent as it is, to reach the body's own refusals.
        Some(Value::String(raw)) => req = req.body(raw.clone()),
        Some(b) => req = req.json(b),
        None => {}
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn delivery(store: &Store, key: &str, status: DeliveryStatus) -> String {
    let recorded = store
        .record_delivery(&NewDelivery {
            connection_id: "bb".into(),
            platform: Platform::Bitbucket,
            delivery_key: key.into(),
            event: "repo:updated".into(),
            headers: vec![("X-Event-Key".into(), "repo:updated".into())],
            body: b"{}".to_vec(),
            verification: "hmac-sha256".into(),
            status,
            error: Some("upstream down".into()),
            replay_key: None,
        })
        .await
        .unwrap();
    let Recorded::Stored { id, .. } = recorded else {
        panic!("stored");
    };
    id
}

/// Two projects, a repo name both hold (ambiguous), a proposal, a failed
/// delivery and alice's linked connection.
async fn seed(store: &Store) -> (i64, String) {
    connection(store, "bb").await;
    connection_of(store, "bb-alice", Owner::Person("alice".into())).await;
    let pay = project(1, "PAY", "Payments");
    let ops = project(2, "OPS", "Operations");
    put(
        store,
        &[
            pay.clone(),
            ops.clone(),
            repo(1, &pay, "billing", "git@bitbucket.org:acme/billing.git"),
            repo(2, &ops, "billing", "git@bitbucket.org:acme/ops-billing.git"),
        ],
    )
    .await;
    // Alice's private mirror of the billing repo (a suggestion once PAY is
    // mapped) and her notes (nothing matches: she may ask for a project).
    let private: Vec<SpaceRecord> = [
        repo(
            3,
            &pay,
            "billing-mirror",
            "git@bitbucket.org:acme/billing.git",
        ),
        repo(4, &pay, "notes", "git@bitbucket.org:alice/notes.git"),
    ]
    .into_iter()
    .map(|r| SpaceRecord {
        container: None,
        ..r
    })
    .collect();
    store
        .apply_page("bb-alice", &Owner::Person("alice".into()), &private)
        .await
        .unwrap();
    store
        .put_places(&[place("payments", "Payments", Some("PAY"))], "test")
        .await
        .unwrap();
    refresh(store).await;
    let proposal = proposals(store, "proposed").await[0].id;
    (
        proposal,
        delivery(store, "k1", DeliveryStatus::Failed).await,
    )
}

pub async fn every_documented_answer_is_given_and_fits(db: TestDb) {
    let (proposal, failed) = seed(&db.store).await;
    let ignored = delivery(&db.store, "k2", DeliveryStatus::Ignored).await;
    let powers = ["mappings".to_owned(), "connections".to_owned()];
    let admin = create_key(&db.store, "ops", "admin", &powers, "t")
        .await
        .unwrap()
        .1;
    let service = create_key(&db.store, "cmcp", "service", &[], "t")
        .await
        .unwrap()
        .1;
    let bob = create_key_for(&db.store, "bob", "member", &[], Some("bob"), "t")
        .await
        .unwrap()
        .1;
    let (a, s, b) = (
        Some(admin.as_str()),
        Some(service.as_str()),
        Some(bob.as_str()),
    );
    let resolve = |f: &str| format!("/v1/spaces/resolve?fingerprint={f}");
    use Method as M;
    let calls = vec![
        call(M::GET, "/v1/proposals?state=proposed", a, 200),
        call(M::GET, "/v1/proposals?state=bogus", a, 400),
        call(M::GET, "/v1/proposals?limit=many", a, 400),
        call(M::GET, "/v1/proposals", b, 403),
        call(M::POST, "/v1/proposals/decisions", a, 200)
            .body(json!({"ids": [proposal], "decision": "approve"})),
        call(M::POST, "/v1/proposals/decisions", a, 400)
            .body(json!({"ids": [], "decision": "approve"})),
        call(M::POST, "/v1/proposals/decisions", a, 400).body(json!("not json")),
        call(M::POST, "/v1/proposals/decisions", a, 404)
            .body(json!({"ids": [9_999_999], "decision": "approve"})),
        call(M::POST, "/v1/proposals/decisions", b, 403).body(json!({"ids": []})),
        call(M::GET, "/v1/mappings", a, 200),
        call(M::GET, "/v1/mappings", b, 403),
        call(M::PUT, "/v1/places", a, 200)
            .body(json!([{"id": "payments", "kind": "project", "name": "Payments", "key": "PAY"}])),
        call(M::PUT, "/v1/places", a, 400).body(json!({"id": "not a list"})),
        call(M::PUT, "/v1/places", b, 403).body(json!([])),
        call(M::GET, "/v1/connections", a, 200),
        call(M::GET, "/v1/connections", b, 403),
        call(M::POST, "/v1/connections/bb/status", a, 200)
            .body(json!({"status": "disabled", "reason": "t"})),
        call(M::POST, "/v1/connections/bb/status", a, 400).body(json!({"status": "paused"})),
        call(M::POST, "/v1/connections/bb/status", a, 400),
        call(M::POST, "/v1/connections/nope/status", a, 404).body(json!({"status": "enabled"})),
        call(M::POST, "/v1/connections/bb/status", b, 403).body(json!({"status": "enabled"})),
        call(M::GET, "/v1/audit?limit=5", a, 200),
        call(M::GET, "/v1/audit?limit=x", a, 400),
        call(M::GET, "/v1/audit", b, 403),
        call(M::GET, "/v1/drift", a, 200),
        call(M::GET, "/v1/drift?connection=bb&connection=bb", a, 400),
        call(M::GET, "/v1/drift?connection=nope", a, 404),
        call(M::GET, "/v1/drift", b, 403),
        call(M::GET, "/v1/deliveries?state=failed", a, 200),
        call(M::GET, "/v1/deliveries?state=lost", a, 400),
        call(M::GET, "/v1/deliveries", b, 403),
        call(M::GET, format!("/v1/deliveries/{failed}"), a, 200),
        call(M::GET, "/v1/deliveries/nope", a, 404),
        call(M::GET, format!("/v1/deliveries/{failed}"), b, 403),
        call(M::POST, format!("/v1/deliveries/{ignored}/replay"), a, 400)
            .body(json!({"reason": "try"})),
        call(M::POST, "/v1/deliveries/nope/replay", a, 404),
        call(M::POST, format!("/v1/deliveries/{failed}/replay"), b, 403),
        call(M::GET, resolve("PAY"), s, 200),
        call(M::GET, "/v1/spaces/resolve", s, 400),
        call(M::GET, resolve("nothing-here"), s, 404),
        call(M::GET, resolve("billing"), s, 409),
        call(M::GET, resolve("PAY"), b, 403).person("alice"),
        call(M::GET, "/v1/people/alice/manifest", s, 200),
        call(M::GET, "/v1/people/alice/manifest?since=x", s, 400),
        call(M::GET, "/v1/people/alice/manifest", b, 403),
        call(M::GET, "/v1/changes?after=0&limit=3", s, 200).person("alice"),
        call(M::GET, "/v1/changes?limit=0", s, 400),
        call(M::GET, "/v1/changes", b, 403).person("alice"),
    ];
    let srv = serve(&db).await;
    let contract: &Contract = &srv.contract;
    for c in &calls {
        let (status, body) = send(&srv, c).await;
        assert_eq!(status, c.want, "{} {}: {body}", c.method, c.path);
    }
    // The approval and the places import above made alice's suggestion (her
    // mirror to the mapped Payments place); answer it before she unlinks.
    let suggestion = db
        .store
        .list_suggestions("alice")
        .await
        .unwrap()
        .first()
        .map(|s| s.id)
        .expect("alice's mirror is suggested once PAY is mapped");
    let alice = create_key_for(&db.store, "alice", "member", &[], Some("alice"), "t")
        .await
        .unwrap()
        .1;
    let al = Some(alice.as_str());
    let decide = format!("/v1/people/alice/suggestions/{suggestion}");
    // Retention prunes the whole feed: a cursor from before it is gone.
    let now = chrono::Utc::now().timestamp_millis();
    let pruned = db.store.prune_changes(now + 1).await.unwrap();
    assert!(pruned > 0);
    let mut calls = vec![
        call(M::GET, "/v1/changes?after=0", s, 410).person("alice"),
        call(M::GET, "/v1/people/alice/suggestions", al, 200),
        call(M::GET, "/v1/people/alice/suggestions", b, 403),
        call(M::POST, decide.as_str(), al, 400).body(json!({"decision": "maybe"})),
        call(M::POST, decide.as_str(), b, 403).body(json!({"decision": "accept"})),
        call(M::POST, "/v1/people/alice/suggestions/9999999", al, 404)
            .body(json!({"decision": "accept"})),
        call(M::POST, decide.as_str(), al, 200).body(json!({"decision": "accept"})),
        call(M::POST, "/v1/people/alice/requests", al, 201)
            .body(json!({"space": "space:bitbucket-repo:acme/r-4", "name": "Notes"})),
        call(M::POST, "/v1/people/alice/requests", al, 400)
            .body(json!({"space": "space:bitbucket-repo:acme/r-3"})),
        call(M::POST, "/v1/people/bob/requests", b, 404)
            .body(json!({"space": "space:bitbucket-repo:acme/r-4"})),
        call(M::POST, "/v1/people/alice/requests", b, 403)
            .body(json!({"space": "space:bitbucket-repo:acme/r-4"})),
        call(M::GET, "/v1/requests", a, 200),
        call(M::GET, "/v1/requests", b, 403),
        call(M::POST, "/v1/people/alice/github", s, 400).body(json!({"token": ""})),
        call(M::POST, "/v1/people/alice/github", s, 400).body(json!({"token": "x", "scopes": []})),
        call(M::POST, "/v1/people/alice/github", b, 403).body(json!({"token": "x"})),
        // The suite's state has no linker: the server's own fault.
        call(M::POST, "/v1/people/alice/github", s, 500).body(json!({"token": "ghp_x"})),
        call(M::GET, "/v1/people/alice/accounts", s, 200),
        call(M::GET, "/v1/people/%01/accounts", s, 400),
        call(M::GET, "/v1/people/alice/accounts", b, 403),
        call(M::DELETE, "/v1/people/alice/accounts/bb-alice", s, 200),
        call(M::DELETE, "/v1/people/%01/accounts/bb-alice", s, 400),
        call(M::DELETE, "/v1/people/alice/accounts/bb", s, 404),
        call(M::DELETE, "/v1/people/alice/accounts/bb-alice", b, 403),
    ];
    // Every route refuses a missing key, and fails inside when the store is
    // gone; both with the documented error body.
    let routes: Vec<(String, String)> = contract.operations().into_keys().collect();
    // A path of each template: known parameters by name, any other "x".
    let concrete = |t: &str| {
        let segment = |s: &str| match s {
            "{person}" => "alice".to_owned(),
            "{connection}" => "bb-alice".to_owned(),
            "{id}" => "bb".to_owned(),
            s if s.starts_with('{') => "x".to_owned(),
            s => s.to_owned(),
        };
        t.split('/').map(segment).collect::<Vec<_>>().join("/")
    };
    for (method, template) in &routes {
        let m: Method = method.parse().unwrap();
        calls.push(call(m, concrete(template), None, 401));
    }
    for c in &calls {
        let (status, body) = send(&srv, c).await;
        assert_eq!(status, c.want, "{} {}: {body}", c.method, c.path);
    }
    // A store that fails inside (the keys' table is gone): a 500 that
    // says nothing of why.
    let rename = "ALTER TABLE api_keys RENAME TO api_keys_gone";
    match &db.store {
        Store::Sqlite(pool) => sqlx::query(rename).execute(pool).await.map(drop),
        Store::Postgres(pool) => sqlx::query(rename).execute(pool).await.map(drop),
    }
    .unwrap();
    for (method, template) in &routes {
        let c = call(method.parse().unwrap(), concrete(template), a, 500);
        let (status, body) = send(&srv, &c).await;
        assert_eq!(
            status, 500,
            "{method} {template} with the keys' table gone: {body}"
        );
        assert_eq!(body, json!({"error": "internal error"}));
    }
    // A store that cannot be reached (its pool closed): a 503, try again.
    db.store.close().await;
    for (method, template) in &routes {
        let c = call(method.parse().unwrap(), concrete(template), a, 503);
        let (status, body) = send(&srv, &c).await;
        assert_eq!(
            status, 503,
            "{method} {template} with the store closed: {body}"
        );
        assert_eq!(
            body,
            json!({"error": "the registry is busy or unreachable; try again shortly"})
        );
    }
    let seen = contract.seen();
    let mut missing = BTreeSet::new();
    for ((method, template), statuses) in contract.operations() {
        for status in statuses {
            let elsewhere = GIVEN_ELSEWHERE.contains(&(method.as_str(), template.as_str(), status));
            if !elsewhere && !seen.contains(&(method.clone(), template.clone(), status)) {
                missing.insert(format!("{method} {template} {status}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented answers no call gave: {missing:?}"
    );
    // The checker itself refuses what the document does not say.
    let probe = Contract::of_this_api();
    let ok = |m: &Method, p: &str, s: u16, b: &Value| {
        probe.check(m, p, s, b.to_string().as_bytes()).is_empty()
    };
    let error = json!({"error": "x"});
    assert!(ok(&M::GET, "/v1/mappings", 403, &error));
    assert!(
        !ok(&M::GET, "/v1/mappings", 409, &error),
        "an undocumented status"
    );
    assert!(
        !ok(&M::GET, "/v1/nowhere", 404, &error),
        "an undocumented route"
    );
    assert!(
        !ok(&M::PATCH, "/v1/mappings", 200, &error),
        "an undocumented method"
    );
    let extra = json!({"error": "x", "extra": 1});
    assert!(
        !ok(&M::GET, "/v1/mappings", 403, &extra),
        "a field it lacks"
    );
    let renamed = json!({"message": "x"});
    assert!(
        !ok(&M::GET, "/v1/mappings", 403, &renamed),
        "a required field gone"
    );
    let partial = json!({"items": [{"place_id": "p"}]});
    assert!(
        !ok(&M::GET, "/v1/mappings", 200, &partial),
        "an item's fields gone"
    );
    let typed = json!({"items": "none"});
    assert!(!ok(&M::GET, "/v1/mappings", 200, &typed), "a wrong type");
}
