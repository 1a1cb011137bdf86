//! What the edge may decide about a delivery before it reads a body byte:
//! how many bytes the platform can send, and in which media types. Each
//! platform states its own in its `webhook.rs` (`MAX_BODY_BYTES`,
//! `CONTENT_TYPES`); this is the one place that names the four.
//!
//! A content type the platform does not send is refused (415) rather than
//! stored: a 2xx for a body nothing can parse would tell the sender it was
//! delivered while nothing happens.

use cmcp_domain::Platform;
use http::HeaderMap;

use crate::{bitbucket, drive, github, jira};

/// The largest body a platform sends.
pub fn max_body_bytes(platform: Platform) -> usize {
    match platform {
        Platform::Github => github::webhook::MAX_BODY_BYTES,
        Platform::Bitbucket => bitbucket::webhook::MAX_BODY_BYTES,
        Platform::Jira => jira::webhook::MAX_BODY_BYTES,
        Platform::Drive => drive::webhook::MAX_BODY_BYTES,
    }
}

/// The media types a platform's deliveries come in; empty when no body is
/// read (Drive).
pub fn content_types(platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Github => github::webhook::CONTENT_TYPES,
        Platform::Bitbucket => bitbucket::webhook::CONTENT_TYPES,
        Platform::Jira => jira::webhook::CONTENT_TYPES,
        Platform::Drive => drive::webhook::CONTENT_TYPES,
    }
}

/// A delivery in a media type its platform does not send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{platform} deliveries are {expected}, not {got}")]
pub struct UnsupportedMedia {
    pub platform: Platform,
    /// What came, cut to a loggable length (`none` when absent).
    pub got: String,
    /// The accepted types, comma-separated.
    pub expected: String,
}

/// The essence of the `Content-Type` header (`application/json` of
/// `Application/JSON; charset=utf-8`), lower-case; `None` when absent or
/// not text.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next()?.trim();
    (!essence.is_empty()).then(|| essence.to_ascii_lowercase())
}

/// Accept the delivery's media type, or say why not.
pub fn check_media_type(platform: Platform, headers: &HeaderMap) -> Result<(), UnsupportedMedia> {
    let accepted = content_types(platform);
    if accepted.is_empty() {
        return Ok(());
    }
    let got = media_type(headers);
    match &got {
        Some(t) if accepted.contains(&t.as_str()) => Ok(()),
        _ => Err(UnsupportedMedia {
            platform,
            got: got.map_or_else(|| "none".to_owned(), |t| t.chars().take(80).collect()),
            expected: accepted.join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(ct: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        h
    }

    #[test]
    fn each_platform_takes_what_it_documents() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/x-www-form-urlencoded",
        ] {
            assert_eq!(
                check_media_type(Platform::Github, &with(Some(ok))),
                Ok(()),
                "{ok}"
            );
        }
        for p in [Platform::Bitbucket, Platform::Jira] {
            assert_eq!(check_media_type(p, &with(Some("application/json"))), Ok(()));
            let e = check_media_type(p, &with(Some("application/x-www-form-urlencoded")));
            assert!(e.is_err(), "{p}");
        }
        let e = check_media_type(Platform::Github, &with(Some("text/plain"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "github deliveries are application/json, application/x-www-form-urlencoded, not text/plain"
        );
        assert_eq!(
            check_media_type(Platform::Jira, &with(None))
                .unwrap_err()
                .got,
            "none"
        );
        assert_eq!(check_media_type(Platform::Drive, &with(None)), Ok(()));
    }

    #[test]
    fn limits_fit_the_platforms() {
        assert_eq!(max_body_bytes(Platform::Github), 25 * 1024 * 1024);
        for p in [Platform::Bitbucket, Platform::Jira, Platform::Drive] {
            assert!(max_body_bytes(p) < max_body_bytes(Platform::Github), "{p}");
        }
    }
}
