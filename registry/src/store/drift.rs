//! The drift report: what each reconcile had to change itself.
//!
//! A webhook delivery is re-read and applied as soon as it is processed, so
//! the registry before a reconcile already holds every change a processed
//! delivery brought. Whatever the reconcile's complete listing still
//! changes is, by construction, a change no webhook delivered: it is
//! recorded here per run, and the report counts it per connection.

use std::collections::BTreeMap;

use cmcp_domain::SpaceAddress;
use serde::Serialize;

use super::{Store, in_tx, now_ms, on_pool};
use crate::error::Result;

cmcp_domain::string_enum! {
    /// What a reconcile found that no webhook had delivered.
    pub enum DriftKind: "drift kind" {
        Created = "created",
        Renamed = "renamed",
        KeyChanged = "key-changed",
        Archived = "archived",
        Unarchived = "unarchived",
        /// Moved to the platform's trash (restorable), told from a
        /// deletion by a direct read.
        Trashed = "trashed",
        Missing = "missing",
        Reappeared = "reappeared",
    }
}

impl DriftKind {
    /// The words of the report: "2 renames", "1 deletion", "2 new repos".
    pub fn phrase(self, n: u64) -> String {
        let (one, many) = match self {
            DriftKind::Created => ("new space", "new spaces"),
            DriftKind::Renamed => ("rename", "renames"),
            DriftKind::KeyChanged => ("key change", "key changes"),
            DriftKind::Archived => ("archiving", "archivings"),
            DriftKind::Unarchived => ("unarchiving", "unarchivings"),
            DriftKind::Trashed => ("move to the trash", "moves to the trash"),
            DriftKind::Missing => ("deletion", "deletions"),
            DriftKind::Reappeared => ("reappearance", "reappearances"),
        };
        format!("{n} {}", if n == 1 { one } else { many })
    }
}

/// One change a listing applied to one space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpaceChange {
    pub address: SpaceAddress,
    pub kind: DriftKind,
}

/// Reconciles in a row with missed changes before a connection is flagged.
pub const REPEAT_OFFENDER_NIGHTS: usize = 3;

/// How many of a connection's latest reconciles the report looks back on.
const LOOKBACK: i64 = 14;

/// One connection's line of the drift report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftLine {
    pub connection_id: String,
    /// The latest finished reconcile, if any ran.
    pub run_id: Option<String>,
    pub finished_at: Option<i64>,
    /// Changes that reconcile found no webhook had delivered.
    pub missed: u64,
    pub by_kind: BTreeMap<DriftKind, u64>,
    /// Latest reconciles in a row (this one included) that missed changes.
    pub nights_in_a_row: usize,
    /// Webhooks miss changes night after night.
    pub flagged: bool,
    pub hint: Option<String>,
    /// "webhooks missed 5 changes last night: 2 renames, 1 deletion, 2 new spaces".
    pub summary: String,
}

impl Store {
    /// Record the changes a reconcile run applied (each one a change no
    /// webhook had delivered).
    pub async fn record_drift(
        &self,
        connection_id: &str,
        run_id: &str,
        changes: &[SpaceChange],
    ) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        in_tx!(self, tx => {
            for c in changes {
                sqlx::query(
                    "INSERT INTO drift_changes (connection_id, run_id, space_address, kind, at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(connection_id).bind(run_id).bind(c.address.to_string()).bind(c.kind.as_str()).bind(now)
                .execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// The changes recorded for one run, in the order recorded.
    pub async fn drift_of_run(&self, run_id: &str) -> Result<Vec<(String, DriftKind)>> {
        let rows: Vec<(String, String)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT space_address, kind FROM drift_changes WHERE run_id = $1 ORDER BY id")
                .bind(run_id).fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(a, k)| k.parse().ok().map(|k| (a, k)))
            .collect())
    }

    /// One line per connection (or just `connection`): what its latest
    /// finished reconcile found, and whether its webhooks miss changes
    /// night after night.
    pub async fn drift_report(&self, connection: Option<&str>) -> Result<Vec<DriftLine>> {
        let ids: Vec<String> = match connection {
            Some(c) => vec![self.get_connection(c).await?.id],
            None => self
                .list_connections()
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect(),
        };
        let mut lines = Vec::with_capacity(ids.len());
        for id in ids {
            lines.push(self.drift_line(&id).await?);
        }
        Ok(lines)
    }

    async fn drift_line(&self, connection_id: &str) -> Result<DriftLine> {
        let runs: Vec<(String, Option<i64>)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, finished_at FROM sync_runs WHERE connection_id = $1 AND triggered_by = 'reconcile' \
                 AND outcome IN ('complete', 'partial') ORDER BY started_at DESC LIMIT $2",
            )
            .bind(connection_id).bind(LOOKBACK).fetch_all(pool).await?
        });
        let mut counts: Vec<BTreeMap<DriftKind, u64>> = Vec::with_capacity(runs.len());
        for (run_id, _) in &runs {
            let rows: Vec<(String, i64)> = on_pool!(self, pool => {
                sqlx::query_as("SELECT kind, COUNT(*) FROM drift_changes WHERE run_id = $1 GROUP BY kind")
                    .bind(run_id).fetch_all(pool).await?
            });
            counts.push(
                rows.into_iter()
                    .filter_map(|(k, n)| Some((k.parse().ok()?, u64::try_from(n).ok()?)))
                    .collect(),
            );
        }
        let nights_in_a_row = counts.iter().take_while(|c| !c.is_empty()).count();
        let by_kind = counts.first().cloned().unwrap_or_default();
        let missed: u64 = by_kind.values().sum();
        let flagged = nights_in_a_row >= REPEAT_OFFENDER_NIGHTS;
        let summary = match runs.first() {
            None => "no reconcile has run yet".to_owned(),
            Some(_) if missed == 0 => "webhooks missed nothing last night".to_owned(),
            Some(_) => {
                let parts: Vec<String> = by_kind.iter().map(|(k, n)| k.phrase(*n)).collect();
                let s = if missed == 1 { "" } else { "s" };
                format!(
                    "webhooks missed {missed} change{s} last night: {}",
                    parts.join(", ")
                )
            }
        };
        Ok(DriftLine {
            connection_id: connection_id.to_owned(),
            run_id: runs.first().map(|(id, _)| id.clone()),
            finished_at: runs.first().and_then(|(_, at)| *at),
            missed,
            by_kind,
            nights_in_a_row,
            flagged,
            hint: flagged.then(|| {
                format!(
                    "webhooks missed changes {nights_in_a_row} nights in a row: is the hook registered \
                     on the platform, is its secret the fleet's current one, are the events selected?"
                )
            }),
            summary,
        })
    }
}
