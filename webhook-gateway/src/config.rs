//! The edge's settings, `[gateway]` in the config file.

use std::time::Duration;

use serde::Deserialize;

/// The edge's settings (`[gateway]` in the config file): body caps for the
/// hook routes, the time and concurrency bounds of every listener
/// (`serve`, `gateway`; see [`crate::listen`]), and how deliveries are
/// cached and committed.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// A ceiling over every platform's own body limit
    /// (`cmcp_connectors::webhook::intake::max_body_bytes`): a larger
    /// delivery is refused with 413.
    pub max_body_bytes: usize,
    /// Bytes of delivery bodies held at once by this process; a delivery
    /// that would go past it is answered 503 with `Retry-After` before any
    /// of its body is read. It reserves its `Content-Length`, or its
    /// platform's limit when it sends none.
    pub max_inflight_body_bytes: usize,
    /// A request head must arrive within this; hyper also closes a
    /// kept-alive connection idle for this long.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub header_read_timeout: Duration,
    /// A delivery's whole body must arrive within this (10 s, GitHub's own
    /// delivery timeout: a later answer is a failure to GitHub anyway);
    /// every other route's body may not stall longer than this between
    /// two chunks.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub body_read_timeout: Duration,
    /// Any request, body and handler included.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub request_timeout: Duration,
    /// Open connections per listener; a new one past it is closed at once.
    pub max_connections: usize,
    /// Requests in progress per listener; past it the answer is 503 with
    /// `Retry-After` at once.
    pub max_concurrent_requests: usize,
    /// How long this process trusts its copy of a connection's status and
    /// webhook secrets (see [`crate::cache`]); every write re-checks both
    /// against the store, so this only bounds how long a connection
    /// disabled elsewhere still has its bodies read before the 401. Zero
    /// reads them for every delivery.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub connection_cache_ttl: Duration,
    /// Deliveries committed together in one transaction at most
    /// ([`crate::writer`]).
    pub commit_batch_max: usize,
    /// How long a writer waits for more deliveries before it commits a
    /// batch. Zero commits at once what queued during the previous commit:
    /// no wait under light load, full batches under heavy load.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub commit_window: Duration,
    /// Writers committing at once on PostgreSQL (SQLite always has one).
    /// Each holds a database connection of its own, beside the store's
    /// pool ([`cmcp_registry::DeliveryWriter`]).
    pub commit_writers: usize,
    /// While another writer is committing, a writer keeps gathering until
    /// the bodies of its batch reach this many bytes (or that commit
    /// ends): small deliveries in fewer, larger commits, large ones in
    /// overlapping commits ([`crate::writer`]).
    pub commit_overlap_bytes: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_body_bytes: 25 * 1024 * 1024,
            max_inflight_body_bytes: 64 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 8192,
            max_concurrent_requests: 1024,
            connection_cache_ttl: Duration::from_secs(5),
            commit_batch_max: 64,
            commit_window: Duration::ZERO,
            commit_writers: 2,
            commit_overlap_bytes: 64 * 1024,
        }
    }
}
