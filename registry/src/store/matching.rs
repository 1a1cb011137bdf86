//! What matching reads and writes besides places and proposals: the
//! spaces it compares (whole, for the full recompute; by index, for the
//! incremental one), its position in the change feed, the few changes the
//! feed does not carry (`matching_dirty`), and a round of proposals stored
//! for a chosen set of containers only.
//!
//! Every lookup takes a list of values and runs one query per chunk of
//! [`CHUNK`] (both dialects bind `$n` placeholders; no value is ever
//! written into the SQL text).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmcp_domain::SpaceKind;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Postgres};
use tokio::sync::OwnedMutexGuard;

use super::changes::{ChangeRow, Cursor};
use super::places::{PLACE_COLUMNS, RawPlace};
use super::proposals::{MappingRow, MatchAliasRow, MatchSpaceRow};
use super::write_turn::Purpose;
use super::{Store, on_pool};
use crate::error::Result;

/// Values bound per statement (below SQLite's and PostgreSQL's limits).
const CHUNK: usize = 500;

/// The one position row of the ladder in `matching_position`.
const POSITION: &str = "ladder";

/// A company space that is not tombstoned: what matching compares (a
/// person's spaces never become company proposals, DESIGN rule 6).
const ELIGIBLE: &str = "s.status <> 'tombstoned' AND s.owner = 'company'";

/// [`ELIGIBLE`] as SQLite must read it: with no statistics its planner
/// takes `s.owner = 'company'` for a selective lookup and reads every
/// company space through `spaces_by_owner` instead of the few the query
/// names by address or container (a registry of 200,000 spaces: 50–90 ms
/// a lookup instead of well under one). The unary `+` keeps the owner
/// test out of index selection; PostgreSQL has statistics, and no such
/// operator on text.
const ELIGIBLE_SQLITE: &str = "s.status <> 'tombstoned' AND +s.owner = 'company'";

/// The advisory lock a round of mapping proposals holds on PostgreSQL
/// ("cmcpmatc" in ASCII): one key for the whole database, every process.
const MATCHING_LOCK: i64 = 0x636d_6370_6d61_7463;

/// One round of mapping proposals' turn, across every process of the
/// store: this process's turn for the database, and on PostgreSQL then the
/// advisory lock [`MATCHING_LOCK`] on a connection of its own (one process
/// holds an embedded SQLite store).
///
/// Rounds take turns because each reads the registry, computes, and then
/// writes the proposals of what it read: a round that read before another
/// committed, and committed after it, would put back proposals from the
/// older view while the ladder's position (which only moves forward) had
/// moved past the changes that made them old, until the nightly full
/// recompute. A round that waited reads after the one before committed.
///
/// [`MatchingTurn::end`] gives the turn back. A turn dropped instead (a
/// round that failed by panic, or was cancelled) closes its connection,
/// which ends the lock with the session, rather than return to the pool
/// a connection that still holds it.
///
/// A round of one person's suggestions takes a turn of the same kind
/// ([`Store::suggestion_turn`]), for the same reason: two rounds for one
/// person (two of their connections syncing at once, a company sync and
/// an ADMIN decision reaching them together) could otherwise commit in the
/// wrong order and leave the older view stored until the next round. Its
/// advisory lock is the person's ([`SUGGESTIONS_LOCK`] and the hash of
/// their name); in this process one such round runs at a time, so rounds
/// waiting for another process hold one connection of the pool.
pub struct MatchingTurn {
    connection: Option<PoolConnection<Postgres>>,
    _local: OwnedMutexGuard<()>,
    /// The person whose suggestions the turn is for; `None`: proposals.
    person: Option<String>,
}

/// The class of a person's suggestions' advisory lock on PostgreSQL
/// ("cmcs" in ASCII), the second key the hash of their name: the two-key
/// locks never meet the one-key [`MATCHING_LOCK`].
const SUGGESTIONS_LOCK: i32 = 0x636d_6373;

impl MatchingTurn {
    /// Give the turn back. Should the unlock fail, or this be cancelled,
    /// the turn is dropped (and its connection closed).
    pub async fn end(mut self) -> Result<()> {
        self.advisory(false).await?;
        // Unlocked: the connection goes back to the pool.
        self.connection = None;
        Ok(())
    }

    /// Take (`lock`) or give back the turn's advisory lock on its
    /// connection; nothing on SQLite, which has none.
    async fn advisory(&mut self, lock: bool) -> Result<()> {
        if let Some(connection) = self.connection.as_mut() {
            advisory_lock(self.person.as_deref(), lock)
                .execute(&mut **connection)
                .await?;
        }
        Ok(())
    }
}

/// The statement that takes (`lock`) or gives back a round's advisory lock
/// on PostgreSQL: the proposals' [`MATCHING_LOCK`], or `person`'s
/// ([`SUGGESTIONS_LOCK`] with the hash of their name). The test kit's
/// "another process" takes it with this too.
pub(crate) fn advisory_lock(
    person: Option<&str>,
    lock: bool,
) -> sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments> {
    match (person, lock) {
        (None, true) => sqlx::query("SELECT pg_advisory_lock($1)").bind(MATCHING_LOCK),
        (None, false) => sqlx::query("SELECT pg_advisory_unlock($1)").bind(MATCHING_LOCK),
        (Some(person), true) => sqlx::query("SELECT pg_advisory_lock($1, hashtext($2))")
            .bind(SUGGESTIONS_LOCK)
            .bind(person),
        (Some(person), false) => sqlx::query("SELECT pg_advisory_unlock($1, hashtext($2))")
            .bind(SUGGESTIONS_LOCK)
            .bind(person),
    }
}

impl Drop for MatchingTurn {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.as_mut() {
            connection.close_on_drop();
        }
    }
}

/// Alias kinds matching reads: keys and fingerprints.
const MATCH_KINDS: &str = "('key', 'git-remote', 'host-id', 'first-commit')";

/// A change the feed does not carry (see the migration).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DirtyRow {
    pub id: i64,
    pub space_address: String,
    pub old_container: Option<String>,
}

/// What happened since matching last looked.
#[derive(Debug, Clone)]
pub struct MatchBacklog {
    /// Feed rows after the stored position, oldest first, then (PostgreSQL)
    /// the committed rows the horizon still holds back, which `next` does
    /// not pass.
    pub changes: Vec<ChangeRow>,
    pub dirty: Vec<DirtyRow>,
    /// Where the feed was read to.
    pub next: Cursor,
    /// More than the limit is waiting: recompute everything instead.
    pub overflow: bool,
}

/// A space sharing a fingerprint (or key) that was looked up.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SharingRow {
    pub address: String,
    pub container: Option<String>,
    pub kind: String,
    pub value: String,
}

/// How long a round of mapping proposals waits for its turn before the
/// wait is logged ([`Store::matching_turn`]): longer than a full recompute
/// of a 1,000,000-space registry takes.
pub const MATCHING_WAIT_WARNING: Duration = Duration::from_secs(60);

/// Tests: the wait logged after this many milliseconds instead (0: as
/// [`MATCHING_WAIT_WARNING`]).
#[cfg(any(test, feature = "testing"))]
pub(crate) static MATCHING_WAIT_WARNING_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

fn matching_wait_warning() -> Duration {
    #[cfg(any(test, feature = "testing"))]
    {
        let ms = MATCHING_WAIT_WARNING_MS.load(std::sync::atomic::Ordering::Relaxed);
        if ms > 0 {
            return Duration::from_millis(ms);
        }
    }
    MATCHING_WAIT_WARNING
}

/// Await `wait` (`round`'s wait for its turn, held by `whom`), logging a
/// warning each [`matching_wait_warning`] it lasts. The wait itself is
/// never dropped: the warning is written beside it.
async fn said_if_long<F: std::future::Future>(
    wait: F,
    started: Instant,
    round: &str,
    whom: &str,
) -> F::Output {
    tokio::pin!(wait);
    loop {
        tokio::select! {
            out = &mut wait => return out,
            () = tokio::time::sleep(matching_wait_warning()) => {
                tracing::warn!(
                    waited_ms = started.elapsed().as_millis() as u64,
                    held_by = whom,
                    "{round} is still waiting for its turn: the round before has not ended"
                );
            }
        }
    }
}

/// The person a space's `owner` column names, if a person.
fn person_of(owner: &str) -> Option<String> {
    match cmcp_domain::Owner::from_db(owner) {
        cmcp_domain::Owner::Person(p) => Some(p),
        cmcp_domain::Owner::Company => None,
    }
}

/// `$start, $start+1, …` for `n` values.
fn params(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One query per chunk of `values`; `sql` holds `{in}` where the list goes.
/// With `$first`, that is bound as `$1` in every query and the list
/// follows it.
macro_rules! fetch_chunks {
    (@from $start:expr, $store:expr, $row:ty, $sql:expr, $values:expr $(, $first:expr)?) => {{
        let mut out: Vec<$row> = Vec::new();
        for chunk in $values.chunks(CHUNK) {
            let sql = $sql.replace("{in}", &params($start, chunk.len()));
            let rows: Vec<$row> = on_pool!($store, pool => {
                let mut q = sqlx::query_as(AssertSqlSafe(sql)) $(.bind($first))?;
                for v in chunk {
                    q = q.bind(v);
                }
                q.fetch_all(pool).await?
            });
            out.extend(rows);
        }
        out
    }};
    ($store:expr, $row:ty, $sql:expr, $values:expr) => {
        fetch_chunks!(@from 1, $store, $row, $sql, $values)
    };
    ($store:expr, $row:ty, $sql:expr, $first:expr, $values:expr) => {
        fetch_chunks!(@from 2, $store, $row, $sql, $values, $first)
    };
}

impl Store {
    /// Wait for this round of mapping proposals' turn ([`MatchingTurn`]):
    /// as long as the round before takes, which a full recompute of a
    /// large registry makes seconds. A wait longer than
    /// [`MATCHING_WAIT_WARNING`] is logged, and again after each as long
    /// (a round that holds the turn that long is likely stuck, and every
    /// later round waits behind it); the wait goes on.
    pub async fn matching_turn(&self) -> Result<MatchingTurn> {
        self.turn(None).await
    }

    /// Wait for the turn of a round of `person`'s suggestions (see
    /// [`MatchingTurn`]), logged as [`Store::matching_turn`]'s wait is.
    pub async fn suggestion_turn(&self, person: &str) -> Result<MatchingTurn> {
        self.turn(Some(person.to_owned())).await
    }

    async fn turn(&self, person: Option<String>) -> Result<MatchingTurn> {
        let started = Instant::now();
        let (purpose, round) = match person {
            Some(_) => (Purpose::Suggestions, "a round of a person's suggestions"),
            None => (Purpose::Matching, "a round of mapping proposals"),
        };
        let local = said_if_long(
            super::write_turn::matching(self, purpose),
            started,
            round,
            "this process",
        )
        .await;
        // The turn owns the connection before it asks for the lock: a wait
        // that is cancelled drops the turn, and so closes the connection
        // the lock may have been granted on.
        let mut turn = MatchingTurn {
            connection: match self {
                Store::Sqlite(_) => None,
                Store::Postgres(pool) => Some(pool.acquire().await?),
            },
            _local: local,
            person,
        };
        said_if_long(turn.advisory(true), started, round, "another process").await?;
        let waited = started.elapsed();
        if waited >= matching_wait_warning() {
            tracing::info!(
                waited_ms = waited.as_millis() as u64,
                "{round} took its turn after a long wait"
            );
        }
        Ok(turn)
    }

    /// The [`ELIGIBLE`] filter in this store's dialect.
    fn eligible(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => ELIGIBLE_SQLITE,
            Store::Postgres(_) => ELIGIBLE,
        }
    }

    /// [`Store::eligible`] when `eligible`, else no filter.
    fn filter(&self, eligible: bool) -> &'static str {
        if eligible { self.eligible() } else { "1 = 1" }
    }

    /// The spaces whose `column` (`address` for [`Store::match_spaces_at`],
    /// `container` for [`Store::match_children_of`]) is in the list, `{in}`.
    fn spaces_in_sql(&self, column: &str, eligible: bool) -> String {
        format!(
            "SELECT s.address, s.kind, s.display_name, s.container FROM spaces s \
             WHERE s.{column} IN ({{in}}) AND {}",
            self.filter(eligible)
        )
    }

    /// [`Store::match_telling_children_of`]'s statement, `{in}` for the
    /// list (see there for why it is written so).
    fn telling_children_sql(&self) -> String {
        format!(
            "SELECT s.address, s.kind, s.display_name, s.container FROM spaces s \
             WHERE s.container IN ({{in}}) AND {eligible} \
             AND (SELECT 1 FROM mappings LIMIT 1) IS NOT NULL AND ( \
               (s.name_prefix IS NOT NULL AND EXISTS ( \
                  SELECT 1 FROM aliases k \
                  WHERE k.kind = 'key' AND k.value = LOWER(s.name_prefix) AND k.valid_to IS NULL \
                    AND EXISTS (SELECT 1 FROM mappings m WHERE m.space_address = k.space_address))) \
               OR EXISTS ( \
                  SELECT 1 FROM aliases a CROSS JOIN aliases b \
                  JOIN spaces o ON o.address = b.space_address \
                  WHERE a.space_address = s.address AND a.valid_to IS NULL \
                    AND a.kind IN ('git-remote', 'host-id', 'first-commit') \
                    AND b.kind = a.kind AND b.value = a.value AND b.valid_to IS NULL \
                    AND b.space_address <> a.space_address \
                    AND o.status <> 'tombstoned' AND o.owner = 'company' \
                    AND (EXISTS (SELECT 1 FROM mappings m WHERE m.space_address = o.address) \
                         OR EXISTS (SELECT 1 FROM mappings m WHERE m.space_address = o.container))))",
            eligible = self.eligible()
        )
    }

    /// Every company space that is not tombstoned, for the full recompute.
    pub async fn match_spaces(&self) -> Result<Vec<MatchSpaceRow>> {
        let sql = format!(
            "SELECT s.address, s.kind, s.display_name, s.container FROM spaces s WHERE {eligible} ORDER BY s.address",
            eligible = self.eligible()
        );
        Ok(on_pool!(self, pool => {
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await?
        }))
    }

    /// Active aliases of the kinds matching compares (keys, remotes, host
    /// ids, root commits) of every eligible space.
    pub async fn match_aliases(&self) -> Result<Vec<MatchAliasRow>> {
        let sql = format!(
            "SELECT a.space_address, a.kind, a.value FROM aliases a JOIN spaces s ON s.address = a.space_address \
             WHERE a.valid_to IS NULL AND {eligible} AND a.kind IN {MATCH_KINDS} \
             ORDER BY a.space_address, a.kind, a.value",
            eligible = self.eligible()
        );
        Ok(on_pool!(self, pool => {
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await?
        }))
    }

    /// The spaces at `addresses`; `eligible` keeps only what matching
    /// compares.
    pub async fn match_spaces_at(
        &self,
        addresses: &[String],
        eligible: bool,
    ) -> Result<Vec<MatchSpaceRow>> {
        let sql = self.spaces_in_sql("address", eligible);
        Ok(fetch_chunks!(self, MatchSpaceRow, sql, addresses))
    }

    /// The spaces inside the `containers`.
    pub async fn match_children_of(
        &self,
        containers: &[String],
        eligible: bool,
    ) -> Result<Vec<MatchSpaceRow>> {
        let sql = self.spaces_in_sql("container", eligible);
        Ok(fetch_chunks!(self, MatchSpaceRow, sql, containers))
    }

    /// The spaces inside the `containers` that can give a container
    /// evidence: a fingerprint shared with another company space that is
    /// mapped or sits in a mapped container, or a name headed by a mapped
    /// space's key (keys are stored lower-case, and a Jira key is ASCII).
    /// A superset (the ladder checks the exact rules); no other child gives
    /// evidence, so an organisation of 100,000 repos reads only the few
    /// that do. Every test is a lookup by index from the child (a mapped
    /// key or mapping looked up, never collected): the cost follows the
    /// children read, not the registry. `CROSS JOIN` is an inner join
    /// with its condition in `WHERE` in both dialects, and keeps SQLite's
    /// planner (which has no statistics) from starting at every alias of a
    /// kind instead of the child's own. The sharing space `o` is reached by
    /// its primary key, so its company test is written plainly: with the
    /// `+` of [`ELIGIBLE_SQLITE`] SQLite picked that bad order again.
    ///
    /// Both tests need a mapping somewhere, so with none (a first sync,
    /// before any ADMIN decision) no child can tell anything: the
    /// uncorrelated `(SELECT 1 FROM mappings LIMIT 1) IS NOT NULL` is
    /// evaluated once (a one-time filter on PostgreSQL, a subquery SQLite
    /// runs once, before the loop) and no child is tested. (Written as
    /// `EXISTS`, SQLite makes it a loop inside the children's, tried
    /// after the costly tests.) Without it, the first sync
    /// of 100,000 repositories on PostgreSQL spent 1.1 s here on 300,000
    /// index lookups that could find nothing.
    pub async fn match_telling_children_of(
        &self,
        containers: &[String],
    ) -> Result<Vec<MatchSpaceRow>> {
        let sql = self.telling_children_sql();
        Ok(fetch_chunks!(self, MatchSpaceRow, sql, containers))
    }

    /// Up to `limit` addresses of company containers that are not
    /// tombstoned, in address order after `after` (the full recompute's
    /// pages).
    pub async fn match_containers_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let kinds = SpaceKind::ALL
            .into_iter()
            .filter(|k| k.is_container())
            .map(|k| format!("'{}'", k.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT s.address FROM spaces s WHERE s.kind IN ({kinds}) AND {eligible} AND s.address > $1 \
             ORDER BY s.address LIMIT $2",
            eligible = self.eligible()
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(on_pool!(self, pool => {
            let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(sql))
                .bind(after.unwrap_or("")).bind(limit).fetch_all(pool).await?;
            rows.into_iter().map(|r| r.0).collect()
        }))
    }

    /// Statistics of `proposals` brought up to date after a full recompute
    /// rewrote it (PostgreSQL; SQLite keeps none and its queries do not
    /// need them). Without them the planner takes its default guess for
    /// `container IN (…)`, a fifth of the table for 40 containers, and
    /// reads the whole table for every incremental refresh until
    /// autovacuum gets to it (a minute by default, never when it is off).
    pub async fn analyze_proposals(&self) -> Result<()> {
        if let Store::Postgres(pool) = self {
            sqlx::query("ANALYZE proposals").execute(pool).await?;
        }
        Ok(())
    }

    /// Supersede the open proposals of containers that matching no longer
    /// compares (tombstoned, taken over by a person, or gone): the full
    /// recompute's last step, since its pages only reach the others.
    pub async fn supersede_proposals_of_ineligible(&self) -> Result<u64> {
        let sql = format!(
            "UPDATE proposals SET state = 'superseded' WHERE state = 'proposed' AND NOT EXISTS \
             (SELECT 1 FROM spaces s WHERE s.address = proposals.container AND {eligible})",
            eligible = self.eligible()
        );
        Ok(on_pool!(self, pool => {
            sqlx::query(AssertSqlSafe(sql)).execute(pool).await?.rows_affected()
        }))
    }

    /// Active keys and fingerprints of the spaces at `addresses`.
    pub async fn match_aliases_of(&self, addresses: &[String]) -> Result<Vec<MatchAliasRow>> {
        let sql = format!(
            "SELECT a.space_address, a.kind, a.value FROM aliases a \
             WHERE a.space_address IN ({{in}}) AND a.valid_to IS NULL AND a.kind IN {MATCH_KINDS}"
        );
        Ok(fetch_chunks!(self, MatchAliasRow, sql, addresses))
    }

    /// Spaces with an active alias of `kind` whose value is one of
    /// `values` (by the `(kind, value)` index).
    pub async fn match_sharing(
        &self,
        kind: &str,
        values: &[String],
        eligible: bool,
    ) -> Result<Vec<SharingRow>> {
        let sql = format!(
            "SELECT s.address, s.container, a.kind, a.value FROM aliases a \
             JOIN spaces s ON s.address = a.space_address \
             WHERE a.kind = $1 AND a.value IN ({{in}}) AND a.valid_to IS NULL AND {filter}",
            filter = self.filter(eligible)
        );
        Ok(fetch_chunks!(self, SharingRow, sql, kind, values))
    }

    /// Spaces whose name starts with one of `prefixes` and a dash
    /// (`PAY-ledger` for `PAY`; upper-case, a superset of the Jira rule).
    pub async fn match_named_after(&self, prefixes: &[String]) -> Result<Vec<MatchSpaceRow>> {
        let sql = "SELECT s.address, s.kind, s.display_name, s.container FROM spaces s \
                   WHERE s.name_prefix IS NOT NULL AND s.name_prefix IN ({in})";
        Ok(fetch_chunks!(self, MatchSpaceRow, sql, prefixes))
    }

    /// The people (their ids) owning a space, tombstoned or not, with an
    /// active alias of `kind` whose value is one of `values`: whose
    /// suggestions a change to spaces with those fingerprints or keys can
    /// change (a superset).
    pub async fn people_sharing(&self, kind: &str, values: &[String]) -> Result<BTreeSet<String>> {
        let sql = "SELECT DISTINCT s.owner FROM aliases a JOIN spaces s ON s.address = a.space_address \
                   WHERE a.kind = $1 AND a.value IN ({in}) AND a.valid_to IS NULL AND s.owner <> 'company'";
        let rows = fetch_chunks!(self, (String,), sql, kind, values);
        Ok(rows.into_iter().filter_map(|(o,)| person_of(&o)).collect())
    }

    /// The people with a suggestion (in any state) on one of the spaces at
    /// `addresses`: a private space a company connection has since taken
    /// over keeps its owner's suggestions until they are refreshed.
    pub async fn people_suggested_for(&self, addresses: &[String]) -> Result<BTreeSet<String>> {
        let sql = "SELECT DISTINCT person FROM suggestions WHERE space_address IN ({in})";
        let rows = fetch_chunks!(self, (String,), sql, addresses);
        Ok(rows.into_iter().map(|(p,)| p).collect())
    }

    /// The people owning a space whose name starts with one of `prefixes`
    /// and a dash (as [`Store::match_named_after`]).
    pub async fn people_named_after(&self, prefixes: &[String]) -> Result<BTreeSet<String>> {
        let sql = "SELECT DISTINCT s.owner FROM spaces s \
                   WHERE s.name_prefix IS NOT NULL AND s.name_prefix IN ({in}) AND s.owner <> 'company'";
        let rows = fetch_chunks!(self, (String,), sql, prefixes);
        Ok(rows.into_iter().filter_map(|(o,)| person_of(&o)).collect())
    }

    /// Spaces with one of `stable_ids` (any kind, tenant or state).
    pub async fn match_same_stable_id(&self, stable_ids: &[String]) -> Result<Vec<MatchSpaceRow>> {
        let sql = "SELECT s.address, s.kind, s.display_name, s.container FROM spaces s \
                   WHERE s.stable_id IN ({in})";
        Ok(fetch_chunks!(self, MatchSpaceRow, sql, stable_ids))
    }

    /// The approved mappings of the spaces at `addresses`.
    pub async fn mappings_of(&self, addresses: &[String]) -> Result<Vec<MappingRow>> {
        let sql = "SELECT space_address, place_id, approved_by, proposal_id, created_at FROM mappings \
                   WHERE space_address IN ({in})";
        Ok(fetch_chunks!(self, MappingRow, sql, addresses))
    }

    /// The places with one of `ids`, active and retired (a person's
    /// suggestions need only the places their mappings name).
    pub async fn places_at(&self, ids: &[String]) -> Result<Vec<crate::PlaceRow>> {
        let sql = format!("SELECT {PLACE_COLUMNS} FROM places WHERE id IN ({{in}})");
        let raws = fetch_chunks!(self, RawPlace, sql, ids);
        Ok(raws.into_iter().map(crate::PlaceRow::from).collect())
    }

    /// The approved mappings of spaces with one of `stable_ids`.
    pub async fn mappings_by_stable_id(&self, stable_ids: &[String]) -> Result<Vec<MappingRow>> {
        let sql = "SELECT m.space_address, m.place_id, m.approved_by, m.proposal_id, m.created_at \
                   FROM mappings m JOIN spaces s ON s.address = m.space_address WHERE s.stable_id IN ({in})";
        Ok(fetch_chunks!(self, MappingRow, sql, stable_ids))
    }

    /// The places' current version token, and the one the last full
    /// recompute read (none before the first).
    pub async fn matching_places_version(&self) -> Result<(String, Option<String>)> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as("SELECT version, ladder_version FROM matching_places_version WHERE one = 1")
                .fetch_one(pool).await?
        }))
    }

    /// A full recompute ran against the places of `version`.
    pub async fn matching_places_done(&self, version: &str) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("UPDATE matching_places_version SET ladder_version = $1 WHERE one = 1")
                .bind(version).execute(pool).await?;
        });
        Ok(())
    }

    /// Where the ladder last read the feed to.
    pub async fn matching_position(&self) -> Result<Cursor> {
        let row: Option<(i64, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT tx, id FROM matching_position WHERE name = $1")
                .bind(POSITION).fetch_optional(pool).await?
        });
        Ok(row.map_or(Cursor::default(), |(tx, id)| Cursor { tx, id }))
    }

    /// The feed after the ladder's position and the dirty rows, each up to
    /// `limit`; `overflow` when more than that waits.
    pub async fn matching_backlog(&self, limit: usize) -> Result<MatchBacklog> {
        let after = self.matching_position().await?;
        if self.is_pruned_past(after).await?.is_some() {
            // Retention pruned changes the ladder never read: only a full
            // recompute knows what they touched.
            return Ok(MatchBacklog {
                changes: Vec::new(),
                dirty: Vec::new(),
                next: after,
                overflow: true,
            });
        }
        let want = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let read = self.changes_settled(after, want).await?;
        // The position moves past settled rows only; the rest are looked at
        // now and again later.
        let next = read
            .iter()
            .take(limit)
            .rfind(|(_, settled)| *settled)
            .map_or(after, |(c, _)| c.cursor);
        let mut changes: Vec<ChangeRow> = read.into_iter().map(|(c, _)| c).collect();
        let mut dirty: Vec<DirtyRow> = on_pool!(self, pool => {
            sqlx::query_as("SELECT id, space_address, old_container FROM matching_dirty ORDER BY id LIMIT $1")
                .bind(want).fetch_all(pool).await?
        });
        let overflow = changes.len() > limit || dirty.len() > limit;
        changes.truncate(limit);
        dirty.truncate(limit);
        Ok(MatchBacklog {
            changes,
            dirty,
            next,
            overflow,
        })
    }

    /// All dirty rows (before a full recompute, which covers them).
    pub async fn matching_dirty_ids(&self) -> Result<Vec<i64>> {
        Ok(on_pool!(self, pool => {
            let rows: Vec<(i64,)> = sqlx::query_as("SELECT id FROM matching_dirty")
                .fetch_all(pool).await?;
            rows.into_iter().map(|r| r.0).collect()
        }))
    }

    /// The backlog read up to `next` and the dirty rows `ids` are done. The
    /// position only moves forward, so a slower refresh that read less
    /// never moves it back.
    pub async fn matching_done(&self, next: Cursor, ids: &[i64]) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO matching_position (name, tx, id) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET tx = excluded.tx, id = excluded.id \
                 WHERE (matching_position.tx, matching_position.id) < (excluded.tx, excluded.id)",
            )
            .bind(POSITION).bind(next.tx).bind(next.id)
            .execute(pool).await?;
        });
        for chunk in ids.chunks(CHUNK) {
            let sql = format!(
                "DELETE FROM matching_dirty WHERE id IN ({})",
                params(1, chunk.len())
            );
            on_pool!(self, pool => {
                let mut q = sqlx::query(AssertSqlSafe(sql));
                for id in chunk {
                    q = q.bind(id);
                }
                q.execute(pool).await?;
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDb;

    /// SQLite's plan of `sql` with five values for `{in}`, one line a step.
    async fn sqlite_plan(store: &Store, sql: &str) -> Vec<String> {
        let Store::Sqlite(pool) = store else {
            unreachable!("a SQLite store")
        };
        let text = format!("EXPLAIN QUERY PLAN {}", sql.replace("{in}", &params(1, 5)));
        let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(text));
        for i in 0..5 {
            q = q.bind(format!("space:bitbucket-project:acme/c{i}"));
        }
        q.fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.3)
            .collect()
    }

    /// The incremental refresh's lookups start from the rows they name on
    /// SQLite, which keeps no statistics: never every company space
    /// through `spaces_by_owner`, never every alias of a kind. Without the
    /// `+` of [`ELIGIBLE_SQLITE`] all three read every company space. The
    /// last check holds the fingerprint test's join order, which the
    /// `CROSS JOIN` fixes (a plain join gets it too today, but lost it once
    /// the sharing space's owner test changed). The telling children's
    /// gate on there being any mapping is a subquery run once.
    #[tokio::test]
    async fn sqlite_plans_matching_lookups_from_the_rows_they_name() {
        let db = TestDb::sqlite().await;
        let store = &db.store;
        for (what, sql, start) in [
            (
                "spaces at",
                store.spaces_in_sql("address", true),
                "(address=?)",
            ),
            (
                "children of",
                store.spaces_in_sql("container", true),
                "spaces_by_container (container=?)",
            ),
            (
                "telling children",
                store.telling_children_sql(),
                "spaces_by_container (container=?)",
            ),
        ] {
            let plan = sqlite_plan(store, &sql).await;
            assert!(
                plan[0].starts_with("SEARCH s ") && plan[0].ends_with(start),
                "{what}: {plan:#?}"
            );
            // A scan is allowed only as a subquery SQLite runs once.
            let once = |i: usize| i > 0 && plan[i - 1].starts_with("SCALAR SUBQUERY");
            assert!(
                !plan
                    .iter()
                    .enumerate()
                    .any(|(i, l)| l.contains("spaces_by_owner")
                        || (l.starts_with("SCAN") && !once(i))),
                "{what}: {plan:#?}"
            );
        }
        let plan = sqlite_plan(store, &store.telling_children_sql()).await;
        let a = plan.iter().position(|l| {
            l.starts_with("SEARCH a USING INDEX aliases_one_active (space_address=?")
        });
        let b = plan
            .iter()
            .position(|l| l == "SEARCH b USING INDEX aliases_by_value (kind=? AND value=?)");
        assert!(
            a.is_some() && a < b,
            "the child's own aliases first, then those sharing a value: {plan:#?}"
        );
        // The gate on there being any mapping at all runs once, ahead of
        // the children's tests, not as a loop inside them.
        let gate = plan.iter().position(|l| l.starts_with("SCALAR SUBQUERY"));
        assert!(
            gate.is_some_and(|g| plan[g + 1].starts_with("SCAN mappings")),
            "the mappings gate is a subquery run once: {plan:#?}"
        );
    }
}
