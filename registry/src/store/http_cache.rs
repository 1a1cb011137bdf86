//! The conditional-request cache of listing pages, per connection.
//!
//! Why per connection: two credentials may see different pages of the same
//! URL (private repositories), so an answer is only ever reused by the
//! connection that received it. A page is written only when its ETag
//! changed, so re-syncing an unchanged catalogue writes nothing here.

use super::{now_ms, on_pool, on_writer};
use crate::error::Result;

/// One cached answer.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CachedPageRow {
    pub etag: String,
    pub body: String,
    pub link: Option<String>,
    pub fetched_at: i64,
}

impl super::Store {
    pub async fn cached_page(
        &self,
        connection_id: &str,
        url: &str,
    ) -> Result<Option<CachedPageRow>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT etag, body, link, fetched_at FROM http_cache \
                 WHERE connection_id = $1 AND url = $2",
            )
            .bind(connection_id).bind(url).fetch_optional(pool).await?
        }))
    }

    /// Stores a page's answer; nothing is written when the stored ETag is
    /// already `etag`. Returns whether a row was written.
    pub async fn put_cached_page(
        &self,
        connection_id: &str,
        url: &str,
        etag: &str,
        body: &str,
        link: Option<&str>,
    ) -> Result<bool> {
        let n = on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO http_cache (connection_id, url, etag, body, link, fetched_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (connection_id, url) DO UPDATE \
                 SET etag = excluded.etag, body = excluded.body, link = excluded.link, \
                     fetched_at = excluded.fetched_at \
                 WHERE http_cache.etag <> excluded.etag",
            )
            .bind(connection_id).bind(url).bind(etag).bind(body).bind(link).bind(now_ms())
            .execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Notes at `now_ms` that a cached page is still current (it stood in
    /// for a request), so retention keeps it. Returns whether it was there.
    pub async fn touch_cached_page(
        &self,
        connection_id: &str,
        url: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let n = on_writer!(self, pool => {
            sqlx::query(
                "UPDATE http_cache SET fetched_at = $3 \
                 WHERE connection_id = $1 AND url = $2 AND fetched_at < $3",
            )
            .bind(connection_id).bind(url).bind(now_ms)
            .execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Drops a connection's cached pages (the next sync reads in full).
    pub async fn forget_cached_pages(&self, connection_id: &str) -> Result<u64> {
        Ok(on_writer!(self, pool => {
            sqlx::query("DELETE FROM http_cache WHERE connection_id = $1")
                .bind(connection_id).execute(pool).await?.rows_affected()
        }))
    }
}
