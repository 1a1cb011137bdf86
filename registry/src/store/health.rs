//! What `doctor` asks of the store without changing it: which migrations a
//! binary carries that the database has not applied, and the database's
//! own clock (leases are compared against it by every process).

use sqlx::migrate::Migrator;

use super::{MIGRATIONS_TABLE, Store, on_pool};
use crate::error::Result;

static SQLITE: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("../migrations/postgres");

impl Store {
    /// Versions of this binary's migrations that the database has not
    /// applied (all of them on an empty database). Read only: nothing is
    /// migrated.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>> {
        let known: Vec<i64> = match self {
            Store::Sqlite(_) => SQLITE.iter().map(|m| m.version).collect(),
            Store::Postgres(_) => POSTGRES.iter().map(|m| m.version).collect(),
        };
        let exists = match self {
            Store::Sqlite(pool) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1",
                )
                .bind(MIGRATIONS_TABLE)
                .fetch_one(pool)
                .await?
            }
            Store::Postgres(pool) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = $1",
                )
                .bind(MIGRATIONS_TABLE)
                .fetch_one(pool)
                .await?
            }
        };
        if exists == 0 {
            return Ok(known);
        }
        let sql = format!("SELECT version FROM {MIGRATIONS_TABLE} WHERE success");
        let applied: Vec<i64> = on_pool!(self, pool => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
        });
        Ok(known.into_iter().filter(|v| !applied.contains(v)).collect())
    }

    /// The database's clock, epoch milliseconds.
    pub async fn database_now_ms(&self) -> Result<i64> {
        Ok(match self {
            Store::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                )
                .fetch_one(pool)
                .await?
            }
            Store::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
                )
                .fetch_one(pool)
                .await?
            }
        })
    }
}
