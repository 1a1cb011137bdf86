//! PostgreSQL: the deliveries of a batch in ONE statement over arrays
//! (`unnest`), so that a batch costs one round trip however many it holds
//! (each round trip is a wake-up of the server's backend and of this
//! process; on a busy machine those, not the SQL, bound the rate).
//!
//! Only the deliveries [`super::independent`] marks go in together (the
//! others follow one statement each).

use sqlx::PgConnection;

use super::{Accepted, Prepared, premise_check, replay_lookup};
use crate::error::{RegistryError, Result};
use crate::store::webhooks::{HANDLE_DELIVERY_ATTEMPTS, HANDLE_DELIVERY_QUEUE, Recorded, new_ulid};

/// The batch statement. The bodies (`$8`) are read from their array by
/// ordinal where they are inserted, and never pass through `input` and
/// `checked`: `checked` is materialised and its rows sorted, and carrying
/// the bodies there copied each one twice more in the server before its
/// INSERT. The deliveries it stores as `received` share ONE job
/// (`{"delivery_ids": [...]}`, id `$17`): a job row a delivery, with its
/// two index entries, was a twentieth of the deliveries bench's rate. The
/// job is built from the rows the INSERT returns, without joining them back
/// to `checked` (that join cost about 3 % of the bench's rate); the worker
/// handles a job's deliveries concurrently, so their order in it is only
/// the order they were inserted in.
///
/// `conflicts` is [`Conflicts::Skipped`] for the statement that may meet
/// a stored copy of a key: its INSERT skips the copy, and the outcome
/// names the stored one. [`Conflicts::Fail`] leaves the clause out, for
/// the writer's first try at a batch ([`pg_many_first_try`]): PostgreSQL
/// then checks each key once, as the unique index takes the entry, instead
/// of looking it up first and confirming a speculative insertion after
/// (about 3 % of the bench's rate), and a batch that does meet a stored
/// copy fails whole and is written again with the clause.
fn batch_sql(with_job: bool, conflicts: Conflicts) -> String {
    let job = if with_job {
        ", job AS (INSERT INTO apalis.jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority, metadata) \
           SELECT convert_to(json_build_object('delivery_ids', json_agg(ins.id))::text, 'UTF8'), \
             $17, $20, 'Pending', 0, $18, to_timestamp($19::int8), 0, NULL \
           FROM ins WHERE ins.status = 'received' \
           HAVING count(*) > 0 RETURNING id)"
    } else {
        ""
    };
    let on_conflict = match conflicts {
        Conflicts::Skipped => "ON CONFLICT (connection_id, delivery_key) DO NOTHING ",
        Conflicts::Fail => "",
    };
    format!(
        "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
           $6::int8[], $7::text[], $9::text[], $10::text[], $11::text[], $12::int8[], \
           $13::text[], $14::int8[], $15::int8[], $16::int8[]) WITH ORDINALITY AS t(id, connection_id, \
           platform, delivery_key, event, received_at, headers, verification, status, error, \
           processed_at, replay_key, secret_id, checked, since, ord)), \
         checked AS MATERIALIZED (SELECT i.*, \
           {premise} AS ok, \
           ({replay}) AS replay \
           FROM input i), \
         ins AS (INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, \
           received_at, headers, body, verification, status, error, processed_at, replay_key) \
           SELECT id, connection_id, platform, delivery_key, event, received_at, headers, \
           ($8::bytea[])[ord], verification, status, error, processed_at, replay_key FROM checked \
           WHERE ok AND replay IS NULL ORDER BY ord \
           {on_conflict}RETURNING id, status){job} \
         SELECT c.ok, c.replay, ins.id, \
           CASE WHEN ins.id IS NULL AND c.ok AND c.replay IS NULL THEN \
             (SELECT d.id FROM webhook_deliveries d WHERE d.connection_id = c.connection_id \
                AND d.delivery_key = c.delivery_key) END \
         FROM checked c LEFT JOIN ins ON ins.id = c.id ORDER BY c.ord",
        premise = premise_check(
            "i.connection_id",
            "i.platform",
            "i.secret_id",
            "i.checked",
            "i.received_at"
        ),
        replay = replay_lookup("i.connection_id", "i.replay_key", "i.since")
    )
}

/// What the batch statement does with a key already stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conflicts {
    /// Skips that delivery (`ON CONFLICT DO NOTHING`); its outcome is a
    /// duplicate.
    Skipped,
    /// Fails the statement (a unique violation on the key).
    Fail,
}

/// The batch's transaction begins by asking for the statement's generic
/// plan. Its twenty parameters are arrays, and PostgreSQL's default
/// (`plan_cache_mode = auto`) estimates an `unnest` of a known array from
/// its length, so every custom plan looks cheaper than the generic one
/// and the statement was planned again at every execution: a quarter of
/// the server's CPU at 16 clients (more than the inserts themselves). The
/// generic plan is the same index lookups per input row, at no planning
/// cost. `SET LOCAL` ends with the transaction, so the pooled connection
/// keeps the default for everything else; `BEGIN` and `SET` go in one
/// simple query, one round trip.
pub(super) const BEGIN_GENERIC: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

/// The same for a connection that only ever runs delivery batches (a
/// [`super::DeliveryWriter`]'s own): set once for its session.
pub(super) const SESSION_GENERIC: &str = "SET plan_cache_mode = force_generic_plan";

/// The four statements, by job and by [`Conflicts`].
static STATEMENTS: std::sync::LazyLock<[[String; 2]; 2]> = std::sync::LazyLock::new(|| {
    [false, true].map(|with_job| {
        [Conflicts::Skipped, Conflicts::Fail].map(|conflicts| batch_sql(with_job, conflicts))
    })
});

/// The unique index on a delivery's key, as a violation names it.
const KEY_INDEX: &str = "webhook_deliveries_key";

/// The writer's try at a batch (its own statement, in its own implicit
/// transaction) with `first` as its statement's [`Conflicts`]; when that is
/// [`Conflicts::Fail`] and the batch met a stored copy of a key, written
/// again with [`Conflicts::Skipped`] (the failed statement wrote nothing).
/// `Ok((outcomes, true))` says it was written twice: a platform
/// redelivering, or a retry of a delivery answered too late. Never inside
/// a transaction of the caller's: the failure would abort it.
pub(super) async fn pg_many_first_try<'a>(
    conn: &mut PgConnection,
    batch: &[&'a Prepared<'a>],
    first: Conflicts,
) -> Result<(Vec<Accepted>, bool)> {
    match pg_statement(conn, batch, first).await {
        Ok(out) => Ok((out, false)),
        // A unique violation comes back as `AlreadyExists`, named by its
        // index.
        Err(RegistryError::AlreadyExists { what })
            if first == Conflicts::Fail && what == KEY_INDEX =>
        {
            Ok((pg_many(conn, batch).await?, true))
        }
        Err(e) => Err(e),
    }
}

type Row = (Option<bool>, Option<String>, Option<String>, Option<String>);

/// Write `batch` (deliveries that share no key and no replay key) in one
/// statement; outcomes in its order.
pub(super) async fn pg_many<'a>(
    conn: &mut PgConnection,
    batch: &[&'a Prepared<'a>],
) -> Result<Vec<Accepted>> {
    pg_statement(conn, batch, Conflicts::Skipped).await
}

async fn pg_statement<'a>(
    conn: &mut PgConnection,
    batch: &[&'a Prepared<'a>],
    conflicts: Conflicts,
) -> Result<Vec<Accepted>> {
    let with_job = batch.iter().any(|p| p.needs_job());
    // The batch's one job (when any of it is stored `received`).
    let job_id = new_ulid();
    let sql: &'static str =
        STATEMENTS[usize::from(with_job)][usize::from(conflicts == Conflicts::Fail)].as_str();
    let col =
        |f: fn(&'a Prepared<'a>) -> &'a str| batch.iter().map(|p| f(p)).collect::<Vec<&'a str>>();
    let rows: Vec<Row> = sqlx::query_as(sql)
        .bind(col(|p| &p.id))
        .bind(col(|p| &p.new.connection_id))
        .bind(col(|p| p.new.platform.as_str()))
        .bind(col(|p| &p.new.delivery_key))
        .bind(col(|p| &p.new.event))
        .bind(batch.iter().map(|p| p.now).collect::<Vec<i64>>())
        .bind(col(|p| &p.headers))
        .bind(batch.iter().map(|p| p.body).collect::<Vec<&[u8]>>())
        .bind(col(|p| &p.new.verification))
        .bind(col(|p| p.new.status.as_str()))
        .bind(
            batch
                .iter()
                .map(|p| p.new.error.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            batch
                .iter()
                .map(|p| p.processed_at)
                .collect::<Vec<Option<i64>>>(),
        )
        .bind(
            batch
                .iter()
                .map(|p| p.new.replay_key.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            batch
                .iter()
                .map(|p| p.secret_id())
                .collect::<Vec<Option<i64>>>(),
        )
        .bind(batch.iter().map(|p| p.checked()).collect::<Vec<i64>>())
        .bind(
            batch
                .iter()
                .map(|p| p.now - crate::store::webhooks::REPLAY_WINDOW_MS)
                .collect::<Vec<i64>>(),
        )
        .bind(&job_id)
        .bind(HANDLE_DELIVERY_ATTEMPTS)
        .bind(batch.first().map_or(0, |p| p.now / 1000))
        .bind(HANDLE_DELIVERY_QUEUE)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(batch.len());
    for (p, (ok, replay, inserted, existing)) in batch.iter().zip(rows) {
        if ok != Some(true) {
            out.push(Accepted::Stale);
            continue;
        }
        let recorded = match (replay, inserted, existing) {
            (Some(id), _, _) => Recorded::Replay { id },
            (None, Some(id), _) => Recorded::Stored {
                id,
                job_id: p.needs_job().then(|| job_id.clone()),
            },
            (None, None, Some(id)) => Recorded::Duplicate { id },
            // A copy committed by another transaction after this
            // statement's snapshot: ON CONFLICT waited for it, a new
            // statement sees it.
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
        out.push(Accepted::Recorded(recorded));
    }
    Ok(out)
}
