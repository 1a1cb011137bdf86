//! What Bitbucket Cloud and Jira Cloud share: one account system, so one way
//! of carrying a credential, and one reading of error answers.
//!
//! A connection stores a single secret text, so the kind of credential is
//! encoded in it:
//!
//! - `bearer:<token>` — an access token (Bitbucket workspace/project/repo
//!   access token, an OAuth access token), sent as `Authorization: Bearer`.
//! - `basic:<email>:<token>` — an Atlassian API token, sent as Basic auth
//!   with the account e-mail as the user name.
//!
//! Both platforms answer a rate limit with `429`; Jira usually adds
//! `Retry-After`, Bitbucket (for user tokens) sends no header at all, so a
//! bare 429 backs off exponentially instead of failing.

use cmcp_domain::{Platform, Token};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Deserialize;

use crate::common::budget::BudgetReading;
use crate::common::http::{ApiPolicy, Failure, retry_after};
use crate::error::{ConnectorError, Result};

/// Longest error message kept from a body that is not Atlassian's JSON.
const MAX_DETAIL: usize = 200;

/// The credential text is the domain's [`Credential`]; what is Atlassian's
/// here is the reading of a bad one and the header it becomes.
pub use cmcp_domain::Credential;

/// [`Credential`] as the Atlassian connectors use it.
pub trait AtlassianCredential: Sized {
    /// Parses `bearer:<token>` or `basic:<user>:<token>`; a text without a
    /// known prefix is `None`, so each platform decides what it means.
    fn parse(token: &Token, platform: Platform) -> Result<Option<Self>>;

    /// The `Authorization` header value, marked sensitive.
    fn header(&self, platform: Platform) -> Result<HeaderValue>;
}

impl AtlassianCredential for Credential {
    fn parse(token: &Token, platform: Platform) -> Result<Option<Credential>> {
        Credential::from_token(token).map_err(|why| ConnectorError::InvalidConfig {
            detail: format!("the {platform} credential {why}"),
        })
    }

    fn header(&self, platform: Platform) -> Result<HeaderValue> {
        let text = match self {
            Credential::Bearer(t) => format!("Bearer {t}"),
            Credential::Basic { user, secret } => {
                format!("Basic {}", base64(format!("{user}:{secret}").as_bytes()))
            }
        };
        let mut value =
            HeaderValue::from_str(&text).map_err(|_| ConnectorError::InvalidConfig {
                // Never echo the token, not even the offending character.
                detail: format!(
                    "the {platform} credential contains characters not allowed in an HTTP header"
                ),
            })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// Standard base64 with padding (RFC 4648 §4), for the Basic header only.
pub fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Bitbucket: `{"type":"error","error":{"message":"…"}}`; Jira:
/// `{"errorMessages":["…"],"errors":{…}}`.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<BitbucketError>,
    #[serde(default, rename = "errorMessages")]
    error_messages: Vec<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct BitbucketError {
    #[serde(default)]
    message: Option<String>,
}

/// The platform's error message, or the start of a body that is not JSON.
pub fn message(body: &[u8]) -> String {
    if let Ok(b) = serde_json::from_slice::<ErrorBody>(body) {
        if let Some(m) = b.error.and_then(|e| e.message) {
            return m;
        }
        if !b.error_messages.is_empty() {
            return b.error_messages.join("; ");
        }
        if let Some(m) = b.message {
            return m;
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_DETAIL) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The reading of Atlassian answers for the shared executor.
#[derive(Debug, Clone, Copy)]
pub struct AtlassianPolicy(pub Platform);

impl ApiPolicy for AtlassianPolicy {
    fn platform(&self) -> Platform {
        self.0
    }

    /// Neither platform reports a remaining count and a reset time on every
    /// answer (Bitbucket's `X-RateLimit-*` name only the limit), so there is
    /// no budget to spend down: 429s are handled when they come.
    fn budget(&self, _headers: &HeaderMap) -> Option<BudgetReading> {
        None
    }

    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify(self.0, status, headers, body)
    }
}

/// What a non-2xx Atlassian answer means.
pub fn classify(
    platform: Platform,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Failure {
    let msg = message(body);
    let reason = status.canonical_reason().unwrap_or("");
    let detail = if msg.is_empty() || msg.eq_ignore_ascii_case(reason) {
        reason.to_owned()
    } else {
        format!("{reason}: {msg}")
    };
    let http = |detail: String| ConnectorError::Http {
        platform,
        status: status.as_u16(),
        detail,
    };
    match status {
        StatusCode::UNAUTHORIZED => Failure::Fatal(ConnectorError::Unauthorized {
            platform,
            detail: if msg.is_empty() {
                reason.to_owned()
            } else {
                msg
            },
        }),
        StatusCode::FORBIDDEN => Failure::Fatal(ConnectorError::PermissionDenied {
            platform,
            detail: msg,
            accepted_permissions: headers
                .get("x-accepted-oauth-scopes")
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_owned()),
        }),
        StatusCode::TOO_MANY_REQUESTS => match retry_after(headers) {
            Some(wait) => Failure::RetryAfter {
                wait,
                error: http(detail),
            },
            // Bitbucket user tokens get a bare 429: back off and retry.
            None => Failure::Transient(http(detail)),
        },
        StatusCode::NOT_FOUND => Failure::Fatal(ConnectorError::NotFound {
            platform,
            what: if msg.is_empty() {
                reason.to_owned()
            } else {
                msg
            },
        }),
        StatusCode::REQUEST_TIMEOUT => Failure::Transient(http(detail)),
        s if s.is_server_error() => Failure::Transient(http(detail)),
        _ => Failure::Fatal(http(detail)),
    }
}

/// Accepts `https://host[/prefix]` and `http://127.0.0.1:PORT`; the result
/// always ends with `/` so joining segments keeps the prefix.
pub fn parse_base(platform: Platform, base_url: &str) -> Result<url::Url> {
    let invalid = |why: &str| ConnectorError::InvalidConfig {
        detail: format!("{platform} base URL {base_url:?} {why}"),
    };
    let mut url =
        url::Url::parse(base_url.trim()).map_err(|e| invalid(&format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must be http or https"));
    }
    if url.cannot_be_a_base() || url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("must not have a query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not carry credentials"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The base URL plus path segments, each percent-encoded as one segment
/// (`{uuid}` becomes `%7Buuid%7D`; a `/` can never be smuggled in).
pub fn endpoint(base: &url::Url, segments: &[&str]) -> url::Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn credentials_parse_by_prefix_and_never_print() {
        let p = Platform::Jira;
        let c = Credential::parse(&Token::new("basic:me@acme.com:s3cret"), p)
            .unwrap()
            .unwrap();
        assert_eq!(
            c,
            Credential::Basic {
                user: "me@acme.com".into(),
                secret: "s3cret".into()
            }
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(c.header(p).unwrap().is_sensitive());
        let b = Credential::parse(&Token::new("bearer:tok"), p)
            .unwrap()
            .unwrap();
        assert_eq!(b.header(p).unwrap().to_str().unwrap(), "Bearer tok");
        assert_eq!(Credential::parse(&Token::new("plain"), p).unwrap(), None);
        for bad in ["", "bearer:", "basic:me", "basic::x", "basic:me@x:"] {
            assert!(Credential::parse(&Token::new(bad), p).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bare_429_backs_off_and_one_with_retry_after_waits() {
        let p = Platform::Bitbucket;
        assert!(matches!(
            classify(p, StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), b""),
            Failure::Transient(ConnectorError::Http { status: 429, .. })
        ));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert!(matches!(
            classify(Platform::Jira, StatusCode::TOO_MANY_REQUESTS, &h, b""),
            Failure::RetryAfter { wait, .. } if wait.as_secs() == 2
        ));
    }

    #[test]
    fn error_messages_of_both_platforms_are_read() {
        let bb = br#"{"type":"error","error":{"message":"Repository not found"}}"#;
        assert_eq!(message(bb), "Repository not found");
        let jira = br#"{"errorMessages":["No project could be found with id '1'."],"errors":{}}"#;
        assert_eq!(message(jira), "No project could be found with id '1'.");
        assert!(matches!(
            classify(
                Platform::Jira,
                StatusCode::NOT_FOUND,
                &HeaderMap::new(),
                jira
            ),
            Failure::Fatal(ConnectorError::NotFound { .. })
        ));
        assert!(matches!(
            classify(
                Platform::Bitbucket,
                StatusCode::UNAUTHORIZED,
                &HeaderMap::new(),
                b""
            ),
            Failure::Fatal(ConnectorError::Unauthorized { .. })
        ));
    }
}
