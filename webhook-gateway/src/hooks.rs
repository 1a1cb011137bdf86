//! `POST /hooks/{platform}/{connection}`: one endpoint per connection.
//!
//! The order of a delivery's life here is the point of this module:
//!
//! 1. the media type is one the platform sends, else 415 (before the
//!    connection is looked up);
//! 2. the route names an enabled connection of that platform, else 401,
//!    with the very answer of a bad signature and before any body byte is
//!    read: an unknown id, a platform mismatch, a disabled connection and
//!    a forgery look the same from outside. The connection and its secrets
//!    come from the process's copy ([`crate::cache`]), which step 5
//!    re-checks;
//! 3. the body is read up to the platform's limit (413 past it), within
//!    the read deadline (408), and only when the process's budget of body
//!    bytes in flight can hold it (503 with `Retry-After`, nothing read);
//! 4. the raw bytes are verified against every currently valid secret of
//!    the connection (a rotation overlaps two), else 401 — before anything
//!    parses them;
//! 5. the delivery (with the headers that matter, never an auth header) and
//!    its `handle-delivery` job (one job for the deliveries a batch stores
//!    together) are stored in ONE statement, which also
//!    checks that the connection still takes deliveries and the secret that
//!    verified it is still valid (else the connection is read again and the
//!    delivery decided afresh), inside a transaction shared with the
//!    deliveries that arrived meanwhile ([`crate::writer`]); only after that
//!    transaction commits is the delivery acknowledged. A store that cannot
//!    take it gets a 503 and nothing is half-written, so the platform's
//!    retry is safe;
//! 6. a second copy of a delivery (same platform delivery identity for the
//!    connection) hits the UNIQUE index, is answered 200 and makes no job.
//!
//! A signed delivery that cannot be parsed is kept, marked `failed` and
//! acknowledged with 2xx: it is authentic, so refusing it would only make
//! the platform retry the same bytes forever (and GitHub disables hooks that
//! keep failing); an operator can read it from the delivery table. Events
//! the catalogue does not model are kept as `ignored`, acknowledged and
//! counted.
//!
//! Strings that come from the request (the connection id of the path, a
//! claimed delivery id) are logged as escaped (`Debug`) fields, so a
//! percent-decoded newline cannot forge a log line.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cmcp_connectors::webhook::{DeliveryId, HookEvent, claimed_id_header, intake, kept_headers};
use cmcp_domain::Platform;
use cmcp_registry::{
    Accepted, Cipher, DeliveryStatus, NewDelivery, Premise, Recorded, RegistryError, Store,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use crate::EdgeState;
use crate::cache::{ConnectionCache, Known};
pub use crate::config::GatewayConfig;
use crate::metrics::{self as m, Outcome};
use crate::verify::{
    DriveChannel, GOOG_CHANNEL_ID_HEADER, Unverified, Verified, VerifyError, WebhookSecret,
    verify_drive_channel,
};
use crate::writer::{Batching, Writer};

/// What the hook routes need beyond the store: the master key that opens
/// the webhook secrets, the settings, the process's budget of body bytes
/// in flight, its copy of the connections, and its delivery writers
/// (started on the first delivery, on the runtime that serves it).
#[derive(Clone)]
pub struct Hooks {
    pub cipher: Cipher,
    pub config: GatewayConfig,
    inflight: Arc<Semaphore>,
    cache: Arc<ConnectionCache>,
    writer: Arc<OnceLock<Writer>>,
}

impl Hooks {
    pub fn new(cipher: Cipher, config: GatewayConfig) -> Hooks {
        let bytes = config.max_inflight_body_bytes.min(Semaphore::MAX_PERMITS);
        Hooks {
            cipher,
            inflight: Arc::new(Semaphore::new(bytes)),
            cache: Arc::new(ConnectionCache::new(config.connection_cache_ttl)),
            writer: Arc::new(OnceLock::new()),
            config,
        }
    }

    /// The body limit of `platform` here: its own, under the configured
    /// ceiling.
    pub fn body_limit(&self, platform: Platform) -> usize {
        intake::max_body_bytes(platform).min(self.config.max_body_bytes)
    }

    /// Reserve `n` bytes of the in-flight budget, or `None` when it is full
    /// (never waits: a waiting request would hold its connection anyway).
    fn reserve(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n.max(1)).ok()?;
        self.inflight.clone().try_acquire_many_owned(n).ok()
    }

    fn writer(&self, store: &Store) -> &Writer {
        self.writer.get_or_init(|| {
            Writer::start(
                store.clone(),
                Batching {
                    max: self.config.commit_batch_max,
                    window: self.config.commit_window,
                    writers: self.config.commit_writers,
                    overlap_bytes: self.config.commit_overlap_bytes,
                },
            )
        })
    }
}

/// The kept headers of a delivery, as stored.
pub fn keep_headers(platform: Platform, headers: &HeaderMap) -> Vec<(String, String)> {
    kept_headers(platform)
        .iter()
        .filter_map(|name| {
            let v = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), v.to_owned()))
        })
        .collect()
}

/// The delivery id the sender claims, for logs of refused deliveries (it is
/// not trusted for anything else).
fn claimed_delivery(platform: Platform, headers: &HeaderMap) -> String {
    headers
        .get(claimed_id_header(platform))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .chars()
        .take(80)
        .collect()
}

fn answer(status: StatusCode, text: &'static str) -> Response {
    (status, text).into_response()
}

/// The route handler.
pub(crate) async fn receive(
    State(state): State<Arc<EdgeState>>,
    Path((platform, connection)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(hooks) = state.hooks.as_ref() else {
        return answer(StatusCode::NOT_FOUND, "webhooks are not served here");
    };
    let Ok(platform) = platform.parse::<Platform>() else {
        m::delivery(None, Outcome::UnknownConnection);
        return answer(StatusCode::NOT_FOUND, "unknown platform");
    };
    let claimed = claimed_delivery(platform, &headers);
    // Before the connection is looked up, so the answer says nothing about
    // which connections exist.
    if let Err(e) = intake::check_media_type(platform, &headers) {
        m::delivery(Some(platform), Outcome::UnsupportedMedia);
        warn!(%platform, connection_id = ?connection, delivery = ?claimed, error = ?e.to_string(), "delivery refused: media type");
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, e.to_string()).into_response();
    }
    let (mut known, mut fresh) = match hooks
        .cache
        .get(&state.store, &hooks.cipher, &connection)
        .await
    {
        Ok(found) => match found.known {
            Some(k) if k.takes(platform) => (k, !found.cached),
            // Unknown, of another platform or disabled: the same answer as
            // a bad signature, and before any body byte is read.
            _ => return no_connection(platform, &connection, &claimed),
        },
        Err(RegistryError::NotFound { .. } | RegistryError::Invalid { .. }) => {
            return no_connection(platform, &connection, &claimed);
        }
        Err(e) => return unavailable(platform, &connection, &e),
    };
    let limit = hooks.body_limit(platform);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(platform, &connection, &claimed, limit);
    }
    let Some(_reserved) = hooks.reserve(declared.map_or(limit, |n| n as usize)) else {
        m::delivery(Some(platform), Outcome::Overloaded);
        m::overloaded("body_bytes");
        warn!(%platform, connection_id = ?connection, delivery = ?claimed, "delivery refused: body bytes in flight at their cap");
        return crate::listen::overloaded();
    };
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(e) if is_timeout(&e) => {
            m::delivery(Some(platform), Outcome::Timeout);
            warn!(%platform, connection_id = ?connection, delivery = ?claimed, "delivery body stalled past the read timeout");
            return answer(StatusCode::REQUEST_TIMEOUT, "body read timed out");
        }
        Err(_) => return too_large(platform, &connection, &claimed, limit),
    };
    let unverified = Unverified::new(platform, bytes, headers);
    // A copy from the cache that fails (a signature it cannot check, a
    // write refused as stale) is read again once, and the delivery decided
    // on what the store holds now.
    loop {
        let refresh = |reason| reread(&state, hooks, platform, &connection, &claimed, reason);
        let (verified, premise, verification) = match platform {
            // No signature: the notification must name a live channel of
            // this connection and carry its token and resource id.
            Platform::Drive => {
                match verify_drive(&state, hooks, &connection, &claimed, &unverified.headers).await
                {
                    Ok(v) => (v, Premise { secret_id: None }, "drive-channel"),
                    Err(resp) => return resp,
                }
            }
            _ => match verify_signed(&known, &unverified) {
                Ok((v, premise)) => (v, premise, "hmac-sha256"),
                Err(_) if !fresh => {
                    fresh = true;
                    match refresh("signature").await {
                        Ok(k) => known = k,
                        Err(resp) => return resp,
                    }
                    continue;
                }
                Err(e) => return refused(platform, &connection, &claimed, &e),
            },
        };
        match store(&state, hooks, &connection, &verified, verification, premise).await {
            Some(resp) => return resp,
            None if !fresh => {
                fresh = true;
                match refresh("stale").await {
                    Ok(k) => known = k,
                    Err(resp) => return resp,
                }
            }
            None => {
                m::delivery(Some(platform), Outcome::Unavailable);
                warn!(%platform, connection_id = ?connection, delivery = ?claimed, "delivery not taken: the connection changed while it was stored");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    "connection changed, retry later",
                )
                    .into_response();
            }
        }
    }
}

/// Read the connection again after its cached copy failed a delivery.
async fn reread(
    state: &EdgeState,
    hooks: &Hooks,
    platform: Platform,
    connection: &str,
    claimed: &str,
    reason: &'static str,
) -> Result<Arc<Known>, Response> {
    info!(%platform, connection_id = ?connection, reason, "connection read again");
    match hooks
        .cache
        .read(&state.store, &hooks.cipher, connection)
        .await
    {
        Ok(Some(k)) if k.takes(platform) => Ok(k),
        Ok(_) | Err(RegistryError::NotFound { .. } | RegistryError::Invalid { .. }) => {
            Err(no_connection(platform, connection, claimed))
        }
        Err(e) => Err(unavailable(platform, connection, &e)),
    }
}

/// Verify against the secrets of `known` valid now; the premise names the
/// secret that matched.
fn verify_signed(
    known: &Known,
    unverified: &Unverified,
) -> Result<(Verified, Premise), VerifyError> {
    let (secrets, ids) = known.secrets_at(chrono_now_ms());
    let (verified, i) = unverified.verify_matched(&secrets)?;
    Ok((
        verified,
        Premise {
            secret_id: ids.get(i).copied(),
        },
    ))
}

fn no_connection(platform: Platform, connection: &str, claimed: &str) -> Response {
    m::delivery(Some(platform), Outcome::UnknownConnection);
    warn!(%platform, connection_id = ?connection, delivery = ?claimed, "delivery for an unknown or disabled connection");
    not_verified()
}

fn too_large(platform: Platform, connection: &str, claimed: &str, limit: usize) -> Response {
    m::delivery(Some(platform), Outcome::TooLarge);
    warn!(%platform, connection_id = ?connection, delivery = ?claimed, limit, "delivery body too large (or unreadable)");
    answer(StatusCode::PAYLOAD_TOO_LARGE, "body too large")
}

/// Whether reading the body failed on the body timeout
/// (`tower_http::timeout::RequestBodyTimeoutLayer`), anywhere in the chain.
fn is_timeout(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The one answer for every delivery that is not verified: an unknown or
/// disabled connection, no live Drive channel, a missing or wrong
/// signature. One status and one body, so the answer is no oracle of which
/// connections exist.
fn not_verified() -> Response {
    answer(StatusCode::UNAUTHORIZED, "signature verification failed")
}

/// A Drive notification: look its channel up among the connection's live
/// channels (404 when there is none: unknown, stopped or expired), open the
/// sealed token and compare channel id, token and resource id (401 on a
/// mismatch). The token is never logged.
async fn verify_drive(
    state: &EdgeState,
    hooks: &Hooks,
    connection: &str,
    claimed: &str,
    headers: &HeaderMap,
) -> Result<Verified, Response> {
    let platform = Platform::Drive;
    let Some(channel_id) = headers
        .get(GOOG_CHANNEL_ID_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        let e = VerifyError::MissingChannelHeader {
            header: GOOG_CHANNEL_ID_HEADER,
        };
        return Err(refused(platform, connection, claimed, &e));
    };
    let live = match state
        .store
        .live_drive_channel(&hooks.cipher, connection, channel_id)
        .await
    {
        Ok(live) => live,
        Err(e) => return Err(unavailable(platform, connection, &e)),
    };
    let Some((row, token)) = live else {
        m::delivery(Some(platform), Outcome::UnknownConnection);
        let shown: String = channel_id.chars().take(80).collect();
        warn!(%platform, connection_id = ?connection, delivery = ?claimed, channel = ?shown, "drive notification for no live channel");
        return Err(not_verified());
    };
    let expected = DriveChannel {
        channel_id: row.channel_id,
        token: WebhookSecret::from_token(&token),
        resource_id: row.resource_id,
    };
    verify_drive_channel(headers, &expected).map_err(|e| refused(platform, connection, claimed, &e))
}

fn refused(platform: Platform, connection: &str, claimed: &str, e: &VerifyError) -> Response {
    let reason = match e {
        VerifyError::MissingSignature { .. } | VerifyError::MissingChannelHeader { .. } => {
            "missing"
        }
        VerifyError::MalformedSignature { .. } => "malformed",
        VerifyError::SignatureMismatch { .. } | VerifyError::ChannelMismatch { .. } => "mismatch",
        VerifyError::NoSecret { .. } => "no_secret",
        VerifyError::NotSigned { .. } => "not_signed",
    };
    m::verification_failure(platform, reason);
    m::delivery(Some(platform), Outcome::BadSignature);
    // The error names headers and counts, never a secret or a signature.
    warn!(%platform, connection_id = ?connection, delivery = ?claimed, error = ?e.to_string(), "delivery refused: verification failed");
    not_verified()
}

fn unavailable(platform: Platform, connection: &str, e: &dyn std::fmt::Display) -> Response {
    m::delivery(Some(platform), Outcome::Unavailable);
    warn!(%platform, connection_id = ?connection, error = %e, "delivery not taken: store unavailable");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        "store unavailable, retry later",
    )
        .into_response()
}

/// Parse (to decide the status), then store the delivery and its job
/// through the writer (one statement, in a transaction shared with the
/// deliveries committed alongside), then answer. `None`: the premise no
/// longer held and nothing was written.
async fn store(
    state: &EdgeState,
    hooks: &Hooks,
    connection: &str,
    verified: &Verified,
    verification: &str,
    premise: Premise,
) -> Option<Response> {
    let platform = verified.platform();
    let (headers, body) = (verified.headers(), verified.body());
    let (delivery_key, key_error) = match DeliveryId::of(platform, headers, body) {
        Ok(id) => (id.as_str().to_owned(), None),
        // Authentic but without its identity: keep it under a key of its own.
        Err(e) => (
            format!("{platform}:unkeyed:{}", cmcp_registry::store::new_ulid()),
            Some(e.to_string()),
        ),
    };
    let (event, status, error, outcome) =
        match (HookEvent::parse(platform, headers, body), key_error) {
            (Ok(ev), None) => {
                let label = ev.label();
                match ev {
                    HookEvent::Unknown { .. } | HookEvent::Ignored { .. } => {
                        if matches!(ev, HookEvent::Unknown { .. }) {
                            m::unknown_event(platform);
                        }
                        (label, DeliveryStatus::Ignored, None, Outcome::Ignored)
                    }
                    _ => (label, DeliveryStatus::Received, None, Outcome::Accepted),
                }
            }
            (Ok(ev), Some(e)) => (ev.label(), DeliveryStatus::Failed, Some(e), Outcome::Failed),
            (Err(e), _) => (
                "unparseable".to_owned(),
                DeliveryStatus::Failed,
                Some(e.to_string()),
                Outcome::Failed,
            ),
        };
    let new = NewDelivery {
        connection_id: connection.to_owned(),
        platform,
        delivery_key,
        event,
        headers: keep_headers(platform, verified.headers()),
        body: verified.body().to_vec(),
        verification: verification.to_owned(),
        status,
        error,
        replay_key: verified.replay_key(),
    };
    let (key, event_label, parse_error) = (
        new.delivery_key.clone(),
        new.event.clone(),
        new.error.clone(),
    );
    let started = Instant::now();
    let result = hooks.writer(&state.store).write(new, Some(premise)).await;
    m::enqueue_latency(started.elapsed());
    let recorded = match result {
        Ok(Accepted::Recorded(r)) => r,
        Ok(Accepted::Stale) => return None,
        Err(e) => return Some(unavailable(platform, connection, &e)),
    };
    Some(match recorded {
        Recorded::Stored { id, .. } => {
            m::delivery(Some(platform), outcome);
            info!(%platform, connection_id = ?connection, delivery_id = %id, key = ?key, event = ?event_label, status = status.as_str(), "delivery stored");
            if let Some(e) = &parse_error {
                warn!(%platform, connection_id = ?connection, delivery_id = %id, error = ?e, "signed delivery could not be parsed; kept as failed");
            }
            answer(StatusCode::ACCEPTED, "accepted")
        }
        Recorded::Replay { id } => {
            m::delivery(Some(platform), Outcome::Duplicate);
            warn!(%platform, connection_id = ?connection, delivery_id = %id, key = ?key, "signed body replayed under a new delivery id; kept as a duplicate");
            answer(StatusCode::OK, "duplicate")
        }
        Recorded::Duplicate { id } => {
            m::delivery(Some(platform), Outcome::Duplicate);
            info!(%platform, connection_id = ?connection, delivery_id = %id, key = ?key, "duplicate delivery acknowledged");
            answer(StatusCode::OK, "duplicate")
        }
    })
}

/// How long ago `received_at_ms` was.
pub(crate) fn age(received_at_ms: i64) -> Duration {
    let now = chrono_now_ms();
    Duration::from_millis(u64::try_from(now - received_at_ms).unwrap_or(0))
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
