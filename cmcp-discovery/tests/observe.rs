//! Every process observable, with the real binary: `serve`,
//! `worker --listen` and `gateway` on one store (SQLite file, or PostgreSQL when
//! configured), a sync of a simulated GitHub org and a signed delivery (and
//! a refused one). Then the union of both scrapes has every metric the
//! issue names, histograms with buckets (never summaries), no token; every
//! metric the alert rules and the dashboard name is among them; and on
//! SIGTERM each process answers `/readyz` 503 while it drains, then exits.

#[allow(dead_code)] // `cli` is for the other test binaries
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use cmcp_fixtures::{GithubSim, GithubSimConfig, WebhookTarget};
use cmcp_registry::testing::TestDb;
use cmcp_tests::{TOKEN, eventually_within, init_tls};

const CONFIG: &str = r#"
metrics_sample_every = "200ms"
drain_grace = "3s"
[queue]
poll_interval = "100ms"
[sync]
lease_ttl = "2s"
[http]
per_page = 10
backoff_min = "20ms"
backoff_max = "200ms"
"#;

/// What the issue asks every fleet to export, as they must appear after
/// one sync and one delivery (histograms by their buckets).
const EXPECTED: &[&str] = &[
    r#"cmcp_sync_runs_total{platform="github",outcome="complete"}"#,
    r#"cmcp_sync_duration_seconds_bucket{platform="github",le="#,
    r#"cmcp_upstream_requests_total{platform="github",status="200"}"#,
    r#"cmcp_upstream_request_duration_seconds_bucket{platform="github",le="#,
    r#"cmcp_rate_budget_remaining{credential=""#,
    r#"cmcp_rate_budget_waits_total{credential=""#,
    r#"cmcp_queue_jobs{queue="sync-connection",state="done"}"#,
    r#"cmcp_queue_jobs{queue="handle-delivery",state="pending"}"#,
    r#"cmcp_queue_oldest_job_age_seconds{queue="sync-connection"}"#,
    r#"cmcp_connections{status="held"} 0"#,
    r#"cmcp_connections{status="enabled"} 1"#,
    r#"cmcp_sync_oldest_complete_age_seconds{platform="github"}"#,
    r#"cmcp_webhook_deliveries_total{platform="github",outcome="accepted"}"#,
    r#"cmcp_webhook_deliveries_total{platform="github",outcome="bad_signature"}"#,
    r#"cmcp_webhook_enqueue_seconds_bucket{le="#,
    r#"cmcp_webhook_deliveries_processed_total{platform="github",outcome="processed"}"#,
    r#"cmcp_webhook_delivery_processing_seconds_bucket{platform="github",le="#,
    r#"cmcp_webhook_stored_deliveries{status="processed"}"#,
    r#"cmcp_build_info{version=""#,
];

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Fleet {
    dir: tempfile::TempDir,
    /// `(variable, value)` every process of the test gets.
    env: Vec<(&'static str, String)>,
}

impl Fleet {
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut all = vec!["--config", "observe.toml"];
        all.extend_from_slice(args);
        let mut cmd = support::binary(self.dir.path(), &all);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("run cmcp-discovery");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
        stdout
    }

    fn start(&self, name: &str, args: &[&str]) -> Process {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let child = self
            .command(args)
            .env("HOSTNAME", name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a process");
        Process(child)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

async fn get(client: &reqwest::Client, url: &str) -> Option<(u16, String)> {
    let resp = client.get(url).send().await.ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().await.ok()?))
}

/// Metric names of a scrape, histogram series folded into their family.
fn exported_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(family)
        .collect()
}

fn family(name: &str) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return base.to_owned();
        }
    }
    name.to_owned()
}

/// Every `cmcp_…` name a file mentions, families folded as above.
fn referenced_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("cmcp_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(family(&tail[..end]));
        rest = &tail[end..];
    }
    names
}

fn deploy(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fleet_exports_every_metric_and_drains() {
    fleet_exports_every_metric_and_drains(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fleet_exports_every_metric_and_drains() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    fleet_exports_every_metric_and_drains(Some(db)).await;
}

async fn fleet_exports_every_metric_and_drains(db: Option<TestDb>) {
    init_tls();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 25,
        token: Some(TOKEN.to_owned()),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("observe.toml"), CONFIG).unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let mut env = Vec::new();
    if let Some(db) = &db {
        env.push(("CMCP_DISCOVERY_DATABASE_URL", db.url.clone()));
        env.push(("CMCP_DISCOVERY_MASTER_KEY", hex::encode([9u8; 32])));
    }
    let fleet = Fleet { dir, env };
    let base = sim.base_url();
    fleet.run(&[
        "connection",
        "add",
        "github",
        "--org",
        "acme",
        "--token-file",
        "token",
        "--base-url",
        &base,
    ]);
    let info: serde_json::Value = serde_json::from_str(&fleet.run(&[
        "connection",
        "webhook-info",
        "github-acme",
        "--show-secret",
        "--json",
    ]))
    .unwrap();
    let secret = info["secret"].as_str().unwrap().to_owned();

    let (serve_addr, worker_addr, gateway_addr) = (free_addr(), free_addr(), free_addr());
    let mut serve = fleet.start("serve", &["serve", "--listen", &serve_addr]);
    let mut worker = fleet.start("worker", &["worker", "--listen", &worker_addr]);
    let mut gateway = fleet.start("gateway", &["gateway", "--listen", &gateway_addr]);
    let client = reqwest::Client::new();
    for addr in [&serve_addr, &worker_addr, &gateway_addr] {
        let url = format!("http://{addr}/readyz");
        eventually_within(
            "the process to be ready",
            Duration::from_secs(60),
            || async {
                get(&client, &url)
                    .await
                    .filter(|(s, _)| *s == 200)
                    .map(|_| ())
            },
        )
        .await;
    }
    // Each long-running process opened its whole pool at start (`[store]
    // min_connections`, ten), before any burst could ask for it.
    if let Some(db) = &db {
        let cmcp_registry::Store::Postgres(pool) = &db.store else {
            unreachable!("a PostgreSQL test database")
        };
        let kept = cmcp_registry::StoreOptions::kept().min_connections as i64;
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert!(
            open >= 3 * kept,
            "{open} connections open, not {kept} for each of 3 processes"
        );
    }
    let hook = format!("http://{serve_addr}/hooks/github/github-acme");
    let (_, worker_404) = get(&client, &format!("http://{worker_addr}/admin"))
        .await
        .unwrap();
    assert!(
        !worker_404.contains("<form"),
        "a worker serves no admin screen"
    );

    fleet.run(&["sync", "github-acme"]);
    let scrapes = || async {
        let mut both = String::new();
        for addr in [&serve_addr, &worker_addr] {
            let (status, text) = get(&client, &format!("http://{addr}/metrics")).await?;
            assert_eq!(status, 200, "{text}");
            both.push_str(&text);
        }
        Some(both)
    };
    eventually_within("a complete sync", Duration::from_secs(90), || async {
        scrapes()
            .await
            .filter(|s| s.contains(r#"cmcp_sync_runs_total{platform="github",outcome="complete"}"#))
    })
    .await;

    // A signed delivery from the simulator (a rename) and a forged one.
    sim.set_webhook(Some(WebhookTarget {
        url: hook.clone(),
        secret,
        hook_id: 1,
    }));
    let repo = sim.repos()[0].id;
    sim.rename_repo(repo, "renamed-by-hook");
    let forged = client
        .post(&hook)
        .header("content-type", "application/json")
        .header("x-github-event", "repository")
        .header("x-github-delivery", "forged-1")
        .header("x-github-hook-id", "1")
        .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);

    let text = eventually_within(
        "every metric after the sync and the delivery",
        Duration::from_secs(90),
        || async {
            let text = scrapes().await?;
            EXPECTED
                .iter()
                .all(|needle| text.contains(needle))
                .then_some(text)
        },
    )
    .await;
    assert!(
        !text.contains("quantile="),
        "every histogram has buckets, none is a summary:\n{text}"
    );
    assert!(!text.contains(TOKEN), "the token never reaches the metrics");
    let budget_line = text
        .lines()
        .find(|l| l.starts_with("cmcp_rate_budget_remaining{"))
        .unwrap();
    assert!(
        !budget_line.contains("ghp_"),
        "a budget is named by its fingerprint: {budget_line}"
    );

    // Every name the alert rules and the dashboard use is exported.
    let exported = exported_names(&text);
    let rules = deploy("prometheus/cmcp-discovery.rules.yml");
    let dashboard = deploy("grafana/cmcp-discovery.json");
    serde_json::from_str::<serde_json::Value>(&dashboard).expect("the dashboard is JSON");
    for (file, body) in [("rules", &rules), ("dashboard", &dashboard)] {
        let referenced = referenced_names(body);
        assert!(
            referenced.len() > 10,
            "{file} names metrics: {referenced:?}"
        );
        let unknown: Vec<_> = referenced.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "the {file} name metrics no process exports: {unknown:?}\nexported: {exported:?}"
        );
    }
    check_rules_with_promtool();

    // Each process started itself again with two malloc arenas and a
    // fixed mmap threshold (the environment it was given had neither),
    // keeping its process id, its binary and the name it was started by.
    let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_cmcp-discovery")).unwrap();
    for (name, process) in [
        ("worker", &worker),
        ("serve", &serve),
        ("gateway", &gateway),
    ] {
        let pid = process.0.id();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        for setting in ["MALLOC_ARENA_MAX=2", "MALLOC_MMAP_THRESHOLD_=131072"] {
            assert!(
                environ
                    .split(|b| *b == 0)
                    .any(|var| var == setting.as_bytes()),
                "{name} runs with {setting}"
            );
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert_eq!(exe, binary, "{name} runs the binary it was started from");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let arg0 = cmdline.split(|b| *b == 0).next().unwrap();
        assert_ne!(
            arg0, b"/proc/self/exe",
            "{name} keeps the name it was started by"
        );
    }

    // SIGTERM: /readyz 503 while draining (health and metrics still
    // answer), then a clean exit.
    for (name, process, addr) in [
        ("worker", &mut worker, &worker_addr),
        ("serve", &mut serve, &serve_addr),
        ("gateway", &mut gateway, &gateway_addr),
    ] {
        let pid = process.0.id().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(killed.success());
        let ready = format!("http://{addr}/readyz");
        let seen = eventually_within(
            "/readyz 503 while draining",
            Duration::from_secs(30),
            || async {
                let (status, body) = get(&client, &ready).await?;
                (status == 503).then_some(body)
            },
        )
        .await;
        assert_eq!(seen, "draining");
        let (health, _) = get(&client, &format!("http://{addr}/healthz"))
            .await
            .unwrap();
        assert_eq!(health, 200, "a draining process is alive");
        let status = tokio::task::block_in_place(|| process.0.wait()).unwrap();
        assert!(
            status.success(),
            "{name} exits cleanly: {}",
            fleet.log(name)
        );
        assert!(
            get(&client, &ready).await.is_none(),
            "{name}'s listener is closed after the drain"
        );
    }
}

/// `promtool check rules` when promtool is installed; otherwise a note.
fn check_rules_with_promtool() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/cmcp-discovery.rules.yml");
    match std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("promtool not installed ({e}): the rules' syntax is not checked here"),
    }
}
