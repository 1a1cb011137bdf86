//! The HTTP edge of the fleet. For now: liveness, readiness (the store
//! answers) and Prometheus metrics; the signed webhook routes
//! (`/hooks/{platform}/{connection}`) join this router with the gateway
//! issue. The building blocks of those routes live beside the router:
//! [`verify`] turns a raw delivery into a trusted one, [`event`] turns a
//! trusted one into a neutral [`HookEvent`] and its dedupe key.

pub mod event;
pub mod verify;

pub use event::{DeliveryId, HookEvent, ParseError};
pub use verify::{
    DriveChannel, Unverified, Verified, VerifyError, WebhookSecret, sign, verify_drive_channel,
};

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use cmcp_registry::Store;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// What the edge's handlers share.
#[derive(Clone)]
pub struct EdgeState {
    pub store: Store,
    pub metrics: Option<PrometheusHandle>,
}

/// Install the process-wide Prometheus recorder once; later calls return
/// `None` (a recorder is already installed).
pub fn install_metrics() -> Option<PrometheusHandle> {
    PrometheusBuilder::new().install_recorder().ok()
}

/// The edge router: `/healthz`, `/readyz`, `/metrics`.
pub fn router(state: EdgeState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
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

async fn metrics(State(state): State<Arc<EdgeState>>) -> impl IntoResponse {
    match &state.metrics {
        Some(h) => (StatusCode::OK, h.render()),
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
