//! A person's linked accounts: listing them and unlinking one.
//!
//! Unlinking cannot delete the connection row: the spaces it registered,
//! its runs and owner changes name it, and they are the audit trail. So the
//! row stays as `unlinked` with its sealed token erased, its sightings and
//! cached pages are deleted, and the spaces that were only that person's
//! (owned by them and seen by no other live connection) are tombstoned:
//! retained with their aliases, never shown again.

use cmcp_domain::{ConnectionStatus, Owner};
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::connections::ConnectionRow;
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

/// What unlinking removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Unlinked {
    /// The connection's sightings deleted.
    pub sightings: u64,
    /// The person's spaces tombstoned (no other connection saw them).
    pub tombstoned: u64,
}

impl Store {
    /// `person`'s connections that are still linked, by id.
    pub async fn person_connections(&self, person: &str) -> Result<Vec<ConnectionRow>> {
        let owner = Owner::Person(person.to_owned());
        Ok(self
            .list_connections()
            .await?
            .into_iter()
            .filter(|c| c.owner == owner && c.status != ConnectionStatus::Unlinked)
            .collect())
    }

    /// How many spaces private to `person` were first seen at or after
    /// `since_ms` (the daily cap's count).
    pub async fn private_spaces_created_since(&self, person: &str, since_ms: i64) -> Result<u64> {
        let owner = Owner::Person(person.to_owned()).as_db();
        let (n,): (i64,) = on_pool!(self, pool => {
            sqlx::query_as("SELECT COUNT(*) FROM spaces WHERE owner = $1 AND first_seen_at >= $2")
                .bind(&owner).bind(since_ms).fetch_one(pool).await?
        });
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Unlinks `person`'s connection `connection_id` (see the module docs),
    /// audited as `actor`. Another person's connection, or a company one,
    /// is not found: nobody learns it exists.
    pub async fn unlink_connection(
        &self,
        person: &str,
        connection_id: &str,
        actor: &str,
    ) -> Result<Unlinked> {
        let owner = Owner::Person(person.to_owned()).as_db();
        let now = now_ms();
        let unlinked = ConnectionStatus::Unlinked.as_str();
        let figures = in_tx!(self, durable, tx => {
            let row: Option<(String, String)> =
                sqlx::query_as("SELECT owner, status FROM connections WHERE id = $1")
                    .bind(connection_id).fetch_optional(&mut *tx).await?;
            match row {
                Some((o, status)) if o == owner && status != unlinked => {}
                _ => {
                    return Err(RegistryError::not_found(format!(
                        "{person}'s linked connection {connection_id:?}"
                    )))
                }
            }
            let tombstoned = sqlx::query(
                "UPDATE spaces SET status = 'tombstoned', tombstoned_at = $1, last_changed_at = $1 \
                 WHERE owner = $2 AND status <> 'tombstoned' \
                 AND address IN (SELECT space_address FROM sightings WHERE connection_id = $3) \
                 AND NOT EXISTS (SELECT 1 FROM sightings g JOIN connections c ON c.id = g.connection_id \
                   WHERE g.space_address = spaces.address AND g.connection_id <> $3 \
                   AND c.status <> $4 AND g.state = 'seen')",
            )
            .bind(now).bind(&owner).bind(connection_id).bind(unlinked)
            .execute(&mut *tx).await?.rows_affected();
            let sightings = sqlx::query("DELETE FROM sightings WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?.rows_affected();
            sqlx::query("DELETE FROM http_cache WHERE connection_id = $1")
                .bind(connection_id).execute(&mut *tx).await?;
            sqlx::query(
                "UPDATE webhook_secrets SET valid_until = $1 WHERE connection_id = $2 \
                 AND (valid_until IS NULL OR valid_until > $1)",
            )
            .bind(now).bind(connection_id).execute(&mut *tx).await?;
            // The sealed token is erased, not kept: nothing can open it again.
            sqlx::query(
                "UPDATE connections SET token_sealed = $1, status = $2, risks = '[]', \
                 lease_owner = NULL, lease_until = NULL, updated_at = $3 WHERE id = $4",
            )
            .bind(Vec::<u8>::new()).bind(unlinked).bind(now).bind(connection_id)
            .execute(&mut *tx).await?;
            let figures = Unlinked { sightings, tombstoned };
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "person.unlink".to_owned(),
                target: format!("connection:{connection_id}"),
                reason: None,
                before: Some(serde_json::json!({ "owner": owner })),
                after: Some(serde_json::json!({
                    "status": unlinked,
                    "sightings_removed": sightings,
                    "spaces_tombstoned": tombstoned,
                })),
            };
            insert_audit!(&mut *tx, &entry, now)?;
            figures
        });
        Ok(figures)
    }
}
