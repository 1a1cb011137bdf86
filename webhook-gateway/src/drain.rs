//! Draining: once a process is told to stop, its `/readyz` answers 503 so
//! a load balancer or Kubernetes takes it out of rotation, while it goes
//! on serving (requests in progress, `/healthz`, `/metrics`) and its
//! workers finish their jobs. The binary flips the flag on SIGTERM and
//! closes the listener only after the drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;

/// The readiness path a drain answers 503 on.
pub const READYZ: &str = "/readyz";

/// A process-wide "stopping" flag, shared by its listener and whoever
/// handles the signal.
#[derive(Debug, Clone, Default)]
pub struct Drain(Arc<AtomicBool>);

impl Drain {
    pub fn new() -> Drain {
        Drain::default()
    }

    /// From now on `/readyz` answers 503.
    pub fn start(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `router` with its `/readyz` answering 503 `draining` once the drain
    /// has started (before the store is asked); every other route as it was.
    pub fn guard(&self, router: Router) -> Router {
        let drain = self.clone();
        router.layer(middleware::from_fn(move |req: Request, next: Next| {
            let draining = drain.is_draining() && req.uri().path() == READYZ;
            async move {
                if draining {
                    return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
                }
                next.run(req).await
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    #[tokio::test]
    async fn readyz_turns_503_once_draining_and_the_rest_still_answers() {
        let drain = Drain::new();
        let app = drain.guard(
            Router::new()
                .route(READYZ, get(|| async { "ready" }))
                .route("/healthz", get(|| async { "ok" })),
        );
        let get = |path: &'static str| {
            app.clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
        };
        assert_eq!(get(READYZ).await.unwrap().status(), StatusCode::OK);
        drain.start();
        assert_eq!(
            get(READYZ).await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(get("/healthz").await.unwrap().status(), StatusCode::OK);
    }
}
