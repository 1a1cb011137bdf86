//! Drive push notifications carry no body and no signature. They are
//! authenticated by what only the fleet and Google know: the channel id and
//! token the fleet chose at `changes.watch`, and the resource id Google
//! answered with. All three must match; the token, the only secret, is
//! compared in constant time.

use axum::http::HeaderMap;
use bytes::Bytes;
use cmcp_domain::Platform;
use hmac::Mac;

use super::{Verified, VerifyError, WebhookSecret};

pub use cmcp_connectors::drive::webhook::{
    GOOG_CHANNEL_ID_HEADER, GOOG_CHANNEL_TOKEN_HEADER, GOOG_RESOURCE_ID_HEADER,
};

/// The Drive channel the fleet registered with `changes.watch`: its own
/// channel id and token, and the resource id Google answered with.
#[derive(Debug, Clone)]
pub struct DriveChannel {
    pub channel_id: String,
    pub token: WebhookSecret,
    pub resource_id: String,
}

/// Authenticate a Drive push notification: it has no body and no signature,
/// so the channel id, channel token and resource id must all be the ones the
/// fleet registered. The token (the only secret) is compared in constant
/// time; a channel registered without a token is refused.
pub fn verify_drive_channel(
    headers: &HeaderMap,
    expected: &DriveChannel,
) -> Result<Verified, VerifyError> {
    if expected.token.is_empty() {
        return Err(VerifyError::NoSecret {
            platform: Platform::Drive,
        });
    }
    let channel_id = drive_header(headers, GOOG_CHANNEL_ID_HEADER)?;
    let token = drive_header(headers, GOOG_CHANNEL_TOKEN_HEADER)?;
    let resource_id = drive_header(headers, GOOG_RESOURCE_ID_HEADER)?;
    if channel_id != expected.channel_id.as_bytes() {
        return Err(VerifyError::ChannelMismatch {
            header: GOOG_CHANNEL_ID_HEADER,
        });
    }
    if resource_id != expected.resource_id.as_bytes() {
        return Err(VerifyError::ChannelMismatch {
            header: GOOG_RESOURCE_ID_HEADER,
        });
    }
    if !constant_time_eq(token, expected.token.expose()) {
        return Err(VerifyError::ChannelMismatch {
            header: GOOG_CHANNEL_TOKEN_HEADER,
        });
    }
    Ok(Verified {
        platform: Platform::Drive,
        body: Bytes::new(),
        headers: headers.clone(),
        tag: None,
    })
}

fn drive_header<'h>(headers: &'h HeaderMap, header: &'static str) -> Result<&'h [u8], VerifyError> {
    headers
        .get(header)
        .map(|v| v.as_bytes())
        .ok_or(VerifyError::MissingChannelHeader { header })
}

/// Constant-time equality of two byte strings of any length: both are run
/// through the same HMAC (keyed by `expected`) and the tags compared with
/// `verify_slice`, so neither the position of the first difference nor the
/// given value's length leaks through timing.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let tag = |bytes: &[u8]| {
        let mut mac = WebhookSecret::new(expected).mac();
        mac.update(bytes);
        mac
    };
    let expected_tag = tag(expected).finalize().into_bytes();
    tag(given).verify_slice(&expected_tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn drive_headers(id: &str, token: &str, resource: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [
            (GOOG_CHANNEL_ID_HEADER, id),
            (GOOG_CHANNEL_TOKEN_HEADER, token),
            (GOOG_RESOURCE_ID_HEADER, resource),
        ] {
            h.insert(name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn channel() -> DriveChannel {
        DriveChannel {
            channel_id: "01234567-89ab-cdef-0123456789ab".into(),
            token: "target=conn-7&n=8f3a".into(),
            resource_id: "o3hgv1538sdjfh".into(),
        }
    }

    #[test]
    fn drive_channel_must_match_on_all_three_headers() {
        let ch = channel();
        let ok = drive_headers(&ch.channel_id, "target=conn-7&n=8f3a", &ch.resource_id);
        let v = verify_drive_channel(&ok, &ch).unwrap();
        assert_eq!(v.platform(), Platform::Drive);
        assert!(v.body().is_empty());
        assert_eq!(v.replay_key(), None, "no body, nothing to recognise");

        for (headers, header) in [
            (
                drive_headers("other", "target=conn-7&n=8f3a", &ch.resource_id),
                GOOG_CHANNEL_ID_HEADER,
            ),
            (
                drive_headers(&ch.channel_id, "target=conn-7&n=8f3b", &ch.resource_id),
                GOOG_CHANNEL_TOKEN_HEADER,
            ),
            (
                drive_headers(&ch.channel_id, "target=conn-7", &ch.resource_id),
                GOOG_CHANNEL_TOKEN_HEADER,
            ),
            (
                drive_headers(&ch.channel_id, "target=conn-7&n=8f3a", "other"),
                GOOG_RESOURCE_ID_HEADER,
            ),
        ] {
            assert_eq!(
                verify_drive_channel(&headers, &ch).unwrap_err(),
                VerifyError::ChannelMismatch { header }
            );
        }

        let mut no_token = ok.clone();
        no_token.remove(GOOG_CHANNEL_TOKEN_HEADER);
        assert_eq!(
            verify_drive_channel(&no_token, &ch).unwrap_err(),
            VerifyError::MissingChannelHeader {
                header: GOOG_CHANNEL_TOKEN_HEADER
            }
        );

        let tokenless = DriveChannel {
            token: "".into(),
            ..channel()
        };
        assert!(matches!(
            verify_drive_channel(&ok, &tokenless),
            Err(VerifyError::NoSecret { .. })
        ));
    }
}
