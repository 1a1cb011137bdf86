//! `POST /hooks/{platform}/{connection}` through the real router (`oneshot`),
//! each behaviour run on SQLite and PostgreSQL by `both_backends!`: refused
//! deliveries leave nothing behind, duplicates make one row and one job, a
//! failing store answers 503 with nothing half-written.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use cmcp_domain::Platform;
use cmcp_registry::testing::{TestDb, cipher, company_connection};
use cmcp_registry::{CHECKPOINT_BESIDE_AFTER_BYTES, DeliveryStatus, Store, StoreOptions};
use cmcp_webhook_gateway::verify::GITHUB_SIGNATURE_HEADER;
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, WebhookSecret, router, sign};
use tower::ServiceExt;

use crate::support::fixture;

both_backends!(
    signed_delivery_is_stored_with_its_job,
    forged_deliveries_are_refused_without_a_job,
    unknown_routes_and_oversized_bodies_are_refused,
    duplicate_delivery_makes_one_row_and_one_job,
    signed_body_replayed_under_a_new_id_is_a_duplicate,
    signed_but_unparseable_is_kept_as_failed,
    failing_store_answers_503_and_writes_nothing,
    rotation_accepts_the_old_secret_only_during_the_overlap,
);

const QUEUE: &str = "handle-delivery";

pub(crate) fn app(store: &Store, max_body_bytes: usize) -> Router {
    router(EdgeState {
        store: store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(
            cipher(),
            GatewayConfig {
                max_body_bytes,
                ..GatewayConfig::default()
            },
        )),
    })
}

/// The queue tables, as every process of the fleet sets them up.
pub(crate) async fn setup_queue(store: &Store) {
    cmcp_worker::queue::setup(store).await.unwrap();
}

/// A ready store with the queue tables and a GitHub connection `gh`;
/// returns its webhook secret.
pub(crate) async fn ready(db: &TestDb) -> String {
    setup_queue(&db.store).await;
    company_connection(&db.store, "gh", Platform::Github).await
}

pub(crate) struct Delivery {
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

/// The renamed-repository sample as GitHub sends it, signed with `secret`.
/// Each delivery id gets its own bytes (a real event's body differs from
/// another's), so only [`replay`] sends the same body twice.
pub(crate) fn github(secret: &str, guid: &str) -> Delivery {
    let sample = fixture("github", "webhook-repository-renamed.json");
    let body = [
        format!("{{\"test_delivery\":\"{guid}\",").as_bytes(),
        &sample[1..],
    ]
    .concat();
    signed_github(secret, guid, body)
}

/// A GitHub delivery whose body carries `pad` as one more field.
fn github_padded(secret: &str, guid: &str, pad: &str) -> Delivery {
    let body = github(secret, guid).body;
    let body = [format!("{{\"pad\":\"{pad}\",").as_bytes(), &body[1..]].concat();
    signed_github(secret, guid, body)
}

/// The same signed bytes as `github(secret, first)`, under delivery id
/// `guid`: a replay.
pub(crate) fn replay(secret: &str, first: &str, guid: &str) -> Delivery {
    signed_github(secret, guid, github(secret, first).body)
}

fn signed_github(secret: &str, guid: &str, body: Vec<u8>) -> Delivery {
    let signature = sign(&WebhookSecret::from(secret), &body);
    Delivery {
        headers: vec![
            ("x-github-event", "repository".to_owned()),
            ("x-github-delivery", guid.to_owned()),
            ("x-github-hook-id", "4242".to_owned()),
            ("content-type", "application/json".to_owned()),
            (GITHUB_SIGNATURE_HEADER, signature),
        ],
        body,
    }
}

pub(crate) async fn post(app: &Router, path: &str, d: &Delivery) -> StatusCode {
    let mut req = Request::post(path);
    for (k, v) in &d.headers {
        req = req.header(*k, v);
    }
    app.clone()
        .oneshot(req.body(Body::from(d.body.clone())).unwrap())
        .await
        .unwrap()
        .status()
}

/// The connection's delivery rows, and how many of them the
/// `handle-delivery` jobs name (a batch's deliveries share one job; no
/// delivery is named twice, nor one that is not a row).
pub(crate) async fn deliveries_and_jobs(store: &Store, connection: &str) -> (usize, i64) {
    let rows = store.list_deliveries(connection).await.unwrap();
    let named = cmcp_registry::testing::job_of_each_delivery(store).await;
    for (id, job) in &named {
        assert!(rows.iter().any(|r| &r.id == id), "job {job} names no row");
    }
    (rows.len(), named.len() as i64)
}

pub async fn signed_delivery_is_stored_with_its_job(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    let d = github(&secret, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert_eq!(
        post(&app, "/hooks/github/gh", &d).await,
        StatusCode::ACCEPTED
    );
    let rows = db.store.list_deliveries("gh").await.unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.status, DeliveryStatus::Received);
    assert_eq!(row.event, "repository.renamed");
    assert_eq!(
        row.delivery_key,
        "github:4242:72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    assert_eq!(row.body, d.body, "the raw bytes are kept as signed");
    assert!(
        row.headers
            .iter()
            .all(|(k, _)| !k.contains("signature") && k != "authorization"),
        "no auth header is stored: {:?}",
        row.headers
    );
    assert_eq!(db.store.queued_job_count(QUEUE).await.unwrap(), 1);
}

pub async fn forged_deliveries_are_refused_without_a_job(db: TestDb) {
    let secret = ready(&db).await;
    let other = company_connection(&db.store, "gh-other", Platform::Github).await;
    let app = app(&db.store, 1 << 20);
    let path = "/hooks/github/gh";

    let mut tampered = github(&secret, "a1");
    tampered.body[10] ^= 1;
    let wrong = github("not the secret", "a2");
    let mut missing = github(&secret, "a3");
    missing
        .headers
        .retain(|(k, _)| *k != GITHUB_SIGNATURE_HEADER);
    let other_conn = github(&other, "a4");
    for (what, d) in [
        ("tampered body", &tampered),
        ("wrong secret", &wrong),
        ("missing signature", &missing),
        ("another connection's secret", &other_conn),
    ] {
        assert_eq!(
            post(&app, path, d).await,
            StatusCode::UNAUTHORIZED,
            "{what}"
        );
    }
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (0, 0));
    // The other connection's own endpoint accepts its own signature.
    assert_eq!(
        post(&app, "/hooks/github/gh-other", &other_conn).await,
        StatusCode::ACCEPTED
    );
}

pub async fn unknown_routes_and_oversized_bodies_are_refused(db: TestDb) {
    let secret = ready(&db).await;
    company_connection(&db.store, "jira-a", Platform::Jira).await;
    company_connection(&db.store, "drive-a", Platform::Drive).await;
    let app = app(&db.store, 1024);
    let d = github(&secret, "b1");
    assert_eq!(
        post(&app, "/hooks/gitlab/gh", &d).await,
        StatusCode::NOT_FOUND,
        "no such platform"
    );
    // An unknown connection, or one of another platform, answers as a
    // forgery does: no oracle of which connections exist.
    for path in [
        "/hooks/github/nope",
        "/hooks/jira/gh",
        "/hooks/github/jira-a",
    ] {
        assert_eq!(
            post(&app, path, &d).await,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let drive = Delivery {
        body: Vec::new(),
        headers: vec![("x-goog-channel-id", "c".into())],
    };
    assert_eq!(
        post(&app, "/hooks/drive/drive-a", &drive).await,
        StatusCode::UNAUTHORIZED,
        "no live channel"
    );
    assert!(d.body.len() > 1024, "the sample is bigger than the cap");
    assert_eq!(
        post(&app, "/hooks/github/gh", &d).await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (0, 0));
}

pub async fn duplicate_delivery_makes_one_row_and_one_job(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    let d = github(&secret, "c0ffee00-0000-0000-0000-000000000001");
    let concurrent: Vec<_> = (0..3)
        .map(|_| {
            let (app, body, headers) = (app.clone(), d.body.clone(), d.headers.clone());
            tokio::spawn(async move {
                post(&app, "/hooks/github/gh", &Delivery { body, headers }).await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in concurrent {
        statuses.push(t.await.unwrap());
    }
    for _ in 0..2 {
        statuses.push(post(&app, "/hooks/github/gh", &d).await);
    }
    statuses.sort();
    assert_eq!(
        statuses,
        vec![
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::ACCEPTED
        ],
        "one stored, four acknowledged as duplicates"
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (1, 1));
}

pub async fn signed_body_replayed_under_a_new_id_is_a_duplicate(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    let first = "0a0a0a0a-0000-0000-0000-000000000001";
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&secret, first)).await,
        StatusCode::ACCEPTED
    );
    let again = replay(&secret, first, "0b0b0b0b-0000-0000-0000-000000000002");
    assert_eq!(
        post(&app, "/hooks/github/gh", &again).await,
        StatusCode::OK,
        "recognised by its replay key"
    );
    // The same signature spelt in upper-case hex is the same signature.
    let mut shouted = replay(&secret, first, "0c0c0c0c-0000-0000-0000-000000000003");
    for (name, value) in &mut shouted.headers {
        if *name == GITHUB_SIGNATURE_HEADER {
            *value = format!("sha256={}", value["sha256=".len()..].to_uppercase());
        }
    }
    assert_eq!(
        post(&app, "/hooks/github/gh", &shouted).await,
        StatusCode::OK,
        "hex case does not make a new replay key"
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (1, 1));
    // Another body under another id is new.
    let other = "0d0d0d0d-0000-0000-0000-000000000004";
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&secret, other)).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (2, 2));
}

pub async fn signed_but_unparseable_is_kept_as_failed(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    // Declared JSON, sent as a form: authentic, not understood.
    let body = b"payload=%7B%7D".to_vec();
    let d = Delivery {
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("x-github-event", "repository".to_owned()),
            ("x-github-delivery", "d1".to_owned()),
            ("x-github-hook-id", "4242".to_owned()),
            (
                GITHUB_SIGNATURE_HEADER,
                sign(&WebhookSecret::from(secret.as_str()), &body),
            ),
        ],
        body,
    };
    assert_eq!(
        post(&app, "/hooks/github/gh", &d).await,
        StatusCode::ACCEPTED
    );
    let rows = db.store.list_deliveries("gh").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, DeliveryStatus::Failed);
    assert!(rows[0].error.as_deref().unwrap().contains("not JSON"));
    assert_eq!(db.store.queued_job_count(QUEUE).await.unwrap(), 0);
}

/// The job insert fails inside the transaction (the queue tables are not
/// there yet): 503, and the delivery row is rolled back with it. Once the
/// queue exists the platform's retry goes through. A closed store is a 503
/// too.
pub async fn failing_store_answers_503_and_writes_nothing(db: TestDb) {
    let secret = company_connection(&db.store, "gh", Platform::Github).await;
    let app = app(&db.store, 1 << 20);
    let d = github(&secret, "e1");
    assert_eq!(
        post(&app, "/hooks/github/gh", &d).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(db.store.list_deliveries("gh").await.unwrap().is_empty());
    setup_queue(&db.store).await;
    assert_eq!(
        post(&app, "/hooks/github/gh", &d).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (1, 1));

    db.store.close().await;
    let d2 = github(&secret, "e2");
    assert_eq!(
        post(&app, "/hooks/github/gh", &d2).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let back = Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(deliveries_and_jobs(&back, "gh").await, (1, 1));
    let app = self::app(&back, 1 << 20);
    assert_eq!(
        post(&app, "/hooks/github/gh", &d2).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(deliveries_and_jobs(&back, "gh").await, (2, 2));
    back.close().await;
}

pub async fn rotation_accepts_the_old_secret_only_during_the_overlap(db: TestDb) {
    let old = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    db.store
        .rotate_webhook_secret(&cipher(), "gh", 3_600_000, "test")
        .await
        .unwrap();
    let new = db
        .store
        .current_webhook_secret(&cipher(), "gh")
        .await
        .unwrap();
    assert_ne!(new.expose(), old);
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&old, "f1")).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(new.expose(), "f2")).await,
        StatusCode::ACCEPTED
    );
    // A second rotation without overlap ends both earlier secrets at once.
    db.store
        .rotate_webhook_secret(&cipher(), "gh", 0, "test")
        .await
        .unwrap();
    for (secret, guid) in [(old.as_str(), "f3"), (new.expose(), "f4")] {
        assert_eq!(
            post(&app, "/hooks/github/gh", &github(secret, guid)).await,
            StatusCode::UNAUTHORIZED
        );
    }
    let audit = db.store.list_audit(10).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "connection.webhook-secret-rotated")
    );
}

/// The only test of this binary that installs the process-wide recorder:
/// outcomes are counted by platform and the scrape reports the age of the
/// oldest delivery still waiting for its job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_outcomes_and_the_oldest_waiting_delivery() {
    let db = TestDb::sqlite().await;
    let secret = ready(&db).await;
    let handle = cmcp_webhook_gateway::install_metrics().expect("first recorder");
    let app = router(EdgeState {
        store: db.store.clone(),
        metrics: Some(handle),
        hooks: Some(Hooks::new(cipher(), GatewayConfig::default())),
    });
    assert_eq!(
        post(&app, "/hooks/github/gh", &github("wrong", "m1")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&secret, "m2")).await,
        StatusCode::ACCEPTED
    );
    let scrape = || async {
        let scrape = app
            .clone()
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(scrape.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(scrape.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    let text = scrape().await;
    for needle in [
        r#"cmcp_webhook_deliveries_total{platform="github",outcome="bad_signature"}"#,
        r#"cmcp_webhook_deliveries_total{platform="github",outcome="accepted"}"#,
        r#"cmcp_webhook_verification_failures_total{platform="github",reason="mismatch"}"#,
        "cmcp_webhook_enqueue_seconds_bucket{le=",
        "cmcp_build_info{version=",
        "cmcp_webhook_oldest_unprocessed_seconds",
        r#"cmcp_webhook_stored_deliveries{status="received"} 1"#,
        "cmcp_webhook_commit_deliveries_count ",
        "cmcp_webhook_checkpoints_beside_total ",
        "cmcp_webhook_batches_written_again_total ",
        "cmcp_webhook_wal_syncs_total ",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    // Past the bytes after which the SQLite writer checkpoints beside
    // itself: the next commits count the checkpoint once it has run.
    let pad = "p".repeat(64 * 1024);
    let mut sent = 1;
    while sent * 64 * 1024 <= CHECKPOINT_BESIDE_AFTER_BYTES {
        let d = github_padded(&secret, &format!("big-{sent}"), &pad);
        assert_eq!(
            post(&app, "/hooks/github/gh", &d).await,
            StatusCode::ACCEPTED
        );
        sent += 1;
    }
    let value = |text: &str, name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let d = github(&secret, &format!("after-{sent}"));
        assert_eq!(
            post(&app, "/hooks/github/gh", &d).await,
            StatusCode::ACCEPTED
        );
        sent += 1;
        let text = scrape().await;
        if value(&text, "cmcp_webhook_checkpoints_beside_total") >= 1.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint counted:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // One delivery a request, one commit each: every delivery stored went
    // through a commit. (The recorder is the process's, so the other tests
    // of this binary that run meanwhile count there too.)
    assert!(value(&text, "cmcp_webhook_commit_deliveries_count") >= sent as f64);
    assert!(value(&text, "cmcp_webhook_commit_deliveries_sum") >= sent as f64);
    // Each was answered only after a sync of the SQLite WAL, and as each
    // request waited for its answer before the next was sent, no sync
    // could answer two of them.
    assert!(value(&text, "cmcp_webhook_wal_syncs_total") >= sent as f64);
    assert!(
        !text.contains(&secret),
        "the secret never reaches the metrics"
    );
}
