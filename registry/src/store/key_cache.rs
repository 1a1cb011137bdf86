//! Live API keys recently read, by hash, so the routes cMCP calls on every
//! tool session (resolve above all) make no round trip for their caller.
//!
//! A cache of credentials must never outlive a revocation, so it is used
//! only where revocations are heard. On PostgreSQL a trigger notifies
//! [`CHANNEL`] on every change to `api_keys` (a revoke, from any process),
//! and each process with a cache listens: a notification empties it. While
//! the listening connection is down, or not yet up, the cache is emptied
//! and bypassed, because a notification may have been missed. Entries
//! also expire after `ttl`, which bounds what a partition that drops
//! nothing visibly could hide. A read that raced a notification does not
//! put its (maybe revoked) key back: each emptying moves a generation the
//! read must still see when it stores.
//!
//! SQLite has no notifications, and the CLI that revokes a key is another
//! process: there every lookup goes to the store (its one local read is
//! fast enough for the hot routes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Store;
use super::keys::ApiKeyRow;
use crate::error::Result;

/// The notification channel of `api_keys` changes.
pub const CHANNEL: &str = "cmcp_api_keys";

/// At most this many keys are kept; a full cache drops what has expired,
/// then everything (a flood of distinct live keys is not a case to tune).
const MAX_ENTRIES: usize = 10_000;

/// How long a listener that failed waits before it connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

pub struct KeyCache {
    store: Store,
    ttl: Duration,
    /// The listener is subscribed: a revocation now would be heard.
    listening: AtomicBool,
    /// Moved by every emptying.
    generation: AtomicU64,
    entries: Mutex<HashMap<String, (Instant, ApiKeyRow)>>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("ttl", &self.ttl)
            .field("listening", &self.listening.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl KeyCache {
    /// A cache over `store` keeping keys at most `ttl`. On PostgreSQL with
    /// a non-zero `ttl` this starts the listener (on the current Tokio
    /// runtime); otherwise every lookup reads the store.
    pub fn start(store: &Store, ttl: Duration) -> Arc<KeyCache> {
        let cache = Arc::new(KeyCache {
            store: store.clone(),
            ttl,
            listening: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            entries: Mutex::new(HashMap::new()),
        });
        if let (Store::Postgres(pool), false) = (store, ttl.is_zero()) {
            tokio::spawn(listen(pool.clone(), Arc::downgrade(&cache)));
        }
        cache
    }

    /// Whether lookups may be answered from memory now.
    pub fn is_live(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// The live (not revoked) key with this hash.
    pub async fn key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>> {
        if !self.is_live() {
            return self.store.key_by_hash(key_hash).await;
        }
        let now = Instant::now();
        if let Some((at, row)) = self.lock().get(key_hash)
            && now.duration_since(*at) < self.ttl
        {
            return Ok(Some(row.clone()));
        }
        let generation = self.generation.load(Ordering::Acquire);
        let row = self.store.key_by_hash(key_hash).await?;
        if let Some(row) = &row {
            let mut entries = self.lock();
            // Stored only if no notification came while the store was read
            // (the emptying holds the lock while it moves the generation).
            if self.is_live() && self.generation.load(Ordering::Acquire) == generation {
                if entries.len() >= MAX_ENTRIES {
                    entries.retain(|_, (at, _)| now.duration_since(*at) < self.ttl);
                    if entries.len() >= MAX_ENTRIES {
                        entries.clear();
                    }
                }
                entries.insert(key_hash.to_owned(), (now, row.clone()));
            }
        }
        Ok(row)
    }

    /// Forget every key (a change was announced, or may have been missed).
    pub fn empty(&self) {
        self.forget(&mut self.lock());
    }

    fn set_listening(&self, on: bool) {
        // Emptied either way: before listening nothing was heard, and after
        // a drop something may have been missed.
        let mut entries = self.lock();
        self.forget(&mut entries);
        self.listening.store(on, Ordering::Release);
    }

    /// Empty `entries` (the locked map) and move the generation, so a read
    /// already under way does not store what it read.
    fn forget(&self, entries: &mut HashMap<String, (Instant, ApiKeyRow)>) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, ApiKeyRow)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Listen for key changes until the cache is dropped or the pool closed.
async fn listen(pool: sqlx::PgPool, cache: std::sync::Weak<KeyCache>) {
    loop {
        if pool.is_closed() {
            return;
        }
        let subscribed = async {
            let mut l = sqlx::postgres::PgListener::connect_with(&pool).await?;
            l.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        let Some(c) = cache.upgrade() else { return };
        match subscribed {
            Ok(mut listener) => {
                c.set_listening(true);
                drop(c);
                loop {
                    let heard = listener.try_recv().await;
                    let Some(c) = cache.upgrade() else { return };
                    match heard {
                        Ok(Some(_)) => c.empty(),
                        // The connection dropped (`None`) or failed: what
                        // was announced meanwhile is unknown.
                        Ok(None) | Err(_) => {
                            c.set_listening(false);
                            tracing::warn!(
                                "lost the api-key change listener; keys are read from the store until it is back"
                            );
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                c.set_listening(false);
                drop(c);
                if !pool.is_closed() {
                    tracing::warn!(error = %e, "cannot listen for api-key changes; keys are read from the store");
                }
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}
