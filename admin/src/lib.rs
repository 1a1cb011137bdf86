//! The ADMIN's side of discovery: the `/v1` JSON API (proposals decided in
//! bulk, mappings, places, connections, audit) with API keys, roles and
//! named powers; the one screen at `/admin`; and a person's page at `/me`. Served by `cmcp-discovery serve` next to the health routes.

pub mod api;
pub mod auth;
pub mod client_api;
pub mod deliveries;
mod door;
pub mod error;
pub mod me;
pub mod people;
pub mod screen;
pub mod seed;
pub mod session;
pub mod sign_in_limit;
pub mod suggestions;
#[cfg(feature = "testing")]
pub mod testing;

use axum::Router;
use cmcp_registry::Store;

pub use auth::{create_key, create_key_for, generate_secret, hash_secret};
pub use error::AdminError;
pub use seed::seed_demo_places_and_key;

#[derive(Clone)]
pub struct AdminState {
    pub store: Store,
    pub matching: cmcp_matching::Settings,
    /// The session cookie carries `Secure` (the public URL is https).
    pub secure_cookie: bool,
    pub sign_ins: std::sync::Arc<sign_in_limit::SignInLimiter>,
    /// Links a person's GitHub (`POST /v1/people/{person}/github`); the
    /// binary provides it.
    pub github_linker: Option<people::Linker>,
    /// Live API keys kept in memory while revocations are heard (see
    /// [`cmcp_registry::KeyCache`]); `None`: every call reads the store.
    pub keys: Option<std::sync::Arc<cmcp_registry::KeyCache>>,
    /// On a SQLite file, the API key and resolve of every cMCP call are
    /// read inline instead of through the pool's connection threads (see
    /// [`cmcp_registry::InlineReads`]); `None` on PostgreSQL.
    pub reads: Option<std::sync::Arc<cmcp_registry::InlineReads>>,
}

impl AdminState {
    pub fn new(store: Store) -> AdminState {
        AdminState {
            matching: cmcp_matching::Settings::default(),
            secure_cookie: false,
            sign_ins: Default::default(),
            github_linker: None,
            keys: None,
            reads: cmcp_registry::InlineReads::of(&store).map(std::sync::Arc::new),
            store,
        }
    }

    /// The live API key with this hash: read inline on a SQLite file,
    /// from the key cache when one is listening, else from the store.
    pub async fn key_by_hash(
        &self,
        hash: &str,
    ) -> Result<Option<cmcp_registry::ApiKeyRow>, cmcp_registry::RegistryError> {
        if let Some(found) = self.reads.as_ref().and_then(|r| r.key_by_hash(hash)) {
            return Ok(found);
        }
        match &self.keys {
            Some(cache) => cache.key_by_hash(hash).await,
            None => self.store.key_by_hash(hash).await,
        }
    }

    /// [`Store::resolve_one`], read inline on a SQLite file.
    pub async fn resolve_one(
        &self,
        fingerprint: &str,
        viewer: &cmcp_registry::Viewer,
    ) -> Result<cmcp_registry::Resolved, cmcp_registry::RegistryError> {
        match self
            .reads
            .as_ref()
            .and_then(|r| r.resolve_one(fingerprint, Some(viewer)))
        {
            Some(answer) => answer,
            None => self.store.resolve_one(fingerprint, Some(viewer)).await,
        }
    }

    /// Served behind `public_url`: an https one makes the cookie `Secure`.
    pub fn behind(mut self, public_url: &str) -> AdminState {
        self.secure_cookie = public_url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        self
    }

    /// Keep live API keys in memory up to `ttl` (zero: never), emptied on
    /// every revocation any process commits. Starts a listener on the
    /// current runtime (PostgreSQL only; SQLite always reads the store).
    pub fn with_key_cache(mut self, ttl: std::time::Duration) -> AdminState {
        self.keys = Some(cmcp_registry::KeyCache::start(&self.store, ttl));
        self
    }

    pub fn with_github_linker(mut self, linker: people::Linker) -> AdminState {
        self.github_linker = Some(linker);
        self
    }
}

/// Every admin route, ready to merge into the edge router.
pub fn router(state: AdminState) -> Router {
    api::router(state.clone())
        .merge(screen::router(state.clone()))
        .merge(me::router(state))
}

/// Milliseconds since the epoch as a UTC time for the screen.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}
