//! What the binary prints: the progress of `sync --wait` off a terminal
//! (plain lines from the figures the worker records while the run goes),
//! the requests a run that ended on an error made, and `--json` on the
//! commands that print data.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

mod support;

use support::cli;

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory with a token file, a fast config and the connection
/// `github-acme` on `sim`.
fn setup(sim: &cmcp_fixtures::GithubSim, config: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fast.toml"), config).unwrap();
    std::fs::write(dir.path().join("token"), cmcp_tests::TOKEN).unwrap();
    let path = dir.path().to_owned();
    let out = run(
        &path,
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "token",
            "--base-url",
            &sim.base_url(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    (dir, path)
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", "fast.toml"];
    all.extend_from_slice(args);
    cli(dir, &all)
}

/// The figures of one plain progress line, `(pages, items, requests)`.
fn figures_of(line: &str) -> Option<(u64, u64, u64)> {
    let num = |name: &str| -> Option<u64> {
        let rest = line.split(&format!("{name} ")).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    };
    Some((num("pages")?, num("items")?, num("requests")?))
}

/// Off a terminal, `sync --wait` prints a plain line on stderr each time
/// the run's recorded figures change while it goes: pages, items and
/// requests so far, growing, below the final figures at first. Stdout is
/// still the run as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_wait_prints_plain_progress_lines_off_a_terminal() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 200,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        latency: Duration::from_millis(250),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    // One request at a time: about eleven requests of 250 ms each, so the
    // worker records its figures several times before the end.
    let (_dir, path) = setup(
        &sim,
        "[queue]\npoll_interval = \"100ms\"\n[http]\nper_page = 20\nmax_concurrency = 1\n",
    );
    let out = tokio::task::spawn_blocking(move || {
        run(
            &path,
            &[
                "sync",
                "github-acme",
                "--wait",
                "--json",
                "--timeout-secs",
                "120",
            ],
        )
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(run["outcome"], "complete");
    let run_id = run["id"].as_str().unwrap();
    let lines: Vec<(u64, u64, u64)> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("sync github-acme: {run_id} ")))
        .map(|l| figures_of(l).unwrap_or_else(|| panic!("a progress line: {l}")))
        .collect();
    assert!(
        !lines.is_empty(),
        "progress lines while the run went:\n{stderr}"
    );
    assert!(
        lines
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2 && w[0] != w[1]),
        "each line new and no figure going back: {lines:?}"
    );
    let final_requests = run["figures"]["requests"].as_u64().unwrap();
    let (_, first_items, first_requests) = lines[0];
    assert!(
        first_requests < final_requests && first_items < 201,
        "the first line is from the middle of the run: {lines:?}, final {final_requests}"
    );
    assert!(
        lines.iter().any(|l| l.1 > 0),
        "items counted as pages are applied: {lines:?}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no terminal codes off a terminal"
    );
}

/// A run that ends on an error records the requests it made: a rate
/// limit that stops the listing (the budget is gone for an hour) and a
/// refused token both leave runs whose `requests` match what the upstream
/// received, not 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_ended_by_an_error_record_the_requests_they_made() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 200,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        rate_limit: Some(cmcp_fixtures::RateLimitConfig {
            limit: 5,
            window: Duration::from_secs(3600),
        }),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let (_limited_dir, path) = setup(
        &sim,
        "[queue]\npoll_interval = \"100ms\"\n[http]\nper_page = 20\nmax_attempts = 1\nmax_rate_limit_wait = \"1s\"\n",
    );
    let p = path.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &p,
            &[
                "sync",
                "github-acme",
                "--wait",
                "--json",
                "--timeout-secs",
                "120",
            ],
        )
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let limited: serde_json::Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_ne!(limited["outcome"], "complete", "{limited}");
    let sent = sim.stats().requests;
    assert!(sent >= 2, "the run got some way: {:?}", sim.stats());
    assert_eq!(
        limited["figures"]["requests"].as_u64(),
        Some(sent),
        "{limited}"
    );
    assert!(
        limited["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rate"),
        "{limited}"
    );

    // A refused credential: the request it made is on the run.
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 20,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let (_dir, path) = setup(
        &sim,
        "[queue]\npoll_interval = \"100ms\"\n[http]\nmax_attempts = 1\n",
    );
    sim.revoke_org(cmcp_tests::TOKEN);
    let before = sim.stats().requests;
    let p = path.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &p,
            &["sync", "github-acme", "--wait", "--timeout-secs", "120"],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let out = run(&path, &["runs", "github-acme", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&text(&out).0).unwrap();
    let refused = &runs[0];
    assert_eq!(refused["outcome"], "failed", "{runs}");
    let made = sim.stats().requests - before;
    assert!(made >= 1);
    assert_eq!(
        refused["figures"]["requests"].as_u64(),
        Some(made),
        "{runs}"
    );
    // What the CLI prints for it says so too.
    let out = run(&path, &["runs", "github-acme", "--limit", "1"]);
    assert!(
        text(&out).0.contains(&format!("requests {made} ")),
        "{}",
        text(&out).0
    );
}

/// Every command that prints data prints it as JSON with `--json`: a new
/// key (with the key, once), a revoke, a reconcile queued and one waited
/// for (its runs and the drift report), a confirmation of a held
/// connection's missing spaces, a secret rotation (without the secret) and
/// a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_print_data_print_json() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 5,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let (_dir, path) = setup(&sim, "[queue]\npoll_interval = \"100ms\"\n");
    let json = |args: &[&str]| -> serde_json::Value {
        let out = run(&path, args);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
    };

    let key = json(&[
        "keys", "create", "--role", "admin", "--powers", "mappings", "--name", "ops", "--json",
    ]);
    assert_eq!(key["role"], "admin", "{key}");
    assert_eq!(key["name"], "ops", "{key}");
    assert!(key["key"].as_str().unwrap().starts_with("cmcp_"), "{key}");
    let id = key["id"].as_str().unwrap().to_owned();
    let listed = json(&["keys", "list", "--json"]);
    assert!(
        !listed.to_string().contains(key["key"].as_str().unwrap()),
        "the key is shown once: {listed}"
    );
    let revoked = json(&["keys", "revoke", &id, "--json"]);
    assert_eq!(revoked["revoked_now"], true, "{revoked}");
    let again = json(&["keys", "revoke", &id, "--json"]);
    assert_eq!(again["revoked_now"], false, "{again}");

    let queued = json(&["reconcile", "github-acme", "--json"]);
    assert_eq!(queued["queued"], serde_json::json!(["github-acme"]));
    let p = path.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &p,
            &[
                "reconcile",
                "github-acme",
                "--wait",
                "--json",
                "--timeout-secs",
                "120",
            ],
        )
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let waited: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(waited["runs"][0]["outcome"], "complete", "{waited}");
    assert_eq!(waited["runs"][0]["triggered_by"], "reconcile", "{waited}");
    assert_eq!(
        waited["drift"][0]["connection_id"], "github-acme",
        "{waited}"
    );

    // Most of the org gone at once holds the connection; confirming it
    // says how many spaces were marked missing.
    for repo in sim.repos().iter().take(4) {
        sim.hide_repo_from(cmcp_tests::TOKEN, repo.id);
    }
    let p = path.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &p,
            &[
                "reconcile",
                "github-acme",
                "--wait",
                "--timeout-secs",
                "120",
            ],
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let confirmed = json(&[
        "connection",
        "confirm-missing",
        "github-acme",
        "--reason",
        "the repos moved",
        "--json",
    ]);
    assert_eq!(confirmed["connection"], "github-acme", "{confirmed}");
    assert_eq!(confirmed["marked_missing"], 4, "{confirmed}");

    let rotated = json(&["connection", "rotate-secret", "github-acme", "--json"]);
    assert_eq!(rotated["rotated"], true, "{rotated}");
    assert!(rotated.get("secret").is_none(), "{rotated}");

    let replayed = json(&["deliveries", "replay", "--failed", "--json"]);
    assert_eq!(replayed["replayed"], serde_json::json!([]), "{replayed}");
}
