//! The GitHub REST client: base URL handling, request headers, and what
//! GitHub's error answers mean.
//!
//! The classification follows GitHub's documented order for rate limits:
//! honour `retry-after`; otherwise, with `x-ratelimit-remaining: 0`, wait for
//! `x-ratelimit-reset`; otherwise a "secondary rate limit" message means wait
//! at least a minute and back off. Only a 403 that is none of these is a
//! permission problem — treating every 403 as one (or as a rate limit) is the
//! classic mistake.

use std::sync::Arc;

use cmcp_domain::{Platform, Token};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use url::Url;

use super::model::ErrorBody;
use crate::common::budget::{BudgetReading, parse_epoch};
use crate::common::config::HttpConfig;
use crate::common::http::{ApiPolicy, Failure, HttpClient, retry_after};
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};

const PLATFORM: Platform = Platform::Github;
pub const API_VERSION: &str = "2022-11-28";
const API_VERSION_HEADER: HeaderName = HeaderName::from_static("x-github-api-version");
const ACCEPTED_PERMISSIONS: &str = "x-accepted-github-permissions";
const RATE_REMAINING: &str = "x-ratelimit-remaining";
const RATE_RESET: &str = "x-ratelimit-reset";
const RATE_LIMIT: &str = "x-ratelimit-limit";
/// Longest error message kept from a body that is not GitHub's JSON.
const MAX_DETAIL: usize = 200;

/// GitHub's reading of responses, for the shared executor.
#[derive(Debug, Clone, Copy, Default)]
pub struct GithubPolicy;

impl ApiPolicy for GithubPolicy {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    fn budget(&self, headers: &HeaderMap) -> Option<BudgetReading> {
        Some(BudgetReading {
            remaining: header(headers, RATE_REMAINING)?.trim().parse().ok()?,
            reset: parse_epoch(header(headers, RATE_RESET)?)?,
        })
    }

    fn budget_limit(&self, headers: &HeaderMap) -> Option<u32> {
        header(headers, RATE_LIMIT)?.trim().parse().ok()
    }

    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify(status, headers, body)
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

/// GitHub's `message`, or the start of a body that is not its JSON.
fn message(body: &[u8]) -> String {
    if let Ok(ErrorBody { message: Some(m) }) = serde_json::from_slice::<ErrorBody>(body) {
        return m;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_DETAIL) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// What a non-2xx GitHub answer means (see the module docs for the order).
pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
    let msg = message(body);
    let reason = status.canonical_reason().unwrap_or("");
    let http = |detail: String| ConnectorError::Http {
        platform: PLATFORM,
        status: status.as_u16(),
        detail,
    };
    let detail = if msg.is_empty() || msg.eq_ignore_ascii_case(reason) {
        reason.to_owned()
    } else {
        format!("{reason}: {msg}")
    };
    match status {
        StatusCode::UNAUTHORIZED => Failure::Fatal(ConnectorError::Unauthorized {
            platform: PLATFORM,
            detail: msg,
        }),
        StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS => {
            if let Some(wait) = retry_after(headers) {
                return Failure::RetryAfter {
                    wait,
                    error: http(detail),
                };
            }
            if header(headers, RATE_REMAINING).map(str::trim) == Some("0") {
                return match header(headers, RATE_RESET).and_then(parse_epoch) {
                    Some(reset) => Failure::UntilReset {
                        reset,
                        error: http(detail),
                    },
                    None => Failure::Secondary(http(detail)),
                };
            }
            let lower = msg.to_ascii_lowercase();
            // "secondary rate limit" today; "abuse detection" in older
            // answers; a plain "rate limit exceeded" without headers is
            // handled the same cautious way.
            if lower.contains("rate limit") || lower.contains("abuse detection") {
                return Failure::Secondary(http(detail));
            }
            if status == StatusCode::FORBIDDEN {
                Failure::Fatal(ConnectorError::PermissionDenied {
                    platform: PLATFORM,
                    detail: msg,
                    accepted_permissions: header(headers, ACCEPTED_PERMISSIONS)
                        .map(|s| s.trim().to_owned()),
                })
            } else {
                Failure::Transient(http(detail))
            }
        }
        StatusCode::NOT_FOUND => Failure::Fatal(ConnectorError::NotFound {
            platform: PLATFORM,
            what: msg,
        }),
        StatusCode::REQUEST_TIMEOUT => Failure::Transient(http(detail)),
        s if s.is_server_error() => Failure::Transient(http(detail)),
        _ => Failure::Fatal(http(detail)),
    }
}

/// A GitHub REST API at one base URL with one credential.
#[derive(Debug)]
pub struct GithubClient {
    http: HttpClient<GithubPolicy>,
    /// Always ends with `/`, so joining segments keeps `/api/v3`.
    base: Url,
}

impl GithubClient {
    pub fn new(base_url: &str, token: &Token, cfg: HttpConfig) -> Result<Self> {
        let base = parse_base(base_url)?;
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, bearer(token)?);
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        headers.insert(API_VERSION_HEADER, HeaderValue::from_static(API_VERSION));
        Ok(GithubClient {
            http: HttpClient::new(GithubPolicy, cfg, headers)?,
            base,
        })
    }

    pub fn http(&self) -> &HttpClient<GithubPolicy> {
        &self.http
    }

    /// Spends the fleet's shared budget under `key` (see
    /// [`HttpClient::with_shared_budget`]).
    pub fn with_shared_budget(mut self, budget: Arc<dyn SharedBudget>, key: String) -> Self {
        self.http = self.http.with_shared_budget(budget, key);
        self
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The base URL plus path segments, each percent-encoded as one segment
    /// (an org name can never smuggle in a `/` or `?`).
    pub fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Whether `url` is on the API's own origin. Only those URLs may be
    /// followed: anywhere else would receive the credential.
    pub fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }
}

/// `Authorization: Bearer …`, marked sensitive so that `Debug` of headers,
/// and HTTP/2 header compression, leave it alone.
fn bearer(token: &Token) -> Result<HeaderValue> {
    if token.is_empty() {
        return Err(ConnectorError::InvalidConfig {
            detail: "the GitHub token is empty".into(),
        });
    }
    let mut value =
        HeaderValue::from_str(&format!("Bearer {}", token.expose().trim())).map_err(|_| {
            ConnectorError::InvalidConfig {
                // Never echo the token, not even the offending character.
                detail: "the GitHub token contains characters not allowed in an HTTP header".into(),
            }
        })?;
    value.set_sensitive(true);
    Ok(value)
}

/// Accepts `https://api.github.com`, `https://host/api/v3[/]` and plain
/// `http://127.0.0.1:PORT[/prefix]`; rejects anything that could not be a
/// base for path joining.
fn parse_base(base_url: &str) -> Result<Url> {
    let invalid = |why: &str| ConnectorError::InvalidConfig {
        detail: format!("GitHub base URL {base_url:?} {why}"),
    };
    let mut url =
        Url::parse(base_url.trim()).map_err(|e| invalid(&format!("is not a URL: {e}")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> GithubClient {
        GithubClient::new(base, &Token::new("ghp_test"), HttpConfig::default()).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn base_urls_join_with_or_without_trailing_slash() {
        for (base, want) in [
            (
                "https://api.github.com",
                "https://api.github.com/orgs/acme/repos",
            ),
            (
                "https://api.github.com/",
                "https://api.github.com/orgs/acme/repos",
            ),
            (
                "https://ghe.example.com/api/v3",
                "https://ghe.example.com/api/v3/orgs/acme/repos",
            ),
            (
                "https://ghe.example.com/api/v3/",
                "https://ghe.example.com/api/v3/orgs/acme/repos",
            ),
            (
                "http://127.0.0.1:8080",
                "http://127.0.0.1:8080/orgs/acme/repos",
            ),
        ] {
            assert_eq!(
                client(base).endpoint(&["orgs", "acme", "repos"]).as_str(),
                want
            );
        }
    }

    #[test]
    fn segments_are_escaped() {
        let url = client("https://api.github.com").endpoint(&["orgs", "a/b?c"]);
        assert_eq!(url.as_str(), "https://api.github.com/orgs/a%2Fb%3Fc");
    }

    #[test]
    fn bad_base_urls_are_config_errors() {
        for bad in [
            "",
            "api.github.com",
            "ftp://x",
            "https://x/?q=1",
            "https://u:p@x/",
        ] {
            let e = GithubClient::new(bad, &Token::new("t"), HttpConfig::default()).unwrap_err();
            assert!(
                matches!(e, ConnectorError::InvalidConfig { .. }),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn token_never_shows_in_debug_or_errors() {
        let c = client("https://api.github.com");
        assert!(!format!("{c:?}").contains("ghp_test"));
        let bad = Token::new("ghp_bad\nsecret");
        let e =
            GithubClient::new("https://api.github.com", &bad, HttpConfig::default()).unwrap_err();
        assert!(!e.to_string().contains("secret"));
        let e = GithubClient::new(
            "https://api.github.com",
            &Token::new(""),
            HttpConfig::default(),
        );
        assert!(e.is_err());
        assert!(bearer(&Token::new("x")).unwrap().is_sensitive());
    }

    #[test]
    fn other_origins_are_not_followed() {
        let c = client("https://ghe.example.com/api/v3");
        assert!(c.same_origin(&Url::parse("https://ghe.example.com/api/v3/x?page=2").unwrap()));
        assert!(!c.same_origin(&Url::parse("https://evil.example/api/v3/x").unwrap()));
        assert!(!c.same_origin(&Url::parse("http://ghe.example.com/api/v3/x").unwrap()));
    }

    #[test]
    fn a_plain_403_is_a_permission_gap_with_the_accepted_permissions() {
        let h = headers(&[
            (ACCEPTED_PERMISSIONS, "metadata=read; contents=read"),
            (RATE_REMAINING, "4999"),
            (RATE_RESET, "1700000000"),
        ]);
        let body = br#"{"message":"Resource not accessible by personal access token"}"#;
        match classify(StatusCode::FORBIDDEN, &h, body) {
            Failure::Fatal(ConnectorError::PermissionDenied {
                detail,
                accepted_permissions,
                ..
            }) => {
                assert_eq!(detail, "Resource not accessible by personal access token");
                assert_eq!(
                    accepted_permissions.as_deref(),
                    Some("metadata=read; contents=read")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rate_limits_are_told_apart_in_githubs_order() {
        let secondary = br#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
        // retry-after wins over everything.
        let h = headers(&[
            ("retry-after", "3"),
            (RATE_REMAINING, "0"),
            (RATE_RESET, "1"),
        ]);
        assert!(matches!(
            classify(StatusCode::FORBIDDEN, &h, secondary),
            Failure::RetryAfter { wait, .. } if wait.as_secs() == 3
        ));
        // remaining 0: wait for the reset.
        let h = headers(&[(RATE_REMAINING, "0"), (RATE_RESET, "1700000000")]);
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, &h, b"{}"),
            Failure::UntilReset { reset, .. } if reset.timestamp() == 1_700_000_000
        ));
        // the message alone: secondary.
        assert!(matches!(
            classify(StatusCode::FORBIDDEN, &HeaderMap::new(), secondary),
            Failure::Secondary(_)
        ));
        // a bare 429: plain backoff.
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), b""),
            Failure::Transient(ConnectorError::Http { status: 429, .. })
        ));
    }

    #[test]
    fn other_statuses() {
        let none = HeaderMap::new();
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, &none, br#"{"message":"Bad credentials"}"#),
            Failure::Fatal(ConnectorError::Unauthorized { detail, .. }) if detail == "Bad credentials"
        ));
        assert!(matches!(
            classify(StatusCode::NOT_FOUND, &none, b""),
            Failure::Fatal(ConnectorError::NotFound { .. })
        ));
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, &none, b"<html>oops</html>"),
            Failure::Transient(ConnectorError::Http { status: 502, detail, .. }) if detail == "Bad Gateway: <html>oops</html>"
        ));
        assert!(matches!(
            classify(StatusCode::GONE, &none, b""),
            Failure::Fatal(ConnectorError::Http { status: 410, .. })
        ));
        assert!(matches!(
            classify(StatusCode::UNPROCESSABLE_ENTITY, &none, b""),
            Failure::Fatal(ConnectorError::Http { status: 422, .. })
        ));
    }

    #[test]
    fn budget_comes_from_the_ratelimit_headers() {
        let h = headers(&[(RATE_REMAINING, "42"), (RATE_RESET, "1700000000")]);
        let r = GithubPolicy.budget(&h).unwrap();
        assert_eq!(GithubPolicy.budget_limit(&h), None);
        let limited = headers(&[(RATE_LIMIT, "5000")]);
        assert_eq!(GithubPolicy.budget_limit(&limited), Some(5000));
        assert_eq!(r.remaining, 42);
        assert_eq!(r.reset.timestamp(), 1_700_000_000);
        assert!(GithubPolicy.budget(&HeaderMap::new()).is_none());
    }
}
