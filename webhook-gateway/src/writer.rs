//! Group commit of verified deliveries.
//!
//! Requests do not open transactions of their own: each hands its delivery
//! to a writer task and waits on a oneshot for the outcome of the
//! transaction that carried it. A writer takes the first delivery queued,
//! then every delivery that queued meanwhile (up to `commit_batch_max`,
//! waiting at most `commit_window` for more), and commits them together
//! through its own [`DeliveryWriter`] (on PostgreSQL a connection of its
//! own: one round trip a batch); only after that commit does any of
//! them get its answer, so nothing is acknowledged before it is durable.
//! Under light load a batch is one delivery and costs no wait; under heavy
//! load the deliveries that arrive during one commit share the next.
//!
//! SQLite takes one writer at a time, so the gateway has exactly one there:
//! its requests queue in memory instead of busy-waiting on
//! `BEGIN IMMEDIATE` against each other. PostgreSQL takes
//! `commit_writers` writers, whose commits overlap.
//!
//! A failed transaction fails every delivery of its batch (each answered
//! 503, nothing written), as a failed transaction of its own would have.

use std::sync::Arc;
use std::time::Duration;

use cmcp_registry::{
    Accepted, Backend, DeliveryWriter, NewDelivery, Premise, RegistryError, Store,
};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::Instant;

/// How a writer batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    pub max: usize,
    pub window: Duration,
    pub writers: usize,
}

/// Why a delivery was not written.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum WriteError {
    #[error(transparent)]
    Store(Arc<RegistryError>),
    /// The writers are gone (the runtime that ran them shut down).
    #[error("the delivery writer has stopped")]
    Stopped,
}

type Reply = Result<Accepted, WriteError>;

struct Pending {
    delivery: NewDelivery,
    premise: Option<Premise>,
    reply: oneshot::Sender<Reply>,
}

/// The queue to the writer tasks; they end when it is dropped.
pub(crate) struct Writer {
    queue: mpsc::Sender<Pending>,
}

impl Writer {
    /// Spawn the writers on the current runtime.
    pub(crate) fn start(store: Store, batching: Batching) -> Writer {
        let max = batching.max.max(1);
        let writers = match store.backend() {
            Backend::Sqlite => 1,
            Backend::Postgres => batching.writers.max(1),
        };
        let (queue, rx) = mpsc::channel(max * writers * 4);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers {
            tokio::spawn(run(
                store.delivery_writer(),
                rx.clone(),
                max,
                batching.window,
            ));
        }
        Writer { queue }
    }

    /// Store one delivery in the next batch; returns once that batch has
    /// committed (or failed).
    pub(crate) async fn write(&self, delivery: NewDelivery, premise: Option<Premise>) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending {
                delivery,
                premise,
                reply,
            })
            .await
            .map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Stopped)?
    }
}

async fn run(
    mut writer: DeliveryWriter,
    rx: Arc<Mutex<mpsc::Receiver<Pending>>>,
    max: usize,
    window: Duration,
) {
    loop {
        let batch = {
            // One writer gathers at a time; the others commit meanwhile.
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else { return };
            let mut batch = vec![first];
            let deadline = Instant::now() + window;
            while batch.len() < max {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) if window.is_zero() => break,
                    Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(p)) => batch.push(p),
                        Ok(None) | Err(_) => break,
                    },
                }
            }
            batch
        };
        let items: Vec<(&NewDelivery, Option<Premise>)> =
            batch.iter().map(|p| (&p.delivery, p.premise)).collect();
        match writer.record(&items).await {
            Ok(outcomes) => {
                for (p, outcome) in batch.into_iter().zip(outcomes) {
                    // A request that gave up waiting still had its delivery
                    // stored; the platform's retry is then a duplicate.
                    let _ = p.reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                let e = WriteError::Store(Arc::new(e));
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }
}
