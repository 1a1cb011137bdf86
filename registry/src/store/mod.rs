//! One store API over two backends, chosen by URL: SQLite (the embedded
//! default, one file) and PostgreSQL (a fleet).
//!
//! The store is a concrete enum rather than a trait object: there are
//! exactly two backends, known at compile time. Every method is written once
//! with the [`on_pool!`] and [`in_tx!`] macros, which expand the same body
//! for each pool type; the SQL is shared (both dialects accept `$n`
//! placeholders, `ON CONFLICT`, `RETURNING` and partial indexes), and only
//! the migrations differ.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

use crate::error::{RegistryError, Result};

mod audit;
mod budget;
mod changes;
mod connections;
mod drift;
mod drive;
mod drive_channels;
mod health;
mod holds;
mod http_cache;
mod inline_reads;
mod key_cache;
mod key_canary;
mod keys;
mod manifest;
mod matching;
mod observe;
mod people;
mod places;
mod proposals;
mod resolve;
mod retention;
mod runs;
mod schedule;
mod sightings;
mod spaces;
mod stored_delivery;
mod suggestions;
mod unseen;
mod visibility;
mod webhooks;
mod write_turn;

pub use audit::{AuditEntry, NewAuditEntry};
pub use budget::{BudgetGrant, BudgetRow, BudgetSettlement, BudgetTiming};
pub use changes::{ChangeKind, ChangePage, ChangeRow, Cursor};
pub use connections::{ConnectionRow, LeaseAttempt, NewConnection};
pub use drift::{DriftKind, DriftLine, REPEAT_OFFENDER_NIGHTS, SpaceChange};
pub use drive::DrivePageToken;
pub use drive_channels::{DriveChannelRow, NewDriveChannel};
pub use holds::{HoldRow, MissingPreview};
pub use http_cache::CachedPageRow;
pub use inline_reads::InlineReads;
pub use key_cache::KeyCache;
pub use keys::{ApiKeyRow, NewApiKey, Power, Powers, Role, SESSIONS_PER_KEY, SessionRow};
pub use manifest::{Manifest, ManifestEntry, PlaceRef, Recogniser};
#[cfg(any(test, feature = "testing"))]
pub(crate) use matching::MATCHING_WAIT_WARNING_MS;
#[cfg(any(test, feature = "testing"))]
pub(crate) use matching::advisory_lock;
pub use matching::{DirtyRow, MATCHING_WAIT_WARNING, MatchBacklog, MatchingTurn, SharingRow};
pub use people::Unlinked;
pub use places::{
    PlaceAliasKind, PlaceAliasRow, PlaceFigures, PlaceInput, PlaceRow, normalise_place_key,
    normalise_place_name,
};
pub use proposals::{
    Decision, MappingRow, MatchAliasRow, MatchSpaceRow, NewProposal, ProposalFigures,
    ProposalFilter, ProposalRow, ProposalState, ProposalTarget,
};
pub use resolve::{MatchRank, Resolution, Resolved};
pub use retention::{PruneBefore, Pruned};
pub use runs::SyncRunRow;
pub use sightings::{
    Denial, OwnerChangeRow, SIGHTING_REFRESH_MS, SightingRow, SightingState, TombstoneOutcome,
    may_write,
};
pub use spaces::{AliasRow, PageStats, SpaceFilter, SpaceRow};
pub use stored_delivery::StoredDelivery;
pub use suggestions::{
    NewSuggestion, SuggestionAnswer, SuggestionFigures, SuggestionKind, SuggestionRow,
    SuggestionState,
};
pub use visibility::Viewer;
pub use webhooks::{
    Accepted, CHECKPOINT_BESIDE_AFTER_BYTES, DeliveryFilter, DeliveryJob, DeliveryRow,
    DeliveryStatus, DeliveryWriter, HANDLE_DELIVERY_ATTEMPTS, HANDLE_DELIVERY_QUEUE, IntakeSecret,
    IntakeState, NewDelivery, Premise, QueuedJob, REPLAY_WINDOW_MS, Recorded, WalSync, new_ulid,
};

/// The migration history table of the project. apalis keeps its own
/// `_sqlx_migrations` in the same SQLite file; sharing it breaks both.
pub const MIGRATIONS_TABLE: &str = "_cmcp_migrations";

/// How long a SQLite writer waits for the file: for its turn among this
/// process's writers, and then in SQLite's busy handler for other processes.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Run `$body` with `$pool` bound to whichever pool the store holds.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            $crate::store::Store::Sqlite($pool) => $body,
            $crate::store::Store::Postgres($pool) => $body,
        }
    };
}

/// Run `$body` with `$pool` bound to whichever pool the store holds, as a
/// writer: on SQLite it first takes the file's turn to write (see
/// `write_turn`), so that a single-statement write queues behind the
/// transaction in progress instead of sleeping in SQLite's busy handler.
macro_rules! on_writer {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            $crate::store::Store::Sqlite($pool) => {
                let _turn = $crate::store::write_turn::sqlite($pool).await?;
                $body
            }
            $crate::store::Store::Postgres($pool) => $body,
        }
    };
}

/// Run `$body` inside a write transaction bound to `$tx`, committing when the
/// body returns normally; a `?` inside rolls back by dropping the
/// transaction. On SQLite the writer first takes the file's turn (see
/// `write_turn`) and then begins IMMEDIATE, so that writers of this process
/// queue in order and writers of other processes wait on the busy timeout
/// instead of failing on lock upgrade.
macro_rules! in_tx {
    // A transaction whose commit is answered to a person (an ADMIN's
    // decision and its audit entry): on SQLite the WAL is synced after
    // the commit, before it returns ([`WalSync`]). PostgreSQL's commit
    // returns after its WAL flush either way.
    ($store:expr, durable, $tx:ident => $body:block) => {{
        let store: &$crate::store::Store = $store;
        let out = $crate::store::in_tx!(store, $tx => $body);
        if let $crate::store::Store::Sqlite(pool) = store {
            $crate::store::WalSync::of(pool).sync().await?;
        }
        out
    }};
    ($store:expr, $tx:ident => $body:block) => {
        match $store {
            $crate::store::Store::Sqlite(pool) => {
                let _turn = $crate::store::write_turn::sqlite(pool).await?;
                let mut $tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
            $crate::store::Store::Postgres(pool) => {
                let mut $tx = pool.begin().await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    };
}

pub(crate) use {in_tx, on_pool, on_writer};

/// How the store opens its pool.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    /// Connections opened with the pool and kept open (at most
    /// `max_connections`; see [`StoreOptions::kept`]). Zero, the default,
    /// opens connections only as they are asked for.
    pub min_connections: u32,
    pub connect_timeout: Duration,
    /// PostgreSQL ends a session whose transaction sits idle this long
    /// (`idle_in_transaction_session_timeout`; zero leaves the server's
    /// setting). No transaction of ours waits on anything but its own
    /// statements, so one idle for a minute has been lost by its holder: a
    /// connection given back in a transaction would otherwise hold its row
    /// locks, and stall every writer behind them, for as long as the pool
    /// keeps it.
    pub idle_in_transaction_timeout: Duration,
    /// SQLite: the page cache of the whole pool, in KiB, shared out evenly
    /// among its connections (never under [`MIN_SQLITE_CACHE_KIB`] each).
    /// Each connection keeps a private cache, and the pool hands its
    /// connections out in turn, so with SQLite's own default (2 MB each)
    /// every one of them fills with the same hot pages as the file grows:
    /// a sync's memory grew by 5 MiB from 10,000 to 100,000 repositories,
    /// and was flat with a quarter of that each, at the same speed. The
    /// pages stay in the operating system's cache, which the connections
    /// share.
    pub sqlite_cache_kib: u32,
}

/// The smallest page cache a SQLite connection gets, in KiB.
pub const MIN_SQLITE_CACHE_KIB: u32 = 64;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 10,
            min_connections: 0,
            connect_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(60),
            sqlite_cache_kib: 2048,
        }
    }
}

impl StoreOptions {
    /// The page cache each SQLite connection of the pool gets, in KiB.
    pub fn sqlite_cache_per_connection_kib(&self) -> u32 {
        (self.sqlite_cache_kib / self.max_connections.max(1)).max(MIN_SQLITE_CACHE_KIB)
    }

    /// The pool of a long-running process: every connection opened with
    /// the pool and kept, one closed at the end of its lifetime or by an
    /// error replaced in the background. A burst of requests then never
    /// waits for a connection to be opened: on PostgreSQL that is a new
    /// server process whose first statements also load its catalogue
    /// caches and are parsed again. A pool filled on demand stalled the
    /// requests queued behind it by 10-60 ms, and that was most of the
    /// resolve p99 of a server at 2,000 requests a second.
    pub fn kept() -> StoreOptions {
        let d = StoreOptions::default();
        StoreOptions {
            min_connections: d.max_connections,
            ..d
        }
    }
}

/// A pooled connection idle at least this long is pinged before it is
/// handed out; one in steady use is not.
///
/// sqlx's default (`test_before_acquire`) pings on every acquire: a whole
/// extra round trip before each statement run on the pool (on SQLite an
/// extra hand-off to the connection's thread and back). On PostgreSQL that
/// was half the round trips of a resolve and of every autocommit statement
/// of a sync. A connection busy a moment ago is alive; one that sat idle
/// may have been cut (a server restart, a failover, an idle timeout on the
/// way), so it is still tested, and a dead one is replaced before any
/// statement sees it. What is left: a connection cut within the last
/// second fails its next statement, which the caller already handles as
/// any store error (a 503 with `Retry-After`, a job retried).
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

async fn ping_if_idle<C: sqlx::Connection>(
    conn: &mut C,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> std::result::Result<bool, sqlx::Error> {
    if meta.idle_for >= PING_IF_IDLE_FOR {
        conn.ping().await?;
    }
    Ok(true)
}

impl Store {
    /// Open the store named by `url`: `sqlite:PATH` / `sqlite://PATH` or
    /// `postgres://…` / `postgresql://…`. Does not migrate.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store> {
        let shown = redact_url(url);
        let min_connections = options.min_connections.min(options.max_connections);
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|e| RegistryError::Unreachable {
                    url: shown.clone(),
                    source: e,
                })?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .foreign_keys(true)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .pragma(
                    "cache_size",
                    format!("-{}", options.sqlite_cache_per_connection_kib()),
                );
            let pool = SqlitePoolOptions::new()
                .test_before_acquire(false)
                .before_acquire(|conn, meta| Box::pin(ping_if_idle(conn, meta)))
                .max_connections(options.max_connections)
                .min_connections(min_connections)
                .acquire_timeout(options.connect_timeout.max(Duration::from_secs(10)))
                .connect_with(opts)
                .await
                .map_err(|e| RegistryError::Unreachable {
                    url: shown,
                    source: e,
                })?;
            Ok(Store::Sqlite(pool))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut opts =
                PgConnectOptions::from_str(url).map_err(|e| RegistryError::Unreachable {
                    url: shown.clone(),
                    source: e,
                })?;
            let idle_ms = options.idle_in_transaction_timeout.as_millis();
            if idle_ms > 0 {
                opts = opts.options([(
                    "idle_in_transaction_session_timeout",
                    format!("{idle_ms}ms"),
                )]);
            }
            let pool = PgPoolOptions::new()
                .test_before_acquire(false)
                .before_acquire(|conn, meta| Box::pin(ping_if_idle(conn, meta)))
                .max_connections(options.max_connections)
                .min_connections(min_connections)
                .acquire_timeout(options.connect_timeout)
                .connect_with(opts)
                .await
                .map_err(|e| RegistryError::Unreachable {
                    url: shown,
                    source: e,
                })?;
            Ok(Store::Postgres(pool))
        } else {
            Err(RegistryError::UnsupportedUrl(shown))
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Store::Sqlite(_) => Backend::Sqlite,
            Store::Postgres(_) => Backend::Postgres,
        }
    }

    /// Connections the pool holds open now, idle or in use.
    pub fn open_connections(&self) -> u32 {
        match self {
            Store::Sqlite(pool) => pool.size(),
            Store::Postgres(pool) => pool.size(),
        }
    }

    /// Whether at most half of the pool's connections are in use
    /// (idle or not yet opened count as free): work that could take more
    /// connections to go faster takes them only then, and leaves a busy
    /// pool to the work that needs one.
    pub fn mostly_free(&self) -> bool {
        fn free<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> bool {
            let max = pool.options().get_max_connections() as usize;
            let in_use = (pool.size() as usize).saturating_sub(pool.num_idle());
            in_use * 2 <= max
        }
        match self {
            Store::Sqlite(pool) => free(pool),
            Store::Postgres(pool) => free(pool),
        }
    }

    /// Apply the registry's migrations for this dialect (idempotent).
    pub async fn migrate(&self) -> Result<()> {
        match self {
            Store::Sqlite(pool) => {
                let mut m = sqlx::migrate!("../migrations/sqlite");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                m.run(pool).await?;
            }
            Store::Postgres(pool) => {
                let mut m = sqlx::migrate!("../migrations/postgres");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                m.run(pool).await?;
            }
        }
        Ok(())
    }

    /// Apply the registry's migrations up to and including `version`: an
    /// older schema, for upgrade tests.
    pub async fn migrate_to(&self, version: i64) -> Result<()> {
        match self {
            Store::Sqlite(pool) => {
                let mut m = sqlx::migrate!("../migrations/sqlite");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                m.run_to(version, pool).await?;
            }
            Store::Postgres(pool) => {
                let mut m = sqlx::migrate!("../migrations/postgres");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                m.run_to(version, pool).await?;
            }
        }
        Ok(())
    }

    /// Readiness: one round trip to the database.
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

/// The URL with any password replaced, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `$first, $first+1, …` for `n` bound values. Built from numbers only, never
/// from input, so the resulting SQL is safe to assert as such.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`placeholders`] for a statement whose values are bound in the order
/// they appear, each once: numbered on PostgreSQL, anonymous (`?`) on
/// SQLite.
///
/// Why: for each value it binds, sqlx asks SQLite the parameter's name
/// (`sqlite3_bind_parameter_name`), and SQLite finds a named parameter by
/// walking the statement's list of names, so binding n named values costs
/// n²/2 steps. A page's 100-row INSERT of spaces has 1,300 values: that
/// walk was a fifth of a SQLite sync's CPU. Anonymous values have no
/// names and are bound by position.
pub(crate) fn marks(backend: Backend, first: usize, n: usize) -> String {
    match backend {
        Backend::Postgres => placeholders(first, n),
        Backend::Sqlite => vec!["?"; n].join(", "),
    }
}
