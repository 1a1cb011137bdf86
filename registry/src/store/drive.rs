//! Google Drive changes-feed positions: one page token per shared drive of
//! a connection. Kept apart from the spaces because a token is not a space:
//! it says where the next incremental read starts, and is only advanced
//! once everything before it has been applied.

use serde::Serialize;

use super::{Store, in_tx, now_ms, on_pool};
use crate::error::Result;

/// Where one drive's next `changes.list` starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DrivePageToken {
    pub drive_id: String,
    pub page_token: String,
    pub updated_at: i64,
}

const UPSERT: &str = "INSERT INTO drive_page_tokens (connection_id, drive_id, page_token, updated_at) \
                      VALUES ($1, $2, $3, $4) ON CONFLICT (connection_id, drive_id) \
                      DO UPDATE SET page_token = excluded.page_token, updated_at = excluded.updated_at";

impl Store {
    /// The stored positions of a connection, by drive id.
    pub async fn drive_page_tokens(&self, connection_id: &str) -> Result<Vec<DrivePageToken>> {
        let rows: Vec<DrivePageToken> = on_pool!(self, pool => {
            sqlx::query_as("SELECT drive_id, page_token, updated_at FROM drive_page_tokens WHERE connection_id = $1 ORDER BY drive_id")
                .bind(connection_id).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Records (or advances) one drive's position.
    pub async fn set_drive_page_token(
        &self,
        connection_id: &str,
        drive_id: &str,
        page_token: &str,
    ) -> Result<()> {
        let now = now_ms();
        on_pool!(self, pool => {
            sqlx::query(UPSERT).bind(connection_id).bind(drive_id).bind(page_token).bind(now)
                .execute(pool).await?;
        });
        Ok(())
    }

    /// Records the positions of a full listing, all or none.
    pub async fn set_drive_page_tokens(
        &self,
        connection_id: &str,
        tokens: &[(String, String)],
    ) -> Result<()> {
        let now = now_ms();
        in_tx!(self, tx => {
            for (drive_id, token) in tokens {
                sqlx::query(UPSERT).bind(connection_id).bind(drive_id).bind(token).bind(now)
                    .execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Forgets a drive's position (the drive is gone).
    pub async fn delete_drive_page_token(
        &self,
        connection_id: &str,
        drive_id: &str,
    ) -> Result<bool> {
        let n = on_pool!(self, pool => {
            sqlx::query("DELETE FROM drive_page_tokens WHERE connection_id = $1 AND drive_id = $2")
                .bind(connection_id).bind(drive_id).execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }
}
