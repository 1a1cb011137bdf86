//! The hot path of a delivery's acceptance: what the gateway needs to know
//! about a connection (read in one query, for its cache), and the write of
//! a batch of verified deliveries in ONE transaction, each delivery in one
//! statement that also re-checks what its acceptance relied on.
//!
//! A gateway keeps a connection's status and secrets in memory, so a
//! fleet's other gateways (or the CLI) may have disabled the connection or
//! ended a secret's overlap since. The statement that stores a delivery
//! therefore checks, against the committed rows, that the connection
//! still takes deliveries and that the secret which verified it is still
//! valid; when either no longer holds it writes nothing and says
//! [`Accepted::Stale`], and the gateway reads the connection again and
//! decides afresh. A cache can thus make a delivery cheaper, never accept
//! one the store would have refused.
//!
//! On PostgreSQL the deliveries of a batch that share no key and no
//! replay key with another go in together, one statement over arrays
//! ([`pg_batch`]); each of the others is one CTE: the premise, the replay lookup
//! (same replay key for the connection within [`REPLAY_WINDOW_MS`]), the
//! delivery's INSERT with its UNIQUE dedupe, and its job's INSERT. Through
//! a gateway's [`DeliveryWriter`], a batch whose deliveries are all
//! independent is that one statement, committed on its own without
//! BEGIN/COMMIT: one round trip. SQLite has no data-modifying CTE: the
//! same independent deliveries go in one INSERT that carries the premise
//! and the replay check, and their jobs follow in one more
//! ([`sqlite_batch`]); each of the others is its INSERT and then its job.
//! The others are statements of their own so that dedupe and replay
//! detection stay exact inside a batch: a later statement of the
//! transaction sees the rows of the earlier ones ([`independent`]).

mod pg_batch;
mod sqlite_batch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use cmcp_domain::{ConnectionStatus, Platform, Token};
use sqlx::{PgConnection, SqliteConnection};
use tokio::sync::Notify;

use super::{
    DeliveryStatus, NewDelivery, QueuedJob, REPLAY_WINDOW_MS, Recorded, job_insert_sql, new_ulid,
    secret_context,
};
use crate::cipher::Cipher;
use crate::error::{RegistryError, Result};
use crate::store::{Backend, Store, now_ms};

/// A connection as the gateway's acceptance needs it.
#[derive(Debug, Clone)]
pub struct IntakeState {
    pub platform: Platform,
    pub status: ConnectionStatus,
    /// The secrets valid when read, the current one first.
    pub secrets: Vec<IntakeSecret>,
}

/// One webhook secret with its row id (what a [`Premise`] names) and the
/// end of its validity (`None`: current).
#[derive(Debug, Clone)]
pub struct IntakeSecret {
    pub id: i64,
    pub secret: Token,
    pub valid_until: Option<i64>,
}

/// What the gateway's acceptance of a delivery relied on; the statement
/// that stores the delivery checks it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Premise {
    /// The webhook secret that verified the delivery; `None` when it was
    /// authenticated otherwise (a Drive channel, read fresh).
    pub secret_id: Option<i64>,
}

/// What storing a delivery under a [`Premise`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    Recorded(Recorded),
    /// The connection no longer takes deliveries, or the secret that
    /// verified this one is no longer valid: nothing was written.
    Stale,
}

/// The statuses of a connection whose deliveries are taken in, as an SQL
/// list (built from the closed set of names, never from input).
fn reading_statuses() -> String {
    [
        ConnectionStatus::Enabled,
        ConnectionStatus::Disabled,
        ConnectionStatus::Held,
        ConnectionStatus::Unlinked,
        ConnectionStatus::Rejected,
    ]
    .into_iter()
    .filter(|s| s.reads())
    .map(|s| format!("'{}'", s.as_str()))
    .collect::<Vec<_>>()
    .join(", ")
}

/// The premise of one delivery, over the SQL expressions that give its
/// connection, platform, verifying secret's id (NULL: none to check),
/// whether it is checked at all (0 for the unguarded `record_delivery`)
/// and the time of the write. Even unguarded, the connection must exist:
/// on PostgreSQL this check is what keeps a delivery from naming a
/// connection that is not there (the table has no foreign key to it;
/// migration `20261206120000`). One text for every statement that stores
/// deliveries, the single ones and the batch.
pub(super) fn premise_check(
    connection: &str,
    platform: &str,
    secret: &str,
    checked: &str,
    at: &str,
) -> String {
    format!(
        "(EXISTS (SELECT 1 FROM connections c WHERE c.id = {connection} \
           AND ({checked} = 0 OR (c.platform = {platform} AND c.status IN ({statuses})))) \
         AND ({checked} = 0 OR {secret} IS NULL OR EXISTS (SELECT 1 FROM webhook_secrets s \
           WHERE s.id = {secret} AND s.connection_id = {connection} \
           AND (s.valid_until IS NULL OR s.valid_until > {at}))))",
        statuses = reading_statuses()
    )
}

/// The premise in the single statements: `$2` the connection, `$3` the
/// platform, `$14` the secret's id, `$15` checked, `$6` the time.
fn premise_sql() -> String {
    premise_check("$2", "$3", "$14", "$15", "$6")
}

/// The first stored delivery of the same signed body for the connection
/// since the start of the replay window ([`REPLAY_WINDOW_MS`]), over the
/// SQL expressions that give them; nothing when the replay key is NULL.
/// One text for every statement that stores deliveries, as
/// [`premise_check`].
pub(super) fn replay_lookup(connection: &str, replay_key: &str, since: &str) -> String {
    format!(
        "SELECT d.id FROM webhook_deliveries d WHERE d.connection_id = {connection} \
         AND d.replay_key = {replay_key} AND d.received_at > {since} \
         ORDER BY d.received_at LIMIT 1"
    )
}

/// The replay lookup in the single statements: `$2` the connection, `$13`
/// the replay key, `$16` the window's start.
static REPLAY_SQL: LazyLock<String> = LazyLock::new(|| replay_lookup("$2", "$13", "$16"));

const DELIVERY_COLUMNS: &str = "id, connection_id, platform, delivery_key, event, received_at, \
     headers, body, verification, status, error, processed_at, replay_key";

/// The PostgreSQL statement, with the job's INSERT (`$17`–`$21`) or,
/// for a delivery that needs no job, without it (so that a registry
/// without the queue's schema still records those).
fn pg_sql(with_job: bool) -> String {
    let job = if with_job {
        "job AS (INSERT INTO apalis.jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority, metadata) \
           SELECT $17, $18, $19, 'Pending', 0, $20, to_timestamp($21::bigint), 0, NULL FROM ins RETURNING id)"
    } else {
        "job AS (SELECT NULL::text AS id)"
    };
    format!(
        "WITH premise AS (SELECT {premise} AS ok), \
         replay AS ({replay}), \
         ins AS (INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
           SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 FROM premise \
           WHERE premise.ok AND NOT EXISTS (SELECT 1 FROM replay) \
           ON CONFLICT (connection_id, delivery_key) DO NOTHING RETURNING id), \
         {job} \
         SELECT (SELECT ok FROM premise), (SELECT id FROM replay), (SELECT id FROM ins), \
           (SELECT id FROM job), \
           CASE WHEN NOT EXISTS (SELECT 1 FROM ins) THEN (SELECT d.id FROM webhook_deliveries d \
             WHERE d.connection_id = $2 AND d.delivery_key = $4) END",
        premise = premise_sql(),
        replay = *REPLAY_SQL
    )
}

static PG_SQL_WITH_JOB: LazyLock<String> = LazyLock::new(|| pg_sql(true));
static PG_SQL_NO_JOB: LazyLock<String> = LazyLock::new(|| pg_sql(false));

static SQLITE_INSERT_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 \
         WHERE {premise} AND NOT EXISTS ({replay}) \
         ON CONFLICT (connection_id, delivery_key) DO NOTHING RETURNING id",
        premise = premise_sql(),
        replay = *REPLAY_SQL
    )
});

/// Why a delivery was not inserted (SQLite, inside its transaction). SQLite
/// binds only the parameters a statement names, so the shared binds fit.
static SQLITE_WHY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {premise}, ({replay}), \
         (SELECT d.id FROM webhook_deliveries d WHERE d.connection_id = $2 AND d.delivery_key = $4)",
        premise = premise_sql(),
        replay = *REPLAY_SQL
    )
});

/// One delivery's bound values.
struct Prepared<'a> {
    new: &'a NewDelivery,
    premise: Option<Premise>,
    id: String,
    headers: String,
    body: &'a [u8],
    now: i64,
    processed_at: Option<i64>,
}

impl<'a> Prepared<'a> {
    fn new(new: &'a NewDelivery, premise: Option<Premise>) -> Result<Prepared<'a>> {
        let id = new_ulid();
        let headers = serde_json::to_string(&new.headers).map_err(|e| RegistryError::Invalid {
            what: format!("headers: {e}"),
        })?;
        let now = now_ms();
        let body = new.stored_body();
        Ok(Prepared {
            new,
            premise,
            id,
            headers,
            body,
            now,
            processed_at: (new.status != DeliveryStatus::Received).then_some(now),
        })
    }

    /// Whether the delivery waits for a worker, and so is named by a
    /// `handle-delivery` job: its own when it is written alone, its
    /// batch's when it goes in with others. The batch statements ask the
    /// same of the stored status (`status = 'received'`).
    fn needs_job(&self) -> bool {
        self.new.status == DeliveryStatus::Received
    }

    /// The outcome of this delivery's row having been inserted, named by
    /// job `job_id` when it needs one.
    fn stored(&self, job_id: Option<&str>) -> Accepted {
        Accepted::Recorded(Recorded::Stored {
            id: self.id.clone(),
            job_id: job_id.filter(|_| self.needs_job()).map(str::to_owned),
        })
    }

    fn checked(&self) -> i64 {
        i64::from(self.premise.is_some())
    }

    fn secret_id(&self) -> Option<i64> {
        self.premise.and_then(|p| p.secret_id)
    }
}

/// Bind `$1`–`$16`, shared by every statement of this module.
macro_rules! bind_delivery {
    ($q:expr, $p:expr) => {{
        let p: &Prepared<'_> = $p;
        $q.bind(&p.id)
            .bind(&p.new.connection_id)
            .bind(p.new.platform.as_str())
            .bind(&p.new.delivery_key)
            .bind(&p.new.event)
            .bind(p.now)
            .bind(&p.headers)
            .bind(p.body)
            .bind(&p.new.verification)
            .bind(p.new.status.as_str())
            .bind(&p.new.error)
            .bind(p.processed_at)
            .bind(&p.new.replay_key)
            .bind(p.secret_id())
            .bind(p.checked())
            .bind(p.now - REPLAY_WINDOW_MS)
    }};
}

type PgOutcome = (
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

async fn pg_one(conn: &mut PgConnection, p: &Prepared<'_>) -> Result<Accepted> {
    let (ok, replay, inserted, job, existing) = if p.needs_job() {
        let job = QueuedJob::handle_delivery(&p.id);
        let q = bind_delivery!(sqlx::query_as::<_, PgOutcome>(PG_SQL_WITH_JOB.as_str()), p);
        bind_job!(q, &job, new_ulid(), p.now / 1000)
            .fetch_one(&mut *conn)
            .await?
    } else {
        bind_delivery!(sqlx::query_as::<_, PgOutcome>(PG_SQL_NO_JOB.as_str()), p)
            .fetch_one(&mut *conn)
            .await?
    };
    if ok != Some(true) {
        return Ok(Accepted::Stale);
    }
    let recorded = match (replay, inserted, existing) {
        (Some(id), _, _) => Recorded::Replay { id },
        (None, Some(id), _) => Recorded::Stored { id, job_id: job },
        (None, None, Some(id)) => Recorded::Duplicate { id },
        // A copy committed by another transaction after this statement's
        // snapshot: ON CONFLICT waited for it, a new statement sees it.
        (None, None, None) => {
            let (id,): (String,) = sqlx::query_as(
                "SELECT id FROM webhook_deliveries WHERE connection_id = $1 AND delivery_key = $2",
            )
            .bind(&p.new.connection_id)
            .bind(&p.new.delivery_key)
            .fetch_one(&mut *conn)
            .await?;
            Recorded::Duplicate { id }
        }
    };
    Ok(Accepted::Recorded(recorded))
}

/// A SQLite query with one more delivery's sixteen values bound, in the
/// order of `$1`–`$16`: one row of the batch statement ([`sqlite_batch`]).
fn sqlite_bind<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments>,
    p: &'q Prepared<'_>,
) -> sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments> {
    bind_delivery!(q, p)
}

async fn sqlite_one(conn: &mut SqliteConnection, p: &Prepared<'_>) -> Result<Accepted> {
    let inserted: Option<(String,)> = bind_delivery!(sqlx::query_as(SQLITE_INSERT_SQL.as_str()), p)
        .fetch_optional(&mut *conn)
        .await?;
    if inserted.is_none() {
        return sqlite_why(conn, p).await;
    }
    let job_id = p.needs_job().then(new_ulid);
    if let Some(id) = &job_id {
        bind_job!(
            sqlx::query(job_insert_sql(Backend::Sqlite)),
            &QueuedJob::handle_delivery(&p.id),
            id,
            p.now / 1000
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(p.stored(job_id.as_deref()))
}

/// Why a delivery's INSERT stored nothing. One writer at a time on SQLite:
/// what this transaction reads now is what stopped it.
async fn sqlite_why(conn: &mut SqliteConnection, p: &Prepared<'_>) -> Result<Accepted> {
    let (ok, replay, existing): (bool, Option<String>, Option<String>) =
        bind_delivery!(sqlx::query_as(SQLITE_WHY_SQL.as_str()), p)
            .fetch_one(&mut *conn)
            .await?;
    Ok(match (ok, replay, existing) {
        (false, _, _) => Accepted::Stale,
        (true, Some(id), _) => Accepted::Recorded(Recorded::Replay { id }),
        (true, None, Some(id)) => Accepted::Recorded(Recorded::Duplicate { id }),
        (true, None, None) => {
            return Err(RegistryError::Corrupt {
                what: format!(
                    "delivery {:?} of {:?} was neither stored nor a duplicate",
                    p.new.delivery_key, p.new.connection_id
                ),
            });
        }
    })
}

impl Store {
    /// A connection's platform, status and currently valid webhook
    /// secrets (current first), in one query; `None` for no such
    /// connection.
    pub async fn intake_state(
        &self,
        cipher: &Cipher,
        connection_id: &str,
    ) -> Result<Option<IntakeState>> {
        let now = now_ms();
        type Row = (String, String, Option<i64>, Option<Vec<u8>>, Option<i64>);
        let rows: Vec<Row> = crate::store::on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT c.platform, c.status, s.id, s.secret_sealed, s.valid_until FROM connections c \
                 LEFT JOIN webhook_secrets s ON s.connection_id = c.id \
                   AND (s.valid_until IS NULL OR s.valid_until > $2) \
                 WHERE c.id = $1 \
                 ORDER BY (s.valid_until IS NULL) DESC, s.created_at DESC, s.id DESC",
            )
            .bind(connection_id).bind(now)
            .fetch_all(pool).await?
        });
        let Some((platform, status, ..)) = rows.first() else {
            return Ok(None);
        };
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("connection {connection_id:?}: {what}"),
        };
        let platform = platform.parse().map_err(|_| corrupt("platform"))?;
        let status = status.parse().map_err(|_| corrupt("status"))?;
        let context = secret_context(connection_id);
        let secrets = rows
            .iter()
            .filter_map(|(_, _, id, sealed, until)| Some((id.as_ref()?, sealed.as_ref()?, until)))
            .map(|(id, sealed, until)| {
                Ok(IntakeSecret {
                    id: *id,
                    secret: cipher.open_token(sealed, &context)?,
                    valid_until: *until,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(IntakeState {
            platform,
            status,
            secrets,
        }))
    }

    /// Store verified deliveries in ONE transaction, each with its
    /// `handle-delivery` job when its status is `received`, each checked
    /// against its [`Premise`] (when given), dedupe key and replay key as
    /// [`Store::record_delivery`] does, in order: a later delivery of the
    /// batch is a duplicate or a replay of an earlier one as if it had come
    /// after it. Nothing is written when this fails.
    pub async fn record_deliveries(
        &self,
        batch: &[(&NewDelivery, Option<Premise>)],
    ) -> Result<Vec<Accepted>> {
        let prepared = prepare(batch)?;
        match self {
            Store::Postgres(pool) => {
                let together = independent(&prepared);
                let mut tx = pool.begin_with(pg_batch::BEGIN_GENERIC).await?;
                let out = pg_statements(&mut tx, &prepared, &together).await?;
                tx.commit().await?;
                Ok(out)
            }
            Store::Sqlite(pool) => {
                let out = sqlite_committed(pool, &prepared).await?;
                WalSync::of(pool).sync().await?;
                Ok(out)
            }
        }
    }

    /// What makes this store's committed deliveries durable after their
    /// commit returns: SQLite's [`WalSync`]; `None` on PostgreSQL, where a
    /// commit returns once its WAL is flushed.
    pub fn wal_sync(&self) -> Option<WalSync> {
        match self {
            Store::Sqlite(pool) => Some(WalSync::of(pool)),
            Store::Postgres(_) => None,
        }
    }

    /// A [`DeliveryWriter`] on this store (it connects on its first batch).
    pub fn delivery_writer(&self) -> DeliveryWriter {
        DeliveryWriter {
            store: self.clone(),
            own: None,
            checkpointer: None,
            met_stored_copy: None,
            written_again: 0,
        }
    }
}

fn prepare<'a>(batch: &[(&'a NewDelivery, Option<Premise>)]) -> Result<Vec<Prepared<'a>>> {
    batch
        .iter()
        .map(|(new, premise)| Prepared::new(new, *premise))
        .collect()
}

/// Which deliveries of the batch share no key and no replay key with
/// another of it: those go in together, in one statement on either backend
/// ([`pg_batch`], [`sqlite_batch`]). Every row of one statement sees the
/// same snapshot, so two copies of one key, or a body and its replay,
/// could not see each other there. The others are written after it, one
/// statement each and in their order, in the same transaction, where each
/// sees the rows before it. As the two groups share no key and no replay
/// key, neither's outcome depends on the other's, and every outcome is the
/// one of one delivery after the other.
fn independent(batch: &[Prepared<'_>]) -> Vec<bool> {
    let mut keys: HashMap<(&str, &str), usize> = HashMap::new();
    let mut replays: HashMap<(&str, &str), usize> = HashMap::new();
    for p in batch {
        let c = p.new.connection_id.as_str();
        *keys.entry((c, &p.new.delivery_key)).or_default() += 1;
        if let Some(h) = &p.new.replay_key {
            *replays.entry((c, h)).or_default() += 1;
        }
    }
    batch
        .iter()
        .map(|p| {
            let c = p.new.connection_id.as_str();
            keys[&(c, p.new.delivery_key.as_str())] == 1
                && p.new
                    .replay_key
                    .as_deref()
                    .is_none_or(|h| replays[&(c, h)] == 1)
        })
        .collect()
}

/// The statements of a batch: the deliveries marked in `together`
/// ([`independent`]) in one statement (`$many`, called with them in
/// order), then each of the others in its own (`$one`), so a batch with
/// any of those must run in a transaction; outcomes in the batch's order.
macro_rules! in_two_groups {
    ($conn:expr, $prepared:expr, $together:expr, $many:path, $one:path) => {{
        let prepared: &[Prepared<'_>] = $prepared;
        let together: &[bool] = $together;
        let (many, apart): (Vec<usize>, Vec<usize>) =
            (0..prepared.len()).partition(|&i| together[i]);
        let many_refs: Vec<&Prepared<'_>> = many.iter().map(|&i| &prepared[i]).collect();
        let mut slots: Vec<Option<Accepted>> = vec![None; prepared.len()];
        if !many.is_empty() {
            for (i, a) in many.iter().zip($many(&mut *$conn, &many_refs).await?) {
                slots[*i] = Some(a);
            }
        }
        for &i in &apart {
            slots[i] = Some($one(&mut *$conn, &prepared[i]).await?);
        }
        Ok(slots.into_iter().flatten().collect())
    }};
}

async fn pg_statements(
    conn: &mut PgConnection,
    prepared: &[Prepared<'_>],
    together: &[bool],
) -> Result<Vec<Accepted>> {
    in_two_groups!(conn, prepared, together, pg_batch::pg_many, pg_one)
}

/// Commit `prepared` on SQLite in the file's write turn, which is
/// released as the commit returns (before the WAL is synced).
async fn sqlite_committed(
    pool: &sqlx::SqlitePool,
    prepared: &[Prepared<'_>],
) -> Result<Vec<Accepted>> {
    let _turn = crate::store::write_turn::sqlite(pool).await?;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let out = sqlite_statements(&mut tx, prepared).await?;
    tx.commit().await?;
    Ok(out)
}

/// Syncs a SQLite store's WAL file: what makes the commits that returned
/// before it began durable.
///
/// The store opens SQLite with `synchronous = NORMAL`. In WAL mode a commit
/// then syncs nothing: it survives a crash of this process, not one of the
/// machine, until a checkpoint syncs the WAL. Most writes can be lost that
/// way and are made again (the next sync reads the page again), but a
/// delivery is answered once it is stored, and a platform does not send an
/// answered delivery again. So deliveries are answered only after the WAL
/// is synced. Committing with `synchronous = FULL` would do the same inside
/// the commit, holding the file's write lock for the length of the sync;
/// syncing after the commit leaves the next writer free meanwhile, and one
/// sync covers every commit that returned before it began (a gateway's
/// writer commits its next batch while the last one's sync runs, and
/// answers both after the next sync).
///
/// Syncing the file from outside SQLite is sound: a committed transaction's
/// frames are in the WAL file from its commit on, until a checkpoint copies
/// them to the database file, and SQLite syncs the WAL before it copies and
/// the database file before the WAL starts over (`synchronous = NORMAL`
/// does that much). So a frame is either in the file synced here or
/// already synced in the database file. The WAL is opened anew at each
/// sync: it is deleted when the last connection to the file closes, and a
/// descriptor kept open would then sync a file nothing reads.
#[derive(Debug, Clone)]
pub struct WalSync {
    wal: std::path::PathBuf,
}

/// Syncs of each WAL file this process made (tests: a sync cannot be
/// seen from outside).
#[cfg(any(test, feature = "testing"))]
static SYNCED: LazyLock<std::sync::Mutex<HashMap<std::path::PathBuf, u64>>> =
    LazyLock::new(Default::default);

impl WalSync {
    pub(crate) fn of(pool: &sqlx::SqlitePool) -> WalSync {
        let mut wal = pool.connect_options().get_filename().as_os_str().to_owned();
        wal.push("-wal");
        WalSync { wal: wal.into() }
    }

    /// The WAL file this syncs.
    pub fn path(&self) -> &std::path::Path {
        &self.wal
    }

    /// Sync the WAL file to the disk. No WAL file means nothing left in one:
    /// SQLite removes it only after a checkpoint that copied every frame to
    /// the database file and synced it.
    pub async fn sync(&self) -> Result<()> {
        let wal = self.wal.clone();
        let synced = tokio::task::spawn_blocking(move || match std::fs::File::open(&wal) {
            Ok(file) => file.sync_data(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        })
        .await
        .map_err(|e| std::io::Error::other(format!("the WAL sync did not finish: {e}")))
        .and_then(|synced| synced);
        synced.map_err(|e| RegistryError::Database(sqlx::Error::Io(e)))?;
        #[cfg(any(test, feature = "testing"))]
        {
            let mut synced = SYNCED.lock().unwrap_or_else(|e| e.into_inner());
            *synced.entry(self.wal.clone()).or_default() += 1;
        }
        Ok(())
    }

    /// How many times this process has synced this WAL file.
    #[cfg(any(test, feature = "testing"))]
    pub fn count(&self) -> u64 {
        let synced = SYNCED.lock().unwrap_or_else(|e| e.into_inner());
        synced.get(&self.wal).copied().unwrap_or(0)
    }
}

async fn sqlite_statements(
    conn: &mut SqliteConnection,
    prepared: &[Prepared<'_>],
) -> Result<Vec<Accepted>> {
    let together = independent(prepared);
    in_two_groups!(
        conn,
        prepared,
        &together,
        sqlite_batch::sqlite_many,
        sqlite_one
    )
}

/// What a gateway's delivery writer commits its batches through: on
/// PostgreSQL a connection of its own, taken out of the pool on the first
/// batch, whose session plans the batch statement generically
/// ([`pg_batch::SESSION_GENERIC`]), so that a batch whose deliveries share
/// no key and no replay key is ONE statement in its own implicit
/// transaction: one round trip, where a pooled connection needs three
/// (`BEGIN` with `SET LOCAL`, the statement, `COMMIT`). Batches with
/// deliveries that must see each other still get a transaction. On SQLite
/// it is [`Store::record_deliveries`] on the pool, but without its
/// [`WalSync`]: a batch is committed when [`DeliveryWriter::record`]
/// returns, durable only once a [`Store::wal_sync`] that began after that
/// has ended. Its caller answers after that sync, and can commit the next
/// batch meanwhile.
///
/// The connection is not the pool's any more: it does not count towards
/// `max_connections` (a gateway holds one per writer beside its pool). As
/// the pool does with its own, it is pinged before a batch when it sat
/// idle for [`crate::PING_IF_IDLE_FOR`] and opened afresh when the ping
/// fails (a restart, a failover); it is dropped after any error, to be
/// opened afresh by the next batch, so a socket cut while in use costs one
/// failed batch.
///
/// Its first try at such a batch leaves out the clause that skips a key
/// already stored ([`pg_batch::pg_many_first_try`]: the clause is a lookup
/// and a second write a delivery, for a copy that rarely exists); a batch
/// that meets a stored copy fails whole, writing nothing, and is written
/// again with the clause. After that the writer uses the clause from the
/// start for [`STORED_COPIES_WARY_FOR`]: copies come in runs (a platform
/// redelivering, retries of deliveries answered too late under load), and
/// each would otherwise cost its batch twice.
///
/// One difference from [`Store::record_deliveries`]: the single statement
/// commits on its own, so when the rare follow-up read of a duplicate
/// committed meanwhile by another gateway fails, the batch is already
/// stored and its requests are answered 503; the platform's retry is then
/// a duplicate, answered 200.
pub struct DeliveryWriter {
    store: Store,
    /// The writer's connection and when its last batch ended.
    own: Option<(PgConnection, Instant)>,
    /// SQLite: the checkpoints run beside this writer, started with its
    /// first batch and stopped when it is dropped.
    checkpointer: Option<Checkpointer>,
    /// PostgreSQL: when a batch last met a stored copy of a key.
    met_stored_copy: Option<Instant>,
    /// PostgreSQL: first tries that met a stored copy and were written
    /// again.
    written_again: u64,
}

/// How long a [`DeliveryWriter`] that met a stored copy of a key writes
/// every batch with the clause that skips one.
pub const STORED_COPIES_WARY_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// Body bytes a SQLite writer stores between two checkpoints beside it
/// (about 64 pages): under a stream of deliveries the WAL is copied to the
/// database file a little at a time, and an idle or slow stream causes no
/// more syncs than SQLite's own auto-checkpoint would.
pub const CHECKPOINT_BESIDE_AFTER_BYTES: usize = 256 * 1024;

/// SQLite's auto-checkpoint runs inside the commit that takes the WAL past
/// 1,000 pages: that commit copies them all to the database file and
/// syncs it while every delivery queued behind it waits, and with 50 KB
/// bodies those commits were the deliveries' tail. A PASSIVE checkpoint on
/// another connection of the pool, woken after every
/// [`CHECKPOINT_BESIDE_AFTER_BYTES`] committed, does that copying while
/// the writer goes on (a PASSIVE checkpoint takes no write lock). The
/// auto-checkpoint stays: it is what lets the WAL start over (a checkpoint
/// beside a steady writer never catches up with its last frame), and it
/// now finds little left to copy.
struct Checkpointer {
    wake: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
    done: Arc<AtomicU64>,
    pending: usize,
}

impl Checkpointer {
    fn start(pool: sqlx::SqlitePool) -> Checkpointer {
        let wake = Arc::new(Notify::new());
        let done = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (wake, done) = (wake.clone(), done.clone());
            async move {
                loop {
                    wake.notified().await;
                    let ran =
                        sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(PASSIVE)")
                            .fetch_one(&pool)
                            .await;
                    match ran {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            // The writer's own auto-checkpoint still runs.
                            tracing::warn!(%error, "a checkpoint beside the delivery writer failed");
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                    }
                }
            }
        });
        Checkpointer {
            wake,
            task,
            done,
            pending: 0,
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeliveryWriter {
    /// Store verified deliveries as [`Store::record_deliveries`] does;
    /// on SQLite they are durable only after a [`Store::wal_sync`] begun
    /// once this has returned.
    pub async fn record(
        &mut self,
        batch: &[(&NewDelivery, Option<Premise>)],
    ) -> Result<Vec<Accepted>> {
        let pool = match &self.store {
            Store::Postgres(pool) => pool,
            Store::Sqlite(pool) => {
                let written = sqlite_committed(pool, &prepare(batch)?).await?;
                // What went into the WAL: the bodies of the rows stored.
                let bytes: usize = batch
                    .iter()
                    .zip(&written)
                    .filter(|(_, a)| matches!(a, Accepted::Recorded(Recorded::Stored { .. })))
                    .map(|((d, _), _)| d.stored_body().len())
                    .sum();
                let c = self
                    .checkpointer
                    .get_or_insert_with(|| Checkpointer::start(pool.clone()));
                c.pending += bytes;
                if c.pending >= CHECKPOINT_BESIDE_AFTER_BYTES {
                    c.pending = 0;
                    c.wake.notify_one();
                }
                return Ok(written);
            }
        };
        let prepared = prepare(batch)?;
        if let Some((conn, used)) = &mut self.own
            && used.elapsed() >= crate::PING_IF_IDLE_FOR
            && sqlx::Connection::ping(conn).await.is_err()
        {
            self.own = None;
        }
        let (conn, used) = match &mut self.own {
            Some(own) => own,
            None => {
                let mut conn = pool.acquire().await?.detach();
                sqlx::raw_sql(pg_batch::SESSION_GENERIC)
                    .execute(&mut conn)
                    .await?;
                self.own.insert((conn, Instant::now()))
            }
        };
        let together = independent(&prepared);
        let wary = self
            .met_stored_copy
            .is_some_and(|at| at.elapsed() < STORED_COPIES_WARY_FOR);
        let (written, met) = if together.iter().all(|&alone| alone) {
            // One statement: its own implicit transaction.
            let all: Vec<&Prepared<'_>> = prepared.iter().collect();
            let first = if wary {
                pg_batch::Conflicts::Skipped
            } else {
                pg_batch::Conflicts::Fail
            };
            match pg_batch::pg_many_first_try(conn, &all, first).await {
                Ok((out, met)) => (Ok(out), met),
                Err(e) => (Err(e), false),
            }
        } else {
            (pg_in_transaction(conn, &prepared, &together).await, false)
        };
        *used = Instant::now();
        if met {
            tracing::info!(
                for_secs = STORED_COPIES_WARY_FOR.as_secs(),
                "a batch of deliveries met a stored copy of a key and was written again; \
                 the next batches skip stored copies from the start"
            );
            self.met_stored_copy = Some(Instant::now());
            self.written_again += 1;
        }
        if written.is_err() {
            self.own = None;
        }
        written
    }

    /// Batches this writer wrote a second time because their first try met
    /// a stored copy of a key (PostgreSQL; 0 on SQLite).
    pub fn written_again(&self) -> u64 {
        self.written_again
    }

    /// Checkpoints run beside this writer so far (SQLite; 0 on
    /// PostgreSQL).
    pub fn checkpoints_beside(&self) -> u64 {
        self.checkpointer
            .as_ref()
            .map_or(0, |c| c.done.load(Ordering::Relaxed))
    }
}

async fn pg_in_transaction(
    conn: &mut PgConnection,
    prepared: &[Prepared<'_>],
    together: &[bool],
) -> Result<Vec<Accepted>> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    let out = pg_statements(&mut tx, prepared, together).await?;
    tx.commit().await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_read_take_deliveries() {
        assert_eq!(reading_statuses(), "'enabled', 'held', 'rejected'");
    }
}
