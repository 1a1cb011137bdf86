//! The fleet's shared rate budgets: one row per credential and resource.
//!
//! Why in the store: every worker process of a fleet sends with the same
//! credentials, and the platform counts their requests together. The
//! protocol guarantees that workers sharing a budget never together exceed
//! it:
//!
//! - **Reserve** before each request with one conditional `UPDATE`
//!   (`remaining > reserve` in the `WHERE`, `remaining - 1` in the `SET`).
//!   A single statement is atomic on both dialects (PostgreSQL re-checks the
//!   `WHERE` after waiting for the row lock; SQLite serialises writers), so
//!   two workers can never take the same unit. While the budget is unknown
//!   only one probe request may be in flight.
//! - **Settle** after the answer: a request the platform did not charge
//!   (`free`, a `304`) first gives its reserved unit back — every in-flight
//!   reservation is counted in the current window, also across a roll-over,
//!   so the unit always belongs there. Then the server's `remaining`, less the other
//!   requests still in flight (they may not have been charged yet), is taken
//!   when it is lower; a window is never raised. An answer of another window
//!   (a later reset, or a reset earlier than believed) starts that window
//!   the same way; late answers of a window already rolled away from are
//!   ignored.
//! - **Roll over** when the reset has passed: the new window starts at the
//!   known limit minus the requests still in flight (they may be charged to
//!   it). In-flight counts of a budget untouched for `stale_ms` are dropped:
//!   a worker that died mid-request cannot shrink the budget forever.

use serde::Serialize;

use super::{now_ms, on_pool, on_writer};
use crate::error::Result;

/// Whether a request may be sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetGrant {
    /// One unit was reserved: send, then settle.
    Go,
    /// Nothing was reserved: wait until this epoch millisecond.
    WaitUntilMs(i64),
}

/// What one answer said, in epoch milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetSettlement {
    pub remaining: Option<i64>,
    pub reset_at: Option<i64>,
    pub limit: Option<i64>,
    pub paused_until: Option<i64>,
    /// The platform did not charge this request (a `304`): its reserved
    /// unit is given back before the reading is applied.
    pub free: bool,
}

/// The timing rules of reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetTiming {
    /// Roll over this long after the reported reset (clock skew).
    pub rollover_margin_ms: i64,
    /// In-flight counts of a budget untouched this long are dropped (longer
    /// than any request can take).
    pub stale_ms: i64,
    /// How long to wait while another request probes an unknown budget.
    pub poll_ms: i64,
}

impl Default for BudgetTiming {
    fn default() -> Self {
        BudgetTiming {
            rollover_margin_ms: 500,
            stale_ms: 120_000,
            poll_ms: 100,
        }
    }
}

/// One budget as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct BudgetRow {
    pub budget_key: String,
    pub remaining: Option<i64>,
    pub request_limit: Option<i64>,
    pub reset_at: Option<i64>,
    pub window_floor: Option<i64>,
    pub paused_until: Option<i64>,
    pub in_flight: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "budget_key, remaining, request_limit, reset_at, window_floor, \
                       paused_until, in_flight, updated_at";

impl super::Store {
    /// Reserves one unit of `key` at `now_ms`, or says until when to wait.
    pub async fn reserve_budget(
        &self,
        key: &str,
        reserve: i64,
        now_ms: i64,
        timing: BudgetTiming,
    ) -> Result<BudgetGrant> {
        let stale = now_ms - timing.stale_ms;
        // A few rounds: a missing row is created, a due window rolled over,
        // and the reservation tried again.
        for _ in 0..4 {
            let taken = on_writer!(self, pool => {
                sqlx::query(
                    "UPDATE rate_budgets SET \
                       remaining = CASE WHEN remaining IS NULL THEN NULL ELSE remaining - 1 END, \
                       in_flight = CASE WHEN updated_at < $2 THEN 1 ELSE in_flight + 1 END, \
                       updated_at = $3 \
                     WHERE budget_key = $1 \
                       AND (paused_until IS NULL OR paused_until <= $3) \
                       AND (reset_at IS NULL OR reset_at + $4 > $3) \
                       AND ((remaining IS NULL AND (in_flight = 0 OR updated_at < $2)) \
                            OR remaining > $5)",
                )
                .bind(key).bind(stale).bind(now_ms).bind(timing.rollover_margin_ms).bind(reserve)
                .execute(pool).await?.rows_affected()
            });
            if taken == 1 {
                return Ok(BudgetGrant::Go);
            }
            let Some(row) = self.budget(key).await? else {
                on_writer!(self, pool => {
                    sqlx::query(
                        "INSERT INTO rate_budgets (budget_key, in_flight, updated_at) \
                         VALUES ($1, 0, $2) ON CONFLICT (budget_key) DO NOTHING",
                    )
                    .bind(key).bind(now_ms).execute(pool).await?;
                });
                continue;
            };
            if let Some(until) = row.paused_until.filter(|p| *p > now_ms) {
                return Ok(BudgetGrant::WaitUntilMs(until));
            }
            // The row is read after the miss, so another worker may have
            // changed it in between (a probe settling a full window): what
            // would be taken now is tried again, never waited out.
            let open = match row.remaining {
                Some(left) => left > reserve,
                None => row.in_flight == 0 || row.updated_at < stale,
            };
            match row.reset_at {
                Some(reset) if reset + timing.rollover_margin_ms <= now_ms => {
                    self.roll_budget_over(key, reset, now_ms, stale).await?;
                    continue;
                }
                _ if open => continue,
                Some(reset) if row.remaining.is_some() => {
                    return Ok(BudgetGrant::WaitUntilMs(reset));
                }
                // Unknown budget with a probe in flight, or a new window
                // whose reset is not reported yet: the answer in flight
                // will tell.
                _ => return Ok(BudgetGrant::WaitUntilMs(now_ms + timing.poll_ms)),
            }
        }
        Ok(BudgetGrant::WaitUntilMs(now_ms + timing.poll_ms))
    }

    /// Starts the window after the one that reset at `reset` (only if no
    /// other worker did first).
    async fn roll_budget_over(&self, key: &str, reset: i64, now_ms: i64, stale: i64) -> Result<()> {
        on_writer!(self, pool => {
            sqlx::query(
                "UPDATE rate_budgets SET \
                   remaining = CASE WHEN request_limit IS NULL THEN NULL \
                     ELSE request_limit - (CASE WHEN updated_at < $3 THEN 0 ELSE in_flight END) END, \
                   in_flight = CASE WHEN updated_at < $3 THEN 0 ELSE in_flight END, \
                   window_floor = reset_at, reset_at = NULL, updated_at = $4 \
                 WHERE budget_key = $1 AND reset_at = $2",
            )
            .bind(key).bind(reset).bind(stale).bind(now_ms)
            .execute(pool).await?;
        });
        Ok(())
    }

    /// Ends one reserved request of `key` at `now_ms` and records what its
    /// answer said.
    pub async fn settle_budget(&self, key: &str, s: BudgetSettlement, now_ms: i64) -> Result<()> {
        // Every right-hand side sees the row as it was before this UPDATE.
        on_writer!(self, pool => {
            sqlx::query(
                "UPDATE rate_budgets SET \
                   in_flight = CASE WHEN in_flight > 0 THEN in_flight - 1 ELSE 0 END, \
                   request_limit = COALESCE($4, request_limit), \
                   paused_until = CASE WHEN $5 IS NULL THEN paused_until \
                     WHEN paused_until IS NULL OR paused_until < $5 THEN $5 ELSE paused_until END, \
                   remaining = CASE \
                     WHEN $2 IS NULL OR $3 IS NULL THEN remaining + $7 \
                     WHEN window_floor IS NOT NULL AND $3 <= window_floor THEN remaining + $7 \
                     WHEN remaining IS NULL OR (reset_at IS NOT NULL AND $3 <> reset_at) THEN \
                       CASE WHEN $2 - (in_flight - 1) > 0 THEN $2 - (in_flight - 1) ELSE 0 END \
                     WHEN $2 - (in_flight - 1) < remaining + $7 THEN \
                       CASE WHEN $2 - (in_flight - 1) > 0 THEN $2 - (in_flight - 1) ELSE 0 END \
                     ELSE remaining + $7 END, \
                   window_floor = CASE WHEN $2 IS NOT NULL AND reset_at IS NOT NULL AND $3 > reset_at \
                     THEN reset_at ELSE window_floor END, \
                   reset_at = CASE \
                     WHEN $2 IS NULL OR $3 IS NULL THEN reset_at \
                     WHEN window_floor IS NOT NULL AND $3 <= window_floor THEN reset_at \
                     ELSE $3 END, \
                   updated_at = $6 \
                 WHERE budget_key = $1",
            )
            .bind(key).bind(s.remaining).bind(s.reset_at).bind(s.limit).bind(s.paused_until).bind(now_ms)
            .bind(i64::from(s.free))
            .execute(pool).await?;
        });
        Ok(())
    }

    /// One budget, if it has been used.
    pub async fn budget(&self, key: &str) -> Result<Option<BudgetRow>> {
        let sql = format!("SELECT {COLUMNS} FROM rate_budgets WHERE budget_key = $1");
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key).fetch_optional(pool).await?
        }))
    }

    /// Records that `connection_id` spends `key` (writes only on a change).
    pub async fn note_budget_user(&self, connection_id: &str, key: &str) -> Result<()> {
        on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO rate_budget_users (connection_id, budget_key, updated_at) \
                 VALUES ($1, $2, $3) ON CONFLICT (connection_id) DO UPDATE \
                 SET budget_key = excluded.budget_key, updated_at = excluded.updated_at \
                 WHERE rate_budget_users.budget_key <> excluded.budget_key",
            )
            .bind(connection_id).bind(key).bind(now_ms())
            .execute(pool).await?;
        });
        Ok(())
    }

    /// Each connection's budget, for `connection list`, by connection id.
    pub async fn connection_budgets(&self) -> Result<Vec<(String, BudgetRow)>> {
        let sql = "SELECT u.connection_id, b.budget_key, b.remaining, b.request_limit, b.reset_at, \
                   b.window_floor, b.paused_until, b.in_flight, b.updated_at \
                   FROM rate_budget_users u JOIN rate_budgets b ON b.budget_key = u.budget_key \
                   ORDER BY u.connection_id";
        type Raw = (
            String,
            String,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            i64,
            i64,
        );
        let raws: Vec<Raw> = on_pool!(self, pool => {
            sqlx::query_as(sql).fetch_all(pool).await?
        });
        Ok(raws
            .into_iter()
            .map(|r| {
                (
                    r.0,
                    BudgetRow {
                        budget_key: r.1,
                        remaining: r.2,
                        request_limit: r.3,
                        reset_at: r.4,
                        window_floor: r.5,
                        paused_until: r.6,
                        in_flight: r.7,
                        updated_at: r.8,
                    },
                )
            })
            .collect())
    }
}
