//! Sightings: which connections see which space, and who may change it.
//!
//! A space is one platform entity; a sighting is one connection's view of
//! it (first seen, last seen, state). A space's owner side follows from its
//! sightings: company-owned once any company connection has seen it,
//! otherwise private to the person whose connection registered it. Only a
//! connection that may write a space (a company connection, or the private
//! owner's) changes its status; every other connection only records its own
//! sighting. A space is marked missing only when no connection still sees
//! it (every sighting is missing or access-lost), and tombstoned only on
//! the word of a writer whose sighting is active and whose credential still
//! reads the container.

use std::collections::HashSet;

use cmcp_domain::{Owner, SpaceAddress, SpaceStatus};
use serde::Serialize;

use super::{Backend, Store, in_tx, now_ms, on_pool, placeholders};
use crate::error::{RegistryError, Result};

/// A sighting's `last_seen_at` is refreshed at most this often by readings
/// that change nothing else, so an unchanged re-sync writes nothing.
pub const SIGHTING_REFRESH_MS: i64 = 15 * 60 * 1000;

/// Addresses per statement when updating sightings.
const CHUNK: usize = 400;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SightingState {
    /// In the connection's last reading of it.
    Seen,
    /// Absent from a complete listing of the connection.
    Missing,
    /// A direct read by the connection answered 404/410, and the connection
    /// had no authority to call the space gone.
    AccessLost,
}

impl SightingState {
    pub fn as_str(self) -> &'static str {
        match self {
            SightingState::Seen => "seen",
            SightingState::Missing => "missing",
            SightingState::AccessLost => "access-lost",
        }
    }

    pub fn parse(s: &str) -> Option<SightingState> {
        match s {
            "seen" => Some(SightingState::Seen),
            "missing" => Some(SightingState::Missing),
            "access-lost" => Some(SightingState::AccessLost),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SightingRow {
    pub connection_id: String,
    pub space_address: SpaceAddress,
    pub state: SightingState,
    pub first_seen_at: i64,
    pub last_seen_at: i64,
    pub state_since: i64,
}

/// A space changed owner side, recorded for the change feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerChangeRow {
    pub id: i64,
    pub space_address: SpaceAddress,
    pub from: Owner,
    pub to: Owner,
    /// The person whose private space it was.
    pub person: Option<String>,
    /// The connection whose reading caused the change.
    pub connection_id: String,
    pub at: i64,
}

/// Why a connection's 404/410 did not tombstone a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Denial {
    /// A person's connection reading a company space or another person's.
    NotWriter,
    /// The connection does not currently see the space (never did, or its
    /// sighting is missing or access-lost).
    SightingInactive,
    /// The connection's credential no longer reads the org, workspace, site
    /// or drive holding the space: the 404 says nothing about the space.
    ContainerUnreadable,
}

impl Denial {
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::NotWriter => "not-writer",
            Denial::SightingInactive => "sighting-inactive",
            Denial::ContainerUnreadable => "container-unreadable",
        }
    }
}

/// What [`Store::tombstone`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "why")]
pub enum TombstoneOutcome {
    Tombstoned,
    AlreadyTombstoned,
    /// No space has that address.
    Unknown,
    /// The space is untouched; the reader's sighting (if it had one) is now
    /// `access-lost`.
    Refused(Denial),
}

/// Whether a connection owned by `reader` may change a space owned by
/// `space_owner`: a company connection may write any space (seeing a
/// private one makes it company-owned), a person's only their own.
pub fn may_write(reader: &Owner, space_owner: &Owner) -> bool {
    match reader {
        Owner::Company => true,
        Owner::Person(_) => reader == space_owner,
    }
}

/// `INSERT … ON CONFLICT` recording that connection `$3` saw `n` spaces
/// (`$5…`) at `$1`, in the listing run `$4` (NULL outside a listing). A
/// sighting already `seen` since after `$2`, and already stamped with the
/// run, is left alone, so a re-reading that changes nothing writes nothing
/// outside a listing, and a listing only stamps its run.
///
/// On SQLite the addresses come as ONE value, a JSON array (`$5`) read with
/// `json_each`: a statement of four hundred named values pays SQLite's
/// name lookup once per value (see [`super::marks`]).
pub(crate) fn upsert_seen_sql(backend: Backend, n: usize) -> String {
    let rows = match backend {
        Backend::Postgres => {
            let rows: Vec<String> = (0..n)
                .map(|i| format!("($3, ${}, 'seen', $1, $1, $1, $4)", 5 + i))
                .collect();
            format!("VALUES {}", rows.join(", "))
        }
        // `WHERE true`: an upsert's SELECT needs one, or SQLite reads its
        // ON as a join's.
        Backend::Sqlite => {
            "SELECT $3, j.value, 'seen', $1, $1, $1, $4 FROM json_each($5) j WHERE true".to_owned()
        }
    };
    format!(
        "INSERT INTO sightings (connection_id, space_address, state, first_seen_at, last_seen_at, state_since, last_seen_run) \
         {rows} ON CONFLICT (connection_id, space_address) DO UPDATE SET \
         state_since = CASE WHEN sightings.state = 'seen' THEN sightings.state_since ELSE excluded.state_since END, \
         state = 'seen', last_seen_at = excluded.last_seen_at, missed_listings = 0, \
         last_seen_run = COALESCE(excluded.last_seen_run, sightings.last_seen_run) \
         WHERE sightings.state <> 'seen' OR sightings.last_seen_at < $2 \
         OR (excluded.last_seen_run IS NOT NULL AND (sightings.last_seen_run IS NULL \
             OR sightings.last_seen_run <> excluded.last_seen_run))"
    )
}

#[derive(sqlx::FromRow)]
struct RawSighting {
    connection_id: String,
    space_address: String,
    state: String,
    first_seen_at: i64,
    last_seen_at: i64,
    state_since: i64,
}

impl TryFrom<RawSighting> for SightingRow {
    type Error = RegistryError;

    fn try_from(r: RawSighting) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("sighting {}/{}: {what}", r.connection_id, r.space_address),
        };
        Ok(SightingRow {
            space_address: r.space_address.parse().map_err(|_| corrupt("address"))?,
            state: SightingState::parse(&r.state).ok_or_else(|| corrupt("state"))?,
            connection_id: r.connection_id,
            first_seen_at: r.first_seen_at,
            last_seen_at: r.last_seen_at,
            state_since: r.state_since,
        })
    }
}

#[derive(sqlx::FromRow)]
struct RawOwnerChange {
    id: i64,
    space_address: String,
    from_owner: String,
    to_owner: String,
    person: Option<String>,
    connection_id: String,
    at: i64,
}

impl TryFrom<RawOwnerChange> for OwnerChangeRow {
    type Error = RegistryError;

    fn try_from(r: RawOwnerChange) -> Result<Self> {
        Ok(OwnerChangeRow {
            space_address: r
                .space_address
                .parse()
                .map_err(|_| RegistryError::Corrupt {
                    what: format!("owner change {}: address", r.id),
                })?,
            from: Owner::from_db(&r.from_owner),
            to: Owner::from_db(&r.to_owner),
            id: r.id,
            person: r.person,
            connection_id: r.connection_id,
            at: r.at,
        })
    }
}

const SIGHTING_COLUMNS: &str =
    "connection_id, space_address, state, first_seen_at, last_seen_at, state_since";

impl Store {
    /// After a complete listing by `connection_id`: its sightings of spaces
    /// the listing did not contain become `missing`, and each such space
    /// that the connection may write becomes `missing` once no connection
    /// still sees it: every other sighting is missing too, or access-lost
    /// (never deleted: tokens may simply see less).
    /// Returns how many spaces became missing.
    pub async fn mark_missing(
        &self,
        connection_id: &str,
        seen: &HashSet<SpaceAddress>,
    ) -> Result<u64> {
        let reader = self.connection_owner(connection_id).await?;
        let seen: HashSet<String> = seen.iter().map(|a| a.to_string()).collect();
        let sighted: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT space_address FROM sightings WHERE connection_id = $1")
                .bind(connection_id).fetch_all(pool).await?
        });
        let unseen: Vec<String> = sighted
            .into_iter()
            .map(|(a,)| a)
            .filter(|a| !seen.contains(a))
            .collect();
        self.mark_unseen(connection_id, &reader, &unseen).await
    }

    /// The sightings of `unseen` by `connection_id` (owned by `reader`)
    /// become `missing`, each counting one more complete listing without
    /// its space; a space the connection may write becomes `missing` once
    /// no connection still sees it. Returns how many spaces became missing.
    pub(crate) async fn mark_unseen(
        &self,
        connection_id: &str,
        reader: &Owner,
        unseen: &[String],
    ) -> Result<u64> {
        if unseen.is_empty() {
            return Ok(0);
        }
        // A person's connection decides only about that person's spaces.
        let only_owner = match reader {
            Owner::Company => None,
            Owner::Person(_) => Some(reader.as_db()),
        };
        let now = now_ms();
        let mut changed = 0;
        in_tx!(self, tx => {
            for chunk in unseen.chunks(CHUNK) {
                let sql = format!(
                    "UPDATE sightings SET missed_listings = missed_listings + 1, \
                     state_since = CASE WHEN state = 'missing' THEN state_since ELSE $1 END, state = 'missing' \
                     WHERE connection_id = $2 AND space_address IN ({})",
                    placeholders(3, chunk.len())
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).bind(connection_id);
                for a in chunk {
                    q = q.bind(a);
                }
                q.execute(&mut *tx).await?;
                let sql = format!(
                    "UPDATE spaces SET status = 'missing', missing_since = $1, last_changed_at = $1 \
                     WHERE status = 'active' AND ($2 IS NULL OR owner = $2) AND address IN ({}) \
                     AND NOT EXISTS (SELECT 1 FROM sightings g WHERE g.space_address = spaces.address \
                     AND g.state = 'seen')",
                    placeholders(3, chunk.len())
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).bind(only_owner.as_deref());
                for a in chunk {
                    q = q.bind(a);
                }
                changed += q.execute(&mut *tx).await?.rows_affected();
            }
        });
        Ok(changed)
    }

    /// A direct read of `address` by `connection_id` answered 404/410. The
    /// space is tombstoned only when that connection may write it, its
    /// sighting is `seen`, and its credential still reads the container
    /// (`container_readable`, asked of the platform by the caller).
    /// Otherwise the space is untouched and the connection's sighting, if
    /// it has one, becomes `access-lost`. Aliases always stay, so old links
    /// still explain what the space was.
    pub async fn tombstone(
        &self,
        connection_id: &str,
        address: &SpaceAddress,
        container_readable: bool,
    ) -> Result<TombstoneOutcome> {
        let now = now_ms();
        let address = address.to_string();
        let outcome = in_tx!(self, tx => {
            let space: Option<(String, String)> =
                sqlx::query_as("SELECT status, owner FROM spaces WHERE address = $1")
                    .bind(&address).fetch_optional(&mut *tx).await?;
            let reader: Option<(String,)> =
                sqlx::query_as("SELECT owner FROM connections WHERE id = $1")
                    .bind(connection_id).fetch_optional(&mut *tx).await?;
            let sighting: Option<(String,)> = sqlx::query_as(
                "SELECT state FROM sightings WHERE connection_id = $1 AND space_address = $2",
            )
            .bind(connection_id).bind(&address).fetch_optional(&mut *tx).await?;
            let Some((reader,)) = reader else {
                return Err(RegistryError::not_found(format!("connection {connection_id:?}")));
            };
            match space {
                None => TombstoneOutcome::Unknown,
                Some((status, _)) if status == SpaceStatus::Tombstoned.as_str() => {
                    TombstoneOutcome::AlreadyTombstoned
                }
                Some((_, owner)) => {
                    let active = sighting.as_ref().is_some_and(|(s,)| s == SightingState::Seen.as_str());
                    let denial = if !may_write(&Owner::from_db(&reader), &Owner::from_db(&owner)) {
                        Some(Denial::NotWriter)
                    } else if !active {
                        Some(Denial::SightingInactive)
                    } else if !container_readable {
                        Some(Denial::ContainerUnreadable)
                    } else {
                        None
                    };
                    match denial {
                        None => {
                            sqlx::query(
                                "UPDATE spaces SET status = 'tombstoned', tombstoned_at = $1, last_changed_at = $1 \
                                 WHERE address = $2 AND status <> 'tombstoned'",
                            )
                            .bind(now).bind(&address).execute(&mut *tx).await?;
                            TombstoneOutcome::Tombstoned
                        }
                        Some(d) => {
                            sqlx::query(
                                "UPDATE sightings SET state = 'access-lost', state_since = $1 \
                                 WHERE connection_id = $2 AND space_address = $3 AND state <> 'access-lost'",
                            )
                            .bind(now).bind(connection_id).bind(&address).execute(&mut *tx).await?;
                            TombstoneOutcome::Refused(d)
                        }
                    }
                }
            }
        });
        Ok(outcome)
    }

    /// The connection can no longer read the space (a repository made
    /// private, removed from an installation): its sighting becomes
    /// `access-lost`; the space itself is untouched. Returns whether a
    /// sighting changed.
    pub async fn lose_access(&self, connection_id: &str, address: &SpaceAddress) -> Result<bool> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE sightings SET state = 'access-lost', state_since = $1 \
                 WHERE connection_id = $2 AND space_address = $3 AND state <> 'access-lost'",
            )
            .bind(now).bind(connection_id).bind(address.to_string())
            .execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Every connection's sighting of a space, by connection.
    pub async fn sightings(&self, address: &SpaceAddress) -> Result<Vec<SightingRow>> {
        let sql = format!(
            "SELECT {SIGHTING_COLUMNS} FROM sightings WHERE space_address = $1 ORDER BY connection_id"
        );
        let raws: Vec<RawSighting> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(address.to_string()).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// One connection's sighting of a space, if it ever saw it.
    pub async fn sighting(
        &self,
        connection_id: &str,
        address: &SpaceAddress,
    ) -> Result<Option<SightingRow>> {
        let sql = format!(
            "SELECT {SIGHTING_COLUMNS} FROM sightings WHERE connection_id = $1 AND space_address = $2"
        );
        let raw: Option<RawSighting> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(connection_id).bind(address.to_string()).fetch_optional(pool).await?
        });
        raw.map(TryInto::try_into).transpose()
    }

    /// Owner changes after `after_id`, oldest first: the change feed's
    /// source for "this space is now the company's".
    pub async fn owner_changes(&self, after_id: i64, limit: i64) -> Result<Vec<OwnerChangeRow>> {
        let limit = if limit <= 0 { i64::MAX } else { limit };
        let raws: Vec<RawOwnerChange> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, space_address, from_owner, to_owner, person, connection_id, at \
                 FROM owner_changes WHERE id > $1 ORDER BY id LIMIT $2",
            )
            .bind(after_id).bind(limit).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    pub(crate) async fn connection_owner(&self, connection_id: &str) -> Result<Owner> {
        let row: Option<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT owner FROM connections WHERE id = $1")
                .bind(connection_id).fetch_optional(pool).await?
        });
        row.map(|(o,)| Owner::from_db(&o))
            .ok_or_else(|| RegistryError::not_found(format!("connection {connection_id:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_their_text() {
        for s in [
            SightingState::Seen,
            SightingState::Missing,
            SightingState::AccessLost,
        ] {
            assert_eq!(SightingState::parse(s.as_str()), Some(s));
        }
        assert_eq!(SightingState::parse("gone"), None);
    }

    #[test]
    fn only_company_or_the_private_owner_may_write() {
        let alice = Owner::Person("alice".into());
        let bob = Owner::Person("bob".into());
        assert!(may_write(&Owner::Company, &Owner::Company));
        assert!(may_write(&Owner::Company, &alice));
        assert!(may_write(&alice, &alice));
        assert!(!may_write(&alice, &Owner::Company));
        assert!(!may_write(&alice, &bob));
    }
}
