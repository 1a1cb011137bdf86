//! A fleet on PostgreSQL, with real worker processes of the binary: a
//! worker killed (SIGKILL) in the middle of a sync loses nothing; another
//! picks the job up once the dead one's heartbeat and lease lapse, and the
//! registry ends exactly equal to the upstream, with no duplicate space.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cmcp_domain::{Owner, RunOutcome, RunTrigger};
use cmcp_fixtures::{GithubSim, GithubSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Cipher, Store};
use cmcp_tests::{CONNECTION, assert_registry_matches, eventually_within, init_tls};
use cmcp_worker::{Queue, QueueConfig, SyncConnection};

const FLEET_CONFIG: &str = r#"
log = "info"
[http]
per_page = 20
backoff_min = "20ms"
backoff_max = "200ms"
[queue]
poll_interval = "100ms"
heartbeat = "1s"
missed_heartbeats = 2
[sync]
lease_ttl = "2s"
"#;

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(dir: &std::path::Path, url: &str, key: &str, name: &str) -> Worker {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_cmcp-discovery"))
        .args([
            "--config",
            dir.join("fleet.toml").to_str().expect("utf-8 path"),
            "worker",
        ])
        .env("CMCP_DISCOVERY_DATABASE_URL", url)
        .env("CMCP_DISCOVERY_MASTER_KEY", key)
        .env("CMCP_DISCOVERY_DATA_DIR", dir)
        .env("HOSTNAME", name)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start a worker process");
    Worker(child)
}

async fn spaces(store: &Store) -> u64 {
    store.count_spaces(Some(CONNECTION), None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_mid_sync_is_finished_by_another_without_duplicates() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    init_tls();
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let key = hex::encode([7u8; 32]);
    let cipher = Cipher::from_key_text(&key).unwrap();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 1000,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        latency: Duration::from_millis(60),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    // The workers open the token with the same master key as this test.
    db.store
        .create_connection(
            &cipher,
            cmcp_registry::NewConnection {
                id: CONNECTION.to_owned(),
                spec: cmcp_domain::ConnectionSpec {
                    platform: cmcp_domain::Platform::Github,
                    scope: "acme".into(),
                    base_url: sim.base_url(),
                },
                owner: Owner::Company,
                token: cmcp_domain::Token::new(cmcp_tests::TOKEN),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fleet.toml"), FLEET_CONFIG).unwrap();

    let mut first = start_worker(dir.path(), &db.url, &key, "worker-a");
    let qcfg = QueueConfig {
        heartbeat: Duration::from_secs(1),
        missed_heartbeats: 2,
        ..QueueConfig::default()
    };
    Queue::new(&db.store, &qcfg)
        .push(
            SyncConnection::new(CONNECTION, cmcp_domain::RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();

    // Kill the first worker once it has written part of the catalogue.
    eventually_within(
        "the first worker to write some pages",
        Duration::from_secs(30),
        || async { (spaces(&db.store).await >= 200).then_some(()) },
    )
    .await;
    first.0.kill().expect("SIGKILL the first worker");
    let _ = first.0.wait();
    let written = spaces(&db.store).await;
    assert!(
        written < 1001,
        "the kill came mid-sync ({written} spaces written)"
    );
    let runs = db.store.list_runs(Some(CONNECTION), 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].outcome,
        RunOutcome::Running,
        "the killed run never finished"
    );

    let _second = start_worker(dir.path(), &db.url, &key, "worker-b");
    eventually_within(
        "a complete run by the second worker",
        Duration::from_secs(90),
        || async {
            db.store
                .list_runs(Some(CONNECTION), 10)
                .await
                .unwrap()
                .iter()
                .any(|r| r.outcome == RunOutcome::Complete)
                .then_some(())
        },
    )
    .await;

    assert_registry_matches(&db.store, &sim).await;
    assert_eq!(
        spaces(&db.store).await,
        1001,
        "1000 repos and the org, no duplicates"
    );
    let runs = db.store.list_runs(Some(CONNECTION), 10).await.unwrap();
    let complete = runs
        .iter()
        .find(|r| r.outcome == RunOutcome::Complete)
        .unwrap();
    assert!(
        complete
            .worker
            .as_deref()
            .unwrap_or_default()
            .contains("worker-b"),
        "{runs:#?}"
    );
    let abandoned = runs
        .iter()
        .find(|r| r.worker.as_deref().unwrap_or_default().contains("worker-a"))
        .unwrap();
    assert_eq!(
        abandoned.outcome,
        RunOutcome::Failed,
        "the dead worker's run is closed as abandoned"
    );
    assert!(
        abandoned
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("abandoned")
    );
}

/// Two worker processes, one PostgreSQL, two connections holding the same
/// token: the credential's budget lives in the store, so together they never
/// send a request the upstream's budget does not allow, and both finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_sharing_a_token_never_exceed_its_budget() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    init_tls();
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let key = hex::encode([9u8; 32]);
    let cipher = Cipher::from_key_text(&key).unwrap();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 300,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        rate_limit: Some(cmcp_fixtures::RateLimitConfig {
            limit: 12,
            window: Duration::from_secs(1),
        }),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    // The second connection is a person's: it reads the same org with the
    // same token but writes none of the company's spaces.
    for (id, owner) in [
        ("github-acme", Owner::Company),
        ("github-alice", Owner::Person("alice".into())),
    ] {
        db.store
            .create_connection(
                &cipher,
                cmcp_registry::NewConnection {
                    id: id.to_owned(),
                    spec: cmcp_domain::ConnectionSpec {
                        platform: cmcp_domain::Platform::Github,
                        scope: "acme".into(),
                        base_url: sim.base_url(),
                    },
                    owner,
                    token: cmcp_domain::Token::new(cmcp_tests::TOKEN),
                    settings: serde_json::json!({}),
                },
                "test",
            )
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    // One sync at a time per process, so each process takes one connection.
    let config = FLEET_CONFIG.replace("[queue]", "[queue]\nconcurrency = 1");
    std::fs::write(dir.path().join("fleet.toml"), config).unwrap();
    let queue = Queue::new(&db.store, &QueueConfig::default());
    // The first process takes the company's sync; once it is under way the
    // second process starts and takes the person's, so both spend the one
    // budget at the same time.
    let _a = start_worker(dir.path(), &db.url, &key, "budget-a");
    queue
        .push(
            SyncConnection::new("github-acme", cmcp_domain::RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();
    eventually_within(
        "the first sync to start",
        Duration::from_secs(30),
        || async {
            (!db.store
                .list_runs(Some("github-acme"), 10)
                .await
                .unwrap()
                .is_empty())
            .then_some(())
        },
    )
    .await;
    let _b = start_worker(dir.path(), &db.url, &key, "budget-b");
    queue
        .push(
            SyncConnection::new("github-alice", cmcp_domain::RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();
    eventually_within(
        "both connections to finish a complete run",
        Duration::from_secs(120),
        || async {
            let mut done = 0;
            for id in ["github-acme", "github-alice"] {
                if db
                    .store
                    .list_runs(Some(id), 10)
                    .await
                    .unwrap()
                    .iter()
                    .any(|r| r.outcome == RunOutcome::Complete)
                {
                    done += 1;
                }
            }
            (done == 2).then_some(())
        },
    )
    .await;
    let stats = sim.stats();
    assert_eq!(
        stats.over_budget, 0,
        "no request beyond the budget: {stats:?}"
    );
    assert!(
        stats.requests > 24,
        "the two syncs needed more than two budget windows: {stats:?}"
    );
    let workers: std::collections::BTreeSet<String> = db
        .store
        .list_runs(None, 20)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.outcome == RunOutcome::Complete)
        .filter_map(|r| r.worker)
        .collect();
    assert_eq!(
        workers.len(),
        2,
        "each process ran one of the syncs: {workers:?}"
    );
    assert_registry_matches(&db.store, &sim).await;
}

/// Five queued syncs of one connection, two worker processes and a
/// `sync --wait` beside them, on one PostgreSQL: the runs never overlap,
/// upstream never sees more requests in flight than `max_concurrency`, no
/// live worker's run is closed as abandoned, and `sync --wait` reports the
/// run it queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_syncs_of_one_connection_never_overlap_across_worker_processes() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    init_tls();
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let key = hex::encode([8u8; 32]);
    let cipher = Cipher::from_key_text(&key).unwrap();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 200,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        latency: Duration::from_millis(20),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    db.store
        .create_connection(
            &cipher,
            cmcp_registry::NewConnection {
                id: CONNECTION.to_owned(),
                spec: cmcp_domain::ConnectionSpec {
                    platform: cmcp_domain::Platform::Github,
                    scope: "acme".into(),
                    base_url: sim.base_url(),
                },
                owner: Owner::Company,
                token: cmcp_domain::Token::new(cmcp_tests::TOKEN),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = FLEET_CONFIG.replace("[http]", "[http]\nmax_concurrency = 4");
    std::fs::write(dir.path().join("fleet.toml"), config).unwrap();
    let queue = Queue::new(&db.store, &QueueConfig::default());
    for _ in 0..5 {
        queue
            .push(
                SyncConnection::new(CONNECTION, RunTrigger::Test),
                None,
                None,
            )
            .await
            .unwrap();
    }
    let _a = start_worker(dir.path(), &db.url, &key, "overlap-a");
    let _b = start_worker(dir.path(), &db.url, &key, "overlap-b");
    let waited = Command::new(env!("CARGO_BIN_EXE_cmcp-discovery"))
        .args([
            "--config",
            dir.path().join("fleet.toml").to_str().expect("utf-8 path"),
            "sync",
            CONNECTION,
            "--wait",
            "--timeout-secs",
            "120",
        ])
        .env("CMCP_DISCOVERY_DATABASE_URL", &db.url)
        .env("CMCP_DISCOVERY_MASTER_KEY", &key)
        .env("CMCP_DISCOVERY_DATA_DIR", dir.path())
        .env("HOSTNAME", "overlap-cli")
        .stdin(Stdio::null())
        .output()
        .expect("run sync --wait");
    let stdout = String::from_utf8_lossy(&waited.stdout).into_owned();
    assert!(
        waited.status.success(),
        "sync --wait: {stdout}\n{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    eventually_within("six finished runs", Duration::from_secs(120), || async {
        let runs = db.store.list_runs(Some(CONNECTION), 20).await.unwrap();
        (runs.len() == 6 && runs.iter().all(|r| r.outcome != RunOutcome::Running)).then_some(())
    })
    .await;
    let mut runs = db.store.list_runs(Some(CONNECTION), 20).await.unwrap();
    // The run `sync --wait` printed is one of them, and it completed.
    let reported = runs
        .iter()
        .find(|r| stdout.contains(&format!("run {} of {CONNECTION}: complete", r.id)))
        .unwrap_or_else(|| panic!("{stdout}\n{runs:#?}"));
    assert_eq!(reported.triggered_by, "cli");
    runs.sort_by_key(|r| r.started_at);
    for r in &runs {
        assert_eq!(r.outcome, RunOutcome::Complete, "{runs:#?}");
    }
    for pair in runs.windows(2) {
        assert!(
            pair[0].finished_at.expect("finished") <= pair[1].started_at,
            "overlapping runs: {pair:#?}"
        );
    }
    let stats = sim.stats();
    assert!(stats.max_in_flight <= 4, "{stats:?}");
    let recorded: u64 = runs.iter().map(|r| r.figures.requests).sum();
    assert_eq!(stats.requests, recorded, "{stats:?}");
}

/// An every-minute `[reconcile] schedule`, two worker processes of the
/// binary on one store (a PostgreSQL database, or one SQLite file), two
/// connections, for three minutes: each tick queues one reconcile per
/// connection for the whole fleet, and each runs once, whichever process
/// claimed it. (Takes about three and a half minutes: the ticks are real
/// minutes. The two backends' tests mostly wait, so they run side by side.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_schedule_two_processes_three_minutes_one_reconcile_per_connection_per_tick_postgres()
 {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    every_minute_schedule(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_schedule_two_processes_three_minutes_one_reconcile_per_connection_per_tick_sqlite()
 {
    every_minute_schedule(TestDb::sqlite().await).await;
}

async fn every_minute_schedule(db: TestDb) {
    init_tls();
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let key = hex::encode([6u8; 32]);
    let cipher = Cipher::from_key_text(&key).unwrap();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 20,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    let connections = ["github-acme", "github-acme-mirror"];
    for id in connections {
        db.store
            .create_connection(
                &cipher,
                cmcp_registry::NewConnection {
                    id: id.to_owned(),
                    spec: cmcp_domain::ConnectionSpec {
                        platform: cmcp_domain::Platform::Github,
                        scope: "acme".into(),
                        base_url: sim.base_url(),
                    },
                    owner: Owner::Company,
                    token: cmcp_domain::Token::new(cmcp_tests::TOKEN),
                    settings: serde_json::json!({}),
                },
                "test",
            )
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{FLEET_CONFIG}\n[reconcile]\nschedule = \"* * * * *\"\nspread = \"0s\"\ncheck_every = \"1s\"\nprune_schedule = \"0 0 1 1 *\"\n"
    );
    std::fs::write(dir.path().join("fleet.toml"), config).unwrap();

    // Start a few seconds into a minute, so no tick falls within the
    // schedulers' first look back (one `check_every`).
    let now = chrono::Utc::now().timestamp_millis();
    let into_minute = now.rem_euclid(60_000);
    if !(3_000..=40_000).contains(&into_minute) {
        let wait = (60_000 - into_minute + 3_000).rem_euclid(60_000);
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let started = chrono::Utc::now().timestamp_millis();
    let first_tick = (started / 60_000 + 1) * 60_000;
    let ticks: Vec<i64> = (0..3).map(|i| first_tick + i * 60_000).collect();
    let a = start_worker(dir.path(), &db.url, &key, "tick-a");
    let b = start_worker(dir.path(), &db.url, &key, "tick-b");

    let reconciles = |runs: Vec<cmcp_registry::SyncRunRow>| -> Vec<cmcp_registry::SyncRunRow> {
        runs.into_iter()
            .filter(|r| r.triggered_by == RunTrigger::Reconcile)
            .collect()
    };
    // Until every tick claimed so far has its reconcile finished, for each
    // connection, and the three ticks have passed. A fourth tick may come
    // on a loaded machine: its claim and its run count alike.
    let claims_of = |claims: &[(String, i64)], id: &str| -> Vec<i64> {
        claims
            .iter()
            .filter(|(c, _)| c == id)
            .map(|(_, t)| *t)
            .collect()
    };
    let deadline = ticks[2] + 180_000;
    let (claims, runs) = loop {
        let claims = db.store.claimed_ticks("reconcile").await.unwrap();
        let mut runs = BTreeMap::new();
        for id in connections {
            runs.insert(
                id,
                reconciles(db.store.list_runs(Some(id), 50).await.unwrap()),
            );
        }
        let now = chrono::Utc::now().timestamp_millis();
        // Past the third tick is not enough: its claim comes up to one
        // `check_every` later, so wait until each connection has it.
        let settled = now > ticks[2]
            && connections.iter().all(|id| {
                let r = &runs[id];
                claims_of(&claims, id).contains(&ticks[2])
                    && r.len() == claims_of(&claims, id).len()
                    && r.iter().all(|r| r.outcome != RunOutcome::Running)
            });
        if settled {
            break (claims, runs);
        }
        if now > deadline {
            let logs: Vec<String> = ["tick-a", "tick-b"]
                .iter()
                .map(|n| {
                    std::fs::read_to_string(dir.path().join(format!("{n}.log"))).unwrap_or_default()
                })
                .collect();
            panic!(
                "the claimed reconciles did not all run.\nclaims: {claims:?}\nruns: {runs:#?}\nlogs:\n{}",
                logs.join("\n----\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    drop((a, b));

    // The fleet claimed each (connection, tick) of the three minutes once
    // (and nothing before them), and ran one reconcile per claim.
    let mut expected: Vec<(String, i64)> = ticks
        .iter()
        .flat_map(|t| connections.map(|c| (c.to_owned(), *t)))
        .collect();
    expected.sort_by_key(|(c, t)| (*t, c.clone()));
    let in_window: Vec<(String, i64)> = claims
        .iter()
        .filter(|(_, t)| *t <= ticks[2])
        .cloned()
        .collect();
    assert_eq!(in_window, expected, "one claim per connection per tick");
    let mut workers = std::collections::BTreeSet::new();
    for id in connections {
        let r = &runs[id];
        assert_eq!(
            r.len(),
            claims_of(&claims, id).len(),
            "{id}: one reconcile per claimed tick: {r:#?}"
        );
        assert!(
            r.iter().all(|r| r.outcome == RunOutcome::Complete),
            "{r:#?}"
        );
        workers.extend(r.iter().filter_map(|r| r.worker.clone()));
    }
    eprintln!("reconciles ran on {workers:?}");
}
