//! Read-only catalogue connectors.
//!
//! A connector reads one platform tenant (a GitHub organisation today;
//! Bitbucket, Jira and Drive next) and turns what it finds into neutral
//! [`SpaceRecord`]s keyed on stable ids. Connectors only ever send GET
//! requests: the fleet never writes to a code host.
//!
//! Layout: `common/` holds what every platform shares (HTTP settings,
//! retries and rate-limit waits, `Link` pagination, the rate budget); each
//! platform has its own directory with the same file names: `mod.rs` (the
//! connector), `client.rs`, `model.rs` (wire types), `mapping.rs` (wire →
//! record), `listing.rs` (the catalogue walk) and `webhook.rs` (its
//! deliveries → [`webhook::HookEvent`]), plus what one platform alone has
//! (Drive's `auth.rs`, `changes.rs`, `watch.rs`; Bitbucket's `budget.rs`;
//! GitHub's `scopes.rs`). Platforms never import each other; [`build`] and
//! [`webhook`] are the places that name them.

pub mod bitbucket;
pub mod common;
pub mod drive;
pub mod error;
pub mod github;
pub mod jira;
pub mod webhook;

use cmcp_domain::{ConnectionSpec, Platform, RiskNotice, SpaceAddress, SpaceRecord, Token};
use tokio::sync::mpsc::Sender;

pub use bitbucket::BitbucketConnector;
pub use common::config::HttpConfig;
pub use common::http::HttpFigures;
pub use drive::DriveConnector;
pub use error::{ConnectorError, Result, RetryIntent};
pub use github::GithubConnector;
pub use jira::JiraConnector;

/// One platform tenant, read-only.
#[async_trait::async_trait]
pub trait Connector: Send + Sync {
    fn platform(&self) -> Platform;

    /// Read the whole catalogue. Sends each page of records to `sink` as
    /// soon as it is read (so a 100k-repo org never sits in memory at once);
    /// containers (the org) are sent before their children. Returns the
    /// report; `complete` is true only if every page succeeded.
    ///
    /// A page that fails after retries ends the listing with
    /// `complete = false` and the failure in `failures` (records already sent
    /// stay sent). Errors of the whole run are returned as `Err` even
    /// mid-listing: the first request failing (bad token, unknown org),
    /// `Unauthorized`, `RateLimited` (reschedule at `retry_at`) and
    /// `SinkClosed`.
    async fn list(&self, sink: Sender<Vec<SpaceRecord>>) -> Result<ListingReport>;

    /// Direct read of one space by its stable id (GitHub:
    /// `GET /repositories/{id}`); `Gone` on 404/410.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome>;
}

/// The answer to a direct read by stable id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    Found(SpaceRecord),
    /// The platform says the space does not exist (404/410).
    Gone,
}

/// What a listing did, whatever it found.
#[derive(Debug, Clone, Default)]
pub struct ListingReport {
    /// Every page succeeded and every item was understood: only then may
    /// the registry treat unseen spaces as missing.
    pub complete: bool,
    pub figures: HttpFigures,
    /// Human-readable, e.g. `page 3: github: HTTP 500: … after 5 attempts`.
    pub failures: Vec<String>,
    /// Risks noticed on the credential (e.g. `write-scope`).
    pub risks: Vec<RiskNotice>,
}

/// The one registry function naming the platforms. Drive needs the
/// connection's settings (the admin to impersonate): build it with
/// [`build_with_settings`] (or [`build_with`]); here it is a config error.
pub fn build(spec: &ConnectionSpec, token: Token, cfg: &HttpConfig) -> Result<Box<dyn Connector>> {
    match spec.platform {
        Platform::Github => Ok(Box::new(GithubConnector::new(
            &spec.base_url,
            &spec.scope,
            token,
            cfg.clone(),
        )?)),
        Platform::Bitbucket => Ok(Box::new(BitbucketConnector::new(
            &spec.base_url,
            &spec.scope,
            token,
            cfg.clone(),
        )?)),
        Platform::Jira => Ok(Box::new(JiraConnector::new(
            &spec.base_url,
            &spec.scope,
            token,
            cfg.clone(),
        )?)),
        // Drive needs its settings (the admin to impersonate): without
        // them this is a configuration error; see `build_with_settings`.
        Platform::Drive => build_with_settings(spec, &serde_json::Value::Null, token, cfg),
    }
}

/// [`build`] for a stored connection, whose settings some platforms need
/// (Drive: the impersonated admin, the depth, the token endpoint).
pub fn build_with_settings(
    spec: &ConnectionSpec,
    settings: &serde_json::Value,
    token: Token,
    cfg: &HttpConfig,
) -> Result<Box<dyn Connector>> {
    match spec.platform {
        Platform::Drive => Ok(Box::new(DriveConnector::from_connection(
            spec, settings, token, cfg,
        )?)),
        _ => build(spec, token, cfg),
    }
}

/// What a connector may be handed beyond its spec, token and settings:
/// the fleet's shared rate budget and the conditional-request cache. The
/// connectors crate only knows the traits; the worker implements them on
/// the store.
#[derive(Clone, Default)]
pub struct ConnectorDeps {
    /// The shared budget and the credential's fingerprint (never the token)
    /// that names its key.
    pub budget: Option<(std::sync::Arc<dyn common::shared::SharedBudget>, String)>,
    pub page_cache: Option<std::sync::Arc<dyn common::page_cache::PageCache>>,
}

/// [`build_with_settings`] with [`ConnectorDeps`]. GitHub uses both,
/// Bitbucket the budget; platforms that have not adopted them yet are
/// built without.
pub fn build_with(
    spec: &ConnectionSpec,
    settings: &serde_json::Value,
    token: Token,
    cfg: &HttpConfig,
    deps: ConnectorDeps,
) -> Result<Box<dyn Connector>> {
    match spec.platform {
        Platform::Github => {
            let mut c = GithubConnector::new(&spec.base_url, &spec.scope, token, cfg.clone())?;
            if let Some((budget, credential)) = deps.budget {
                c = c.with_budget(budget, &credential);
            }
            if let Some(cache) = deps.page_cache {
                c = c.with_page_cache(cache);
            }
            Ok(Box::new(c))
        }
        Platform::Bitbucket => {
            let mut c = BitbucketConnector::new(&spec.base_url, &spec.scope, token, cfg.clone())?;
            if let Some((budget, credential)) = deps.budget {
                c = c.with_budget(budget, &credential);
            }
            Ok(Box::new(c))
        }
        _ => build_with_settings(spec, settings, token, cfg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(platform: Platform) -> ConnectionSpec {
        ConnectionSpec {
            platform,
            scope: "acme".into(),
            base_url: "https://api.github.com".into(),
        }
    }

    #[test]
    fn build_names_every_platform() {
        let c = build(
            &spec(Platform::Github),
            Token::new("t"),
            &HttpConfig::default(),
        )
        .unwrap();
        assert_eq!(c.platform(), Platform::Github);
        for p in [Platform::Bitbucket, Platform::Jira] {
            let c = build(
                &spec(p),
                Token::new("basic:me@acme.com:t"),
                &HttpConfig::default(),
            )
            .unwrap();
            assert_eq!(c.platform(), p);
        }
        // Drive without its settings (the admin to impersonate) cannot work.
        assert!(matches!(
            build(
                &spec(Platform::Drive),
                Token::new("t"),
                &HttpConfig::default()
            ),
            Err(ConnectorError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn build_rejects_a_bad_spec() {
        let mut s = spec(Platform::Github);
        s.scope = " ".into();
        assert!(matches!(
            build(&s, Token::new("t"), &HttpConfig::default()),
            Err(ConnectorError::InvalidConfig { .. })
        ));
    }
}
