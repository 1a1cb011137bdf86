//! A person's GitHub: who a token belongs to, whether it can write, and
//! the listing of every repository that person can see.
//!
//! A personal connection is the GitHub connector in its `user` listing
//! mode (the connection's `listing` setting), not a platform of its own:
//! the same client, budget, conditional pages and mapping, only the
//! listing URL differs — `GET /user/repos?affiliation=owner,collaborator,
//! organization_member` instead of `GET /orgs/{org}/repos`. The
//! connection's scope is the GitHub login `GET /user` named when the token
//! was linked; a token that later answers for another account is a
//! configuration error, never a silent switch of person.

use cmcp_domain::{RiskNotice, Token};
use serde::Deserialize;

use super::client::GithubClient;
use super::permissions::Writable;
use super::{GithubConnector, scopes};
use crate::common::config::HttpConfig;
use crate::common::http::Counters;
use crate::error::{ConnectorError, Result};

/// The connection setting that picks the listing mode.
pub const LISTING_SETTING: &str = "listing";
/// Its value for a person's connection.
pub const USER_LISTING: &str = "user";
/// The affiliations listed: everything the person can read.
pub const AFFILIATIONS: &str = "owner,collaborator,organization_member";

/// What a GitHub connection lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `GET /orgs/{org}/repos`: a company connection.
    Org,
    /// `GET /user/repos`: what the token's person sees.
    User,
}

impl Listing {
    /// The mode a connection's settings ask for (`org` when unset).
    pub fn from_settings(settings: &serde_json::Value) -> Result<Listing> {
        match settings
            .get(LISTING_SETTING)
            .and_then(serde_json::Value::as_str)
        {
            None | Some("org") => Ok(Listing::Org),
            Some(USER_LISTING) => Ok(Listing::User),
            Some(other) => Err(ConnectorError::InvalidConfig {
                detail: format!("GitHub listing {other:?} is neither \"org\" nor \"user\""),
            }),
        }
    }
}

/// `GET /user`.
#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub login: String,
    pub id: u64,
    #[serde(default)]
    pub html_url: Option<String>,
}

/// What linking a token learned about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCheck {
    pub login: String,
    pub id: u64,
    /// Shown to the person: the token can do more than read.
    pub risks: Vec<RiskNotice>,
}

/// Checks a personal token before anything is stored: `GET /user` names
/// the account, and a classic token's `X-OAuth-Scopes` tells whether it can
/// write; a token without that header (fine-grained) is judged by the
/// `permissions` of the first page of what it lists
/// ([`super::permissions`]). A write-capable token is accepted, with its
/// risk.
pub async fn check_token(base_url: &str, token: &Token, cfg: HttpConfig) -> Result<TokenCheck> {
    let per_page = cfg.per_page.min(super::MAX_PER_PAGE);
    let client = GithubClient::new(base_url, token, cfg)?;
    let counters = Counters::default();
    let (user, scopes) = read_user(&client, &counters).await?;
    let risk = match scopes.as_deref() {
        Some(s) => scopes::write_scope_risk(s),
        None => first_page_writable(&client, per_page, &counters)
            .await?
            .risk(),
    };
    let risks = risk.into_iter().collect();
    Ok(TokenCheck {
        login: user.login,
        id: user.id,
        risks,
    })
}

/// The repositories of the first page of `GET /user/repos` that report
/// write access.
async fn first_page_writable(
    client: &GithubClient,
    per_page: u32,
    counters: &Counters,
) -> Result<Writable> {
    let mut url = client.endpoint(&["user", "repos"]);
    url.query_pairs_mut()
        .append_pair("affiliation", AFFILIATIONS)
        .append_pair("per_page", &per_page.to_string());
    let fetched = client
        .http()
        .get_json::<Vec<super::model::Repo>>(&url, counters)
        .await
        .map_err(|ex| ex.error)?;
    let mut writable = Writable::default();
    for repo in &fetched.value {
        writable.note(&repo.full_name, repo.permissions.as_ref());
    }
    Ok(writable)
}

/// `GET /user` and its scopes header.
pub(super) async fn read_user(
    client: &GithubClient,
    counters: &Counters,
) -> Result<(User, Option<Vec<String>>)> {
    let url = client.endpoint(&["user"]);
    let fetched = client
        .http()
        .get_json::<User>(&url, counters)
        .await
        .map_err(|ex| ex.error)?;
    Ok((fetched.value, scopes::scopes(&fetched.headers)))
}

impl GithubConnector {
    /// The person's connection of GitHub account `login`.
    pub fn for_user(base_url: &str, login: &str, token: Token, cfg: HttpConfig) -> Result<Self> {
        let mut c = GithubConnector::new(base_url, login, token, cfg)?;
        c.listing = Listing::User;
        Ok(c)
    }

    /// `GET /user`, checked to be the connection's account.
    pub(super) async fn read_own_user(&self, counters: &Counters) -> Result<Option<Vec<String>>> {
        let (user, scopes) = read_user(&self.client, counters).await?;
        if !user.login.eq_ignore_ascii_case(&self.org) {
            return Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "the token now belongs to GitHub account {:?}, not {:?}: link it again",
                    user.login, self.org
                ),
            });
        }
        Ok(scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_mode_comes_from_settings() {
        let s = |v: serde_json::Value| Listing::from_settings(&v);
        assert_eq!(s(serde_json::json!({})).unwrap(), Listing::Org);
        assert_eq!(
            s(serde_json::json!({"listing": "user"})).unwrap(),
            Listing::User
        );
        assert!(s(serde_json::json!({"listing": "everything"})).is_err());
    }
}
