//! Sustained signed GitHub deliveries accepted durably, on SQLite and (when
//! `CMCP_TEST_POSTGRES_URL` is set) PostgreSQL, for 7.6 KB and 50 KB
//! bodies at 16 clients, against references measured in the same run:
//!
//! - ours back to back (rate, p50, p99), in `BENCH_ROUNDS` rounds that
//!   alternate with pgbench's and the peer's, and paced at half load (p99):
//!   half of the larger of our rate and the reference's on PostgreSQL,
//!   half of ours on SQLite; latency counts from when a request was due;
//! - SQLite also paced at PostgreSQL's half-load rate for the same body
//!   (when both backends run, on a fresh store after both): "the same
//!   load" as PostgreSQL's, which may be near SQLite's own limit;
//! - the database's single-row INSERT rate at the same client count and
//!   body size: `pgbench` with a custom script when it is installed, and
//!   an equivalent sqlx loop (autocommit, one statement each) always;
//!   and pgbench paced at ours' half-load rate (`-R`), its p99 read from
//!   its per-transaction log and counted from when each INSERT was due,
//!   the store's own tail at that load;
//! - a peer, when `BENCH_PEER_URL` names one (signed with
//!   `BENCH_PEER_SECRET`, default `bench-peer-secret`): `peer.mjs` beside
//!   this file is a minimal Node receiver (its header says how to run it;
//!   it needs `npm install @octokit/webhooks-methods pg`, never done by the
//!   build).
//!
//! The load generator writes and reads HTTP/1.1 by hand over keep-alive
//! connections, as `wrk` does (`load.rs`), on threads of its own, apart
//! from the runtime that serves our gateway: it shares the two cores with
//! the gateway and the database, so a heavier client would be measured as
//! the server's cost.
//!
//! Every accepted delivery is checked afterwards to have its row, named by
//! exactly one job; the run fails (after its table) when one is not, or when a phase
//! accepted nothing. CI runs a one-second pass of it in the dev profile
//! (`.ci/run`), so that it keeps building and its checks keep holding.
//! The machine's load average is printed with the figures: on a shared
//! machine they move with it. So is the page cache still to be written
//! back when a phase starts: right after a build it slows every write.
//! Each round also says how busy the machine's cores were and how much of
//! their time each delivery (or pgbench INSERT) took, every process
//! together: a server that leaves cores idle shows it there, whatever its
//! rate.
//!
//! `cargo bench -p cmcp-webhook-gateway --bench deliveries`
//! Knobs: `BENCH_SECONDS` (8, a phase), `BENCH_CONCURRENCY` (16),
//! `BENCH_SIZES` (`7669,51200` bytes), `BENCH_COMMIT_WRITERS`,
//! `BENCH_COMMIT_WINDOW_MS`, `BENCH_COMMIT_BATCH_MAX`,
//! `BENCH_COMMIT_OVERLAP_BYTES` (the gateway's
//! `[gateway]` settings; defaults as there), `BENCH_BACKENDS`
//! (`sqlite,postgres`), `BENCH_ROUNDS` (4), `BENCH_SETUP_SQL` (statements
//! run on the PostgreSQL registry once it is set up: a schema change tried
//! without a migration).

mod load;
mod machine;
mod refs;

use std::time::Duration;

use cmcp_domain::Platform;
use cmcp_registry::Store;
use cmcp_registry::testing::{TestDb, cipher, company_connection};
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, listen, router};
use load::{Bodies, Figures, Pace};
use machine::{Cpu, load_average, pressure, unwritten};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Knobs {
    seconds: Duration,
    /// Rounds the back-to-back phase is cut into, alternating with pgbench.
    rounds: usize,
    clients: usize,
    sizes: Vec<usize>,
    peer: Option<(String, String)>,
    gateway: GatewayConfig,
}

/// One line of the closing table.
struct Line {
    backend: &'static str,
    size: usize,
    ours: (f64, f64, f64),
    /// The rate offered, ours' p99 and pgbench's at that rate.
    half: (f64, f64, Option<f64>),
    /// pgbench's mean rate, and the median of ours ÷ pgbench round by round.
    pgbench: Option<(f64, f64)>,
    sqlx: f64,
    /// The peer's rate, and the median of ours ÷ peer round by round.
    peer: Option<(f64, f64)>,
    stored_ok: bool,
}

fn row(what: &str, f: &Figures) {
    println!(
        "  {what:<46} {:>8.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} ok of {})",
        f.rate(),
        f.percentile_ms(0.50),
        f.percentile_ms(0.99),
        f.ok,
        f.sent
    );
}

async fn setup(store: &Store) -> String {
    cmcp_worker::queue::setup(store)
        .await
        .expect("queue tables");
    let secret = company_connection(store, "gh", Platform::Github).await;
    if let (Ok(sql), Store::Postgres(pool)) = (std::env::var("BENCH_SETUP_SQL"), store) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .expect("setup sql");
    }
    secret
}

/// Write out what the phases before left in the log (a `CHECKPOINT` on
/// PostgreSQL, a truncating WAL checkpoint on SQLite), and then whatever
/// else they left in the page cache (`sync`: the references' own files,
/// and SQLite's, whose commits sync nothing), so that the paced phase's
/// latencies are its own and not the flush of the references' hundreds of
/// megabytes. A delivery's answer waits for a sync of its WAL (PostgreSQL's
/// flush, SQLite's [`cmcp_registry::WalSync`]), and a sync queues behind
/// the disk's other writes.
async fn settle(store: &Store) {
    match store {
        Store::Sqlite(pool) => sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(pool)
            .await
            .map(drop),
        Store::Postgres(pool) => sqlx::query("CHECKPOINT").execute(pool).await.map(drop),
    }
    .expect("checkpoint");
    tokio::task::spawn_blocking(|| std::process::Command::new("sync").status())
        .await
        .expect("sync ran")
        .expect("sync");
}

/// Checkpoints PostgreSQL has begun (timed, asked for, or forced by the
/// log's size): one that begins during the paced phase is the server's
/// own stall, not ours. `None` on SQLite, and on a server whose statistics
/// live elsewhere.
async fn checkpoints(store: &Store) -> Option<i64> {
    let Store::Postgres(pool) = store else {
        return None;
    };
    sqlx::query_as::<_, (i64,)>(
        "SELECT (checkpoints_timed + checkpoints_req)::bigint FROM pg_stat_bgwriter",
    )
    .fetch_one(pool)
    .await
    .ok()
    .map(|(n,)| n)
}

/// PostgreSQL's WAL insert position, to tell how much a phase logged: the
/// server's whole log, so it also counts whatever else the server did
/// meanwhile (nothing else writes during a closed round here). `None` on
/// SQLite.
struct Wal(Option<String>);

impl Wal {
    async fn now(store: &Store) -> Wal {
        let Store::Postgres(pool) = store else {
            return Wal(None);
        };
        Wal(
            sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
                .fetch_one(pool)
                .await
                .ok(),
        )
    }

    /// `", WAL n KB each"`: the log written since, per one of `ops`.
    async fn per_op(&self, store: &Store, ops: usize) -> String {
        let (Some(start), Store::Postgres(pool), true) = (&self.0, store, ops > 0) else {
            return String::new();
        };
        let bytes: Option<f64> = sqlx::query_scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8",
        )
        .bind(start)
        .fetch_one(pool)
        .await
        .ok();
        bytes.map_or_else(String::new, |b| {
            format!(", WAL {:.1} KB each", b / ops as f64 / 1024.0)
        })
    }
}

/// Whether the store holds a row for every one of the `accepted`
/// deliveries accepted so far, each named by exactly one job (a batch's
/// deliveries share theirs), and the phases just run accepted any
/// (`phase` of them): a gateway refusing every delivery gives no figure.
/// Prints the counts.
async fn all_stored(store: &Store, accepted: usize, phase: usize) -> bool {
    let sql = "SELECT id FROM webhook_deliveries WHERE status = 'received'";
    let rows: Vec<(String,)> = match store {
        Store::Sqlite(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        Store::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
    }
    .expect("read deliveries");
    let jobs = store.delivery_jobs().await.expect("read jobs");
    let mut named = std::collections::HashMap::new();
    for (_, args) in &jobs {
        for id in args.ids() {
            *named.entry(id.as_str()).or_insert(0) += 1;
        }
    }
    let each_once = rows.len() == named.len()
        && rows
            .iter()
            .all(|(id,)| named.get(id.as_str()).copied() == Some(1));
    println!(
        "  accepted {accepted} in all: rows {}, named by jobs {} ({} jobs{})",
        rows.len(),
        named.len(),
        jobs.len(),
        if each_once { "" } else { "; NOT each row once" }
    );
    phase > 0 && rows.len() == accepted && each_once
}

/// The gateway serving `db` on a port of its own, and the webhook secret
/// of its one GitHub connection.
struct Served {
    url: String,
    secret: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn serve(db: &TestDb, k: &Knobs) -> Served {
    let secret = setup(&db.store).await;
    let app = router(EdgeState {
        store: db.store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(cipher(), k.gateway.clone())),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/github/gh", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = k.gateway.clone();
    let server = tokio::spawn(async move {
        listen::serve(listener, app, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    Served {
        url,
        secret,
        stop,
        server,
    }
}

impl Served {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

async fn bench(backend: &'static str, db: TestDb, k: &Knobs) -> Vec<Line> {
    let served = serve(&db, k).await;
    let (url, secret) = (&served.url, &served.secret);
    let mut lines = Vec::new();
    let mut accepted = 0;
    for &size in &k.sizes {
        let bodies = Bodies::of_size(size);
        let n = bodies.len();
        println!(
            "== {backend}, {n}-byte signed bodies, {} clients, {} s a phase (load average {}; page cache to write back {}) ==",
            k.clients,
            k.seconds.as_secs(),
            load_average(),
            unwritten()
        );
        // Warm-up: connections, prepared statements, the cache.
        let warm = warm_up(url, secret, &bodies).await;
        let Closed {
            ours,
            pgbench,
            peer,
        } = closed_rounds(backend, &db, url, secret, &bodies, k).await;
        let sqlx = refs::insert_loop(&db.url, &bodies, k.clients, k.seconds).await;
        println!(
            "  {:<46} {sqlx:>8.0}/s",
            "sqlx loop, one INSERT a transaction"
        );
        let reference = pgbench.map_or(sqlx, |(rate, _)| rate);
        let half_rate = match backend {
            "postgres" => ours.rate().max(reference) / 2.0,
            _ => ours.rate() / 2.0,
        };
        settle(&db.store).await;
        let checkpoints_before = checkpoints(&db.store).await;
        let pressure_before = pressure();
        let wal = Wal::now(&db.store).await;
        let half = load::run(
            url,
            secret,
            &bodies,
            k.clients,
            Pace::Rate(half_rate),
            k.seconds,
        )
        .await;
        row(
            &format!("ours at half load ({half_rate:.0}/s offered)"),
            &half,
        );
        // Right after a checkpoint, each page's first change logs the
        // whole page: the paced phases log more a delivery than the rounds.
        let logged = wal.per_op(&db.store, half.ok).await;
        let server_checkpoints = match (checkpoints_before, checkpoints(&db.store).await) {
            (Some(before), Some(after)) => format!(
                "; the server began {} checkpoint(s) meanwhile",
                after - before
            ),
            _ => String::new(),
        };
        println!(
            "  {:<46} {}{server_checkpoints}{logged}",
            "  its slowest request",
            stalls(&half)
        );
        if let (Some(before), Some(after)) = (&pressure_before, pressure()) {
            println!(
                "  {:<46} cpu {:.0} ms, io {:.0} ms (some task stalled, from /proc/pressure)",
                "  the machine's stalls meanwhile",
                (after.0 - before.0) as f64 / 1e3,
                (after.1 - before.1) as f64 / 1e3,
            );
        }
        // The store's own tail at the same rate: pgbench paced as ours was,
        // its latency also counted from when each INSERT was due. Every
        // answer of ours waits for a commit, so a commit that stalls (a
        // WAL flush held up by the machine's disk) stalls both alike.
        let pg_half = match backend {
            "postgres" => {
                settle(&db.store).await;
                let wal = Wal::now(&db.store).await;
                let run = refs::pgbench(
                    &db.store,
                    &db.url,
                    &bodies,
                    k.clients,
                    k.seconds,
                    Some(half_rate),
                )
                .await;
                match run {
                    Ok(refs::Pgbench {
                        paced: Some(paced), ..
                    }) => {
                        row("pgbench paced at the same rate", &paced);
                        let logged = wal.per_op(&db.store, paced.ok).await;
                        println!(
                            "  {:<46} {}{logged}",
                            "  its slowest INSERT",
                            stalls(&paced)
                        );
                        Some(paced.percentile_ms(0.99))
                    }
                    Ok(_) => {
                        println!("  pgbench paced: its log held no transactions");
                        None
                    }
                    Err(why) => {
                        println!("  pgbench paced not run ({why})");
                        None
                    }
                }
            }
            _ => None,
        };
        let phase = warm.ok + ours.ok + half.ok;
        accepted += phase;
        let stored_ok = all_stored(&db.store, accepted, phase).await;
        lines.push(Line {
            backend,
            size: n,
            ours: (
                ours.rate(),
                ours.percentile_ms(0.5),
                ours.percentile_ms(0.99),
            ),
            half: (half_rate, half.percentile_ms(0.99), pg_half),
            pgbench,
            sqlx,
            peer: peer.map(|(f, r)| (f.rate(), r)),
            stored_ok,
        });
    }
    served.stop().await;
    lines
}

/// SQLite paced at PostgreSQL's half-load rate for each body size ("the
/// same load" as PostgreSQL's, which may be near SQLite's own limit), on a
/// fresh store after both backends' own phases, so that those run as they
/// did alone: a SQLite phase right after PostgreSQL's (its checkpoints,
/// its database dropped) ran a fifth slower.
async fn sqlite_at_postgres_half(k: &Knobs, rates: &[(usize, f64)]) -> Vec<SameLoad> {
    let db = TestDb::sqlite().await;
    let served = serve(&db, k).await;
    let (url, secret) = (&served.url, &served.secret);
    let mut out = Vec::new();
    let mut accepted = 0;
    for &(size, rate) in rates {
        let bodies = Bodies::of_size(size);
        println!(
            "== sqlite at PostgreSQL's half load, {}-byte signed bodies (load average {}; page cache to write back {}) ==",
            bodies.len(),
            load_average(),
            unwritten()
        );
        let warm = warm_up(url, secret, &bodies).await;
        settle(&db.store).await;
        let f = load::run(url, secret, &bodies, k.clients, Pace::Rate(rate), k.seconds).await;
        row(&format!("ours at PostgreSQL's half load ({rate:.0}/s)"), &f);
        println!("  {:<46} {}", "  its slowest request", stalls(&f));
        let phase = warm.ok + f.ok;
        accepted += phase;
        out.push(SameLoad {
            size,
            rate,
            p99: f.percentile_ms(0.99),
            stored_ok: all_stored(&db.store, accepted, phase).await,
        });
    }
    served.stop().await;
    out
}

/// SQLite at PostgreSQL's half-load rate for one body size: the rate, its
/// p99, and whether every delivery it accepted was stored.
struct SameLoad {
    size: usize,
    rate: f64,
    p99: f64,
    stored_ok: bool,
}

/// The closed-loop phase: ours and the references it is divided by.
struct Closed {
    ours: Figures,
    /// pgbench's mean rate and the median of ours ÷ pgbench, round by round.
    pgbench: Option<(f64, f64)>,
    /// The peer's figures over all rounds and the median of ours ÷ peer.
    peer: Option<(Figures, f64)>,
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Ours back to back, pgbench and the peer (on PostgreSQL), alternating
/// in `k.rounds` rounds that share the phase's time, so that all see the
/// same machine: on a shared machine the rate drifts by a third within
/// minutes, and a reference measured once, after ours, carried that drift
/// into the ratio. Each ratio is the median of the rounds'.
async fn closed_rounds(
    backend: &str,
    db: &TestDb,
    url: &str,
    secret: &str,
    bodies: &Bodies,
    k: &Knobs,
) -> Closed {
    // pgbench runs whole seconds; the others run as long.
    let slice = Duration::from_secs((k.seconds.as_secs() / k.rounds as u64).max(1));
    let on_postgres = backend == "postgres";
    let mut ours: Option<Figures> = None;
    let mut peer: Option<Figures> = None;
    let (mut pg_rates, mut pg_ratios, mut peer_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut ours_cpu = Vec::new();
    if let (true, Some((peer_url, peer_secret))) = (on_postgres, &k.peer) {
        // The peer's warm-up, as ours had one: its connections, and its
        // JIT compiling the hot path (its first second ran at two thirds
        // of its rate, which made round 1's ratio ours' best).
        warm_up(peer_url, peer_secret, bodies).await;
    }
    for round in 1..=k.rounds {
        let cpu = Cpu::now();
        let wal = Wal::now(&db.store).await;
        let f = load::run(url, secret, bodies, k.clients, Pace::Closed, slice).await;
        let mine = f.rate();
        let used = cpu.and_then(|c| c.used_since(f.ok as f64));
        let logged = wal.per_op(&db.store, f.ok).await;
        let mut said = format!(
            "  round {round}: ours {mine:.0}/s{}{logged}",
            in_brackets(&used)
        );
        if let Some(u) = used {
            ours_cpu.push(u.per_op.as_secs_f64());
        }
        absorb(&mut ours, f);
        if !on_postgres {
            println!("{said}");
            continue;
        }
        let cpu = Cpu::now();
        let wal = Wal::now(&db.store).await;
        let started = std::time::Instant::now();
        match refs::pgbench(&db.store, &db.url, bodies, k.clients, slice, None).await {
            Ok(refs::Pgbench { tps, latency, .. }) => {
                let elapsed = started.elapsed();
                let used = cpu.and_then(|c| c.used_since(tps * elapsed.as_secs_f64()));
                let logged = wal
                    .per_op(&db.store, (tps * slice.as_secs_f64()) as usize)
                    .await;
                let latency = latency.map_or_else(String::new, |l| format!(" (mean {l:.2} ms)"));
                said += &format!(
                    ", pgbench {tps:.0}/s{latency}{}{logged}: {:.2}x",
                    in_brackets(&used),
                    mine / tps
                );
                pg_rates.push(tps);
                pg_ratios.push(mine / tps);
            }
            Err(why) => said += &format!(", pgbench not run ({why})"),
        }
        if let Some((peer_url, peer_secret)) = &k.peer {
            let cpu = Cpu::now();
            let wal = Wal::now(&db.store).await;
            let f = load::run(
                peer_url,
                peer_secret,
                bodies,
                k.clients,
                Pace::Closed,
                slice,
            )
            .await;
            let used = cpu.and_then(|c| c.used_since(f.ok as f64));
            let logged = wal.per_op(&db.store, f.ok).await;
            if f.ok == 0 {
                // A peer that is down has no ratio (it would be infinite).
                said += &format!(", peer accepted none of {}", f.sent);
            } else {
                said += &format!(
                    ", peer {:.0}/s{}{logged}: {:.2}x",
                    f.rate(),
                    in_brackets(&used),
                    mine / f.rate()
                );
                peer_ratios.push(mine / f.rate());
            }
            absorb(&mut peer, f);
        }
        println!("{said}");
    }
    let ours = ours.expect("at least one round");
    row("ours", &ours);
    if let Some(each) = median(ours_cpu) {
        println!(
            "  {:<46} {:>8.0} µs (server, database and load generator together)",
            "  machine CPU per delivery, median of the rounds",
            each * 1e6
        );
    }
    let pgbench = median(pg_ratios).map(|r| {
        let mean = pg_rates.iter().sum::<f64>() / pg_rates.len() as f64;
        println!(
            "  {:<46} {mean:>8.0}/s  ours ÷ pgbench, median of {} rounds: {r:.2}x",
            "pgbench, one INSERT a transaction",
            pg_rates.len()
        );
        (mean, r)
    });
    let peer = peer.zip(median(peer_ratios)).inspect(|(f, r)| {
        row(
            &format!("peer {}", k.peer.as_ref().map_or("", |(u, _)| u)),
            f,
        );
        println!("  {:<46} {r:.2}x", "  ours ÷ peer, median of the rounds");
    });
    Closed {
        ours,
        pgbench,
        peer,
    }
}

/// One second at 4 clients: connections, prepared statements, caches and
/// (the Node peer's) JIT, before anything is measured.
async fn warm_up(url: &str, secret: &str, bodies: &Bodies) -> Figures {
    load::run(url, secret, bodies, 4, Pace::Closed, Duration::from_secs(1)).await
}

/// A paced run's slowest request and when it was due, and how many took
/// over 10 ms and when: one stall shows whole here, where p99 shows it only
/// once it delays 1 % of the requests.
fn stalls(f: &Figures) -> String {
    let (slowest, due) = f.slowest();
    let over = match f.over(10.0) {
        (_, None) => "none over 10 ms".to_owned(),
        (n, Some((first, last))) => format!("{n} over 10 ms, due {first:.2}-{last:.2} s in"),
    };
    format!("{slowest:>8.2} ms, due {due:.2} s in; {over}")
}

/// How the machine's cores were used, as " (…)", or nothing where unknown.
fn in_brackets(used: &Option<machine::Used>) -> String {
    used.as_ref()
        .map_or_else(String::new, |u| format!(" ({u})"))
}

fn absorb(all: &mut Option<Figures>, f: Figures) {
    match all {
        Some(all) => all.absorb(f),
        None => *all = Some(f),
    }
}

/// A ratio as the table shows it, or "-" where there is none.
fn times(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
}

fn table(lines: &[Line]) {
    println!();
    println!(
        "{:<9} {:>6} | {:>8} {:>7} {:>7} | {:>9} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | rows",
        "backend",
        "body",
        "ours/s",
        "p50",
        "p99",
        "half /s",
        "half p99",
        "pgb p99",
        "pgbench",
        "sqlx",
        "peer/s",
        "÷pgbench",
        "÷sqlx",
        "÷peer"
    );
    for l in lines {
        println!(
            "{:<9} {:>6} | {:>8.0} {:>7.2} {:>7.2} | {:>9.0} {:>8.2} {:>8} | {:>8} {:>8.0} {:>8} | {:>8} {:>8} {:>8} | {}",
            l.backend,
            format!("{:.1}K", l.size as f64 / 1024.0),
            l.ours.0,
            l.ours.1,
            l.ours.2,
            l.half.0,
            l.half.1,
            l.half.2.map_or_else(|| "-".into(), |p| format!("{p:.2}")),
            l.pgbench
                .map_or_else(|| "-".into(), |(v, _)| format!("{v:.0}")),
            l.sqlx,
            l.peer.map_or_else(|| "-".into(), |p| format!("{:.0}", p.0)),
            times(l.pgbench.map(|(_, r)| r)),
            times(Some(l.ours.0 / l.sqlx)),
            times(l.peer.map(|(_, r)| r)),
            if l.stored_ok { "ok" } else { "MISMATCH" },
        );
    }
    println!(
        "(latencies in ms; half = paced at half load, latency from when each request was due; pgb p99 = pgbench paced at that rate, counted alike)"
    );
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let defaults = GatewayConfig::default();
    let window = knob(
        "BENCH_COMMIT_WINDOW_MS",
        defaults.commit_window.as_millis() as usize,
    );
    let knobs = Knobs {
        seconds: Duration::from_secs(knob("BENCH_SECONDS", 8) as u64),
        rounds: knob("BENCH_ROUNDS", 4).max(1),
        clients: knob("BENCH_CONCURRENCY", 16),
        sizes: std::env::var("BENCH_SIZES")
            .unwrap_or_else(|_| "7669,51200".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        peer: std::env::var("BENCH_PEER_URL").ok().map(|u| {
            let secret =
                std::env::var("BENCH_PEER_SECRET").unwrap_or_else(|_| "bench-peer-secret".into());
            (u, secret)
        }),
        gateway: GatewayConfig {
            commit_writers: knob("BENCH_COMMIT_WRITERS", defaults.commit_writers),
            commit_batch_max: knob("BENCH_COMMIT_BATCH_MAX", defaults.commit_batch_max),
            commit_window: Duration::from_millis(window as u64),
            commit_overlap_bytes: knob("BENCH_COMMIT_OVERLAP_BYTES", defaults.commit_overlap_bytes),
            ..defaults
        },
    };
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "deliveries bench: load average {} at start, {} cores; gateway commit_writers {} (PostgreSQL), commit_window {:?}, commit_batch_max {}, commit_overlap_bytes {}",
        load_average(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        knobs.gateway.commit_writers,
        knobs.gateway.commit_window,
        knobs.gateway.commit_batch_max,
        knobs.gateway.commit_overlap_bytes,
    );
    let (lines, same) = rt.block_on(async {
        let mut lines = Vec::new();
        if backends.contains("sqlite") {
            lines.extend(bench("sqlite", TestDb::sqlite().await, &knobs).await);
        }
        if backends.contains("postgres") {
            match TestDb::postgres().await {
                Some(db) => lines.extend(bench("postgres", db, &knobs).await),
                None => println!("postgres: skipped (set CMCP_TEST_POSTGRES_URL)"),
            }
        }
        let postgres_half: Vec<(usize, f64)> = lines
            .iter()
            .filter(|l: &&Line| l.backend == "postgres")
            .map(|l| (l.size, l.half.0))
            .collect();
        let same = if backends.contains("sqlite") && !postgres_half.is_empty() {
            sqlite_at_postgres_half(&knobs, &postgres_half).await
        } else {
            Vec::new()
        };
        (lines, same)
    });
    table(&lines);
    for s in &same {
        println!(
            "sqlite {:.1}K paced at PostgreSQL's half load ({:.0}/s): p99 {:.2} ms",
            s.size as f64 / 1024.0,
            s.rate,
            s.p99
        );
    }
    println!("load average at the end: {}", load_average());
    // After the table, so that a failing run still shows its figures.
    let short: Vec<String> = lines
        .iter()
        .filter(|l| !l.stored_ok)
        .map(|l| format!("{} {} bytes", l.backend, l.size))
        .chain(
            same.iter()
                .filter(|s| !s.stored_ok)
                .map(|s| format!("sqlite at PostgreSQL's half load {} bytes", s.size)),
        )
        .collect();
    assert!(
        short.is_empty(),
        "accepted deliveries without their row and job, or none accepted: {short:?}"
    );
}
