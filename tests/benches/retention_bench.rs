//! Retention benchmark: the database size over a simulated month of
//! deliveries and nightly reconciles, with retention on (the defaults: a
//! week of history) against the same month with retention off, measured in
//! the same run.
//!
//! A simulated day is one pass of the loop; its real start time is
//! recorded, and each night prunes with the cut-off "the start of the day a
//! week ago", so retention keeps exactly seven simulated days. Every day:
//! `RENAMES` repositories are renamed upstream, each a signed webhook the
//! gateway stores and a worker processes (re-read, `handle-delivery` job
//! done); `PUSHES` ignored `push` deliveries of `PUSH_BODY` bytes arrive
//! (the gateway's decision, recorded through the store); `QUIET` renames
//! no webhook announces; then the nightly reconcile runs, and (with
//! retention on) the prune.
//!
//! Delivery rows are pruned after `KEEP_DELIVERY_DAYS` simulated days
//! (their bodies after a week), so the size levels off once both windows
//! are full; the last line gives the growth from then to the month's end.
//!
//! Run: `cargo bench -p cmcp-tests --bench retention_bench` (PostgreSQL
//! too when `CMCP_TEST_POSTGRES_URL` is set).

use std::time::{Duration, Instant};

use cmcp_domain::{Platform, RunTrigger};
use cmcp_fixtures::{GithubSimConfig, WebhookTarget};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, NewDelivery, Store};
use cmcp_tests::{CONNECTION, Harness, cipher, fast_http, serve_gateway, start_worker};
use cmcp_worker::{RetentionConfig, run_sync};

const DAYS: usize = 30;
const KEEP_DAYS: usize = 7;
/// Delivery rows outlive their bodies (`keep_deliveries`, 90 days by
/// default); here 14 simulated days, so a month shows where the size
/// levels off once both windows are full.
const KEEP_DELIVERY_DAYS: usize = 14;
const REPOS: usize = 300;
const RENAMES: usize = 20;
const QUIET: usize = 3;
const PUSHES: usize = 100;
const PUSH_BODY: usize = 64 * 1024;

/// What retention keeps by design: the registry itself and its history
/// (a renamed repo's old names still resolve, and every ADMIN decision
/// stays audited). These grow with real changes upstream, not with
/// deliveries or runs; everything else is operational and must level off.
const KEPT: [&str; 4] = ["spaces", "aliases", "audit_log", "owner_changes"];

/// The database's size: (all of it, the part in [`KEPT`]). SQLite: its
/// pages in use (after a checkpoint, less the free list, which later
/// writes reuse), the kept tables' and indexes' pages from `dbstat`.
/// PostgreSQL: tables with their indexes and TOAST after a plain VACUUM.
async fn size(store: &Store) -> (u64, u64) {
    let kept = KEPT.map(|t| format!("'{t}'")).join(", ");
    match store {
        Store::Sqlite(pool) => {
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(pool)
                .await;
            let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
                .fetch_one(pool)
                .await
                .unwrap();
            let (free,): (i64,) = sqlx::query_as("PRAGMA freelist_count")
                .fetch_one(pool)
                .await
                .unwrap();
            let (page,): (i64,) = sqlx::query_as("PRAGMA page_size")
                .fetch_one(pool)
                .await
                .unwrap();
            let sql = format!(
                "SELECT COALESCE(SUM(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m ON d.name = m.name \
                 WHERE m.tbl_name IN ({kept})"
            );
            let (k,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap();
            (((pages - free) * page) as u64, k as u64)
        }
        Store::Postgres(pool) => {
            sqlx::query("VACUUM").execute(pool).await.unwrap();
            let total = "SELECT COALESCE(SUM(pg_total_relation_size(format('%I.%I', schemaname, tablename)::regclass)), 0)::bigint \
                 FROM pg_tables WHERE schemaname IN ('public', 'apalis')";
            let (n,): (i64,) = sqlx::query_as(total).fetch_one(pool).await.unwrap();
            let sql = format!("{total} AND schemaname = 'public' AND tablename IN ({kept})");
            let (k,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap();
            (n as u64, k as u64)
        }
    }
}

fn push(key: String) -> NewDelivery {
    NewDelivery {
        connection_id: CONNECTION.to_owned(),
        platform: Platform::Github,
        delivery_key: key,
        event: "push".to_owned(),
        headers: vec![("x-github-event".to_owned(), "push".to_owned())],
        body: vec![b'x'; PUSH_BODY],
        verification: "hmac-sha256".to_owned(),
        status: DeliveryStatus::Ignored,
        error: None,
        // Real pushes differ; these share their filler bytes, so they carry
        // no hash that would make them replays of each other.
        replay_key: None,
    }
}

/// One simulated month; the size after each night.
async fn month(db: TestDb, retention: bool) -> Vec<(u64, u64)> {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: REPOS,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    run_sync(&h.ctx, CONNECTION, RunTrigger::Bench)
        .await
        .unwrap();
    let secret = h
        .store()
        .current_webhook_secret(&cipher(), CONNECTION)
        .await
        .unwrap();
    let (base, gateway) = serve_gateway(h.store()).await;
    let worker = start_worker(h.store(), &h.ctx);
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    let keep = RetentionConfig::default();
    let mut day_starts: Vec<i64> = Vec::new();
    let mut sizes = Vec::new();
    for day in 0..DAYS {
        day_starts.push(chrono::Utc::now().timestamp_millis());
        h.sim.set_webhook(Some(WebhookTarget {
            url: format!("{base}/hooks/github/{CONNECTION}"),
            secret: secret.expose().to_owned(),
            hook_id: 77,
        }));
        for i in 0..RENAMES {
            let id = ids[(day * RENAMES + i) % ids.len()];
            h.sim.rename_repo(id, &format!("r{day}-{i}"));
        }
        for i in 0..PUSHES {
            h.store()
                .record_delivery(&push(format!("push-{day}-{i}")))
                .await
                .unwrap();
        }
        wait_processed(h.store(), day_starts[day], RENAMES).await;
        h.sim.set_webhook(None);
        for i in 0..QUIET {
            let id = ids[(day * QUIET + i + 7) % ids.len()];
            h.sim.rename_repo(id, &format!("q{day}-{i}"));
        }
        run_sync(&h.ctx, CONNECTION, RunTrigger::Reconcile)
            .await
            .unwrap();
        if retention && day >= KEEP_DAYS {
            // The keep of the defaults, in simulated days.
            let cut = day_starts[day + 1 - KEEP_DAYS];
            // Delivery rows are kept `KEEP_DELIVERY_DAYS` (the default's
            // 90 days scaled into a month, so the plateau shows).
            let rows_cut = day_starts[(day + 1).saturating_sub(KEEP_DELIVERY_DAYS)];
            let before = cmcp_registry::PruneBefore {
                delivery_bodies: cut,
                deliveries: if day + 1 > KEEP_DELIVERY_DAYS {
                    rows_cut
                } else {
                    0
                },
                runs: cut,
                finished_jobs: cut,
                page_cache: cut,
                changes: cut,
            };
            assert_eq!(keep.keep_runs, Duration::from_secs(7 * 86_400));
            h.store().prune(&before).await.unwrap();
        }
        if retention {
            // Finished jobs count time in seconds: a day lasts at least
            // one, so a day's cut-off never splits a second.
            tokio::time::sleep(Duration::from_millis(1_000)).await;
        }
        sizes.push(size(h.store()).await);
    }
    worker.stop().await;
    gateway.abort();
    // Where the rows are: what retention keeps by design (the alias
    // history grows with real changes, not with deliveries) against what
    // it bounds.
    let mut counts = Vec::new();
    for table in [
        "webhook_deliveries",
        "sync_runs",
        "aliases",
        "space_changes",
        "audit_log",
    ] {
        counts.push(format!("{table} {}", rows(h.store(), table).await));
    }
    println!(
        "  retention {}: rows after {DAYS} days: {}",
        if retention { "on" } else { "off" },
        counts.join(", ")
    );
    sizes
}

async fn rows(store: &Store, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let (n,): (i64,) = match store {
        Store::Sqlite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .unwrap(),
        Store::Postgres(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .unwrap(),
    };
    n
}

/// Until the `renames` webhook deliveries received since `since_ms` are
/// processed (older rows may be pruned already).
async fn wait_processed(store: &Store, since_ms: i64, renames: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = store.list_deliveries(CONNECTION).await.unwrap();
        let done = rows
            .iter()
            .filter(|r| {
                r.event != "push"
                    && r.received_at >= since_ms
                    && r.status != DeliveryStatus::Received
            })
            .count();
        if done >= renames {
            return;
        }
        assert!(Instant::now() < deadline, "deliveries were not processed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

async fn compare(
    name: &str,
    open: impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = TestDb>>>,
) {
    let started = Instant::now();
    let off = month(open().await, false).await;
    let on = month(open().await, true).await;
    println!(
        "{name}: database size after each simulated night (MiB), retention on | off; \
         with it on, the part kept by design ({}) and the operational rest",
        KEPT.join(", ")
    );
    for (day, ((a, k), (b, _))) in on.iter().zip(&off).enumerate() {
        if day % 5 == 4 || day == KEEP_DAYS - 1 || day == KEEP_DELIVERY_DAYS || day + 1 == DAYS {
            println!(
                "  day {:>2}: {:>7.2} | {:>7.2}   kept {:>6.2}, operational {:>6.2}",
                day + 1,
                mib(*a),
                mib(*b),
                mib(*k),
                mib(a - k)
            );
        }
    }
    let ((a, k), (b, _)) = (on[DAYS - 1], off[DAYS - 1]);
    let (from, from_kept) = on[KEEP_DELIVERY_DAYS];
    let span = (DAYS - 1 - KEEP_DELIVERY_DAYS) as f64;
    println!(
        "{name}: after {DAYS} days retention on is {:.2}x the size with it off ({:.2} vs {:.2} MiB); \
         days {}..{DAYS} with it on: all {:.2}x, operational {:.2}x ({:+.3} MiB/day), \
         kept by design {:+.3} MiB/day; {:.0} s",
        a as f64 / b.max(1) as f64,
        mib(a),
        mib(b),
        KEEP_DELIVERY_DAYS + 1,
        a as f64 / from.max(1) as f64,
        (a - k) as f64 / (from - from_kept).max(1) as f64,
        (mib(a - k) - mib(from - from_kept)) / span,
        (mib(k) - mib(from_kept)) / span,
        started.elapsed().as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    cmcp_tests::init_tls();
    println!(
        "a day: {RENAMES} webhook renames processed, {PUSHES} ignored pushes of {} KiB, {QUIET} quiet renames, \
         one reconcile of {REPOS} repos; retention keeps {KEEP_DAYS} days, delivery rows {KEEP_DELIVERY_DAYS}",
        PUSH_BODY / 1024
    );
    compare("sqlite", || Box::pin(TestDb::sqlite())).await;
    if TestDb::postgres().await.is_some() {
        compare("postgres", || {
            Box::pin(async { TestDb::postgres().await.expect("postgres") })
        })
        .await;
    }
}
