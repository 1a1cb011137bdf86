//! The binary as a person uses it: the offline demo on a fresh directory,
//! the registry commands after it, and clear errors for common mistakes.

use std::path::Path;
use std::process::Output;

mod support;

use support::{binary, cli};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(feature = "demo")]
#[test]
fn demo_then_list_and_resolve_from_its_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["demo", "--repos", "25"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("renamed 1"), "{stdout}");
    assert!(stdout.contains("acme/payments-api"), "{stdout}");
    assert!(
        dir.path()
            .join(".cmcp-discovery/cmcp-discovery.db")
            .exists()
    );

    assert!(
        stdout.contains("arrived") || stdout.contains("applied in"),
        "the rename arrives by webhook: {stdout}"
    );
    assert!(
        stdout.contains("mapping proposals wait for an ADMIN"),
        "{stdout}"
    );
    assert!(stdout.contains("one-time admin key"), "{stdout}");
    for platform in ["demo-github", "demo-bitbucket", "demo-jira", "demo-drive"] {
        assert!(
            stdout.contains(&format!("of {platform}: complete")),
            "{platform}: {stdout}"
        );
    }

    let out = cli(
        dir.path(),
        &["spaces", "list", "--connection", "demo-github"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("26 spaces"), "{stdout}");
    assert!(stdout.contains("acme/payments-api"));

    let out = cli(
        dir.path(),
        &["spaces", "resolve", "git@127.0.0.1:acme/repo-00003.git"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    // The simulated GitHub is not github.com (only api.github.com may claim
    // that tenant): its tenant is the host it is reached at.
    assert!(stdout.contains("space:github-repo:127.0.0.1/"), "{stdout}");
    assert!(stdout.contains("via retired"), "{stdout}");

    // As the API answers a person: one space, the strongest match.
    let out = cli(
        dir.path(),
        &[
            "spaces",
            "resolve",
            "--person",
            "alice",
            "--json",
            "git@127.0.0.1:acme/repo-00003.git",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let one: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        one["space"]["address"]
            .as_str()
            .unwrap()
            .starts_with("space:github-repo:127.0.0.1/")
    );
    assert_eq!(one["retired"], true);

    // The feed: every change once, and the cursor to go on from.
    let out = cli(
        dir.path(),
        &["changes", "--after", "0", "--limit", "10000", "--json"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let page: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let changes = page["changes"].as_array().unwrap();
    assert!(changes.iter().any(|c| c["kind"] == "space-created"));
    assert!(changes.iter().any(|c| c["kind"] == "alias-retired"));
    let next = page["next"].as_str().unwrap().to_owned();
    let out = cli(dir.path(), &["changes", "--after", &next]);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.trim_end().ends_with(&format!("next: {next}")),
        "{stdout}"
    );

    let out = cli(dir.path(), &["connection", "list"]);
    let (stdout, _) = text(&out);
    assert!(stdout.contains("RISK [write-scope]"), "{stdout}");
    assert!(stdout.contains("last run complete"), "{stdout}");

    // A second demo reuses the connection and the file.
    let out = cli(dir.path(), &["demo", "--repos", "25"]);
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn clear_errors_for_common_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "missing.txt",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("cannot read token file missing.txt"),
        "{}",
        text(&out).1
    );

    let out = cli(dir.path(), &["sync", "nope"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("connection \"nope\" not found"),
        "{}",
        text(&out).1
    );

    let out = cli(
        dir.path(),
        &[
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "connection",
            "list",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(
        err.contains("cannot open the registry") && err.contains("127.0.0.1:1"),
        "{err}"
    );

    let out = cli(dir.path(), &["--database-url", "mysql://x", "migrate"]);
    assert!(
        text(&out).1.contains("neither sqlite: nor postgres"),
        "{}",
        text(&out).1
    );

    std::fs::write(dir.path().join("token"), "ghp_x\n").unwrap();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "token",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "token",
        ],
    );
    assert!(text(&out).1.contains("already exists"), "{}", text(&out).1);
}

/// One HTTP answer with `status_line` to the first request on a free local
/// port; returns the URL of its /healthz.
fn answer_once(status_line: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf);
        let _ = write!(
            conn,
            "HTTP/1.1 {status_line}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        );
    });
    url
}

#[test]
fn health_exits_zero_only_on_a_2xx_answer() {
    let dir = tempfile::tempdir().unwrap();

    let url = answer_once("200 OK");
    let out = cli(dir.path(), &["health", "--url", &url]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("healthy"), "{:?}", text(&out));

    let url = answer_once("503 Service Unavailable");
    let out = cli(dir.path(), &["health", "--url", &url]);
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert!(text(&out).1.contains("503"), "{:?}", text(&out));

    // A closed port: bind, note the port, let it go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{closed}/healthz");
    let out = cli(dir.path(), &["health", "--url", &url]);
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert!(text(&out).1.contains("unhealthy"), "{:?}", text(&out));
}

#[test]
fn health_answers_for_a_running_serve() {
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut serve = binary(dir.path(), &["serve", "--listen", &addr.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start serve");
    let url = format!("http://{addr}/healthz");
    // Until serve has migrated and bound its port, health fails.
    let mut last = None;
    for _ in 0..240 {
        let out = cli(dir.path(), &["health", "--url", &url]);
        if out.status.success() {
            last = Some(out);
            break;
        }
        last = Some(out);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let _ = serve.kill();
    let _ = serve.wait();
    let out = last.unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("200 OK"), "{:?}", text(&out));
}

fn cli_with_key(dir: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut cmd = binary(dir, args);
    if let Some(k) = key {
        cmd.env("CMCP_DISCOVERY_MASTER_KEY", k);
    }
    cmd.output().expect("run cmcp-discovery")
}

fn add_github_connection(dir: &Path, extra: &[&str], key: Option<&str>) -> Output {
    std::fs::write(dir.join("token"), "ghp_x\n").unwrap();
    let mut args = extra.to_vec();
    args.extend([
        "connection",
        "add",
        "github",
        "--org",
        "acme",
        "--token-file",
        "token",
    ]);
    cli_with_key(dir, &args, key)
}

fn replace_key_file(path: &Path) {
    std::fs::write(path, hex::encode([5u8; 32])).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_to_start_without_the_master_key_variable() {
    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = cli_with_key(
        dir.path(),
        &["--database-url", &db.url, "connection", "list"],
        None,
    );
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(err.contains("CMCP_DISCOVERY_MASTER_KEY"), "{err}");
    assert!(
        !dir.path().join(".cmcp-discovery/master.key").exists(),
        "a fleet member never makes its own key"
    );

    // With the fleet's key it starts; another key then fails at start,
    // naming the variable.
    let fleet = hex::encode([3u8; 32]);
    let extra = ["--database-url", db.url.as_str()];
    let out = add_github_connection(dir.path(), &extra, Some(&fleet));
    assert!(out.status.success(), "{}", text(&out).1);
    let other = hex::encode([4u8; 32]);
    let out = cli_with_key(
        dir.path(),
        &["--database-url", &db.url, "connection", "list"],
        Some(&other),
    );
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(
        err.contains("wrong master key") && err.contains("CMCP_DISCOVERY_MASTER_KEY"),
        "{err}"
    );
}

#[test]
fn sqlite_makes_a_key_file_only_with_a_new_database() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join(".cmcp-discovery/master.key");
    let out = add_github_connection(dir.path(), &[], None);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(key_file.exists(), "created together with the new database");

    std::fs::remove_file(&key_file).unwrap();
    let out = cli_with_key(dir.path(), &["connection", "list"], None);
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(err.contains(".cmcp-discovery/master.key"), "{err}");
    assert!(err.contains("missing"), "{err}");
    assert!(!key_file.exists(), "no new key beside an existing database");
}

#[test]
fn a_wrong_key_fails_at_start_naming_the_key_file_or_variable() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join(".cmcp-discovery/master.key");
    let out = add_github_connection(dir.path(), &[], None);
    assert!(out.status.success(), "{}", text(&out).1);

    // The variable wins over the file: a wrong one is named.
    let other = hex::encode([6u8; 32]);
    let out = cli_with_key(dir.path(), &["connection", "list"], Some(&other));
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(
        err.contains("wrong master key") && err.contains("CMCP_DISCOVERY_MASTER_KEY"),
        "{err}"
    );

    // A key file replaced by another key: refused at start, not at sync.
    replace_key_file(&key_file);
    let out = cli_with_key(dir.path(), &["connection", "list"], None);
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(
        err.contains("wrong master key") && err.contains(".cmcp-discovery/master.key"),
        "{err}"
    );
}

/// `sync --wait` among other queued syncs of the same connection (one
/// SQLite file): its worker runs them one at a time, and what it reports
/// is the run it queued, complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_wait_reports_its_own_run_among_queued_syncs() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 60,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fast.toml"),
        "[queue]\npoll_interval = \"100ms\"\n[sync]\nlease_ttl = \"1s\"\n[http]\nper_page = 20\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("token"), cmcp_tests::TOKEN).unwrap();
    let base = sim.base_url();
    let run = |args: &[&str]| {
        let mut all = vec!["--config", "fast.toml"];
        all.extend_from_slice(args);
        cli(dir.path(), &all)
    };
    let out = run(&[
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
    assert!(out.status.success(), "{}", text(&out).1);
    for _ in 0..4 {
        let out = run(&["sync", "github-acme"]);
        assert!(out.status.success(), "{}", text(&out).1);
    }
    let out = tokio::task::spawn_blocking(move || {
        let mut all = vec!["--config", "fast.toml", "sync", "github-acme", "--wait"];
        all.extend_from_slice(&["--timeout-secs", "120"]);
        cli(dir.path(), &all)
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("of github-acme: complete"), "{stdout}");
    assert!(!stdout.contains("abandoned"), "{stdout}");
}

/// Logs on a pipe carry no colour codes (nor with `NO_COLOR` on a
/// terminal), `--log-format json` writes one JSON object a line, and a log
/// filter that does not parse stops the start naming the key and its
/// layer instead of silently becoming `info`.
#[test]
fn log_format_colour_and_a_bad_filter() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["--log", "debug", "migrate"]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("DEBUG") || stderr.contains("INFO"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes on a pipe: {stderr:?}"
    );

    let fresh = tempfile::tempdir().unwrap();
    let out = cli(
        fresh.path(),
        &["--log", "info", "--log-format", "json", "migrate"],
    );
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "migrate logs what it applied");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }

    let out = binary(dir.path(), &["migrate"])
        .env("CMCP_DISCOVERY_LOG", "info,[=")
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("key `log`") && stderr.contains("CMCP_DISCOVERY_LOG"),
        "{stderr}"
    );
}

/// The small defects operators met, each with what it now says: `runs` of
/// an unknown connection is an error and an empty history says so; the
/// README's Jira example (a bare site host) is accepted; a Bitbucket base
/// URL ending in /2.0 gets a hint instead of a later "workspace not found";
/// the app-password refusal names the flags the CLI takes.
#[test]
fn small_defects_get_clear_answers() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["runs", "nope"]);
    assert!(!out.status.success(), "runs of an unknown connection");
    assert!(
        text(&out).1.contains("\"nope\" not found"),
        "{}",
        text(&out).1
    );

    std::fs::write(dir.path().join("token"), "secret-token\n").unwrap();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "jira",
            "--site",
            "acme.atlassian.net",
            "--email",
            "you@acme.example",
            "--token-file",
            "token",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        text(&out).0.contains("jira-acme-atlassian-net"),
        "{}",
        text(&out).0
    );
    let out = cli(dir.path(), &["runs", "jira-acme-atlassian-net"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        text(&out)
            .0
            .contains("no runs of jira-acme-atlassian-net yet"),
        "{}",
        text(&out).0
    );

    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "bitbucket",
            "--workspace",
            "acme",
            "--token-file",
            "token",
            "--base-url",
            "https://api.bitbucket.org/2.0",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("adds /2.0 itself"),
        "{}",
        text(&out).1
    );

    // An app password goes with a user name, not an e-mail.
    std::fs::write(dir.path().join("app-password"), "ATBBx\n").unwrap();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "bitbucket",
            "--workspace",
            "acme",
            "--email",
            "jdoe",
            "--token-file",
            "app-password",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(err.contains("--email") && !err.contains("basic:<"), "{err}");
}

/// Documented exit codes: 2 for a usage error (clap's), 3 for a sync that
/// ended partial (a page kept failing), 1 for other errors; `--json` on
/// `sync --wait` prints the run. Completions and the manual page are
/// generated from the same command tree.
#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_json_completions_and_manual() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 60,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        faults: cmcp_fixtures::Faults {
            failing_pages: [2].into(),
            ..cmcp_fixtures::Faults::default()
        },
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fast.toml"),
        "[queue]\npoll_interval = \"100ms\"\n[http]\nper_page = 20\nmax_attempts = 1\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("token"), cmcp_tests::TOKEN).unwrap();
    let base = sim.base_url();
    let path = dir.path().to_owned();
    let run = move |args: &[&str]| {
        let mut all = vec!["--config", "fast.toml"];
        all.extend_from_slice(args);
        cli(&path, &all)
    };
    let out = run(&["sync", "--no-such-flag", "x"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let out = run(&["sync", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    let out = run(&[
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
    assert!(out.status.success(), "{}", text(&out).1);
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "sync",
            "github-acme",
            "--wait",
            "--json",
            "--timeout-secs",
            "120",
        ])
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(run["outcome"], "partial", "{run}");
    assert!(stderr.contains("ended partial"), "{stderr}");

    let out = cli(dir.path(), &["completions", "bash"]);
    assert!(out.status.success());
    assert!(text(&out).0.contains("cmcp-discovery") && text(&out).0.contains("webhook"));
    let out = cli(dir.path(), &["man"]);
    assert!(out.status.success());
    assert!(
        text(&out).0.starts_with(".ie") || text(&out).0.contains(".TH"),
        "{}",
        text(&out).0
    );
}

/// `connection add` and `webhook-info` print JSON when asked: the row
/// without its token, and the secret only with --show-secret (audited).
#[test]
fn connection_add_and_webhook_info_print_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "ghp_jsonsecret\n").unwrap();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "token",
            "--json",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let row: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(row["id"], "github-acme", "{row}");
    assert!(!stdout.contains("ghp_jsonsecret"), "{stdout}");

    let out = cli(
        dir.path(),
        &["connection", "webhook-info", "github-acme", "--json"],
    );
    let info: serde_json::Value = serde_json::from_str(&text(&out).0).expect("JSON");
    assert!(
        info["url"]
            .as_str()
            .unwrap()
            .ends_with("/hooks/github/github-acme"),
        "{info}"
    );
    assert!(info["secret"].is_null(), "{info}");
    let out = cli(
        dir.path(),
        &[
            "connection",
            "webhook-info",
            "github-acme",
            "--json",
            "--show-secret",
        ],
    );
    let info: serde_json::Value = serde_json::from_str(&text(&out).0).expect("JSON");
    assert!(
        info["secret"].as_str().is_some_and(|s| !s.is_empty()),
        "{info}"
    );
    let out = cli(dir.path(), &["audit", "--json"]);
    assert!(
        text(&out).0.contains("connection.webhook-secret-shown"),
        "{}",
        text(&out).0
    );
}

/// `doctor` changes nothing and says what to fix: on a fresh directory the
/// schema and the key are missing; once migrated, with a connection whose
/// token the platform accepts and a public URL platforms can reach, every
/// check passes; a loopback public URL and a token the platform refuses
/// fail, each with its fix, and the exit code is 1.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_checks_a_setup_and_names_the_fix() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 5,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let doctor = move |public_url: &str| {
        binary(&path, &["doctor", "--json"])
            .env("CMCP_DISCOVERY_PUBLIC_URL", public_url)
            .output()
            .unwrap()
    };
    let verdicts = |out: &Output| -> Vec<(String, bool)> {
        let v: serde_json::Value = serde_json::from_str(&text(out).0).expect("JSON checks");
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["check"].as_str().unwrap().to_owned(),
                    c["ok"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let public = "https://discovery.acme.example";

    let out = tokio::task::block_in_place(|| doctor(public));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(verdicts(&out), [("store".to_owned(), false)]);
    assert!(
        !dir.path().join(".cmcp-discovery").exists(),
        "doctor made nothing"
    );
    // A registry file without its schema or its key (a key file lost):
    // both are named.
    std::fs::create_dir_all(dir.path().join(".cmcp-discovery")).unwrap();
    std::fs::write(dir.path().join(".cmcp-discovery/cmcp-discovery.db"), b"").unwrap();
    let out = tokio::task::block_in_place(|| doctor(public));
    assert_eq!(out.status.code(), Some(1));
    let v = verdicts(&out);
    assert!(v.contains(&("migrations".into(), false)), "{v:?}");
    assert!(v.contains(&("master key".into(), false)), "{v:?}");
    assert!(
        !dir.path().join(".cmcp-discovery/master.key").exists(),
        "doctor made no key"
    );
    std::fs::remove_dir_all(dir.path().join(".cmcp-discovery")).unwrap();

    std::fs::write(dir.path().join("token"), cmcp_tests::TOKEN).unwrap();
    let base = sim.base_url();
    let out = cli(
        dir.path(),
        &[
            "connection",
            "add",
            "github",
            "--org",
            "acme",
            "--token-file",
            "token",
            "--base-url",
            &base,
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let out = tokio::task::block_in_place(|| doctor(public));
    let v = verdicts(&out);
    assert!(v.iter().all(|(_, ok)| *ok), "{v:?}\n{}", text(&out).0);
    assert!(
        v.contains(&("credential of github-acme".into(), true)),
        "{v:?}"
    );
    assert_eq!(out.status.code(), Some(0));

    let out = tokio::task::block_in_place(|| doctor("http://127.0.0.1:8080"));
    assert_eq!(out.status.code(), Some(1));
    assert!(verdicts(&out).contains(&("public url".into(), false)));

    sim.revoke_org(cmcp_tests::TOKEN);
    let out = tokio::task::block_in_place(|| doctor(public));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        verdicts(&out).contains(&("credential of github-acme".into(), false)),
        "{}",
        text(&out).0
    );
    assert!(text(&out).0.contains("fix"), "{}", text(&out).0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_link_github_checks_the_token_shows_its_risk_and_unlinks() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 3,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let alice_token = "ghp_aliceCliTokenThatMustNeverLeak0001";
    sim.add_user("alice", 7_001, alice_token, Some("repo"));
    sim.create_user_repo("alice", "notes", true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alice-token"), alice_token).unwrap();
    std::fs::write(dir.path().join("bad-token"), "ghp_nobodyKnowsThisOne").unwrap();
    let base = sim.base_url();
    let path = dir.path().to_owned();
    let run = move |args: Vec<String>| {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&path, &args)
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

    let out = run(args(&[
        "people",
        "link-github",
        "alice",
        "--token-file",
        "bad-token",
        "--base-url",
        &base,
    ]))
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(!stderr.contains("ghp_nobodyKnowsThisOne"), "{stderr}");

    let out = run(args(&[
        "people",
        "link-github",
        "alice",
        "--token-file",
        "alice-token",
        "--base-url",
        &base,
    ]))
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("linked GitHub account alice for alice as connection gh-alice-alice"),
        "{stdout}"
    );
    assert!(stdout.contains("risk (write-scope)"), "{stdout}");
    assert!(!stdout.contains(alice_token) && !stderr.contains(alice_token));

    let out = run(args(&["people", "accounts", "alice"])).await.unwrap();
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("gh-alice-alice") && stdout.contains("write-scope"),
        "{stdout}"
    );

    let out = run(args(&["people", "unlink", "bob", "gh-alice-alice"]))
        .await
        .unwrap();
    assert!(!out.status.success(), "bob may not unlink alice");
    let out = run(args(&[
        "people",
        "unlink",
        "alice",
        "gh-alice-alice",
        "--json",
    ]))
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let gone: serde_json::Value = serde_json::from_str(&stdout).expect("unlink as JSON");
    assert_eq!(gone["connection"], "gh-alice-alice", "{gone}");
    // Its first sync was only queued: nothing was seen or tombstoned.
    assert_eq!(gone["sightings_removed"], 0, "{gone}");
    assert_eq!(gone["tombstoned"], 0, "{gone}");
    let out = run(args(&["people", "accounts", "alice"])).await.unwrap();
    assert!(!text(&out).0.contains("gh-alice-alice"));
}

/// `places import` loads the places and refreshes everyone's suggestions;
/// a person whose refresh fails (here a broken row of theirs in the store)
/// is named on stderr and makes the exit status non-zero, yet the places
/// are loaded and the people after them are refreshed.
#[tokio::test]
async fn places_import_names_the_people_whose_suggestions_failed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("places.json"),
        r#"[{"id": "pay", "kind": "project", "name": "Payments", "key": "PAY", "members": ["bob"]}]"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("token"), "ghp_x\n").unwrap();
    for person in ["alice", "bob"] {
        let id = format!("gh-{person}");
        let out = cli(
            dir.path(),
            &[
                "connection",
                "add",
                "github",
                "--org",
                "acme",
                "--token-file",
                "token",
                "--id",
                &id,
                "--person",
                person,
            ],
        );
        assert!(out.status.success(), "{}", text(&out).1);
    }
    // Each person has a private space, and alice an open suggestion that
    // her next round withdraws (deletes); the store refuses that write (a
    // trigger, as a constraint or a broken row of hers would).
    let file = dir.path().join(".cmcp-discovery/cmcp-discovery.db");
    let store = cmcp_registry::Store::connect(
        &format!("sqlite:{}", file.display()),
        &cmcp_registry::StoreOptions::default(),
    )
    .await
    .unwrap();
    let cmcp_registry::Store::Sqlite(pool) = &store else {
        unreachable!()
    };
    for (person, n) in [("alice", 1), ("bob", 2)] {
        sqlx::query(
            "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, \
             display_name, status, first_seen_at, last_changed_at) \
             VALUES ($1, 'github-repo', 'github.com', $2, $3, $4, $5, 'active', 0, 0)",
        )
        .bind(format!("space:github-repo:github.com/{n}"))
        .bind(n.to_string())
        .bind(format!("gh-{person}"))
        .bind(format!("person:{person}"))
        .bind(format!("{person}/notes"))
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::raw_sql(
        "INSERT INTO suggestions (person, space_address, target, kind, evidence_json, \
           evidence_text, confidence, evidence_hash, state, created_at, updated_at) \
         VALUES ('alice', 'space:github-repo:github.com/1', 'place:gone', 'link', '[]', '', \
           50, 'h', 'open', 0, 0); \
         CREATE TRIGGER refuse_alice BEFORE DELETE ON suggestions WHEN OLD.person = 'alice' \
         BEGIN SELECT RAISE(ABORT, 'no suggestions for alice'); END;",
    )
    .execute(pool)
    .await
    .unwrap();
    store.close().await;

    let out = cli(dir.path(), &["places", "import", "places.json"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("places: 1 created"),
        "the places are loaded: {stdout}"
    );
    assert!(
        stdout.contains("suggestions: 1 people refreshed, 1 failed"),
        "{stdout}"
    );
    let error = stderr
        .lines()
        .find(|l| l.contains("the places are loaded"))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(
        error.contains("alice") && !error.contains("bob"),
        "only alice's failed: {error}"
    );

    let out = cli(dir.path(), &["places", "list"]);
    assert!(text(&out).0.contains("Payments"));

    // `--json` counts them as `PUT /v1/places` answers; the error names them.
    let out = cli(dir.path(), &["places", "import", "--json", "places.json"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer["suggestions"],
        serde_json::json!({"refreshed": 1, "failed": 1}),
        "{stdout}"
    );
    assert!(
        stderr.contains("suggestions of alice could not"),
        "{stderr}"
    );
}
