//! Sync benchmark: a 50,000-repository simulated GitHub organisation with
//! 50 ms of latency per request, synced twice on SQLite and, when
//! `CMCP_TEST_POSTGRES_URL` is set, on PostgreSQL over TLS
//! (`sslmode=require`) and over a plain connection (`sslmode=disable`).
//! The first sync on each PostgreSQL connection is printed as a ratio to
//! SQLite's, measured in the same run.
//!
//! Why these figures: the first sync is bound by round trips, so its wall
//! time is printed beside the theoretical minimum (pages × latency ÷
//! allowed concurrency, plus the serial org and first-page requests); the
//! second sync shows what conditional requests save (its share of 304s)
//! and that an unchanged catalogue costs no writes. Peak resident memory
//! (`VmHWM`) shows the listing streams instead of holding the catalogue.
//!
//! Run: `cargo bench -p cmcp-tests --bench sync_bench`.

use std::time::{Duration, Instant};

use cmcp_connectors::{Connector, GithubConnector, HttpConfig};
use cmcp_domain::{RunFigures, Token};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, Harness, TOKEN};
use cmcp_worker::run_sync;

const REPOS: usize = 50_000;
const LATENCY: Duration = Duration::from_millis(50);
const PER_PAGE: u32 = 100;

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

async fn timed_sync(h: &Harness) -> (Duration, RunFigures) {
    let started = Instant::now();
    let result = run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Bench)
        .await
        .expect("sync");
    let elapsed = started.elapsed();
    let (Some(outcome), Some(figures)) = (result.run_outcome(), result.figures().cloned()) else {
        panic!("deferred")
    };
    assert_eq!(
        outcome.as_str(),
        "complete",
        "the benchmark sync must complete"
    );
    (elapsed, figures)
}

/// The listing alone, records discarded: the HTTP side of a sync, without
/// the registry (in-process budget, no cache).
async fn listing_only(h: &Harness, http: &HttpConfig) -> Duration {
    let connector = GithubConnector::new(
        &h.sim.base_url(),
        &h.sim.org(),
        Token::new(TOKEN),
        http.clone(),
    )
    .expect("connector");
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let started = Instant::now();
    let report = connector.list(tx).await.expect("listing");
    let elapsed = started.elapsed();
    drain.await.expect("drain");
    assert!(report.complete, "{:?}", report.failures);
    elapsed
}

async fn bench(label: &str, db: TestDb) -> Duration {
    let http = HttpConfig {
        per_page: PER_PAGE,
        ..HttpConfig::default()
    };
    let concurrency = http.max_concurrency;
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: REPOS,
            latency: LATENCY,
            ..GithubSimConfig::default()
        },
        http.clone(),
    )
    .await;
    let pages = REPOS.div_ceil(PER_PAGE as usize) as u32;
    // The org and page 1 are serial; pages 2..N go `concurrency` at a time.
    let minimum = LATENCY * 2 + LATENCY * (pages - 1).div_ceil(concurrency as u32);

    let listing = listing_only(&h, &http).await;
    h.sim.reset_stats();
    let (first, f1) = timed_sync(&h).await;
    h.sim.reset_stats();
    let (second, f2) = timed_sync(&h).await;
    let share = if f2.requests == 0 {
        0.0
    } else {
        f2.not_modified as f64 * 100.0 / f2.requests as f64
    };
    println!(
        "== {label}: {REPOS} repos, {} ms latency, {concurrency} concurrent",
        LATENCY.as_millis()
    );
    println!(
        "first sync : {:>8.2} s  (theoretical minimum {:.2} s = {pages} pages x {} ms / {concurrency} + 2 serial)  requests {}  pages {}  created {}",
        first.as_secs_f64(),
        minimum.as_secs_f64(),
        LATENCY.as_millis(),
        f1.requests,
        f1.pages,
        f1.created
    );
    println!(
        "listing only (no registry): {:>8.2} s",
        listing.as_secs_f64()
    );
    println!(
        "second sync: {:>8.2} s  requests {}  304s {} ({share:.1} %)  created {} updated {} unchanged {}",
        second.as_secs_f64(),
        f2.requests,
        f2.not_modified,
        f2.created,
        f2.updated,
        f2.unchanged
    );
    match peak_rss_kib() {
        Some(kib) => println!(
            "peak resident memory so far (VmHWM): {:.1} MiB",
            kib as f64 / 1024.0
        ),
        None => println!("peak resident memory: /proc/self/status not readable"),
    }
    first
}

/// `url` with its `sslmode` set to `mode` (a later `sslmode` overrides an
/// earlier one).
fn with_sslmode(url: &str, mode: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode={mode}")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let sqlite = bench("sqlite", TestDb::sqlite().await).await;
    let Some(admin) = cmcp_registry::testing::postgres_admin_url() else {
        println!("== postgres: skipped (set CMCP_TEST_POSTGRES_URL)");
        return;
    };
    let mut table = vec![("sqlite".to_owned(), sqlite)];
    for mode in ["require", "disable"] {
        let label = format!("postgres sslmode={mode}");
        let db = TestDb::postgres_on(&with_sslmode(&admin, mode), None).await;
        table.push((label.clone(), bench(&label, db).await));
    }
    println!("== first sync against SQLite in this run (goal: PostgreSQL <= 1.10x)");
    for (label, took) in &table {
        println!(
            "{label:<26} {:>8.2} s  {:.2}x",
            took.as_secs_f64(),
            took.as_secs_f64() / sqlite.as_secs_f64()
        );
    }
}
