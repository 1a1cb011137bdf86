//! The vocabulary of request execution: what a platform policy tells the
//! executor (the verdict on a failed attempt, the budget in the headers),
//! what a request returns (a decoded answer, a conditional answer, or the
//! final error), and the per-run request figures.
//!
//! Kept apart from the executor in [`super::http`] (which re-exports all of
//! it) so each platform's policy reads against a short file.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cmcp_domain::Platform;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use url::Url;

use crate::common::budget::BudgetReading;
use crate::error::ConnectorError;

/// Request figures of one run, as the report shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpFigures {
    /// Listing pages read successfully.
    pub pages: u64,
    /// HTTP requests sent (every attempt counts).
    pub requests: u64,
    /// 304 answers to conditional requests: the cached page was reused and
    /// (on GitHub) no budget was spent.
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
    pub(crate) pages: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) not_modified: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) rate_limit_waits: AtomicU64,
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

pub(crate) fn bump(c: &AtomicU64) {
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
    pub(crate) fn is_rate_limit(&self) -> bool {
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
    /// The full size of the budget window (`x-ratelimit-limit`), if the
    /// platform reports it. Lets a shared budget assume a fresh window full.
    fn budget_limit(&self, _headers: &HeaderMap) -> Option<u32> {
        None
    }
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

/// The answer to a conditional GET.
#[derive(Debug)]
pub enum Conditional<T> {
    /// A full answer; `etag` is its validator, for the cache.
    Modified {
        fetched: Fetched<T>,
        etag: Option<String>,
    },
    /// `304 Not Modified`: the cached copy is still current.
    NotModified { headers: HeaderMap, url: Url },
}

/// The final error of a request and how many attempts it took.
#[derive(Debug)]
pub struct Exhausted {
    pub error: ConnectorError,
    pub attempts: u32,
}
