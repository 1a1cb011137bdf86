//! Webhook verification as a type.
//!
//! A delivery arrives as [`Unverified`]: raw body bytes and headers, exactly
//! as received. Nothing may read it as JSON until [`Unverified::verify`] (or,
//! for Drive, [`verify_drive_channel`]) has returned a [`Verified`], the only
//! thing the gateway hands to the event parser. The HMAC is computed over the raw bytes
//! because every platform signs those, not a re-serialisation (trap 12 of the
//! upstream notes), and compared in constant time by `hmac`'s `verify_slice`.
//!
//! Several secrets may be given at once so that a connection can rotate its
//! secret: during the overlap both the old and the new one are accepted.
//!
//! GitHub signs in `X-Hub-Signature-256`; its SHA-1 `X-Hub-Signature` is
//! ignored, so a delivery that carries only SHA-1 is refused as unsigned.
//! Bitbucket Cloud and Jira send `sha256=<hex>` in `X-Hub-Signature`, and only
//! when a secret is configured: a missing header is refused, never waved
//! through. Drive push notifications carry no signature at all; they are
//! authenticated by the channel id, channel token and resource id that the
//! fleet chose when it registered the channel.

mod drive;

use std::fmt;

use axum::http::HeaderMap;
use bytes::Bytes;
use cmcp_domain::{Platform, Token};
use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretSlice};
use sha2::{Digest, Sha256};

pub use drive::{
    DriveChannel, GOOG_CHANNEL_ID_HEADER, GOOG_CHANNEL_TOKEN_HEADER, GOOG_RESOURCE_ID_HEADER,
    verify_drive_channel,
};

/// GitHub's SHA-256 signature header.
pub const GITHUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// The signature header of Bitbucket Cloud and Jira (and GitHub's legacy SHA-1
/// one, which is never read).
pub const HUB_SIGNATURE_HEADER: &str = "x-hub-signature";

const SIGNATURE_PREFIX: &str = "sha256=";
const SHA256_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why a delivery was refused. Variants never carry the secret, the expected
/// signature or the received token: an error message may end up in a log.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// No signature header: for Bitbucket and Jira that means the hook has no
    /// secret configured, which the fleet does not accept.
    #[error("{platform} delivery has no {header} header")]
    MissingSignature {
        platform: Platform,
        header: &'static str,
    },
    /// A signature header that is not `sha256=` followed by 64 hex digits.
    #[error("{platform} delivery has a malformed {header} header: {reason}")]
    MalformedSignature {
        platform: Platform,
        header: &'static str,
        reason: &'static str,
    },
    /// Well-formed, but no configured secret produced it.
    #[error("{platform} delivery signature matches none of the {secrets} configured secret(s)")]
    SignatureMismatch { platform: Platform, secrets: usize },
    /// The connection has no usable (non-empty) secret: refuse rather than
    /// accept anything.
    #[error("no webhook secret is configured for this {platform} connection")]
    NoSecret { platform: Platform },
    /// Drive deliveries are not signed; use [`verify_drive_channel`].
    #[error("{platform} deliveries are not HMAC-signed; verify the channel instead")]
    NotSigned { platform: Platform },
    /// A Drive channel header is absent.
    #[error("drive notification has no {header} header")]
    MissingChannelHeader { header: &'static str },
    /// A Drive channel header does not match the registered channel.
    #[error("drive notification {header} does not match the registered channel")]
    ChannelMismatch { header: &'static str },
}

/// A webhook secret (or Drive channel token). Redacts itself in `Debug` and
/// `Display`, is not `Serialize`, and is zeroed on drop.
#[derive(Clone)]
pub struct WebhookSecret(SecretSlice<u8>);

impl WebhookSecret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> WebhookSecret {
        WebhookSecret(SecretSlice::from(bytes.into()))
    }

    /// The connection's secret as stored by the registry.
    pub fn from_token(token: &Token) -> WebhookSecret {
        WebhookSecret::new(token.expose().as_bytes())
    }

    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }

    fn expose(&self) -> &[u8] {
        self.0.expose_secret()
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length (long ones are hashed first), so this
        // cannot fail; hmac's own `KeyInit::new` relies on the same fact.
        HmacSha256::new_from_slice(self.expose()).expect("HMAC accepts keys of any length")
    }
}

impl From<&str> for WebhookSecret {
    fn from(s: &str) -> Self {
        WebhookSecret::new(s.as_bytes())
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret([redacted])")
    }
}

impl fmt::Display for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The signature header value (`sha256=<hex>`) a platform would send for
/// `body` under `secret`. For tests and the simulator.
pub fn sign(secret: &WebhookSecret, body: &[u8]) -> String {
    let mut mac = secret.mac();
    mac.update(body);
    format!(
        "{SIGNATURE_PREFIX}{}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// A delivery as received, not yet trusted. `platform` comes from the route
/// (`/hooks/{platform}/{connection}`), never from the payload.
#[derive(Debug, Clone)]
pub struct Unverified {
    pub platform: Platform,
    pub body: Bytes,
    pub headers: HeaderMap,
}

/// A delivery whose origin has been checked. Only this module constructs it.
#[derive(Debug, Clone)]
pub struct Verified {
    platform: Platform,
    body: Bytes,
    headers: HeaderMap,
    /// The signature tag that matched (none for Drive, which is not signed).
    tag: Option<[u8; SHA256_LEN]>,
}

impl Verified {
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The raw body, byte for byte as signed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// What recognises this signed body if it is sent again under another
    /// delivery id: the hex SHA-256 of the signature that verified it. That
    /// signature is the HMAC of the body under the connection's secret, so it
    /// tells bodies apart as a hash of the body would, without a second pass
    /// over the body; hashing it once more means that what the store keeps
    /// cannot be sent back as a signature. `None` for Drive, whose
    /// notifications have no body.
    pub fn replay_key(&self) -> Option<String> {
        self.tag.map(|tag| hex::encode(Sha256::digest(tag)))
    }
}

impl Unverified {
    pub fn new(platform: Platform, body: impl Into<Bytes>, headers: HeaderMap) -> Unverified {
        Unverified {
            platform,
            body: body.into(),
            headers,
        }
    }

    /// Accept the delivery if any of `secrets` signed it (several secrets
    /// overlap while one is rotated). Empty secrets are skipped: an empty key
    /// would let anyone sign.
    pub fn verify(&self, secrets: &[WebhookSecret]) -> Result<Verified, VerifyError> {
        self.verify_matched(secrets).map(|(v, _)| v)
    }

    /// [`Unverified::verify`], also saying which of `secrets` (its index)
    /// signed the delivery, so that the store can check that this secret
    /// is still valid when it writes the delivery.
    pub fn verify_matched(
        &self,
        secrets: &[WebhookSecret],
    ) -> Result<(Verified, usize), VerifyError> {
        let platform = self.platform;
        let header = signature_header(platform)?;
        let usable = secrets.iter().filter(|s| !s.is_empty()).count();
        if usable == 0 {
            return Err(VerifyError::NoSecret { platform });
        }
        let value = self
            .headers
            .get(header)
            .ok_or(VerifyError::MissingSignature { platform, header })?;
        let tag = parse_signature(value.as_bytes()).map_err(|reason| {
            VerifyError::MalformedSignature {
                platform,
                header,
                reason,
            }
        })?;
        // Every secret is tried even after a match would have been found: the
        // time taken then says nothing about which secret matched.
        let mut matched = None;
        for (i, secret) in secrets.iter().enumerate() {
            if secret.is_empty() {
                continue;
            }
            let mut mac = secret.mac();
            mac.update(&self.body);
            let ok = mac.verify_slice(&tag).is_ok();
            matched = matched.or(ok.then_some(i));
        }
        match matched {
            Some(i) => Ok((
                Verified {
                    platform,
                    body: self.body.clone(),
                    headers: self.headers.clone(),
                    tag: Some(tag),
                },
                i,
            )),
            None => Err(VerifyError::SignatureMismatch {
                platform,
                secrets: usable,
            }),
        }
    }
}

fn signature_header(platform: Platform) -> Result<&'static str, VerifyError> {
    match platform {
        Platform::Github => Ok(GITHUB_SIGNATURE_HEADER),
        Platform::Bitbucket | Platform::Jira => Ok(HUB_SIGNATURE_HEADER),
        Platform::Drive => Err(VerifyError::NotSigned { platform }),
    }
}

/// `sha256=<64 hex digits>` → the 32 tag bytes. Hex case is not significant.
fn parse_signature(value: &[u8]) -> Result<[u8; SHA256_LEN], &'static str> {
    let value = std::str::from_utf8(value).map_err(|_| "not ASCII")?.trim();
    let hex_part = value
        .strip_prefix(SIGNATURE_PREFIX)
        .ok_or("no sha256= prefix")?;
    let tag = hex::decode(hex_part).map_err(|_| "not hexadecimal")?;
    tag.try_into()
        .map_err(|_| "not a SHA-256 digest (wrong length)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    // GitHub's documented test vector (validating-webhook-deliveries).
    const VECTOR_SECRET: &str = "It's a Secret to Everybody";
    const VECTOR_BODY: &[u8] = b"Hello, World!";
    const VECTOR_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn delivery(platform: Platform, header: &'static str, value: &str, body: &[u8]) -> Unverified {
        let mut headers = HeaderMap::new();
        headers.insert(header, HeaderValue::from_str(value).unwrap());
        Unverified::new(platform, Bytes::copy_from_slice(body), headers)
    }

    fn github(value: &str, body: &[u8]) -> Unverified {
        delivery(Platform::Github, GITHUB_SIGNATURE_HEADER, value, body)
    }

    fn secrets(list: &[&str]) -> Vec<WebhookSecret> {
        list.iter().map(|s| WebhookSecret::from(*s)).collect()
    }

    #[test]
    fn sign_reproduces_githubs_test_vector() {
        assert_eq!(sign(&VECTOR_SECRET.into(), VECTOR_BODY), VECTOR_SIGNATURE);
    }

    #[test]
    fn githubs_test_vector_verifies() {
        let v = github(VECTOR_SIGNATURE, VECTOR_BODY)
            .verify(&secrets(&[VECTOR_SECRET]))
            .unwrap();
        assert_eq!(v.platform(), Platform::Github);
        assert_eq!(v.body().as_ref(), VECTOR_BODY);
    }

    #[test]
    fn upper_case_hex_is_the_same_signature() {
        let upper = format!("sha256={}", VECTOR_SIGNATURE[7..].to_ascii_uppercase());
        assert!(
            github(&upper, VECTOR_BODY)
                .verify(&secrets(&[VECTOR_SECRET]))
                .is_ok()
        );
    }

    #[test]
    fn tampered_body_is_refused() {
        let err = github(VECTOR_SIGNATURE, b"Hello, World?")
            .verify(&secrets(&[VECTOR_SECRET]))
            .unwrap_err();
        assert_eq!(
            err,
            VerifyError::SignatureMismatch {
                platform: Platform::Github,
                secrets: 1
            }
        );
    }

    #[test]
    fn wrong_secret_is_refused() {
        let err = github(VECTOR_SIGNATURE, VECTOR_BODY)
            .verify(&secrets(&["It's a Secret to Nobody"]))
            .unwrap_err();
        assert!(
            matches!(err, VerifyError::SignatureMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn rotation_accepts_the_second_secret() {
        let v = github(VECTOR_SIGNATURE, VECTOR_BODY)
            .verify(&secrets(&["the old secret", VECTOR_SECRET]));
        assert!(v.is_ok());
    }

    #[test]
    fn the_matching_secret_is_named_by_its_place() {
        let d = github(VECTOR_SIGNATURE, VECTOR_BODY);
        let (_, i) = d
            .verify_matched(&secrets(&["", "the old secret", VECTOR_SECRET]))
            .unwrap();
        assert_eq!(i, 2);
        let (_, i) = d
            .verify_matched(&secrets(&[VECTOR_SECRET, "another"]))
            .unwrap();
        assert_eq!(i, 0);
    }

    #[test]
    fn no_usable_secret_refuses_everything() {
        let d = github(&sign(&"".into(), VECTOR_BODY), VECTOR_BODY);
        let none = VerifyError::NoSecret {
            platform: Platform::Github,
        };
        assert_eq!(d.verify(&[]).unwrap_err(), none);
        assert_eq!(d.verify(&secrets(&[""])).unwrap_err(), none);
    }

    #[test]
    fn sha1_only_github_delivery_is_refused_as_missing() {
        let d = delivery(
            Platform::Github,
            HUB_SIGNATURE_HEADER,
            "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6",
            VECTOR_BODY,
        );
        assert_eq!(
            d.verify(&secrets(&[VECTOR_SECRET])).unwrap_err(),
            VerifyError::MissingSignature {
                platform: Platform::Github,
                header: GITHUB_SIGNATURE_HEADER
            }
        );
    }

    #[test]
    fn malformed_headers_are_told_apart() {
        let hex = &VECTOR_SIGNATURE[7..];
        for (value, reason) in [
            (hex.to_owned(), "no sha256= prefix"),
            (format!("sha1={hex}"), "no sha256= prefix"),
            (format!("sha256={}zz", &hex[2..]), "not hexadecimal"),
            (
                format!("sha256={}", &hex[..62]),
                "not a SHA-256 digest (wrong length)",
            ),
            (
                format!("sha256={hex}00"),
                "not a SHA-256 digest (wrong length)",
            ),
            ("sha256=".to_owned(), "not a SHA-256 digest (wrong length)"),
        ] {
            let err = github(&value, VECTOR_BODY)
                .verify(&secrets(&[VECTOR_SECRET]))
                .unwrap_err();
            assert_eq!(
                err,
                VerifyError::MalformedSignature {
                    platform: Platform::Github,
                    header: GITHUB_SIGNATURE_HEADER,
                    reason
                },
                "{value}"
            );
        }
    }

    #[test]
    fn bitbucket_and_jira_sign_in_x_hub_signature() {
        for platform in [Platform::Bitbucket, Platform::Jira] {
            let ok = delivery(
                platform,
                HUB_SIGNATURE_HEADER,
                VECTOR_SIGNATURE,
                VECTOR_BODY,
            );
            assert!(ok.verify(&secrets(&[VECTOR_SECRET])).is_ok());
            // A GitHub-style header is not where these platforms sign.
            let elsewhere = github(VECTOR_SIGNATURE, VECTOR_BODY);
            let elsewhere = Unverified {
                platform,
                ..elsewhere
            };
            assert_eq!(
                elsewhere.verify(&secrets(&[VECTOR_SECRET])).unwrap_err(),
                VerifyError::MissingSignature {
                    platform,
                    header: HUB_SIGNATURE_HEADER
                }
            );
        }
    }

    #[test]
    fn the_replay_key_follows_the_body_and_secret_and_is_not_the_signature() {
        let body = br#"{"action":"renamed"}"#;
        let key = |secret: &str, body: &[u8], header: String| {
            delivery(Platform::Github, GITHUB_SIGNATURE_HEADER, &header, body)
                .verify(&secrets(&[secret]))
                .unwrap()
                .replay_key()
                .unwrap()
        };
        let signature = sign(&WebhookSecret::from("s1"), body);
        let first = key("s1", body, signature.clone());
        assert_eq!(first.len(), 64);
        assert_eq!(
            first,
            key("s1", body, signature.clone()),
            "same bytes again"
        );
        assert_eq!(
            first,
            key(
                "s1",
                body,
                signature.to_uppercase().replace("SHA256=", "sha256=")
            ),
            "hex case is not significant"
        );
        let other = br#"{"action":"deleted"}"#;
        assert_ne!(
            first,
            key("s1", other, sign(&WebhookSecret::from("s1"), other))
        );
        assert_ne!(
            first,
            key("s2", body, sign(&WebhookSecret::from("s2"), body))
        );
        // What is kept cannot be sent back as the signature.
        assert_ne!(first, signature["sha256=".len()..]);
    }

    #[test]
    fn drive_is_not_hmac_verified() {
        let d = delivery(Platform::Drive, HUB_SIGNATURE_HEADER, VECTOR_SIGNATURE, b"");
        assert_eq!(
            d.verify(&secrets(&[VECTOR_SECRET])).unwrap_err(),
            VerifyError::NotSigned {
                platform: Platform::Drive
            }
        );
    }

    #[test]
    fn secrets_never_print() {
        let s = WebhookSecret::from("hunter2");
        assert_eq!(format!("{s}"), "[redacted]");
        assert!(!format!("{s:?}").contains("hunter2"));
        let ch = DriveChannel {
            channel_id: "c".into(),
            token: s,
            resource_id: "r".into(),
        };
        assert!(!format!("{ch:?}").contains("hunter2"));
    }
}
