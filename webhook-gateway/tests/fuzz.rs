//! Fuzzing on stable Rust: proptest with arbitrary bytes and mutated real
//! samples against every parser a request or an upstream reaches before it
//! is trusted: signature verification, each platform's event parser and
//! delivery-id extraction, the media-type check, Drive's channel headers,
//! the `Link` header parser and credential parsing. None may panic, and a
//! correct signature over any bytes verifies while any flipped byte fails.
//!
//! Inputs per target: `PROPTEST_CASES=N` (256 by default, as
//! `cargo test --workspace` runs it), or `CMCP_FUZZ_SECONDS=S` for as long
//! as S seconds per target (the runner is `cmcp_registry::testing::fuzz`;
//! `--nocapture` shows each target's inputs per second). `.ci/run` runs a
//! short pass of more, and a long pass is
//! `PROPTEST_CASES=10000000 cargo test --release -p cmcp-webhook-gateway --test fuzz -- --nocapture`.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use cmcp_connectors::common::link;
use cmcp_connectors::webhook::{DeliveryId, HookEvent, intake};
use cmcp_domain::Platform;
use cmcp_registry::testing::fuzz::fuzz;
use cmcp_webhook_gateway::verify::{GITHUB_SIGNATURE_HEADER, HUB_SIGNATURE_HEADER};
use cmcp_webhook_gateway::{DriveChannel, Unverified, WebhookSecret, sign, verify_drive_channel};
use proptest::prelude::*;

const PLATFORMS: [Platform; 4] = [
    Platform::Github,
    Platform::Bitbucket,
    Platform::Jira,
    Platform::Drive,
];

/// Header names the parsers read, plus noise.
const NAMES: &[&str] = &[
    "x-github-event",
    "x-github-delivery",
    "x-github-hook-id",
    "x-hub-signature-256",
    "x-hub-signature",
    "x-event-key",
    "x-request-uuid",
    "x-hook-uuid",
    "x-atlassian-webhook-identifier",
    "x-goog-channel-id",
    "x-goog-channel-token",
    "x-goog-resource-id",
    "x-goog-resource-state",
    "x-goog-message-number",
    "content-type",
    "link",
    "x-other",
];

const SAMPLES: &[&[u8]] = &[
    include_bytes!("../../fixtures/data/github/webhooks/webhook-repository-renamed.json"),
    include_bytes!(
        "../../fixtures/data/github/webhooks/webhook-installation_repositories-added.json"
    ),
    include_bytes!("../../fixtures/data/bitbucket/webhooks/webhook-repo-updated.json"),
    include_bytes!(
        "../../fixtures/data/jira/webhooks/webhook-project_created.third-party-doc-example.json"
    ),
];

fn platform() -> impl Strategy<Value = Platform> {
    prop::sample::select(PLATFORMS.to_vec())
}

/// Header maps of known names with arbitrary (valid) values.
fn headers() -> impl Strategy<Value = HeaderMap> {
    prop::collection::vec(
        (
            prop::sample::select(NAMES.to_vec()),
            prop::collection::vec(any::<u8>(), 0..64),
        ),
        0..10,
    )
    .prop_map(|pairs| {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                h.append(HeaderName::from_static(name), v);
            }
        }
        h
    })
}

/// Arbitrary bytes, or a real sample with bytes flipped, cut or repeated.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        (
            prop::sample::select(SAMPLES.to_vec()),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(sample, flips, cut)| {
                let mut b = sample.to_vec();
                for (at, byte) in flips {
                    let i = at.index(b.len());
                    b[i] = byte;
                }
                b.truncate(cut.index(b.len() + 1));
                b
            }),
    ]
}

#[test]
fn signature_verification_never_panics() {
    fuzz(
        "signature_verification",
        (platform(), headers(), body()),
        |(p, h, b)| {
            let _ = Unverified::new(p, b, h).verify(&[WebhookSecret::from("s3cret")]);
            Ok(())
        },
    );
}

#[test]
fn a_correct_signature_verifies_and_any_flip_fails() {
    let strategy = (
        prop::sample::select(vec![Platform::Github, Platform::Bitbucket, Platform::Jira]),
        prop::collection::vec(any::<u8>(), 1..256),
        any::<prop::sample::Index>(),
    );
    fuzz("signature_round_trip", strategy, |(p, b, at)| {
        let secret = WebhookSecret::from("s3cret");
        let header = if p == Platform::Github {
            GITHUB_SIGNATURE_HEADER
        } else {
            HUB_SIGNATURE_HEADER
        };
        let mut h = HeaderMap::new();
        h.insert(header, HeaderValue::from_str(&sign(&secret, &b)).unwrap());
        prop_assert!(
            Unverified::new(p, b.clone(), h.clone())
                .verify(std::slice::from_ref(&secret))
                .is_ok()
        );
        let mut flipped = b;
        let i = at.index(flipped.len());
        flipped[i] ^= 1;
        prop_assert!(Unverified::new(p, flipped, h).verify(&[secret]).is_err());
        Ok(())
    });
}

#[test]
fn event_parsers_and_delivery_ids_never_panic() {
    fuzz(
        "event_parsers",
        (platform(), headers(), body()),
        |(p, h, b)| {
            if let Ok(event) = HookEvent::parse(p, &h, &b) {
                let _ = event.label();
                let _ = event.plan();
            }
            let _ = DeliveryId::of(p, &h, &b);
            let _ = intake::check_media_type(p, &h);
            Ok(())
        },
    );
}

#[test]
fn drive_channel_headers_never_panic() {
    fuzz(
        "drive_channel",
        (headers(), ".{0,40}", ".{0,40}"),
        |(h, id, res)| {
            let expected = DriveChannel {
                channel_id: id,
                token: WebhookSecret::from("tok"),
                resource_id: res,
            };
            let _ = verify_drive_channel(&h, &expected);
            Ok(())
        },
    );
}

#[test]
fn link_header_parser_never_panics() {
    let strategy = (".{0,300}", prop::collection::vec(any::<u8>(), 0..200));
    fuzz("link_header", strategy, |(value, raw)| {
        let _ = link::parse_link_header(&value);
        let _ = link::parse_link_header(&String::from_utf8_lossy(&raw));
        let base = url::Url::parse("https://api.github.com/orgs/acme/repos?page=1").unwrap();
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert("link", v);
        }
        for found in [link::next_url(&h, &base), link::last_url(&h, &base)]
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = link::page_number(&found);
        }
        Ok(())
    });
}

#[test]
fn credential_parsing_never_panics() {
    fuzz("credentials", ".{0,200}", |text: String| {
        let _ = cmcp_domain::Credential::from_token(&cmcp_domain::Token::new(text));
        Ok(())
    });
}
