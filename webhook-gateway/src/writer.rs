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
//! `commit_writers` writers, whose commits overlap, but only where that
//! pays: while another writer is committing, a writer keeps gathering
//! until the bodies it holds reach `commit_overlap_bytes` (or the other
//! commit ends). Small deliveries thus go in fewer, larger commits (each
//! commit has a cost of its own, and two at once compete for the same
//! cores), large ones in overlapping commits (each body's own work
//! dominates and two backends share it out).
//!
//! On SQLite a commit returns before its WAL reaches the disk (the store
//! runs at `synchronous = NORMAL`), so a committed batch is handed to a
//! sync task and answered only after a sync of the WAL that began once it
//! had committed ([`cmcp_registry::WalSync`]). The writer commits the next
//! batch meanwhile, and one sync answers every batch committed during the
//! one before it.
//!
//! A failed transaction fails every delivery of its batch (each answered
//! 503, nothing written), as a failed transaction of its own would have. A
//! failed sync fails the batches it would have answered (503): they are
//! stored, and the platform's retry is a duplicate, answered 200 once a
//! sync succeeds.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cmcp_registry::{
    Accepted, Backend, DeliveryWriter, NewDelivery, Premise, RegistryError, Store,
};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Mutex, Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::metrics as m;

/// How a writer batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    pub max: usize,
    pub window: Duration,
    pub writers: usize,
    pub overlap_bytes: usize,
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

/// A committed batch's answers, waiting for the WAL sync (SQLite).
type Committed = Vec<(oneshot::Sender<Reply>, Accepted)>;

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
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            committing: AtomicUsize::new(0),
            committed: Notify::new(),
        });
        // Unbounded, yet bounded by the requests waiting: every entry is a
        // batch of them, and the writers take no more than the queue holds.
        let synced = store.wal_sync().map(|wal| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(answer_when_synced(rx, move || {
                let wal = wal.clone();
                async move { wal.sync().await }
            }));
            tx
        });
        for _ in 0..writers {
            tokio::spawn(run(
                store.delivery_writer(),
                shared.clone(),
                Batching { max, ..batching },
                synced.clone(),
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

/// What the writers share: the queue (one of them gathers from it at a
/// time) and how many are committing.
struct Shared {
    rx: Mutex<mpsc::Receiver<Pending>>,
    committing: AtomicUsize,
    /// Told whenever a writer's commit ends.
    committed: Notify,
}

/// One writer's commit in flight: counted while it lives, and told to the
/// others when it ends, even by a panic (a count left behind would hold
/// every later small batch back).
struct Committing<'a>(&'a Shared);

impl<'a> Committing<'a> {
    fn start(shared: &'a Shared) -> Committing<'a> {
        shared.committing.fetch_add(1, Ordering::AcqRel);
        Committing(shared)
    }
}

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        self.0.committing.fetch_sub(1, Ordering::AcqRel);
        self.0.committed.notify_waiters();
    }
}

/// SQLite: answer each committed batch after the next sync of the WAL.
/// Every batch received here had committed before it was sent, so a sync
/// begun after receiving it covers it; the batches that arrive while a
/// sync runs wait for the next one, together.
async fn answer_when_synced<S, F>(mut committed: mpsc::UnboundedReceiver<Committed>, mut sync: S)
where
    S: FnMut() -> F,
    F: Future<Output = cmcp_registry::Result<()>>,
{
    let mut waiting = Vec::new();
    while committed.recv_many(&mut waiting, usize::MAX).await > 0 {
        let synced = sync().await.map_err(|e| WriteError::Store(Arc::new(e)));
        if synced.is_ok() {
            m::wal_synced();
        }
        for (reply, outcome) in waiting.drain(..).flatten() {
            let _ = reply.send(synced.clone().map(|()| outcome));
        }
    }
}

async fn run(
    mut writer: DeliveryWriter,
    shared: Arc<Shared>,
    batching: Batching,
    synced: Option<mpsc::UnboundedSender<Committed>>,
) {
    let Batching {
        max,
        window,
        overlap_bytes,
        ..
    } = batching;
    // Checkpoints beside this writer (SQLite) and batches it wrote twice
    // (PostgreSQL) already counted.
    let (mut checkpoints, mut again) = (0, 0);
    loop {
        let (batch, committing) = {
            // One writer gathers at a time; the others commit meanwhile.
            let mut rx = shared.rx.lock().await;
            let Some(first) = rx.recv().await else { return };
            let mut bytes = first.delivery.body.len();
            let mut batch = vec![first];
            let deadline = Instant::now() + window;
            while batch.len() < max {
                match rx.try_recv() {
                    Ok(p) => {
                        bytes += p.delivery.body.len();
                        batch.push(p);
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => {}
                }
                // Registered before `committing` is read, so that a commit
                // ending in between still wakes this writer.
                let committed = shared.committed.notified();
                tokio::pin!(committed);
                committed.as_mut().enable();
                let beside_another =
                    bytes < overlap_bytes && shared.committing.load(Ordering::Acquire) > 0;
                let in_window = !window.is_zero() && Instant::now() < deadline;
                if !beside_another && !in_window {
                    break;
                }
                tokio::select! {
                    p = rx.recv() => match p {
                        Some(p) => {
                            bytes += p.delivery.body.len();
                            batch.push(p);
                        }
                        None => break,
                    },
                    // The other commit ended: decide again.
                    () = &mut committed, if beside_another => {}
                    () = tokio::time::sleep_until(deadline), if !beside_another => {}
                }
            }
            // Counted before the next writer may gather.
            (batch, Committing::start(&shared))
        };
        let items: Vec<(&NewDelivery, Option<Premise>)> =
            batch.iter().map(|p| (&p.delivery, p.premise)).collect();
        let result = writer.record(&items).await;
        drop(items);
        drop(committing);
        if result.is_ok() {
            m::committed(batch.len());
        }
        let beside = writer.checkpoints_beside();
        if beside > checkpoints {
            m::checkpoints_beside(beside - checkpoints);
            checkpoints = beside;
        }
        let twice = writer.written_again();
        if twice > again {
            m::written_again(twice - again);
            again = twice;
        }
        match result {
            Ok(outcomes) => {
                // A request that gave up waiting still had its delivery
                // stored; the platform's retry is then a duplicate.
                let answers: Committed = batch.into_iter().map(|p| p.reply).zip(outcomes).collect();
                match &synced {
                    Some(synced) => {
                        if let Err(unsent) = synced.send(answers) {
                            // The sync task is gone (its runtime shut down):
                            // nothing says these are durable.
                            for (reply, _) in unsent.0 {
                                let _ = reply.send(Err(WriteError::Stopped));
                            }
                        }
                    }
                    None => {
                        for (reply, outcome) in answers {
                            let _ = reply.send(Ok(outcome));
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cmcp_domain::Platform;
    use cmcp_registry::DeliveryStatus;
    use cmcp_registry::testing::{TestDb, company_connection};

    /// An `ignored` delivery (no job) with a body of `bytes` bytes.
    fn pending(key: &str, bytes: usize) -> (Pending, oneshot::Receiver<Reply>) {
        let (reply, answer) = oneshot::channel();
        let delivery = NewDelivery {
            connection_id: "gh".into(),
            platform: Platform::Github,
            delivery_key: key.into(),
            event: "ping".into(),
            headers: Vec::new(),
            body: vec![b' '; bytes],
            verification: "hmac-sha256".into(),
            status: DeliveryStatus::Ignored,
            error: None,
            replay_key: None,
        };
        let p = Pending {
            delivery,
            premise: None,
            reply,
        };
        (p, answer)
    }

    async fn answered(answer: &mut oneshot::Receiver<Reply>) -> bool {
        match tokio::time::timeout(Duration::from_millis(300), answer).await {
            Ok(reply) => {
                assert!(matches!(reply, Ok(Ok(Accepted::Recorded(_)))), "{reply:?}");
                true
            }
            Err(_) => false,
        }
    }

    /// SQLite: a committed batch is answered only after a WAL sync that
    /// began once it had committed. Batches committed while a sync runs
    /// wait for the next one and are answered by it together; a failed
    /// sync fails the batches it would have answered (503).
    #[tokio::test]
    async fn committed_batches_are_answered_after_the_next_wal_sync() {
        let (committed, rx) = mpsc::unbounded_channel::<Committed>();
        let (started_tx, mut started) = mpsc::unbounded_channel::<usize>();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let syncs = Arc::new(AtomicUsize::new(0));
        tokio::spawn(answer_when_synced(rx, {
            let (gate, fail, syncs) = (gate.clone(), fail.clone(), syncs.clone());
            move || {
                let n = syncs.fetch_add(1, Ordering::SeqCst) + 1;
                started_tx.send(n).unwrap();
                let (gate, fail) = (gate.clone(), fail.clone());
                async move {
                    gate.acquire().await.unwrap().forget();
                    if fail.load(Ordering::SeqCst) {
                        return Err(RegistryError::Database(sqlx::Error::Io(
                            std::io::Error::other("the disk is gone"),
                        )));
                    }
                    Ok(())
                }
            }
        }));
        let batch = |n: usize| {
            let mut answers = Vec::new();
            let mut batch = Vec::new();
            for _ in 0..n {
                let (reply, answer) = oneshot::channel();
                batch.push((reply, Accepted::Stale));
                answers.push(answer);
            }
            (batch, answers)
        };
        let waiting = |answers: &mut Vec<oneshot::Receiver<Reply>>| {
            answers
                .iter_mut()
                .all(|a| matches!(a.try_recv(), Err(oneshot::error::TryRecvError::Empty)))
        };
        let answered = |answers: Vec<oneshot::Receiver<Reply>>| async move {
            let mut all = Vec::new();
            for a in answers {
                all.push(a.await.expect("answered"));
            }
            all
        };

        let (first, mut first_answers) = batch(2);
        committed.send(first).unwrap();
        assert_eq!(started.recv().await, Some(1));
        // Committed while the first sync runs: not covered by it.
        let (second, mut second_answers) = batch(1);
        let (third, mut third_answers) = batch(3);
        committed.send(second).unwrap();
        committed.send(third).unwrap();
        tokio::task::yield_now().await;
        assert!(waiting(&mut first_answers), "nothing before its sync ends");
        gate.add_permits(1);
        let first = answered(first_answers).await;
        assert!(first.iter().all(|a| matches!(a, Ok(Accepted::Stale))));
        // The next sync takes both later batches.
        assert_eq!(started.recv().await, Some(2));
        assert!(waiting(&mut second_answers) && waiting(&mut third_answers));
        gate.add_permits(1);
        assert_eq!(answered(second_answers).await.len(), 1);
        assert_eq!(answered(third_answers).await.len(), 3);
        assert_eq!(syncs.load(Ordering::SeqCst), 2);

        // A sync that fails answers its batches 503, not accepted.
        fail.store(true, Ordering::SeqCst);
        let (fourth, fourth_answers) = batch(2);
        committed.send(fourth).unwrap();
        assert_eq!(started.recv().await, Some(3));
        gate.add_permits(1);
        for a in answered(fourth_answers).await {
            assert!(matches!(a, Err(WriteError::Store(_))), "{a:?}");
        }
    }

    /// A commit that ends by a panic is still uncounted, and its end told.
    #[tokio::test]
    async fn a_commit_that_panics_is_uncounted_and_its_end_told() {
        let (_queue, rx) = mpsc::channel::<Pending>(1);
        let shared = Shared {
            rx: Mutex::new(rx),
            committing: AtomicUsize::new(0),
            committed: Notify::new(),
        };
        let told = shared.committed.notified();
        tokio::pin!(told);
        told.as_mut().enable();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _committing = Committing::start(&shared);
            assert_eq!(shared.committing.load(Ordering::Acquire), 1);
            panic!("the store call panicked");
        }));
        assert!(unwound.is_err());
        assert_eq!(shared.committing.load(Ordering::Acquire), 0);
        tokio::time::timeout(Duration::from_secs(5), told)
            .await
            .expect("the waiting writer is told");
    }

    /// While another writer is committing, a writer holds small deliveries
    /// back and gathers them (nothing is answered until that commit ends,
    /// then all are, together); a batch whose bodies reach the overlap
    /// size goes at once. The rule lives in the gateway, not the store,
    /// so one backend shows it; "another writer" is a commit counted
    /// by the test.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_deliveries_wait_for_the_commit_in_flight_large_ones_overlap_it() {
        let db = TestDb::sqlite().await;
        company_connection(&db.store, "gh", Platform::Github).await;
        let (queue, rx) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            committing: AtomicUsize::new(0),
            committed: Notify::new(),
        });
        let another = Committing::start(&shared);
        tokio::spawn(run(
            db.store.delivery_writer(),
            shared.clone(),
            Batching {
                max: 64,
                window: Duration::ZERO,
                writers: 2,
                overlap_bytes: 1000,
            },
            None,
        ));

        let mut small = Vec::new();
        for i in 0..3 {
            let (p, answer) = pending(&format!("small-{i}"), 300);
            queue.send(p).await.unwrap();
            small.push(answer);
        }
        for answer in &mut small {
            assert!(!answered(answer).await, "held while the other commit runs");
        }
        // A fourth brings the batch past 1,000 bytes: it goes, all four.
        let (p, mut fourth) = pending("small-3", 300);
        queue.send(p).await.unwrap();
        assert!(answered(&mut fourth).await);
        for answer in &mut small {
            assert!(answered(answer).await);
        }

        // Below the size again, the end of the other commit lets it go.
        let (p, mut alone) = pending("alone", 10);
        queue.send(p).await.unwrap();
        assert!(!answered(&mut alone).await);
        drop(another);
        assert!(answered(&mut alone).await);

        // With no other commit in flight, a small delivery goes at once.
        let (p, mut next) = pending("next", 10);
        queue.send(p).await.unwrap();
        assert!(answered(&mut next).await);
        let stored = db.store.list_deliveries("gh").await.unwrap();
        assert_eq!(stored.len(), 6);
    }
}
