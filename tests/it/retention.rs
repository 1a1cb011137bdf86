//! Retention: pruning removes what is past its keep (bodies of handled
//! deliveries, runs and their drift, finished jobs of the real queue,
//! page-cache rows, schedule claims) and keeps the rest (the delivery rows
//! and their outcomes, bodies still to be processed, recent history). On
//! SQLite and PostgreSQL.

use std::time::Duration;

use cmcp_domain::{Platform, RunTrigger};
use cmcp_fixtures::GithubSimConfig;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, NewDelivery, PruneBefore, Recorded, Store};
use cmcp_tests::{CONNECTION, Harness, eventually, fast_http, start_worker};
use cmcp_worker::{Queue, QueueConfig, SyncConnection, run_sync};

const BODY: &[u8] = br#"{"action":"renamed","repository":{"id":1}}"#;

async fn delivery(store: &Store, key: &str, status: DeliveryStatus) -> String {
    let new = NewDelivery {
        connection_id: CONNECTION.to_owned(),
        platform: Platform::Github,
        delivery_key: key.to_owned(),
        event: "repository.renamed".to_owned(),
        headers: vec![("x-github-event".to_owned(), "repository".to_owned())],
        body: BODY.to_vec(),
        verification: "hmac-sha256".to_owned(),
        status,
        error: None,
        // The same bytes under several keys: no hash, so none is a replay.
        replay_key: None,
    };
    match store.record_delivery(&new).await.unwrap() {
        Recorded::Stored { id, .. } => id,
        other => panic!("{key} is new: {other:?}"),
    }
}

/// A sync job run by the real queue's worker, finished (`Done`) when this
/// returns.
async fn finished_job(h: &Harness) {
    let before = h
        .store()
        .list_runs(Some(CONNECTION), 100)
        .await
        .unwrap()
        .len();
    let worker = start_worker(h.store(), &h.ctx);
    Queue::new(h.store(), &QueueConfig::default())
        .push(
            SyncConnection::new(CONNECTION, RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();
    eventually("the job's run finished", || async {
        let runs = h.store().list_runs(Some(CONNECTION), 100).await.unwrap();
        (runs.len() > before && runs.iter().all(|r| r.finished_at.is_some())).then_some(())
    })
    .await;
    worker.stop().await;
}

pub async fn retention_removes_what_it_should_and_keeps_what_it_should(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 5,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let s = h.store().clone();
    // First a job the worker finishes (before any delivery job is queued,
    // which it would also take).
    finished_job(&h).await;
    // The rest of the old week: a processed, a failed and a still-waiting
    // delivery; an ignored one (its body never kept); a reconcile with
    // drift; the page cache of those syncs.
    let old_processed = delivery(&s, "old-1", DeliveryStatus::Received).await;
    s.finish_delivery(&old_processed, DeliveryStatus::Processed, None)
        .await
        .unwrap();
    let old_failed = delivery(&s, "old-2", DeliveryStatus::Failed).await;
    let waiting = delivery(&s, "old-3", DeliveryStatus::Received).await;
    let ignored = delivery(&s, "old-4", DeliveryStatus::Ignored).await;
    assert!(
        s.get_delivery(&ignored).await.unwrap().body.is_empty(),
        "an ignored body is not stored past acceptance"
    );
    let quiet = h.sim.repos()[0].id;
    h.sim.rename_repo(quiet, "renamed-quietly");
    let old_run = run_sync(&h.ctx, CONNECTION, RunTrigger::Reconcile)
        .await
        .unwrap();
    let old_run = old_run.run_id().unwrap().to_owned();
    assert!(!s.drift_of_run(&old_run).await.unwrap().is_empty());
    let cached = cached_rows(&s).await;
    assert!(cached > 0, "the sync cached its pages");
    let jobs_before = s.queued_job_count("sync-connection").await.unwrap();
    assert!(jobs_before >= 1);

    // Finished jobs count time in seconds.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let cut = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(20)).await;

    // The recent week.
    let recent = delivery(&s, "new-1", DeliveryStatus::Received).await;
    s.finish_delivery(&recent, DeliveryStatus::Processed, None)
        .await
        .unwrap();
    let recent_run = run_sync(&h.ctx, CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    let recent_run = recent_run.run_id().unwrap().to_owned();

    let pruned = s
        .prune(&PruneBefore {
            delivery_bodies: cut,
            // Delivery rows are kept longer than their bodies.
            deliveries: 0,
            runs: cut,
            finished_jobs: cut,
            page_cache: cut,
            changes: 0,
        })
        .await
        .unwrap();
    assert_eq!(pruned.delivery_bodies, 1, "{pruned:?}");
    assert_eq!(pruned.deliveries, 0, "{pruned:?}");
    assert_eq!(
        pruned.runs, 2,
        "the reconcile and the job's run: {pruned:?}"
    );
    assert!(pruned.drift_changes > 0, "{pruned:?}");
    assert_eq!(pruned.finished_jobs as i64, jobs_before, "{pruned:?}");
    assert_eq!(pruned.page_cache_rows, cached, "{pruned:?}");

    // Removed: the processed body, the old runs and their drift, the job.
    let row = s.get_delivery(&old_processed).await.unwrap();
    assert!(row.body.is_empty());
    assert_eq!(
        row.status,
        DeliveryStatus::Processed,
        "the row and its outcome stay"
    );
    assert!(s.get_run(&old_run).await.is_err());
    assert!(s.drift_of_run(&old_run).await.unwrap().is_empty());
    assert_eq!(s.queued_job_count("sync-connection").await.unwrap(), 0);
    assert_eq!(cached_rows(&s).await, 0);
    // Kept: what is still to be processed or looked into, and the recent.
    assert_eq!(s.get_delivery(&waiting).await.unwrap().body, BODY);
    assert_eq!(s.get_delivery(&old_failed).await.unwrap().body, BODY);
    assert_eq!(s.get_delivery(&recent).await.unwrap().body, BODY);
    assert!(s.get_run(&recent_run).await.is_ok());
    assert_eq!(s.list_deliveries(CONNECTION).await.unwrap().len(), 5);

    // Pruning again removes nothing more.
    let again = s
        .prune(&PruneBefore {
            delivery_bodies: cut,
            deliveries: 0,
            runs: cut,
            finished_jobs: cut,
            page_cache: cut,
            changes: 0,
        })
        .await
        .unwrap();
    assert_eq!(again, Default::default());

    // Past `keep_deliveries` the rows of processed and ignored deliveries
    // go whole; a failed one (for a replay), one still to process and the
    // recent ones stay.
    let rows = s
        .prune(&PruneBefore {
            delivery_bodies: cut,
            deliveries: cut,
            runs: cut,
            finished_jobs: cut,
            page_cache: cut,
            changes: 0,
        })
        .await
        .unwrap();
    assert_eq!(rows.deliveries, 2, "{rows:?}");
    for gone in [&old_processed, &ignored] {
        assert!(s.get_delivery(gone).await.is_err(), "{gone} pruned");
    }
    let left: std::collections::BTreeSet<String> = s
        .list_deliveries(CONNECTION)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        left,
        [old_failed, waiting, recent].into_iter().collect(),
        "kept"
    );
    // The configured keep turns into that cut-off: 90 days by default.
    let cfg = cmcp_worker::RetentionConfig::default();
    assert_eq!(cfg.keep_deliveries, Duration::from_secs(90 * 86_400));
    assert_eq!(cfg.before(cut).deliveries, cut - 90 * 86_400_000);
}

async fn cached_rows(store: &Store) -> u64 {
    let (n,): (i64,) = match store {
        Store::Sqlite(pool) => sqlx::query_as("SELECT COUNT(*) FROM http_cache")
            .fetch_one(pool)
            .await
            .unwrap(),
        Store::Postgres(pool) => sqlx::query_as("SELECT COUNT(*) FROM http_cache")
            .fetch_one(pool)
            .await
            .unwrap(),
    };
    n as u64
}

both_backends!(retention_removes_what_it_should_and_keeps_what_it_should);
