//! GitHub (github.com, GHEC and GHES): list an organisation's repositories
//! and read one repository by its stable id.
//!
//! A listing is `GET /orgs/{org}` (the container, sent first) and then
//! `GET /orgs/{org}/repos?per_page=100&type=all`: page 1, then pages 2..N
//! from its `rel="last"` link, a few at a time within the credential's
//! budget and `max_concurrency` (GitHub's secondary limits reward restraint),
//! each conditional on its cached ETag (see [`listing`]). Pages go to the
//! sink as they arrive through a bounded channel, so memory stays flat for
//! any size.
//!
//! A page that still fails after retries ends the listing as incomplete:
//! the registry then marks nothing missing (a partial listing is never
//! evidence of deletion). Problems of the whole run — the credential
//! rejected, or a rate limit too long to wait out — are returned as errors
//! instead, so the job can fail or be rescheduled.

pub mod client;
mod first_commit;
mod listing;
pub mod mapping;
pub mod model;
pub mod permissions;
pub mod scopes;
pub mod user;
pub mod webhook;

use std::sync::Arc;

use cmcp_domain::{Platform, SpaceAddress, SpaceKind, SpaceRecord, Token};
use tokio::sync::mpsc::Sender;
use tracing::Instrument;
use url::Url;

use self::client::GithubClient;
use self::user::Listing;
use crate::common::config::HttpConfig;
use crate::common::http::{Counters, Exhausted};
use crate::common::page_cache::PageCache;
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};
use crate::{Connector, ListingReport, ReadOutcome};

const PLATFORM: Platform = Platform::Github;
/// GitHub's largest page; it silently caps a larger `per_page` anyway.
pub(crate) const MAX_PER_PAGE: u32 = 100;

/// Lists one GitHub organisation with one credential.
pub struct GithubConnector {
    client: GithubClient,
    org: String,
    /// The web host every address of the connection is in, from its
    /// configuration ([`cmcp_domain::github_tenant`]): never learned from
    /// an answer.
    tenant: String,
    /// Conditional-request answers of this connection, if kept.
    cache: Option<Arc<dyn PageCache>>,
    /// An org's repositories, or what a person sees ([`user`]); in the
    /// latter mode `org` holds the person's GitHub login.
    listing: Listing,
    /// Record each repository's root commit ([`first_commit`]).
    first_commits: bool,
}

impl std::fmt::Debug for GithubConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubConnector")
            .field("client", &self.client)
            .field("org", &self.org)
            .field("tenant", &self.tenant)
            .field("page_cache", &self.cache.is_some())
            .field("listing", &self.listing)
            .finish_non_exhaustive()
    }
}

impl GithubConnector {
    /// `base_url`: `https://api.github.com`, a GHES `https://host/api/v3`, or
    /// a simulator's `http://127.0.0.1:PORT[/prefix]`. The tenant is the web
    /// host that goes with it; see [`GithubConnector::with_web_host`] for a
    /// GHES browsed under another name.
    pub fn new(base_url: &str, org: &str, token: Token, cfg: HttpConfig) -> Result<Self> {
        let org = org.trim();
        if org.is_empty() || org.contains(['/', '?', '#']) || org.contains(char::is_whitespace) {
            return Err(ConnectorError::InvalidConfig {
                detail: format!("GitHub organisation {org:?} is not a login"),
            });
        }
        let client = GithubClient::new(base_url, &token, cfg)?;
        let tenant = tenant_of(client.base().as_str(), None)?;
        Ok(GithubConnector {
            client,
            org: org.to_owned(),
            tenant,
            cache: None,
            listing: Listing::Org,
            first_commits: false,
        })
    }

    /// A GitHub Enterprise Server whose web host (what `html_url` and
    /// `clone_url` name, what people paste) differs from its API host: an
    /// internal name or address. `None` keeps the tenant implied by the
    /// base URL. Only `https://api.github.com` may be `github.com`.
    pub fn with_web_host(mut self, web_host: Option<&str>) -> Result<Self> {
        self.tenant = tenant_of(self.client.base().as_str(), web_host)?;
        Ok(self)
    }

    /// The tenant (web host) of every address this connection writes.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Spends the fleet's shared budget of the credential identified by
    /// `credential` (a fingerprint, never the token). GitHub's REST calls
    /// made here all draw on the `core` resource.
    pub fn with_budget(mut self, budget: Arc<dyn SharedBudget>, credential: &str) -> Self {
        let key = format!("{PLATFORM}:{credential}:core");
        self.client = self.client.with_shared_budget(budget, key);
        self
    }

    /// Records each repository's root commit as its `first-commit` alias
    /// (two requests per repository the first time, then only after a
    /// push; see [`first_commit`]).
    pub fn with_first_commits(mut self, on: bool) -> Self {
        self.first_commits = on;
        self
    }

    /// Fetches listing pages conditionally against `cache`.
    pub fn with_page_cache(mut self, cache: Arc<dyn PageCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    pub fn org(&self) -> &str {
        &self.org
    }

    fn repos_url(&self) -> Url {
        let per_page = self.client.http().config().per_page.min(MAX_PER_PAGE);
        if self.listing == Listing::User {
            // `type` may not be combined with `affiliation` (422).
            let mut url = self.client.endpoint(&["user", "repos"]);
            url.query_pairs_mut()
                .append_pair("affiliation", user::AFFILIATIONS)
                .append_pair("per_page", &per_page.to_string());
            return url;
        }
        let mut url = self.client.endpoint(&["orgs", &self.org, "repos"]);
        url.query_pairs_mut()
            .append_pair("per_page", &per_page.to_string())
            .append_pair("type", "all");
        url
    }

    async fn send(&self, sink: &Sender<Vec<SpaceRecord>>, records: Vec<SpaceRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        sink.send(records)
            .await
            .map_err(|_| ConnectorError::SinkClosed { platform: PLATFORM })
    }

    /// Reads the organisation: its record, and the scopes header if any.
    async fn read_org(&self, counters: &Counters) -> Result<(SpaceRecord, Option<Vec<String>>)> {
        let url = self.client.endpoint(&["orgs", &self.org]);
        let fetched = self
            .client
            .http()
            .get_json::<model::Org>(&url, counters)
            .await
            .map_err(|ex| match ex.error {
                ConnectorError::NotFound { platform, .. } => ConnectorError::NotFound {
                    platform,
                    what: format!("organization {:?} at {}", self.org, self.client.base()),
                },
                other => other,
            })?;
        // The organisation on another host than the tenant: the connection
        // is configured for another GitHub than it reaches. Only its
        // configuration can fix that, so it is a configuration error.
        if let Some(host) = mapping::foreign_host([fetched.value.html_url.as_deref()], &self.tenant)
        {
            return Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "GitHub at {} places organization {:?} on {host}, outside this connection's \
                     tenant {}: for an Enterprise Server browsed as {host}, configure that web \
                     host (connection add github --web-host {host})",
                    self.client.base(),
                    self.org,
                    self.tenant
                ),
            });
        }
        let record = mapping::org_record(&fetched.value, &self.tenant)?;
        Ok((record, scopes::scopes(&fetched.headers)))
    }
}

/// [`cmcp_domain::github_tenant`] as a configuration error.
fn tenant_of(base_url: &str, web_host: Option<&str>) -> Result<String> {
    cmcp_domain::github_tenant(base_url, web_host).map_err(|e| ConnectorError::InvalidConfig {
        detail: e.to_string(),
    })
}

#[async_trait::async_trait]
impl Connector for GithubConnector {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    fn scope(&self) -> &str {
        &self.org
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

    /// `GET /orgs/{org}` with this credential (`GET /user` for a person's).
    async fn container_readable(&self) -> Result<bool> {
        if self.listing == Listing::User {
            let answer = user::read_user(&self.client, &Counters::default()).await;
            return match answer {
                Ok((u, _)) => Ok(u.login.eq_ignore_ascii_case(&self.org)),
                Err(ConnectorError::NotFound { .. } | ConnectorError::Unauthorized { .. }) => {
                    Ok(false)
                }
                Err(e) => Err(e),
            };
        }
        let url = self.client.endpoint(&["orgs", &self.org]);
        let answer = self
            .client
            .http()
            .get_json::<model::Org>(&url, &Counters::default())
            .instrument(tracing::debug_span!("github_container", org = %self.org))
            .await;
        crate::readable(answer)
    }

    /// `GET /repositories/{id}`: the rename- and transfer-proof address.
    /// 404 and 410 are `Gone` — note GitHub also answers 404 for a private
    /// repository the credential cannot see, so a caller should only
    /// tombstone on `Gone` from a credential known to have had access.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome> {
        let unsupported = |why: String| ConnectorError::UnsupportedAddress {
            platform: PLATFORM,
            address: address.to_string(),
            why,
        };
        if address.kind() != SpaceKind::GithubRepo {
            return Err(unsupported(format!(
                "only {} spaces can be read by id",
                SpaceKind::GithubRepo
            )));
        }
        let host = self.tenant.as_str();
        if address.tenant() != host {
            return Err(unsupported(format!("this connection reads {host}")));
        }
        let id: u64 = address
            .stable_id()
            .parse()
            .map_err(|_| unsupported("a GitHub repository id is a number".into()))?;
        let url = self.client.endpoint(&["repositories", &id.to_string()]);
        let counters = Counters::default();
        match self
            .client
            .http()
            .get_json::<model::Repo>(&url, &counters)
            .instrument(tracing::debug_span!("github_read", %address))
            .await
        {
            Ok(f) => {
                if let Some(other) = mapping::foreign_host(mapping::repo_hosts(&f.value), host) {
                    return Err(unsupported(format!(
                        "GitHub places it on {other}, outside this connection's tenant {host}"
                    )));
                }
                let mut record = mapping::repo_record(&f.value, host)?;
                let key = first_commit::RootKey::of(&f.value);
                self.add_first_commits(
                    std::slice::from_mut(&mut record),
                    vec![(0, key)],
                    &counters,
                )
                .await;
                if record.address != *address {
                    return Err(unsupported(format!(
                        "GitHub answered with {}",
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
