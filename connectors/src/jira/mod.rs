//! Jira Cloud: list a site's projects (live, archived and in the recycle
//! bin) and read one by its id.
//!
//! A listing reads the site's cloudId (`GET /_edge/tenant_info`, or the id
//! in a gateway base URL), then `GET /rest/api/3/project/search` with
//! `expand=projectKeys&status=live&status=archived&status=deleted`. Offset
//! pagination lets the remaining `startAt` windows run concurrently once the
//! first page has given `total` — sized by the `maxResults` the server
//! *returned* (Jira caps it below what was asked), never the one requested.
//! The total is only a hint: the listing is read to Jira's own end marker
//! and judged only then (see [`listing`]).

pub mod client;
mod listing;
pub mod mapping;
pub mod model;
pub mod webhook;

use std::sync::{Arc, Mutex, PoisonError};

use cmcp_domain::{Platform, SpaceAddress, SpaceKind, SpaceRecord, Token};
use tokio::sync::mpsc::Sender;
use tracing::Instrument;

use self::client::JiraClient;
use crate::common::config::HttpConfig;
use crate::common::http::{Counters, Exhausted};
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};
use crate::{Connector, ListingReport, ReadOutcome};

const PLATFORM: Platform = Platform::Jira;
/// What we ask for; Jira answers with at most its own cap (50 today).
const MAX_RESULTS: u32 = 100;
/// Windows read at once after the first page.
const CONCURRENT_WINDOWS: usize = 4;

/// Lists one Jira Cloud site with one credential.
#[derive(Debug)]
pub struct JiraConnector {
    client: JiraClient,
    /// The web origin of the site (`https://acme.atlassian.net`).
    site: String,
    cloud_id: Mutex<Option<String>>,
}

impl JiraConnector {
    /// `base_url`: the site URL or the gateway URL; `site`: the site host
    /// (`acme.atlassian.net`) or origin, used for browse URLs.
    pub fn new(base_url: &str, site: &str, token: Token, cfg: HttpConfig) -> Result<Self> {
        let site = site.trim().trim_end_matches('/');
        if site.is_empty() || site.contains(char::is_whitespace) {
            return Err(ConnectorError::InvalidConfig {
                detail: format!("Jira site {site:?} is not a host"),
            });
        }
        let site = if site.contains("://") {
            site.to_owned()
        } else {
            format!("https://{site}")
        };
        Ok(JiraConnector {
            client: JiraClient::new(base_url, &token, cfg)?,
            site,
            cloud_id: Mutex::new(None),
        })
    }

    /// Spends the fleet's shared budget of the credential identified by
    /// `credential` (a fingerprint, never the token): Jira reports no
    /// remaining budget, but a `Retry-After` one worker receives then holds
    /// every worker sending with the credential back.
    pub fn with_budget(mut self, budget: Arc<dyn SharedBudget>, credential: &str) -> Self {
        let key = format!("{PLATFORM}:{credential}:rest");
        self.client = self.client.with_shared_budget(budget, key);
        self
    }

    async fn cloud_id(&self, counters: &Counters) -> Result<String> {
        if let Some(id) = self
            .cloud_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Ok(id);
        }
        let id = match self.client.gateway_cloud_id() {
            Some(id) => id,
            None => {
                let url = self.client.endpoint(&["_edge", "tenant_info"]);
                self.client
                    .http()
                    .get_json::<model::TenantInfo>(&url, counters)
                    .await
                    .map_err(|ex| ex.error)?
                    .value
                    .cloud_id
            }
        };
        *self.cloud_id.lock().unwrap_or_else(PoisonError::into_inner) = Some(id.clone());
        Ok(id)
    }
}

#[async_trait::async_trait]
impl Connector for JiraConnector {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    fn scope(&self) -> &str {
        &self.site
    }

    fn budget_key(&self) -> Option<&str> {
        self.client.http().shared_budget_key()
    }

    async fn list_pages(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        self.list_inner(sink, counters).await
    }

    /// `GET /rest/api/3/project/search?maxResults=1` with this credential.
    async fn container_readable(&self) -> Result<bool> {
        let mut url = self
            .client
            .endpoint(&["rest", "api", "3", "project", "search"]);
        url.query_pairs_mut().append_pair("maxResults", "1");
        let answer = self
            .client
            .http()
            .get_json::<serde_json::Value>(&url, &Counters::default())
            .instrument(tracing::debug_span!("jira_container", site = %self.site))
            .await;
        crate::readable(answer)
    }

    /// `GET /rest/api/3/project/{id}?expand=projectKeys`; 404 is `Gone`.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome> {
        let unsupported = |why: String| ConnectorError::UnsupportedAddress {
            platform: PLATFORM,
            address: address.to_string(),
            why,
        };
        if address.kind() != SpaceKind::JiraProject {
            return Err(unsupported(format!(
                "only {} spaces can be read by id",
                SpaceKind::JiraProject
            )));
        }
        let counters = Counters::default();
        let cloud_id = self.cloud_id(&counters).await?;
        if address.tenant() != cloud_id.trim().to_ascii_lowercase() {
            return Err(unsupported(format!(
                "this connection reads site {cloud_id}"
            )));
        }
        let mut url = self
            .client
            .endpoint(&["rest", "api", "3", "project", address.stable_id()]);
        url.query_pairs_mut().append_pair("expand", "projectKeys");
        match self
            .client
            .http()
            .get_json::<model::Project>(&url, &counters)
            .instrument(tracing::debug_span!("jira_read", %address))
            .await
        {
            Ok(f) => {
                let record = mapping::project_record(&f.value, &cloud_id, &self.site)?;
                if record.address != *address {
                    return Err(unsupported(format!(
                        "Jira answered with {}",
                        record.address
                    )));
                }
                Ok(ReadOutcome::Found(record))
            }
            Err(Exhausted { error, .. }) => match error {
                ConnectorError::NotFound { .. } | ConnectorError::Http { status: 410, .. } => {
                    Ok(ReadOutcome::Gone)
                }
                other => Err(other),
            },
        }
    }
}
