//! The references measured beside the gateway in the same run: the
//! database's own rate of single-row INSERT transactions at the same
//! client count and body size, by `pgbench` with a custom script when it
//! is installed, and by an equivalent sqlx loop (also the SQLite one).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cmcp_registry::{Store, StoreOptions};

use crate::load::{Bodies, Figures};

/// What one pgbench run reported.
pub struct Pgbench {
    pub tps: f64,
    /// Its mean latency (ms), as it prints it.
    pub latency: Option<f64>,
    /// Paced runs only: its transactions read back from its
    /// per-transaction log, as the load generator counts ours (`None` when
    /// the log held none).
    pub paced: Option<Figures>,
}

/// `pgbench -n -c clients -j 2 -T seconds` running one INSERT of a body of
/// this size per transaction into a scratch table, back to back, or paced
/// at `rate` transactions a second in all (`-R`, with its per-transaction
/// log read back), or why it could not run.
pub async fn pgbench(
    store: &Store,
    url: &str,
    bodies: &Bodies,
    clients: usize,
    seconds: Duration,
    rate: Option<f64>,
) -> Result<Pgbench, String> {
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
    let dir = std::env::temp_dir().join(format!("cmcp-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("insert.sql");
    std::fs::write(&file, script).map_err(|e| e.to_string())?;
    let mut args: Vec<String> = ["-n", "-c", &clients.to_string(), "-j", "2"]
        .map(String::from)
        .into();
    args.extend(["-T".into(), seconds.as_secs().max(1).to_string()]);
    args.extend(["-f".into(), file.display().to_string()]);
    if let Some(rate) = rate {
        let log = dir.join("log").display().to_string();
        args.extend(["-R".into(), format!("{rate:.0}"), "-l".into()]);
        args.extend(["--log-prefix".into(), log]);
    }
    args.push(url.to_owned());
    let out = tokio::task::spawn_blocking(move || Command::new("pgbench").args(&args).output())
        .await
        .map_err(|e| e.to_string())?;
    let paced = rate.and_then(|_| logged(&dir, seconds));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.map_err(|e| format!("pgbench not runnable: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |prefix: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    field("tps = ")
        .map(|tps| Pgbench {
            tps,
            latency: field("latency average = "),
            paced,
        })
        .ok_or_else(|| {
            format!(
                "pgbench said: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}

/// The transactions in pgbench's per-transaction logs in `dir` (one file
/// a thread). With `-R`, a line is `client transaction time script epoch
/// µs lag`: its own time and how late it started (µs), and when it ended
/// (epoch s and µs). Its latency is time + lag, from when it was due, as
/// the load generator counts ours; it was due that long before it ended.
fn logged(dir: &std::path::Path, seconds: Duration) -> Option<Figures> {
    let mut ends_and_latencies = Vec::new();
    for f in std::fs::read_dir(dir).ok()?.flatten() {
        if !f.file_name().to_string_lossy().starts_with("log") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(f.path()) else {
            continue;
        };
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
            if let (Some(time), Some(s), Some(us), Some(lag)) = (n(2), n(4), n(5), n(6)) {
                let ended = Duration::from_secs(s) + Duration::from_micros(us);
                ends_and_latencies.push((ended, Duration::from_micros(time + lag)));
            }
        }
    }
    let first_due = ends_and_latencies
        .iter()
        .map(|(ended, latency)| ended.saturating_sub(*latency))
        .min()?;
    let timeline = ends_and_latencies
        .into_iter()
        .map(|(ended, latency)| {
            (
                ended.saturating_sub(latency).saturating_sub(first_due),
                latency,
            )
        })
        .collect();
    Some(Figures::from_timeline(timeline, seconds))
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
