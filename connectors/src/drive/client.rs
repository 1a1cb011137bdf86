//! The Drive REST client: base URL, the access-token session, and what
//! Drive's error answers mean.
//!
//! Drive's quota answers are **403** with error reason
//! `userRateLimitExceeded` or `rateLimitExceeded` (and 429): those are rate
//! limits, retried with truncated exponential backoff as Google asks —
//! treating them as permission errors would fail a listing for a busy
//! minute. Only a 403 with any other reason is a permission problem.
//!
//! The bearer token changes every hour, while the shared executor keeps its
//! credential in the reqwest client's default headers. So a session is one
//! executor built for one access token; it is rebuilt (same settings) when
//! the token nears its end, or after a 401.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cmcp_domain::Platform;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;
use url::Url;

use super::auth::TokenSource;
use super::model::ErrorEnvelope;
use crate::common::budget::BudgetReading;
use crate::common::config::HttpConfig;
use crate::common::http::{
    ApiPolicy, Counters, Exhausted, Failure, Fetched, HttpClient, retry_after,
};
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};

const PLATFORM: Platform = Platform::Drive;
/// Refresh this long before the access token ends.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// Error reasons Drive gives its rate limits.
const RATE_REASONS: [&str; 2] = ["userRateLimitExceeded", "rateLimitExceeded"];

/// Drive's reading of responses, for the shared executor.
#[derive(Debug, Clone, Copy, Default)]
pub struct DrivePolicy;

impl ApiPolicy for DrivePolicy {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    /// Drive reports no budget in headers.
    fn budget(&self, _headers: &HeaderMap) -> Option<BudgetReading> {
        None
    }

    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify(status, headers, body)
    }
}

/// `(message, reasons)` of Google's error envelope.
fn error_parts(body: &[u8]) -> (String, Vec<String>) {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(e) => {
            let reasons = e.error.errors.iter().map(|i| i.reason.clone()).collect();
            let msg = if e.error.message.is_empty() {
                e.error
                    .errors
                    .first()
                    .map(|i| i.message.clone())
                    .unwrap_or_default()
            } else {
                e.error.message
            };
            (msg, reasons)
        }
        Err(_) => (
            String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(200)
                .collect(),
            Vec::new(),
        ),
    }
}

/// What a non-2xx Drive answer means (see the module docs).
pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
    let (msg, reasons) = error_parts(body);
    let detail = if reasons.is_empty() {
        msg.clone()
    } else {
        format!("{msg} ({})", reasons.join(", "))
    };
    let http = |detail: String| ConnectorError::Http {
        platform: PLATFORM,
        status: status.as_u16(),
        detail,
    };
    let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
        || reasons.iter().any(|r| RATE_REASONS.contains(&r.as_str()));
    match status {
        StatusCode::UNAUTHORIZED => Failure::Fatal(ConnectorError::Unauthorized {
            platform: PLATFORM,
            detail: msg,
        }),
        StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS if rate_limited => {
            match retry_after(headers) {
                Some(wait) => Failure::RetryAfter {
                    wait,
                    error: http(detail),
                },
                // Google: "truncated exponential backoff" — the executor's.
                None => Failure::Transient(http(detail)),
            }
        }
        StatusCode::FORBIDDEN => Failure::Fatal(ConnectorError::PermissionDenied {
            platform: PLATFORM,
            detail,
            accepted_permissions: None,
        }),
        StatusCode::NOT_FOUND => Failure::Fatal(ConnectorError::NotFound {
            platform: PLATFORM,
            what: msg,
        }),
        StatusCode::REQUEST_TIMEOUT => Failure::Transient(http(detail)),
        s if s.is_server_error() => Failure::Transient(http(detail)),
        _ => Failure::Fatal(http(detail)),
    }
}

/// One executor bound to one access token.
struct Session {
    http: Arc<HttpClient<DrivePolicy>>,
    token: cmcp_domain::Token,
    refresh_at: Instant,
}

/// A Drive API at one base URL, authenticated through a [`TokenSource`].
pub struct DriveClient {
    base: Url,
    tokens: TokenSource,
    cfg: HttpConfig,
    session: Mutex<Option<Session>>,
    /// The fleet's budget and this credential's key in it, handed to every
    /// session's executor.
    shared: Option<(Arc<dyn SharedBudget>, String)>,
}

impl std::fmt::Debug for DriveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveClient")
            .field("base", &self.base.as_str())
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl DriveClient {
    pub fn new(base_url: &str, tokens: TokenSource, cfg: HttpConfig) -> Result<DriveClient> {
        cfg.validate()?;
        Ok(DriveClient {
            base: parse_base(base_url)?,
            tokens,
            cfg,
            session: Mutex::new(None),
            shared: None,
        })
    }

    /// Spends the fleet's budget under `key` instead of each session's own.
    pub fn with_shared_budget(mut self, budget: Arc<dyn SharedBudget>, key: String) -> Self {
        self.shared = Some((budget, key));
        self
    }

    pub fn shared_budget_key(&self) -> Option<&str> {
        self.shared.as_ref().map(|(_, k)| k.as_str())
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn tokens(&self) -> &TokenSource {
        &self.tokens
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// Base URL plus path segments, each escaped as one segment (an id can
    /// never smuggle in a `/` or `?`).
    pub fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// The current executor, fetching a new access token when there is
    /// none or it ends within [`REFRESH_MARGIN`].
    async fn session(&self) -> Result<(Arc<HttpClient<DrivePolicy>>, cmcp_domain::Token)> {
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref()
            && Instant::now() < s.refresh_at
        {
            return Ok((s.http.clone(), s.token.clone()));
        }
        let token = self.tokens.fetch().await?;
        let mut headers = HeaderMap::new();
        let mut bearer = HeaderValue::from_str(&format!("Bearer {}", token.token.expose().trim()))
            .map_err(|_| ConnectorError::Unauthorized {
                platform: PLATFORM,
                detail: "the token endpoint returned an access token unfit for a header".into(),
            })?;
        bearer.set_sensitive(true);
        headers.insert(AUTHORIZATION, bearer);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let mut http = HttpClient::new(DrivePolicy, self.cfg.clone(), headers)?;
        if let Some((budget, key)) = &self.shared {
            http = http.with_shared_budget(budget.clone(), key.clone());
        }
        let http = Arc::new(http);
        let refresh_at = Instant::now() + token.lifetime.saturating_sub(REFRESH_MARGIN);
        *session = Some(Session {
            http: http.clone(),
            token: token.token.clone(),
            refresh_at,
        });
        Ok((http, token.token))
    }

    /// The access token of the current session, for tokeninfo.
    pub async fn access_token(&self) -> Result<cmcp_domain::Token> {
        Ok(self.session().await?.1)
    }

    /// GETs `url` and decodes it. A 401 drops the session and tries once
    /// more with a fresh access token (it may have been revoked early).
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
    ) -> std::result::Result<Fetched<T>, Exhausted> {
        let exhausted = |error| Exhausted { error, attempts: 0 };
        let (http, _) = self.session().await.map_err(exhausted)?;
        match http.get_json::<T>(url, counters).await {
            Err(Exhausted {
                error: ConnectorError::Unauthorized { .. },
                ..
            }) => {
                *self.session.lock().await = None;
                let (http, _) = self.session().await.map_err(exhausted)?;
                http.get_json::<T>(url, counters).await
            }
            other => other,
        }
    }

    /// POSTs a JSON body once through the session's executor (budget and
    /// concurrency limit included). A 401 drops the session and sends once
    /// more with a fresh access token, as [`DriveClient::get_json`] does.
    pub async fn post_json(&self, url: &Url, body: &[u8], counters: &Counters) -> Result<Vec<u8>> {
        let (http, _) = self.session().await?;
        match http.post_json(url, body, counters).await {
            Err(ConnectorError::Unauthorized { .. }) => {
                *self.session.lock().await = None;
                let (http, _) = self.session().await?;
                http.post_json(url, body, counters).await
            }
            other => other,
        }
    }
}

/// Accepts `https://www.googleapis.com[/]` or a simulator's
/// `http://127.0.0.1:PORT[/prefix]`.
fn parse_base(base_url: &str) -> Result<Url> {
    let invalid = |why: &str| ConnectorError::InvalidConfig {
        detail: format!("Drive base URL {base_url:?} {why}"),
    };
    let mut url =
        Url::parse(base_url.trim()).map_err(|e| invalid(&format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must be http or https"));
    }
    if url.cannot_be_a_base() || url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(invalid("must not have a query, fragment or credentials"));
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

    fn body(code: u16, reason: &str) -> Vec<u8> {
        serde_json::json!({"error": {"code": code, "message": "Some message",
            "errors": [{"domain": "usageLimits", "reason": reason, "message": "Some message"}]}})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_403_user_rate_limit_is_a_rate_limit_not_a_permission_error() {
        for reason in RATE_REASONS {
            assert!(
                matches!(
                    classify(StatusCode::FORBIDDEN, &HeaderMap::new(), &body(403, reason)),
                    Failure::Transient(ConnectorError::Http { status: 403, .. })
                ),
                "{reason}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, &h, b""),
            Failure::RetryAfter { wait, .. } if wait == Duration::from_secs(2)
        ));
    }

    #[test]
    fn other_403s_are_permission_errors() {
        match classify(
            StatusCode::FORBIDDEN,
            &HeaderMap::new(),
            &body(403, "insufficientFilePermissions"),
        ) {
            Failure::Fatal(ConnectorError::PermissionDenied { detail, .. }) => {
                assert!(detail.contains("insufficientFilePermissions"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_statuses() {
        let none = HeaderMap::new();
        assert!(matches!(
            classify(StatusCode::NOT_FOUND, &none, &body(404, "notFound")),
            Failure::Fatal(ConnectorError::NotFound { .. })
        ));
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, &none, b"{}"),
            Failure::Fatal(ConnectorError::Unauthorized { .. })
        ));
        assert!(matches!(
            classify(StatusCode::SERVICE_UNAVAILABLE, &none, b"<html>"),
            Failure::Transient(_)
        ));
        assert!(matches!(
            classify(StatusCode::BAD_REQUEST, &none, &body(400, "invalid")),
            Failure::Fatal(ConnectorError::Http { status: 400, .. })
        ));
    }

    #[test]
    fn base_urls_join_and_escape() {
        let base = parse_base("https://www.googleapis.com").unwrap();
        assert_eq!(base.as_str(), "https://www.googleapis.com/");
        assert!(parse_base("ftp://x").is_err());
        assert!(parse_base("https://x/?a=1").is_err());
    }
}
