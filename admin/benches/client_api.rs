//! Benchmarks of the routes cMCP calls, each printed beside a reference
//! measured in the same run on the same server:
//!
//! - resolve: open-loop load at a fixed rate (2,000 requests a second by
//!   default) over loopback against a registry of 100,000 spaces; p50 and
//!   p99 of `/v1/spaces/resolve` (mixed spellings: remotes, web URLs with
//!   paths inside the repo, full names, addresses) and of a bare
//!   `/healthz` on the same server, and their ratio. Latency is measured
//!   from each request's scheduled start, so a stall counts against it.
//! - manifest: build time and JSON size for a person who may see 1,000
//!   spaces, beside listing the same spaces plainly from the store.
//! - change feed: changes a second read by one client over HTTP from a
//!   feed of 1,000,000 changes, beside reading them straight from the
//!   store.
//!
//! SQLite always; PostgreSQL too when `CMCP_TEST_POSTGRES_URL` is set.
//! Sizes: `CMCP_BENCH_SPACES`, `CMCP_BENCH_CHANGES`, `CMCP_BENCH_SECONDS`,
//! `CMCP_BENCH_RATE`, `CMCP_BENCH_ONLY` (`sqlite` or `postgres`); under `CI=true` the defaults are small so the run is
//! short.
//!
//! Run: `cargo bench -p cmcp-admin --bench client_api`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::get;
use cmcp_admin::{AdminState, create_key};
use cmcp_domain::{Alias, AliasKind, Owner, SpaceAddress, SpaceKind, SpaceRecord, SpaceState};
use cmcp_registry::testing::{TestDb, settle_changes};
use cmcp_registry::{Cursor, SpaceFilter, Store, StoreOptions};

struct Sizes {
    spaces: u64,
    changes: u64,
    seconds: u64,
    rate: u64,
}

fn env_or(name: &str, full: u64, ci: u64) -> u64 {
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if in_ci { ci } else { full })
}

fn sizes() -> Sizes {
    Sizes {
        spaces: env_or("CMCP_BENCH_SPACES", 100_000, 2_000),
        changes: env_or("CMCP_BENCH_CHANGES", 1_000_000, 20_000),
        seconds: env_or("CMCP_BENCH_SECONDS", 5, 1),
        rate: env_or("CMCP_BENCH_RATE", 2_000, 500),
    }
}

fn record(i: u64) -> SpaceRecord {
    let full = format!("acme/repo-{i}");
    SpaceRecord {
        address: SpaceAddress::new(SpaceKind::GithubRepo, "github.com", &i.to_string()).unwrap(),
        display_name: full.clone(),
        container: None,
        aliases: [
            Alias::new(AliasKind::Name, &format!("repo-{i}")),
            Alias::new(AliasKind::FullName, &full),
            Alias::new(AliasKind::WebUrl, &format!("https://github.com/{full}")),
            Alias::new(AliasKind::GitRemote, &format!("git@github.com:{full}.git")),
            Alias::new(AliasKind::HostId, &format!("R_node{i}")),
        ]
        .into_iter()
        .flatten()
        .collect(),
        state: SpaceState::default(),
    }
}

async fn connection(store: &Store, id: &str, owner: Owner) {
    store
        .create_connection(
            &cmcp_registry::testing::cipher(),
            cmcp_registry::NewConnection {
                id: id.to_owned(),
                spec: cmcp_domain::ConnectionSpec {
                    platform: cmcp_domain::Platform::Github,
                    scope: "acme".to_owned(),
                    base_url: "https://api.github.com".to_owned(),
                },
                owner,
                token: cmcp_domain::Token::new("bench-token"),
                settings: serde_json::json!({}),
            },
            "bench",
        )
        .await
        .unwrap();
}

/// The first 1,000 spaces are the company's (alice's manifest); the rest
/// are bob's private spaces. Load runs as bob, who sees them all.
async fn seed_spaces(store: &Store, n: u64) {
    let bob = Owner::Person("bob".into());
    connection(store, "gh", Owner::Company).await;
    connection(store, "gh-bob", bob.clone()).await;
    let mut i = 1;
    while i <= n {
        let page: Vec<SpaceRecord> = (i..(i + 1000).min(n + 1)).map(record).collect();
        let (conn, owner) = if i <= 1000 {
            ("gh", &Owner::Company)
        } else {
            ("gh-bob", &bob)
        };
        store.apply_page(conn, owner, &page).await.unwrap();
        i += 1000;
    }
    settle_after_load(store).await;
}

/// PostgreSQL as a running fleet has it after a bulk load, once
/// autovacuum and the checkpointer have passed (pgbench vacuums before
/// its runs for the same reason):
///
/// - fresh statistics: without them PostgreSQL plans a 500-value `IN`
///   over a bulk-loaded table as a full scan;
/// - hint bits set and the load written out: otherwise the first read of
///   each row dirties its page, and the measured reads share the disk
///   with the writeback of the load's gigabyte of WAL and pages. Without
///   this, single reads stalled 10-20 ms and the resolve p99 ranged from
///   0.8 to 7.8 ms between runs of the same build.
///
/// SQLite gets no statistics, as in the product,
/// which never runs `ANALYZE` there: the bundled SQLite is built with
/// STAT4, and with its samples present a statement whose binds could
/// change its plan is compiled again on every execution (every resolve
/// would be parsed and planned anew).
async fn settle_after_load(store: &Store) {
    if let Store::Postgres(pool) = store {
        for sql in ["VACUUM ANALYZE", "CHECKPOINT"] {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
    }
}

/// The spellings [`fingerprint`] takes in turn, for the bench's lines.
const SPELLINGS: [&str; 5] = [
    "https URL .git",
    "scp remote",
    "www URL in the tree",
    "full name",
    "address",
];

/// The `i`th fingerprint: spelling `i % 5` (see [`SPELLINGS`]) of space
/// `i % n + 1`, URL-encoded.
fn fingerprint(i: u64, n: u64) -> String {
    let id = i % n + 1;
    let raw = match i % SPELLINGS.len() as u64 {
        0 => format!("https://github.com/acme/repo-{id}.git"),
        1 => format!("git@github.com:acme/repo-{id}.git"),
        2 => format!("https://www.github.com/acme/repo-{id}/tree/main/src"),
        3 => format!("acme/repo-{id}"),
        _ => format!("space:github-repo:github.com/{id}"),
    };
    url::form_urlencoded::byte_serialize(raw.as_bytes()).collect()
}

struct Server {
    base: String,
    http: reqwest::Client,
    key: String,
}

async fn serve(store: &Store) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    // As `serve` runs it: keys answered from memory while revocations are
    // heard (PostgreSQL; SQLite reads the store every time).
    let state = AdminState::new(store.clone()).with_key_cache(Duration::from_secs(60));
    let cache = state.keys.clone().unwrap();
    if matches!(store, Store::Postgres(_)) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cache.is_live() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(cache.is_live(), "the key-change listener did not subscribe");
    }
    let app = cmcp_admin::router(state).route("/healthz", get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (_, key) = create_key(store, "bench", "service", &[], "bench")
        .await
        .unwrap();
    Server {
        base,
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(512)
            .build()
            .unwrap(),
        key,
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Open-loop load: `rate` requests a second for `seconds`, each timed from
/// its scheduled start. Returns (p50, p99, failures).
///
/// The schedule is kept by a thread of its own that sleeps to each start
/// (a few tens of microseconds late at worst), not by Tokio's timer, whose
/// millisecond ticks would start requests up to a millisecond late in
/// bursts: a lateness of the bench, not of the server, which would sit in
/// every figure (the `/healthz` reference included).
///
/// The load generator is deliberately lean, as `wrk` is: the server under
/// test shares the machine's two cores with it, so every microsecond it
/// spends is taken from the server and shows in both figures. That thread
/// writes each request itself on an idle keep-alive connection (opening
/// one when none is idle); one small task per connection reads the
/// answers, checks their status and lengths, and gives the connection
/// back. A general-purpose client (reqwest, as before) cost about 270 µs of
/// CPU and ten thread switches per `/healthz` request, more than the
/// server's own work, and its wake-ups were most of both tails.
async fn load(
    srv: &Server,
    rate: u64,
    seconds: u64,
    path: impl Fn(u64) -> String,
) -> (Duration, Duration, u64) {
    let total = rate * seconds;
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let addr: std::net::SocketAddr = srv.base.trim_start_matches("http://").parse().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let requests: Vec<Vec<u8>> = (0..total)
        .map(|i| {
            format!(
                "GET {} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nX-CMCP-Person: bob\r\n\r\n",
                path(i),
                srv.key
            )
            .into_bytes()
        })
        .collect();
    let handle = tokio::runtime::Handle::current();
    let pacer = std::thread::spawn(move || {
        let _runtime = handle.enter();
        let idle: Arc<Mutex<Vec<Arc<lean::Conn>>>> = Arc::default();
        let start = Instant::now() + Duration::from_millis(5);
        for (i, req) in requests.into_iter().enumerate() {
            let at = start + gap * i as u32;
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            let conn = idle.lock().unwrap().pop();
            let conn = match conn {
                Some(c) => c,
                None => match lean::Conn::open(addr, idle.clone(), tx.clone()) {
                    Ok(c) => c,
                    Err(_) => {
                        let _ = tx.send((at.elapsed(), false));
                        continue;
                    }
                },
            };
            if !conn.send(at, &req) {
                let _ = tx.send((at.elapsed(), false));
            }
        }
    });
    let mut times = Vec::with_capacity(total as usize);
    let mut failed = 0;
    while let Some((t, ok)) = rx.recv().await {
        times.push(t);
        failed += u64::from(!ok);
        if times.len() as u64 == total {
            break;
        }
    }
    pacer.join().unwrap();
    times.sort();
    (quantile(&times, 0.5), quantile(&times, 0.99), failed)
}

/// The lean keep-alive connections of [`load`].
mod lean {
    use std::io::Write;
    use std::net::{SocketAddr, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use tokio::io::AsyncReadExt;
    use tokio::sync::mpsc::UnboundedSender;

    pub type Done = UnboundedSender<(Duration, bool)>;

    /// One connection: the pacer writes on `writer`; its reader task reads
    /// the answer to the request due at `due`.
    pub struct Conn {
        writer: TcpStream,
        due: Mutex<Option<Instant>>,
    }

    impl Conn {
        /// Connect and start the reader task (on the runtime the calling
        /// thread has entered).
        pub fn open(
            addr: SocketAddr,
            idle: Arc<Mutex<Vec<Arc<Conn>>>>,
            done: Done,
        ) -> std::io::Result<Arc<Conn>> {
            let stream = TcpStream::connect(addr)?;
            stream.set_nodelay(true)?;
            let reader = stream.try_clone()?;
            // Shared by both handles: the pacer's writes never block (a
            // request is far smaller than the socket's buffer, and only
            // one is outstanding on a connection).
            reader.set_nonblocking(true)?;
            let reader = tokio::net::TcpStream::from_std(reader)?;
            let conn = Arc::new(Conn {
                writer: stream,
                due: Mutex::new(None),
            });
            tokio::spawn(read_answers(conn.clone(), reader, idle, done));
            Ok(conn)
        }

        /// Write one request due at `at`; `false` when it could not be sent.
        pub fn send(&self, at: Instant, request: &[u8]) -> bool {
            *self.due.lock().unwrap() = Some(at);
            (&self.writer).write_all(request).is_ok()
        }
    }

    /// Read answers until the connection fails: each one's status and
    /// length checked, its time sent, the connection given back.
    async fn read_answers(
        conn: Arc<Conn>,
        mut reader: tokio::net::TcpStream,
        idle: Arc<Mutex<Vec<Arc<Conn>>>>,
        done: Done,
    ) {
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        loop {
            let ok = match read_one(&mut reader, &mut buf).await {
                Some(ok) => ok,
                None => {
                    if let Some(at) = conn.due.lock().unwrap().take() {
                        let _ = done.send((at.elapsed(), false));
                    }
                    return;
                }
            };
            let due = conn.due.lock().unwrap().take();
            if let Some(at) = due {
                let _ = done.send((at.elapsed(), ok));
            }
            idle.lock().unwrap().push(conn.clone());
        }
    }

    /// One whole answer; `Some(true)` for a 2xx, `None` when the
    /// connection ended or the answer has no length.
    async fn read_one(reader: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<bool> {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end]).ok()?;
                let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
                let length: usize = head.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })?;
                let whole = end + 4 + length;
                while buf.len() < whole {
                    if reader.read_buf(buf).await.ok()? == 0 {
                        return None;
                    }
                }
                buf.drain(..whole);
                return Some((200..300).contains(&status));
            }
            if reader.read_buf(buf).await.ok()? == 0 {
                return None;
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench_resolve(label: &str, db: &TestDb, s: &Sizes) {
    let t = Instant::now();
    seed_spaces(&db.store, s.spaces).await;
    println!(
        "[{label}] seeded {} spaces in {:.1} s",
        s.spaces,
        t.elapsed().as_secs_f64()
    );
    // Served as `serve` opens its store: the pool opened whole at start
    // (the test database's pool opens connections as they are asked for).
    let store = &Store::connect(&db.url, &StoreOptions::kept())
        .await
        .unwrap();
    let srv = serve(store).await;
    // Warm up at the measured rate, as a server that has been serving:
    // every pooled connection has then run each kind of resolve statement
    // (each connection prepares its own, and a PostgreSQL server process
    // loads its catalogue caches on its first statements).
    load(&srv, s.rate, 2, |i| {
        format!(
            "/v1/spaces/resolve?fingerprint={}",
            fingerprint(i, s.spaces)
        )
    })
    .await;
    // One request at a time: the service time without queueing.
    let mut alone = Vec::new();
    for i in 0..500u64 {
        let t = Instant::now();
        let r = srv
            .http
            .get(format!(
                "{}/v1/spaces/resolve?fingerprint={}",
                srv.base,
                fingerprint(i * 31, s.spaces)
            ))
            .bearer_auth(&srv.key)
            .header("X-CMCP-Person", "bob")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        alone.push(t.elapsed());
    }
    alone.sort();
    println!(
        "[{label}] resolve one at a time: p50 {:.2} ms, p99 {:.2} ms",
        ms(quantile(&alone, 0.5)),
        ms(quantile(&alone, 0.99))
    );
    // The store's own time for the same fingerprints, without HTTP.
    let reads = cmcp_registry::InlineReads::of(store);
    let bob = cmcp_registry::Viewer::Person("bob".into());
    let mut own = Vec::new();
    let mut by_form: [Vec<Duration>; SPELLINGS.len()] = Default::default();
    for i in 0..(s.rate * s.seconds) {
        let n = i * 7927 + 3;
        let fp = fingerprint(n, s.spaces);
        let fp: String = url::form_urlencoded::parse(format!("f={fp}").as_bytes())
            .next()
            .unwrap()
            .1
            .into_owned();
        let t = Instant::now();
        let answer = match &reads {
            Some(r) => r.resolve_one(&fp, Some(&bob)).expect("an inline read"),
            None => store.resolve_one(&fp, Some(&bob)).await,
        };
        let took = t.elapsed();
        own.push(took);
        by_form[(n % SPELLINGS.len() as u64) as usize].push(took);
        assert!(
            matches!(answer, Ok(cmcp_registry::Resolved::Found(_))),
            "{fp}"
        );
    }
    own.sort();
    println!(
        "[{label}] resolve in the store alone ({}): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        if reads.is_some() { "inline" } else { "pool" },
        ms(quantile(&own, 0.5)),
        ms(quantile(&own, 0.99)),
        ms(quantile(&own, 1.0))
    );
    let each: Vec<String> = SPELLINGS
        .iter()
        .zip(by_form.iter_mut())
        .map(|(form, t)| {
            t.sort();
            format!(
                "{form} {:.3}/{:.3}",
                ms(quantile(t, 0.5)),
                ms(quantile(t, 0.99))
            )
        })
        .collect();
    println!(
        "[{label}] the same by spelling (p50/p99 ms): {}",
        each.join(", ")
    );
    let (h50, h99, hf) = load(&srv, s.rate, s.seconds, |_| "/healthz".to_owned()).await;
    let n = s.spaces;
    let (r50, r99, rf) = load(&srv, s.rate, s.seconds, |i| {
        format!(
            "/v1/spaces/resolve?fingerprint={}",
            fingerprint(i * 7919, n)
        )
    })
    .await;
    println!(
        "[{label}] resolve at {} req/s for {} s over {} spaces: p50 {:.2} ms, p99 {:.2} ms ({rf} failed); \
         /healthz p50 {:.2} ms, p99 {:.2} ms ({hf} failed); p99 ratio resolve/healthz {:.2}",
        s.rate,
        s.seconds,
        s.spaces,
        ms(r50),
        ms(r99),
        ms(h50),
        ms(h99),
        ms(r99) / ms(h99).max(1e-6)
    );
    bench_manifest(label, store, &srv).await;
}

async fn bench_manifest(label: &str, store: &Store, srv: &Server) {
    // alice may see the 1,000 company spaces, none of bob's.
    let rounds = 10;
    let t = Instant::now();
    let mut entries = 0;
    for _ in 0..rounds {
        entries = store
            .manifest("alice", None, 50_000)
            .await
            .unwrap()
            .spaces
            .len();
    }
    let build = t.elapsed() / rounds;
    let t = Instant::now();
    for _ in 0..rounds {
        store
            .list_spaces(&SpaceFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let plain = t.elapsed() / rounds;
    let t = Instant::now();
    let body = srv
        .http
        .get(format!("{}/v1/people/alice/manifest", srv.base))
        .bearer_auth(&srv.key)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let http = t.elapsed();
    println!(
        "[{label}] manifest of {entries} spaces: built in {:.1} ms (listing the same rows: {:.1} ms, ratio {:.1}); \
         over HTTP {:.1} ms, {} KiB of JSON ({:.0} bytes a space)",
        ms(build),
        ms(plain),
        ms(build) / ms(plain).max(1e-6),
        ms(http),
        body.len() / 1024,
        body.len() as f64 / entries.max(1) as f64
    );
}

async fn bench_feed(label: &str, store: &Store, s: &Sizes) {
    let t = Instant::now();
    let insert = "INSERT INTO space_changes (kind, space_address, owner, detail, at) ";
    match store {
        Store::Sqlite(pool) => {
            let sql = format!(
                "{insert} WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
                SELECT 'alias-added', 'space:github-repo:github.com/' || i, 'company', \
                '{{\"alias_kind\":\"name\",\"value\":\"repo\",\"raw\":\"repo\"}}', i FROM n"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(s.changes as i64)
                .execute(pool)
                .await
                .unwrap();
        }
        Store::Postgres(pool) => {
            let sql = format!(
                "{insert} SELECT 'alias-added', 'space:github-repo:github.com/' || i, 'company', \
                '{{\"alias_kind\":\"name\",\"value\":\"repo\",\"raw\":\"repo\"}}', i FROM generate_series(1, $1) i"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(s.changes as i64)
                .execute(pool)
                .await
                .unwrap();
        }
    }
    settle_changes(store).await;
    println!(
        "[{label}] wrote {} changes in {:.1} s",
        s.changes,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let mut after = Cursor::default();
    let mut read = 0u64;
    loop {
        let page = store.changes(after, 10_000, None).await.unwrap();
        if page.next == after {
            break;
        }
        read += page.changes.len() as u64;
        after = page.next;
    }
    let direct = t.elapsed();
    let srv = serve(store).await;
    let t = Instant::now();
    let mut after = "0".to_owned();
    let mut over_http = 0u64;
    loop {
        let page: serde_json::Value = srv
            .http
            .get(format!("{}/v1/changes?after={after}&limit=10000", srv.base))
            .bearer_auth(&srv.key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let next = page["next"].as_str().unwrap().to_owned();
        over_http += page["changes"].as_array().unwrap().len() as u64;
        if next == after {
            break;
        }
        after = next;
    }
    let http = t.elapsed();
    println!(
        "[{label}] feed: {over_http} changes over HTTP in {:.1} s ({:.0} changes/s); from the store {read} in {:.1} s \
         ({:.0} changes/s); ratio HTTP/store time {:.2}",
        http.as_secs_f64(),
        over_http as f64 / http.as_secs_f64(),
        direct.as_secs_f64(),
        read as f64 / direct.as_secs_f64(),
        http.as_secs_f64() / direct.as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = sizes();
    // `CMCP_BENCH_ONLY=sqlite` or `postgres` runs one backend.
    let only = std::env::var("CMCP_BENCH_ONLY").unwrap_or_default();
    if only != "postgres" {
        let db = TestDb::sqlite().await;
        bench_resolve("sqlite", &db, &s).await;
        let db = TestDb::sqlite().await;
        bench_feed("sqlite", &db.store, &s).await;
    }
    if only == "sqlite" {
        return;
    }
    if let Some(db) = TestDb::postgres().await {
        bench_resolve("postgres", &db, &s).await;
        drop(db);
        if let Some(db) = TestDb::postgres().await {
            bench_feed("postgres", &db.store, &s).await;
        }
    }
}
