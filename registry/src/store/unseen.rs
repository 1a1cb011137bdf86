//! What a complete listing did not see, found in the store.
//!
//! Every page a listing run applies stamps its sightings with the run
//! ([`Store::apply_listed_page`]); at the end, the connection's sightings
//! not stamped with the run are exactly those the listing lacked. The sync
//! engine therefore holds no set of every address it listed, and its
//! memory does not grow with the organisation: the preview reads only the
//! addresses that would go, and marking them is one statement per table.

use cmcp_domain::Owner;

use super::holds::MissingPreview;
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::Result;

/// Sightings of `$c` that the run `$r` did not stamp (`$c`, `$r` numbered
/// by the caller).
fn unstamped(c: usize, r: usize) -> String {
    format!("connection_id = ${c} AND (last_seen_run IS NULL OR last_seen_run <> ${r})")
}

impl Store {
    /// What the complete listing of run `run_id` would mark missing for
    /// `connection_id`: its `seen` sightings the run did not stamp.
    /// Writes nothing. (Like [`Store::missing_preview`], without the set.)
    pub async fn missing_preview_of_run(
        &self,
        connection_id: &str,
        run_id: &str,
    ) -> Result<MissingPreview> {
        let count_sql =
            "SELECT COUNT(*) FROM sightings WHERE connection_id = $1 AND state = 'seen'";
        let miss_sql = format!(
            "SELECT space_address FROM sightings WHERE state = 'seen' AND {} ORDER BY space_address",
            unstamped(1, 2)
        );
        let (seen_before, would_miss): (i64, Vec<(String,)>) = on_pool!(self, pool => {
            let (n,): (i64,) = sqlx::query_as(count_sql).bind(connection_id).fetch_one(pool).await?;
            let miss = sqlx::query_as(sqlx::AssertSqlSafe(miss_sql))
                .bind(connection_id).bind(run_id).fetch_all(pool).await?;
            (n, miss)
        });
        Ok(MissingPreview {
            seen_before: u64::try_from(seen_before).unwrap_or(0),
            would_miss: would_miss.into_iter().map(|(a,)| a).collect(),
        })
    }

    /// After the complete listing of run `run_id`: the sightings of
    /// `connection_id` it did not stamp become `missing`, each counting one
    /// more complete listing without its space, and each such space the
    /// connection may write becomes `missing` once no connection still sees
    /// it. Returns how many spaces became missing. (Like
    /// [`Store::mark_missing`], without the set.)
    pub async fn mark_unseen_by_run(&self, connection_id: &str, run_id: &str) -> Result<u64> {
        let reader = self.connection_owner(connection_id).await?;
        // A person's connection decides only about that person's spaces.
        let only_owner = match &reader {
            Owner::Company => None,
            Owner::Person(_) => Some(reader.as_db()),
        };
        let now = now_ms();
        let sightings_sql = format!(
            "UPDATE sightings SET missed_listings = missed_listings + 1, \
             state_since = CASE WHEN state = 'missing' THEN state_since ELSE $1 END, state = 'missing' \
             WHERE {}",
            unstamped(2, 3)
        );
        // The stamps tell this run's unseen sightings apart after they
        // became missing too; a space goes once no sighting is `seen`.
        let spaces_sql = format!(
            "UPDATE spaces SET status = 'missing', missing_since = $1, last_changed_at = $1 \
             WHERE status = 'active' AND ($2 IS NULL OR owner = $2) \
             AND address IN (SELECT space_address FROM sightings WHERE {}) \
             AND NOT EXISTS (SELECT 1 FROM sightings g WHERE g.space_address = spaces.address \
             AND g.state = 'seen')",
            unstamped(3, 4)
        );
        let changed = in_tx!(self, tx => {
            sqlx::query(sqlx::AssertSqlSafe(sightings_sql))
                .bind(now).bind(connection_id).bind(run_id)
                .execute(&mut *tx).await?;
            sqlx::query(sqlx::AssertSqlSafe(spaces_sql))
                .bind(now).bind(only_owner.as_deref()).bind(connection_id).bind(run_id)
                .execute(&mut *tx).await?.rows_affected()
        });
        Ok(changed)
    }
}
