//! Google Drive: list a Workspace domain's shared drives and the folders
//! inside them (to a configured depth), read one by its stable id, and read
//! the changes feed for incremental syncs.
//!
//! A connection's scope is the Workspace domain (the tenant of every
//! address); its secret is a service account's JSON key with domain-wide
//! delegation ([`auth`]); its settings ([`DriveSettings`]) name the admin
//! to impersonate and the depth.
//!
//! Listing: `drives.list` (with `useDomainAdminAccess` when configured, so an
//! admin sees every shared drive of the domain, not only its own), then for
//! each drive **one** `files.list` query for all its non-trashed folders
//! (`corpora=drive`), and the tree is built in memory ([`mapping::FolderTree`]).
//! Why one query per drive rather than one per parent level: a level query
//! needs `'a' in parents or 'b' in parents …`, which Drive limits in length,
//! and costs a request per level and per batch of parents; a drive's folder
//! list is small next to its files and pages 1,000 at a time. Its cost is
//! reading folders deeper than the depth, which are then dropped.
//!
//! Pagination is sequential (`pageToken`) and an **empty page with a
//! `nextPageToken` is not the end**: only the absence of the token is. A
//! page that fails after retries makes the listing incomplete (nothing is
//! then marked missing), and a token seen twice stops it as a loop.

pub mod auth;
mod changes;
pub mod client;
mod listing;
pub mod mapping;
pub mod model;
mod watch;
pub mod webhook;

use std::collections::HashSet;
use std::sync::Arc;

use cmcp_domain::{
    ConnectionSpec, Platform, RiskCode, RiskNotice, SpaceAddress, SpaceKind, SpaceRecord, Token,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::Sender;
use url::Url;

use self::auth::{ServiceAccount, TokenSource};
use self::client::DriveClient;
pub use self::watch::WatchedChannel;
use crate::common::config::HttpConfig;
use crate::common::http::{Counters, Exhausted, HttpFigures};
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};
use crate::feed::{ChangeFeed, PushChannels};
use crate::{Connector, ListingReport, ReadOutcome};

const PLATFORM: Platform = Platform::Drive;
const DRIVES_PAGE: u32 = 100;
const FILES_PAGE: u32 = 1000;
const FOLDER_FIELDS: &str = "id,name,mimeType,parents,driveId,trashed,webViewLink";
/// Records per sink message.
const CHUNK: usize = 500;
/// Longest parent chain walked by a direct read.
const MAX_WALK: u32 = 64;

fn default_depth() -> u32 {
    2
}

/// The non-secret settings of a Drive connection (`connections.settings`).
/// Unknown keys are ignored: other parts of the fleet keep their own
/// settings in the same object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct DriveSettings {
    /// The Workspace admin the service account acts as (`sub`).
    pub subject: String,
    /// Folder levels listed below each drive; 1 = folders in the drive root.
    #[serde(default = "default_depth")]
    pub depth: u32,
    /// Send `useDomainAdminAccess=true` to `drives.list`/`drives.get`.
    #[serde(default)]
    pub domain_admin_access: bool,
    /// Token endpoint; default the key's `token_uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// Tokeninfo endpoint; default `<base>/oauth2/v3/tokeninfo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokeninfo_url: Option<String>,
}

impl DriveSettings {
    pub fn from_json(settings: &serde_json::Value) -> Result<DriveSettings> {
        serde_json::from_value(settings.clone()).map_err(|e| ConnectorError::InvalidConfig {
            detail: format!("Drive connection settings: {e} (needs at least \"subject\")"),
        })
    }
}

/// A direct read of a folder, with how deep it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FolderRead {
    /// Readable; `depth` 1 = directly in its drive.
    Found { record: SpaceRecord, depth: u32 },
    /// 404: deleted, or no longer visible to the credential.
    Gone,
    /// Readable but not a folder of a shared drive (e.g. in a My Drive).
    NotInADrive,
}

/// What one drive's changes feed said since a page token.
#[derive(Debug, Clone)]
pub struct ChangesBatch {
    pub changes: Vec<model::Change>,
    /// Where the next incremental read starts.
    pub new_start_page_token: String,
    pub figures: HttpFigures,
}

/// Lists one Workspace domain with one service account.
#[derive(Debug)]
pub struct DriveConnector {
    client: DriveClient,
    domain: String,
    settings: DriveSettings,
}

impl DriveConnector {
    pub fn new(
        base_url: &str,
        domain: &str,
        token: Token,
        settings: DriveSettings,
        cfg: HttpConfig,
    ) -> Result<DriveConnector> {
        let domain = domain.trim().to_ascii_lowercase();
        if domain.is_empty()
            || domain.contains(['/', '?', '#', '@'])
            || domain.contains(char::is_whitespace)
        {
            return Err(ConnectorError::InvalidConfig {
                detail: format!("Drive domain {domain:?} is not a domain name"),
            });
        }
        let account = ServiceAccount::from_token(&token)?;
        let tokens = TokenSource::new(
            account,
            &settings.subject,
            settings.token_url.as_deref(),
            cfg.clone(),
        )?;
        Ok(DriveConnector {
            client: DriveClient::new(base_url, tokens, cfg)?,
            domain,
            settings,
        })
    }

    /// From a stored connection: spec, settings JSON and the key.
    pub fn from_connection(
        spec: &ConnectionSpec,
        settings: &serde_json::Value,
        token: Token,
        cfg: &HttpConfig,
    ) -> Result<DriveConnector> {
        let settings = DriveSettings::from_json(settings)?;
        DriveConnector::new(&spec.base_url, &spec.scope, token, settings, cfg.clone())
    }

    /// Spends the fleet's shared budget of the service account identified
    /// by `credential` (a fingerprint, never the key): Drive reports no
    /// remaining quota, but a `Retry-After` one worker receives then holds
    /// every worker sending with the account back.
    pub fn with_budget(mut self, budget: Arc<dyn SharedBudget>, credential: &str) -> Self {
        let key = format!("{PLATFORM}:{credential}:api");
        self.client = self.client.with_shared_budget(budget, key);
        self
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    pub fn settings(&self) -> &DriveSettings {
        &self.settings
    }

    fn drive_v3(&self, rest: &[&str]) -> Url {
        let mut segments = vec!["drive", "v3"];
        segments.extend_from_slice(rest);
        self.client.endpoint(&segments)
    }

    async fn get<T: DeserializeOwned>(&self, url: &Url, counters: &Counters) -> Result<T> {
        self.client
            .get_json::<T>(url, counters)
            .await
            .map(|f| f.value)
            .map_err(|e| e.error)
    }

    /// Granted scopes other than read-only ones, as a `write-scope` risk.
    async fn scope_risks(&self) -> Result<Vec<RiskNotice>> {
        let access = self.client.access_token().await?;
        let url = match &self.settings.tokeninfo_url {
            Some(u) => Url::parse(u).map_err(|e| ConnectorError::InvalidConfig {
                detail: format!("Drive tokeninfo URL {u:?}: {e}"),
            })?,
            None => self.client.endpoint(&["oauth2", "v3", "tokeninfo"]),
        };
        let info = self.client.tokens().token_info(&url, &access).await?;
        let writes = auth::write_scopes(&info.scope);
        Ok(if writes.is_empty() {
            Vec::new()
        } else {
            vec![RiskNotice {
                code: RiskCode::WriteScope,
                message: format!(
                    "the service account's delegation grants scopes that can write: {} (only drive.readonly is needed)",
                    writes.join(", ")
                ),
            }]
        })
    }

    /// Follows `nextPageToken` from `first`, calling `page` with each
    /// decoded page. Empty pages with a token go on; a token seen twice
    /// stops. Returns the failure that ended it early, if any.
    async fn paginate<T, F>(
        &self,
        first: Url,
        counters: &Counters,
        what: &str,
        next_token: fn(&T) -> Option<String>,
        mut page: F,
    ) -> std::result::Result<(), (ConnectorError, u32)>
    where
        T: DeserializeOwned,
        F: FnMut(T) -> std::result::Result<(), ConnectorError>,
    {
        let mut seen = HashSet::new();
        let mut token: Option<String> = None;
        let mut n = 0u32;
        loop {
            n += 1;
            let mut url = first.clone();
            if let Some(t) = &token {
                url.query_pairs_mut().append_pair("pageToken", t);
            }
            let value: T = match self.client.get_json::<T>(&url, counters).await {
                Ok(f) => f.value,
                Err(Exhausted { error, attempts }) => {
                    tracing::warn!(what, page = n, attempts, error = %error, "page failed");
                    return Err((error, n));
                }
            };
            counters.page();
            let next = next_token(&value);
            page(value).map_err(|e| (e, n))?;
            match next {
                Some(t) if !t.is_empty() => {
                    if !seen.insert(t.clone()) {
                        return Err((
                            ConnectorError::Pagination {
                                platform: PLATFORM,
                                url: first.to_string(),
                                why: "a page token came back twice (pagination loop)".into(),
                            },
                            n,
                        ));
                    }
                    token = Some(t);
                }
                _ => return Ok(()),
            }
        }
    }
}

#[async_trait::async_trait]
impl Connector for DriveConnector {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    fn scope(&self) -> &str {
        &self.domain
    }

    fn budget_key(&self) -> Option<&str> {
        self.client.shared_budget_key()
    }

    async fn list_pages(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        self.list_inner(sink, counters).await
    }

    /// `drives.list` (one drive) as the connection's subject: the domain's
    /// shared drives are still readable.
    async fn container_readable(&self) -> Result<bool> {
        let mut url = self.drive_v3(&["drives"]);
        url.query_pairs_mut().append_pair("pageSize", "1");
        if self.settings.domain_admin_access {
            url.query_pairs_mut()
                .append_pair("useDomainAdminAccess", "true");
        }
        let answer = tracing::Instrument::instrument(
            self.client
                .get_json::<model::DriveList>(&url, &Counters::default()),
            tracing::debug_span!("drive_container", domain = %self.domain),
        )
        .await;
        crate::readable(answer)
    }

    /// `drives.get` for a shared drive, `files.get` (plus its parents, for
    /// the path) for a folder. `Gone` on 404: for a folder that means
    /// deleted or no longer visible to the impersonated admin.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome> {
        let unsupported = |why: String| ConnectorError::UnsupportedAddress {
            platform: PLATFORM,
            address: address.to_string(),
            why,
        };
        if address.tenant() != self.domain {
            return Err(unsupported(format!(
                "this connection reads {}",
                self.domain
            )));
        }
        match address.kind() {
            SpaceKind::DriveSharedDrive => Ok(match self.get_drive(address.stable_id()).await? {
                Some(d) => ReadOutcome::Found(mapping::drive_record(&d, &self.domain)?),
                None => ReadOutcome::Gone,
            }),
            SpaceKind::DriveFolder => match self.read_folder(address.stable_id()).await? {
                FolderRead::Found { record, .. } => Ok(ReadOutcome::Found(record)),
                FolderRead::Gone => Ok(ReadOutcome::Gone),
                FolderRead::NotInADrive => {
                    Err(unsupported("not a folder of a shared drive".into()))
                }
            },
            other => Err(unsupported(format!("{other} is not a Drive kind"))),
        }
    }

    fn change_feed(&self) -> Option<&dyn ChangeFeed> {
        Some(self)
    }

    fn push_channels(&self) -> Option<&dyn PushChannels> {
        Some(self)
    }
}
