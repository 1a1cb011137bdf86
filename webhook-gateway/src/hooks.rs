//! `POST /hooks/{platform}/{connection}`: one endpoint per connection.
//!
//! The order of a delivery's life here is the point of this module:
//!
//! 1. the route names a connection of that platform, else 404 (an unknown
//!    id or a platform mismatch look the same from outside);
//! 2. the body is read up to the configured cap, else 413;
//! 3. the raw bytes are verified against every currently valid secret of
//!    the connection (a rotation overlaps two), else 401 — before anything
//!    parses them;
//! 4. the delivery (with the headers that matter, never an auth header) and
//!    its `handle-delivery` job are stored in ONE transaction; only then is
//!    the delivery acknowledged. A store that cannot take it gets a 503 and
//!    nothing is half-written, so the platform's retry is safe;
//! 5. a second copy of a delivery (same platform delivery identity for the
//!    connection) hits the UNIQUE index, is answered 200 and makes no job.
//!
//! A signed delivery that cannot be parsed is kept, marked `failed` and
//! acknowledged with 2xx: it is authentic, so refusing it would only make
//! the platform retry the same bytes forever (and GitHub disables hooks that
//! keep failing); an operator can read it from the delivery table. Events
//! the catalogue does not model are kept as `ignored`, acknowledged and
//! counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cmcp_connectors::webhook::{DeliveryId, HookEvent, claimed_id_header, kept_headers};
use cmcp_domain::Platform;
use cmcp_registry::{Cipher, DeliveryStatus, NewDelivery, Recorded, RegistryError};
use serde::Deserialize;
use tracing::{info, warn};

use crate::EdgeState;
use crate::metrics::{self as m, Outcome};
use crate::verify::{
    DriveChannel, GOOG_CHANNEL_ID_HEADER, Unverified, Verified, VerifyError, WebhookSecret,
    verify_drive_channel,
};

/// The gateway's settings (`[gateway]` in the config file).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Deliveries with a larger body are refused with 413. GitHub caps its
    /// payloads at 25 MB.
    pub max_body_bytes: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_body_bytes: 25 * 1024 * 1024,
        }
    }
}

/// What the hook routes need beyond the store: the master key that opens
/// the webhook secrets, and the settings.
#[derive(Clone)]
pub struct Hooks {
    pub cipher: Cipher,
    pub config: GatewayConfig,
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
    match state.store.get_connection(&connection).await {
        Ok(row) if row.platform == platform => {}
        Ok(_) | Err(RegistryError::NotFound { .. } | RegistryError::Invalid { .. }) => {
            m::delivery(Some(platform), Outcome::UnknownConnection);
            warn!(%platform, connection_id = %connection, delivery = %claimed, "delivery for an unknown connection");
            return answer(StatusCode::NOT_FOUND, "unknown connection");
        }
        Err(e) => return unavailable(platform, &connection, &e),
    }
    let too_large = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|n| n > hooks.config.max_body_bytes as u64);
    let bytes = match too_large {
        true => None,
        false => axum::body::to_bytes(body, hooks.config.max_body_bytes)
            .await
            .ok(),
    };
    let Some(bytes) = bytes else {
        m::delivery(Some(platform), Outcome::TooLarge);
        warn!(%platform, connection_id = %connection, delivery = %claimed, limit = hooks.config.max_body_bytes, "delivery body too large (or unreadable)");
        return answer(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    };
    let (verified, verification) = match platform {
        // No signature: the notification must name a live channel of this
        // connection and carry its token and resource id.
        Platform::Drive => match verify_drive(&state, hooks, &connection, &claimed, &headers).await
        {
            Ok(v) => (v, "drive-channel"),
            Err(resp) => return resp,
        },
        _ => {
            let secrets = match state
                .store
                .webhook_secrets(&hooks.cipher, &connection)
                .await
            {
                Ok(s) => s.iter().map(WebhookSecret::from_token).collect::<Vec<_>>(),
                Err(e) => return unavailable(platform, &connection, &e),
            };
            match Unverified::new(platform, bytes, headers).verify(&secrets) {
                Ok(v) => (v, "hmac-sha256"),
                Err(e) => return refused(platform, &connection, &claimed, &e),
            }
        }
    };
    store(&state, &connection, &verified, verification).await
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
        warn!(%platform, connection_id = %connection, delivery = %claimed, channel = %shown, "drive notification for no live channel");
        return Err(answer(StatusCode::NOT_FOUND, "no live channel"));
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
    warn!(%platform, connection_id = %connection, delivery = %claimed, error = %e, "delivery refused: verification failed");
    answer(StatusCode::UNAUTHORIZED, "signature verification failed")
}

fn unavailable(platform: Platform, connection: &str, e: &RegistryError) -> Response {
    m::delivery(Some(platform), Outcome::Unavailable);
    warn!(%platform, connection_id = %connection, error = %e, "delivery not taken: store unavailable");
    answer(
        StatusCode::SERVICE_UNAVAILABLE,
        "store unavailable, retry later",
    )
}

/// Parse (to decide the status), then store the delivery and its job in one
/// transaction, then answer.
async fn store(
    state: &EdgeState,
    connection: &str,
    verified: &Verified,
    verification: &str,
) -> Response {
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
    };
    let started = Instant::now();
    let result = state.store.record_delivery(&new).await;
    m::enqueue_latency(started.elapsed());
    match result {
        Ok(Recorded::Stored { id, .. }) => {
            m::delivery(Some(platform), outcome);
            info!(%platform, connection_id = %connection, delivery_id = %id, key = %new.delivery_key, event = %new.event, status = status.as_str(), "delivery stored");
            if let Some(e) = &new.error {
                warn!(%platform, connection_id = %connection, delivery_id = %id, error = %e, "signed delivery could not be parsed; kept as failed");
            }
            answer(StatusCode::ACCEPTED, "accepted")
        }
        Ok(Recorded::Duplicate { id }) => {
            m::delivery(Some(platform), Outcome::Duplicate);
            info!(%platform, connection_id = %connection, delivery_id = %id, key = %new.delivery_key, "duplicate delivery acknowledged");
            answer(StatusCode::OK, "duplicate")
        }
        Err(e) => unavailable(platform, connection, &e),
    }
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
