//! Bitbucket Cloud: list a workspace's projects and repositories and read
//! one by its uuid.
//!
//! A listing is `GET /2.0/workspaces/{workspace}` (the container and the
//! tenant: its uuid), then `GET /2.0/workspaces/{workspace}/projects` and
//! `GET /2.0/repositories/{workspace}` with `pagelen=100`, following each
//! page's `next` exactly as given ("refrain from constructing your own
//! URLs"), one page at a time. Containers go to the sink before what they
//! contain: workspace, projects, repositories.
//!
//! Credentials are `bearer:<access token>` or `basic:<email>:<API token>`
//! (see [`client::credential`]); app passwords are refused.

pub mod budget;
pub mod client;
mod listing;
pub mod mapping;
pub mod model;
pub mod webhook;

use std::sync::{Arc, Mutex, PoisonError};

use cmcp_domain::{Platform, RiskCode, RiskNotice, SpaceAddress, SpaceKind, SpaceRecord, Token};
use reqwest::header::HeaderMap;
use tokio::sync::mpsc::Sender;
use tracing::Instrument;

use self::client::BitbucketClient;
use crate::common::config::HttpConfig;
use crate::common::http::{Counters, Exhausted};
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};
use crate::{Connector, ListingReport, ReadOutcome};

const PLATFORM: Platform = Platform::Bitbucket;
/// Bitbucket's largest `pagelen`.
const MAX_PAGELEN: u32 = 100;

/// Lists one Bitbucket Cloud workspace with one credential.
#[derive(Debug)]
pub struct BitbucketConnector {
    client: BitbucketClient,
    workspace: String,
    /// The workspace uuid (canonical) once read: the tenant of every address.
    tenant: Mutex<Option<String>>,
}

/// Scopes that let a credential change something: legacy names
/// (`repository:write`, `project:admin`, and `webhook`, which lets it
/// create and delete hooks) and granular ones (`write:repository:bitbucket`,
/// `delete:project:bitbucket`; `read:webhook:bitbucket` only reads).
pub fn write_scope_risk(headers: &HeaderMap) -> Option<RiskNotice> {
    let scopes = headers.get("x-oauth-scopes")?.to_str().ok()?;
    let writes: Vec<&str> = scopes
        .split([',', ' '])
        .map(str::trim)
        .filter(|s| {
            *s == "webhook"
                || s.split(':')
                    .any(|part| matches!(part, "write" | "admin" | "delete"))
        })
        .collect();
    (!writes.is_empty()).then(|| RiskNotice {
        code: RiskCode::WriteScope,
        message: format!(
            "the Bitbucket credential can change things ({}); the catalogue only needs read scopes \
             (read:repository:bitbucket, read:project:bitbucket, read:workspace:bitbucket)",
            writes.join(", ")
        ),
    })
}

impl BitbucketConnector {
    /// `base_url`: `https://api.bitbucket.org` or a simulator's
    /// `http://127.0.0.1:PORT`; `workspace`: the workspace slug (or
    /// `{uuid}`).
    pub fn new(base_url: &str, workspace: &str, token: Token, cfg: HttpConfig) -> Result<Self> {
        let workspace = workspace.trim();
        if workspace.is_empty()
            || workspace.contains(['/', '?', '#'])
            || workspace.contains(char::is_whitespace)
        {
            return Err(ConnectorError::InvalidConfig {
                detail: format!("Bitbucket workspace {workspace:?} is not a workspace id"),
            });
        }
        Ok(BitbucketConnector {
            client: BitbucketClient::new(base_url, &token, cfg)?,
            workspace: workspace.to_owned(),
            tenant: Mutex::new(None),
        })
    }

    /// Spends the fleet's shared budget of the credential identified by
    /// `credential` (a fingerprint, never the token), under
    /// [`budget::budget_key`]: every worker sending with the credential
    /// then keeps, together, to Bitbucket's allowance.
    pub fn with_budget(mut self, budget: Arc<dyn SharedBudget>, credential: &str) -> Self {
        self.client = self
            .client
            .with_shared_budget(budget, budget::budget_key(credential));
        self
    }

    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    /// Reads the workspace: its record (the tenant is its uuid) and the
    /// credential's risk, if any.
    async fn read_workspace(
        &self,
        counters: &Counters,
    ) -> Result<(SpaceRecord, Option<RiskNotice>)> {
        let url = self.client.endpoint(&["workspaces", &self.workspace]);
        let fetched = self
            .client
            .http()
            .get_json::<model::Workspace>(&url, counters)
            .await
            .map_err(|ex| match ex.error {
                ConnectorError::NotFound { platform, .. } => ConnectorError::NotFound {
                    platform,
                    what: format!("workspace {:?} at {}", self.workspace, self.client.base()),
                },
                other => other,
            })?;
        let record = mapping::workspace_record(&fetched.value)?;
        *self.tenant.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(record.address.tenant().to_owned());
        Ok((record, write_scope_risk(&fetched.headers)))
    }

    async fn tenant(&self) -> Result<String> {
        let known = self
            .tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match known {
            Some(t) => Ok(t),
            None => Ok(self
                .read_workspace(&Counters::default())
                .await?
                .0
                .address
                .tenant()
                .to_owned()),
        }
    }
}

#[async_trait::async_trait]
impl Connector for BitbucketConnector {
    fn platform(&self) -> Platform {
        PLATFORM
    }

    fn scope(&self) -> &str {
        &self.workspace
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

    /// `GET /2.0/workspaces/{workspace}` with this credential.
    async fn container_readable(&self) -> Result<bool> {
        let url = self.client.endpoint(&["workspaces", &self.workspace]);
        let answer = self
            .client
            .http()
            .get_json::<model::Workspace>(&url, &Counters::default())
            .instrument(tracing::debug_span!("bitbucket_container", workspace = %self.workspace))
            .await;
        crate::readable(answer)
    }

    /// Repositories: `GET /2.0/repositories/{workspace}/{uuid}` (braces
    /// percent-encoded); the workspace: `GET /2.0/workspaces/{uuid}`;
    /// projects: found by uuid in the project listing. 404 is `Gone`.
    async fn read(&self, address: &SpaceAddress) -> Result<ReadOutcome> {
        let unsupported = |why: String| ConnectorError::UnsupportedAddress {
            platform: PLATFORM,
            address: address.to_string(),
            why,
        };
        if address.platform() != PLATFORM {
            return Err(unsupported("not a Bitbucket space".into()));
        }
        let tenant = self.tenant().await?;
        if address.tenant() != tenant {
            return Err(unsupported(format!(
                "this connection reads workspace {tenant}"
            )));
        }
        let braced = mapping::braced(address.stable_id());
        let counters = Counters::default();
        let span = tracing::debug_span!("bitbucket_read", %address);
        let result = match address.kind() {
            SpaceKind::BitbucketProject => {
                return self.read_project(address, &tenant).instrument(span).await;
            }
            SpaceKind::BitbucketRepo => {
                let url = self
                    .client
                    .endpoint(&["repositories", &self.workspace, &braced]);
                self.client
                    .http()
                    .get_json::<model::Repo>(&url, &counters)
                    .instrument(span)
                    .await
                    .and_then(|f| {
                        mapping::repo_record(&f.value, &tenant)
                            .map_err(|error| Exhausted { error, attempts: 1 })
                    })
            }
            _ => {
                let url = self.client.endpoint(&["workspaces", &braced]);
                self.client
                    .http()
                    .get_json::<model::Workspace>(&url, &counters)
                    .instrument(span)
                    .await
                    .and_then(|f| {
                        mapping::workspace_record(&f.value)
                            .map_err(|error| Exhausted { error, attempts: 1 })
                    })
            }
        };
        match result {
            Ok(record) if record.address == *address => Ok(ReadOutcome::Found(record)),
            Ok(record) => Err(unsupported(format!(
                "Bitbucket answered with {}",
                record.address
            ))),
            Err(Exhausted { error, .. }) => match error {
                ConnectorError::NotFound { .. } | ConnectorError::Http { status: 410, .. } => {
                    Ok(ReadOutcome::Gone)
                }
                other => Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn scopes(s: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-oauth-scopes", HeaderValue::from_static(s));
        h
    }

    #[test]
    fn write_admin_or_delete_scopes_are_a_risk_in_both_spellings() {
        for risky in [
            "repository:write",
            "project:admin, repository",
            "read:repository:bitbucket, write:repository:bitbucket",
            "delete:project:bitbucket",
            "repository, webhook",
        ] {
            let r = write_scope_risk(&scopes(risky)).unwrap_or_else(|| panic!("{risky}"));
            assert_eq!(r.code, "write-scope");
        }
        for safe in [
            "repository, project",
            "read:repository:bitbucket, read:project:bitbucket",
            "read:webhook:bitbucket, repository",
        ] {
            assert_eq!(write_scope_risk(&scopes(safe)), None, "{safe}");
        }
        assert_eq!(write_scope_risk(&HeaderMap::new()), None);
    }
}
