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
        .merge(cmcp_admin::router(
            cmcp_admin::AdminState::new(app.store.clone()).with_github_linker(std::sync::Arc::new(
                crate::linker::WorkerLinker {
                    store: app.store.clone(),
                    cipher: app.cipher.clone(),
                    http: app.cfg.http.clone(),
                },
            )),
        ));
    let http = tokio::spawn(async move {
        axum::serve(listener, edge)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });
    let opts = WorkerOptions::unique("serve");
    let upkeep = spawn_drive_channel_upkeep(app, &opts);
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
    let upkeep = spawn_drive_channel_upkeep(app, &opts);
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

/// Keep every enabled Drive connection's push channels open: at start and
/// then every `drive_channels_every`, open missing channels, renew those
/// near expiry (new first, then stop the old) and run an incremental pass
/// after a lapse. Several processes may do this at once; a duplicate
/// channel is stopped by the next pass.
fn spawn_drive_channel_upkeep(app: &App, opts: &WorkerOptions) -> tokio::task::JoinHandle<()> {
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
            let connections = match state.ctx.store.list_connections().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "drive channel upkeep: cannot list connections");
                    continue;
                }
            };
            for c in connections.iter().filter(|c| {
                c.platform == cmcp_domain::Platform::Drive
                    && c.status == cmcp_domain::ConnectionStatus::Enabled
            }) {
                match cmcp_worker::push_channels::ensure_channels(&state.ctx, &c.id, &public_url)
                    .await
                {
                    Ok(r) => tracing::info!(
                        connection_id = %c.id,
                        opened = r.opened,
                        renewed = r.renewed,
                        lapsed = r.lapsed,
                        failed = r.failed,
                        "drive channels checked"
                    ),
                    Err(e) => {
                        tracing::warn!(connection_id = %c.id, error = %e, "drive channel upkeep failed")
                    }
                }
            }
        }
    })
}
