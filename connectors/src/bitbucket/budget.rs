//! Bitbucket Cloud's rate budget, as the shared executor spends it.
//!
//! Bitbucket Cloud allows 1,000 repository-data requests per credential in
//! a *rolling* hour (more for scaled workspaces), and for user API tokens it
//! reports nothing: no remaining count, no reset, no `Retry-After`, only a
//! bare 429 once the allowance is gone. Access tokens get `X-RateLimit-Limit`
//! (the allowance, scaled) and `X-RateLimit-NearLimit` (less than a fifth
//! left), still without a remaining count or a reset.
//!
//! So the connector synthesises the readings the fleet's shared budget
//! understands. The window is cut into [`SLICES`] epoch-aligned slices
//! (every worker computes the same boundaries, so they all name the same
//! window), and each slice may spend `limit / (SLICES + 2)` requests. Why
//! that divisor: the platform's window is rolling, so any hour of it
//! overlaps `SLICES + 1` slices, and the requests of one slice can arrive up
//! to a rollover margin plus a request's latency after it ends (one more
//! slice at most, while a slice is longer than that). So no rolling window
//! ever sees more than the limit, at the cost of a sixth of the allowance
//! (830 of 1,000 an hour by default).
//!
//! While the platform says the credential is near its limit (someone else
//! spends it too), a slice allows only a fifth of its share. A 429 pauses
//! every worker of the credential (through the shared budget) for
//! `secondary_limit_min_wait`, doubling on repeats.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use cmcp_domain::Platform;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::common::atlassian;
use crate::common::budget::BudgetReading;
use crate::common::config::HttpConfig;
use crate::common::http::{ApiPolicy, Failure};
use crate::error::{ConnectorError, Result};

/// Slices per window.
pub const SLICES: u32 = 10;

/// The budget key of the credential fingerprinted as `credential`. Every
/// request the connector sends draws on it: the workspace and project reads
/// are few, and counting them too keeps the repository allowance safe.
pub fn budget_key(credential: &str) -> String {
    format!("{}:{credential}:repository", Platform::Bitbucket)
}

/// Requests one slice may send when the window allows `limit`.
pub fn slice_quota(limit: u32) -> u32 {
    limit / (SLICES + 2)
}

/// The reading of Bitbucket answers: Atlassian's error verdicts, a bare 429
/// as a rate limit, and the budget synthesised from the configured (or
/// reported) allowance.
#[derive(Debug, Clone, Copy)]
pub struct BitbucketPolicy {
    limit: u32,
    slice_ms: i64,
}

impl BitbucketPolicy {
    /// Refuses an allowance so small that a slice could never send a
    /// request past the reserve.
    pub fn new(cfg: &HttpConfig) -> Result<Self> {
        if slice_quota(cfg.bitbucket_hourly_limit) <= cfg.budget_reserve {
            return Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "http.bitbucket_hourly_limit ({}) must be at least {} with http.budget_reserve {} \
                     (the window is spent in {SLICES} slices with a safety share)",
                    cfg.bitbucket_hourly_limit,
                    (cfg.budget_reserve + 1) * (SLICES + 2),
                    cfg.budget_reserve
                ),
            });
        }
        let slice = cfg.bitbucket_limit_window / SLICES;
        Ok(BitbucketPolicy {
            limit: cfg.bitbucket_hourly_limit,
            slice_ms: i64::try_from(slice.max(Duration::from_millis(1)).as_millis())
                .unwrap_or(i64::MAX),
        })
    }

    /// The window's allowance: the platform's `X-RateLimit-Limit` if it
    /// sent one, the configured one otherwise.
    fn limit(&self, headers: &HeaderMap) -> u32 {
        headers
            .get("x-ratelimit-limit")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|l| *l > 0)
            .unwrap_or(self.limit)
    }

    fn near_limit(headers: &HeaderMap) -> bool {
        headers
            .get("x-ratelimit-nearlimit")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"))
    }

    /// What an answer received at `now` says: the slice it fell in ends at
    /// `reset`, and the slice's share less this request is left (a fifth of
    /// the share near the limit). The shared budget only ever lowers a
    /// window with it, so it never undoes what other requests spent.
    pub fn reading_at(&self, headers: &HeaderMap, now: DateTime<Utc>) -> BudgetReading {
        let quota = slice_quota(self.limit(headers));
        let remaining = if Self::near_limit(headers) {
            (quota / 5).min(quota.saturating_sub(1))
        } else {
            quota.saturating_sub(1)
        };
        let now_ms = now.timestamp_millis();
        let end_ms = (now_ms.div_euclid(self.slice_ms) + 1).saturating_mul(self.slice_ms);
        let reset = Utc
            .timestamp_millis_opt(end_ms)
            .single()
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        BudgetReading { remaining, reset }
    }
}

impl ApiPolicy for BitbucketPolicy {
    fn platform(&self) -> Platform {
        Platform::Bitbucket
    }

    fn budget(&self, headers: &HeaderMap) -> Option<BudgetReading> {
        Some(self.reading_at(headers, Utc::now()))
    }

    /// A slice's share, so a new slice can start full before its first
    /// answer.
    fn budget_limit(&self, headers: &HeaderMap) -> Option<u32> {
        Some(slice_quota(self.limit(headers)))
    }

    /// A bare 429 is a rate limit (a pause for the whole fleet), not an
    /// ordinary transient failure.
    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Failure {
        match atlassian::classify(Platform::Bitbucket, status, headers, body) {
            Failure::Transient(e) if status == StatusCode::TOO_MANY_REQUESTS => {
                Failure::Secondary(e)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn policy(limit: u32, window_secs: u64) -> BitbucketPolicy {
        BitbucketPolicy::new(&HttpConfig {
            bitbucket_hourly_limit: limit,
            bitbucket_limit_window: Duration::from_secs(window_secs),
            ..HttpConfig::default()
        })
        .unwrap()
    }

    fn at_ms(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).unwrap()
    }

    #[test]
    fn without_headers_each_epoch_aligned_slice_gets_its_share_of_the_configured_limit() {
        let p = policy(1000, 3600);
        let h = HeaderMap::new();
        // 6-minute slices; 1000 / 12 = 83 a slice, this request included.
        let r = p.reading_at(&h, at_ms(1_800_000_000_000 + 1));
        assert_eq!(r.remaining, 82);
        assert_eq!(r.reset, at_ms(1_800_000_360_000));
        // Two workers' answers in one slice name the same window.
        let later = p.reading_at(&h, at_ms(1_800_000_359_999));
        assert_eq!(later.reset, r.reset);
        // The next slice is a new window.
        let next = p.reading_at(&h, at_ms(1_800_000_360_000));
        assert_eq!(next.reset, at_ms(1_800_000_720_000));
        assert_eq!(p.budget_limit(&h), Some(83));
        // Any rolling hour overlaps at most SLICES + 2 slices' requests.
        assert!(slice_quota(1000) * (SLICES + 2) <= 1000);
    }

    #[test]
    fn a_reported_limit_wins_and_near_the_limit_a_slice_gets_a_fifth() {
        let p = policy(1000, 3600);
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-limit", HeaderValue::from_static("6000"));
        h.insert("x-ratelimit-resource", HeaderValue::from_static("api"));
        assert_eq!(p.budget_limit(&h), Some(500));
        assert_eq!(p.reading_at(&h, at_ms(0)).remaining, 499);
        h.insert("x-ratelimit-nearlimit", HeaderValue::from_static("true"));
        assert_eq!(p.reading_at(&h, at_ms(0)).remaining, 100);
        h.insert("x-ratelimit-nearlimit", HeaderValue::from_static("false"));
        assert_eq!(p.reading_at(&h, at_ms(0)).remaining, 499);
        h.insert("x-ratelimit-limit", HeaderValue::from_static("junk"));
        assert_eq!(p.budget_limit(&h), Some(83));
    }

    #[test]
    fn a_bare_429_is_a_rate_limit_and_other_verdicts_are_atlassians() {
        let p = policy(1000, 3600);
        let body = br#"{"type":"error","error":{"message":"Rate limit for this resource has been exceeded"}}"#;
        let f = p.classify(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), body);
        assert!(matches!(f, Failure::Secondary(_)), "{f:?}");
        assert!(f.is_rate_limit());
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert!(matches!(
            p.classify(StatusCode::TOO_MANY_REQUESTS, &h, body),
            Failure::RetryAfter { wait, .. } if wait == Duration::from_secs(7)
        ));
        assert!(matches!(
            p.classify(StatusCode::BAD_GATEWAY, &HeaderMap::new(), b""),
            Failure::Transient(_)
        ));
        assert!(matches!(
            p.classify(StatusCode::NOT_FOUND, &HeaderMap::new(), b""),
            Failure::Fatal(_)
        ));
    }

    #[test]
    fn an_allowance_too_small_for_a_slice_is_refused() {
        let cfg = HttpConfig {
            bitbucket_hourly_limit: 23,
            ..HttpConfig::default()
        };
        assert!(matches!(
            BitbucketPolicy::new(&cfg),
            Err(ConnectorError::InvalidConfig { .. })
        ));
        assert!(
            BitbucketPolicy::new(&HttpConfig {
                bitbucket_hourly_limit: 24,
                ..cfg
            })
            .is_ok()
        );
    }

    #[test]
    fn keys_name_the_credential_fingerprint_and_the_resource() {
        assert_eq!(budget_key("abc123"), "bitbucket:abc123:repository");
    }
}
