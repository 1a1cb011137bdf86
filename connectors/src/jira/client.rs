//! The Jira Cloud REST client: credential handling and the base URL.
//!
//! The base URL is either the site (`https://acme.atlassian.net`, API token
//! with Basic auth) or the gateway `https://api.atlassian.com/ex/jira/{cloudId}`
//! (scoped API tokens, same Basic auth; OAuth access tokens with `bearer:`).

use std::sync::Arc;

use cmcp_domain::{Platform, Token};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use url::Url;

use crate::common::atlassian::{self, AtlassianCredential, AtlassianPolicy, Credential};
use crate::common::config::HttpConfig;
use crate::common::http::HttpClient;
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};

const PLATFORM: Platform = Platform::Jira;

/// `basic:<email>:<API token>` or `bearer:<access token>`; a bare token is
/// refused because Jira API tokens only work with the account e-mail.
pub fn credential(token: &Token) -> Result<Credential> {
    Credential::parse(token, PLATFORM)?.ok_or_else(|| ConnectorError::InvalidConfig {
        detail:
            "a Jira credential is `basic:<email>:<API token>` (or `bearer:<OAuth access token>`); \
                 an API token alone cannot authenticate without the account e-mail"
                .into(),
    })
}

#[derive(Debug)]
pub struct JiraClient {
    http: HttpClient<AtlassianPolicy>,
    /// Always ends with `/`.
    base: Url,
}

impl JiraClient {
    pub fn new(base_url: &str, token: &Token, cfg: HttpConfig) -> Result<Self> {
        let base = atlassian::parse_base(PLATFORM, base_url)?;
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, credential(token)?.header(PLATFORM)?);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        Ok(JiraClient {
            http: HttpClient::new(AtlassianPolicy(PLATFORM), cfg, headers)?,
            base,
        })
    }

    /// Spends the fleet's budget under `key` instead of the in-process one.
    pub fn with_shared_budget(mut self, budget: Arc<dyn SharedBudget>, key: String) -> Self {
        self.http = self.http.with_shared_budget(budget, key);
        self
    }

    pub fn http(&self) -> &HttpClient<AtlassianPolicy> {
        &self.http
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn endpoint(&self, segments: &[&str]) -> Url {
        atlassian::endpoint(&self.base, segments)
    }

    /// The cloudId written in a gateway base URL (`…/ex/jira/{cloudId}/`).
    pub fn gateway_cloud_id(&self) -> Option<String> {
        let segs: Vec<&str> = self
            .base
            .path_segments()?
            .filter(|s| !s.is_empty())
            .collect();
        match segs.as_slice() {
            [.., "ex", "jira", id] => Some((*id).to_owned()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_url_names_the_cloud_id() {
        let c = JiraClient::new(
            "https://api.atlassian.com/ex/jira/abc-123",
            &Token::new("basic:me@acme.com:t"),
            HttpConfig::default(),
        )
        .unwrap();
        assert_eq!(c.gateway_cloud_id().as_deref(), Some("abc-123"));
        assert_eq!(
            c.endpoint(&["rest", "api", "3", "project", "search"])
                .as_str(),
            "https://api.atlassian.com/ex/jira/abc-123/rest/api/3/project/search"
        );
        let site = JiraClient::new(
            "https://acme.atlassian.net",
            &Token::new("basic:me@acme.com:t"),
            HttpConfig::default(),
        )
        .unwrap();
        assert_eq!(site.gateway_cloud_id(), None);
    }

    #[test]
    fn a_bare_token_is_refused() {
        assert!(credential(&Token::new("justatoken")).is_err());
    }
}
