//! Drive push notifications: no body, everything is in `X-Goog-*` headers.
//! A `changes.watch` channel sends `sync` once when it is created, then
//! `change` whenever something in the watched corpus changed; the
//! notification does not say what, so the job pulls `changes.list` from its
//! stored page token. Notifications can be dropped, so the periodic crawl
//! stays (trap 7).

use cmcp_domain::Platform;
use http::HeaderMap;

use crate::webhook::{HookEvent, ParseError, Plan, header, required_header};

/// The channel id the fleet chose at `changes.watch`.
pub const GOOG_CHANNEL_ID_HEADER: &str = "x-goog-channel-id";
/// The channel token the fleet chose at `changes.watch` (the only secret:
/// never kept with a delivery).
pub const GOOG_CHANNEL_TOKEN_HEADER: &str = "x-goog-channel-token";
/// The resource id Google returned at `changes.watch`.
pub const GOOG_RESOURCE_ID_HEADER: &str = "x-goog-resource-id";
pub const RESOURCE_STATE_HEADER: &str = "x-goog-resource-state";
pub const MESSAGE_NUMBER_HEADER: &str = "x-goog-message-number";
pub const CHANNEL_EXPIRATION_HEADER: &str = "x-goog-channel-expiration";

/// What the gateway keeps of a notification's headers (never the token).
pub const KEPT_HEADERS: &[&str] = &[
    GOOG_CHANNEL_ID_HEADER,
    GOOG_RESOURCE_ID_HEADER,
    RESOURCE_STATE_HEADER,
    "x-goog-resource-uri",
    MESSAGE_NUMBER_HEADER,
    CHANNEL_EXPIRATION_HEADER,
    "x-goog-changed",
];

const PLATFORM: Platform = Platform::Drive;

/// A notification has no body: everything is in headers. A little room for
/// a proxy that adds one.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// No body is read, so no content type is required: empty means "any".
pub const CONTENT_TYPES: &[&str] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceState {
    /// The channel was just created.
    Sync,
    /// Something changed: pull `changes.list`.
    Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveEvent {
    pub state: ResourceState,
    pub channel_id: String,
    pub resource_id: String,
    /// Increasing but not contiguous; absent or unparseable is `None`.
    pub message_number: Option<u64>,
    /// `X-Goog-Channel-Expiration` as sent (an HTTP date): channels expire
    /// silently, so the gateway can schedule the re-watch from it.
    pub channel_expiration: Option<String>,
}

impl DriveEvent {
    /// The resource state as sent.
    pub fn label(&self) -> &'static str {
        match self.state {
            ResourceState::Sync => "sync",
            ResourceState::Change => "change",
        }
    }

    /// The notification does not say what changed: the changes feed does.
    pub fn plan(&self) -> Plan {
        match self.state {
            ResourceState::Sync => Plan::Nothing("drive channel opened"),
            ResourceState::Change => Plan::ChangeFeed,
        }
    }
}

pub(crate) fn parse(headers: &HeaderMap) -> Result<HookEvent, ParseError> {
    let state = required_header(headers, PLATFORM, RESOURCE_STATE_HEADER)?;
    let state = match state.to_ascii_lowercase().as_str() {
        "sync" => ResourceState::Sync,
        "change" => ResourceState::Change,
        // files.watch states (add, update, trash...) are not used here.
        other => {
            return Ok(HookEvent::Unknown {
                platform: PLATFORM,
                event: other.to_owned(),
                action: None,
            });
        }
    };
    Ok(HookEvent::Drive(DriveEvent {
        state,
        channel_id: required_header(headers, PLATFORM, GOOG_CHANNEL_ID_HEADER)?.to_owned(),
        resource_id: required_header(headers, PLATFORM, GOOG_RESOURCE_ID_HEADER)?.to_owned(),
        message_number: header(headers, MESSAGE_NUMBER_HEADER).and_then(|n| n.parse().ok()),
        channel_expiration: header(headers, CHANNEL_EXPIRATION_HEADER).map(str::to_owned),
    }))
}

pub(crate) fn delivery_key(headers: &HeaderMap) -> Result<String, ParseError> {
    let channel = required_header(headers, PLATFORM, GOOG_CHANNEL_ID_HEADER)?;
    let number = required_header(headers, PLATFORM, MESSAGE_NUMBER_HEADER)?;
    Ok(format!("drive:{channel}:{number}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn sync_and_change_come_from_the_resource_state() {
        for (raw, state) in [
            ("sync", ResourceState::Sync),
            ("change", ResourceState::Change),
        ] {
            let h = headers(&[
                (RESOURCE_STATE_HEADER, raw),
                (GOOG_CHANNEL_ID_HEADER, "chan-1"),
                (GOOG_RESOURCE_ID_HEADER, "res-1"),
                (MESSAGE_NUMBER_HEADER, "10"),
                (CHANNEL_EXPIRATION_HEADER, "Tue, 19 Nov 2026 01:13:52 GMT"),
            ]);
            let HookEvent::Drive(e) = parse(&h).unwrap() else {
                panic!("{raw} not parsed");
            };
            assert_eq!(e.state, state);
            assert_eq!(e.message_number, Some(10));
            assert_eq!(e.channel_id, "chan-1");
            assert_eq!(delivery_key(&h).unwrap(), "drive:chan-1:10");
        }
    }

    #[test]
    fn other_states_and_missing_headers() {
        let trash = headers(&[(RESOURCE_STATE_HEADER, "trash")]);
        assert!(matches!(parse(&trash).unwrap(), HookEvent::Unknown { .. }));
        assert!(parse(&HeaderMap::new()).is_err());
        let no_channel = headers(&[(RESOURCE_STATE_HEADER, "change")]);
        assert!(parse(&no_channel).is_err());
        assert!(delivery_key(&no_channel).is_err());
    }
}
