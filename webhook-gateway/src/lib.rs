//! The HTTP edge of the fleet: liveness, readiness (the store answers),
//! Prometheus metrics, and the signed webhook routes
//! `POST /hooks/{platform}/{connection}` ([`hooks`]). The building blocks of
//! those routes live beside the router: [`verify`] turns a raw delivery into
//! a trusted one, [`metrics`] declares what is counted. What a trusted
//! delivery means (its event and dedupe key) is the platform's business and
//! lives with its connector (`cmcp_connectors::webhook`).

mod cache;
pub mod config;
pub mod drain;
pub mod hooks;
pub mod listen;
pub mod metrics;
pub mod verify;
mod writer;

pub use drain::Drain;
pub use hooks::{GatewayConfig, Hooks};
pub use metrics_exporter_prometheus::PrometheusHandle;

pub use verify::{
    DriveChannel, Unverified, Verified, VerifyError, WebhookSecret, sign, verify_drive_channel,
};

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use cmcp_registry::Store;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tower_http::timeout::TimeoutLayer;

/// What the edge's handlers share.
#[derive(Clone)]
pub struct EdgeState {
    pub store: Store,
    pub metrics: Option<PrometheusHandle>,
    /// `None`: the webhook routes answer 404 (a process serving health only).
    pub hooks: Option<Hooks>,
}

/// Install the process-wide Prometheus recorder once, with this crate's
/// histograms as histograms with buckets; later calls return `None` (a
/// recorder is already installed).
pub fn install_metrics() -> Option<PrometheusHandle> {
    install_metrics_with(&[])
}

/// [`install_metrics`] with the buckets of other crates' histograms too
/// (the binary passes the worker's and the connectors'). A histogram
/// without buckets would be exported as a summary, which cannot be summed
/// across processes, so every histogram a process records must be listed.
pub fn install_metrics_with(histograms: &[(&str, &[f64])]) -> Option<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in metrics::HISTOGRAMS.iter().chain(histograms) {
        builder = builder
            .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
            .ok()?;
    }
    let handle = builder.install_recorder().ok();
    if handle.is_some() {
        metrics::describe();
        metrics::build_info();
    }
    handle
}

/// The edge router: `/healthz`, `/readyz`, `/metrics` and
/// `POST /hooks/{platform}/{connection}`. The hook route reads its body
/// itself against the platform's limit, so axum's default limit is lifted
/// there; it must be read whole within the body read timeout (a trickled
/// body is cut there, 408), whatever serves the router.
pub fn router(state: EdgeState) -> Router {
    let deadline = state
        .hooks
        .as_ref()
        .map_or(GatewayConfig::default().body_read_timeout, |h| {
            h.config.body_read_timeout
        });
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .route(
            "/hooks/{platform}/{connection}",
            post(hooks::receive)
                .layer(DefaultBodyLimit::disable())
                .layer::<_, Infallible>(listen::body_stall_deadline(deadline))
                .layer::<_, Infallible>(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    deadline,
                )),
        )
        .with_state(Arc::new(state))
}

/// The process is up and serving.
async fn healthz() -> &'static str {
    "ok"
}

/// Ready means the store answers: a gateway that cannot store a delivery
/// must not receive one.
async fn readyz(State(state): State<Arc<EdgeState>>) -> impl IntoResponse {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready".to_owned()),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "store unreachable".to_owned(),
            )
        }
    }
}

/// The scrape also measures the age of the oldest delivery still waiting
/// for its job, from the store (a gauge only the store can know).
async fn render_metrics(State(state): State<Arc<EdgeState>>) -> impl IntoResponse {
    match &state.metrics {
        Some(h) => {
            match state.store.oldest_unprocessed_delivery().await {
                Ok(oldest) => {
                    metrics::oldest_unprocessed(oldest.map(hooks::age).unwrap_or_default())
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the oldest unprocessed delivery"),
            }
            match state.store.delivery_counts().await {
                Ok(counts) => {
                    for (status, n) in counts {
                        metrics::stored_deliveries(status.as_str(), n);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot count stored deliveries"),
            }
            (StatusCode::OK, h.render())
        }
        None => (
            StatusCode::NOT_FOUND,
            "metrics recorder not installed in this process".to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    #[tokio::test]
    async fn health_and_readiness() {
        let db = cmcp_registry::testing::TestDb::sqlite().await;
        let app = router(EdgeState {
            store: db.store.clone(),
            metrics: None,
            hooks: None,
        });
        let ok = app
            .clone()
            .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
        let ready = app
            .clone()
            .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(ready.status(), StatusCode::OK);
        db.store.close().await;
        let down = app
            .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
