//! The conditional-request cache: the last answer of each listing page
//! (its `ETag`, body and `Link` header), kept per connection.
//!
//! Why keep the body and not only the ETag: a `304 Not Modified` carries no
//! records, yet the sync must still see every record of a complete listing
//! (otherwise unseen spaces would be marked missing). The stored body stands
//! in for the page, so a re-sync of an unchanged catalogue costs no budget
//! (GitHub does not charge 304s) and writes nothing. The `Link` header is
//! kept because a 304 does not have to repeat it, and the listing needs it
//! to know how many pages there are.
//!
//! The worker's implementation lives in the store, scoped to one connection
//! (so one credential's cache never answers for another); the connectors
//! only see this trait.

/// One cached answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPage {
    pub etag: String,
    /// The page's JSON text, exactly as it was answered.
    pub body: String,
    /// The `Link` header of that answer, if any.
    pub link: Option<String>,
}

/// Where a connector keeps its conditional-request answers.
#[async_trait::async_trait]
pub trait PageCache: Send + Sync {
    /// The cached answer for `url`, if any. A cache that cannot be read
    /// answers `None` (the page is then simply fetched in full).
    async fn get(&self, url: &str) -> Option<CachedPage>;

    /// Stores a new answer for `url`. Called only when the page changed
    /// (a new ETag), so an unchanged listing writes nothing. Failures are
    /// logged by the implementation: the next run fetches in full.
    async fn put(&self, url: &str, page: &CachedPage);
}
