//! The long-running processes: `serve` (worker and HTTP edge in one),
//! `gateway` (the edge alone) and `worker` (jobs, and with `--listen` its
//! health and metrics), and how each of them stops.
//!
//! Stopping: the first SIGTERM (or ctrl-c) starts the drain. `/readyz`
//! answers 503 at once, the workers stop taking jobs and finish the ones
//! they hold, and the listener goes on serving until both the workers are
//! done and `drain_grace` has passed; then it stops accepting, finishes
//! requests in progress and the process exits. A second signal cuts the
//! grace short.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use cmcp_webhook_gateway::{Drain, EdgeState, Hooks, router};
use cmcp_worker::{WorkerOptions, run_workers};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

use crate::app::App;

/// Worker plus HTTP edge in one process: the embedded default.
pub async fn serve(app: &App) -> Result<()> {
    let listener = bind(&app.cfg.listen).await?;
    info!(listen = %app.cfg.listen, "serving /healthz, /readyz, /metrics, /hooks/{{platform}}/{{connection}}");
    let edge = router(edge_state(app, true))
        // The ADMIN's API (/v1/…) and one screen (/admin).
        .merge(cmcp_admin::router(
            cmcp_admin::AdminState::new(app.store.clone())
                .behind(&app.cfg.public_url)
                .with_key_cache(app.cfg.api_key_cache)
                .with_github_linker(std::sync::Arc::new(crate::linker::WorkerLinker {
                    store: app.store.clone(),
                    cipher: app.cipher.clone(),
                    http: app.cfg.http.clone(),
                })),
        ));
    workers_with_listener(app, "serve", Some((listener, edge))).await
}

/// The webhook gateway alone (for a fleet: gateways in front, workers
/// behind, one PostgreSQL).
pub async fn gateway(app: &App) -> Result<()> {
    let listener = bind(&app.cfg.listen).await?;
    info!(listen = %app.cfg.listen, "gateway serving /hooks/{{platform}}/{{connection}}, /healthz, /readyz, /metrics");
    let stop = Stopping::on_signal(app.cfg.drain_grace);
    let edge = stop.drain.guard(router(edge_state(app, true)));
    cmcp_webhook_gateway::listen::serve(
        listener,
        edge,
        &app.cfg.gateway,
        stop.listener_stop(std::future::ready(())),
    )
    .await
    .context("http server")?;
    Ok(())
}

/// A worker process; with `worker_listen` (`worker --listen`) it also
/// serves `/healthz`, `/readyz` and `/metrics` (no webhook routes) on the
/// same bounded listener as the gateway.
pub async fn worker(app: &App) -> Result<()> {
    let edge = if app.cfg.worker_listen.trim().is_empty() {
        None
    } else {
        let listener = bind(&app.cfg.worker_listen).await?;
        info!(listen = %app.cfg.worker_listen, "worker serving /healthz, /readyz, /metrics");
        Some((listener, router(edge_state(app, false))))
    };
    workers_with_listener(app, "worker", edge).await
}

async fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// The fleet's workers (and scheduler) until the signal, with `edge`
/// served beside them until they have drained.
async fn workers_with_listener(
    app: &App,
    prefix: &str,
    edge: Option<(TcpListener, Router)>,
) -> Result<()> {
    let stop = Stopping::on_signal(app.cfg.drain_grace);
    let (done_tx, mut done_rx) = watch::channel(false);
    let http = edge.map(|(listener, edge)| {
        let edge = stop.drain.guard(edge);
        let limits = app.cfg.gateway.clone();
        let workers_done = async move {
            let _ = done_rx.wait_for(|done| *done).await;
        };
        let until = stop.listener_stop(workers_done);
        tokio::spawn(async move {
            cmcp_webhook_gateway::listen::serve(listener, edge, &limits, until).await
        })
    });
    let opts = WorkerOptions::unique(prefix);
    // The worker also runs the fleet's scheduler: reconciles, push-channel
    // upkeep and retention are scheduled jobs, one per tick for the fleet.
    let ran = run_workers(app.fleet_worker_state(&opts), opts, stop.signalled()).await;
    let _ = done_tx.send(true);
    if let Some(http) = http {
        http.await.context("http task")?.context("http server")?;
    }
    ran?;
    Ok(())
}

/// The edge's state; installs the process's recorder and starts its
/// sampler. `hooks`: whether the webhook routes are served.
fn edge_state(app: &App, hooks: bool) -> EdgeState {
    let metrics = crate::observe::recorder();
    if let Some(handle) = &metrics {
        crate::observe::spawn_sampler(
            app.store.clone(),
            handle.clone(),
            app.cfg.metrics_sample_every,
        );
    }
    EdgeState {
        store: app.store.clone(),
        metrics,
        hooks: hooks.then(|| Hooks::new(app.cipher.clone(), app.cfg.gateway.clone())),
    }
}

/// What the signals of one process have said so far.
struct Stopping {
    drain: Drain,
    /// True after the first signal.
    signalled: watch::Receiver<bool>,
    /// True after a second signal: stop without the rest of the grace.
    hurry: watch::Receiver<bool>,
    grace: Duration,
}

impl Stopping {
    /// Watch for SIGTERM / ctrl-c for the rest of the process.
    fn on_signal(grace: Duration) -> Stopping {
        let drain = Drain::new();
        let (signalled_tx, signalled) = watch::channel(false);
        let (hurry_tx, hurry) = watch::channel(false);
        let flag = drain.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            flag.start();
            info!(
                grace_ms = grace.as_millis() as u64,
                "draining: /readyz answers 503"
            );
            let _ = signalled_tx.send(true);
            shutdown_signal().await;
            info!("second signal: stopping without the rest of the grace");
            let _ = hurry_tx.send(true);
        });
        Stopping {
            drain,
            signalled,
            hurry,
            grace,
        }
    }

    /// Resolves on the first signal.
    fn signalled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.signalled.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Resolves when the listener should close: after the first signal,
    /// once `others` (the workers) are done and the grace has passed, or
    /// at a second signal.
    fn listener_stop(
        &self,
        others: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let signalled = self.signalled();
        let mut hurry = self.hurry.clone();
        let grace = self.grace;
        async move {
            signalled.await;
            let drained = async {
                tokio::join!(tokio::time::sleep(grace), others);
            };
            tokio::select! {
                () = drained => {},
                _ = hurry.wait_for(|h| *h) => {},
            }
        }
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    info!("shutting down");
}
