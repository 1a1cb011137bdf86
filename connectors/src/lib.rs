//! Read-only catalogue connectors.
//!
//! A connector reads one platform tenant (a GitHub organisation today;
//! Bitbucket, Jira and Drive next) and turns what it finds into neutral
//! [`SpaceRecord`]s keyed on stable ids. Connectors only ever send GET
//! requests: the fleet never writes to a code host.
//!
//! Layout: `common/` holds what every platform shares (HTTP settings,
//! retries and rate-limit waits, `Link` pagination, the rate budget); each
//! platform has its own directory with the same file names (`client.rs`,
//! `model.rs` for wire types, `mapping.rs` for wire → record). Platforms
//! never import each other; [`build`] is the one place that names them.

pub mod common;
pub mod error;
pub mod github;

use cmcp_domain::{ConnectionSpec, Platform, RiskNotice, SpaceAddress, SpaceRecord, Token};
use tokio::sync::mpsc::Sender;

pub use common::config::HttpConfig;
pub use common::http::HttpFigures;
pub use error::{ConnectorError, Result};
pub use github::GithubConnector;

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

/// The one registry function naming the platforms. GitHub is implemented;
/// the others answer `Unsupported` until their connectors land.
pub fn build(spec: &ConnectionSpec, token: Token, cfg: &HttpConfig) -> Result<Box<dyn Connector>> {
    match spec.platform {
        Platform::Github => Ok(Box::new(GithubConnector::new(
            &spec.base_url,
            &spec.scope,
            token,
            cfg.clone(),
        )?)),
        Platform::Bitbucket => Err(ConnectorError::Unsupported {
            platform: Platform::Bitbucket,
        }),
        Platform::Jira => Err(ConnectorError::Unsupported {
            platform: Platform::Jira,
        }),
        Platform::Drive => Err(ConnectorError::Unsupported {
            platform: Platform::Drive,
        }),
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
        for p in [Platform::Bitbucket, Platform::Jira, Platform::Drive] {
            match build(&spec(p), Token::new("t"), &HttpConfig::default()) {
                Err(ConnectorError::Unsupported { platform }) => assert_eq!(platform, p),
                Err(e) => panic!("{p}: {e}"),
                Ok(_) => panic!("{p}: built"),
            }
        }
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
