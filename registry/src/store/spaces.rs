//! Spaces and their aliases: upsert by stable id under the owner-side
//! rules of [`super::sightings`], alias history and resolution of any
//! fingerprint to a space.

use std::collections::{BTreeMap, HashMap, HashSet};

use cmcp_domain::{Alias, AliasKind, Owner, SpaceAddress, SpaceRecord, SpaceStatus, Visibility};
use serde::Serialize;

use super::drift::{DriftKind, SpaceChange};
use super::sightings::{SIGHTING_REFRESH_MS, may_write, upsert_seen_sql};
use super::{Backend, Store, in_tx, marks, now_ms, on_pool};
use crate::error::{RegistryError, Result};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpaceRow {
    pub address: SpaceAddress,
    /// The connection whose reading registered the space. Which
    /// connections see it now is in [`Store::sightings`].
    pub connection_id: String,
    pub owner: Owner,
    pub display_name: String,
    pub container: Option<SpaceAddress>,
    pub status: SpaceStatus,
    pub archived: bool,
    pub trashed: bool,
    pub visibility: Option<Visibility>,
    pub first_seen_at: i64,
    pub last_changed_at: i64,
    pub missing_since: Option<i64>,
    pub tombstoned_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AliasRow {
    pub id: i64,
    pub space_address: SpaceAddress,
    pub kind: AliasKind,
    pub value: String,
    pub raw: String,
    pub valid_from: i64,
    pub valid_to: Option<i64>,
}

impl AliasRow {
    pub fn is_active(&self) -> bool {
        self.valid_to.is_none()
    }
}

/// What applying one page of records changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PageStats {
    pub created: u64,
    pub updated: u64,
    pub renamed: u64,
    pub unchanged: u64,
    /// Records a person's connection saw that belong to someone else:
    /// only the sighting was recorded.
    pub skipped_foreign: u64,
    /// Private spaces that became company-owned.
    pub taken_over: u64,
    /// In a listing run: records whose space this run had already listed,
    /// on this page or an earlier one (their sighting was already stamped
    /// with the run). A listing that serves a space twice shifted under its
    /// reader, so it may have skipped another: the run is not complete.
    pub repeated: u64,
}

#[derive(Debug, Clone, Default)]
pub struct SpaceFilter {
    /// Spaces this connection has a sighting of (in any state).
    pub connection_id: Option<String>,
    pub status: Option<SpaceStatus>,
    pub limit: i64,
    pub offset: i64,
}

#[derive(sqlx::FromRow)]
pub(super) struct RawSpace {
    pub(super) address: String,
    pub(super) connection_id: String,
    pub(super) owner: String,
    pub(super) display_name: String,
    pub(super) container: Option<String>,
    pub(super) status: String,
    pub(super) archived: bool,
    pub(super) trashed: bool,
    pub(super) visibility: Option<String>,
    pub(super) first_seen_at: i64,
    pub(super) last_changed_at: i64,
    pub(super) missing_since: Option<i64>,
    pub(super) tombstoned_at: Option<i64>,
}

impl TryFrom<RawSpace> for SpaceRow {
    type Error = RegistryError;

    fn try_from(r: RawSpace) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("space {}: {what}", r.address),
        };
        Ok(SpaceRow {
            address: r.address.parse().map_err(|_| corrupt("address"))?,
            container: r
                .container
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|_| corrupt("container"))?,
            status: r.status.parse().map_err(|_| corrupt("status"))?,
            visibility: r.visibility.as_deref().and_then(|v| v.parse().ok()),
            owner: Owner::from_db(&r.owner),
            connection_id: r.connection_id,
            display_name: r.display_name,
            archived: r.archived,
            trashed: r.trashed,
            first_seen_at: r.first_seen_at,
            last_changed_at: r.last_changed_at,
            missing_since: r.missing_since,
            tombstoned_at: r.tombstoned_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct RawAlias {
    pub(super) id: i64,
    pub(super) space_address: String,
    pub(super) kind: String,
    pub(super) value: String,
    pub(super) raw: String,
    pub(super) valid_from: i64,
    pub(super) valid_to: Option<i64>,
}

impl TryFrom<RawAlias> for AliasRow {
    type Error = RegistryError;

    fn try_from(r: RawAlias) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("alias {}: {what}", r.id),
        };
        Ok(AliasRow {
            space_address: r
                .space_address
                .parse()
                .map_err(|_| corrupt("space address"))?,
            kind: r.kind.parse().map_err(|_| corrupt("kind"))?,
            id: r.id,
            value: r.value,
            raw: r.raw,
            valid_from: r.valid_from,
            valid_to: r.valid_to,
        })
    }
}

pub(super) const SPACE_COLUMNS: &str = "address, connection_id, owner, display_name, container, status, archived, trashed, \
    visibility, first_seen_at, last_changed_at, missing_since, tombstoned_at";
pub(super) const ALIAS_COLUMNS: &str = "id, space_address, kind, value, raw, valid_from, valid_to";

/// Rows per multi-row statement: 100 rows × 8 columns stays far below both
/// dialects' bound-parameter limits.
const CHUNK: usize = 100;

/// The decision for one record of a page, computed before any write.
enum Plan<'a> {
    Create(&'a SpaceRecord),
    Change {
        record: &'a SpaceRecord,
        retire: Vec<i64>,
        add: Vec<&'a Alias>,
        renamed: bool,
        /// The private owner a company connection takes the space from.
        taken_from: Option<Owner>,
        /// What the change means for the drift report.
        kinds: Vec<DriftKind>,
    },
    Unchanged,
    Foreign,
}

fn plan<'a>(
    record: &'a SpaceRecord,
    existing: Option<&SpaceRow>,
    active: &[AliasRow],
    owner: &Owner,
) -> Plan<'a> {
    let Some(ex) = existing else {
        return Plan::Create(record);
    };
    // A person's token only ever writes that person's spaces; of any other
    // it records its sighting and nothing else.
    if !may_write(owner, &ex.owner) {
        return Plan::Foreign;
    }
    let taken_from = match (owner, &ex.owner) {
        (Owner::Company, Owner::Person(_)) => Some(ex.owner.clone()),
        _ => None,
    };
    let wanted: BTreeMap<(AliasKind, &str), &Alias> = record
        .aliases
        .iter()
        .map(|a| ((a.kind, a.value.as_str()), a))
        .collect();
    let have: HashSet<(AliasKind, &str)> =
        active.iter().map(|a| (a.kind, a.value.as_str())).collect();
    let retire: Vec<&AliasRow> = active
        .iter()
        .filter(|a| !wanted.contains_key(&(a.kind, a.value.as_str())))
        .collect();
    let add: Vec<&Alias> = wanted
        .iter()
        .filter(|(k, _)| !have.contains(*k))
        .map(|(_, a)| *a)
        .collect();
    let fields_changed = ex.display_name != record.display_name
        || ex.container != record.container
        || ex.archived != record.state.archived
        || ex.trashed != record.state.trashed
        || ex.visibility != record.state.visibility
        || ex.status != SpaceStatus::Active
        || taken_from.is_some();
    if !fields_changed && retire.is_empty() && add.is_empty() {
        return Plan::Unchanged;
    }
    let naming = |k: AliasKind| matches!(k, AliasKind::FullName | AliasKind::Name | AliasKind::Key);
    let renamed = retire.iter().any(|a| naming(a.kind))
        || (add.iter().any(|a| naming(a.kind)) && !active.is_empty());
    let touched = |k: AliasKind| {
        retire.iter().any(|a| a.kind == k)
            || (add.iter().any(|a| a.kind == k) && !active.is_empty())
    };
    let mut kinds = Vec::new();
    if ex.status != SpaceStatus::Active {
        kinds.push(DriftKind::Reappeared);
    }
    if touched(AliasKind::FullName) || touched(AliasKind::Name) {
        kinds.push(DriftKind::Renamed);
    }
    if touched(AliasKind::Key) {
        kinds.push(DriftKind::KeyChanged);
    }
    match (ex.archived, record.state.archived) {
        (false, true) => kinds.push(DriftKind::Archived),
        (true, false) => kinds.push(DriftKind::Unarchived),
        _ => {}
    }
    if !ex.trashed && record.state.trashed {
        kinds.push(DriftKind::Trashed);
    }
    Plan::Change {
        record,
        retire: retire.iter().map(|a| a.id).collect(),
        add,
        renamed,
        taken_from,
        kinds,
    }
}

impl Store {
    /// Upsert one page of records read by `connection_id` (owned by
    /// `owner`), keyed on stable id, in one transaction. Every record
    /// records the connection's sighting. A new space is registered with the
    /// connection's owner side; an existing one is written only when the
    /// connection may write it (a company connection, or the private
    /// owner's): a person's connection never changes a company space or
    /// another person's. A company connection seeing a private space makes
    /// it company-owned and records the change. Renames and transfers
    /// retire the old aliases and add the new ones; the address never
    /// changes. Writes nothing for a record that is unchanged.
    pub async fn apply_page(
        &self,
        connection_id: &str,
        owner: &Owner,
        records: &[SpaceRecord],
    ) -> Result<PageStats> {
        // Two connections reading the same catalogue (or a webhook refresh
        // racing a sync) can both see a space as new and both insert it; the
        // loser's transaction rolls back whole. Reading the page again then
        // finds the winner's rows and applies the difference.
        Ok(self
            .apply_page_noting(connection_id, owner, records)
            .await?
            .0)
    }

    /// [`Store::apply_page`], also saying what it changed in each space
    /// (created, renamed, archived…), for the drift report.
    pub async fn apply_page_noting(
        &self,
        connection_id: &str,
        owner: &Owner,
        records: &[SpaceRecord],
    ) -> Result<(PageStats, Vec<SpaceChange>)> {
        let mut attempt = 0;
        loop {
            match self
                .apply_page_once(connection_id, owner, records, None)
                .await
            {
                Err(RegistryError::AlreadyExists { .. }) if attempt < 3 => attempt += 1,
                other => return other,
            }
        }
    }

    /// [`Store::apply_page_noting`] for a page of the listing run `run_id`:
    /// each record's sighting is also stamped with the run, so that the
    /// end of a complete listing finds what it did not see in the store
    /// ([`Store::missing_preview_of_run`], [`Store::mark_unseen_by_run`]).
    pub async fn apply_listed_page(
        &self,
        connection_id: &str,
        owner: &Owner,
        run_id: &str,
        records: &[SpaceRecord],
    ) -> Result<(PageStats, Vec<SpaceChange>)> {
        let mut attempt = 0;
        loop {
            match self
                .apply_page_once(connection_id, owner, records, Some(run_id))
                .await
            {
                Err(RegistryError::AlreadyExists { .. }) if attempt < 3 => attempt += 1,
                other => return other,
            }
        }
    }

    async fn apply_page_once(
        &self,
        connection_id: &str,
        owner: &Owner,
        records: &[SpaceRecord],
        run_id: Option<&str>,
    ) -> Result<(PageStats, Vec<SpaceChange>)> {
        // Last reading wins when a page repeats a space.
        let mut by_address: BTreeMap<SpaceAddress, SpaceRecord> = BTreeMap::new();
        for r in records {
            let mut r = r.clone();
            r.aliases = r.canonical_aliases();
            by_address.insert(r.address.clone(), r);
        }
        if by_address.is_empty() {
            return Ok((PageStats::default(), Vec::new()));
        }
        let addresses: Vec<String> = by_address.keys().map(|a| a.to_string()).collect();
        let now = now_ms();
        let owner_db = owner.as_db();
        let mut stats = PageStats::default();
        let mut changes: Vec<SpaceChange> = Vec::new();

        // Every statement below binds its values in the order they appear,
        // each once, so SQLite takes them by position (see `marks`).
        let backend = self.backend();
        let existing_sql = format!(
            "SELECT {SPACE_COLUMNS} FROM spaces WHERE address IN ({})",
            marks(backend, 1, addresses.len())
        );
        let alias_sql = format!(
            "SELECT {ALIAS_COLUMNS} FROM aliases WHERE valid_to IS NULL AND space_address IN ({})",
            marks(backend, 1, addresses.len())
        );

        in_tx!(self, tx => {
            let mut q = sqlx::query_as::<_, RawSpace>(sqlx::AssertSqlSafe(existing_sql));
            for a in &addresses {
                q = q.bind(a);
            }
            let existing: HashMap<SpaceAddress, SpaceRow> = q
                .fetch_all(&mut *tx).await?
                .into_iter()
                .map(|r| SpaceRow::try_from(r).map(|s| (s.address.clone(), s)))
                .collect::<Result<_>>()?;
            let mut q = sqlx::query_as::<_, RawAlias>(sqlx::AssertSqlSafe(alias_sql));
            for a in &addresses {
                q = q.bind(a);
            }
            let mut active: HashMap<SpaceAddress, Vec<AliasRow>> = HashMap::new();
            for raw in q.fetch_all(&mut *tx).await? {
                let row = AliasRow::try_from(raw)?;
                active.entry(row.space_address.clone()).or_default().push(row);
            }

            let mut creates: Vec<&SpaceRecord> = Vec::new();
            let mut new_aliases: Vec<(&SpaceAddress, &Alias)> = Vec::new();
            let mut retire_ids: Vec<i64> = Vec::new();
            for record in by_address.values() {
                let none: Vec<AliasRow> = Vec::new();
                let have = active.get(&record.address).unwrap_or(&none);
                match plan(record, existing.get(&record.address), have, owner) {
                    Plan::Create(r) => {
                        stats.created += 1;
                        changes.push(SpaceChange { address: r.address.clone(), kind: DriftKind::Created });
                        creates.push(r);
                        new_aliases.extend(r.aliases.iter().map(|a| (&r.address, a)));
                    }
                    Plan::Change { record: r, retire, add, renamed, taken_from, kinds } => {
                        if renamed { stats.renamed += 1 } else { stats.updated += 1 }
                        changes.extend(kinds.into_iter().map(|kind| SpaceChange { address: r.address.clone(), kind }));
                        retire_ids.extend(retire);
                        new_aliases.extend(add.into_iter().map(|a| (&r.address, a)));
                        if let Some(from) = taken_from {
                            stats.taken_over += 1;
                            let person = match &from { Owner::Person(p) => Some(p.clone()), Owner::Company => None };
                            sqlx::query(
                                "INSERT INTO owner_changes (space_address, from_owner, to_owner, person, connection_id, at) \
                                 VALUES ($1, $2, $3, $4, $5, $6)",
                            )
                            .bind(r.address.to_string())
                            .bind(from.as_db())
                            .bind(&owner_db)
                            .bind(person)
                            .bind(connection_id)
                            .bind(now)
                            .execute(&mut *tx).await?;
                        }
                        sqlx::query(
                            "UPDATE spaces SET owner = $1, display_name = $2, container = $3, \
                             status = 'active', archived = $4, trashed = $5, visibility = $6, last_changed_at = $7, \
                             missing_since = NULL, tombstoned_at = NULL WHERE address = $8",
                        )
                        .bind(&owner_db)
                        .bind(&r.display_name)
                        .bind(r.container.as_ref().map(|c| c.to_string()))
                        .bind(r.state.archived)
                        .bind(r.state.trashed)
                        .bind(r.state.visibility.map(|v| v.as_str()))
                        .bind(now)
                        .bind(r.address.to_string())
                        .execute(&mut *tx).await?;
                    }
                    Plan::Unchanged => stats.unchanged += 1,
                    Plan::Foreign => stats.skipped_foreign += 1,
                }
            }

            // A new space's aliases are written before the space, so the
            // change feed's `space-created` row lists them and they get no
            // row each (see 20261207200000). SQLite checks the aliases' key
            // to their space at commit instead (it resets at the commit).
            if matches!(backend, Backend::Sqlite) && !creates.is_empty() {
                sqlx::query("PRAGMA defer_foreign_keys = ON").execute(&mut *tx).await?;
            }
            // Retire before adding: a value can come back (renamed back and
            // forth), and only one active row per value may exist.
            for chunk in retire_ids.chunks(CHUNK * 4) {
                let sql = format!("UPDATE aliases SET valid_to = {} WHERE valid_to IS NULL AND id IN ({})", marks(backend, 1, 1), marks(backend, 2, chunk.len()));
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now);
                for id in chunk {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
            }
            for chunk in new_aliases.chunks(CHUNK * 2) {
                let rows: Vec<String> = (0..chunk.len()).map(|i| format!("({})", marks(backend, 1 + i * 5, 5))).collect();
                let sql = format!("INSERT INTO aliases (space_address, kind, value, raw, valid_from) VALUES {}", rows.join(", "));
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (address, a) in chunk {
                    q = q.bind(address.to_string()).bind(a.kind.as_str()).bind(&a.value).bind(&a.raw).bind(now);
                }
                q.execute(&mut *tx).await?;
            }
            for chunk in creates.chunks(CHUNK) {
                let rows: Vec<String> = (0..chunk.len()).map(|i| format!("({}, 'active', {})", marks(backend, 1 + i * 13, 11), marks(backend, 12 + i * 13, 2))).collect();
                let sql = format!(
                    "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, container, \
                     archived, trashed, visibility, status, first_seen_at, last_changed_at) VALUES {}",
                    rows.join(", ")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for r in chunk {
                    q = q.bind(r.address.to_string())
                        .bind(r.address.kind().as_str())
                        .bind(r.address.tenant().to_owned())
                        .bind(r.address.stable_id().to_owned())
                        .bind(connection_id)
                        .bind(&owner_db)
                        .bind(&r.display_name)
                        .bind(r.container.as_ref().map(|c| c.to_string()))
                        .bind(r.state.archived)
                        .bind(r.state.trashed)
                        .bind(r.state.visibility.map(|v| v.as_str()))
                        .bind(now)
                        .bind(now);
                }
                q.execute(&mut *tx).await?;
            }
            // Whatever else happened, this connection saw every record. In
            // a listing run, a sighting already stamped with the run is left
            // alone, so the rows not written are the spaces listed before.
            let mut stamped = 0;
            for chunk in addresses.chunks(CHUNK * 4) {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(upsert_seen_sql(backend, chunk.len())))
                    .bind(now)
                    .bind(now - SIGHTING_REFRESH_MS)
                    .bind(connection_id)
                    .bind(run_id);
                match backend {
                    Backend::Postgres => {
                        for a in chunk {
                            q = q.bind(a);
                        }
                    }
                    Backend::Sqlite => q = q.bind(sqlx::types::Json(chunk)),
                }
                stamped += q.execute(&mut *tx).await?.rows_affected();
            }
            if run_id.is_some() {
                let within_page = (records.len() - by_address.len()) as u64;
                stats.repeated = within_page + (addresses.len() as u64).saturating_sub(stamped);
            }
        });
        Ok((stats, changes))
    }

    pub async fn get_space(&self, address: &SpaceAddress) -> Result<Option<SpaceRow>> {
        let sql = format!("SELECT {SPACE_COLUMNS} FROM spaces WHERE address = $1");
        let raw: Option<RawSpace> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(address.to_string()).fetch_optional(pool).await?
        });
        raw.map(TryInto::try_into).transpose()
    }

    pub async fn list_spaces(&self, filter: &SpaceFilter) -> Result<Vec<SpaceRow>> {
        let sql = format!(
            "SELECT {SPACE_COLUMNS} FROM spaces WHERE ($1 IS NULL OR address IN \
             (SELECT space_address FROM sightings WHERE connection_id = $1)) AND ($2 IS NULL OR status = $2) \
             ORDER BY address LIMIT $3 OFFSET $4"
        );
        let limit = if filter.limit <= 0 {
            i64::MAX
        } else {
            filter.limit
        };
        let raws: Vec<RawSpace> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(filter.connection_id.as_deref())
                .bind(filter.status.map(|s| s.as_str()))
                .bind(limit)
                .bind(filter.offset)
                .fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn count_spaces(
        &self,
        connection_id: Option<&str>,
        status: Option<SpaceStatus>,
    ) -> Result<u64> {
        let (n,): (i64,) = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT COUNT(*) FROM spaces WHERE ($1 IS NULL OR address IN \
                 (SELECT space_address FROM sightings WHERE connection_id = $1)) AND ($2 IS NULL OR status = $2)",
            )
                .bind(connection_id).bind(status.map(|s| s.as_str())).fetch_one(pool).await?
        });
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every alias the space ever had, oldest first.
    pub async fn alias_history(&self, address: &SpaceAddress) -> Result<Vec<AliasRow>> {
        let sql = format!(
            "SELECT {ALIAS_COLUMNS} FROM aliases WHERE space_address = $1 ORDER BY valid_from, id"
        );
        let raws: Vec<RawAlias> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(address.to_string()).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// Active aliases of every space a connection sees, for comparisons.
    pub async fn active_aliases(&self, connection_id: &str) -> Result<Vec<AliasRow>> {
        let raws: Vec<RawAlias> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT a.id, a.space_address, a.kind, a.value, a.raw, a.valid_from, a.valid_to FROM aliases a \
                 JOIN sightings g ON g.space_address = a.space_address WHERE g.connection_id = $1 AND a.valid_to IS NULL \
                 ORDER BY a.space_address, a.kind, a.value",
            )
            .bind(connection_id)
            .fetch_all(pool)
            .await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }
}
