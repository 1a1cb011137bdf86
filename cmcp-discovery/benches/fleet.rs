//! A fleet under load: two worker processes and one gateway process of the
//! binary on one PostgreSQL database, 20 GitHub connections over 2 tokens
//! (ten on each simulated GitHub, whose primary budget is per token, as
//! GitHub's is), syncs running back to back while signed deliveries
//! arrive at a fixed rate.
//!
//! Each part is printed beside a reference from the same run:
//!
//! - the gateway: deliveries accepted a second and accept latency (p50,
//!   p99, from when each was due), beside the same load with no sync
//!   running;
//! - the workers: syncs completed and their duration (p50, p99), and
//!   deliveries processed with their lag (received → processed, p50,
//!   p99); requests a second to each upstream beside what its budget
//!   allows (the bound a budget-limited fleet works against);
//! - the shared budget: requests each upstream refused or saw arrive over
//!   its budget (both must be 0: the bench fails otherwise), and the
//!   requests sent beside the most the windows the run touched allow.
//!
//! Needs `CMCP_TEST_POSTGRES_URL`. `cargo bench -p cmcp-discovery --bench
//! fleet`. Knobs: `FLEET_SECONDS` (60, the loaded phase; the reference
//! phase is a quarter of it), `FLEET_REPOS` (2,000 per upstream),
//! `FLEET_DELIVERIES` (20 a second), `FLEET_LIMIT` and `FLEET_WINDOW`
//! (1,200 requests per 30 s per token), `FLEET_LATENCY_MS` (20 per
//! request).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cmcp_domain::{ConnectionSpec, Owner, Platform, RunTrigger, Token};
use cmcp_fixtures::github::github_signature;
use cmcp_fixtures::{GithubSim, GithubSimConfig, RateLimitConfig, RepoSnapshot};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Cipher, NewConnection, Store};
use cmcp_worker::{Queue, QueueConfig, SyncConnection};

const SAMPLE: &str =
    include_str!("../../fixtures/data/github/webhooks/webhook-repository-renamed.json");

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Knobs {
    seconds: u64,
    repos: u64,
    deliveries: u64,
    limit: u64,
    window: u64,
    latency_ms: u64,
}

/// A process of the binary, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn start(dir: &Path, url: &str, key: &str, name: &str, args: &[&str]) -> Proc {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cmcp-discovery"));
    cmd.arg("--config")
        .arg(dir.join("fleet.toml"))
        .args(args)
        .current_dir(dir);
    for var in ["CONFIG", "LOG", "PUBLIC_URL"] {
        cmd.env_remove(format!("CMCP_DISCOVERY_{var}"));
    }
    let child = cmd
        .env("CMCP_DISCOVERY_DATABASE_URL", url)
        .env("CMCP_DISCOVERY_MASTER_KEY", key)
        .env("CMCP_DISCOVERY_DATA_DIR", dir)
        .env("HOSTNAME", name)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Proc(child)
}

async fn wait_ready(http: &reqwest::Client, addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = http
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `repository` `renamed` delivery about one of the upstream's repos
/// (the sample's shape; the worker refreshes the repo from upstream,
/// which spends the token's budget like any request).
fn delivery(repo: &RepoSnapshot, seq: u64) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(SAMPLE).unwrap();
    let r = &mut v["repository"];
    r["id"] = repo.id.into();
    r["node_id"] = repo.node_id.clone().into();
    r["name"] = repo.name.clone().into();
    r["full_name"] = repo.full_name.clone().into();
    r["private"] = repo.private.into();
    r["owner"]["login"] = repo.owner_login.clone().into();
    r["owner"]["id"] = repo.owner_id.into();
    v["organization"]["login"] = repo.owner_login.clone().into();
    v["organization"]["id"] = repo.owner_id.into();
    v["changes"]["repository"]["name"]["from"] = format!("old-{seq}").into();
    serde_json::to_vec(&v).unwrap()
}

/// One upstream (one token) and the hook its deliveries go to.
struct Upstream {
    sim: GithubSim,
    hook: String,
    secret: String,
    repos: Vec<RepoSnapshot>,
}

/// Deliveries at `rate` a second for `secs`, alternating between the
/// upstreams; each timed from when it was due. Returns (latencies, failed).
async fn deliver(ups: &[Upstream], rate: u64, secs: u64, first_seq: u64) -> (Vec<Duration>, u64) {
    let http = reqwest::Client::new();
    let total = rate * secs;
    let gap = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..total {
        let due = start + gap * u32::try_from(i).unwrap();
        tokio::time::sleep_until(due.into()).await;
        let up = &ups[(i % ups.len() as u64) as usize];
        let seq = first_seq + i;
        let repo = &up.repos[(seq as usize * 7919) % up.repos.len()];
        let body = delivery(repo, seq);
        let req = http
            .post(&up.hook)
            .header("content-type", "application/json")
            .header("x-github-event", "repository")
            .header("x-github-delivery", format!("fleet-bench-{seq}"))
            .header("x-github-hook-id", "1")
            .header("x-hub-signature-256", github_signature(&up.secret, &body))
            .body(body);
        tasks.push(tokio::spawn(async move {
            let ok = req.send().await.is_ok_and(|r| r.status().is_success());
            (due.elapsed(), ok)
        }));
    }
    let mut times = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (d, ok) = t.await.unwrap();
        times.push(d);
        failed += u64::from(!ok);
    }
    times.sort();
    (times, failed)
}

fn pct(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

async fn one_i64(pg: &sqlx::PgPool, sql: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_one(pg)
        .await
        .unwrap();
    n
}

/// Processing lags (received → processed) of the deliveries received in
/// `[from, to)` epoch ms, once all of them are processed.
async fn lags(pg: &sqlx::PgPool, from: i64, to: i64) -> Vec<Duration> {
    let pending = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE received_at >= {from} AND received_at < {to} \
         AND processed_at IS NULL"
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = one_i64(pg, &pending).await;
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            let sql = format!(
                "SELECT status || ' ' || COALESCE(error, '') || ' (attempts ' || attempts || ')' \
                 FROM webhook_deliveries WHERE received_at >= {from} AND received_at < {to} \
                 AND processed_at IS NULL LIMIT 5"
            );
            let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(pg)
                .await
                .unwrap();
            panic!("{left} deliveries left unprocessed, for example: {rows:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sql = format!(
        "SELECT processed_at - received_at FROM webhook_deliveries \
         WHERE received_at >= {from} AND received_at < {to}"
    );
    let rows: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(pg)
        .await
        .unwrap();
    let mut v: Vec<Duration> = rows
        .into_iter()
        .map(|(ms,)| Duration::from_millis(ms.max(0) as u64))
        .collect();
    v.sort();
    v
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let k = Knobs {
        seconds: knob("FLEET_SECONDS", 60),
        repos: knob("FLEET_REPOS", 2_000),
        deliveries: knob("FLEET_DELIVERIES", 20),
        limit: knob("FLEET_LIMIT", 1_200),
        window: knob("FLEET_WINDOW", 30),
        latency_ms: knob("FLEET_LATENCY_MS", 20),
    };
    let Some(db) = TestDb::postgres().await else {
        println!("fleet bench: not run (set CMCP_TEST_POSTGRES_URL)");
        return;
    };
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let Store::Postgres(pg) = &db.store else {
        unreachable!("TestDb::postgres is a PostgreSQL store")
    };
    let key = hex::encode([5u8; 32]);
    let cipher = Cipher::from_key_text(&key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (gateway_addr, wa_addr, wb_addr) = (free_addr(), free_addr(), free_addr());

    let mut ups = Vec::new();
    let mut ids = Vec::new();
    for (t, token) in ["ghp_fleetBenchTokenA", "ghp_fleetBenchTokenB"]
        .iter()
        .enumerate()
    {
        let sim = GithubSim::start(GithubSimConfig {
            repos: k.repos as usize,
            token: Some((*token).to_owned()),
            latency: Duration::from_millis(k.latency_ms),
            rate_limit: Some(RateLimitConfig {
                limit: u32::try_from(k.limit).unwrap(),
                window: Duration::from_secs(k.window),
            }),
            seed: 42 + t as u64,
            ..GithubSimConfig::default()
        })
        .await
        .unwrap();
        // Ten connections share each token (one org seen ten times: the
        // first to sync a repo owns its space, the others list it too).
        for c in 0..10 {
            let id = format!("github-{}-{c:02}", ["a", "b"][t]);
            db.store
                .create_connection(
                    &cipher,
                    NewConnection {
                        id: id.clone(),
                        spec: ConnectionSpec {
                            platform: Platform::Github,
                            scope: "acme".into(),
                            base_url: sim.base_url(),
                        },
                        owner: Owner::Company,
                        token: Token::new(*token),
                        settings: serde_json::json!({}),
                    },
                    "bench",
                )
                .await
                .unwrap();
            ids.push(id);
        }
        let hook_id = format!("github-{}-00", ["a", "b"][t]);
        let secret = db
            .store
            .current_webhook_secret(&cipher, &hook_id)
            .await
            .unwrap()
            .expose()
            .to_owned();
        let repos = sim.repos();
        ups.push(Upstream {
            hook: format!("http://{gateway_addr}/hooks/github/{hook_id}"),
            sim,
            secret,
            repos,
        });
    }
    std::fs::write(
        dir.path().join("fleet.toml"),
        "log = \"warn\"\n[http]\nper_page = 100\n[queue]\npoll_interval = \"100ms\"\n",
    )
    .unwrap();
    let http = reqwest::Client::new();
    let _gateway = start(
        dir.path(),
        &db.url,
        &key,
        "gateway",
        &["gateway", "--listen", &gateway_addr],
    );
    let _wa = start(
        dir.path(),
        &db.url,
        &key,
        "worker-a",
        &["worker", "--listen", &wa_addr],
    );
    let _wb = start(
        dir.path(),
        &db.url,
        &key,
        "worker-b",
        &["worker", "--listen", &wb_addr],
    );
    for addr in [&gateway_addr, &wa_addr, &wb_addr] {
        wait_ready(&http, addr).await;
    }
    println!(
        "== fleet: 2 workers + 1 gateway on PostgreSQL; 20 connections over 2 tokens; {} repos an upstream, \
         {} ms a request, budget {} per {} s a token; {} deliveries/s ==",
        k.repos, k.latency_ms, k.limit, k.window, k.deliveries
    );

    // Reference: the deliveries alone.
    let now_ms = || chrono::Utc::now().timestamp_millis();
    let ref_secs = (k.seconds / 4).max(5);
    let t0 = now_ms();
    let (alone, alone_failed) = deliver(&ups, k.deliveries, ref_secs, 0).await;
    let t1 = now_ms();
    let alone_lag = lags(pg, t0, t1).await;

    // Loaded: every connection synced back to back while deliveries come.
    let queue: Queue<SyncConnection> = Queue::new(&db.store, &QueueConfig::default());
    let stats_before: Vec<_> = ups.iter().map(|u| u.sim.stats()).collect();
    let loaded_from = now_ms();
    let until = Instant::now() + Duration::from_secs(k.seconds);
    let syncer = {
        let pg = pg.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            // One sync queued or running per connection at a time: a
            // connection is pushed again once its runs finished match its
            // pushes (or a push has waited a minute: a deferred sync).
            let mut pushed: BTreeMap<String, (i64, Instant)> = BTreeMap::new();
            let finished_sql = "SELECT connection_id, COUNT(*) FROM sync_runs \
                 WHERE triggered_by = 'test' AND finished_at IS NOT NULL GROUP BY connection_id";
            while Instant::now() < until {
                let finished: BTreeMap<String, i64> = sqlx::query_as(finished_sql)
                    .fetch_all(&pg)
                    .await
                    .unwrap()
                    .into_iter()
                    .collect();
                for id in &ids {
                    let done = finished.get(id).copied().unwrap_or(0);
                    let due = pushed
                        .get(id)
                        .is_none_or(|(n, at)| *n <= done || at.elapsed() > Duration::from_secs(60));
                    if due {
                        queue
                            .push(SyncConnection::new(id, RunTrigger::Test), None, None)
                            .await
                            .unwrap();
                        pushed.insert(id.clone(), (done + 1, Instant::now()));
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let t2 = now_ms();
    let (loaded, loaded_failed) = deliver(&ups, k.deliveries, k.seconds, 1_000_000).await;
    let t3 = now_ms();
    syncer.await.unwrap();
    // Let the syncs started in the window finish.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let running = one_i64(
            pg,
            "SELECT COUNT(*) FROM sync_runs WHERE outcome = 'running'",
        )
        .await;
        if running == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "syncs still running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let loaded_to = now_ms();
    let loaded_lag = lags(pg, t2, t3).await;

    let mut durations = Vec::new();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for id in &ids {
        for r in db.store.list_runs(Some(id), 1_000).await.unwrap() {
            if r.started_at < loaded_from || r.triggered_by != RunTrigger::Test {
                continue;
            }
            *outcomes.entry(format!("{:?}", r.outcome)).or_default() += 1;
            if let Some(e) = &r.error {
                // The error without its times and numbers.
                let shape: String = e.chars().filter(|c| !c.is_ascii_digit()).collect();
                *errors.entry(shape).or_default() += 1;
            }
            if let Some(f) = r.finished_at {
                durations.push(Duration::from_millis((f - r.started_at).max(0) as u64));
            }
        }
    }
    durations.sort();
    let elapsed = (loaded_to - loaded_from) as f64 / 1000.0;

    println!("  part      what                                  figure");
    println!(
        "  gateway   deliveries alone                      {:>6.1}/s  accept p50 {:>6.2} ms  p99 {:>6.2} ms  ({alone_failed} failed)",
        alone.len() as f64 / ref_secs as f64,
        pct(&alone, 0.5),
        pct(&alone, 0.99)
    );
    println!(
        "  gateway   deliveries while 20 syncs run         {:>6.1}/s  accept p50 {:>6.2} ms  p99 {:>6.2} ms  ({loaded_failed} failed); p99 ratio loaded/alone {:.2}",
        loaded.len() as f64 / k.seconds as f64,
        pct(&loaded, 0.5),
        pct(&loaded, 0.99),
        pct(&loaded, 0.99) / pct(&alone, 0.99).max(1e-6)
    );
    println!(
        "  workers   delivery lag alone                    p50 {:>7.1} ms  p99 {:>7.1} ms",
        pct(&alone_lag, 0.5),
        pct(&alone_lag, 0.99)
    );
    println!(
        "  workers   delivery lag while syncs run          p50 {:>7.1} ms  p99 {:>7.1} ms",
        pct(&loaded_lag, 0.5),
        pct(&loaded_lag, 0.99)
    );
    println!(
        "  workers   syncs in {elapsed:.0} s: {outcomes:?}            {:>6.1}/min  duration p50 {:>6.0} ms  p99 {:>6.0} ms",
        durations.len() as f64 * 60.0 / elapsed,
        pct(&durations, 0.5),
        pct(&durations, 0.99)
    );
    for (e, n) in &errors {
        println!("  workers   {n} runs ended with: {e}");
    }
    let allowed = k.limit as f64 / k.window as f64;
    // A run of `elapsed` seconds touches at most this many windows.
    let windows = (elapsed / k.window as f64).ceil() + 1.0;
    let mut exceeded = false;
    for (i, (up, before)) in ups.iter().zip(&stats_before).enumerate() {
        let s = up.sim.stats();
        let requests = s.requests - before.requests;
        let rate = requests as f64 / elapsed;
        println!(
            "  budget    token {}: {requests} requests ({rate:.1}/s; the budget's rate {allowed:.1}/s, ratio {:.2}), \
             at most {:.0} allowed in the {windows:.0} windows touched; refused {}, over budget {}",
            ["A", "B"][i],
            rate / allowed,
            windows * k.limit as f64,
            s.rate_limited,
            s.over_budget
        );
        exceeded |= s.rate_limited > 0 || s.over_budget > 0;
    }
    println!(
        "  budget    shared budget exceeded: {}",
        if exceeded { "YES" } else { "never" }
    );
    // What the processes complained of, counted by message.
    for name in ["gateway", "worker-a", "worker-b"] {
        let log =
            std::fs::read_to_string(dir.path().join(format!("{name}.log"))).unwrap_or_default();
        let mut seen: BTreeMap<String, u64> = BTreeMap::new();
        for line in log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        {
            let shape: String = line
                .split_once("WARN")
                .or_else(|| line.split_once("ERROR"))
                .map_or(line, |(_, rest)| rest)
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .take(160)
                .collect();
            *seen.entry(shape).or_default() += 1;
        }
        for (shape, n) in seen {
            println!("  log       {name}: {n} x{shape}");
        }
    }
    assert!(!exceeded, "the fleet went over a token's budget");
    assert_eq!(
        (alone_failed, loaded_failed),
        (0, 0),
        "deliveries refused; logs in {}",
        dir.path().display()
    );
}
