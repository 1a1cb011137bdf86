//! Jobs written by the store itself, inside another transaction.
//!
//! The gateway must store a delivery and its job atomically, but apalis
//! pushes only through its own storage handle. So the registry writes the
//! job row with the same INSERT as apalis's sink (`Store::record_delivery`,
//! `Store::enqueue_job`, `cmcp_registry::QueuedJob`); the worker reads those
//! queues with the typed apalis storages of [`crate::queue`]. The test below
//! is the contract: a row the store wrote is picked up and decoded by an
//! ordinary apalis worker, on both backends.

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use apalis::prelude::{BackendExt, Data, Monitor, WorkerBuilder};
    use cmcp_registry::testing::TestDb;
    use cmcp_registry::{QueuedJob, Store};
    use serde::{Deserialize, Serialize};
    use tokio::sync::mpsc;

    use crate::queue::{QueueConfig, postgres_storage, sqlite_storage};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Probe {
        n: u32,
        word: String,
    }

    async fn probe(job: Probe, tx: Data<mpsc::UnboundedSender<Probe>>) -> Result<(), String> {
        tx.send(job).map_err(|e| e.to_string())
    }

    /// Write a job row through the store, then run an apalis worker on the
    /// queue and wait for it to hand over the decoded arguments.
    async fn store_written_job_is_picked_up(db: TestDb) {
        crate::queue::setup(&db.store).await.unwrap();
        let sent = Probe {
            n: 7,
            word: "delivered".into(),
        };
        db.store
            .enqueue_job(&QueuedJob::json("probe-queue", &sent, 3).unwrap())
            .await
            .unwrap();
        let cfg = QueueConfig {
            poll_interval: Duration::from_millis(50),
            ..QueueConfig::default()
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Probe>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let monitor = match &db.store {
            Store::Sqlite(pool) => {
                let storage = sqlite_storage::<Probe>(pool, "probe-queue", &cfg);
                Monitor::new().register(move |_| {
                    WorkerBuilder::new("probe-worker")
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        .data(tx.clone())
                        .build(probe)
                })
            }
            Store::Postgres(pool) => {
                let storage = postgres_storage::<Probe>(pool, "probe-queue", &cfg);
                Monitor::new().register(move |_| {
                    WorkerBuilder::new("probe-worker")
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        .data(tx.clone())
                        .build(probe)
                })
            }
        };
        let running = tokio::spawn(async move {
            monitor
                .run_with_signal(async move {
                    let _ = stop_rx.await;
                    Ok(())
                })
                .await
        });
        let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("the worker picked the job up")
            .expect("a job");
        assert_eq!(got, sent);
        let _ = stop_tx.send(());
        let _ = running.await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_written_job_is_picked_up() {
        store_written_job_is_picked_up(TestDb::sqlite().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_store_written_job_is_picked_up() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        store_written_job_is_picked_up(db).await;
    }
}
