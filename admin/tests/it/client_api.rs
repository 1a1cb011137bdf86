//! The routes cMCP calls, over real HTTP: who is asking (401, 403, the
//! person header), resolve (200, 404, 409, the mapped place), the manifest
//! and the change feed, each isolated per person; and every answer checked
//! against the OpenAPI document.

use cmcp_admin::{create_key, create_key_for};
use cmcp_domain::Owner;
use cmcp_registry::testing::{TestDb, settle_changes};
use cmcp_registry::{Decision, Store};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::api::{Server, serve, serve_with};
use crate::support::{connection, connection_of, place, project, proposals, put, refresh, repo};
use cmcp_admin::testing::{response_schema, violations};

both_backends!(
    cmcp_routes_answer_401_without_a_valid_key,
    a_member_key_may_not_name_another_person,
    a_private_space_is_seen_only_by_its_person,
    resolve_answers_the_space_its_place_and_how_it_matched,
    the_feed_over_http_gives_every_change_once,
    answers_match_the_openapi_document,
    a_cached_key_is_forgotten_when_any_process_revokes_it,
    a_registry_with_no_free_connection_answers_503_with_retry_after,
);

const ALICE_REMOTE: &str = "git@bitbucket.org:alice/notes.git";

async fn get(
    srv: &Server,
    path: &str,
    key: Option<&str>,
    person: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = srv.http.request(Method::GET, format!("{}{path}", srv.base));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(p) = person {
        req = req.header("X-CMCP-Person", p);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn key(store: &Store, role: &str) -> String {
    let powers: Vec<String> = if role == "admin" {
        vec!["mappings".into()]
    } else {
        vec![]
    };
    create_key(store, &format!("{role} key"), role, &powers, "test")
        .await
        .unwrap()
        .1
}

async fn member_of(store: &Store, person: &str) -> String {
    create_key_for(store, person, "member", &[], Some(person), "test")
        .await
        .unwrap()
        .1
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A company project with a repo, and alice's private repo.
async fn seed(store: &Store) {
    connection(store, "bb").await;
    let alice = Owner::Person("alice".into());
    connection_of(store, "bb-alice", alice.clone()).await;
    let pay = project(1, "PAY", "Payments");
    put(
        store,
        &[
            pay.clone(),
            repo(1, &pay, "billing", "git@bitbucket.org:acme/billing.git"),
        ],
    )
    .await;
    let notes = repo(2, &pay, "notes", ALICE_REMOTE);
    store
        .apply_page(
            "bb-alice",
            &alice,
            &[cmcp_domain::SpaceRecord {
                container: None,
                ..notes
            }],
        )
        .await
        .unwrap();
}

fn routes() -> Vec<String> {
    vec![
        format!("/v1/spaces/resolve?fingerprint={}", enc(ALICE_REMOTE)),
        "/v1/people/alice/manifest".to_owned(),
        "/v1/changes?after=0".to_owned(),
    ]
}

async fn cmcp_routes_answer_401_without_a_valid_key(db: TestDb) {
    let srv = serve(&db).await;
    let (_, secret) = create_key(&db.store, "gone", "service", &[], "t")
        .await
        .unwrap();
    let row = db.store.list_api_keys().await.unwrap().pop().unwrap();
    db.store.revoke_api_key(&row.id, "t").await.unwrap();
    for path in routes() {
        for k in [None, Some("cmcp_not_a_key"), Some(secret.as_str())] {
            let (status, body) = get(&srv, &path, k, Some("alice")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with {k:?}");
            assert!(body["error"].is_string());
        }
    }
}

async fn a_member_key_may_not_name_another_person(db: TestDb) {
    seed(&db.store).await;
    let srv = serve(&db).await;
    let bob = member_of(&db.store, "bob").await;
    for path in routes() {
        let (status, _) = get(&srv, &path, Some(&bob), Some("alice")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    // The manifest names its person in the path.
    let (status, _) = get(&srv, "/v1/people/alice/manifest", Some(&bob), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let service = key(&db.store, "service").await;
    let (status, _) = get(
        &srv,
        "/v1/people/alice/manifest",
        Some(&service),
        Some("bob"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Its own person, named or not, is fine.
    for named in [None, Some("bob")] {
        let (status, _) = get(&srv, "/v1/people/bob/manifest", Some(&bob), named).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _) = get(&srv, "/v1/changes", Some(&service), Some("")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn a_private_space_is_seen_only_by_its_person(db: TestDb) {
    seed(&db.store).await;
    settle_changes(&db.store).await;
    let srv = serve(&db).await;
    let service = key(&db.store, "service").await;
    let admin = key(&db.store, "admin").await;
    let alice_member = member_of(&db.store, "alice").await;
    let resolve = format!("/v1/spaces/resolve?fingerprint={}", enc(ALICE_REMOTE));
    let alice_addr = "space:bitbucket-repo:acme/r-2";
    // Who sees alice's space: the service for alice, alice's own key, an
    // admin naming alice.
    for (k, p) in [
        (&service, Some("alice")),
        (&alice_member, None),
        (&admin, Some("alice")),
    ] {
        let (status, body) = get(&srv, &resolve, Some(k), p).await;
        assert_eq!(status, StatusCode::OK, "{p:?}");
        assert_eq!(body["space"]["address"], alice_addr);
        assert_eq!(body["space"]["owner"], "person");
    }
    // Who does not: another person, the company view (no person).
    for (k, p) in [(&service, Some("bob")), (&service, None), (&admin, None)] {
        let (status, _) = get(&srv, &resolve, Some(k), p).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{p:?}");
    }
    let has = |body: &Value, list: &str| {
        body[list]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["address"] == alice_addr)
    };
    let (_, m) = get(&srv, "/v1/people/alice/manifest", Some(&service), None).await;
    assert!(has(&m, "spaces"));
    assert!(
        m["spaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["address"] == "space:bitbucket-repo:acme/r-1")
    );
    let (_, m) = get(&srv, "/v1/people/bob/manifest", Some(&service), None).await;
    assert!(!has(&m, "spaces"));
    let (_, feed) = get(
        &srv,
        "/v1/changes?limit=10000",
        Some(&service),
        Some("alice"),
    )
    .await;
    assert!(has(&feed, "changes"));
    for p in [Some("bob"), None] {
        let (_, feed) = get(&srv, "/v1/changes?limit=10000", Some(&service), p).await;
        assert!(!has(&feed, "changes"), "{p:?}");
        assert!(!feed["changes"].as_array().unwrap().is_empty());
    }
}

async fn resolve_answers_the_space_its_place_and_how_it_matched(db: TestDb) {
    seed(&db.store).await;
    db.store
        .put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(&db.store).await;
    let ids: Vec<i64> = proposals(&db.store, "proposed")
        .await
        .iter()
        .map(|p| p.id)
        .collect();
    db.store
        .decide_proposals(&ids, Decision::Approve, "admin", None)
        .await
        .unwrap();
    let srv = serve(&db).await;
    let service = key(&db.store, "service").await;
    let path = format!(
        "/v1/spaces/resolve?fingerprint={}",
        enc("https://bitbucket.org/acme/billing.git")
    );
    let (status, body) = get(&srv, &path, Some(&service), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["space"]["address"], "space:bitbucket-repo:acme/r-1");
    assert_eq!(body["space"]["place"]["id"], "pay");
    assert_eq!(
        body["space"]["place"]["via"],
        "space:bitbucket-project:acme/p-1"
    );
    assert_eq!(body["match"]["rank"], "url");
    assert_eq!(body["match"]["alias_kind"], "git-remote");
    assert_eq!(body["match"]["retired"], false);
    let (status, _) = get(
        &srv,
        "/v1/spaces/resolve?fingerprint=nothing-like-it",
        Some(&service),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A second project keyed PAY: the key is ambiguous, both are listed.
    put(&db.store, &[project(3, "PAY", "Payments EU")]).await;
    let (status, body) = get(
        &srv,
        "/v1/spaces/resolve?fingerprint=PAY",
        Some(&service),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["candidates"].as_array().unwrap().len(), 2);
    assert!(body["error"].is_string());
    let (status, _) = get(
        &srv,
        "/v1/spaces/resolve?fingerprint=",
        Some(&service),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn the_feed_over_http_gives_every_change_once(db: TestDb) {
    seed(&db.store).await;
    let srv = serve(&db).await;
    let service = key(&db.store, "service").await;
    let pay = project(1, "PAY", "Payments");
    put(
        &db.store,
        &[repo(
            1,
            &pay,
            "billing-v2",
            "git@bitbucket.org:acme/billing-v2.git",
        )],
    )
    .await;
    settle_changes(&db.store).await;
    let mut after = "0".to_owned();
    let mut cursors = Vec::new();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    loop {
        let (status, page) = get(
            &srv,
            &format!("/v1/changes?after={after}&limit=2"),
            Some(&service),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        for c in page["changes"].as_array().unwrap() {
            cursors.push(c["cursor"].as_str().unwrap().to_owned());
            *kinds
                .entry(c["kind"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        let next = page["next"].as_str().unwrap().to_owned();
        if next == after {
            break;
        }
        after = next;
    }
    let unique: std::collections::HashSet<&String> = cursors.iter().collect();
    assert_eq!(unique.len(), cursors.len());
    // Company view: the project and the repo (alice's are filtered).
    assert_eq!(kinds.get("space-created"), Some(&2), "{kinds:?}");
    assert_eq!(kinds.get("alias-retired"), Some(&2), "{kinds:?}");
    let (status, _) = get(&srv, "/v1/changes?after=banana", Some(&service), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get(&srv, "/v1/changes?limit=0", Some(&service), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A documented path, the request path, key, person and expected status.
type Call<'a> = (&'a str, String, Option<&'a str>, Option<&'a str>, u16);

async fn answers_match_the_openapi_document(db: TestDb) {
    seed(&db.store).await;
    put(&db.store, &[project(3, "PAY", "Payments EU")]).await;
    settle_changes(&db.store).await;
    let srv = serve(&db).await;
    let service = key(&db.store, "service").await;
    let bob = member_of(&db.store, "bob").await;
    let (_, doc) = get(&srv, "/v1/openapi.json", None, None).await;
    let (_, first) = get(&srv, "/v1/people/alice/manifest", Some(&service), None).await;
    let since = first["version"].as_str().unwrap().to_owned();
    let resolve = "/v1/spaces/resolve";
    let manifest = "/v1/people/{person}/manifest";
    let changes = "/v1/changes";
    let calls: Vec<Call> = vec![
        (
            resolve,
            format!("{resolve}?fingerprint={}", enc(ALICE_REMOTE)),
            Some(&service),
            Some("alice"),
            200,
        ),
        (
            resolve,
            format!("{resolve}?fingerprint=PAY"),
            Some(&service),
            None,
            409,
        ),
        (
            resolve,
            format!("{resolve}?fingerprint=none"),
            Some(&service),
            None,
            404,
        ),
        (
            resolve,
            format!("{resolve}?fingerprint="),
            Some(&service),
            None,
            400,
        ),
        (
            resolve,
            format!("{resolve}?fingerprint=PAY"),
            None,
            None,
            401,
        ),
        (
            resolve,
            format!("{resolve}?fingerprint=PAY"),
            Some(&bob),
            Some("alice"),
            403,
        ),
        (
            manifest,
            "/v1/people/alice/manifest".to_owned(),
            Some(&service),
            None,
            200,
        ),
        (
            manifest,
            format!("/v1/people/alice/manifest?since={since}"),
            Some(&service),
            None,
            200,
        ),
        (
            manifest,
            "/v1/people/alice/manifest?since=x".to_owned(),
            Some(&service),
            None,
            400,
        ),
        (
            manifest,
            "/v1/people/alice/manifest".to_owned(),
            None,
            None,
            401,
        ),
        (
            manifest,
            "/v1/people/alice/manifest".to_owned(),
            Some(&bob),
            None,
            403,
        ),
        (
            changes,
            "/v1/changes?after=0&limit=5".to_owned(),
            Some(&service),
            Some("alice"),
            200,
        ),
        (
            changes,
            "/v1/changes?after=nope".to_owned(),
            Some(&service),
            None,
            400,
        ),
        (changes, "/v1/changes".to_owned(), None, None, 401),
        (
            changes,
            "/v1/changes".to_owned(),
            Some(&bob),
            Some("alice"),
            403,
        ),
    ];
    // The checker itself refuses what the document does not say.
    let error = response_schema(&doc, "get", changes, 401);
    assert!(
        !violations(
            &doc,
            error,
            &serde_json::json!({"error": "x", "extra": 1}),
            "$"
        )
        .is_empty()
    );
    assert!(!violations(&doc, error, &serde_json::json!({"message": "x"}), "$").is_empty());
    for (template, path, k, p, want) in calls {
        let (status, body) = get(&srv, &path, k, p).await;
        assert_eq!(status.as_u16(), want, "{path}: {body}");
        let schema = response_schema(&doc, "get", template, want);
        let wrong = violations(&doc, schema, &body, "$");
        assert!(
            wrong.is_empty(),
            "{path} ({want}) breaks the document: {wrong:?}"
        );
    }
}

/// The key cache answers keys from memory only while revocations are
/// heard: on PostgreSQL a revoke committed by anyone (here the store, as
/// the CLI would) empties it at once, and so does losing the listener's
/// connection; SQLite never caches.
async fn a_cached_key_is_forgotten_when_any_process_revokes_it(db: TestDb) {
    // An hour: only the announcement can explain a refusal within seconds.
    let state = cmcp_admin::AdminState::new(db.store.clone())
        .with_key_cache(std::time::Duration::from_secs(3600));
    let cache = state.keys.clone().unwrap();
    let srv = serve_with(state).await;
    let (row, secret) = create_key(&db.store, "svc", "service", &[], "t")
        .await
        .unwrap();
    let path = "/v1/changes?after=0";
    // Polls until `secret` gets `want`.
    let until = |secret: &str, want: StatusCode| {
        let (srv, secret) = (&srv, secret.to_owned());
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let (status, body) = get(srv, path, Some(&secret), None).await;
                if status == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "still {status} {body}, want {want}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    let pg = match &db.store {
        Store::Sqlite(_) => None,
        Store::Postgres(pool) => Some(pool.clone()),
    };
    let Some(pool) = pg else {
        // Never live on SQLite: a revoke is refused on the next call.
        assert!(!cache.is_live());
        until(&secret, StatusCode::OK).await;
        db.store.revoke_api_key(&row.id, "t").await.unwrap();
        let (status, _) = get(&srv, path, Some(&secret), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        return;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cache.is_live() {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never subscribed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    until(&secret, StatusCode::OK).await;
    // The cache is really answering: with the announcement switched off,
    // a revoked key still gets in.
    sqlx::query("ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed")
        .execute(&pool)
        .await
        .unwrap();
    db.store.revoke_api_key(&row.id, "t").await.unwrap();
    let (status, _) = get(&srv, path, Some(&secret), None).await;
    assert_eq!(status, StatusCode::OK, "answered from memory");
    // The announcement (what the trigger sends on every revoke) empties it.
    sqlx::query("ALTER TABLE api_keys ENABLE TRIGGER api_keys_changed")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("SELECT pg_notify('cmcp_api_keys', '')")
        .execute(&pool)
        .await
        .unwrap();
    until(&secret, StatusCode::UNAUTHORIZED).await;

    // A second key, revoked with the trigger on: refused within moments.
    let (row, secret) = create_key(&db.store, "svc2", "service", &[], "t")
        .await
        .unwrap();
    let (status, _) = get(&srv, path, Some(&secret), None).await;
    assert_eq!(status, StatusCode::OK);
    db.store.revoke_api_key(&row.id, "t").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _) = get(&srv, path, Some(&secret), None).await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a revoked key kept working"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    // The listener's connection drops (a failover, a restart, an idle
    // cut): what was announced meanwhile is unknown, so the cache empties
    // and reads the store until it listens again. Here the revoke is made
    // unheard (trigger off), so only the drop can explain the refusal.
    let (row, secret) = create_key(&db.store, "svc3", "service", &[], "t")
        .await
        .unwrap();
    until(&secret, StatusCode::OK).await;
    sqlx::query("ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed")
        .execute(&pool)
        .await
        .unwrap();
    db.store.revoke_api_key(&row.id, "t").await.unwrap();
    let (status, _) = get(&srv, path, Some(&secret), None).await;
    assert_eq!(status, StatusCode::OK, "answered from memory");
    let (cut,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%') t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(cut, 1, "one listener to cut");
    // It goes dark (bypassed) until it has listened again a moment later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cache.is_live() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cache kept answering after its listener was cut"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    until(&secret, StatusCode::UNAUTHORIZED).await;
    // It comes back, and what it dropped stays dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cache.is_live() {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, _) = get(&srv, path, Some(&secret), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A store whose every connection is taken answers `503` with
/// `Retry-After` (documented for every route), not a `500`: the same call
/// works once a connection is free again. On a SQLite file the key check
/// and resolve are read inline, beside the pool, so they still answer.
async fn a_registry_with_no_free_connection_answers_503_with_retry_after(db: TestDb) {
    seed(&db.store).await;
    let service = key(&db.store, "service").await;
    let small = cmcp_registry::StoreOptions {
        max_connections: 2,
        connect_timeout: std::time::Duration::from_secs(1),
        ..cmcp_registry::StoreOptions::default()
    };
    let store = Store::connect(&db.url, &small).await.unwrap();
    let srv = serve_with(cmcp_admin::AdminState::new(store.clone())).await;
    let path = "/v1/changes?after=0&limit=10".to_owned();
    let resolve = format!("/v1/spaces/resolve?fingerprint={}", enc("PAY"));
    macro_rules! hold_all {
        ($pool:expr) => {{
            let mut held = Vec::new();
            for _ in 0..2 {
                held.push($pool.acquire().await.unwrap());
            }
            let resp = srv
                .http
                .get(format!("{}{path}", srv.base))
                .bearer_auth(&service)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let retry = resp.headers().get("retry-after").cloned();
            let body: Value = resp.json().await.unwrap();
            let (resolved, _) = get(&srv, &resolve, Some(&service), None).await;
            drop(held);
            (status, retry, body, resolved)
        }};
    }
    let (status, retry, body, resolved) = match &store {
        Store::Sqlite(pool) => hold_all!(pool),
        Store::Postgres(pool) => hold_all!(pool),
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry.as_ref().and_then(|v| v.to_str().ok()), Some("1"));
    assert!(
        body["error"].as_str().unwrap().contains("try again"),
        "{body}"
    );
    let inline = matches!(store, Store::Sqlite(_));
    let want = if inline {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    assert_eq!(resolved, want, "resolve while the pool is held");
    let (status, body) = get(&srv, &resolve, Some(&service), None).await;
    assert_eq!(status, StatusCode::OK, "works again: {body}");
    let (status, body) = get(&srv, &path, Some(&service), None).await;
    assert_eq!(status, StatusCode::OK, "works again: {body}");
}
