//! The references measured beside the gateway in the same run: the
//! database's own rate of single-row INSERT transactions at the same
//! client count and body size, by `pgbench` with a custom script when it
//! is installed, and by an equivalent sqlx loop (also the SQLite one).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cmcp_registry::{Store, StoreOptions};

use crate::load::Bodies;

/// `pgbench -n -c clients -j 2 -T seconds` running one INSERT of a body of
/// this size per transaction into a scratch table; the `tps` and average
/// latency (ms) it reports, or why it could not run.
pub async fn pgbench(
    store: &Store,
    url: &str,
    bodies: &Bodies,
    clients: usize,
    seconds: Duration,
) -> Result<(f64, Option<f64>), String> {
    let Store::Postgres(pool) = store else {
        return Err("not PostgreSQL".into());
    };
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_pgbench (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&bodies.body(0)).replace('\n', " ");
    let script = format!(
        "INSERT INTO bench_pgbench (v) VALUES ('{}');\n",
        body.replace('\'', "''")
    );
    let file = std::env::temp_dir().join(format!("cmcp-bench-{}.sql", uuid::Uuid::new_v4()));
    std::fs::write(&file, script).map_err(|e| e.to_string())?;
    let secs = seconds.as_secs().max(1).to_string();
    let clients = clients.to_string();
    let path = file.display().to_string();
    let url = url.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("pgbench")
            .args([
                "-n", "-c", &clients, "-j", "2", "-T", &secs, "-f", &path, &url,
            ])
            .output()
    })
    .await
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&file);
    let out = out.map_err(|e| format!("pgbench not runnable: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |prefix: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    field("tps = ")
        .map(|tps| (tps, field("latency average = ")))
        .ok_or_else(|| {
            format!(
                "pgbench said: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}

/// `clients` tasks, each on its own connection to the database at `url`,
/// running single-row INSERT transactions of one body (autocommit: one
/// statement, one round trip, one commit) for `seconds`; transactions per
/// second.
pub async fn insert_loop(url: &str, bodies: &Bodies, clients: usize, seconds: Duration) -> f64 {
    let options = StoreOptions {
        max_connections: clients as u32,
        ..StoreOptions::default()
    };
    let store = Store::connect(url, &options).await.expect("reference pool");
    let create = match &store {
        Store::Sqlite(_) => {
            "CREATE TABLE IF NOT EXISTS bench_inserts (id INTEGER PRIMARY KEY, v BLOB NOT NULL)"
        }
        Store::Postgres(_) => {
            "CREATE TABLE IF NOT EXISTS bench_inserts (id BIGSERIAL PRIMARY KEY, v BYTEA NOT NULL)"
        }
    };
    match &store {
        Store::Sqlite(pool) => sqlx::query(create).execute(pool).await.map(|_| ()),
        Store::Postgres(pool) => sqlx::query(create).execute(pool).await.map(|_| ()),
    }
    .expect("scratch table");
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (store, done, body) = (store.clone(), done.clone(), bodies.body(c));
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < seconds {
                let q = "INSERT INTO bench_inserts (v) VALUES ($1)";
                let r = match &store {
                    Store::Sqlite(pool) => {
                        sqlx::query(q).bind(&body).execute(pool).await.map(|_| ())
                    }
                    Store::Postgres(pool) => {
                        sqlx::query(q).bind(&body).execute(pool).await.map(|_| ())
                    }
                };
                if r.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("insert task");
    }
    store.close().await;
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
