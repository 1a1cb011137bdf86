//! The change feed: every change to a space (created, alias added or
//! retired, state changed, owner changed, mapping approved or undone), in
//! commit order, from the `space_changes` table that triggers fill (see
//! the migrations for why PostgreSQL rows carry their transaction id).
//!
//! A [`Cursor`] is `(tx, id)`. On PostgreSQL a reader reads only rows
//! whose writing transaction is older than the oldest transaction still
//! running, so a transaction that started first and commits last is never
//! jumped over: the reader waits for it instead. SQLite has one writer at
//! a time, so its rows commit in id order and `tx` is always 0. Rows a
//! caller may not see are dropped after reading; the cursor a page answers
//! is the position of the last row read, the same for every caller.

use std::fmt;
use std::str::FromStr;

use cmcp_domain::{Owner, SpaceAddress};
use serde::Serialize;

use super::visibility::{Viewer, visible};
use super::{Store, on_pool};
use crate::error::{RegistryError, Result};

cmcp_domain::string_enum! {
    /// What happened to a space.
    pub enum ChangeKind: "change kind" {
        SpaceCreated = "space-created",
        AliasAdded = "alias-added",
        AliasRetired = "alias-retired",
        /// `detail.state`: archived, unarchived, missing, access-lost,
        /// tombstoned or restored.
        StateChanged = "state-changed",
        OwnerChanged = "owner-changed",
        MappingApproved = "mapping-approved",
        MappingUndone = "mapping-undone",
    }
}

/// A position in the feed, printed `tx.id`; `0` (or `0.0`) is the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    pub tx: i64,
    pub id: i64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.tx, self.id)
    }
}

impl FromStr for Cursor {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Cursor> {
        let bad = || RegistryError::Invalid {
            what: format!("cursor {s:?} (expected the `next` of an earlier page, or 0)"),
        };
        let s = s.trim();
        if s == "0" || s.is_empty() {
            return Ok(Cursor::default());
        }
        let (tx, id) = s.split_once('.').ok_or_else(bad)?;
        let tx: i64 = tx.parse().map_err(|_| bad())?;
        let id: i64 = id.parse().map_err(|_| bad())?;
        if tx < 0 || id < 0 {
            return Err(bad());
        }
        Ok(Cursor { tx, id })
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeRow {
    pub cursor: Cursor,
    /// Epoch milliseconds.
    pub at: i64,
    pub kind: ChangeKind,
    pub address: SpaceAddress,
    /// Kind-specific facts: the alias (`alias_kind`, `value`, `raw`), the
    /// new `state`, the owner sides `from`/`to`, the `place_id`; a new
    /// space's `status`, `display_name` and the `aliases` it was created
    /// with (its aliases have no `alias-added` row of their own).
    pub detail: serde_json::Value,
    #[serde(skip)]
    pub owner: Owner,
}

/// One page of the feed. `next` is where the following page starts; it
/// moves past rows the caller may not see, and stays put when nothing new
/// has committed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePage {
    pub changes: Vec<ChangeRow>,
    pub next: Cursor,
}

#[derive(sqlx::FromRow)]
struct RawChange {
    id: i64,
    tx: i64,
    kind: String,
    space_address: String,
    owner: String,
    detail: String,
    at: i64,
}

impl TryFrom<RawChange> for ChangeRow {
    type Error = RegistryError;

    fn try_from(r: RawChange) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("change {}: {what}", r.id),
        };
        Ok(ChangeRow {
            cursor: Cursor { tx: r.tx, id: r.id },
            kind: r.kind.parse().map_err(|_| corrupt("kind"))?,
            address: r.space_address.parse().map_err(|_| corrupt("address"))?,
            detail: serde_json::from_str(&r.detail).map_err(|_| corrupt("detail"))?,
            owner: Owner::from_db(&r.owner),
            at: r.at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct SettledRaw {
    #[sqlx(flatten)]
    change: RawChange,
    settled: bool,
}

const CHANGE_COLUMNS: &str = "id, tx, kind, space_address, owner, detail, at";

/// The rows every reader may be given: on PostgreSQL only those written by
/// transactions older than every transaction still running.
pub(crate) const PG_HORIZON: &str = "tx < pg_snapshot_xmin(pg_current_snapshot())::text::bigint";

impl Store {
    /// Up to `limit` changes after `after` that `viewer` may see (`None`:
    /// all, for the operator), oldest first, and the cursor to read from
    /// next.
    pub async fn changes(
        &self,
        after: Cursor,
        limit: i64,
        viewer: Option<&Viewer>,
    ) -> Result<ChangePage> {
        self.check_not_pruned(after).await?;
        let rows = self
            .raw_changes(after, None, limit.clamp(1, 10_000))
            .await?;
        let next = rows.last().map_or(after, |r| r.cursor);
        Ok(ChangePage {
            changes: rows
                .into_iter()
                .filter(|c| visible(viewer, &c.owner))
                .collect(),
            next,
        })
    }

    /// The position up to which retention pruned the feed (`None`: it
    /// never has). A reader at this position or after it has lost nothing.
    pub async fn feed_pruned_through(&self) -> Result<Option<Cursor>> {
        let row: Option<(i64, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT tx, id FROM space_changes_pruned WHERE one = 1")
                .fetch_optional(pool).await?
        });
        Ok(row.map(|(tx, id)| Cursor { tx, id }))
    }

    /// Whether reading on from `after` would skip pruned changes.
    pub(crate) async fn is_pruned_past(&self, after: Cursor) -> Result<Option<Cursor>> {
        Ok(self.feed_pruned_through().await?.filter(|p| after < *p))
    }

    /// Refuse a cursor older than the feed keeps: a page from it would have
    /// a hole where the pruned changes were, and the reader would never
    /// know.
    async fn check_not_pruned(&self, after: Cursor) -> Result<()> {
        match self.is_pruned_past(after).await? {
            Some(oldest) => Err(RegistryError::FeedPruned {
                cursor: after.to_string(),
                oldest: oldest.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// The newest position every reader may already read: a manifest's
    /// version.
    pub async fn change_head(&self) -> Result<Cursor> {
        let row: Option<(i64, i64)> = match self {
            Store::Sqlite(pool) => {
                sqlx::query_as("SELECT tx, id FROM space_changes ORDER BY tx DESC, id DESC LIMIT 1")
                    .fetch_optional(pool)
                    .await?
            }
            Store::Postgres(pool) => {
                let sql = format!(
                    "SELECT tx, id FROM space_changes WHERE {PG_HORIZON} ORDER BY tx DESC, id DESC LIMIT 1"
                );
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .fetch_optional(pool)
                    .await?
            }
        };
        let newest = row.map_or(Cursor::default(), |(tx, id)| Cursor { tx, id });
        // Never behind what retention pruned: a feed pruned empty still has
        // a head that is not "before everything".
        Ok(match self.feed_pruned_through().await? {
            Some(pruned) => newest.max(pruned),
            None => newest,
        })
    }

    /// Every committed change after `after`, oldest first, at most
    /// `limit`, each with whether readers may be given it yet (PostgreSQL:
    /// not when written by a transaction younger than the oldest one still
    /// running; such rows come after every settled one). One statement, so
    /// one snapshot decides both. A reader that may see a change twice
    /// (matching) looks at the unsettled ones now and again once the
    /// horizon passes them.
    pub(crate) async fn changes_settled(
        &self,
        after: Cursor,
        limit: i64,
    ) -> Result<Vec<(ChangeRow, bool)>> {
        let raws: Vec<(bool, RawChange)> = on_pool!(self, pool => {
            // SQLite's `tx` is always 0, so a range on `(tx, id)` would walk
            // the whole index from its start: there the id alone is the
            // position (ids commit in order).
            let (horizon, range, order) = if matches!(self, Store::Postgres(_)) {
                (PG_HORIZON, "(tx, id) > ($1, $2)", "tx, id")
            } else {
                ("1 = 1", "tx >= $1 AND id > $2", "id")
            };
            let sql = format!(
                "SELECT {CHANGE_COLUMNS}, ({horizon}) AS settled FROM space_changes \
                 WHERE {range} ORDER BY {order} LIMIT $3"
            );
            let rows: Vec<SettledRaw> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(after.tx).bind(after.id).bind(limit)
                .fetch_all(pool).await?;
            rows.into_iter().map(|r| (r.settled, r.change)).collect()
        });
        raws.into_iter()
            .map(|(settled, r)| Ok((r.try_into()?, settled)))
            .collect()
    }

    /// Changes in `(after, upto]` (or after `after` when `upto` is `None`),
    /// oldest first, at most `limit`, unfiltered.
    pub(crate) async fn raw_changes(
        &self,
        after: Cursor,
        upto: Option<Cursor>,
        limit: i64,
    ) -> Result<Vec<ChangeRow>> {
        let upto = upto.unwrap_or(Cursor {
            tx: i64::MAX,
            id: i64::MAX,
        });
        let range = "(tx, id) > ($1, $2) AND (tx, id) <= ($3, $4)";
        let raws: Vec<RawChange> = on_pool!(self, pool => {
            let horizon = if matches!(self, Store::Postgres(_)) { PG_HORIZON } else { "1 = 1" };
            let sql = format!(
                "SELECT {CHANGE_COLUMNS} FROM space_changes WHERE {range} AND {horizon} \
                 ORDER BY tx, id LIMIT $5"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(after.tx).bind(after.id).bind(upto.tx).bind(upto.id).bind(limit)
                .fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_print_and_parse_back() {
        let c = Cursor { tx: 812, id: 40 };
        assert_eq!(c.to_string(), "812.40");
        assert_eq!("812.40".parse::<Cursor>().unwrap(), c);
        assert_eq!("0".parse::<Cursor>().unwrap(), Cursor::default());
        for bad in ["x", "1.", ".2", "-1.2", "1.2.3"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad}");
        }
        assert!(Cursor { tx: 1, id: 9 } < Cursor { tx: 2, id: 1 });
    }
}
