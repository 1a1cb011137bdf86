//! Google Drive push channels (`changes.watch`). Drive notifications carry
//! no signature: the gateway accepts one only when its channel id, channel
//! token and resource id match a live channel of the connection. The token
//! is the secret, so it is sealed with the master key (bound to the
//! connection and channel id) before SQL sees it, and no row type carries
//! it. A channel is live while it is not stopped and not expired; rows are
//! kept after they stop, for the record.

use cmcp_domain::Token;
use serde::Serialize;

use super::{Store, now_ms, on_pool};
use crate::cipher::Cipher;
use crate::error::Result;

/// One channel as stored, without its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DriveChannelRow {
    pub connection_id: String,
    /// The shared drive watched; `None` for the user's own corpus.
    pub drive_id: Option<String>,
    pub channel_id: String,
    pub resource_id: String,
    /// When Drive stops sending, epoch ms (as Drive answered it).
    pub expiration: i64,
    pub created_at: i64,
    pub stopped_at: Option<i64>,
}

impl DriveChannelRow {
    /// Not stopped and not expired at `now_ms`.
    pub fn is_live(&self, now_ms: i64) -> bool {
        self.stopped_at.is_none() && self.expiration > now_ms
    }
}

/// A channel Drive accepted, to record.
#[derive(Debug, Clone)]
pub struct NewDriveChannel<'a> {
    pub connection_id: &'a str,
    pub drive_id: Option<&'a str>,
    pub channel_id: &'a str,
    pub token: &'a Token,
    pub resource_id: &'a str,
    pub expiration: i64,
}

/// Associated data binding a sealed channel token to its channel.
fn channel_context(connection_id: &str, channel_id: &str) -> String {
    format!("cmcp-drive-channel:{connection_id}:{channel_id}")
}

/// The row columns, as a literal so the queries stay `&'static str`.
macro_rules! columns {
    () => {
        "connection_id, drive_id, channel_id, resource_id, expiration, created_at, stopped_at"
    };
}

impl Store {
    /// Records a channel Drive accepted, its token sealed.
    pub async fn insert_drive_channel(
        &self,
        cipher: &Cipher,
        new: &NewDriveChannel<'_>,
    ) -> Result<()> {
        let sealed = cipher.seal_token(
            new.token,
            &channel_context(new.connection_id, new.channel_id),
        )?;
        let now = now_ms();
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO drive_channels (connection_id, drive_id, channel_id, token_sealed, \
                 resource_id, expiration, created_at, stopped_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
            )
            .bind(new.connection_id).bind(new.drive_id).bind(new.channel_id).bind(&sealed)
            .bind(new.resource_id).bind(new.expiration).bind(now)
            .execute(pool).await?;
        });
        Ok(())
    }

    /// Every channel of the connection not stopped (live or expired), by
    /// drive, newest expiration first.
    pub async fn unstopped_drive_channels(
        &self,
        connection_id: &str,
    ) -> Result<Vec<DriveChannelRow>> {
        let sql = concat!(
            "SELECT ",
            columns!(),
            " FROM drive_channels WHERE connection_id = $1 AND stopped_at IS NULL \
             ORDER BY drive_id, expiration DESC, id DESC"
        );
        let rows: Vec<DriveChannelRow> = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(connection_id).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Every channel of the connection, stopped ones included, oldest first.
    pub async fn drive_channels(&self, connection_id: &str) -> Result<Vec<DriveChannelRow>> {
        let sql = concat!(
            "SELECT ",
            columns!(),
            " FROM drive_channels WHERE connection_id = $1 ORDER BY created_at, id"
        );
        let rows: Vec<DriveChannelRow> = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(connection_id).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// The live channel `channel_id` of the connection with its opened
    /// token, or `None` when there is no such channel or it is stopped or
    /// expired.
    pub async fn live_drive_channel(
        &self,
        cipher: &Cipher,
        connection_id: &str,
        channel_id: &str,
    ) -> Result<Option<(DriveChannelRow, Token)>> {
        let now = now_ms();
        let sql = concat!(
            "SELECT ",
            columns!(),
            ", token_sealed FROM drive_channels WHERE connection_id = $1 \
             AND channel_id = $2 AND stopped_at IS NULL AND expiration > $3"
        );
        let row: Option<RawChannel> = on_pool!(self, pool => {
            sqlx::query_as(sql).bind(connection_id).bind(channel_id).bind(now)
                .fetch_optional(pool).await?
        });
        let Some(raw) = row else { return Ok(None) };
        let token = cipher.open_token(
            &raw.token_sealed,
            &channel_context(connection_id, channel_id),
        )?;
        Ok(Some((raw.into_row(), token)))
    }

    /// Marks a channel stopped; returns whether it was not stopped before.
    pub async fn stop_drive_channel(&self, connection_id: &str, channel_id: &str) -> Result<bool> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE drive_channels SET stopped_at = $3 WHERE connection_id = $1 \
                 AND channel_id = $2 AND stopped_at IS NULL",
            )
            .bind(connection_id).bind(channel_id).bind(now)
            .execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }
}

#[derive(sqlx::FromRow)]
struct RawChannel {
    connection_id: String,
    drive_id: Option<String>,
    channel_id: String,
    resource_id: String,
    expiration: i64,
    created_at: i64,
    stopped_at: Option<i64>,
    token_sealed: Vec<u8>,
}

impl RawChannel {
    fn into_row(self) -> DriveChannelRow {
        DriveChannelRow {
            connection_id: self.connection_id,
            drive_id: self.drive_id,
            channel_id: self.channel_id,
            resource_id: self.resource_id,
            expiration: self.expiration,
            created_at: self.created_at,
            stopped_at: self.stopped_at,
        }
    }
}
