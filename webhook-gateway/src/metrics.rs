//! Every metric the gateway emits, declared once so names and labels cannot
//! drift between the places that record them. Recording goes through the
//! `metrics` facade: without an installed recorder (tests, the CLI) it is a
//! no-op; `serve` and `gateway` install the Prometheus one.

use std::time::Duration;

use cmcp_domain::Platform;

/// Deliveries by `platform` and `outcome`.
pub const DELIVERIES: &str = "cmcp_webhook_deliveries_total";
/// Refused signatures / channel checks by `platform` and `reason`.
pub const VERIFICATION_FAILURES: &str = "cmcp_webhook_verification_failures_total";
/// Events stored but not modelled, by `platform`.
pub const UNKNOWN_EVENTS: &str = "cmcp_webhook_unknown_events_total";
/// Seconds to store a delivery and its job (the time before the 2xx).
pub const ENQUEUE_SECONDS: &str = "cmcp_webhook_enqueue_seconds";
/// Deliveries in each transaction a delivery writer committed (group
/// commit, [`crate::writer`]): mostly 1 means little concurrent load;
/// batches at `commit_batch_max` mean the writers are the bottleneck.
pub const COMMIT_DELIVERIES: &str = "cmcp_webhook_commit_deliveries";
/// SQLite: checkpoints run beside the delivery writer, which copy its WAL
/// into the database file while it goes on
/// ([`cmcp_registry::CHECKPOINT_BESIDE_AFTER_BYTES`]); counted at the
/// writer's next commit. Always 0 on PostgreSQL.
pub const CHECKPOINTS_BESIDE: &str = "cmcp_webhook_checkpoints_beside_total";
/// PostgreSQL: batches a delivery writer wrote twice, because its first
/// try (without `ON CONFLICT`) met a stored copy of a key; after one, the
/// writer skips copies from the start for 10 s. Always 0 on SQLite.
pub const BATCHES_WRITTEN_AGAIN: &str = "cmcp_webhook_batches_written_again_total";
/// SQLite: syncs of the WAL after which the delivery writer's committed
/// batches were answered ([`cmcp_registry::WalSync`]); one covers every
/// batch committed while the one before it ran, so under load there are
/// fewer than commits. Always 0 on PostgreSQL.
pub const WAL_SYNCS: &str = "cmcp_webhook_wal_syncs_total";
/// Age in seconds of the oldest delivery still waiting for its job (0 when
/// none is); computed from the store at scrape time.
pub const OLDEST_UNPROCESSED_SECONDS: &str = "cmcp_webhook_oldest_unprocessed_seconds";
/// Stored deliveries by `status` (`received`, `processed`, `failed`,
/// `ignored`); computed from the store at scrape time.
pub const STORED_DELIVERIES: &str = "cmcp_webhook_stored_deliveries";
/// Requests answered 503 before any work, by the `limit` that was full
/// (`requests`, `body_bytes`).
pub const OVERLOADED: &str = "cmcp_http_overloaded_total";
/// Connections closed at accept because the listener had too many open.
pub const CONNECTIONS_REFUSED: &str = "cmcp_http_connections_refused_total";
/// Always 1, labelled with the `version` the process runs (a fleet in the
/// middle of an upgrade shows two).
pub const BUILD_INFO: &str = "cmcp_build_info";

/// Buckets of [`ENQUEUE_SECONDS`]: one transaction on a local store takes
/// milliseconds; GitHub gives up on the answer after 10 s.
pub const ENQUEUE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of [`COMMIT_DELIVERIES`], up to past the default
/// `commit_batch_max` (64).
pub const COMMIT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Every histogram of this crate with its buckets, for the process that
/// installs the recorder.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (ENQUEUE_SECONDS, ENQUEUE_BUCKETS),
    (COMMIT_DELIVERIES, COMMIT_BUCKETS),
];

cmcp_domain::string_enum! {
    /// What became of one delivery at the edge (the `outcome` label).
    pub enum Outcome: "delivery outcome" {
        /// Stored with its job.
        Accepted = "accepted",
        /// Stored, nothing to do (an event the catalogue ignores or does not
        /// model).
        Ignored = "ignored",
        /// Already stored; acknowledged again, no second job.
        Duplicate = "duplicate",
        BadSignature = "bad_signature",
        UnknownConnection = "unknown_connection",
        TooLarge = "too_large",
        /// Not in a media type the platform sends: 415.
        UnsupportedMedia = "unsupported_media",
        /// The body did not arrive within the read deadline: 408.
        Timeout = "timeout",
        /// The gateway was at its body-bytes cap: 503, nothing read.
        Overloaded = "overloaded",
        /// Signed but not understood: stored as failed and acknowledged.
        Failed = "failed",
        /// The store could not take it: 503, the sender retries.
        Unavailable = "unavailable",
    }
}

/// Platform label; `unknown` for a route naming no platform.
pub fn platform_label(platform: Option<Platform>) -> &'static str {
    platform.map_or("unknown", Platform::as_str)
}

pub fn delivery(platform: Option<Platform>, outcome: Outcome) {
    metrics::counter!(DELIVERIES, "platform" => platform_label(platform), "outcome" => outcome.as_str())
        .increment(1);
}

pub fn verification_failure(platform: Platform, reason: &'static str) {
    metrics::counter!(VERIFICATION_FAILURES, "platform" => platform.as_str(), "reason" => reason)
        .increment(1);
}

pub fn unknown_event(platform: Platform) {
    metrics::counter!(UNKNOWN_EVENTS, "platform" => platform.as_str()).increment(1);
}

pub fn enqueue_latency(elapsed: Duration) {
    metrics::histogram!(ENQUEUE_SECONDS).record(elapsed.as_secs_f64());
}

pub fn oldest_unprocessed(age: Duration) {
    metrics::gauge!(OLDEST_UNPROCESSED_SECONDS).set(age.as_secs_f64());
}

pub fn stored_deliveries(status: &'static str, n: i64) {
    metrics::gauge!(STORED_DELIVERIES, "status" => status).set(n as f64);
}

/// One transaction of `deliveries` committed by a delivery writer.
pub fn committed(deliveries: usize) {
    metrics::histogram!(COMMIT_DELIVERIES).record(deliveries as f64);
}

/// One sync of the SQLite WAL answered the batches committed before it.
pub fn wal_synced() {
    metrics::counter!(WAL_SYNCS).increment(1);
}

/// `n` more checkpoints ran beside the SQLite delivery writer.
pub fn checkpoints_beside(n: u64) {
    metrics::counter!(CHECKPOINTS_BESIDE).increment(n);
}

/// `n` more batches were written a second time (PostgreSQL).
pub fn written_again(n: u64) {
    metrics::counter!(BATCHES_WRITTEN_AGAIN).increment(n);
}

pub fn overloaded(limit: &'static str) {
    metrics::counter!(OVERLOADED, "limit" => limit).increment(1);
}

pub fn connection_refused() {
    metrics::counter!(CONNECTIONS_REFUSED).increment(1);
}

/// The build gauge, and the edge's rare counters at 0 so a rate over them
/// works before their first event.
pub fn build_info() {
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for limit in ["requests", "body_bytes"] {
        metrics::counter!(OVERLOADED, "limit" => limit).increment(0);
    }
    metrics::counter!(CONNECTIONS_REFUSED).increment(0);
    metrics::counter!(CHECKPOINTS_BESIDE).increment(0);
    metrics::counter!(BATCHES_WRITTEN_AGAIN).increment(0);
    metrics::counter!(WAL_SYNCS).increment(0);
}

/// Help texts for the exporter.
pub fn describe() {
    metrics::describe_gauge!(BUILD_INFO, "The version this process runs (always 1)");
    metrics::describe_counter!(DELIVERIES, "Webhook deliveries by platform and outcome");
    metrics::describe_counter!(
        VERIFICATION_FAILURES,
        "Webhook deliveries refused by signature or channel check"
    );
    metrics::describe_counter!(
        UNKNOWN_EVENTS,
        "Stored webhook events that are not modelled"
    );
    metrics::describe_histogram!(
        ENQUEUE_SECONDS,
        metrics::Unit::Seconds,
        "Time to store a delivery and its job before acknowledging"
    );
    metrics::describe_histogram!(
        COMMIT_DELIVERIES,
        "Deliveries in each transaction committed by a delivery writer"
    );
    metrics::describe_counter!(
        CHECKPOINTS_BESIDE,
        "SQLite WAL checkpoints run beside the delivery writer"
    );
    metrics::describe_counter!(
        BATCHES_WRITTEN_AGAIN,
        "Delivery batches written twice: their first try met a stored copy of a key"
    );
    metrics::describe_counter!(
        WAL_SYNCS,
        "SQLite WAL syncs after which committed deliveries were answered"
    );
    metrics::describe_gauge!(
        OLDEST_UNPROCESSED_SECONDS,
        metrics::Unit::Seconds,
        "Age of the oldest delivery not yet processed"
    );
    metrics::describe_gauge!(
        STORED_DELIVERIES,
        "Stored webhook deliveries by status (failed ones wait for a replay)"
    );
    metrics::describe_counter!(
        OVERLOADED,
        "Requests refused with 503 because a limit was full"
    );
    metrics::describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections closed at accept because too many were open"
    );
}
