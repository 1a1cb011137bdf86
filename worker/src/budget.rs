//! The store-backed implementations of the connectors' [`SharedBudget`] and
//! [`PageCache`], the credential fingerprint that names a budget, and
//! [`connector`]: every connector the worker uses is built here, with both.
//!
//! Why here: the worker is the one crate that knows both the store and the
//! connectors. A budget is keyed by a fingerprint of the credential (and the
//! API origin), so two connections — or two worker processes — sending with
//! one token draw on one budget, exactly as the platform counts them. The
//! fingerprint is an HMAC-SHA256 under a fixed label, truncated: it tells
//! budgets apart, cannot be reversed into a high-entropy token, and the
//! token itself never reaches the database.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, TimeZone, Utc};
use cmcp_connectors::common::budget::{Admission, BudgetUnavailable, Observation, SharedBudget};
use cmcp_connectors::common::page_cache::{CachedPage, PageCache};
use cmcp_connectors::{Connector, ConnectorDeps, ConnectorError, HttpConfig};
use cmcp_domain::Token;
use cmcp_registry::{
    BudgetGrant, BudgetSettlement, BudgetTiming, Cipher, ConnectionRow, RegistryError, Store,
};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tracing::warn;

/// The HMAC key of budget fingerprints. Fixed on purpose: every worker of
/// the fleet must derive the same key from the same token.
const FINGERPRINT_LABEL: &[u8] = b"cmcp-discovery/rate-budget/v1";
/// Hex digits kept (64 bits: collisions between a fleet's credentials are
/// not a practical concern).
const FINGERPRINT_HEX: usize = 16;

/// A stable, non-reversible name for the credential `token` used against
/// `base_url` (the same token on two hosts is two budgets).
pub fn credential_fingerprint(base_url: &str, token: &Token) -> String {
    let origin = url_origin(base_url);
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(FINGERPRINT_LABEL)
        .expect("HMAC accepts keys of any length");
    mac.update(origin.as_bytes());
    mac.update(&[0]);
    mac.update(token.expose().trim().as_bytes());
    let mut hex = hex::encode(mac.finalize().into_bytes());
    hex.truncate(FINGERPRINT_HEX);
    hex
}

fn url_origin(base_url: &str) -> String {
    let t = base_url.trim().to_ascii_lowercase();
    let after_scheme = t.split_once("://").map_or(t.as_str(), |(_, rest)| rest);
    after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// This process's turn at one budget's row. Every request of a
/// credential reserves and settles on the same row, so under load the
/// statements queue on its row lock, each holding a pool connection while
/// it waits: with twenty connections over two tokens that took every
/// connection of the pool, and syncs, deliveries and the queue's own polls
/// timed out (the fleet bench). Taking turns here first, at most one
/// connection of this process waits on a row; the others wait without one.
/// The row lock still orders the processes of a fleet.
fn row_turn(key: &str) -> Arc<tokio::sync::Mutex<()>> {
    type Turns = std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;
    // One entry per credential and resource the process has used.
    static TURNS: OnceLock<Turns> = OnceLock::new();
    let mut turns = TURNS
        .get_or_init(Turns::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    turns.entry(key.to_owned()).or_default().clone()
}

/// The fleet's budgets, kept in the store.
#[derive(Debug, Clone)]
pub struct StoreBudget {
    store: Store,
    timing: BudgetTiming,
}

impl StoreBudget {
    pub fn new(store: Store) -> Self {
        StoreBudget {
            store,
            timing: BudgetTiming::default(),
        }
    }

    pub fn with_timing(mut self, timing: BudgetTiming) -> Self {
        self.timing = timing;
        self
    }
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
}

#[async_trait::async_trait]
impl SharedBudget for StoreBudget {
    async fn reserve(&self, key: &str, reserve: u32) -> Result<Admission, BudgetUnavailable> {
        let turn = row_turn(key);
        let _turn = turn.lock().await;
        let now = Utc::now().timestamp_millis();
        match self
            .store
            .reserve_budget(key, i64::from(reserve), now, self.timing)
            .await
        {
            Ok(BudgetGrant::Go) => Ok(Admission::Go),
            Ok(BudgetGrant::WaitUntilMs(ms)) => {
                crate::metrics::budget_wait(key);
                Ok(Admission::WaitUntil(at_ms(ms)))
            }
            Err(e) => Err(BudgetUnavailable(e.to_string())),
        }
    }

    async fn settle(&self, key: &str, observation: Observation) {
        let s = BudgetSettlement {
            remaining: observation.reading.map(|r| i64::from(r.remaining)),
            reset_at: observation.reading.map(|r| r.reset.timestamp_millis()),
            limit: observation.limit.map(i64::from),
            paused_until: observation.pause_until.map(|p| p.timestamp_millis()),
            free: observation.free,
        };
        if let Some(remaining) = s.remaining {
            crate::metrics::budget_remaining(key, remaining);
        }
        let turn = row_turn(key);
        let _turn = turn.lock().await;
        if let Err(e) = self
            .store
            .settle_budget(key, s, Utc::now().timestamp_millis())
            .await
        {
            // The reservation stays counted as in flight until the budget
            // goes stale: conservative, never an overdraft.
            warn!(budget_key = key, error = %e, "could not settle the rate budget");
        }
    }
}

/// One connection's conditional-request cache, kept in the store.
#[derive(Debug, Clone)]
pub struct StorePageCache {
    store: Store,
    connection_id: String,
}

impl StorePageCache {
    pub fn new(store: Store, connection_id: &str) -> Self {
        StorePageCache {
            store,
            connection_id: connection_id.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl PageCache for StorePageCache {
    async fn get(&self, url: &str) -> Option<CachedPage> {
        match self.store.cached_page(&self.connection_id, url).await {
            Ok(row) => row.map(|r| CachedPage {
                etag: r.etag,
                body: r.body,
                link: r.link,
                fetched_at: Utc.timestamp_millis_opt(r.fetched_at).single(),
            }),
            Err(e) => {
                warn!(connection_id = %self.connection_id, error = %e, "could not read the page cache");
                None
            }
        }
    }

    async fn put(&self, url: &str, page: &CachedPage) {
        if let Err(e) = self
            .store
            .put_cached_page(
                &self.connection_id,
                url,
                &page.etag,
                &page.body,
                page.link.as_deref(),
            )
            .await
        {
            warn!(connection_id = %self.connection_id, error = %e, "could not write the page cache");
        }
    }

    async fn touch(&self, url: &str) {
        let now = Utc::now().timestamp_millis();
        if let Err(e) = self
            .store
            .touch_cached_page(&self.connection_id, url, now)
            .await
        {
            warn!(connection_id = %self.connection_id, error = %e, "could not touch the page cache");
        }
    }
}

/// What every connector of a connection is handed: the store-backed budget
/// of its credential and the connection's page cache.
pub fn connector_deps(
    store: &Store,
    connection_id: &str,
    http: &HttpConfig,
    base_url: &str,
    token: &Token,
) -> ConnectorDeps {
    let fingerprint = credential_fingerprint(base_url, token);
    // The credential's wait counter exists from its first use, at 0, so a
    // rate over it works before the first wait.
    crate::metrics::budget_in_use(&fingerprint);
    ConnectorDeps {
        http: http.clone(),
        budget: Some((Arc::new(StoreBudget::new(store.clone())), fingerprint)),
        page_cache: Some(Arc::new(StorePageCache::new(store.clone(), connection_id))),
    }
}

/// The connector of a stored connection (for a sync, a delivery's
/// re-reads, a change feed or channel upkeep alike), built with
/// [`connector_deps`]. Also records which budget the connection spends (for
/// `connection list`; written only on change). The outer error is the
/// store's; the inner one says the connection cannot be built as stored.
pub async fn connector(
    store: &Store,
    cipher: &Cipher,
    http: &HttpConfig,
    connection: &ConnectionRow,
) -> Result<Result<Box<dyn Connector>, ConnectorError>, RegistryError> {
    let token = store.connection_token(cipher, &connection.id).await?;
    let spec = connection.spec();
    let deps = connector_deps(store, &connection.id, http, &spec.base_url, &token);
    let built = cmcp_connectors::build(&spec, &connection.settings, token, deps);
    if let Some(key) = built.as_ref().ok().and_then(|c| c.budget_key())
        && let Err(e) = store.note_budget_user(&connection.id, key).await
    {
        warn!(connection_id = %connection.id, error = %e, "could not record the connection's budget");
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_name_the_credential_and_host_without_the_token() {
        let t = Token::new("ghp_secretvalue123");
        let a = credential_fingerprint("https://api.github.com", &t);
        assert_eq!(a.len(), FINGERPRINT_HEX);
        assert!(!a.contains("secret"));
        assert_eq!(a, credential_fingerprint("https://API.github.com/", &t));
        assert_ne!(
            a,
            credential_fingerprint("https://ghe.example.com/api/v3", &t)
        );
        assert_ne!(
            a,
            credential_fingerprint("https://api.github.com", &Token::new("ghp_other"))
        );
    }
}
