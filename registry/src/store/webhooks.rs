//! Webhook secrets and deliveries.
//!
//! Each connection has its own webhook secret, generated here (32 random
//! bytes, hex) and sealed with the master key before SQL sees it. A rotation
//! keeps the old secret valid until the end of an overlap, so the platform's
//! configuration can be changed without a window in which deliveries fail.
//!
//! A delivery is stored together with the job that will process it in ONE
//! transaction, before the gateway acknowledges it: an acknowledged delivery
//! is never lost, and a delivery whose transaction failed was never
//! acknowledged (the platform retries it). apalis's own push is not callable
//! inside a foreign transaction, so the job row is written here with the
//! same INSERT apalis-sqlite / apalis-postgres use (`queries/task/sink.sql`):
//! a ULID id, the queue name as `job_type`, the JSON-encoded arguments as
//! bytes, status `Pending`, no attempts yet, `run_at` now in seconds.
//!
//! The UNIQUE index on `(connection_id, delivery_key)` makes a redelivery a
//! duplicate: concurrent copies of one delivery yield one row and one job.

use cmcp_domain::{Platform, Token};
use serde::{Deserialize, Serialize};

use super::audit::{NewAuditEntry, insert_audit};
use super::{Backend, Store, in_tx, now_ms, on_pool};
use crate::cipher::Cipher;
use crate::error::{RegistryError, Result};

/// The queue the gateway puts delivery jobs on (the worker's
/// `handle_delivery` job).
pub const HANDLE_DELIVERY_QUEUE: &str = "handle-delivery";

/// Attempts apalis makes at a `handle-delivery` job before it gives up
/// (each delivery also counts its own retries: `retry_delivery_at`).
pub const HANDLE_DELIVERY_ATTEMPTS: i32 = 5;

/// The arguments of a `handle-delivery` job, as the store writes them: one
/// delivery (`{"delivery_id": …}`: a retry, a replay, a delivery written
/// apart from its batch), or every delivery a batch statement stored
/// (`{"delivery_ids": [...]}`), so that a batch costs one job row instead
/// of one a delivery. Each delivery is still processed, retried and
/// finished on its own; a job run again skips those already finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeliveryJob {
    One { delivery_id: String },
    Batch { delivery_ids: Vec<String> },
}

impl DeliveryJob {
    /// The deliveries the job names, in the order they were stored.
    pub fn ids(&self) -> &[String] {
        match self {
            DeliveryJob::One { delivery_id } => std::slice::from_ref(delivery_id),
            DeliveryJob::Batch { delivery_ids } => delivery_ids,
        }
    }
}

/// A delivery as the gateway stores it after verification.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub connection_id: String,
    pub platform: Platform,
    /// The platform's delivery identity (`DeliveryId`), the dedupe key.
    pub delivery_key: String,
    /// A short label such as `repository.renamed`.
    pub event: String,
    /// Only the headers that matter for parsing; never auth headers.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// How it was verified, e.g. `hmac-sha256` or `drive-channel`.
    pub verification: String,
    /// `received` (a job will process it), `failed` (kept, not parseable)
    /// or `ignored` (understood, nothing to do).
    pub status: DeliveryStatus,
    pub error: Option<String>,
    /// What recognises the signed body if it comes again under another
    /// delivery id (the gateway's: a hash of the signature that verified
    /// it); `None` where bodies carry nothing (Drive notifications are all
    /// empty).
    pub replay_key: Option<String>,
}

impl NewDelivery {
    /// The body as its row keeps it. An ignored event (a `push`, which this
    /// fleet never reads) is answered and kept as a row with its outcome;
    /// its body, which can be megabytes, is never needed again.
    pub fn stored_body(&self) -> &[u8] {
        if self.status == DeliveryStatus::Ignored {
            &[]
        } else {
            &self.body
        }
    }
}

/// A replay of a signed body under a new delivery id is recognised for this
/// long after the first copy (a platform's own redeliveries keep their id
/// and are caught by the delivery key whenever they come).
pub const REPLAY_WINDOW_MS: i64 = 24 * 3_600_000;

cmcp_domain::string_enum! {
    pub enum DeliveryStatus: "delivery status" {
        Received = "received",
        Processed = "processed",
        Failed = "failed",
        Ignored = "ignored",
    }
}

/// What recording a delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A new delivery row, and its job when it needs one.
    Stored { id: String, job_id: Option<String> },
    /// The same delivery key was already stored for this connection.
    Duplicate { id: String },
    /// The same signed body was stored for this connection under another
    /// delivery key within the replay window.
    Replay { id: String },
}

#[derive(Clone, Serialize)]
pub struct DeliveryRow {
    pub id: String,
    pub connection_id: String,
    pub platform: Platform,
    pub delivery_key: String,
    pub event: String,
    pub received_at: i64,
    pub headers: Vec<(String, String)>,
    #[serde(skip)]
    pub body: Vec<u8>,
    pub verification: String,
    pub status: DeliveryStatus,
    pub error: Option<String>,
    pub processed_at: Option<i64>,
    /// Processing attempts that failed and were retried.
    pub attempts: i64,
    /// When the next retry is due, while one is.
    pub next_attempt_at: Option<i64>,
}

/// The body shows as its length: it can be megabytes.
impl std::fmt::Debug for DeliveryRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryRow")
            .field("id", &self.id)
            .field("connection_id", &self.connection_id)
            .field("platform", &self.platform)
            .field("delivery_key", &self.delivery_key)
            .field("event", &self.event)
            .field("received_at", &self.received_at)
            .field("body_bytes", &self.body.len())
            .field("status", &self.status)
            .field("error", &self.error)
            .field("processed_at", &self.processed_at)
            .field("attempts", &self.attempts)
            .field("next_attempt_at", &self.next_attempt_at)
            .finish_non_exhaustive()
    }
}

#[derive(sqlx::FromRow)]
struct RawDelivery {
    id: String,
    connection_id: String,
    platform: String,
    delivery_key: String,
    event: String,
    received_at: i64,
    headers: String,
    body: Vec<u8>,
    verification: String,
    status: String,
    error: Option<String>,
    processed_at: Option<i64>,
    attempts: i64,
    next_attempt_at: Option<i64>,
}

impl TryFrom<RawDelivery> for DeliveryRow {
    type Error = RegistryError;

    fn try_from(r: RawDelivery) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("delivery {}: {what}", r.id),
        };
        Ok(DeliveryRow {
            platform: r.platform.parse().map_err(|_| corrupt("platform"))?,
            headers: serde_json::from_str(&r.headers).map_err(|_| corrupt("headers"))?,
            status: r.status.parse().map_err(|_| corrupt("status"))?,
            id: r.id,
            connection_id: r.connection_id,
            delivery_key: r.delivery_key,
            event: r.event,
            received_at: r.received_at,
            body: r.body,
            verification: r.verification,
            error: r.error,
            processed_at: r.processed_at,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
        })
    }
}

/// A job row for an apalis queue, written by the store itself so that it can
/// share a transaction with other rows.
#[derive(Debug, Clone)]
pub struct QueuedJob {
    pub queue: String,
    /// The arguments as apalis's JSON codec encodes them
    /// (`serde_json::to_vec`).
    pub payload: Vec<u8>,
    pub max_attempts: i32,
}

impl QueuedJob {
    pub fn json<T: Serialize>(queue: &str, args: &T, max_attempts: i32) -> Result<QueuedJob> {
        Ok(QueuedJob {
            queue: queue.to_owned(),
            payload: serde_json::to_vec(args).map_err(|e| RegistryError::Invalid {
                what: format!("job arguments: {e}"),
            })?,
            max_attempts,
        })
    }

    /// The `handle-delivery` job of one stored delivery.
    pub fn handle_delivery(delivery_id: &str) -> QueuedJob {
        QueuedJob::delivery_job(&DeliveryJob::One {
            delivery_id: delivery_id.to_owned(),
        })
    }

    /// The one `handle-delivery` job of deliveries stored together.
    pub fn handle_deliveries(delivery_ids: Vec<String>) -> QueuedJob {
        QueuedJob::delivery_job(&DeliveryJob::Batch { delivery_ids })
    }

    fn delivery_job(args: &DeliveryJob) -> QueuedJob {
        QueuedJob {
            queue: HANDLE_DELIVERY_QUEUE.to_owned(),
            // A struct of strings always encodes.
            payload: serde_json::to_vec(args).unwrap_or_default(),
            max_attempts: HANDLE_DELIVERY_ATTEMPTS,
        }
    }
}

/// The INSERT of apalis's sink for each backend: the tables differ (SQLite
/// `Jobs` with epoch seconds and JSON-text metadata; PostgreSQL
/// `apalis.jobs` with `timestamptz` and hstore metadata, left NULL), the
/// bound values do not.
pub(super) fn job_insert_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "INSERT INTO Jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority, metadata) \
             VALUES (?, ?, ?, 'Pending', 0, ?, ?, 0, '{}')"
        }
        Backend::Postgres => {
            "INSERT INTO apalis.jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority, metadata) \
             VALUES ($1, $2, $3, 'Pending', 0, $4, to_timestamp($5::bigint), 0, NULL)"
        }
    }
}

/// What [`Store::fit_queue_tables`] runs on PostgreSQL. Every process that
/// sets the queue up runs it while others write jobs; once fitted it takes
/// no lock (PostgreSQL skips a trigger or index that is gone before it
/// locks the table), so it never queues behind an open transaction.
const FIT_QUEUE_TABLES: &str = "DROP TRIGGER IF EXISTS notify_workers ON apalis.jobs; \
     DROP INDEX IF EXISTS apalis.unique_job_id; \
     DROP INDEX IF EXISTS apalis.lidx; \
     DO $fit$ DECLARE ix record; BEGIN \
       FOR ix IN SELECT i.indexname, v.made FROM pg_indexes i JOIN (VALUES \
           ('idx_apalis_jobs_lock_by', \
            'CREATE INDEX idx_apalis_jobs_lock_by ON apalis.jobs (lock_by) WHERE lock_by IS NOT NULL'), \
           ('idx_jobs_idempotency_key', \
            'CREATE UNIQUE INDEX idx_jobs_idempotency_key ON apalis.jobs (job_type, idempotency_key) \
             WHERE idempotency_key IS NOT NULL')) v(name, made) ON i.indexname = v.name \
         WHERE i.schemaname = 'apalis' AND i.indexdef NOT LIKE '% WHERE %' LOOP \
         EXECUTE format('DROP INDEX apalis.%I', ix.indexname); \
         EXECUTE ix.made; \
       END LOOP; \
     END $fit$";

/// Bind one job's values to a query in [`job_insert_sql`]'s order (payload,
/// id, queue, max attempts, due epoch second): every statement that writes
/// a job row, single or batched, binds through this.
macro_rules! bind_job {
    ($q:expr, $job:expr, $id:expr, $run_at:expr) => {{
        let job: &$crate::store::webhooks::QueuedJob = $job;
        $q.bind(&job.payload)
            .bind($id)
            .bind(&job.queue)
            .bind(job.max_attempts)
            .bind($run_at)
    }};
}

/// Insert one apalis job row through any executor, due now or at epoch
/// second `$run_at`; returns its id.
macro_rules! insert_job {
    ($ex:expr, $backend:expr, $job:expr) => {
        insert_job!($ex, $backend, $job, now_ms() / 1000)
    };
    ($ex:expr, $backend:expr, $job:expr, $run_at:expr) => {{
        let job: &QueuedJob = $job;
        let run_at: i64 = $run_at;
        let id = new_ulid();
        bind_job!(sqlx::query(job_insert_sql($backend)), job, &id, run_at)
            .execute($ex)
            .await
            .map(|_| id)
    }};
}

/// A ULID (48-bit millisecond time, 80 random bits, Crockford base32): the
/// id format apalis parses back from its job rows, sortable by time. The
/// random bits come from the thread's CSPRNG (seeded from the OS, no
/// system call per id: the gateway makes two ids a delivery).
pub fn new_ulid() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let ms = u128::from(u64::try_from(now_ms()).unwrap_or(0)) & ((1 << 48) - 1);
    let random = rand::random::<u128>() & ((1 << 80) - 1);
    let value = (ms << 80) | random;
    (0..26)
        .rev()
        .map(|i| ALPHABET[((value >> (i * 5)) & 0x1f) as usize] as char)
        .collect()
}

/// Associated data binding a sealed webhook secret to its connection.
fn secret_context(connection_id: &str) -> String {
    format!("cmcp-webhook-secret:{connection_id}")
}

fn generate_secret() -> Token {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Token::new(hex::encode(bytes))
}

const OLDEST_UNPROCESSED_SQL: &str =
    "SELECT MIN(received_at) FROM webhook_deliveries WHERE status = 'received'";

const DELIVERY_SELECT: &str = "SELECT id, connection_id, platform, delivery_key, event, received_at, \
     headers, body, verification, status, error, processed_at, attempts, next_attempt_at \
     FROM webhook_deliveries";

impl Store {
    /// Give the connection a webhook secret unless it has a current one.
    /// Returns whether one was created. Safe to call concurrently: the
    /// partial unique index admits one current secret per connection.
    pub async fn ensure_webhook_secret(
        &self,
        cipher: &Cipher,
        connection_id: &str,
    ) -> Result<bool> {
        self.get_connection(connection_id).await?;
        let sealed = cipher.seal_token(&generate_secret(), &secret_context(connection_id))?;
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO webhook_secrets (connection_id, secret_sealed, created_at, valid_until) \
                 VALUES ($1, $2, $3, NULL) ON CONFLICT (connection_id) WHERE valid_until IS NULL DO NOTHING",
            )
            .bind(connection_id).bind(&sealed).bind(now)
            .execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }

    /// Every secret of the connection valid now, the current one first.
    /// Empty when the connection has none (the gateway then refuses all).
    pub async fn webhook_secrets(
        &self,
        cipher: &Cipher,
        connection_id: &str,
    ) -> Result<Vec<Token>> {
        let now = now_ms();
        let rows: Vec<(Vec<u8>,)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT secret_sealed FROM webhook_secrets WHERE connection_id = $1 \
                 AND (valid_until IS NULL OR valid_until > $2) \
                 ORDER BY (valid_until IS NULL) DESC, created_at DESC, id DESC",
            )
            .bind(connection_id).bind(now)
            .fetch_all(pool).await?
        });
        let context = secret_context(connection_id);
        rows.iter()
            .map(|(sealed,)| cipher.open_token(sealed, &context))
            .collect()
    }

    /// The current secret, creating it first if the connection has none.
    pub async fn current_webhook_secret(
        &self,
        cipher: &Cipher,
        connection_id: &str,
    ) -> Result<Token> {
        self.ensure_webhook_secret(cipher, connection_id).await?;
        self.webhook_secrets(cipher, connection_id)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| RegistryError::not_found(format!("webhook secret of {connection_id:?}")))
    }

    /// Replace the current secret; the old ones stay valid for at most
    /// `overlap_ms` more. Audited (never with the secret).
    pub async fn rotate_webhook_secret(
        &self,
        cipher: &Cipher,
        connection_id: &str,
        overlap_ms: i64,
        actor: &str,
    ) -> Result<()> {
        self.get_connection(connection_id).await?;
        let sealed = cipher.seal_token(&generate_secret(), &secret_context(connection_id))?;
        let now = now_ms();
        let until = now.saturating_add(overlap_ms.max(0));
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: "connection.webhook-secret-rotated".to_owned(),
            target: format!("connection:{connection_id}"),
            reason: None,
            before: None,
            after: Some(serde_json::json!({ "old_secret_valid_until": until })),
        };
        in_tx!(self, durable, tx => {
            sqlx::query("UPDATE webhook_secrets SET valid_until = $1 WHERE connection_id = $2 AND (valid_until IS NULL OR valid_until > $1)")
                .bind(until).bind(connection_id).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO webhook_secrets (connection_id, secret_sealed, created_at, valid_until) VALUES ($1, $2, $3, NULL)")
                .bind(connection_id).bind(&sealed).bind(now).execute(&mut *tx).await?;
            insert_audit!(&mut *tx, &entry, now)?;
        });
        Ok(())
    }

    /// Store a verified delivery and, when its status is `received`, its
    /// `handle-delivery` job, in one transaction. A delivery key already
    /// stored for the connection is a duplicate, and so is a body already
    /// stored for it (same replay key) within [`REPLAY_WINDOW_MS`]: a signed body
    /// replayed under a new delivery id. Nothing is written for either, nor
    /// for a connection that does not exist ([`RegistryError::NotFound`]).
    pub async fn record_delivery(&self, new: &NewDelivery) -> Result<Recorded> {
        match self.record_deliveries(&[(new, None)]).await?.pop() {
            Some(Accepted::Recorded(recorded)) => Ok(recorded),
            // Without a premise only the connection's existence is
            // checked: stale means there is no such connection.
            Some(Accepted::Stale) => Err(RegistryError::not_found(format!(
                "connection {:?}",
                new.connection_id
            ))),
            None => Err(RegistryError::Corrupt {
                what: format!("delivery {:?} was not recorded", new.delivery_key),
            }),
        }
    }

    /// Fit apalis's PostgreSQL tables, once they exist, to the way this
    /// fleet writes and reads them (idempotent; SQLite's are left as they
    /// are). Run after apalis's own setup, which would not undo it: its
    /// migrations run once each.
    ///
    /// - The per-row `notify_workers` trigger is dropped. Its `NOTIFY`
    ///   takes PostgreSQL's one notification lock from before the commit
    ///   until the commit record is flushed, so every transaction that
    ///   queues a job waited for every other one's commit, WAL flush
    ///   included: at 16 webhook clients the delivery writers spent 14 % of
    ///   their time in that lock wait, one commit at a time. Nothing here
    ///   listens: the fleet's workers poll (`[queue] poll_interval`). A
    ///   worker that listened would still get every job, at its poll.
    /// - Two indexes that repeat others are dropped, one write each per
    ///   queued job: `unique_job_id` (the primary key's `id`) and `lidx`
    ///   (`idx_apalis_jobs_lock_by`'s `lock_by`).
    /// - Two others leave out the rows whose key is NULL, which is every
    ///   job as it is queued here: `idx_apalis_jobs_lock_by` (a job gets its
    ///   `lock_by` when a worker takes it; apalis looks jobs up by a
    ///   worker's id, never by NULL) and the unique
    ///   `idx_jobs_idempotency_key` (NULLs were never equal to each other
    ///   in it, and apalis names it in no `ON CONFLICT`). Both kept every
    ///   queued job's NULL entry: two index writes per delivery. Each is
    ///   rebuilt once, the first time a process fits the tables after
    ///   apalis's setup made it (the table is locked for that build).
    pub async fn fit_queue_tables(&self) -> Result<()> {
        if let Store::Postgres(pool) = self {
            sqlx::raw_sql(FIT_QUEUE_TABLES).execute(pool).await?;
        }
        Ok(())
    }

    /// Put one job row on an apalis queue (outside any other write).
    pub async fn enqueue_job(&self, job: &QueuedJob) -> Result<String> {
        let backend = self.backend();
        let id = on_pool!(self, pool => insert_job!(pool, backend, job)?);
        Ok(id)
    }

    /// The `handle-delivery` jobs queued, whatever their status: each
    /// job's id and the deliveries it names (for tests and operators).
    pub async fn delivery_jobs(&self) -> Result<Vec<(String, DeliveryJob)>> {
        let sql = match self.backend() {
            Backend::Sqlite => "SELECT id, job FROM Jobs WHERE job_type = $1 ORDER BY id",
            Backend::Postgres => "SELECT id, job FROM apalis.jobs WHERE job_type = $1 ORDER BY id",
        };
        let rows: Vec<(String, Vec<u8>)> = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(HANDLE_DELIVERY_QUEUE).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|(id, payload)| {
                let args =
                    serde_json::from_slice(&payload).map_err(|e| RegistryError::Corrupt {
                        what: format!("handle-delivery job {id:?}: {e}"),
                    })?;
                Ok((id, args))
            })
            .collect()
    }

    /// Rows of an apalis queue, whatever their status (for tests and
    /// operators).
    pub async fn queued_job_count(&self, queue: &str) -> Result<i64> {
        let sql = match self.backend() {
            Backend::Sqlite => "SELECT COUNT(*) FROM Jobs WHERE job_type = $1",
            Backend::Postgres => "SELECT COUNT(*) FROM apalis.jobs WHERE job_type = $1",
        };
        let (n,): (i64,) = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(queue).fetch_one(pool).await?
        });
        Ok(n)
    }

    pub async fn get_delivery(&self, id: &str) -> Result<DeliveryRow> {
        let sql = format!("{DELIVERY_SELECT} WHERE id = $1");
        let raw: Option<RawDelivery> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?
        });
        raw.ok_or_else(|| RegistryError::not_found(format!("delivery {id:?}")))?
            .try_into()
    }

    /// A connection's deliveries, oldest first.
    pub async fn list_deliveries(&self, connection_id: &str) -> Result<Vec<DeliveryRow>> {
        let sql = format!("{DELIVERY_SELECT} WHERE connection_id = $1 ORDER BY received_at, id");
        let raws: Vec<RawDelivery> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(connection_id).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// Record how processing a delivery ended.
    pub async fn finish_delivery(
        &self,
        id: &str,
        status: DeliveryStatus,
        error: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query("UPDATE webhook_deliveries SET status = $1, error = $2, processed_at = $3 WHERE id = $4")
                .bind(status.as_str()).bind(error).bind(now).bind(id)
                .execute(pool).await?.rows_affected()
        });
        if n == 0 {
            return Err(RegistryError::not_found(format!("delivery {id:?}")));
        }
        Ok(())
    }

    /// The tenant under which this connection's spaces are addressed
    /// (GitHub's web host, Bitbucket's workspace uuid, …), taken from a
    /// space it already holds, preferring one of `kind`. `None` before the
    /// first sync.
    pub async fn connection_tenant(
        &self,
        connection_id: &str,
        kind: cmcp_domain::SpaceKind,
    ) -> Result<Option<String>> {
        let row: Option<(String,)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT s.tenant FROM spaces s JOIN sightings g ON g.space_address = s.address \
                 WHERE g.connection_id = $1 \
                 ORDER BY CASE WHEN s.kind = $2 THEN 0 ELSE 1 END, g.first_seen_at LIMIT 1",
            )
            .bind(connection_id).bind(kind.as_str())
            .fetch_optional(pool).await?
        });
        Ok(row.map(|(t,)| t))
    }

    /// When the oldest delivery still waiting for its job was received
    /// (read from the first entry of `webhook_deliveries_state` at
    /// `received`, whatever the table's size).
    pub async fn oldest_unprocessed_delivery(&self) -> Result<Option<i64>> {
        let (oldest,): (Option<i64>,) = on_pool!(self, pool => {
            sqlx::query_as(OLDEST_UNPROCESSED_SQL).fetch_one(pool).await?
        });
        Ok(oldest)
    }
}

mod intake;
mod retries;

pub use intake::{
    Accepted, CHECKPOINT_BESIDE_AFTER_BYTES, DeliveryWriter, IntakeSecret, IntakeState, Premise,
    WalSync,
};
pub use retries::DeliveryFilter;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDb;

    #[test]
    fn ulids_are_26_crockford_characters() {
        let a = new_ulid();
        assert_eq!(a.len(), 26);
        assert!(
            a.chars()
                .all(|c| "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(c))
        );
        assert!(a.as_bytes()[0] <= b'7', "the first character holds 3 bits");
        assert_ne!(new_ulid(), new_ulid());
    }

    #[test]
    fn delivery_job_payload_is_the_json_of_its_arguments() {
        let job = QueuedJob::handle_delivery("01ABC");
        assert_eq!(job.queue, HANDLE_DELIVERY_QUEUE);
        assert_eq!(job.payload, br#"{"delivery_id":"01ABC"}"#);
        let batch = QueuedJob::handle_deliveries(vec!["01A".into(), "01B".into()]);
        assert_eq!(batch.payload, br#"{"delivery_ids":["01A","01B"]}"#);
        for (job, ids) in [(job, vec!["01ABC"]), (batch, vec!["01A", "01B"])] {
            let args: DeliveryJob = serde_json::from_slice(&job.payload).unwrap();
            assert_eq!(args.ids(), ids);
        }
    }

    crate::both_backends!(the_oldest_waiting_delivery_is_read_from_the_state_index);

    /// The gateway's age gauge reads the oldest waiting delivery through
    /// `webhook_deliveries_state` (it replaced
    /// `webhook_deliveries_unprocessed`), never by reading every row.
    /// PostgreSQL is asked with sequential scans priced out, as on a table
    /// big enough to matter; an empty one would rightly be scanned.
    async fn the_oldest_waiting_delivery_is_read_from_the_state_index(db: TestDb) {
        let plan: Vec<String> = match &db.store {
            Store::Sqlite(pool) => {
                let explain = format!("EXPLAIN QUERY PLAN {OLDEST_UNPROCESSED_SQL}");
                sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(explain))
                    .fetch_all(pool)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.3)
                    .collect()
            }
            Store::Postgres(pool) => {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("SET LOCAL enable_seqscan = off")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                let explain = format!("EXPLAIN {OLDEST_UNPROCESSED_SQL}");
                let plan = sqlx::query_as::<_, (String,)>(sqlx::AssertSqlSafe(explain))
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap();
                tx.rollback().await.unwrap();
                plan.into_iter().map(|r| r.0).collect()
            }
        };
        let text = plan.join("\n");
        assert!(
            text.contains("webhook_deliveries_state") && !text.contains("Seq Scan"),
            "{text}"
        );
    }
}
