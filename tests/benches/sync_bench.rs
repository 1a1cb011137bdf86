//! Sync benchmark: simulated GitHub organisations of 10,000, 50,000 and
//! 100,000 repositories with 50 ms of latency per request, synced on
//! SQLite and, when `CMCP_TEST_POSTGRES_URL` is set, on PostgreSQL over
//! TLS (`sslmode=require`) and over a plain connection (`sslmode=disable`).
//!
//! What it prints, per size and backend, each against a reference measured
//! in the same run:
//!
//! - the first sync against the theoretical minimum (pages × latency ÷
//!   allowed concurrency, plus the serial org and first-page requests;
//!   goal ≤ 1.25×) and against the raw floor of the simulator: a bare
//!   HTTP client keeping the same number of requests in flight on the same
//!   pages and doing nothing with them. The raw floor is the bench's own
//!   overhead (the simulator's CPU for generating ~5 KB per repository, and
//!   loopback); what a sync takes beyond it is the product's. The
//!   simulator shares the machine's cores with the sync, as a real GitHub
//!   does not, so it keeps its cost off the sync's path where a real
//!   upstream's would be: it answers at arrival plus the latency with its
//!   own work done during the wait, and renders each listing page once per
//!   state of the org (the raw floor's run renders them; every later run
//!   of the same size is served the same bytes and ETags);
//! - the listing alone (the connector, records discarded), which tells
//!   the HTTP side from the registry side;
//! - PostgreSQL's first sync against SQLite's (goal ≤ 1.10×);
//! - the peak resident memory (`VmHWM`) of the process that synced: every
//!   measured part runs in a child process (this binary again, see
//!   `sync_bench/child.rs`), so the simulator's own memory is not counted.
//!   The growth curve over the sizes shows whether a sync streams (goal:
//!   ≤ 100 MiB at 100,000 and within 10 % between 10,000 and 100,000);
//! - at 50,000, a second sync of the unchanged org: its share of 304s;
//! - the matching ladder's refresh, which every complete sync ends with,
//!   timed alone after the sync with its own peak (`clear_refs`), so its
//!   share is told apart (a first sync's backlog makes it the full
//!   recompute, which pages through the containers).
//!
//! The machine's load average is printed with every row: on a loaded
//! machine the ratios of one run are what counts, not the seconds.
//!
//! Every child runs with two malloc arenas and a fixed mmap threshold, as
//! the product's binary does (`CMCP_SYNC_BENCH_ARENAS=default` gives it
//! glibc's defaults instead).
//!
//! `CMCP_SYNC_BENCH_WRAP` runs each child under a profiler (see
//! [`child`]).
//!
//! Each first sync is checked afterwards to have stored the org and every
//! repository; CI runs a pass at 1,000 repositories in the dev profile.
//!
//! Run: `cargo bench -p cmcp-tests --bench sync_bench`. Sizes:
//! `CMCP_SYNC_BENCH_SIZES=10000,50000` (default `10000,50000,100000`).

use std::process::Command;
use std::time::Duration;

use cmcp_domain::Owner;
use cmcp_fixtures::{GithubSim, GithubSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_tests::{CONNECTION, TOKEN, add_connection};

#[path = "sync_bench/child.rs"]
mod child;

const LATENCY: Duration = Duration::from_millis(50);
const PER_PAGE: u32 = 100;
/// The size whose second sync is measured too.
const RESYNC_AT: usize = 50_000;

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Runs this binary as a child in `mode` with `envs`, and returns its
/// `RESULT` line.
///
/// `CMCP_SYNC_BENCH_WRAP` runs each child under a command, as in
/// `CMCP_SYNC_BENCH_WRAP='heaptrack -o /tmp/sync-%m'` (`%m` becomes the
/// mode, `%n` a count of the children started), to profile what a sync
/// keeps in memory; its peak RSS then includes the wrapper's own.
fn child(mode: &str, envs: &[(&str, String)]) -> serde_json::Value {
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let exe = std::env::current_exe().expect("own path");
    let wrap: Vec<String> = std::env::var("CMCP_SYNC_BENCH_WRAP")
        .unwrap_or_default()
        .split_whitespace()
        .map(|w| w.replace("%m", mode).replace("%n", &n.to_string()))
        .collect();
    let mut cmd = match wrap.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    cmd.env(child::MODE_ENV, mode);
    // The allocator as the product's binary runs (it starts itself again
    // with two malloc arenas and a fixed mmap threshold unless the
    // operator set them; see its `main.rs`). `CMCP_SYNC_BENCH_ARENAS=default`
    // measures glibc's own.
    for (var, value) in MALLOC_SETTINGS {
        if glibc_arenas() {
            cmd.env_remove(var);
        } else {
            cmd.env(var, value);
        }
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {mode} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("child {mode} said no RESULT: {stdout}"));
    serde_json::from_str(line).expect("child RESULT json")
}

/// The product binary's malloc settings (`cmcp-discovery/src/main.rs`).
const MALLOC_SETTINGS: [(&str, &str); 2] = [
    ("MALLOC_ARENA_MAX", "2"),
    ("MALLOC_MMAP_THRESHOLD_", "131072"),
];

/// `CMCP_SYNC_BENCH_ARENAS=default`: children get glibc's own malloc
/// settings.
fn glibc_arenas() -> bool {
    std::env::var("CMCP_SYNC_BENCH_ARENAS").as_deref() == Ok("default")
}

fn mib(kib: &serde_json::Value) -> f64 {
    kib.as_f64().unwrap_or(0.0) / 1024.0
}

/// `url` with its `sslmode` set to `mode` (a later `sslmode` overrides an
/// earlier one).
fn with_sslmode(url: &str, mode: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode={mode}")
}

struct Row {
    repos: usize,
    backend: String,
    first: f64,
    peak_mib: f64,
    load: String,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if let Ok(mode) = std::env::var(child::MODE_ENV) {
        child::run(&mode).await;
        return;
    }
    cmcp_tests::init_tls();
    let sizes: Vec<usize> = std::env::var("CMCP_SYNC_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,50000,100000".to_owned())
        .split(',')
        .map(|s| s.trim().parse().expect("CMCP_SYNC_BENCH_SIZES: numbers"))
        .collect();
    let pg = cmcp_registry::testing::postgres_admin_url();
    let concurrency = child::http().max_concurrency;
    println!(
        "== sync bench: {} ms per request, {concurrency} in flight, {PER_PAGE} per page; malloc {}; load average {}",
        LATENCY.as_millis(),
        if glibc_arenas() {
            "as glibc's defaults".to_owned()
        } else {
            let set: Vec<String> = MALLOC_SETTINGS
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("{}, as the binary runs", set.join(" "))
        },
        load_average()
    );
    if pg.is_none() {
        println!("== postgres: skipped (set CMCP_TEST_POSTGRES_URL)");
    }
    let mut rows: Vec<Row> = Vec::new();
    for &repos in &sizes {
        let sim = GithubSim::start(GithubSimConfig {
            repos,
            latency: LATENCY,
            token: Some(TOKEN.to_owned()),
            ..GithubSimConfig::default()
        })
        .await
        .expect("simulator");
        let pages = repos.div_ceil(PER_PAGE as usize) as u32;
        // The org and page 1 are serial; pages 2..N go `concurrency` at a time.
        let minimum =
            (LATENCY * 2 + LATENCY * (pages - 1).div_ceil(concurrency as u32)).as_secs_f64();
        let sim_env = vec![
            (child::SIM_ENV, sim.base_url()),
            (child::ORG_ENV, sim.org()),
            (child::PAGES_ENV, pages.to_string()),
        ];
        let raw = child("raw", &sim_env)["secs"].as_f64().unwrap_or(0.0);
        let listed = child("listing", &sim_env);
        let listing = listed["secs"].as_f64().unwrap_or(0.0);
        println!(
            "-- {repos} repos, {pages} pages: theoretical minimum {minimum:.2} s; raw client floor {raw:.2} s ({:.2}x min); \
             listing alone {listing:.2} s ({:.2}x min, {:.2}x raw, peak RSS {:.1} MiB); load {}",
            raw / minimum,
            listing / minimum,
            listing / raw,
            mib(&listed["rss_peak_kib"]),
            load_average()
        );
        let mut backends: Vec<(String, Option<String>)> = vec![("sqlite".to_owned(), None)];
        if let Some(admin) = &pg {
            for mode in ["require", "disable"] {
                backends.push((
                    format!("postgres sslmode={mode}"),
                    Some(with_sslmode(admin, mode)),
                ));
            }
        }
        let mut sqlite_first = None;
        for (label, pg_url) in backends {
            let db = match &pg_url {
                None => TestDb::sqlite().await,
                Some(url) => TestDb::postgres_on(url, None).await,
            };
            add_connection(&db.store, CONNECTION, &sim.base_url(), Owner::Company).await;
            let mut envs = sim_env.clone();
            envs.push((child::DB_ENV, db.url.clone()));
            if repos == RESYNC_AT {
                envs.push((child::SECOND_ENV, "1".to_owned()));
            }
            let result = child("sync", &envs);
            let first = &result["first"];
            let secs = first["secs"].as_f64().unwrap_or(0.0);
            let sqlite = *sqlite_first.get_or_insert(secs);
            let peak = mib(&result["first_peak_kib"]);
            println!(
                "{label:<24} first sync {secs:>7.2} s  {:.2}x min  {:.2}x raw  {:.2}x sqlite  requests {} created {}  \
                 peak RSS {peak:.1} MiB (start {:.1})  load {}",
                secs / minimum,
                secs / raw,
                secs / sqlite,
                first["requests"],
                first["created"],
                mib(&result["rss_start_kib"]),
                load_average()
            );
            println!(
                "{:<24} held after it: {:.1} MiB anonymous (heap, stacks), {:.1} MiB of files (the binary)",
                "",
                mib(&result["held"]["anon_kib"]),
                mib(&result["held"]["file_kib"]),
            );
            // What the first sync stored, read back from the registry the
            // child wrote: the org and every repository (checked after the
            // figures are printed, so a failing run still shows them).
            let stored = db
                .store
                .count_spaces(Some(CONNECTION), None)
                .await
                .expect("count spaces");
            assert_eq!(
                stored,
                repos as u64 + 1,
                "{label}: the org and its {repos} repositories are in the registry"
            );
            let ladder = &result["ladder"];
            println!(
                "{:<24} the matching ladder alone, run after: {:.2} s, peak RSS {:.1} MiB",
                "",
                ladder["secs"].as_f64().unwrap_or(0.0),
                mib(&ladder["peak_kib"]),
            );
            let second = &result["second"];
            if !second.is_null() {
                let requests = second["requests"].as_f64().unwrap_or(0.0);
                let share = if requests > 0.0 {
                    second["not_modified"].as_f64().unwrap_or(0.0) * 100.0 / requests
                } else {
                    0.0
                };
                println!(
                    "{:<24} second sync {:>6.2} s  requests {requests} 304s {share:.1} %  created {} updated {} unchanged {}  \
                     peak RSS after both {:.1} MiB",
                    "",
                    second["secs"].as_f64().unwrap_or(0.0),
                    second["created"],
                    second["updated"],
                    second["unchanged"],
                    mib(&result["both_peak_kib"]),
                );
            }
            rows.push(Row {
                repos,
                backend: label,
                first: secs,
                peak_mib: peak,
                load: load_average(),
            });
            drop(db);
        }
        drop(sim);
    }
    println!("== first sync, peak RSS of the syncing process (growth against the smallest size)");
    println!(
        "{:<24} {:>8} {:>9} {:>10} {:>8}  load",
        "backend", "repos", "sync s", "peak MiB", "growth"
    );
    for r in &rows {
        let base = rows
            .iter()
            .find(|b| b.backend == r.backend)
            .map_or(r.peak_mib, |b| b.peak_mib);
        println!(
            "{:<24} {:>8} {:>9.2} {:>10.1} {:>7.1}%  {}",
            r.backend,
            r.repos,
            r.first,
            r.peak_mib,
            (r.peak_mib / base - 1.0) * 100.0,
            r.load
        );
    }
}
