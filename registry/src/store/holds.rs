//! The breaker against mass missing, and tombstones after repeated absence.
//!
//! A complete listing that suddenly lacks most of an org usually means the
//! token lost access or the platform had an incident, not that the company
//! deleted its repos. The sync engine asks [`Store::missing_preview`] what a
//! listing would mark; above the configured bounds it calls
//! [`Store::hold_connection`] instead of marking anything: the connection is
//! `held` and the addresses wait in `held_missing` until an ADMIN confirms
//! ([`Store::confirm_missing`], audited) or a later complete listing agrees
//! with the registry ([`Store::clear_hold`]).

use std::collections::HashSet;

use cmcp_domain::{ConnectionStatus, SpaceAddress};
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool, placeholders};
use crate::error::{RegistryError, Result};

/// Addresses per multi-row statement.
const CHUNK: usize = 400;

/// What a complete listing would mark missing, before anything is marked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPreview {
    /// The connection's sightings that were `seen` before the listing.
    pub seen_before: u64,
    /// Those of them the listing lacked: they would become missing.
    pub would_miss: Vec<String>,
}

/// A connection the breaker held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HoldRow {
    pub connection_id: String,
    /// The run whose listing tripped the breaker.
    pub run_id: String,
    pub would_miss: u64,
    pub seen_before: u64,
    pub reason: String,
    pub since: i64,
}

impl Store {
    /// What a complete listing that saw `seen` would mark missing for
    /// `connection_id`. Writes nothing.
    pub async fn missing_preview(
        &self,
        connection_id: &str,
        seen: &HashSet<SpaceAddress>,
    ) -> Result<MissingPreview> {
        let seen: HashSet<String> = seen.iter().map(|a| a.to_string()).collect();
        let sighted: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT space_address FROM sightings WHERE connection_id = $1 AND state = 'seen'")
                .bind(connection_id).fetch_all(pool).await?
        });
        let seen_before = sighted.len() as u64;
        let would_miss = sighted
            .into_iter()
            .map(|(a,)| a)
            .filter(|a| !seen.contains(a))
            .collect();
        Ok(MissingPreview {
            seen_before,
            would_miss,
        })
    }

    /// Hold the connection: record why and which addresses the listing of
    /// `run_id` would have marked missing, and set its status to `held`
    /// (a disabled connection stays disabled). Replaces an earlier hold.
    pub async fn hold_connection(
        &self,
        connection_id: &str,
        run_id: &str,
        preview: &MissingPreview,
        reason: &str,
    ) -> Result<()> {
        let now = now_ms();
        let would_miss = i64::try_from(preview.would_miss.len()).unwrap_or(i64::MAX);
        let seen_before = i64::try_from(preview.seen_before).unwrap_or(i64::MAX);
        in_tx!(self, tx => {
            sqlx::query("DELETE FROM held_missing WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM connection_holds WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO connection_holds (connection_id, run_id, would_miss, seen_before, reason, since) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(connection_id).bind(run_id).bind(would_miss).bind(seen_before).bind(reason).bind(now)
            .execute(&mut *tx).await?;
            for chunk in preview.would_miss.chunks(CHUNK) {
                let rows: Vec<String> = (0..chunk.len()).map(|i| format!("($1, ${})", i + 2)).collect();
                let sql = format!(
                    "INSERT INTO held_missing (connection_id, space_address) VALUES {}",
                    rows.join(", ")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(connection_id);
                for a in chunk {
                    q = q.bind(a);
                }
                q.execute(&mut *tx).await?;
            }
            sqlx::query("UPDATE connections SET status = 'held', updated_at = $1 WHERE id = $2 AND status = 'enabled'")
                .bind(now).bind(connection_id).execute(&mut *tx).await?;
        });
        Ok(())
    }

    /// The connection's hold, if the breaker holds it.
    pub async fn get_hold(&self, connection_id: &str) -> Result<Option<HoldRow>> {
        let row: Option<(String, String, i64, i64, String, i64)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT connection_id, run_id, would_miss, seen_before, reason, since \
                 FROM connection_holds WHERE connection_id = $1",
            )
            .bind(connection_id).fetch_optional(pool).await?
        });
        Ok(row.map(
            |(connection_id, run_id, would_miss, seen_before, reason, since)| HoldRow {
                connection_id,
                run_id,
                would_miss: u64::try_from(would_miss).unwrap_or(0),
                seen_before: u64::try_from(seen_before).unwrap_or(0),
                reason,
                since,
            },
        ))
    }

    /// A later complete listing agreed with the registry: the hold goes and
    /// a held connection is enabled again. Returns whether there was one.
    pub async fn clear_hold(&self, connection_id: &str) -> Result<bool> {
        let now = now_ms();
        let n = in_tx!(self, tx => {
            sqlx::query("DELETE FROM held_missing WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            let n = sqlx::query("DELETE FROM connection_holds WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?.rows_affected();
            sqlx::query("UPDATE connections SET status = 'enabled', updated_at = $1 WHERE id = $2 AND status = 'held'")
                .bind(now).bind(connection_id).execute(&mut *tx).await?;
            n
        });
        Ok(n > 0)
    }

    /// An ADMIN confirms that the held spaces are gone: they are marked
    /// missing as the listing would have, the hold goes, the connection is
    /// enabled again, and the decision is audited with its reason. Returns
    /// how many spaces became missing. Marking is idempotent, so a crash
    /// between the two steps leaves a hold that a second confirmation
    /// finishes.
    pub async fn confirm_missing(
        &self,
        connection_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<u64> {
        if reason.trim().is_empty() {
            return Err(RegistryError::Invalid {
                what: "reason: say why the spaces are gone".to_owned(),
            });
        }
        // An unknown connection is not found, not merely "not held".
        self.get_connection(connection_id).await?;
        let Some(hold) = self.get_hold(connection_id).await? else {
            return Err(RegistryError::Invalid {
                what: format!("connection {connection_id:?} is not held"),
            });
        };
        let held: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT space_address FROM held_missing WHERE connection_id = $1 ORDER BY space_address")
                .bind(connection_id).fetch_all(pool).await?
        });
        let held: Vec<String> = held.into_iter().map(|(a,)| a).collect();
        let reader = self.connection_owner(connection_id).await?;
        let marked = self.mark_unseen(connection_id, &reader, &held).await?;
        let now = now_ms();
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: "connection.confirm-missing".to_owned(),
            target: format!("connection:{connection_id}"),
            reason: Some(reason.to_owned()),
            before: Some(serde_json::json!({
                "status": ConnectionStatus::Held, "run_id": hold.run_id,
                "would_miss": hold.would_miss, "seen_before": hold.seen_before,
            })),
            after: Some(serde_json::json!({
                "status": ConnectionStatus::Enabled, "marked_missing": marked,
            })),
        };
        in_tx!(self, durable, tx => {
            sqlx::query("DELETE FROM held_missing WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM connection_holds WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            sqlx::query("UPDATE connections SET status = 'enabled', updated_at = $1 WHERE id = $2 AND status = 'held'")
                .bind(now).bind(connection_id).execute(&mut *tx).await?;
            insert_audit!(&mut *tx, &entry, now)?;
        });
        Ok(marked)
    }

    /// Tombstone the spaces `connection_id` may write whose sighting has
    /// been absent from `after` consecutive complete listings, once no
    /// connection sees them (rule 4: repeated complete listings). Returns
    /// the addresses tombstoned.
    pub async fn tombstone_long_missing(
        &self,
        connection_id: &str,
        after: u32,
    ) -> Result<Vec<String>> {
        if after == 0 {
            return Ok(Vec::new());
        }
        let reader = self.connection_owner(connection_id).await?;
        let only_owner = match &reader {
            cmcp_domain::Owner::Company => None,
            cmcp_domain::Owner::Person(_) => Some(reader.as_db()),
        };
        let now = now_ms();
        let rows: Vec<(String,)> = in_tx!(self, tx => {
            let due: Vec<(String,)> = sqlx::query_as(
                "SELECT s.address FROM spaces s JOIN sightings g ON g.space_address = s.address \
                 WHERE g.connection_id = $1 AND g.state = 'missing' AND g.missed_listings >= $2 \
                 AND s.status = 'missing' AND ($3 IS NULL OR s.owner = $3) \
                 AND NOT EXISTS (SELECT 1 FROM sightings o WHERE o.space_address = s.address AND o.state = 'seen')",
            )
            .bind(connection_id).bind(i64::from(after)).bind(only_owner.as_deref())
            .fetch_all(&mut *tx).await?;
            for chunk in due.chunks(CHUNK) {
                let sql = format!(
                    "UPDATE spaces SET status = 'tombstoned', tombstoned_at = $1, last_changed_at = $1 \
                     WHERE status = 'missing' AND address IN ({})",
                    placeholders(2, chunk.len())
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now);
                for (a,) in chunk {
                    q = q.bind(a);
                }
                q.execute(&mut *tx).await?;
            }
            due
        });
        Ok(rows.into_iter().map(|(a,)| a).collect())
    }
}
