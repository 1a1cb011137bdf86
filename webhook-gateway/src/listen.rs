//! Serving a router on a TCP listener with every wait bounded.
//!
//! `axum::serve` sets no header timeout, no idle timeout and no limit on
//! connections or requests, so a client that never finishes a header block
//! (or opens thousands of them) holds a descriptor and a task forever. Here
//! each connection runs on hyper's HTTP/1 server with its timer:
//!
//! - `header_read_timeout` bounds the header block. hyper starts that timer
//!   whenever the connection waits for a request head, so it is also the
//!   idle keep-alive timeout: a kept-alive connection that sends nothing
//!   for that long is closed.
//! - the request timeout (`tower-http`'s `TimeoutLayer`) bounds the whole
//!   request, and the body timeout (`RequestBodyTimeoutLayer`) a stalled
//!   body; the hook route adds its own, shorter deadline ([`crate::router`]).
//! - `max_connections` bounds descriptors: past it a new connection is
//!   closed at once. `max_concurrent_requests` bounds work: past it a
//!   request is answered 503 with `Retry-After` before its body is read.
//!
//! Shutdown stops accepting, lets requests in progress finish and closes
//! idle connections (hyper-util's graceful shutdown).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::{TimeoutBody, TimeoutLayer};
use tracing::{debug, warn};

use crate::GatewayConfig;
use crate::metrics as m;

/// Serve `router` on `listener` with the limits of `config` until
/// `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: &GatewayConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let app = bounded(router, config);
    let connections = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors and the like: back off, never spin.
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            m::connection_refused();
            debug!(%peer, "connection refused: too many open connections");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        // The peer address, for handlers that limit by client
        // (`ConnectInfo`, as axum's own `serve` would give it).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The layers every listener gets: a cap on requests in progress (answered
/// at once when full), a whole-request deadline and a body stall deadline.
pub fn bounded(router: Router, config: &GatewayConfig) -> Router {
    let requests = Arc::new(Semaphore::new(config.max_concurrent_requests.max(1)));
    router
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            config.request_timeout,
        ))
        .layer(body_stall_deadline(config.body_read_timeout))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let requests = requests.clone();
            async move {
                let Ok(_permit) = requests.try_acquire_owned() else {
                    m::overloaded("requests");
                    return overloaded();
                };
                next.run(req).await
            }
        }))
}

/// A request body may not stall longer than `d` between two chunks
/// (`tower-http`'s `TimeoutBody`; axum's extractors want its `Body`, so the
/// timed body is wrapped back into one).
pub fn body_stall_deadline(
    d: Duration,
) -> axum::middleware::MapRequestLayer<
    impl Fn(Request) -> std::future::Ready<Request> + Clone,
    (),
    (Request,),
> {
    middleware::map_request(move |req: Request| {
        std::future::ready(req.map(|b| Body::new(TimeoutBody::new(d, b))))
    })
}

/// 503 with a hint to come back in a second: the platform retries (GitHub
/// lets an operator redeliver), and nothing was read or stored.
pub fn overloaded() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1")],
        "overloaded, retry later",
    )
        .into_response()
}
