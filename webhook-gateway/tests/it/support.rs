//! Loads fixtures (paths relative to this crate's manifest) and turns them
//! into verified deliveries the way the gateway will.

use std::path::PathBuf;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use cmcp_connectors::webhook::{DeliveryId, HookEvent, ParseError};
use cmcp_domain::Platform;
use cmcp_webhook_gateway::verify::{GITHUB_SIGNATURE_HEADER, HUB_SIGNATURE_HEADER};
use cmcp_webhook_gateway::{Unverified, Verified, WebhookSecret, sign};

/// The secret of the connection the samples are delivered to.
pub const SECRET: &str = "conn-a: correct horse battery staple";

pub fn webhooks_dir(platform: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/data")
        .join(platform)
        .join("webhooks")
}

pub fn fixture(platform: &str, file: &str) -> Vec<u8> {
    let path = webhooks_dir(platform).join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `*.json` payload sample of a platform (not the test vector).
pub fn payload_files(platform: &str) -> Vec<String> {
    let dir = webhooks_dir(platform);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.contains("signature-test-vector"))
        .collect();
    names.sort();
    names
}

pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect()
}

/// `body` as the platform would send it to a connection whose secret is
/// `secret`: signed in the platform's header, plus `extra` headers.
pub fn delivery(
    platform: Platform,
    secret: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> Unverified {
    let mut h = headers(extra);
    let header = match platform {
        Platform::Github => GITHUB_SIGNATURE_HEADER,
        _ => HUB_SIGNATURE_HEADER,
    };
    let signature = sign(&WebhookSecret::from(secret), body);
    h.insert(header, HeaderValue::from_str(&signature).unwrap());
    Unverified::new(platform, body.to_vec(), h)
}

/// Sign with [`SECRET`] and verify: the delivery a handler would get.
pub fn verified(platform: Platform, extra: &[(&str, &str)], body: &[u8]) -> Verified {
    delivery(platform, SECRET, extra, body)
        .verify(&[WebhookSecret::from(SECRET)])
        .expect("a delivery signed with the connection's secret verifies")
}

/// What the gateway makes of a verified delivery: its event...
pub fn parse_verified(v: &Verified) -> Result<HookEvent, ParseError> {
    HookEvent::parse(v.platform(), v.headers(), v.body())
}

/// ...and its dedupe key.
pub fn delivery_id(v: &Verified) -> Result<DeliveryId, ParseError> {
    DeliveryId::of(v.platform(), v.headers(), v.body())
}
