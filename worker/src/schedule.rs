//! Schedules as jobs: each schedule tick becomes exactly one job per
//! connection for the whole fleet.
//!
//! Every worker process runs a [`Scheduler`]. It wakes every `check_every`,
//! computes the ticks that came due since it last looked, and for each
//! (schedule, connection, tick) asks the store to claim it
//! ([`Store::claim_tick`]): the `schedule_ticks` primary key lets exactly
//! one claim win, and the winner's job row is written in the same
//! transaction. So two processes (or twenty) queue one job per tick, and a
//! process that restarts cannot queue a tick again.
//!
//! Why not `apalis-cron`: its stream fires in every process that runs it;
//! keeping one job per tick needs the store's key anyway, and the key alone
//! is enough. Cron expressions are parsed by the `cron` crate, which wants
//! a seconds field and numbers Sunday 1; operators write the standard five
//! fields (minute hour day-of-month month day-of-week, Sunday 0 or 7), so
//! [`parse_cron`] translates.
//!
//! The schedules:
//! - `reconcile`: `[reconcile] schedule` (default `0 3 * * *`, UTC); each
//!   connection's run starts at a fixed offset within `spread`, so every
//!   token's budget is not spent in the same minute;
//! - `push-channels`: every `drive_channels_every`, for connections whose
//!   connector offers push channels (Drive);
//! - `prune`: `[reconcile] prune_schedule`, once for the fleet (retention).

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cmcp_domain::RunTrigger;
use cmcp_registry::{ConnectionRow, QueuedJob, Store};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::error::{Result, WorkerError};
use crate::jobs::scheduled::{SCHEDULED_QUEUE, Scheduled};
use crate::jobs::sync_connection::{QUEUE as SYNC_QUEUE, SyncConnection};
use crate::sync::SyncContext;

/// The `[reconcile]` section.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcileConfig {
    /// A standard five-field cron expression, in UTC.
    pub schedule: String,
    /// Connections' reconciles start spread over this long after the tick.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub spread: Duration,
    /// When retention pruning runs (five-field cron, UTC).
    pub prune_schedule: String,
    /// How often a scheduler looks for ticks that came due.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub check_every: Duration,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            schedule: "0 3 * * *".to_owned(),
            spread: Duration::from_secs(3600),
            prune_schedule: "30 4 * * *".to_owned(),
            check_every: Duration::from_secs(15),
        }
    }
}

/// Parse a standard five-field cron expression (minute hour day-of-month
/// month day-of-week; Sunday is 0 or 7) into the `cron` crate's schedule.
pub fn parse_cron(expr: &str) -> Result<cron::Schedule> {
    let bad = |why: String| {
        WorkerError::Schedule(format!(
            "{expr:?}: {why}; write five fields, minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\""
        ))
    };
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(bad(format!("{} fields", fields.len())));
    }
    let dow = translate_day_of_week(fields[4]).map_err(bad)?;
    let six = format!(
        "0 {} {} {} {} {dow}",
        fields[0], fields[1], fields[2], fields[3]
    );
    cron::Schedule::from_str(&six).map_err(|e| bad(e.to_string()))
}

/// Standard day-of-week numbers (0-7, Sunday 0 and 7) to the `cron`
/// crate's (1-7, Sunday 1). Names, `*` and steps pass unchanged.
fn translate_day_of_week(field: &str) -> std::result::Result<String, String> {
    let day = |s: &str| -> std::result::Result<Option<u32>, String> {
        if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
            match s.parse::<u32>() {
                Ok(n) if n <= 7 => Ok(Some(n % 7 + 1)),
                _ => Err(format!("day of week {s} is not 0-7")),
            }
        } else {
            Ok(None)
        }
    };
    let mut items = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let step = step.map(|s| format!("/{s}")).unwrap_or_default();
        match range.split_once('-') {
            Some((a, b)) => match (day(a)?, day(b)?) {
                // `5-7` (Friday to Sunday) ends on the crate's Sunday, 1.
                (Some(a), Some(1)) if b != "0" && a > 1 => {
                    items.push(format!("{a}-7{step}"));
                    if step.is_empty() {
                        items.push("1".to_owned());
                    }
                }
                (Some(a), Some(b)) => items.push(format!("{a}-{b}{step}")),
                _ => items.push(item.to_owned()),
            },
            None => match day(range)? {
                Some(n) => items.push(format!("{n}{step}")),
                None => items.push(item.to_owned()),
            },
        }
    }
    Ok(items.join(","))
}

/// When a schedule's ticks fall.
#[derive(Debug, Clone)]
pub enum Timing {
    Cron(Box<cron::Schedule>),
    /// Every so long, aligned to the epoch so every process agrees.
    Every(Duration),
}

/// At most this many ticks of one schedule are claimed per look: a
/// scheduler that slept for long catches up on the recent ones only.
const MAX_TICKS_PER_LOOK: usize = 64;

impl Timing {
    /// Ticks in `(after_ms, until_ms]`, oldest first.
    pub fn ticks(&self, after_ms: i64, until_ms: i64) -> Vec<i64> {
        match self {
            Timing::Cron(s) => {
                let Some(after) = DateTime::<Utc>::from_timestamp_millis(after_ms) else {
                    return Vec::new();
                };
                s.after(&after)
                    .map(|t| t.timestamp_millis())
                    .take_while(|t| *t <= until_ms)
                    .take(MAX_TICKS_PER_LOOK)
                    .collect()
            }
            Timing::Every(every) => {
                let every = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
                let first = (after_ms.div_euclid(every) + 1) * every;
                (0..)
                    .map(|i| first + i * every)
                    .take_while(|t| *t <= until_ms)
                    .take(MAX_TICKS_PER_LOOK)
                    .collect()
            }
        }
    }
}

/// What a schedule's tick queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// A reconcile of each connection that is not disabled.
    Reconcile,
    /// Push-channel upkeep of each enabled connection that has them.
    PushChannels,
    /// Retention pruning, once for the fleet.
    Prune,
}

#[derive(Debug, Clone)]
pub struct Entry {
    /// The schedule's name in `schedule_ticks`.
    pub name: &'static str,
    pub timing: Timing,
    pub task: Task,
}

/// The fleet-wide pseudo-connection a once-per-tick task is keyed by.
pub const FLEET: &str = "*";

/// One process's scheduler.
pub struct Scheduler {
    ctx: SyncContext,
    entries: Vec<Entry>,
    spread: Duration,
    max_attempts: i32,
    last_ms: i64,
}

impl Scheduler {
    /// The fleet's schedules, from configuration. Looks back one
    /// `check_every` at the first look, so a tick that fell during a
    /// restart is still claimed (once: the store keeps the claims).
    pub fn new(
        ctx: SyncContext,
        cfg: &ReconcileConfig,
        channels_every: Duration,
        max_attempts: u32,
        now_ms: i64,
    ) -> Result<Scheduler> {
        let entries = vec![
            Entry {
                name: "reconcile",
                timing: Timing::Cron(Box::new(parse_cron(&cfg.schedule)?)),
                task: Task::Reconcile,
            },
            Entry {
                name: "push-channels",
                timing: Timing::Every(channels_every.max(Duration::from_secs(1))),
                task: Task::PushChannels,
            },
            Entry {
                name: "prune",
                timing: Timing::Cron(Box::new(parse_cron(&cfg.prune_schedule)?)),
                task: Task::Prune,
            },
        ];
        let back = i64::try_from(cfg.check_every.as_millis()).unwrap_or(0);
        Ok(Scheduler {
            ctx,
            entries,
            spread: cfg.spread,
            max_attempts: i32::try_from(max_attempts.max(1)).unwrap_or(i32::MAX),
            last_ms: now_ms - back,
        })
    }

    /// Claim every tick that came due up to `now_ms` since the last look,
    /// queueing the jobs of the claims this scheduler won. Returns how many
    /// it queued.
    pub async fn claim_due(&mut self, now_ms: i64) -> Result<u64> {
        if now_ms <= self.last_ms {
            return Ok(0);
        }
        let due: Vec<(usize, i64)> = self
            .entries
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                e.timing
                    .ticks(self.last_ms, now_ms)
                    .into_iter()
                    .map(move |t| (i, t))
            })
            .collect();
        self.last_ms = now_ms;
        if due.is_empty() {
            return Ok(0);
        }
        let connections = self.ctx.store.list_connections().await?;
        let mut queued = 0;
        for (i, tick) in due {
            let entry = self.entries[i].clone();
            queued += self.queue_tick(&entry, tick, &connections).await?;
        }
        Ok(queued)
    }

    async fn queue_tick(
        &self,
        entry: &Entry,
        tick: i64,
        connections: &[ConnectionRow],
    ) -> Result<u64> {
        let store: &Store = &self.ctx.store;
        let mut queued = 0;
        match entry.task {
            Task::Prune => {
                let job = QueuedJob::json(SCHEDULED_QUEUE, &Scheduled::Prune, self.max_attempts)?;
                queued += u64::from(
                    store
                        .claim_tick(entry.name, FLEET, tick, &job, tick)
                        .await?,
                );
            }
            Task::Reconcile => {
                for c in connections.iter().filter(|c| c.status.reads()) {
                    let job = QueuedJob::json(
                        SYNC_QUEUE,
                        &SyncConnection::new(&c.id, RunTrigger::Reconcile),
                        self.max_attempts,
                    )?;
                    let at = tick + spread_offset_ms(&c.id, self.spread);
                    queued += u64::from(store.claim_tick(entry.name, &c.id, tick, &job, at).await?);
                }
            }
            Task::PushChannels => {
                for c in connections.iter().filter(|c| c.status.reads()) {
                    if !self.has_push_channels(c).await {
                        continue;
                    }
                    let job = QueuedJob::json(
                        SCHEDULED_QUEUE,
                        &Scheduled::PushChannels {
                            connection_id: c.id.clone(),
                        },
                        self.max_attempts,
                    )?;
                    queued += u64::from(
                        store
                            .claim_tick(entry.name, &c.id, tick, &job, tick)
                            .await?,
                    );
                }
            }
        }
        if queued > 0 {
            info!(
                schedule = entry.name,
                tick_ms = tick,
                queued,
                "schedule tick claimed"
            );
        }
        Ok(queued)
    }

    /// Whether the connection's connector offers push channels. Building a
    /// connector sends no request.
    async fn has_push_channels(&self, c: &ConnectionRow) -> bool {
        match crate::budget::connector(&self.ctx.store, &self.ctx.cipher, &self.ctx.http, c).await {
            Ok(Ok(connector)) => connector.push_channels().is_some(),
            Ok(Err(e)) => {
                warn!(connection_id = %c.id, error = %e, "push-channel schedule: no connector");
                false
            }
            Err(e) => {
                warn!(connection_id = %c.id, error = %e, "push-channel schedule: cannot open the connection");
                false
            }
        }
    }

    /// Look for due ticks every `every` until `shutdown` resolves. A
    /// failed look is logged and retried at the next one (the claims
    /// already made stay made).
    pub async fn run<F>(mut self, every: Duration, shutdown: F)
    where
        F: std::future::Future<Output = ()>,
    {
        let mut interval = tokio::time::interval(every.max(Duration::from_millis(100)));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = interval.tick() => {
                    let now = Utc::now().timestamp_millis();
                    if let Err(e) = self.claim_due(now).await {
                        warn!(error = %e, "scheduler: could not claim due ticks");
                    }
                }
            }
        }
    }
}

/// A connection's fixed offset within `spread`: the same in every process,
/// different across connections.
pub fn spread_offset_ms(connection_id: &str, spread: Duration) -> i64 {
    let spread_ms = u64::try_from(spread.as_millis()).unwrap_or(u64::MAX);
    if spread_ms == 0 {
        return 0;
    }
    let digest = Sha256::digest(connection_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::try_from(u64::from_be_bytes(first) % spread_ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use chrono::{Datelike, Timelike};

    use super::*;

    fn next(expr: &str, after: &str) -> DateTime<Utc> {
        let s = parse_cron(expr).unwrap();
        let after: DateTime<Utc> = after.parse().unwrap();
        s.after(&after).next().unwrap()
    }

    #[test]
    fn five_fields_as_operators_write_them() {
        let t = next("0 3 * * *", "2026-12-01T12:00:00Z");
        assert_eq!((t.day(), t.hour(), t.minute()), (2, 3, 0));
        // 2026-12-01 is a Tuesday: Monday-to-Friday at 09:30 is tomorrow.
        let t = next("30 9 * * 1-5", "2026-12-01T10:00:00Z");
        assert_eq!(t.weekday(), chrono::Weekday::Wed);
        // Sunday is 0 and 7.
        for sunday in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN"] {
            assert_eq!(
                next(sunday, "2026-12-01T00:00:00Z").weekday(),
                chrono::Weekday::Sun,
                "{sunday}"
            );
        }
        // Friday to Sunday: from a Saturday noon, the next is Sunday.
        let t = next("0 12 * * 5-7", "2026-12-05T12:00:00Z");
        assert_eq!(t.weekday(), chrono::Weekday::Sun);
    }

    #[test]
    fn other_field_counts_and_bad_days_are_refused_with_the_form() {
        for bad in ["0 0 3 * * *", "* * * *", "0 3 * * 8", ""] {
            let e = parse_cron(bad).unwrap_err().to_string();
            assert!(e.contains("five fields"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_minute_ticks_fall_on_the_minute() {
        let s = Timing::Cron(Box::new(parse_cron("* * * * *").unwrap()));
        assert_eq!(s.ticks(0, 180_000), vec![60_000, 120_000, 180_000]);
        assert_eq!(s.ticks(60_000, 119_999), Vec::<i64>::new());
        let e = Timing::Every(Duration::from_secs(600));
        assert_eq!(e.ticks(599_999, 1_200_000), vec![600_000, 1_200_000]);
    }

    #[test]
    fn spread_offsets_stay_within_the_spread_and_differ() {
        let spread = Duration::from_secs(3600);
        let a = spread_offset_ms("github-acme", spread);
        let b = spread_offset_ms("jira-acme", spread);
        assert!((0..3_600_000).contains(&a) && (0..3_600_000).contains(&b));
        assert_ne!(a, b);
        assert_eq!(a, spread_offset_ms("github-acme", spread));
        assert_eq!(spread_offset_ms("x", Duration::ZERO), 0);
    }
}
