//! SQLite: the deliveries of a batch that [`super::independent`] marks go
//! in ONE INSERT over a `VALUES` list, and their one job in one more,
//! instead of two statements a delivery.
//!
//! SQLite has no network round trip, but sqlx runs each connection on a
//! thread of its own: every statement is a hop from the writer's task to
//! that thread and back, two thread wake-ups. With one writer at a time,
//! those hops, not SQLite's own work, set the rate of the deliveries
//! bench (the cores sat a third idle at 16 clients), as round trips did
//! on PostgreSQL.
//!
//! A delivery the INSERT skipped (its premise no longer holds, a replay, a
//! duplicate key) is then asked why on its own, as [`super::sqlite_one`]
//! does. That is rare, and the answer is the same: the group shares no key
//! and no replay key, so no row of it stopped another.

use std::collections::HashSet;
use std::sync::OnceLock;

use sqlx::SqliteConnection;

use super::{
    Accepted, DELIVERY_COLUMNS, Prepared, premise_check, replay_lookup, sqlite_bind, sqlite_why,
};
use crate::error::Result;
use crate::store::Backend;
use crate::store::webhooks::{QueuedJob, job_insert_sql, new_ulid};

/// Deliveries in one statement at most. Each binds 16 values, so 1,024 a
/// statement, far under SQLite's limit (32,766); and the texts of every
/// row count up to it stay in the connection's statement cache.
const ROWS: usize = 64;

/// The values a delivery binds, in [`super::sqlite_bind`]'s order.
const BOUND: usize = 16;

static DELIVERIES: [OnceLock<String>; ROWS] = [const { OnceLock::new() }; ROWS];
/// The INSERT of `rows` deliveries. A row of `VALUES` has a delivery's 16
/// bound values as `column1`–`column16`: the 13 stored columns, then the
/// secret's id, whether its premise is checked, and the start of its
/// replay window. `RETURNING` gives the ids of the rows inserted.
fn deliveries_sql(rows: usize) -> &'static str {
    DELIVERIES[rows - 1].get_or_init(|| {
        let row = format!("({})", vec!["?"; BOUND].join(", "));
        let stored: Vec<String> = (1..=13).map(|n| format!("i.column{n}")).collect();
        format!(
            "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
             SELECT {stored} FROM (VALUES {values}) AS i \
             WHERE {premise} AND NOT EXISTS ({replay}) \
             ON CONFLICT (connection_id, delivery_key) DO NOTHING RETURNING id",
            stored = stored.join(", "),
            values = vec![row; rows].join(", "),
            premise = premise_check(
                "i.column2",
                "i.column3",
                "i.column14",
                "i.column15",
                "i.column6"
            ),
            replay = replay_lookup("i.column2", "i.column13", "i.column16"),
        )
    })
}

/// Write `batch` (deliveries that share no key and no replay key) in as
/// few statements as it takes; outcomes in its order.
pub(super) async fn sqlite_many(
    conn: &mut SqliteConnection,
    batch: &[&Prepared<'_>],
) -> Result<Vec<Accepted>> {
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(ROWS) {
        let mut q = sqlx::query_as::<_, (String,)>(deliveries_sql(chunk.len()));
        for p in chunk {
            q = sqlite_bind(q, p);
        }
        let inserted: HashSet<String> = q
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|(id,)| id)
            .collect();
        // The deliveries stored `received` share one job, as on
        // PostgreSQL ([`super::pg_batch`]).
        let received: Vec<String> = chunk
            .iter()
            .filter(|p| p.needs_job() && inserted.contains(&p.id))
            .map(|p| p.id.clone())
            .collect();
        let job_id = (!received.is_empty()).then(new_ulid);
        if let (Some(id), Some(first)) = (&job_id, chunk.first()) {
            let job = QueuedJob::handle_deliveries(received);
            bind_job!(
                sqlx::query(job_insert_sql(Backend::Sqlite)),
                &job,
                id,
                first.now / 1000
            )
            .execute(&mut *conn)
            .await?;
        }
        for p in chunk {
            out.push(if inserted.contains(&p.id) {
                p.stored(job_id.as_deref())
            } else {
                sqlite_why(conn, p).await?
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row count a batch can bring has its text, with one row of
    /// values per delivery and the binds of each.
    #[test]
    fn each_row_count_binds_sixteen_values_a_delivery() {
        for rows in [1, 2, ROWS] {
            let sql = deliveries_sql(rows);
            assert_eq!(sql.matches('?').count(), rows * BOUND, "{rows} rows");
        }
    }
}
