//! The two reads on cMCP's hot path, an API key by its hash and a resolve,
//! answered on SQLite without leaving the calling thread.
//!
//! Why: sqlx runs each SQLite connection on a thread of its own behind a
//! channel, so every statement costs a hand-off there and back (and a
//! wake-up for each row). A resolve with its key check is two statements;
//! on a 2-core machine at 2,000 resolves a second those hand-offs, not
//! SQLite, were most of the CPU, and the tail was their queueing. Here the
//! same statements (the same SQL text, built by
//! [`ResolvePlan`](super::resolve::ResolvePlan)) run on a few read-only
//! connections of the same file, inline: an indexed read of a WAL
//! database takes tens of microseconds and never waits for the writer.
//!
//! Nothing is cached: every call reads the committed state of the file, so
//! a key revoked by another process (the CLI) is refused on the next call,
//! as through the pool. A read that fails here for any reason (the file
//! busy in a checkpoint, a schema change underway, a file that cannot be
//! opened) is answered through the pool instead, which waits as it always has:
//! this path is only ever a faster way to the same answer.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params_from_iter};

use super::keys::{ApiKeyRow, KEY_BY_HASH_SQL};
use super::resolve::{Found, Lookup, RawHit, RawPlaces, RawSpaceHit, ResolvePlan, pick};
use super::spaces::{RawAlias, RawSpace};
use super::{Resolution, Resolved, Store, Viewer};
use crate::error::Result;

/// At most this many idle connections are kept. A read never awaits, so
/// no more are in use at once than the runtime has threads.
const MAX_CONNECTIONS: usize = 4;

/// How long an inline read may wait on a lock before it gives up and the
/// pool answers (a WAL reader waits only while a checkpoint restarts the
/// log, which is rare and short).
const BUSY_WAIT: Duration = Duration::from_millis(5);

/// Read-only connections to one SQLite file, used inline.
pub struct InlineReads {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for InlineReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineReads")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl InlineReads {
    /// The inline reader of `store`'s file: `None` for PostgreSQL, and for
    /// an in-memory SQLite database (another connection cannot open it).
    pub fn of(store: &Store) -> Option<InlineReads> {
        let Store::Sqlite(pool) = store else {
            return None;
        };
        let path = pool.connect_options().get_filename().to_path_buf();
        let name = path.to_string_lossy();
        if name.is_empty() || name == ":memory:" || name.starts_with("file::memory:") {
            return None;
        }
        Some(InlineReads {
            path,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Run `read` on an idle connection (opened when none is idle), giving
    /// the connection back afterwards. `None` when the read failed: the
    /// caller then asks the pool.
    fn with<T>(&self, read: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Option<T> {
        let taken = self.idle.lock().ok()?.pop();
        let conn = match taken {
            Some(c) => c,
            None => match self.open() {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "inline read: cannot open the database; the pool answers");
                    return None;
                }
            },
        };
        let out = read(&conn);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_CONNECTIONS
        {
            idle.push(conn);
        }
        match out {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(error = %e, "inline read failed; the pool answers");
                None
            }
        }
    }

    /// A new read-only connection.
    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )?;
        conn.busy_timeout(BUSY_WAIT)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(conn)
    }

    /// The live key with this hash, read inline; `None` when the pool
    /// must answer (see [`InlineReads::with`]), a row that does not parse
    /// included, so the pool reports it as it always has.
    pub fn key_by_hash(&self, key_hash: &str) -> Option<Option<ApiKeyRow>> {
        self.with(|conn| {
            conn.prepare_cached(KEY_BY_HASH_SQL)?
                .query_row([key_hash], key_row)
                .optional()
        })
    }

    /// [`Store::resolve_one`] read inline; `None` when the pool must
    /// answer.
    pub fn resolve_one(&self, input: &str, viewer: Option<&Viewer>) -> Option<Result<Resolved>> {
        self.resolve_as(input, viewer).map(|r| r.map(pick))
    }

    /// [`Store::resolve_as`] read inline; `None` when the pool must answer.
    pub fn resolve_as(
        &self,
        input: &str,
        viewer: Option<&Viewer>,
    ) -> Option<Result<Vec<Resolution>>> {
        let plan = ResolvePlan::new(input);
        let found = self.with(|conn| {
            let mut found = Found::default();
            if let Some(l) = &plan.by_address {
                found.by_address = all(conn, l, space_hit)?.pop();
            }
            if let Some(l) = &plan.by_alias {
                found.by_alias = all(conn, l, hit)?;
            }
            if let Some(l) = &plan.by_id {
                found.by_id = all(conn, l, space_hit)?;
            }
            Ok(found)
        })?;
        Some(plan.finish(found, viewer))
    }
}

/// Every row of one lookup, mapped.
fn all<T>(
    conn: &Connection,
    lookup: &Lookup,
    map: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(&lookup.sql)?;
    let rows = stmt.query_map(params_from_iter(lookup.binds.iter()), |r| map(r))?;
    rows.collect()
}

fn space(r: &Row<'_>) -> rusqlite::Result<RawSpace> {
    Ok(RawSpace {
        address: r.get("address")?,
        connection_id: r.get("connection_id")?,
        owner: r.get("owner")?,
        display_name: r.get("display_name")?,
        container: r.get("container")?,
        status: r.get("status")?,
        archived: r.get("archived")?,
        trashed: r.get("trashed")?,
        visibility: r.get("visibility")?,
        first_seen_at: r.get("first_seen_at")?,
        last_changed_at: r.get("last_changed_at")?,
        missing_since: r.get("missing_since")?,
        tombstoned_at: r.get("tombstoned_at")?,
    })
}

fn places(r: &Row<'_>) -> rusqlite::Result<RawPlaces> {
    Ok(RawPlaces {
        own_place_id: r.get("own_place_id")?,
        own_place_kind: r.get("own_place_kind")?,
        own_place_name: r.get("own_place_name")?,
        up_place_id: r.get("up_place_id")?,
        up_place_kind: r.get("up_place_kind")?,
        up_place_name: r.get("up_place_name")?,
    })
}

fn space_hit(r: &Row<'_>) -> rusqlite::Result<RawSpaceHit> {
    Ok(RawSpaceHit {
        space: space(r)?,
        places: places(r)?,
    })
}

fn hit(r: &Row<'_>) -> rusqlite::Result<RawHit> {
    Ok(RawHit {
        alias: RawAlias {
            id: r.get("id")?,
            space_address: r.get("space_address")?,
            kind: r.get("kind")?,
            value: r.get("value")?,
            raw: r.get("raw")?,
            valid_from: r.get("valid_from")?,
            valid_to: r.get("valid_to")?,
        },
        space: space(r)?,
        places: places(r)?,
    })
}

/// A key row; a role or powers that do not parse fail the read.
fn key_row(r: &Row<'_>) -> rusqlite::Result<ApiKeyRow> {
    let parsed = |i: &str, e: String| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{i}: {e}").into(),
        )
    };
    let role: String = r.get("role")?;
    let powers: String = r.get("powers")?;
    Ok(ApiKeyRow {
        role: role.parse().map_err(|e| parsed("role", format!("{e}")))?,
        powers: powers
            .try_into()
            .map_err(|e| parsed("powers", format!("{e}")))?,
        id: r.get("id")?,
        name: r.get("name")?,
        created_at: r.get("created_at")?,
        created_by: r.get("created_by")?,
        revoked_at: r.get("revoked_at")?,
        person: r.get("person")?,
    })
}
