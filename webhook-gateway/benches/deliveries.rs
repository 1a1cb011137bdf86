//! Sustained signed GitHub deliveries accepted durably per second, over
//! loopback, on SQLite and (when `CMCP_TEST_POSTGRES_URL` is set)
//! PostgreSQL; beside it the same server answering an unsigned no-op route,
//! and the database's own single-row insert-transaction rate, so the
//! gateway's figure can be read against its two ceilings.
//!
//! `cargo bench -p cmcp-webhook-gateway --bench deliveries`
//! Knobs: `BENCH_DELIVERIES` (default 3000), `BENCH_CONCURRENCY` (16),
//! `BENCH_SECONDS` (20, a bound per phase).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewConnection, Store};
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, WebhookSecret, router, sign};

const BODY: &[u8] =
    include_bytes!("../../fixtures/data/github/webhooks/webhook-repository-renamed.json");

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Figures {
    sent: usize,
    ok: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Figures {
    fn print(&self, what: &str) {
        let mut l = self.latencies.clone();
        l.sort();
        let pct = |p: f64| {
            l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        println!(
            "{what:<44} {:>8.0}/s  ok {}/{}  p50 {:>7.2} ms  p99 {:>7.2} ms  ({:.1} s)",
            self.ok as f64 / self.elapsed.as_secs_f64(),
            self.ok,
            self.sent,
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            self.elapsed.as_secs_f64()
        );
    }
}

/// `total` requests from `concurrency` clients, bounded by `limit`.
async fn load(
    url: String,
    secret: Option<String>,
    total: usize,
    concurrency: usize,
    limit: Duration,
) -> Figures {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, url, secret, next) =
            (client.clone(), url.clone(), secret.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            let mut sent = 0;
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total || started.elapsed() > limit {
                    break;
                }
                // Each delivery its own bytes: the gateway stores a body
                // seen before under a new id as a replay, not a delivery.
                let body = [format!("{{\"bench_seq\":{n},").as_bytes(), &BODY[1..]].concat();
                let signature = secret
                    .as_deref()
                    .map(|s| sign(&WebhookSecret::from(s), &body));
                let mut req = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-github-event", "repository")
                    .header("x-github-hook-id", "1")
                    .header("x-github-delivery", uuid::Uuid::new_v4().to_string());
                if let Some(sig) = &signature {
                    req = req.header("x-hub-signature-256", sig);
                }
                let t = Instant::now();
                let status = req.body(body).send().await.map(|r| r.status().as_u16());
                lat.push(t.elapsed());
                sent += 1;
                if matches!(status, Ok(200..=299)) {
                    ok += 1;
                }
            }
            (sent, ok, lat)
        }));
    }
    let mut f = Figures {
        sent: 0,
        ok: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for t in tasks {
        let (sent, ok, lat) = t.await.expect("client task");
        f.sent += sent;
        f.ok += ok;
        f.latencies.extend(lat);
    }
    f.elapsed = started.elapsed();
    f
}

async fn setup_queue(store: &Store) {
    match store {
        Store::Sqlite(pool) => apalis_sqlite::SqliteStorage::<()>::migrations()
            .run(pool)
            .await
            .expect("queue tables"),
        Store::Postgres(pool) => apalis_postgres::PostgresStorage::<()>::setup(pool)
            .await
            .expect("queue tables"),
    }
}

/// Sequential single-row INSERT transactions into a scratch table.
async fn insert_rate(store: &Store, total: usize, limit: Duration) -> (usize, Duration) {
    let started = Instant::now();
    let mut n = 0;
    match store {
        Store::Sqlite(pool) => {
            sqlx::query("CREATE TABLE bench_scratch (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
                .execute(pool)
                .await
                .unwrap();
            while n < total && started.elapsed() < limit {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                sqlx::query("INSERT INTO bench_scratch (v) VALUES ($1)")
                    .bind("x")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                n += 1;
            }
        }
        Store::Postgres(pool) => {
            sqlx::query("CREATE TABLE bench_scratch (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
                .execute(pool)
                .await
                .unwrap();
            while n < total && started.elapsed() < limit {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("INSERT INTO bench_scratch (v) VALUES ($1)")
                    .bind("x")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                n += 1;
            }
        }
    }
    (n, started.elapsed())
}

async fn bench(name: &str, db: TestDb) {
    let total = knob("BENCH_DELIVERIES", 3000);
    let concurrency = knob("BENCH_CONCURRENCY", 16);
    let limit = Duration::from_secs(knob("BENCH_SECONDS", 20) as u64);
    let cipher = cipher();
    setup_queue(&db.store).await;
    db.store
        .create_connection(
            &cipher,
            NewConnection {
                id: "gh".into(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "acme".into(),
                    base_url: "http://127.0.0.1:9".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "bench",
        )
        .await
        .unwrap();
    let secret = db
        .store
        .current_webhook_secret(&cipher, "gh")
        .await
        .unwrap()
        .expose()
        .to_owned();
    let app: Router = router(EdgeState {
        store: db.store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(cipher, GatewayConfig::default())),
    })
    .route("/noop", post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let base = format!("http://{addr}");
    load(format!("{base}/noop"), None, 200, 4, limit).await; // warm-up
    let noop = load(format!("{base}/noop"), None, total, concurrency, limit).await;
    noop.print(&format!("{name}: unsigned no-op route"));
    let hooks = load(
        format!("{base}/hooks/github/gh"),
        Some(secret),
        total,
        concurrency,
        limit,
    )
    .await;
    hooks.print(&format!("{name}: signed deliveries stored durably"));
    let stored = db.store.list_deliveries("gh").await.unwrap().len();
    let jobs = db.store.queued_job_count("handle-delivery").await.unwrap();
    println!(
        "{name}: rows stored {stored}, jobs queued {jobs} (accepted {})",
        hooks.ok
    );
    let (n, took) = insert_rate(&db.store, total, limit).await;
    println!(
        "{:<44} {:>8.0}/s  ({n} single-row INSERT transactions in {:.1} s)",
        format!("{name}: database insert-transaction rate"),
        n as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
    server.abort();
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        bench("sqlite", TestDb::sqlite().await).await;
        match TestDb::postgres().await {
            Some(db) => bench("postgres", db).await,
            None => println!("postgres: skipped (set CMCP_TEST_POSTGRES_URL)"),
        }
    });
}
