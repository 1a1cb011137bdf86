//! Worker wiring in one place: which jobs run, on which backend, with what
//! concurrency, polling and heartbeat, and how a process shuts down.

use std::future::Future;
use std::sync::Arc;

use apalis::prelude::{BackendExt, Monitor, WorkerBuilder, WorkerBuilderExt};
use tracing::info;

use crate::error::{Result, WorkerError};
use crate::jobs::{handle_delivery, sync_connection};
use crate::queue::{Queue, QueueConfig};
use crate::sync::SyncContext;

/// What every job handler can reach.
pub struct WorkerState {
    pub ctx: SyncContext,
    pub queue: Queue,
    pub queue_config: QueueConfig,
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Must be unique across the fleet and never reused while the previous
    /// holder's heartbeat is fresh: apalis refuses a duplicate name.
    pub name: String,
}

impl WorkerOptions {
    /// `<prefix>-<host>-<pid>-<random>`: unique per process, even after a
    /// restart on the same machine.
    pub fn unique(prefix: &str) -> WorkerOptions {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
        let tag = uuid_like();
        WorkerOptions {
            name: format!("{prefix}-{host}-{}-{tag}", std::process::id()),
        }
    }
}

fn uuid_like() -> String {
    use rand::Rng;
    let n: u32 = rand::rng().random();
    format!("{n:08x}")
}

/// Run the workers until `shutdown` resolves.
pub async fn run_workers<F>(state: Arc<WorkerState>, opts: WorkerOptions, shutdown: F) -> Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let cfg = state.queue_config.clone();
    info!(worker = %opts.name, concurrency = cfg.concurrency, "worker starting");
    // Webhook deliveries run beside syncs on their own queue, under a
    // second worker name (apalis names are unique per worker).
    let deliveries_name = format!("{}-deliveries", opts.name);
    let (d_state, d_cfg) = (state.clone(), cfg.clone());
    let monitor = match (state.queue.clone(), state.ctx.store.clone()) {
        (Queue::Sqlite(storage), cmcp_registry::Store::Sqlite(pool)) => {
            let deliveries = crate::enqueue::sqlite_storage::<handle_delivery::HandleDelivery>(
                &pool,
                handle_delivery::QUEUE,
                &cfg,
            );
            Monitor::new()
                .register(move |_| {
                    WorkerBuilder::new(opts.name.clone())
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        .concurrency(cfg.concurrency)
                        .data(state.clone())
                        .build(sync_connection::handle)
                })
                .register(move |_| {
                    WorkerBuilder::new(deliveries_name.clone())
                        .backend(deliveries.clone().poll_with_interval(d_cfg.poll_interval))
                        .concurrency(d_cfg.concurrency)
                        .data(d_state.clone())
                        .build(handle_delivery::handle)
                })
        }
        (Queue::Postgres(storage), cmcp_registry::Store::Postgres(pool)) => {
            let deliveries = crate::enqueue::postgres_storage::<handle_delivery::HandleDelivery>(
                &pool,
                handle_delivery::QUEUE,
                &cfg,
            );
            Monitor::new()
                .register(move |_| {
                    WorkerBuilder::new(opts.name.clone())
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        .concurrency(cfg.concurrency)
                        .data(state.clone())
                        .build(sync_connection::handle)
                })
                .register(move |_| {
                    WorkerBuilder::new(deliveries_name.clone())
                        .backend(deliveries.clone().poll_with_interval(d_cfg.poll_interval))
                        .concurrency(d_cfg.concurrency)
                        .data(d_state.clone())
                        .build(handle_delivery::handle)
                })
        }
        _ => {
            return Err(WorkerError::Queue(
                "the queue and the store are on different backends".to_owned(),
            ));
        }
    };
    monitor
        .shutdown_timeout(std::time::Duration::from_secs(10))
        .run_with_signal(async move {
            shutdown.await;
            Ok(())
        })
        .await
        .map_err(|e| WorkerError::Queue(format!("worker monitor: {e}")))
}
