//! The measured side of the sync benchmark, run in a child process so that
//! its peak resident memory (`VmHWM`) and its CPU are the product's alone:
//! the simulator (and the 100,000 repositories it holds) stays in the
//! parent. One mode per child; the answer is one `RESULT {json}` line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cmcp_connectors::{Connector, GithubConnector, HttpConfig};
use cmcp_domain::{RunTrigger, Token};
use cmcp_registry::{Store, StoreOptions};
use cmcp_tests::{CONNECTION, TOKEN, sync_context};
use cmcp_worker::run_sync;
use serde_json::json;

pub const MODE_ENV: &str = "CMCP_SYNC_BENCH_CHILD";
pub const SIM_ENV: &str = "CMCP_SYNC_BENCH_SIM";
pub const ORG_ENV: &str = "CMCP_SYNC_BENCH_ORG";
pub const PAGES_ENV: &str = "CMCP_SYNC_BENCH_PAGES";
pub const DB_ENV: &str = "CMCP_SYNC_BENCH_DB";
pub const SECOND_ENV: &str = "CMCP_SYNC_BENCH_SECOND";

pub fn http() -> HttpConfig {
    HttpConfig {
        per_page: super::PER_PAGE,
        ..HttpConfig::default()
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// A `/proc/self/status` figure of this process, in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `VmHWM` of this process, in KiB.
fn peak_rss_kib() -> u64 {
    status_kib("VmHWM")
}

pub async fn run(mode: &str) {
    cmcp_tests::init_tls();
    let started_rss = peak_rss_kib();
    let result = match mode {
        "raw" => raw().await,
        "listing" => listing().await,
        "sync" => sync().await,
        other => panic!("unknown child mode {other:?}"),
    };
    let mut result = result;
    result["rss_start_kib"] = json!(started_rss);
    result["rss_peak_kib"] = json!(peak_rss_kib());
    println!("RESULT {result}");
}

/// The floor of the simulator: `max_concurrency` loops of a bare HTTP
/// client fetching the same pages (org, page 1, then pages 2..N shared
/// out), reading each body whole and doing nothing else.
async fn raw() -> serde_json::Value {
    let base = env(SIM_ENV);
    let org = env(ORG_ENV);
    let pages: u32 = env(PAGES_ENV).parse().expect("pages");
    let width = http().max_concurrency;
    let client = reqwest::Client::builder().build().expect("client");
    let per_page = super::PER_PAGE;
    let repos = format!("{base}/orgs/{org}/repos?per_page={per_page}&type=all");
    let started = Instant::now();
    fetch(&client, format!("{base}/orgs/{org}")).await;
    fetch(&client, repos.clone()).await;
    let next = Arc::new(AtomicU32::new(2));
    let loops: Vec<_> = (0..width)
        .map(|_| {
            let (next, client, repos) = (next.clone(), client.clone(), repos.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n > pages {
                        break;
                    }
                    fetch(&client, format!("{repos}&page={n}")).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("raw loop");
    }
    json!({ "secs": started.elapsed().as_secs_f64() })
}

/// The listing alone, records discarded: the HTTP side of a sync without
/// the registry (in-process budget, no cache).
async fn listing() -> serde_json::Value {
    let connector = GithubConnector::new(&env(SIM_ENV), &env(ORG_ENV), Token::new(TOKEN), http())
        .expect("connector");
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let started = Instant::now();
    let report = connector.list(tx).await.expect("listing");
    let secs = started.elapsed().as_secs_f64();
    drain.await.expect("drain");
    assert!(report.complete, "{:?}", report.failures);
    json!({ "secs": secs, "requests": report.figures.requests })
}

/// One bare GET, its body read whole.
async fn fetch(client: &reqwest::Client, url: String) -> usize {
    let resp = client
        .get(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "application/vnd.github+json")
        .send()
        .await
        .expect("raw request");
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.bytes().await.expect("raw body").len()
}

/// A first sync of the prepared connection and, when asked, a second one.
async fn sync() -> serde_json::Value {
    let url = env(DB_ENV);
    let store = Store::connect(
        &url,
        &StoreOptions {
            max_connections: 10,
            connect_timeout: Duration::from_secs(10),
            // As a worker keeps its pool.
            ..StoreOptions::kept()
        },
    )
    .await
    .expect("store");
    let ctx = sync_context(&store, http());
    let timed = || async {
        let started = Instant::now();
        let outcome = run_sync(&ctx, CONNECTION, RunTrigger::Bench)
            .await
            .expect("sync");
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(
            outcome.run_outcome().map(|o| o.as_str()),
            Some("complete"),
            "{:?}",
            outcome.error()
        );
        let f = outcome.figures().cloned().expect("figures");
        json!({
            "secs": secs, "requests": f.requests, "pages": f.pages, "created": f.created,
            "updated": f.updated, "unchanged": f.unchanged, "not_modified": f.not_modified,
        })
    };
    let first = timed().await;
    let first_peak = peak_rss_kib();
    // What the process holds once the sync is over (a sync's peak is
    // mostly kept): heap and stacks, and pages of files (the binary).
    let held = json!({ "anon_kib": status_kib("RssAnon"), "file_kib": status_kib("RssFile") });
    let second = if std::env::var(SECOND_ENV).is_ok() {
        timed().await
    } else {
        serde_json::Value::Null
    };
    let both_peak = peak_rss_kib();
    // The matching ladder a complete sync ends with, alone: its time and
    // peak are inside the sync's, so it is shown apart from the listing
    // and the writes.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let started = Instant::now();
    cmcp_matching::refresh_proposals(&store, &Default::default())
        .await
        .expect("refresh proposals");
    let ladder = json!({
        "secs": started.elapsed().as_secs_f64(),
        "peak_kib": if reset { json!(peak_rss_kib()) } else { serde_json::Value::Null },
    });
    json!({
        "first": first, "first_peak_kib": first_peak, "held": held, "second": second,
        "both_peak_kib": both_peak, "ladder": ladder,
    })
}
