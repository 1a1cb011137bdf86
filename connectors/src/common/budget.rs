//! The primary rate budget of one credential, as the platform last reported
//! it in response headers.
//!
//! Why track it instead of reacting to 403/429: a request sent with an empty
//! budget is answered with an error that still counts as traffic, GitHub
//! warns that persisting "may result in banning", and every such answer costs
//! a retry. Waiting for the reset *before* sending is cheaper and polite.
//!
//! The budget is also spent optimistically on admission, so that concurrent
//! requests on one connector (a listing and a direct read) cannot both take
//! the last unit; the next response then overwrites the guess with the
//! platform's figure. Readings that arrive out of order never move the
//! budget back up within a window.

use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, TimeZone, Utc};

pub use super::shared::{BudgetUnavailable, Observation, SharedBudget};

/// What one response said about the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetReading {
    pub remaining: u32,
    /// When the window resets and `remaining` goes back to the limit.
    pub reset: DateTime<Utc>,
}

/// Whether a request may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Go,
    /// The budget is at or below the reserve: wait for the reset first.
    WaitUntil(DateTime<Utc>),
}

#[derive(Debug, Default)]
pub struct RateBudget {
    known: Mutex<Option<BudgetReading>>,
    /// A pause the platform asked for (`retry-after`, secondary limits).
    paused_until: Mutex<Option<DateTime<Utc>>>,
}

impl RateBudget {
    pub fn new() -> Self {
        RateBudget::default()
    }

    /// The last known state (for tests and diagnostics).
    pub fn current(&self) -> Option<BudgetReading> {
        *self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what a response said. A later window replaces the state; a
    /// reading of the same window only ever lowers `remaining` (responses to
    /// concurrent requests arrive in any order); an older window is ignored.
    pub fn observe(&self, reading: BudgetReading) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        *known = Some(match *known {
            Some(k) if k.reset > reading.reset => k,
            Some(k) if k.reset == reading.reset => BudgetReading {
                remaining: k.remaining.min(reading.remaining),
                reset: k.reset,
            },
            _ => reading,
        });
    }

    /// Gives back the unit [`RateBudget::admit`] spent for a request the
    /// platform did not charge. `answered_reset` is the window the answer
    /// reported: a unit spent in another window is not given to this one
    /// (the answer's reading then decides alone).
    pub fn refund(&self, answered_reset: Option<DateTime<Utc>>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = known.as_mut()
            && answered_reset.is_none_or(|r| r == k.reset)
        {
            k.remaining = k.remaining.saturating_add(1);
        }
    }

    /// Holds every request back until `until` (the later pause wins).
    pub fn pause(&self, until: DateTime<Utc>) {
        let mut p = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *p = Some(p.map_or(until, |old| old.max(until)));
    }

    /// The pause in force at `now`, if any.
    pub fn paused_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let p = *self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        p.filter(|until| *until > now)
    }

    /// Admits one request at `now` unless only `reserve` units (or fewer)
    /// are left in a window that has not reset yet. Admission spends one
    /// unit of the local estimate.
    pub fn admit(&self, reserve: u32, now: DateTime<Utc>) -> Admission {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match known.as_mut() {
            // Nothing known (first request, or a platform without budgets,
            // like GHES with rate limiting off): go.
            None => Admission::Go,
            Some(k) if k.reset <= now => {
                // The window has rolled over; the next response tells us
                // the new figures.
                *known = None;
                Admission::Go
            }
            Some(k) if k.remaining <= reserve => Admission::WaitUntil(k.reset),
            Some(k) => {
                k.remaining -= 1;
                Admission::Go
            }
        }
    }
}

/// Parses an epoch timestamp header value. Seconds is the documented unit;
/// a value too large to be seconds (recorded fixtures normalise `reset` to
/// milliseconds) is taken as milliseconds rather than a date in year 50,000.
pub fn parse_epoch(value: &str) -> Option<DateTime<Utc>> {
    let n: i64 = value.trim().parse().ok()?;
    if n < 0 {
        return None;
    }
    const MAX_PLAUSIBLE_SECONDS: i64 = 100_000_000_000; // year 5138
    if n >= MAX_PLAUSIBLE_SECONDS {
        Utc.timestamp_millis_opt(n).single()
    } else {
        Utc.timestamp_opt(n, 0).single()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).unwrap()
    }

    #[test]
    fn unknown_budget_admits() {
        let b = RateBudget::new();
        assert_eq!(b.admit(1, at(0)), Admission::Go);
    }

    #[test]
    fn waits_for_reset_at_the_reserve_and_spends_optimistically() {
        let b = RateBudget::new();
        b.observe(BudgetReading {
            remaining: 3,
            reset: at(100),
        });
        assert_eq!(b.admit(1, at(10)), Admission::Go); // 3 -> 2
        assert_eq!(b.admit(1, at(10)), Admission::Go); // 2 -> 1
        assert_eq!(b.admit(1, at(10)), Admission::WaitUntil(at(100)));
        // After the reset the estimate is dropped and requests go again.
        assert_eq!(b.admit(1, at(100)), Admission::Go);
        assert_eq!(b.current(), None);
    }

    #[test]
    fn zero_reserve_uses_the_last_unit() {
        let b = RateBudget::new();
        b.observe(BudgetReading {
            remaining: 1,
            reset: at(100),
        });
        assert_eq!(b.admit(0, at(1)), Admission::Go);
        assert_eq!(b.admit(0, at(1)), Admission::WaitUntil(at(100)));
    }

    #[test]
    fn out_of_order_readings_never_raise_the_budget_within_a_window() {
        let b = RateBudget::new();
        b.observe(BudgetReading {
            remaining: 5,
            reset: at(100),
        });
        b.observe(BudgetReading {
            remaining: 9,
            reset: at(100),
        });
        assert_eq!(b.current().unwrap().remaining, 5);
        // An older window is ignored, a newer one replaces.
        b.observe(BudgetReading {
            remaining: 0,
            reset: at(50),
        });
        assert_eq!(b.current().unwrap().remaining, 5);
        b.observe(BudgetReading {
            remaining: 4999,
            reset: at(200),
        });
        assert_eq!(b.current().unwrap().remaining, 4999);
    }

    #[test]
    fn epoch_in_seconds_or_normalised_milliseconds() {
        assert_eq!(parse_epoch("1507651200"), Some(at(1_507_651_200)));
        assert_eq!(parse_epoch(" 1507651200000 "), Some(at(1_507_651_200)));
        assert_eq!(parse_epoch("soon"), None);
        assert_eq!(parse_epoch("-5"), None);
    }
}
