//! A person's suggestions over real HTTP: only that person (or a service
//! naming them) lists and answers them, answers are audited and checked
//! against the OpenAPI document, a declined one comes back only with new
//! evidence, an accepted link shows in the manifest, and requests reach
//! the ADMINs alone.

use cmcp_admin::{create_key, create_key_for};
use cmcp_domain::{Owner, SpaceRecord};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Decision, Store};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Server, serve};
use crate::support::{connection, connection_of, project, proposals, put, refresh, repo};
use cmcp_admin::testing::{response_schema, violations};

both_backends!(
    suggestions_are_the_persons_alone_and_answers_are_audited,
    requests_reach_the_admins_alone,
    an_admins_decision_reaches_the_persons_suggestions_at_once,
    an_import_refreshes_everyone_when_one_persons_refresh_fails,
);

/// The company's Payments project (proposed for place `pay`) with its
/// repo; alice's mirror of that repo (same remote) and her notes.
async fn unmapped(store: &Store) {
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
    let mirror = repo(
        2,
        &pay,
        "billing-mirror",
        "git@bitbucket.org:acme/billing.git",
    );
    let notes = repo(3, &pay, "notes", "git@bitbucket.org:alice/notes.git");
    let private: Vec<SpaceRecord> = [mirror, notes]
        .into_iter()
        .map(|r| SpaceRecord {
            container: None,
            ..r
        })
        .collect();
    store
        .apply_page("bb-alice", &alice, &private)
        .await
        .unwrap();
    store
        .put_places(
            &[crate::support::place("pay", "Payments", Some("PAY"))],
            "t",
        )
        .await
        .unwrap();
    refresh(store).await;
}

/// [`unmapped`], then the Payments project approved for `pay`, and alice's
/// suggestions refreshed.
pub async fn seed(store: &Store) {
    unmapped(store).await;
    store
        .decide_proposals(
            &payments_proposals(store).await,
            Decision::Approve,
            "admin",
            None,
        )
        .await
        .unwrap();
    cmcp_matching::refresh_suggestions(store, "alice")
        .await
        .unwrap();
}

/// The open proposals of the Payments project.
async fn payments_proposals(store: &Store) -> Vec<i64> {
    proposals(store, "proposed")
        .await
        .iter()
        .filter(|p| p.container.to_string() == "space:bitbucket-project:acme/p-1")
        .map(|p| p.id)
        .collect()
}

async fn call(
    srv: &Server,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = srv
        .http
        .request(method, format!("{}{path}", srv.base))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Calls and checks the answer against the document's schema for it.
async fn checked(
    srv: &Server,
    doc: &Value,
    (method, template): (Method, &str),
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, answer) = call(srv, method.clone(), path, key, body).await;
    let schema = response_schema(
        doc,
        &method.as_str().to_lowercase(),
        template,
        status.as_u16(),
    );
    let wrong = violations(doc, schema, &answer, "$");
    assert!(wrong.is_empty(), "{path} ({status}): {wrong:?} in {answer}");
    (status, answer)
}

async fn member(store: &Store, person: &str) -> String {
    create_key_for(store, person, "member", &[], Some(person), "test")
        .await
        .unwrap()
        .1
}

async fn admin(store: &Store) -> String {
    create_key(store, "admin", "admin", &["mappings".to_owned()], "test")
        .await
        .unwrap()
        .1
}

const LIST: &str = "/v1/people/{person}/suggestions";
const DECIDE: &str = "/v1/people/{person}/suggestions/{id}";
const REQUESTS: &str = "/v1/people/{person}/requests";

async fn suggestions_are_the_persons_alone_and_answers_are_audited(db: TestDb) {
    seed(&db.store).await;
    let srv = serve(&db).await;
    let alice = member(&db.store, "alice").await;
    let bob = member(&db.store, "bob").await;
    let admin = admin(&db.store).await;
    let doc = call(&srv, Method::GET, "/v1/openapi.json", &alice, None)
        .await
        .1;
    let get = (Method::GET, LIST);
    let post = (Method::POST, DECIDE);

    let (status, list) = checked(
        &srv,
        &doc,
        get.clone(),
        "/v1/people/alice/suggestions",
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let items = list.as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    let s = &items[0];
    assert_eq!(
        (
            s["kind"].as_str(),
            s["state"].as_str(),
            s["place_id"].as_str()
        ),
        (Some("request-to-join"), Some("open"), Some("pay"))
    );
    assert_eq!(s["space"], "space:bitbucket-repo:acme/r-2");
    assert_eq!(s["evidence"][0]["kind"], "same-fingerprint");
    let id = s["id"].as_i64().unwrap();
    let (status, _) = checked(
        &srv,
        &doc,
        get.clone(),
        "/v1/people/alice/suggestions",
        &bob,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, none) = checked(
        &srv,
        &doc,
        get.clone(),
        "/v1/people/bob/suggestions",
        &bob,
        None,
    )
    .await;
    assert_eq!(none, json!([]), "bob gets nothing about alice");

    let at = format!("/v1/people/alice/suggestions/{id}");
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        &at,
        &bob,
        Some(json!({"decision": "decline"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let bobs = format!("/v1/people/bob/suggestions/{id}");
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        &bobs,
        &bob,
        Some(json!({"decision": "decline"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not bob's");
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        &at,
        &alice,
        Some(json!({"decision": "maybe"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, d) = checked(
        &srv,
        &doc,
        post.clone(),
        &at,
        &alice,
        Some(json!({"decision": "decline"})),
    )
    .await;
    assert_eq!(
        (status, d["state"].as_str()),
        (StatusCode::OK, Some("declined"))
    );
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        &at,
        &alice,
        Some(json!({"decision": "accept"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "already decided");
    // The same evidence again: still declined.
    cmcp_matching::refresh_suggestions(&db.store, "alice")
        .await
        .unwrap();
    let (_, list) = call(
        &srv,
        Method::GET,
        "/v1/people/alice/suggestions",
        &alice,
        None,
    )
    .await;
    assert_eq!(list[0]["state"], "declined");

    // Alice joins the place (the ADMIN's import): a link, offered again.
    let places = json!([{"id": "pay", "kind": "project", "name": "Payments", "key": "PAY", "members": ["alice"]}]);
    let (status, body) = call(&srv, Method::PUT, "/v1/places", &admin, Some(places)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, list) = call(
        &srv,
        Method::GET,
        "/v1/people/alice/suggestions",
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (list[0]["kind"].as_str(), list[0]["state"].as_str()),
        (Some("link"), Some("open"))
    );
    let (status, d) = checked(
        &srv,
        &doc,
        post,
        &at,
        &alice,
        Some(json!({"decision": "accept"})),
    )
    .await;
    assert_eq!(
        (status, d["state"].as_str()),
        (StatusCode::OK, Some("accepted"))
    );
    let (_, m) = call(&srv, Method::GET, "/v1/people/alice/manifest", &alice, None).await;
    let mirror = m["spaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["address"] == "space:bitbucket-repo:acme/r-2")
        .unwrap();
    assert_eq!(mirror["place"]["path"], "project/pay", "{mirror}");
    // No company mapping came of it.
    let mappings = db.store.list_mappings().await.unwrap();
    assert!(
        mappings
            .iter()
            .all(|m| m.space_address != "space:bitbucket-repo:acme/r-2")
    );
    let (_, audit) = call(&srv, Method::GET, "/v1/audit", &admin, None).await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"suggestion.decline") && actions.contains(&"suggestion.link"),
        "{actions:?}"
    );
}

async fn requests_reach_the_admins_alone(db: TestDb) {
    seed(&db.store).await;
    let srv = serve(&db).await;
    let alice = member(&db.store, "alice").await;
    let bob = member(&db.store, "bob").await;
    let admin = admin(&db.store).await;
    let doc = call(&srv, Method::GET, "/v1/openapi.json", &alice, None)
        .await
        .1;
    let post = (Method::POST, REQUESTS);
    let notes = json!({"space": "space:bitbucket-repo:acme/r-3", "name": "Notes"});
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        "/v1/people/bob/requests",
        &bob,
        Some(notes.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not bob's space");
    let mirror = json!({"space": "space:bitbucket-repo:acme/r-2"});
    let (status, _) = checked(
        &srv,
        &doc,
        post.clone(),
        "/v1/people/alice/requests",
        &alice,
        Some(mirror),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the mirror matches a place"
    );
    let (status, r) = checked(
        &srv,
        &doc,
        post.clone(),
        "/v1/people/alice/requests",
        &alice,
        Some(notes.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{r}");
    assert_eq!(
        (r["kind"].as_str(), r["create_name"].as_str()),
        (Some("request-to-create"), Some("Notes"))
    );
    let (status, _) = checked(
        &srv,
        &doc,
        post,
        "/v1/people/alice/requests",
        &alice,
        Some(notes),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "asked once");

    let list = (Method::GET, "/v1/requests");
    for k in [&alice, &bob] {
        let (status, _) = checked(&srv, &doc, list.clone(), "/v1/requests", k, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    let (status, all) = checked(&srv, &doc, list, "/v1/requests", &admin, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["person"], "alice");
}

/// An ADMIN's approval reaches the people it concerns at once, not after
/// their next sync: alice's mirror of a repo of the approved project gets
/// its suggestion as the decision is answered, and the undo takes it away.
async fn an_admins_decision_reaches_the_persons_suggestions_at_once(db: TestDb) {
    let store = &db.store;
    unmapped(store).await;
    cmcp_matching::refresh_suggestions(store, "alice")
        .await
        .unwrap();
    let open = |rows: Vec<cmcp_registry::SuggestionRow>| -> Vec<(String, Option<String>)> {
        rows.into_iter()
            .filter(|r| r.state == cmcp_registry::SuggestionState::Open)
            .map(|r| (r.space_name.unwrap_or_default(), r.place_id))
            .collect()
    };
    assert!(open(store.list_suggestions("alice").await.unwrap()).is_empty());
    let srv = serve(&db).await;
    let admin = admin(store).await;
    let ids = payments_proposals(store).await;
    assert!(!ids.is_empty(), "Payments is proposed for pay");
    let (status, answer) = call(
        &srv,
        Method::POST,
        "/v1/proposals/decisions",
        &admin,
        Some(json!({"ids": ids, "decision": "approve"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        open(store.list_suggestions("alice").await.unwrap()),
        vec![("billing-mirror".to_owned(), Some("pay".to_owned()))],
        "the approval suggested the mirror to alice at once"
    );
    let (status, answer) = call(
        &srv,
        Method::POST,
        "/v1/proposals/decisions",
        &admin,
        Some(json!({"ids": ids, "decision": "undo", "reason": "wrong project"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(
        open(store.list_suggestions("alice").await.unwrap()).is_empty(),
        "the undo took the suggestion away"
    );
}

/// Makes every write of `person`'s suggestions fail in the store itself (a
/// trigger), as a constraint or a broken row of theirs would.
async fn fail_suggestion_writes_of(store: &Store, person: &str) {
    let sql = match store {
        Store::Postgres(_) => format!(
            "CREATE FUNCTION refuse_suggestions() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.person = '{person}' THEN RAISE EXCEPTION 'no suggestions for {person}'; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER refuse_suggestions BEFORE INSERT OR UPDATE ON suggestions \
               FOR EACH ROW EXECUTE FUNCTION refuse_suggestions()"
        ),
        Store::Sqlite(_) => ["INSERT", "UPDATE"]
            .map(|op| {
                format!(
                    "CREATE TRIGGER refuse_suggestions_{op} BEFORE {op} ON suggestions \
                     WHEN NEW.person = '{person}' \
                     BEGIN SELECT RAISE(ABORT, 'no suggestions for {person}'); END;"
                )
            })
            .join(" "),
    };
    run_sql(store, &sql).await;
}

async fn allow_suggestion_writes(store: &Store) {
    let sql = match store {
        Store::Postgres(_) => {
            "DROP TRIGGER refuse_suggestions ON suggestions; DROP FUNCTION refuse_suggestions()"
        }
        Store::Sqlite(_) => {
            "DROP TRIGGER refuse_suggestions_INSERT; DROP TRIGGER refuse_suggestions_UPDATE"
        }
    };
    run_sql(store, sql).await;
}

async fn run_sql(store: &Store, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    match store {
        Store::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
        Store::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
    }
    .unwrap();
}

/// The kinds of `person`'s suggestions, as the API lists them.
async fn kinds(srv: &Server, person: &str, key: &str) -> Vec<(String, String)> {
    let (status, list) = call(
        srv,
        Method::GET,
        &format!("/v1/people/{person}/suggestions"),
        key,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Loading the places refreshes everyone's suggestions one person at a
/// time: a person whose refresh fails is counted in the answer (and
/// logged), and the people after them are refreshed all the same. The
/// places and proposals are loaded either way.
async fn an_import_refreshes_everyone_when_one_persons_refresh_fails(db: TestDb) {
    seed(&db.store).await;
    // Bob mirrors the same company repo as alice, from his own connection.
    let bob_owner = Owner::Person("bob".into());
    connection_of(&db.store, "bb-bob", bob_owner.clone()).await;
    let pay = project(1, "PAY", "Payments");
    let mirror = SpaceRecord {
        container: None,
        ..repo(
            4,
            &pay,
            "billing-copy",
            "git@bitbucket.org:acme/billing.git",
        )
    };
    db.store
        .apply_page("bb-bob", &bob_owner, &[mirror])
        .await
        .unwrap();
    cmcp_matching::refresh_suggestions(&db.store, "bob")
        .await
        .unwrap();
    let srv = serve(&db).await;
    let (alice, bob, admin) = (
        member(&db.store, "alice").await,
        member(&db.store, "bob").await,
        admin(&db.store).await,
    );
    let doc = call(&srv, Method::GET, "/v1/openapi.json", &alice, None)
        .await
        .1;
    let join = vec![("request-to-join".to_owned(), "open".to_owned())];
    let link = vec![("link".to_owned(), "open".to_owned())];
    assert_eq!(kinds(&srv, "alice", &alice).await, join);
    assert_eq!(kinds(&srv, "bob", &bob).await, join);

    // Both join the place; alice's suggestions cannot be written.
    fail_suggestion_writes_of(&db.store, "alice").await;
    let places = json!([{"id": "pay", "kind": "project", "name": "Payments", "key": "PAY", "members": ["alice", "bob"]}]);
    let put = (Method::PUT, "/v1/places");
    let (status, body) = checked(
        &srv,
        &doc,
        put.clone(),
        "/v1/places",
        &admin,
        Some(places.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["suggestions"],
        json!({"refreshed": 1, "failed": 1}),
        "{body}"
    );
    assert_eq!(kinds(&srv, "bob", &bob).await, link, "bob, after alice");
    assert_eq!(
        kinds(&srv, "alice", &alice).await,
        join,
        "alice's untouched"
    );
    let members = db.store.places_of("bob").await.unwrap();
    assert!(
        members.contains("pay"),
        "the places are loaded: {members:?}"
    );

    // Once alice's can be written, loading the places again mends hers.
    allow_suggestion_writes(&db.store).await;
    let (status, body) = checked(&srv, &doc, put, "/v1/places", &admin, Some(places)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["suggestions"], json!({"refreshed": 2, "failed": 0}));
    assert_eq!(kinds(&srv, "alice", &alice).await, link);
    assert_eq!(kinds(&srv, "bob", &bob).await, link);
}
