//! Proposals refreshed against the store: the full recompute (reconcile)
//! against the incremental refresh after a sync that changed 10 spaces,
//! in one registry of 1,000,000 spaces (`CMCP_BENCH_SPACES`) and 10,000
//! places, on SQLite and, when `CMCP_TEST_POSTGRES_URL` is set, on
//! PostgreSQL.
//!
//! The registry is the one of the `matching` bench (one space in five a
//! Bitbucket project, keys, spellings, misspellings, remotes shared with
//! mapped containers), written once per backend with multi-row INSERTs.
//! Each measurement runs in a child process of this binary so its peak
//! memory (VmHWM) is its own; the parent prints the table with the ratio.
//!
//! The sync's changes reach Ada (below): the incremental refresh includes
//! hers.
//!
//! A person's suggestions in the same registry: `ada`, with 10 private
//! repos sharing remotes with company repos (some in mapped containers),
//! refreshed as after a sync of her connection (the company read by index
//! from her spaces), against the same round over the whole registry read
//! at once, what every personal sync did before (computed, not stored: the
//! reference is spared the write).
//!
//! `cargo bench -p cmcp-matching --bench refresh` (with
//! `CMCP_TEST_POSTGRES_URL` for PostgreSQL too).

use std::process::Command;
use std::time::{Duration, Instant};

use cmcp_domain::{
    Alias, AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceRecord,
    SpaceState, Token,
};
use cmcp_matching::suggest::suggest;
use cmcp_matching::{
    Settings, load_input, private_spaces, refresh_changed, refresh_proposals, refresh_suggestions,
};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewConnection, PlaceInput, Store, StoreOptions, SuggestionState};

const PLACES: usize = 10_000;
const CHANGED: usize = 10;
const ROUNDS: usize = 3;
const CONNECTION: &str = "bb-acme";
const PERSON_CONNECTION: &str = "bb-ada";
/// Ada's private repos.
const PRIVATE: usize = 10;
const WORDS: [&str; 8] = [
    "Payments", "Ledger", "Mobile", "Search", "Billing", "Identity", "Growth", "Data",
];

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn project(c: usize) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::BitbucketProject, "acme", &format!("c{c}")).unwrap()
}

fn repo(r: usize) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::BitbucketRepo, "acme", &format!("r{r}")).unwrap()
}

fn remote(r: usize) -> String {
    // One repo in fifty mirrors a repo of a mapped container.
    if r.is_multiple_of(50) {
        format!("example.com/acme/repo-{}", (r / 97) * 97)
    } else {
        format!("example.com/acme/repo-{r}")
    }
}

/// Run `sql` once per chunk of `rows`, `{values}` replaced by one
/// `row_sql` per row with its placeholders renumbered.
async fn insert_rows(store: &Store, sql: &str, row_sql: &str, rows: &[Vec<String>]) {
    let width = rows.first().map_or(0, Vec::len);
    for chunk in rows.chunks(1000) {
        let mut values = Vec::with_capacity(chunk.len());
        for i in 0..chunk.len() {
            let mut one = row_sql.to_owned();
            for k in (1..=width).rev() {
                one = one.replace(&format!("${k}"), &format!("#{}", i * width + k));
            }
            values.push(one.replace('#', "$"));
        }
        let text = sql.replace("{values}", &values.join(", "));
        match store {
            Store::Sqlite(pool) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
                for v in chunk.iter().flatten() {
                    q = q.bind(v);
                }
                q.execute(pool).await.expect("insert");
            }
            Store::Postgres(pool) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
                for v in chunk.iter().flatten() {
                    q = q.bind(v);
                }
                q.execute(pool).await.expect("insert");
            }
        }
    }
}

/// A Bitbucket connection `id` of `owner` over `scope`.
async fn connection(store: &Store, id: &str, scope: &str, owner: Owner) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Bitbucket,
                    scope: scope.to_owned(),
                    base_url: "https://api.bitbucket.org/2.0".to_owned(),
                },
                owner,
                token: Token::new("bb-bench-token"),
                settings: serde_json::json!({}),
            },
            "bench",
        )
        .await
        .expect("connection");
}

async fn build(store: &Store, n: usize) {
    connection(store, CONNECTION, "acme", Owner::Company).await;
    let places: Vec<PlaceInput> = (0..PLACES)
        .map(|i| PlaceInput {
            id: format!("place-{i}"),
            kind: "project".to_owned(),
            name: format!("Team {} {}", WORDS[i % WORDS.len()], i),
            key: Some(format!("K{i}")),
            aliases: vec![],
            members: None,
        })
        .collect();
    store.put_places(&places, "bench").await.expect("places");
    let containers = n / 5;
    let spaces_sql = "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, \
         display_name, container, status, first_seen_at, last_changed_at) VALUES {values}";
    let aliases_sql =
        "INSERT INTO aliases (space_address, kind, value, raw, valid_from) VALUES {values}";
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    let mut mapped = Vec::new();
    for c in 0..containers {
        let p = c % PLACES;
        let name = match c % 4 {
            0 => {
                keys.push(vec![project(c).to_string(), format!("k{p}")]);
                format!("proj {c}")
            }
            1 => format!("team_{}-{}", WORDS[p % WORDS.len()].to_lowercase(), p),
            2 => format!("Team {} {}x", WORDS[p % WORDS.len()], p),
            _ => format!("unknown-{c}-zz"),
        };
        if c.is_multiple_of(97) {
            mapped.push(vec![project(c).to_string(), format!("place-{p}")]);
        }
        rows.push(vec![project(c).to_string(), format!("c{c}"), name]);
    }
    insert_rows(
        store,
        spaces_sql,
        "($1, 'bitbucket-project', 'acme', $2, 'bb-acme', 'company', $3, NULL, 'active', 0, 0)",
        &rows,
    )
    .await;
    insert_rows(store, aliases_sql, "($1, 'key', $2, $2, 0)", &keys).await;
    insert_rows(
        store,
        "INSERT INTO mappings (space_address, place_id, approved_by, created_at) VALUES {values}",
        "($1, $2, 'bench', 0)",
        &mapped,
    )
    .await;
    let repos = n - containers;
    for start in (0..repos).step_by(100_000) {
        let end = (start + 100_000).min(repos);
        let rows: Vec<Vec<String>> = (start..end)
            .map(|r| {
                vec![
                    repo(r).to_string(),
                    format!("r{r}"),
                    format!("PAY-repo-{r}"),
                    project(r % containers.max(1)).to_string(),
                ]
            })
            .collect();
        insert_rows(
            store,
            spaces_sql,
            "($1, 'bitbucket-repo', 'acme', $2, 'bb-acme', 'company', $3, $4, 'active', 0, 0)",
            &rows,
        )
        .await;
        let prints: Vec<Vec<String>> = (start..end)
            .map(|r| vec![repo(r).to_string(), remote(r)])
            .collect();
        insert_rows(store, aliases_sql, "($1, 'git-remote', $2, $2, 0)", &prints).await;
    }
    private_repos(store, n).await;
    // Statistics, as autovacuum keeps them on a registry this size; without
    // them PostgreSQL plans the lookups by fingerprint as scans.
    if let Store::Postgres(pool) = store {
        sqlx::query("ANALYZE").execute(pool).await.expect("analyze");
    }
}

/// Ada's connection and her `PRIVATE` repos: each shares its remote with a
/// company repo, every other one in a mapped container (the
/// suggestions); names headed by a key (`PAY-`).
async fn private_repos(store: &Store, n: usize) {
    connection(store, PERSON_CONNECTION, "ada", Owner::Person("ada".into())).await;
    let repos = n - n / 5;
    let records: Vec<SpaceRecord> = (0..PRIVATE)
        .map(|i| {
            // Repo 97k sits in container 97k, which is mapped (with
            // 5,000 spaces or more: CI's pass); the odd ones anywhere.
            let shared = if i.is_multiple_of(2) {
                (97 * (i + 1)) % repos
            } else {
                (i * 7919 + 13) % repos
            };
            SpaceRecord {
                address: SpaceAddress::new(SpaceKind::BitbucketRepo, "ada", &format!("own{i}"))
                    .unwrap(),
                display_name: format!("PAY-own-{i}"),
                container: None,
                aliases: Alias::new(AliasKind::GitRemote, &remote(shared))
                    .into_iter()
                    .collect(),
                state: SpaceState::default(),
            }
        })
        .collect();
    store
        .apply_page(PERSON_CONNECTION, &Owner::Person("ada".into()), &records)
        .await
        .expect("private repos");
}

/// What a sync changing `CHANGED` repos writes: renames and new remotes,
/// some of them now shared with a repo of a mapped container, and one
/// with Ada's first repo (so the refresh also refreshes her suggestions,
/// as it does for whoever a company sync reaches).
async fn sync_changes(store: &Store, n: usize, round: usize) {
    let containers = n / 5;
    let repos = n - containers;
    let records: Vec<SpaceRecord> = (0..CHANGED)
        .map(|i| {
            let r = (round * 7919 + i * 104_729) % repos;
            let remote = if i == 1 {
                remote(97)
            } else if i.is_multiple_of(2) {
                format!("example.com/acme/repo-{}", 97 * i)
            } else {
                format!("example.com/acme/renamed-{r}-{round}")
            };
            SpaceRecord {
                address: repo(r),
                display_name: format!("PAY-renamed-{r}-{round}"),
                container: Some(project((r + round + 1) % containers)),
                aliases: Alias::new(AliasKind::GitRemote, &remote)
                    .into_iter()
                    .collect(),
                state: SpaceState::default(),
            }
        })
        .collect();
    store
        .apply_page(CONNECTION, &Owner::Company, &records)
        .await
        .expect("apply");
}

async fn child(mode: &str, url: &str, n: usize) {
    let store = Store::connect(url, &StoreOptions::default())
        .await
        .expect("store");
    let settings = Settings::default();
    let base_kb = status_kb("VmRSS:");
    match mode {
        "full" => {
            let started = Instant::now();
            let f = refresh_proposals(&store, &settings).await.expect("full");
            let s = started.elapsed().as_secs_f64();
            println!(
                "{s:.3}\t{}\t{base_kb}\t{}\t{}",
                status_kb("VmHWM:"),
                f.proposed,
                f.superseded
            );
        }
        "suggest" | "suggest-whole" => {
            let mut times = Vec::new();
            // By index: Ada's open suggestions stored after the rounds
            // (the incremental refresh before reached her already) and
            // those withdrawn (none: the rounds find the same); the whole
            // registry: the suggestions its round finds.
            let (mut found, mut withdrawn) = (0, 0);
            for _ in 0..ROUNDS {
                let started = Instant::now();
                if mode == "suggest" {
                    let f = refresh_suggestions(&store, "ada").await.expect("suggest");
                    withdrawn += f.withdrawn;
                } else {
                    // The round as every personal sync ran it before: the
                    // whole registry read, then Ada's spaces against it
                    // (computed, not stored).
                    let private = private_spaces(&store, "ada").await.expect("private");
                    let (places, company, mappings) = load_input(&store).await.expect("input");
                    found = suggest(&places, &company, &mappings, &private).len() as u64;
                }
                times.push(started.elapsed());
            }
            if mode == "suggest" {
                let stored = store.list_suggestions("ada").await.expect("stored");
                found = stored
                    .iter()
                    .filter(|s| s.state == SuggestionState::Open)
                    .count() as u64;
            }
            times.sort();
            println!(
                "{:.4}\t{}\t{base_kb}\t{found}\t{withdrawn}",
                times[ROUNDS / 2].as_secs_f64(),
                status_kb("VmHWM:"),
            );
        }
        _ => {
            // Round 0 builds the place index (cold); the rest reuse it.
            let mut times = Vec::new();
            let mut last = Default::default();
            for round in 0..=ROUNDS {
                sync_changes(&store, n, round).await;
                let started = Instant::now();
                last = refresh_changed(&store, &settings)
                    .await
                    .expect("incremental");
                times.push(started.elapsed());
            }
            let cold = times.remove(0);
            times.sort();
            let f: cmcp_registry::ProposalFigures = last;
            println!(
                "{:.4}\t{}\t{base_kb}\t{}\t{}\t{:.4}",
                times[ROUNDS / 2].as_secs_f64(),
                status_kb("VmHWM:"),
                f.proposed,
                f.superseded,
                cold.as_secs_f64()
            );
        }
    }
}

fn run_child(mode: &str, url: &str, n: usize) -> Vec<f64> {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .args(["--child", mode, url, &n.to_string()])
        .output()
        .expect("run child");
    assert!(
        out.status.success(),
        "{mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split('\t')
        .map(|v| v.parse().unwrap_or(0.0))
        .collect()
}

async fn backend(name: &str, db: TestDb, n: usize) {
    let started = Instant::now();
    build(&db.store, n).await;
    let built = started.elapsed();
    // The first full round also moves the ladder's position to the head.
    let full = run_child("full", &db.url, n);
    let incr = run_child("incremental", &db.url, n);
    // Ada's suggestions were opened by the incremental refresh (its sync
    // reached her); the rounds by index then find and withdraw nothing,
    // and hold as many open as the whole registry finds.
    let near = run_child("suggest", &db.url, n);
    let whole = run_child("suggest-whole", &db.url, n);
    let mib = |kb: f64| kb / 1024.0;
    println!(
        "{name:>10} {n:>9} {:>8.1} {:>8.2} {:>9.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>8.0}",
        built.as_secs_f64(),
        full[0],
        mib(full[1]),
        incr[5] * 1000.0,
        incr[0] * 1000.0,
        mib(incr[1]),
        mib(incr[2]),
        full[0] / incr[0].max(1e-9),
    );
    println!(
        "{:>10} suggestions of a person with {PRIVATE} repos: whole registry {:.1} ms ({:.1} MiB), \
         by index {:.2} ms ({:.1} MiB; base {:.1}): {:.0}x; open by index {} (the whole registry finds {})",
        "",
        whole[0] * 1000.0,
        mib(whole[1]),
        near[0] * 1000.0,
        mib(near[1]),
        mib(near[2]),
        whole[0] / near[0].max(1e-9),
        near[3],
        whole[3],
    );
    assert!(
        near[3] > 0.0 && near[3] == whole[3] && near[4] == 0.0,
        "by index, Ada has {} open suggestions and her rounds withdrew {}; the whole registry finds {}",
        near[3],
        near[4],
        whole[3]
    );
    drop(db);
    std::thread::sleep(Duration::from_millis(100));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let n = args[i + 3].parse().expect("size");
        rt.block_on(child(&args[i + 1], &args[i + 2], n));
        return;
    }
    let n: usize = std::env::var("CMCP_BENCH_SPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!(
        "proposals refresh, {n} spaces ({} containers), {PLACES} places; incremental: a sync changing {CHANGED} repos, median of {ROUNDS}",
        n / 5
    );
    println!(
        "{:>10} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "backend",
        "spaces",
        "build s",
        "full s",
        "full MiB",
        "cold ms",
        "incr ms",
        "incr MiB",
        "base MiB",
        "ratio"
    );
    println!(
        "(full: the reconcile's recompute, peak RSS of its process; cold: the first refresh of a \
         process, which builds the place index; incr: median of the next {ROUNDS}; ratio: full / incr)"
    );
    // `CMCP_BENCH_BACKENDS=sqlite` or `postgres` runs one of them only.
    let only = std::env::var("CMCP_BENCH_BACKENDS").unwrap_or_default();
    rt.block_on(async {
        if only != "postgres" {
            backend("sqlite", TestDb::sqlite().await, n).await;
        }
        if only != "sqlite"
            && let Some(db) = TestDb::postgres().await
        {
            backend("postgres", db, n).await;
        }
    });
}
