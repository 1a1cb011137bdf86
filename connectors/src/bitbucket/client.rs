//! The Bitbucket Cloud REST client: credential handling and the base URL.
//!
//! App passwords are refused before any request: Bitbucket Cloud stops
//! accepting them in 2026 (brownouts from June 9, removal on July 28), and a
//! connection that works today and fails in a brownout is worse than one
//! that is refused with the way out spelled out.

use std::sync::Arc;

use cmcp_domain::{Platform, Token};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use url::Url;

use super::budget::BitbucketPolicy;
use crate::common::atlassian::{self, AtlassianCredential, Credential};
use crate::common::config::HttpConfig;
use crate::common::http::HttpClient;
use crate::common::shared::SharedBudget;
use crate::error::{ConnectorError, Result};

const PLATFORM: Platform = Platform::Bitbucket;

/// Why an app password is refused, and what to use instead.
pub const APP_PASSWORD_REFUSED: &str = "Bitbucket app passwords stopped working in 2026 \
     (brownouts from June 9, removal on July 28, 2026); use an API token with read scopes \
     together with your Atlassian account e-mail (`connection add bitbucket --email <e-mail> \
     --token-file <file>`), or a workspace, project or repository access token \
     (`--token-file <file>` alone)";

/// Reads the credential text of a Bitbucket connection: `bearer:<token>`
/// (access token), `basic:<email>:<token>` (API token) or a bare access
/// token. `app-password:…` and a Basic user name that is not an e-mail (the
/// shape of an app password) are refused.
pub fn credential(token: &Token) -> Result<Credential> {
    if token.expose().trim_start().starts_with("app-password:") {
        return Err(ConnectorError::InvalidConfig {
            detail: APP_PASSWORD_REFUSED.into(),
        });
    }
    match Credential::parse(token, PLATFORM)? {
        Some(Credential::Basic { user, .. }) if !user.contains('@') => {
            Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "the Basic user name {user:?} is not an e-mail, so this looks like an app password: {APP_PASSWORD_REFUSED}"
                ),
            })
        }
        Some(c) => Ok(c),
        None => Ok(Credential::Bearer(token.expose().trim().to_owned())),
    }
}

/// The Bitbucket Cloud API (`https://api.bitbucket.org`) with one credential.
#[derive(Debug)]
pub struct BitbucketClient {
    http: HttpClient<BitbucketPolicy>,
    /// Always ends with `/`.
    base: Url,
}

impl BitbucketClient {
    pub fn new(base_url: &str, token: &Token, cfg: HttpConfig) -> Result<Self> {
        let base = atlassian::parse_base(PLATFORM, base_url)?;
        if base
            .path_segments()
            .and_then(|mut s| s.rfind(|p| !p.is_empty()))
            == Some("2.0")
        {
            return Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "Bitbucket base URL {base_url:?} ends in /2.0: give the API's root \
                     (https://api.bitbucket.org, or your proxy's prefix before /2.0); \
                     the connector adds /2.0 itself"
                ),
            });
        }
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, credential(token)?.header(PLATFORM)?);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let policy = BitbucketPolicy::new(&cfg)?;
        Ok(BitbucketClient {
            http: HttpClient::new(policy, cfg, headers)?,
            base,
        })
    }

    /// Spends the fleet's budget under `key` instead of the in-process one.
    pub fn with_shared_budget(mut self, budget: Arc<dyn SharedBudget>, key: String) -> Self {
        self.http = self.http.with_shared_budget(budget, key);
        self
    }

    pub fn http(&self) -> &HttpClient<BitbucketPolicy> {
        &self.http
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `{base}/2.0/<segments>`, each segment percent-encoded (`{uuid}` →
    /// `%7Buuid%7D`).
    pub fn endpoint(&self, segments: &[&str]) -> Url {
        let mut all = Vec::with_capacity(segments.len() + 1);
        all.push("2.0");
        all.extend_from_slice(segments);
        atlassian::endpoint(&self.base, &all)
    }

    /// Only URLs on the API's own origin are followed: anywhere else would
    /// receive the credential.
    pub fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_passwords_are_refused_with_the_way_out() {
        for text in ["app-password:me:x", "basic:jdoe:ATBBxyz"] {
            let e = credential(&Token::new(text)).unwrap_err().to_string();
            assert!(e.contains("July 28, 2026"), "{e}");
            assert!(e.contains("API token"), "{e}");
            // The way out is spelled as the CLI takes it.
            assert!(e.contains("--email") && e.contains("--token-file"), "{e}");
            assert!(!e.contains("basic:<"), "{e}");
            assert!(!e.contains("ATBBxyz"), "{e}");
        }
        assert!(matches!(
            credential(&Token::new("basic:me@acme.com:tok")).unwrap(),
            Credential::Basic { .. }
        ));
        assert_eq!(
            credential(&Token::new("bearer:at")).unwrap(),
            Credential::Bearer("at".into())
        );
        assert_eq!(
            credential(&Token::new("rawtoken")).unwrap(),
            Credential::Bearer("rawtoken".into())
        );
    }

    #[test]
    fn a_base_url_ending_in_the_api_version_gets_a_hint() {
        let cfg = HttpConfig::default();
        let token = Token::new("bearer:at");
        for base in [
            "https://api.bitbucket.org/2.0",
            "https://proxy.acme.example/bb/2.0/",
        ] {
            let e = BitbucketClient::new(base, &token, cfg.clone())
                .unwrap_err()
                .to_string();
            assert!(e.contains("adds /2.0 itself"), "{e}");
        }
        let c = BitbucketClient::new("https://proxy.acme.example/bb", &token, cfg).unwrap();
        assert_eq!(
            c.endpoint(&["workspaces", "acme"]).as_str(),
            "https://proxy.acme.example/bb/2.0/workspaces/acme"
        );
    }

    #[test]
    fn uuids_in_paths_keep_their_braces_percent_encoded() {
        let c = BitbucketClient::new(
            "https://api.bitbucket.org",
            &Token::new("t"),
            HttpConfig::default(),
        )
        .unwrap();
        assert_eq!(
            c.endpoint(&["repositories", "acme", "{673a6070-3421}"])
                .as_str(),
            "https://api.bitbucket.org/2.0/repositories/acme/%7B673a6070-3421%7D"
        );
        assert!(!format!("{c:?}").contains("Bearer t"));
    }
}
