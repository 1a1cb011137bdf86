//! Worker wiring in one place: which jobs run, on which backend, with what
//! concurrency, polling and heartbeat, and how a process shuts down.

use std::future::Future;
use std::sync::Arc;

use apalis::prelude::{BackendExt, Monitor, WorkerBuilder, WorkerBuilderExt};
use tracing::{info, warn};

use crate::error::{Result, WorkerError};
use crate::jobs::handle_delivery::{self, DeliverySlots, HandleDelivery};
use crate::jobs::scheduled::{self, Scheduled};
use crate::jobs::sync_connection;
use crate::queue::{Backend, Queue};
use crate::schedule::Scheduler;
use crate::state::WorkerState;

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
/// A queue worker whose backend failed (its poll could not get a database
/// connection in time, the database went away) is started again, under a
/// new name: apalis refuses a name whose last heartbeat is recent, and the
/// jobs the old one held come back as orphans once that heartbeat lapses.
/// Without this a single failed poll stopped the queue for the rest of the
/// process's life while the process itself looked healthy.
fn restart_on_error(
    worker: &apalis::prelude::WorkerContext,
    error: &apalis::prelude::WorkerError,
) -> bool {
    warn!(worker = %worker.name(), restarts = worker.restarts(), %error, "a queue worker stopped on an error; starting it again");
    true
}

/// The name of a queue worker after `restarts` restarts.
fn restart_name(name: &str, restarts: usize) -> String {
    match restarts {
        0 => name.to_owned(),
        n => format!("{name}-restart-{n}"),
    }
}

pub async fn run_workers<F>(state: Arc<WorkerState>, opts: WorkerOptions, shutdown: F) -> Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let cfg = state.queue_config.clone();
    info!(worker = %opts.name, concurrency = cfg.concurrency, "worker starting");
    // Webhook deliveries run beside syncs on their own queue, under a
    // second worker name (apalis names are unique per worker).
    let deliveries_name = format!("{}-deliveries", opts.name);
    let deliveries = Queue::<HandleDelivery>::new(&state.ctx.store, &cfg);
    let scheduled_q = Queue::<Scheduled>::new(&state.ctx.store, &cfg);
    let scheduled_name = format!("{}-scheduled", opts.name);
    let (ctx, queue) = (state.ctx.clone(), state.queue.clone());
    let d_cfg = cfg.clone();
    let (d_ctx, d_queue) = (ctx.clone(), queue.clone());
    let d_slots = DeliverySlots::new(cfg.concurrency);
    let (s_ctx, s_cfg) = (ctx.clone(), cfg.clone());
    let upkeep = state.schedule.as_ref().map(|s| s.upkeep.clone());
    // The scheduler stops with the workers.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let scheduler = match &state.schedule {
        Some(s) => {
            let now = chrono::Utc::now().timestamp_millis();
            let scheduler = Scheduler::new(
                ctx.clone(),
                &s.reconcile,
                s.channels_every,
                cfg.max_attempts,
                now,
            )?;
            let every = s.reconcile.check_every;
            Some(tokio::spawn(scheduler.run(every, async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })))
        }
        None => None,
    };
    // Each job takes what it needs as its own `Data`: the sync context, the
    // sync queue, the queue settings.
    let monitor = match (queue.backend(), deliveries.backend()) {
        (Backend::Sqlite(storage), Backend::Sqlite(deliveries)) => {
            let (storage, deliveries) = (storage.clone(), deliveries.clone());
            let monitor = Monitor::new()
                .should_restart(restart_on_error)
                .register(move |restarts| {
                    WorkerBuilder::new(restart_name(&opts.name, restarts))
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        // A job that panics fails with the panic as its
                        // error; the worker and its process go on.
                        .catch_panic()
                        .concurrency(cfg.concurrency)
                        .data(ctx.clone())
                        .data(queue.clone())
                        .data(cfg.clone())
                        .build(sync_connection::handle)
                })
                .register(move |restarts| {
                    WorkerBuilder::new(restart_name(&deliveries_name, restarts))
                        .backend(deliveries.clone().poll_with_interval(d_cfg.poll_interval))
                        .catch_panic()
                        .concurrency(d_cfg.concurrency)
                        .data(d_ctx.clone())
                        .data(d_queue.clone())
                        .data(d_slots.clone())
                        .build(handle_delivery::handle)
                });
            match (upkeep, scheduled_q.backend()) {
                (Some(upkeep), Backend::Sqlite(scheduled)) => {
                    let scheduled = scheduled.clone();
                    monitor.register(move |restarts| {
                        WorkerBuilder::new(restart_name(&scheduled_name, restarts))
                            .backend(scheduled.clone().poll_with_interval(s_cfg.poll_interval))
                            .data(s_ctx.clone())
                            .data(upkeep.clone())
                            .build(scheduled::handle)
                    })
                }
                _ => monitor,
            }
        }
        (Backend::Postgres(storage), Backend::Postgres(deliveries)) => {
            let (storage, deliveries) = (storage.clone(), deliveries.clone());
            let monitor = Monitor::new()
                .should_restart(restart_on_error)
                .register(move |restarts| {
                    WorkerBuilder::new(restart_name(&opts.name, restarts))
                        .backend(storage.clone().poll_with_interval(cfg.poll_interval))
                        // A job that panics fails with the panic as its
                        // error; the worker and its process go on.
                        .catch_panic()
                        .concurrency(cfg.concurrency)
                        .data(ctx.clone())
                        .data(queue.clone())
                        .data(cfg.clone())
                        .build(sync_connection::handle)
                })
                .register(move |restarts| {
                    WorkerBuilder::new(restart_name(&deliveries_name, restarts))
                        .backend(deliveries.clone().poll_with_interval(d_cfg.poll_interval))
                        .catch_panic()
                        .concurrency(d_cfg.concurrency)
                        .data(d_ctx.clone())
                        .data(d_queue.clone())
                        .data(d_slots.clone())
                        .build(handle_delivery::handle)
                });
            match (upkeep, scheduled_q.backend()) {
                (Some(upkeep), Backend::Postgres(scheduled)) => {
                    let scheduled = scheduled.clone();
                    monitor.register(move |restarts| {
                        WorkerBuilder::new(restart_name(&scheduled_name, restarts))
                            .backend(scheduled.clone().poll_with_interval(s_cfg.poll_interval))
                            .data(s_ctx.clone())
                            .data(upkeep.clone())
                            .build(scheduled::handle)
                    })
                }
                _ => monitor,
            }
        }
        _ => {
            return Err(WorkerError::Queue(
                "the queue and the store are on different backends".to_owned(),
            ));
        }
    };
    let result = monitor
        .shutdown_timeout(std::time::Duration::from_secs(10))
        .run_with_signal(async move {
            shutdown.await;
            Ok(())
        })
        .await
        .map_err(|e| WorkerError::Queue(format!("worker monitor: {e}")));
    let _ = stop_tx.send(true);
    if let Some(task) = scheduler {
        let _ = task.await;
    }
    result
}
