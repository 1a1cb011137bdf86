//! The rate budget as a fleet shares it: one credential's budget is one
//! key, and every process that sends with that credential reserves a unit
//! from the same place before each request.
//!
//! Why a trait here and the store-backed implementation in the worker: the
//! connectors must not depend on the registry, yet a fleet of workers (many
//! processes, one database) must never together spend more than the
//! platform grants. The default implementation is the in-process
//! [`RateBudget`], which is exact for one process; the worker hands the
//! connector a store-backed one keyed by a fingerprint of the credential, so
//! two connections sharing a token share its budget too.
//!
//! The protocol every implementation follows: [`SharedBudget::reserve`]
//! before sending (it spends one unit atomically, or says how long to wait),
//! and exactly one [`SharedBudget::settle`] after the attempt ends, whatever
//! happened, with what the answer said. An answer the platform does not
//! charge (GitHub's `304` to a conditional request) settles as `free`, which
//! gives the reserved unit back. Settling never raises the budget of
//! a window above what the reservations allow; a reading of a later window
//! starts that window.
//!
//! Concurrency limits are separate from budgets: `HttpConfig.max_concurrency`
//! caps requests in flight per credential in one process (GitHub's
//! secondary limits allow at most 100 concurrent requests and 900 points a
//! minute per REST endpoint, and ask for restraint; the default is 4, which
//! at GitHub's usual page latency of a few hundred milliseconds stays under
//! both). Bitbucket Cloud's budget is 1,000 repository requests per hour
//! per user (scaled for large workspaces): its policy only has to implement
//! [`ApiPolicy::budget`](super::http::ApiPolicy::budget) (and
//! `budget_limit`) and its connector pass a [`SharedBudget`] to its
//! `HttpClient` (`with_shared_budget`) for the same mechanism to cover it.

use chrono::{DateTime, Utc};

use super::budget::{Admission, BudgetReading, RateBudget};

/// What one finished attempt says about its budget key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    /// The primary budget, if the answer reported one.
    pub reading: Option<BudgetReading>,
    /// The window's full size (`x-ratelimit-limit`), if reported: a new
    /// window can then be assumed full before its first answer arrives.
    pub limit: Option<u32>,
    /// Hold every request of this key back until then (`retry-after`, a
    /// secondary limit).
    pub pause_until: Option<DateTime<Utc>>,
    /// The answer cost nothing upstream (a `304 Not Modified` to a
    /// conditional request): the unit reserved for it is given back, so
    /// the budget follows what the platform counted.
    pub free: bool,
}

/// The budget could not be consulted (its store is unreachable). The request
/// is not sent; the HTTP layer treats this as transient.
#[derive(Debug, thiserror::Error)]
#[error("rate budget unavailable: {0}")]
pub struct BudgetUnavailable(pub String);

/// A rate budget shared by everything that sends with one credential.
#[async_trait::async_trait]
pub trait SharedBudget: Send + Sync {
    /// Spends one unit of `key` for a request about to be sent, unless only
    /// `reserve` units (or fewer) are left or a pause is in force, in which
    /// case nothing is spent and the answer says until when to wait.
    async fn reserve(&self, key: &str, reserve: u32) -> Result<Admission, BudgetUnavailable>;

    /// Ends one reserved attempt (call it exactly once per `Go`, also when
    /// the request failed without an answer) and records what it said.
    /// Failures are logged by the implementation, never fatal: the next
    /// answer corrects the budget anyway.
    async fn settle(&self, key: &str, observation: Observation);
}

/// One process, one budget: the key is ignored because each HTTP client
/// owns its own [`RateBudget`].
#[async_trait::async_trait]
impl SharedBudget for RateBudget {
    async fn reserve(&self, _key: &str, reserve: u32) -> Result<Admission, BudgetUnavailable> {
        let now = Utc::now();
        if let Some(until) = self.paused_at(now) {
            return Ok(Admission::WaitUntil(until));
        }
        Ok(self.admit(reserve, now))
    }

    async fn settle(&self, _key: &str, observation: Observation) {
        // Refund before reading the answer: the reading is the platform's
        // figure, which never counted this request.
        if observation.free {
            self.refund(observation.reading.map(|r| r.reset));
        }
        if let Some(reading) = observation.reading {
            self.observe(reading);
        }
        if let Some(until) = observation.pause_until {
            self.pause(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[tokio::test]
    async fn a_pause_holds_requests_back_until_it_ends() {
        let b = RateBudget::new();
        let until = Utc::now() + TimeDelta::seconds(30);
        b.settle(
            "k",
            Observation {
                pause_until: Some(until),
                ..Observation::default()
            },
        )
        .await;
        assert_eq!(
            b.reserve("k", 1).await.unwrap(),
            Admission::WaitUntil(until)
        );
        // An earlier pause does not shorten the one in force.
        b.pause(Utc::now() + TimeDelta::seconds(1));
        assert_eq!(
            b.reserve("k", 1).await.unwrap(),
            Admission::WaitUntil(until)
        );
    }

    #[tokio::test]
    async fn a_free_answer_gives_its_unit_back() {
        let b = RateBudget::new();
        let reset = Utc::now() + TimeDelta::seconds(60);
        let reading = BudgetReading {
            remaining: 3,
            reset,
        };
        b.observe(reading);
        // Thirty 304s, each reserved and then settled free with the
        // platform's unchanged figure: the budget never runs down.
        for _ in 0..30 {
            assert_eq!(b.reserve("k", 1).await.unwrap(), Admission::Go);
            b.settle(
                "k",
                Observation {
                    reading: Some(reading),
                    free: true,
                    ..Observation::default()
                },
            )
            .await;
        }
        assert_eq!(b.current(), Some(reading));
        // A charged answer still spends.
        assert_eq!(b.reserve("k", 1).await.unwrap(), Admission::Go);
        b.settle("k", Observation::default()).await;
        assert_eq!(b.current().unwrap().remaining, 2);
    }

    #[tokio::test]
    async fn settling_a_reading_spends_the_local_budget() {
        let b = RateBudget::new();
        let reset = Utc::now() + TimeDelta::seconds(60);
        b.settle(
            "k",
            Observation {
                reading: Some(BudgetReading {
                    remaining: 2,
                    reset,
                }),
                ..Observation::default()
            },
        )
        .await;
        assert_eq!(b.reserve("k", 1).await.unwrap(), Admission::Go);
        assert_eq!(
            b.reserve("k", 1).await.unwrap(),
            Admission::WaitUntil(reset)
        );
    }
}
