//! A running sync's figures, written to its run row while it goes, so that
//! `sync --wait` (or anyone reading the run) sees pages, items, requests
//! and budget waits before the end; and the request counters a listing
//! that ends in an error leaves behind, so a failed run still says where
//! the budget went.
//!
//! The HTTP figures are the connector's own [`Counters`], shared with the
//! listing task; the registry figures (items seen, created…) are the
//! engine's, sent here after each page. A background task writes both
//! every [`PROGRESS_EVERY`] when they changed; the write only touches a
//! run still `running`, so it can never overwrite the final figures.

use std::sync::Arc;
use std::time::Duration;

use cmcp_connectors::{Counters, HttpFigures};
use cmcp_domain::RunFigures;
use cmcp_registry::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::debug;

/// How often a running sync writes its figures to its run row.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The live figures of one run and the task that records them.
pub struct Progress {
    counters: Arc<Counters>,
    figures: watch::Sender<RunFigures>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts recording the progress of the run `run_id`.
    pub fn start(store: &Store, run_id: &str, every: Duration) -> Progress {
        let counters = Arc::new(Counters::default());
        let (figures, rx) = watch::channel(RunFigures::default());
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(record(
            store.clone(),
            run_id.to_owned(),
            counters.clone(),
            rx,
            stop_rx,
            every,
        ));
        Progress {
            counters,
            figures,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The counters the listing counts its requests into.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The engine's figures so far (after a page was applied).
    pub fn note(&self, figures: &RunFigures) {
        self.figures.send_replace(figures.clone());
    }

    /// The HTTP figures counted so far.
    pub fn http(&self) -> HttpFigures {
        self.counters.figures()
    }

    /// Stops recording; returns once no progress write can follow.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An early return (a registry error) must not leave the task behind.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// `figures` with the listing's HTTP figures in place of its own.
pub fn with_http(mut figures: RunFigures, http: &HttpFigures) -> RunFigures {
    figures.pages = http.pages;
    figures.requests = http.requests;
    figures.not_modified = http.not_modified;
    figures.retries = http.retries;
    figures.rate_limit_waits = http.rate_limit_waits;
    figures
}

async fn record(
    store: Store,
    run_id: String,
    counters: Arc<Counters>,
    figures: watch::Receiver<RunFigures>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = RunFigures::default();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let now = with_http(figures.borrow().clone(), &counters.figures());
        if now == last {
            continue;
        }
        if let Err(e) = store.record_run_progress(&run_id, &now).await {
            // Progress is advice: the run's end records the figures anyway.
            debug!(run_id, error = %e, "could not record the run's progress");
        }
        last = now;
    }
}
