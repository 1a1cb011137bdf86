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
            cmcp_admin::AdminState::new(app.store.clone())
                .behind(&app.cfg.public_url)
                .with_github_linker(std::sync::Arc::new(crate::linker::WorkerLinker {
                    store: app.store.clone(),
                    cipher: app.cipher.clone(),
                    http: app.cfg.http.clone(),
                })),
        ));
    let limits = app.cfg.gateway.clone();
    let http = tokio::spawn(async move {
        cmcp_webhook_gateway::listen::serve(listener, edge, &limits, shutdown_signal()).await
    });
    let opts = WorkerOptions::unique("serve");
    // The worker also runs the fleet's scheduler: reconciles, push-channel
    // upkeep and retention are scheduled jobs, one per tick for the fleet.
    run_workers(app.fleet_worker_state(&opts), opts, shutdown_signal()).await?;
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
    cmcp_webhook_gateway::listen::serve(
        listener,
        router(edge_state(app)),
        &app.cfg.gateway,
        shutdown_signal(),
    )
    .await
    .context("http server")?;
    Ok(())
}

fn edge_state(app: &App) -> EdgeState {
    EdgeState {
        store: app.store.clone(),
        metrics: install_metrics(),
        hooks: Some(Hooks::new(app.cipher.clone(), app.cfg.gateway.clone())),
    }
}

/// A worker process only.
pub async fn worker(app: &App) -> Result<()> {
    let opts = WorkerOptions::unique("worker");
    run_workers(app.fleet_worker_state(&opts), opts, shutdown_signal()).await?;
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
