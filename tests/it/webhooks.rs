//! Webhooks end to end over real sockets: the simulated GitHub org sends a
//! signed delivery for each change to a gateway served on `127.0.0.1:0`; a
//! worker turns it into a targeted re-read by stable id. Each behaviour runs
//! on SQLite and PostgreSQL (`both_backends!`).

use std::time::Duration;

use cmcp_domain::{AliasKind, SpaceStatus};
use cmcp_fixtures::{GithubSimConfig, WebhookTarget};
use cmcp_registry::store::new_ulid;
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Accepted, DeliveryRow, DeliveryStatus, NewDelivery, Premise, Recorded, Store};
use cmcp_tests::{CONNECTION, Harness, cipher, fast_http, repo_address};
use cmcp_tests::{eventually, serve_gateway, start_worker};
use cmcp_worker::jobs::handle_delivery::{DeliverySlots, handle_all};
use cmcp_worker::{HandleDelivery, Queue, QueueConfig, SyncConnection, run_sync};

/// A synced org of 12 repos with the queue tables in place.
async fn synced(db: TestDb) -> Harness {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 12,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    assert!(
        run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
            .await
            .unwrap()
            .run_outcome()
            .is_some()
    );
    h
}

async fn webhook_to(h: &Harness, url: &str, secret: &str) {
    h.sim.set_webhook(Some(WebhookTarget {
        url: url.to_owned(),
        secret: secret.to_owned(),
        hook_id: 77,
    }));
}

/// The first delivery the connection stored, once there is one.
async fn first_delivery(h: &Harness) -> DeliveryRow {
    eventually("the delivery is stored", || async {
        h.store()
            .list_deliveries(CONNECTION)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await
}

async fn active_name(store: &Store, id: u64) -> Option<String> {
    store
        .alias_history(&repo_address(id))
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.is_active() && a.kind == AliasKind::Name)
        .map(|a| a.raw)
}

async fn runs(store: &Store) -> usize {
    store.list_runs(Some(CONNECTION), 100).await.unwrap().len()
}

pub async fn rename_arrives_by_webhook_without_a_full_sync(db: TestDb) {
    let h = synced(db).await;
    let worker = start_worker(h.store(), &h.ctx);
    let gateway = h.hook_gateway(77).await;
    let id = h.sim.repos()[3].id;
    assert_eq!(runs(h.store()).await, 1);

    h.sim.rename_repo(id, "renamed-by-hook");
    eventually("the new name is the active alias", || async {
        (active_name(h.store(), id).await.as_deref() == Some("renamed-by-hook")).then_some(())
    })
    .await;
    let found = h.store().resolve("acme/renamed-by-hook").await.unwrap();
    assert_eq!(found[0].space.address, repo_address(id));

    // Deleted upstream: the delivery's direct read answers Gone → tombstone.
    let gone = h.sim.repos()[5].id;
    h.sim.delete_repo(gone);
    eventually("the deleted repo is tombstoned", || async {
        let space = h.store().get_space(&repo_address(gone)).await.unwrap()?;
        (space.status == SpaceStatus::Tombstoned).then_some(())
    })
    .await;

    assert_eq!(runs(h.store()).await, 1, "no full sync ran for the events");
    // The job records the outcome just after applying it.
    eventually("both deliveries are marked processed", || async {
        let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
        (rows.len() == 2 && rows.iter().all(|r| r.status == DeliveryStatus::Processed))
            .then_some(())
    })
    .await;
    assert!(
        h.sim
            .webhook_deliveries()
            .iter()
            .all(|s| s.status == Some(202))
    );
    worker.stop().await;
    gateway.abort();
}

pub async fn delivery_waits_for_a_worker_and_is_then_processed(db: TestDb) {
    let h = synced(db).await;
    let gateway = h.hook_gateway(77).await;
    let id = h.sim.repos()[2].id;
    let before = active_name(h.store(), id).await;

    h.sim.rename_repo(id, "renamed-while-no-worker");
    let row = first_delivery(&h).await;
    assert_eq!(row.status, DeliveryStatus::Received);
    assert_eq!(active_name(h.store(), id).await, before, "no worker yet");
    assert!(
        h.store()
            .oldest_unprocessed_delivery()
            .await
            .unwrap()
            .is_some()
    );

    let worker = start_worker(h.store(), &h.ctx);
    eventually("the waiting delivery is processed", || async {
        let row = h.store().get_delivery(&row.id).await.unwrap();
        (row.status == DeliveryStatus::Processed).then_some(())
    })
    .await;
    assert_eq!(
        active_name(h.store(), id).await.as_deref(),
        Some("renamed-while-no-worker")
    );
    assert!(
        h.store()
            .oldest_unprocessed_delivery()
            .await
            .unwrap()
            .is_none()
    );
    worker.stop().await;
    gateway.abort();
}

pub async fn rotated_secret_overlaps_then_the_old_one_is_refused(db: TestDb) {
    let h = synced(db).await;
    let old = h
        .store()
        .current_webhook_secret(&cipher(), CONNECTION)
        .await
        .unwrap();
    let (base, gateway) = serve_gateway(h.store()).await;
    let url = format!("{base}/hooks/github/{CONNECTION}");
    let overlap = Duration::from_secs(5);
    h.store()
        .rotate_webhook_secret(&cipher(), CONNECTION, overlap.as_millis() as i64, "test")
        .await
        .unwrap();
    let rotated_at = tokio::time::Instant::now();
    let new = h
        .store()
        .current_webhook_secret(&cipher(), CONNECTION)
        .await
        .unwrap();
    assert_ne!(new.expose(), old.expose());

    // The platform still has the old secret: within the overlap it works.
    webhook_to(&h, &url, old.expose()).await;
    let ids: Vec<u64> = h.sim.repos().iter().map(|r| r.id).collect();
    h.sim.set_archived(ids[0], true);
    let first = eventually("the first delivery is answered", || async {
        h.sim.webhook_deliveries().first().cloned()
    })
    .await;
    assert!(
        rotated_at.elapsed() < overlap,
        "the machine was too slow to send within the overlap; the result says nothing"
    );
    assert_eq!(first.status, Some(202));

    // After the overlap only the new secret is accepted.
    tokio::time::sleep_until(rotated_at + overlap + Duration::from_millis(200)).await;
    h.sim.set_archived(ids[1], true);
    let second = eventually("the second delivery is answered", || async {
        h.sim.webhook_deliveries().get(1).cloned()
    })
    .await;
    assert_eq!(second.status, Some(401));
    webhook_to(&h, &url, new.expose()).await;
    h.sim.set_archived(ids[2], true);
    let third = eventually("the third delivery is answered", || async {
        h.sim.webhook_deliveries().get(2).cloned()
    })
    .await;
    assert_eq!(third.status, Some(202));
    assert_eq!(
        h.store().list_deliveries(CONNECTION).await.unwrap().len(),
        2
    );
    gateway.abort();
}

/// GitHub's default hook content type is `form`: the JSON arrives as the
/// `payload` field, signed over the form bytes. It must be verified, parsed
/// and applied like a JSON one, never acknowledged and dropped.
pub async fn form_encoded_github_delivery_is_applied(db: TestDb) {
    let h = synced(db).await;
    let gateway = h.hook_gateway(77).await;
    let worker = start_worker(h.store(), &h.ctx);
    h.sim.set_webhook_form_encoded(true);
    let id = h.sim.repos()[2].id;
    h.sim.rename_repo(id, "renamed-by-form");
    eventually("the form-encoded rename is applied", || async {
        (active_name(h.store(), id).await.as_deref() == Some("renamed-by-form")).then_some(())
    })
    .await;
    let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].event, "repository.renamed");
    assert!(rows[0].body.starts_with(b"payload="), "kept as signed");
    assert_eq!(h.sim.webhook_deliveries()[0].status, Some(202));
    worker.stop().await;
    gateway.abort();
}

both_backends!(
    form_encoded_github_delivery_is_applied,
    rename_arrives_by_webhook_without_a_full_sync,
    delivery_waits_for_a_worker_and_is_then_processed,
    deliveries_stored_together_share_one_job_and_are_each_applied,
    a_batch_job_handles_the_others_when_one_delivery_cannot_be_read,
    rotated_secret_overlaps_then_the_old_one_is_refused,
    delivery_re_reads_spend_the_shared_budget,
);

/// One delivery the simulator sent through a gateway (a rename of the
/// second repo); the webhook is off afterwards.
async fn one_sent_delivery(h: &Harness) -> DeliveryRow {
    let gateway = h.hook_gateway(77).await;
    h.sim.rename_repo(h.sim.repos()[1].id, "renamed-alone");
    let sample = first_delivery(h).await;
    h.sim.set_webhook(None);
    gateway.abort();
    sample
}

/// Rename each of `repos` upstream (`renamed-together-<n>`) and record a
/// delivery of each, copied from `sample`, in ONE batch through the
/// store's writer, as a gateway's writer stores the deliveries that arrive
/// during one commit (the simulator sends one delivery at a time). The ids
/// stored, each of them with a job.
async fn record_renames_together(h: &Harness, sample: &DeliveryRow, repos: &[u64]) -> Vec<String> {
    let mut batch = Vec::new();
    for (n, id) in repos.iter().enumerate() {
        h.sim.rename_repo(*id, &format!("renamed-together-{n}"));
        let mut body: serde_json::Value = serde_json::from_slice(&sample.body).unwrap();
        body["repository"]["id"] = (*id).into();
        batch.push(NewDelivery {
            connection_id: CONNECTION.to_owned(),
            platform: sample.platform,
            delivery_key: format!("{}-{n}", sample.delivery_key),
            event: sample.event.clone(),
            headers: sample.headers.clone(),
            body: serde_json::to_vec(&body).unwrap(),
            verification: sample.verification.clone(),
            status: DeliveryStatus::Received,
            error: None,
            replay_key: None,
        });
    }
    let items: Vec<(&NewDelivery, Option<Premise>)> = batch.iter().map(|d| (d, None)).collect();
    h.store()
        .delivery_writer()
        .record(&items)
        .await
        .unwrap()
        .into_iter()
        .map(|a| match a {
            Accepted::Recorded(Recorded::Stored {
                id,
                job_id: Some(_),
            }) => id,
            other => panic!("not stored with a job: {other:?}"),
        })
        .collect()
}

/// Whether each of `repos` carries its `renamed-together-<n>` name.
async fn renamed_together(store: &Store, repos: &[u64]) -> bool {
    for (n, id) in repos.iter().enumerate() {
        if active_name(store, *id).await != Some(format!("renamed-together-{n}")) {
            return false;
        }
    }
    true
}

/// A gateway's writer stores the deliveries that arrive during one commit
/// in one statement, with ONE job naming them all; the worker still
/// handles each of them (here four renames, each applied by its own
/// re-read).
pub async fn deliveries_stored_together_share_one_job_and_are_each_applied(db: TestDb) {
    let h = synced(db).await;
    let sample = one_sent_delivery(&h).await;
    let repos: Vec<u64> = h.sim.repos()[6..10].iter().map(|r| r.id).collect();
    let stored = record_renames_together(&h, &sample, &repos).await;
    let jobs = h.store().delivery_jobs().await.unwrap();
    assert_eq!(
        jobs.len(),
        2,
        "the first delivery's job and the batch's: {jobs:?}"
    );
    assert!(
        jobs.iter().any(|(_, args)| args.ids() == stored.as_slice()),
        "one job names the batch, in its order: {jobs:?}"
    );

    let worker = start_worker(h.store(), &h.ctx);
    eventually("each rename of the batch is applied", || async {
        renamed_together(h.store(), &repos).await.then_some(())
    })
    .await;
    eventually("every delivery is marked processed", || async {
        let rows = h.store().list_deliveries(CONNECTION).await.unwrap();
        (rows.len() == 5 && rows.iter().all(|r| r.status == DeliveryStatus::Processed))
            .then_some(())
    })
    .await;
    assert_eq!(runs(h.store()).await, 1, "no full sync ran for the events");
    worker.stop().await;
}

/// A batch's job that names a delivery which cannot be handled at all
/// (no such row: retention removed it) still handles the others, then
/// fails so that apalis runs it again; run again, it skips the deliveries
/// it already finished instead of applying them twice.
pub async fn a_batch_job_handles_the_others_when_one_delivery_cannot_be_read(db: TestDb) {
    let h = synced(db).await;
    let sample = one_sent_delivery(&h).await;
    let repos = [h.sim.repos()[6].id, h.sim.repos()[7].id];
    let stored = record_renames_together(&h, &sample, &repos).await;
    let queue = Queue::<SyncConnection>::new(h.store(), &QueueConfig::default());
    let slots = DeliverySlots::new(2);
    let run = |ids: Vec<String>| {
        let job = HandleDelivery::Batch { delivery_ids: ids };
        let (ctx, queue, slots) = (&h.ctx, &queue, &slots);
        async move { handle_all(&job, ctx, queue, slots).await }
    };

    let mut ids = vec![new_ulid()];
    ids.extend(stored.iter().cloned());
    let first = run(ids).await;
    assert!(first.is_err(), "the job fails, to run again: {first:?}");
    assert!(renamed_together(h.store(), &repos).await);
    for id in &stored {
        let row = h.store().get_delivery(id).await.unwrap();
        assert_eq!(row.status, DeliveryStatus::Processed, "{id}");
    }
    let again = run(stored.clone()).await.unwrap();
    assert_eq!(again.matches("already processed").count(), 2, "{again}");
}

/// A delivery's targeted re-read is sent through the fleet's budget of the
/// credential, like a sync's pages: the stored budget settles from the
/// re-read's answer (GitHub reports one request fewer remaining). A re-read
/// that bypassed the budget would leave the stored reading where the sync
/// left it.
pub async fn delivery_re_reads_spend_the_shared_budget(db: TestDb) {
    let h = synced(db).await;
    let gateway = h.hook_gateway(77).await;
    let worker = start_worker(h.store(), &h.ctx);
    let (_, before) = h
        .store()
        .connection_budgets()
        .await
        .unwrap()
        .into_iter()
        .find(|(c, _)| c == CONNECTION)
        .expect("the sync recorded the connection's budget");
    let before_remaining = before.remaining.expect("GitHub reports what remains");
    h.sim.reset_stats();

    let id = h.sim.repos()[4].id;
    h.sim.rename_repo(id, "renamed-under-budget");
    eventually("the delivery's re-read applied the new name", || async {
        (active_name(h.store(), id).await.as_deref() == Some("renamed-under-budget")).then_some(())
    })
    .await;
    let after = h
        .store()
        .budget(&before.budget_key)
        .await
        .unwrap()
        .expect("the budget row is still there");
    assert!(
        h.sim.stats().requests >= 1,
        "the re-read reached the platform"
    );
    let after_remaining = after.remaining.expect("a reading");
    assert!(
        after_remaining < before_remaining,
        "the re-read settled the shared budget: {after_remaining} left, {before_remaining} before"
    );
    assert_eq!(after.in_flight, 0, "no reservation is left open");
    worker.stop().await;
    gateway.abort();
}
