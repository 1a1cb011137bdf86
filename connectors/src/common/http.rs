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

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use reqwest::header::{ETAG, HeaderMap, HeaderValue, IF_NONE_MATCH};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use url::Url;

use crate::common::budget::{Admission, RateBudget};
use crate::common::config::HttpConfig;
use crate::common::metrics as upstream;
use crate::common::policy::bump;
pub use crate::common::policy::{
    ApiPolicy, Conditional, Counters, Exhausted, Failure, Fetched, HttpFigures,
};
use crate::common::shared::{Observation, SharedBudget};
use crate::error::{ConnectorError, Result};

/// Slack added to a reset time before sending again, so a clock slightly
/// behind the platform's does not spend a request on an empty budget.
const RESET_MARGIN: Duration = Duration::from_millis(500);

/// An answer read whole, before it is decoded.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    url: Url,
    body: Vec<u8>,
}

/// A reqwest client plus the policy, the config and the credential's budget.
pub struct HttpClient<P> {
    policy: P,
    client: reqwest::Client,
    cfg: HttpConfig,
    budget: RateBudget,
    /// The fleet's budget and this credential's key in it; `None` means the
    /// in-process `budget` decides alone.
    shared: Option<(Arc<dyn SharedBudget>, String)>,
    /// At most `cfg.max_concurrency` requests in flight.
    permits: Semaphore,
}

impl<P> std::fmt::Debug for HttpClient<P> {
    // Deliberately omits the reqwest client: its default headers hold the
    // credential (marked sensitive, but there is no reason to print it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("cfg", &self.cfg)
            .field("budget", &self.budget.current())
            .field("shared_budget_key", &self.shared.as_ref().map(|(_, k)| k))
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
            permits: Semaphore::new(cfg.max_concurrency),
            cfg,
            budget: RateBudget::new(),
            shared: None,
        })
    }

    /// Spends `budget` under `key` (a credential fingerprint plus resource,
    /// never the credential) instead of the in-process budget alone, so
    /// every process sending with the credential shares one budget.
    pub fn with_shared_budget(mut self, budget: Arc<dyn SharedBudget>, key: String) -> Self {
        self.shared = Some((budget, key));
        self
    }

    /// The shared budget key, if one is set.
    pub fn shared_budget_key(&self) -> Option<&str> {
        self.shared.as_ref().map(|(_, k)| k.as_str())
    }

    /// The budget that admits requests and the key to spend.
    fn ledger(&self) -> (&dyn SharedBudget, &str) {
        match &self.shared {
            Some((b, k)) => (b.as_ref(), k.as_str()),
            None => (&self.budget, ""),
        }
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
        match self.get_json_inner(url, counters, None).await? {
            Conditional::Modified { fetched, .. } => Ok(fetched),
            // Only sent when asked for with an ETag, which this call never does.
            Conditional::NotModified { .. } => Err(Exhausted {
                error: ConnectorError::Http {
                    platform: self.policy.platform(),
                    status: 304,
                    detail: format!("{url}: Not Modified without a conditional request"),
                },
                attempts: 1,
            }),
        }
    }

    /// GETs `url` with `If-None-Match: etag` when an ETag is given; a 304 is
    /// answered as [`Conditional::NotModified`] (and counted), anything else
    /// like [`HttpClient::get_json`], with its ETag kept.
    pub async fn get_json_conditional<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
        etag: Option<&str>,
    ) -> std::result::Result<Conditional<T>, Exhausted> {
        self.get_json_inner(url, counters, etag).await
    }

    async fn get_json_inner<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
        etag: Option<&str>,
    ) -> std::result::Result<Conditional<T>, Exhausted> {
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
            self.attempt::<T>(url, counters, etag)
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

    /// One attempt: budget admission, a concurrency permit, send, read the
    /// whole body; then the permit is given back, the body decoded and the
    /// budget settled with what the answer said, whatever happened.
    ///
    /// Why admission comes before the permit and decoding after it: a
    /// permit is one of the `max_concurrency` requests in flight, and a
    /// fleet budget is a store round trip (which on SQLite may queue behind
    /// a page being written). Held across it, or across decoding a large
    /// page, a permit sits idle while no request is on the wire; outside
    /// them, a caller that keeps more attempts going than there are permits
    /// (the GitHub listing does) has a request ready whenever one ends.
    async fn attempt<T: DeserializeOwned>(
        &self,
        url: &Url,
        counters: &Counters,
        etag: Option<&str>,
    ) -> std::result::Result<Conditional<T>, Failure> {
        self.admit(counters).await?;
        // The semaphore is never closed, so acquiring cannot fail.
        let permit = self.permits.acquire().await.ok();
        bump(&counters.requests);
        let (answer, headers) = self.exchange(url, etag).await;
        // The request is over: decoding and settling need not hold a slot.
        drop(permit);
        let result = answer.and_then(|a| self.decode::<T>(a, counters, etag));
        let observation = Observation {
            reading: headers.as_ref().and_then(|h| self.policy.budget(h)),
            limit: headers.as_ref().and_then(|h| self.policy.budget_limit(h)),
            pause_until: result.as_ref().err().and_then(|f| self.pause_for(f)),
            // GitHub: "Making a conditional request does not count against
            // your primary rate limit if a 304 response is returned."
            free: matches!(result, Ok(Conditional::NotModified { .. })),
        };
        // With a fleet budget the local one only mirrors the readings (for
        // diagnostics); without one, the ledger below is the local budget.
        if self.shared.is_some()
            && let Some(reading) = observation.reading
        {
            self.budget.observe(reading);
        }
        let (ledger, key) = self.ledger();
        ledger.settle(key, observation).await;
        result.map_err(|f| self.cap_wait(f))
    }

    /// Sends and reads one answer whole; the headers are returned whenever
    /// an answer arrived, for the budget.
    async fn exchange(
        &self,
        url: &Url,
        etag: Option<&str>,
    ) -> (std::result::Result<Answer, Failure>, Option<HeaderMap>) {
        let platform = self.policy.platform();
        let transport = |e: reqwest::Error| {
            Failure::Transient(ConnectorError::Transport {
                platform,
                detail: error_chain(&e),
            })
        };
        let mut request = self.client.get(url.clone());
        if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
            request = request.header(IF_NONE_MATCH, tag);
        }
        let started = Instant::now();
        let resp = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                upstream::upstream_request(platform, None, started.elapsed());
                return (Err(transport(e)), None);
            }
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let final_url = resp.url().clone();
        let limit = self.config().max_response_bytes;
        let read = read_bounded(resp, limit).await;
        upstream::upstream_request(platform, Some(status.as_u16()), started.elapsed());
        let body = match read {
            Ok(Some(b)) => b,
            Ok(None) => {
                let error = ConnectorError::Decode {
                    platform,
                    detail: format!("{final_url}: response body larger than {limit} bytes"),
                };
                return (Err(Failure::Fatal(error)), Some(headers));
            }
            Err(e) => return (Err(transport(e)), Some(headers)),
        };
        let answer = Answer {
            status,
            headers: headers.clone(),
            url: final_url,
            body,
        };
        (Ok(answer), Some(headers))
    }

    /// What an answer means: a decoded body, a 304 to a conditional
    /// request, or the platform's verdict on anything else.
    fn decode<T: DeserializeOwned>(
        &self,
        answer: Answer,
        counters: &Counters,
        etag: Option<&str>,
    ) -> std::result::Result<Conditional<T>, Failure> {
        let platform = self.policy.platform();
        let Answer {
            status,
            headers,
            url: final_url,
            body,
        } = answer;
        if status.is_success() {
            return match serde_json::from_slice::<T>(&body) {
                Ok(value) => Ok(Conditional::Modified {
                    etag: headers
                        .get(ETAG)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    fetched: Fetched {
                        value,
                        headers,
                        url: final_url,
                    },
                }),
                Err(e) => Err(Failure::Transient(ConnectorError::Decode {
                    platform,
                    detail: format!("{final_url}: {e}"),
                })),
            };
        }
        if status == StatusCode::NOT_MODIFIED {
            bump(&counters.not_modified);
            if etag.is_some() {
                return Ok(Conditional::NotModified {
                    headers,
                    url: final_url,
                });
            }
        }
        Err(self.policy.classify(status, &headers, &body))
    }

    /// POSTs a JSON `body` once and returns the answer's body on 2xx. It
    /// takes a concurrency permit and a unit of the budget like a GET and
    /// settles it from the answer, so rare writes of a read-only token
    /// (Drive's `changes.watch` and `channels.stop`) spend the fleet's
    /// budget too. It is not retried: a POST that reached the platform may
    /// have taken effect, so the caller decides whether to send it again.
    pub async fn post_json(&self, url: &Url, body: &[u8], counters: &Counters) -> Result<Vec<u8>> {
        let platform = self.policy.platform();
        self.admit(counters)
            .await
            .map_err(|f| self.final_error(f))?;
        let permit = self.permits.acquire().await.ok();
        bump(&counters.requests);
        let started = Instant::now();
        let sent = self
            .client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send()
            .await;
        let transport = |e: reqwest::Error| {
            Failure::Transient(ConnectorError::Transport {
                platform,
                detail: format!("{}: {}", url.path(), error_chain(&e)),
            })
        };
        let (result, headers) = match sent {
            Err(e) => {
                upstream::upstream_request(platform, None, started.elapsed());
                (Err(transport(e)), None)
            }
            Ok(resp) => {
                let status = resp.status();
                let headers = resp.headers().clone();
                let read = resp.bytes().await;
                upstream::upstream_request(platform, Some(status.as_u16()), started.elapsed());
                let result = match read {
                    Err(e) => Err(transport(e)),
                    Ok(bytes) if status.is_success() => Ok(bytes.to_vec()),
                    Ok(bytes) => Err(self.policy.classify(status, &headers, &bytes)),
                };
                (result, Some(headers))
            }
        };
        drop(permit);
        let observation = Observation {
            reading: headers.as_ref().and_then(|h| self.policy.budget(h)),
            limit: headers.as_ref().and_then(|h| self.policy.budget_limit(h)),
            pause_until: result.as_ref().err().and_then(|f| self.pause_for(f)),
            free: false,
        };
        let (ledger, key) = self.ledger();
        ledger.settle(key, observation).await;
        result.map_err(|f| self.final_error(f))
    }

    /// How long every request of the credential should hold back after
    /// this failure (shared with the fleet through the budget).
    fn pause_for(&self, f: &Failure) -> Option<DateTime<Utc>> {
        match f {
            Failure::RetryAfter { wait, .. } => Some(Utc::now() + chrono_duration(*wait)),
            Failure::Secondary(_) => {
                Some(Utc::now() + chrono_duration(self.cfg.secondary_limit_min_wait))
            }
            Failure::UntilReset { reset, .. } => Some(*reset),
            _ => None,
        }
    }

    /// Waits before sending while the budget is at the reserve (or paused),
    /// or fails with `RateLimited` when that is further away than allowed.
    /// A budget that cannot be consulted is a transient failure: nothing is
    /// sent without a reservation.
    async fn admit(&self, counters: &Counters) -> std::result::Result<(), Failure> {
        let platform = self.policy.platform();
        let (ledger, key) = self.ledger();
        loop {
            let admission = ledger
                .reserve(key, self.cfg.budget_reserve)
                .await
                .map_err(|e| {
                    Failure::Transient(ConnectorError::Transport {
                        platform,
                        detail: e.to_string(),
                    })
                })?;
            match admission {
                Admission::Go => return Ok(()),
                Admission::WaitUntil(reset) => {
                    let wait = until(reset) + RESET_MARGIN;
                    if wait > self.cfg.max_rate_limit_wait {
                        return Err(Failure::Fatal(ConnectorError::RateLimited {
                            platform,
                            retry_at: reset,
                        }));
                    }
                    bump(&counters.rate_limit_waits);
                    tracing::info!(
                        %platform,
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

/// The body, or `None` once it passes `limit` bytes (nothing more is
/// read, the connection is dropped). A `Content-Length` above the limit is
/// refused before a byte is read.
async fn read_bounded(
    mut resp: reqwest::Response,
    limit: usize,
) -> std::result::Result<Option<Vec<u8>>, reqwest::Error> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmcp_domain::Platform;
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
