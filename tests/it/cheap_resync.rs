//! A re-sync of an unchanged catalogue is cheap: every listing page is
//! answered `304 Not Modified` (no budget spent), the cached pages stand in
//! for them so the listing stays complete, and nothing in the registry is
//! written.

use cmcp_domain::Owner;
use cmcp_domain::{RunOutcome, RunTrigger};
use cmcp_fixtures::{GithubSim, GithubSimConfig, RateLimitConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{PruneBefore, Store};
use cmcp_tests::{
    CONNECTION, Harness, TOKEN, add_connection_with, assert_registry_matches, exec, fast_http,
    init_tls, sync_context,
};
use cmcp_worker::{SyncOutcome, run_sync};

/// Every row a sync could write (spaces, aliases, the connection and the
/// page cache), rendered as text for an exact before/after comparison.
async fn registry_rows(store: &Store) -> Vec<String> {
    macro_rules! rows {
        ($pool:expr) => {{
            let pool = $pool;
            let mut out = Vec::new();
            let spaces: Vec<(String, String, String, i64, Option<i64>, Option<String>)> =
                sqlx::query_as(
                    "SELECT address, display_name, status, last_changed_at, missing_since, \
                     connection_id FROM spaces ORDER BY address",
                )
                .fetch_all(pool)
                .await
                .expect("spaces");
            out.extend(spaces.into_iter().map(|r| format!("space {r:?}")));
            let aliases: Vec<(i64, String, String, String, i64, Option<i64>)> = sqlx::query_as(
                "SELECT id, space_address, kind, value, valid_from, valid_to FROM aliases ORDER BY id",
            )
            .fetch_all(pool)
            .await
            .expect("aliases");
            out.extend(aliases.into_iter().map(|r| format!("alias {r:?}")));
            let connections: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT id, risks, status, updated_at FROM connections ORDER BY id",
            )
            .fetch_all(pool)
            .await
            .expect("connections");
            out.extend(connections.into_iter().map(|r| format!("connection {r:?}")));
            let cache: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT connection_id, url, etag, fetched_at FROM http_cache ORDER BY url",
            )
            .fetch_all(pool)
            .await
            .expect("http_cache");
            out.extend(cache.into_iter().map(|r| format!("cache {r:?}")));
            out
        }};
    }
    match store {
        Store::Sqlite(pool) => rows!(pool),
        Store::Postgres(pool) => rows!(pool),
    }
}

pub async fn unchanged_10000_repo_org_resyncs_with_304s_and_no_writes(db: TestDb) {
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 10_000,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let first = run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .expect("sync");
    let (Some(outcome), Some(figures)) = (first.run_outcome(), first.figures().cloned()) else {
        panic!("deferred");
    };
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(figures.created, 10_001);
    assert_eq!(figures.not_modified, 0, "nothing cached yet");

    let before = registry_rows(h.store()).await;
    assert!(before.iter().filter(|r| r.starts_with("cache ")).count() == 100);
    h.sim.reset_stats();
    let second = run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .expect("sync");
    let (Some(outcome), Some(figures)) = (second.run_outcome(), second.figures().cloned()) else {
        panic!("deferred");
    };
    let error = second.error();
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.pages, 100);
    assert_eq!(figures.not_modified, 100);
    assert_eq!(h.sim.stats().not_modified, figures.pages);
    assert_eq!(
        (
            figures.created,
            figures.updated,
            figures.renamed,
            figures.missing
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(figures.unchanged, 10_001);
    assert_eq!(figures.items_seen, 10_001);
    let after = registry_rows(h.store()).await;
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b, a, "a re-sync of an unchanged org wrote to the registry");
    }
    assert_registry_matches(h.store(), &h.sim).await;
}

both_backends!(
    unchanged_10000_repo_org_resyncs_with_304s_and_no_writes,
    not_modified_pages_are_free_in_the_local_and_shared_budget,
    cached_answers_still_in_use_outlive_the_page_cache_retention,
);

/// A 304 costs nothing upstream, so it costs nothing here either: an
/// unchanged re-sync of 40 pages under a budget of 30 sends every page
/// without waiting, and the shared budget ends where upstream's does.
pub async fn not_modified_pages_are_free_in_the_local_and_shared_budget(db: TestDb) {
    let http = cmcp_connectors::HttpConfig {
        per_page: 25,
        ..fast_http()
    };
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 999,
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    let (outcome, figures, error) = finished(
        run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
            .await
            .unwrap(),
    );
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.pages, 40);
    // From now on upstream grants 30 requests a minute.
    h.sim.set_rate_limit(Some(RateLimitConfig {
        limit: 30,
        window: std::time::Duration::from_secs(60),
    }));
    h.sim.reset_stats();
    let (outcome, figures, error) = finished(
        run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
            .await
            .unwrap(),
    );
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.not_modified, 40, "{figures:?}");
    assert_eq!(
        figures.rate_limit_waits, 0,
        "a 304 was charged: {figures:?}"
    );
    let stats = h.sim.stats();
    assert_eq!((stats.over_budget, stats.rate_limited), (0, 0), "{stats:?}");
    // The shared budget spent exactly what upstream charged.
    let charged = stats.requests - stats.not_modified;
    let budgets = h.store().connection_budgets().await.unwrap();
    assert_eq!(budgets.len(), 1, "{budgets:?}");
    let row = &budgets[0].1;
    assert_eq!(
        row.remaining,
        Some(30 - i64::try_from(charged).unwrap()),
        "{row:?} after {stats:?}"
    );
    assert_eq!(row.in_flight, 0, "{row:?}");
}

fn finished(r: SyncOutcome) -> (RunOutcome, cmcp_domain::RunFigures, Option<String>) {
    match r {
        SyncOutcome::Deferred { holder, .. } => panic!("deferred by {holder}"),
        done => (
            done.run_outcome().expect("a run"),
            done.figures().cloned().unwrap_or_default(),
            done.error().map(str::to_owned),
        ),
    }
}

/// Moves every cached answer `days` back in time.
async fn age_page_cache(store: &Store, days: i64) {
    let by = days * 86_400_000;
    exec(
        store,
        &format!("UPDATE http_cache SET fetched_at = fetched_at - {by}"),
    )
    .await;
}

/// A listing page answered `304` every night and a dormant repository's
/// root commit are never rewritten, yet retention prunes cached answers a
/// week after they were written. Those in use are touched (once a day at
/// most), so after eight days of unchanged re-syncs a prune keeps them and
/// the next re-sync is still all `304`s, with no root commit read again.
pub async fn cached_answers_still_in_use_outlive_the_page_cache_retention(db: TestDb) {
    init_tls();
    // Pruning also ends finished jobs: the queue's tables must exist.
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let sim = GithubSim::start(GithubSimConfig {
        repos: 250,
        token: Some(TOKEN.to_owned()),
        ..GithubSimConfig::default()
    })
    .await
    .expect("simulator");
    add_connection_with(
        &db.store,
        CONNECTION,
        &sim.base_url(),
        Owner::Company,
        serde_json::json!({ "first_commits": true }),
    )
    .await;
    let ctx = sync_context(&db.store, fast_http());
    let sync = || async { finished(run_sync(&ctx, CONNECTION, RunTrigger::Test).await.unwrap()) };
    let (outcome, first, error) = sync().await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    let cached = registry_rows(&db.store)
        .await
        .into_iter()
        .filter(|r| r.starts_with("cache "))
        .count();
    assert!(
        cached > usize::try_from(first.pages).unwrap(),
        "pages and root commits are cached: {cached}"
    );

    // Eight nightly re-syncs of an unchanged org, squeezed: each touched
    // answer is a day older by the next.
    let mut steady = None;
    for _ in 0..8 {
        age_page_cache(&db.store, 1).await;
        let (outcome, figures, error) = sync().await;
        assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
        assert_eq!(figures.not_modified, first.pages, "{figures:?}");
        assert!(figures.requests < first.requests, "{figures:?}");
        steady = Some(figures.requests);
    }
    let now = chrono::Utc::now().timestamp_millis();
    let pruned = db
        .store
        .prune(&PruneBefore {
            delivery_bodies: 0,
            deliveries: 0,
            runs: 0,
            finished_jobs: 0,
            page_cache: now - 7 * 86_400_000,
            changes: 0,
        })
        .await
        .unwrap();
    assert_eq!(pruned.page_cache_rows, 0, "answers in use were pruned");
    sim.reset_stats();
    let (outcome, figures, error) = sync().await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.not_modified, first.pages, "{figures:?}");
    // As many requests as any unchanged re-sync: no root commit asked
    // for again.
    assert_eq!(Some(figures.requests), steady, "{figures:?}");
    assert_eq!(sim.stats().requests, figures.requests);
}
