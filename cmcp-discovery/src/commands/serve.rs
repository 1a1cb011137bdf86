use anyhow::{Context, Result};
use cmcp_webhook_gateway::{EdgeState, Hooks, install_metrics, router};
use cmcp_worker::{WorkerOptions, run_workers};
use tracing::info;

use crate::app::App;

/// Worker plus HTTP edge in one process: the embedded default.
pub async fn serve(app: &App) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&app.cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", app.cfg.listen))?;
    info!(listen = %app.cfg.listen, "serving /healthz, /readyz, /metrics, /hooks/{{platform}}/{{connection}}");
    let edge = router(edge_state(app))
        // The ADMIN's API (/v1/…) and one screen (/admin).
        .merge(cmcp_admin::router(cmcp_admin::AdminState::new(
            app.store.clone(),
        )));
    let http = tokio::spawn(async move {
        axum::serve(listener, edge)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });
    let opts = WorkerOptions::unique("serve");
    let upkeep = spawn_push_channel_upkeep(app, &opts);
    run_workers(app.worker_state(&opts), opts, shutdown_signal()).await?;
    upkeep.abort();
    http.await.context("http task")?.context("http server")?;
    Ok(())
}

/// The webhook gateway alone (for a fleet: gateways in front, workers
/// behind, one PostgreSQL).
pub async fn gateway(app: &App) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&app.cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", app.cfg.listen))?;
    info!(listen = %app.cfg.listen, "gateway serving /hooks/{{platform}}/{{connection}}, /healthz, /readyz, /metrics");
    axum::serve(listener, router(edge_state(app)))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("http server")?;
    Ok(())
}

fn edge_state(app: &App) -> EdgeState {
    EdgeState {
        store: app.store.clone(),
        metrics: install_metrics(),
        hooks: Some(Hooks {
            cipher: app.cipher.clone(),
            config: app.cfg.gateway.clone(),
        }),
    }
}

/// A worker process only.
pub async fn worker(app: &App) -> Result<()> {
    let opts = WorkerOptions::unique("worker");
    let upkeep = spawn_push_channel_upkeep(app, &opts);
    run_workers(app.worker_state(&opts), opts, shutdown_signal()).await?;
    upkeep.abort();
    Ok(())
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

/// Keep open the push channels of every enabled connection whose connector
/// has them: at start and then every `drive_channels_every`, open missing
/// channels, renew those near expiry (new first, then stop the old) and run
/// an incremental pass after a lapse. Several processes may do this at once; a duplicate
/// channel is stopped by the next pass.
fn spawn_push_channel_upkeep(app: &App, opts: &WorkerOptions) -> tokio::task::JoinHandle<()> {
    let state = app.worker_state(opts);
    let public_url = app.cfg.public_url.clone();
    let every = app
        .cfg
        .drive_channels_every
        .max(std::time::Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let reports = match cmcp_worker::push_channels::ensure_all_channels(
                &state.ctx,
                &public_url,
            )
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "push channel upkeep: cannot list connections");
                    continue;
                }
            };
            for (connection_id, report) in reports {
                match report {
                    Ok(r) => tracing::info!(
                        %connection_id,
                        opened = r.opened,
                        renewed = r.renewed,
                        lapsed = r.lapsed,
                        failed = r.failed,
                        "push channels checked"
                    ),
                    Err(e) => {
                        tracing::warn!(%connection_id, error = %e, "push channel upkeep failed")
                    }
                }
            }
        }
    })
}
