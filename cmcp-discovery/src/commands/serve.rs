use anyhow::{Context, Result};
use cmcp_webhook_gateway::{EdgeState, install_metrics, router};
use cmcp_worker::{WorkerOptions, run_workers};
use tracing::info;

use crate::app::App;

/// Worker plus HTTP edge in one process: the embedded default.
pub async fn serve(app: &App) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&app.cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", app.cfg.listen))?;
    info!(listen = %app.cfg.listen, "serving /healthz, /readyz, /metrics");
    let edge = router(EdgeState {
        store: app.store.clone(),
        metrics: install_metrics(),
    });
    let http = tokio::spawn(async move {
        axum::serve(listener, edge)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });
    let opts = WorkerOptions::unique("serve");
    run_workers(app.worker_state(&opts), opts, shutdown_signal()).await?;
    http.await.context("http task")?.context("http server")?;
    Ok(())
}

/// A worker process only.
pub async fn worker(app: &App) -> Result<()> {
    let opts = WorkerOptions::unique("worker");
    run_workers(app.worker_state(&opts), opts, shutdown_signal()).await?;
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
