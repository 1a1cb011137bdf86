//! Read-only catalogue connectors.
//!
//! A connector reads one platform tenant (a GitHub organisation, a Bitbucket
//! workspace, a Jira site, a Workspace domain's Drive) and turns what it
//! finds into neutral [`SpaceRecord`]s keyed on stable ids. Connectors only
//! ever send GET requests: the fleet never writes to a code host.
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
mod factory;
pub mod feed;
pub mod github;
pub mod jira;
pub mod webhook;

use cmcp_domain::{Platform, RiskNotice, SpaceAddress, SpaceRecord};
use tokio::sync::mpsc::Sender;
use tracing::Instrument;

pub use bitbucket::BitbucketConnector;
pub use common::config::HttpConfig;
pub use common::http::{Counters, HttpFigures};
pub use drive::DriveConnector;
pub use error::{ConnectorError, Result, RetryIntent};
pub use factory::{ConnectorDeps, build};
pub use feed::{ChangeFeed, PushChannels};
pub use github::GithubConnector;
pub use jira::JiraConnector;

/// One platform tenant, read-only.
///
/// Beyond listing and reading by id, a connector may offer capabilities
/// that only some platforms have; each is an `Option` so that callers ask
/// for it instead of naming a platform.
#[async_trait::async_trait]
pub trait Connector: Send + Sync {
    fn platform(&self) -> Platform;

    /// What this connection reads, in the platform's words (the
    /// organisation, workspace, site or domain), for logs.
    fn scope(&self) -> &str;

    /// The key under which this connector spends the fleet's shared rate
    /// budget, when it was built with one.
    fn budget_key(&self) -> Option<&str> {
        None
    }

    /// The catalogue walk behind [`Connector::list`], counting its requests
    /// in `counters`; same contract.
    async fn list_pages(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport>;

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
    ///
    /// The default runs [`Connector::list_pages`] in a span naming the
    /// platform and scope, and logs how far a listing that stopped got.
    async fn list(&self, sink: Sender<Vec<SpaceRecord>>) -> Result<ListingReport> {
        self.list_counted(sink, &Counters::default()).await
    }

    /// [`Connector::list`], counting into `counters`, which the caller can
    /// read while the listing goes (progress) and after it ends in an error
    /// (the requests a failed run made).
    async fn list_counted(
        &self,
        sink: Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        let (platform, scope) = (self.platform(), self.scope());
        let span = tracing::info_span!("list", %platform, scope);
        let result = self.list_pages(&sink, counters).instrument(span).await;
        if let Err(e) = &result {
            let f = counters.figures();
            tracing::warn!(%platform, scope, error = %e, pages = f.pages, requests = f.requests, "listing stopped");
        }
        result
    }

    /// Direct read of one space by its stable id (GitHub:
    /// `GET /repositories/{id}`); `Gone` on 404/410.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome>;

    /// A feed of what changed since a stored position (Drive's
    /// `changes.list`), for incremental passes between full listings.
    fn change_feed(&self) -> Option<&dyn ChangeFeed> {
        None
    }

    /// Push channels the platform must be asked to open and renew (Drive's
    /// `changes.watch`), where other platforms have configured webhooks.
    fn push_channels(&self) -> Option<&dyn PushChannels> {
        None
    }

    /// Whether this credential still reads the container of its spaces
    /// (the GitHub org, the Bitbucket workspace, the Jira site's projects,
    /// the Workspace domain's shared drives). A `Gone` from [`read`] says
    /// the space is gone only while this holds: GitHub, for one, answers
    /// 404 for a repository the credential cannot see. `Ok(false)` when the
    /// platform answers 401, 403, 404 or 410; other failures are errors.
    ///
    /// [`read`]: Connector::read
    async fn container_readable(&self) -> Result<bool>;
}

/// A container probe's answer: readable on success, not readable when the
/// platform refuses the credential or does not know the container.
pub(crate) fn readable<T>(answer: std::result::Result<T, common::http::Exhausted>) -> Result<bool> {
    match answer {
        Ok(_) => Ok(true),
        Err(common::http::Exhausted { error, .. }) => match error {
            ConnectorError::Unauthorized { .. }
            | ConnectorError::PermissionDenied { .. }
            | ConnectorError::NotFound { .. }
            | ConnectorError::Http { status: 410, .. } => Ok(false),
            other => Err(other),
        },
    }
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
    /// Records refused because the platform placed them outside the
    /// connection's tenant (another host, another workspace). Each one
    /// also makes the listing incomplete.
    pub skipped_foreign: u64,
}
