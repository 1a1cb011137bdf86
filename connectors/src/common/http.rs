//! Request execution shared by every platform: budget admission, retries
//! with jittered exponential backoff (backon), rate-limit waits, and reading
//! and decoding the body *inside* the retried operation.
//!
//! Why decode inside the retry: a connection cut half-way through the body,
//! or a proxy's HTML error page with a 200, is as transient as a 502. If the
//! body were read after the retry loop, those failures would surface as
//! permanent errors and a listing would be marked partial for nothing.
//!
//! What a non-2xx answer *means* is platform knowledge (GitHub's 403 can be a
//! rate limit or a permission gap), so each platform supplies an
//! [`ApiPolicy`]; this module only carries out the verdict.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use chrono::{DateTime, Utc};
use cmcp_domain::Platform;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use url::Url;

use crate::common::budget::{Admission, BudgetReading, RateBudget};
use crate::common::config::HttpConfig;
use crate::error::{ConnectorError, Result};

/// Slack added to a reset time before sending again, so a clock slightly
/// behind the platform's does not spend a request on an empty budget.
const RESET_MARGIN: Duration = Duration::from_millis(500);

/// Request figures of one run, as the report shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpFigures {
    /// Listing pages read successfully.
    pub pages: u64,
    /// HTTP requests sent (every attempt counts).
    pub requests: u64,
    /// 304 answers. Always 0 for now: listings send no conditional requests,
    /// because a 304 page would leave no records to hand to the sink.
    pub not_modified: u64,
    /// Attempts after the first, for any reason.
    pub retries: u64,
    /// Waits caused by rate limits: budget at the reserve before sending,
    /// or a 403/429 rate-limit answer.
    pub rate_limit_waits: u64,
}

/// Thread-safe counters behind [`HttpFigures`], one set per run.
#[derive(Debug, Default)]
pub struct Counters {
    pages: AtomicU64,
    requests: AtomicU64,
    not_modified: AtomicU64,
    retries: AtomicU64,
    rate_limit_waits: AtomicU64,
}

impl Counters {
    pub fn page(&self) {
        self.pages.fetch_add(1, Ordering::Relaxed);
    }

    pub fn figures(&self) -> HttpFigures {
        HttpFigures {
            pages: self.pages.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            not_modified: self.not_modified.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            rate_limit_waits: self.rate_limit_waits.load(Ordering::Relaxed),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The verdict on one failed attempt.
#[derive(Debug)]
pub enum Failure {
    /// Permanent: give up now (401, permission 403, 404, …).
    Fatal(ConnectorError),
    /// Transient: retry after the exponential backoff (5xx, connection
    /// errors, cut or undecodable bodies, 429 without any hint).
    Transient(ConnectorError),
    /// Rate limited with `retry-after`: wait exactly that long.
    RetryAfter {
        wait: Duration,
        error: ConnectorError,
    },
    /// Primary budget spent: wait until the reset.
    UntilReset {
        reset: DateTime<Utc>,
        error: ConnectorError,
    },
    /// Secondary limit without a hint: wait at least the configured minimum,
    /// doubling on each repeat.
    Secondary(ConnectorError),
}

impl Failure {
    fn is_rate_limit(&self) -> bool {
        matches!(
            self,
            Failure::RetryAfter { .. } | Failure::UntilReset { .. } | Failure::Secondary(_)
        )
    }
}

/// Platform knowledge the executor needs.
pub trait ApiPolicy: Send + Sync {
    fn platform(&self) -> Platform;
    /// The budget a response reports, if the platform sends one.
    fn budget(&self, headers: &HeaderMap) -> Option<BudgetReading>;
    /// What a non-2xx answer means.
    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure;
}

/// A decoded answer with the headers and final URL it came with.
#[derive(Debug)]
pub struct Fetched<T> {
    pub value: T,
    pub headers: HeaderMap,
    /// The URL that answered (after redirects): relative `Link` targets
    /// resolve against it.
    pub url: Url,
}

/// The final error of a request and how many attempts it took.
#[derive(Debug)]
pub struct Exhausted {
    pub error: ConnectorError,
    pub attempts: u32,
}

/// A reqwest client plus the policy, the config and the credential's budget.
pub struct HttpClient<P> {
    policy: P,
    client: reqwest::Client,
    cfg: HttpConfig,
    budget: RateBudget,
}

impl<P> std::fmt::Debug for HttpClient<P> {
    // Deliberately omits the reqwest client: its default headers hold the
    // credential (marked sensitive, but there is no reason to print it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("cfg", &self.cfg)
            .field("budget", &self.budget.current())
            .finish_non_exhaustive()
    }
}

impl<P: ApiPolicy> HttpClient<P> {
    /// `default_headers` go on every request: the credential (marked
    /// sensitive by the caller), content negotiation, API version.
    pub fn new(policy: P, cfg: HttpConfig, default_headers: HeaderMap) -> Result<Self> {
        cfg.validate()?;
        // reqwest is built without a crypto provider; installing ring here
        // means no caller can forget it (a second install is a no-op error).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .default_headers(default_headers)
            .user_agent(cfg.user_agent.clone())
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| ConnectorError::InvalidConfig {
                detail: format!("cannot build the HTTP client: {}", error_chain(&e)),
            })?;
        Ok(HttpClient {
            policy,
            client,
            cfg,
            budget: RateBudget::new(),
        })
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    pub fn budget(&self) -> &RateBudget {
        &self.budget
    }

    /// GETs `url` and decodes its JSON body, retrying what is transient.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
    ) -> std::result::Result<Fetched<T>, Exhausted> {
        let platform = self.policy.platform();
        let attempts = AtomicU32::new(0);
        let mut secondary_waits = 0u32;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.cfg.backoff_min)
            .with_max_delay(self.cfg.backoff_max)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.cfg.max_attempts.saturating_sub(1) as usize);
        let op = || {
            attempts.fetch_add(1, Ordering::Relaxed);
            self.attempt::<T>(url, counters)
        };
        let result = op
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|f: &Failure| !matches!(f, Failure::Fatal(_)))
            .adjust(|f, next| {
                // `next` is None once the attempts are used up: stop.
                let next = next?;
                Some(match f {
                    Failure::Fatal(_) => return None,
                    Failure::Transient(_) => next,
                    Failure::RetryAfter { wait, .. } => *wait,
                    Failure::UntilReset { reset, .. } => until(*reset) + RESET_MARGIN,
                    Failure::Secondary(_) => {
                        let factor = 2u32.saturating_pow(secondary_waits.min(16));
                        secondary_waits += 1;
                        self.cfg
                            .secondary_limit_min_wait
                            .saturating_mul(factor)
                            .max(next)
                            .min(self.cfg.max_rate_limit_wait)
                    }
                })
            })
            .notify(|f, wait| {
                bump(&counters.retries);
                if f.is_rate_limit() {
                    bump(&counters.rate_limit_waits);
                }
                tracing::debug!(
                    %platform,
                    url = %url,
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    error = %failure_error(f),
                    "retrying request"
                );
            })
            .await;
        result.map_err(|f| Exhausted {
            error: self.final_error(f),
            attempts: attempts.load(Ordering::Relaxed),
        })
    }

    /// One attempt: budget admission, send, read the whole body, decode.
    async fn attempt<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
    ) -> std::result::Result<Fetched<T>, Failure> {
        let platform = self.policy.platform();
        self.admit(counters).await.map_err(Failure::Fatal)?;
        bump(&counters.requests);
        let transport = |e: reqwest::Error| {
            Failure::Transient(ConnectorError::Transport {
                platform,
                detail: error_chain(&e),
            })
        };
        let resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let final_url = resp.url().clone();
        if let Some(reading) = self.policy.budget(&headers) {
            self.budget.observe(reading);
        }
        let body = resp.bytes().await.map_err(transport)?;
        if status.is_success() {
            return match serde_json::from_slice::<T>(&body) {
                Ok(value) => Ok(Fetched {
                    value,
                    headers,
                    url: final_url,
                }),
                Err(e) => Err(Failure::Transient(ConnectorError::Decode {
                    platform,
                    detail: format!("{final_url}: {e}"),
                })),
            };
        }
        if status == StatusCode::NOT_MODIFIED {
            bump(&counters.not_modified);
        }
        Err(self.cap_wait(self.policy.classify(status, &headers, &body)))
    }

    /// Waits before sending while the budget is at the reserve, or fails
    /// with `RateLimited` when the reset is further away than allowed.
    async fn admit(&self, counters: &Counters) -> Result<()> {
        loop {
            match self.budget.admit(self.cfg.budget_reserve, Utc::now()) {
                Admission::Go => return Ok(()),
                Admission::WaitUntil(reset) => {
                    let wait = until(reset) + RESET_MARGIN;
                    if wait > self.cfg.max_rate_limit_wait {
                        return Err(ConnectorError::RateLimited {
                            platform: self.policy.platform(),
                            retry_at: reset,
                        });
                    }
                    bump(&counters.rate_limit_waits);
                    tracing::info!(
                        platform = %self.policy.platform(),
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "rate budget at reserve, waiting for reset"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// A rate-limit wait longer than allowed is not waited out: it becomes a
    /// fatal `RateLimited` so the job is rescheduled instead.
    fn cap_wait(&self, f: Failure) -> Failure {
        let platform = self.policy.platform();
        let max = self.cfg.max_rate_limit_wait;
        match f {
            Failure::RetryAfter { wait, .. } if wait > max => {
                Failure::Fatal(ConnectorError::RateLimited {
                    platform,
                    retry_at: Utc::now() + chrono_duration(wait),
                })
            }
            Failure::UntilReset { reset, .. } if until(reset) > max => {
                Failure::Fatal(ConnectorError::RateLimited {
                    platform,
                    retry_at: reset,
                })
            }
            other => other,
        }
    }

    /// The error reported once retries are over. A request that ends on a
    /// rate limit reports `RateLimited` with the earliest sensible retry time.
    fn final_error(&self, f: Failure) -> ConnectorError {
        let platform = self.policy.platform();
        match f {
            Failure::Fatal(e) | Failure::Transient(e) => e,
            Failure::RetryAfter { wait, .. } => ConnectorError::RateLimited {
                platform,
                retry_at: Utc::now() + chrono_duration(wait),
            },
            Failure::UntilReset { reset, .. } => ConnectorError::RateLimited {
                platform,
                retry_at: reset,
            },
            Failure::Secondary(_) => ConnectorError::RateLimited {
                platform,
                retry_at: Utc::now() + chrono_duration(self.cfg.secondary_limit_min_wait),
            },
        }
    }
}

fn failure_error(f: &Failure) -> &ConnectorError {
    match f {
        Failure::Fatal(e) | Failure::Transient(e) | Failure::Secondary(e) => e,
        Failure::RetryAfter { error, .. } | Failure::UntilReset { error, .. } => error,
    }
}

/// Time from now until `t`, zero if `t` has passed.
fn until(t: DateTime<Utc>) -> Duration {
    (t - Utc::now()).to_std().unwrap_or_default()
}

fn chrono_duration(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

/// An error with its sources, `a: b: c` — reqwest's top-level message alone
/// ("error sending request") hides the cause.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// The `Retry-After` header: delay-seconds or an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?;
    Some(until(at.with_timezone(&Utc)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn error_chain_includes_sources_once() {
        let inner = std::io::Error::other("connection reset");
        let outer = ConnectorError::Transport {
            platform: Platform::Github,
            detail: "x".into(),
        };
        assert_eq!(error_chain(&inner), "connection reset");
        assert!(error_chain(&outer).contains("transport error"));
    }
}
