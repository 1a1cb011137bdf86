//! Verification against the documented test vector and the real samples.

use cmcp_domain::Platform;
use cmcp_webhook_gateway::verify::{GITHUB_SIGNATURE_HEADER, HUB_SIGNATURE_HEADER};
use cmcp_webhook_gateway::{Unverified, VerifyError, WebhookSecret};
use serde_json::Value;

use crate::support::{SECRET, delivery, delivery_id, fixture, headers, payload_files, verified};

#[test]
fn githubs_documented_test_vector_verifies() {
    let vector: Value =
        serde_json::from_slice(&fixture("github", "webhook-signature-test-vector.json")).unwrap();
    let field = |k: &str| vector[k].as_str().unwrap().to_owned();
    let (secret, payload, header) = (
        field("secret"),
        field("payload"),
        field("x_hub_signature_256"),
    );
    assert_eq!(
        header,
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    let d = Unverified::new(
        Platform::Github,
        payload.clone().into_bytes(),
        headers(&[(GITHUB_SIGNATURE_HEADER, &header)]),
    );
    let v = d.verify(&[WebhookSecret::from(secret.as_str())]).unwrap();
    assert_eq!(v.body().as_ref(), payload.as_bytes());
}

#[test]
fn every_sample_verifies_and_a_changed_byte_does_not() {
    for (platform, dir) in [
        (Platform::Github, "github"),
        (Platform::Bitbucket, "bitbucket"),
        (Platform::Jira, "jira"),
    ] {
        for file in payload_files(dir) {
            let body = fixture(dir, &file);
            let good = delivery(platform, SECRET, &[], &body);
            assert!(
                good.verify(&[WebhookSecret::from(SECRET)]).is_ok(),
                "{file}"
            );
            let mut tampered = good.clone();
            let mut bytes = body.clone();
            let last = bytes.len() - 2;
            bytes[last] ^= 0x01;
            tampered.body = bytes.into();
            assert!(
                matches!(
                    tampered.verify(&[WebhookSecret::from(SECRET)]),
                    Err(VerifyError::SignatureMismatch { .. })
                ),
                "{file}"
            );
        }
    }
}

#[test]
fn another_connections_signature_is_refused() {
    let body = fixture("bitbucket", "webhook-repo-updated.json");
    let other = delivery(
        Platform::Bitbucket,
        "conn-b: a different secret",
        &[],
        &body,
    );
    assert_eq!(
        other.verify(&[WebhookSecret::from(SECRET)]).unwrap_err(),
        VerifyError::SignatureMismatch {
            platform: Platform::Bitbucket,
            secrets: 1
        }
    );
    // While conn-a rotates, its old and new secrets are accepted; conn-b's
    // never is.
    let rotating = [
        WebhookSecret::from("conn-a: old"),
        WebhookSecret::from(SECRET),
    ];
    assert!(
        delivery(Platform::Bitbucket, SECRET, &[], &body)
            .verify(&rotating)
            .is_ok()
    );
    assert!(other.verify(&rotating).is_err());
}

#[test]
fn unsigned_deliveries_are_refused_as_missing() {
    let body = fixture(
        "jira",
        "webhook-project_created.third-party-doc-example.json",
    );
    let unsigned = Unverified::new(Platform::Jira, body, headers(&[]));
    assert_eq!(
        unsigned.verify(&[WebhookSecret::from(SECRET)]).unwrap_err(),
        VerifyError::MissingSignature {
            platform: Platform::Jira,
            header: HUB_SIGNATURE_HEADER
        }
    );
}

/// The documented GitHub delivery: only its SHA-1 header is kept, so it is
/// unsigned as far as the fleet is concerned; with a SHA-256 signature its
/// hook id and GUID make the dedupe key.
#[test]
fn documented_github_delivery_headers() {
    let dump = String::from_utf8(fixture(
        "github",
        "webhook-delivery-headers.docs-example.txt",
    ))
    .unwrap();
    let pairs: Vec<(String, String)> = dump
        .lines()
        .filter_map(|l| l.strip_prefix("> "))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let sha1_only: Vec<(&str, &str)> = pairs
        .iter()
        .filter(|(k, _)| k != "X-Hub-Signature-256")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let d = Unverified::new(Platform::Github, b"{}".to_vec(), headers(&sha1_only));
    assert_eq!(
        d.verify(&[WebhookSecret::from(SECRET)]).unwrap_err(),
        VerifyError::MissingSignature {
            platform: Platform::Github,
            header: GITHUB_SIGNATURE_HEADER
        }
    );

    let routing: Vec<(&str, &str)> = ["X-GitHub-Event", "X-GitHub-Hook-ID", "X-GitHub-Delivery"]
        .into_iter()
        .map(|k| (k, get(k).unwrap()))
        .collect();
    let v = verified(Platform::Github, &routing, br#"{"action":"opened"}"#);
    assert_eq!(
        delivery_id(&v).unwrap().as_str(),
        "github:292430182:72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
}
