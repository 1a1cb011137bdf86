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
//!
//! A cached answer that keeps standing in (a page answered `304` every
//! night, a dormant repository's root commit) is never rewritten, yet the
//! store prunes answers by when they were written. So each answer read
//! says when it was written or last confirmed, and one that keeps being
//! used is [`PageCache::touch`]ed once it is older than [`TOUCH_AFTER`]:
//! at most one write a day per page, and nothing is pruned while in use.

use chrono::{DateTime, TimeDelta, Utc};

/// A used answer older than this is touched (well inside the store's
/// week of page-cache retention).
pub const TOUCH_AFTER: TimeDelta = TimeDelta::days(1);

/// One cached answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPage {
    pub etag: String,
    /// The page's JSON text, exactly as it was answered.
    pub body: String,
    /// The `Link` header of that answer, if any.
    pub link: Option<String>,
    /// When the cache wrote or last touched it (`None` when not known, or
    /// for an answer about to be stored).
    pub fetched_at: Option<DateTime<Utc>>,
}

impl CachedPage {
    /// Whether standing in for a request now should touch it.
    pub fn wants_touch(&self, now: DateTime<Utc>) -> bool {
        self.fetched_at.is_some_and(|at| now - at >= TOUCH_AFTER)
    }
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

    /// The answer cached for `url` stood in for a request again (a `304`,
    /// or a root commit still current) and [`CachedPage::wants_touch`]:
    /// note it as current, so retention keeps it. Failures are logged by
    /// the implementation.
    async fn touch(&self, _url: &str) {}
}
