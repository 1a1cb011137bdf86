//! The one place that turns a stored connection into a connector: each
//! platform on its own arm, every connector handed the same dependencies.

use std::sync::Arc;

use cmcp_domain::{ConnectionSpec, Platform, Token};

use crate::common::page_cache::PageCache;
use crate::common::shared::SharedBudget;
use crate::{
    BitbucketConnector, Connector, DriveConnector, GithubConnector, HttpConfig, JiraConnector,
    Result,
};

/// What a connector is handed beyond its spec, settings and token: the HTTP
/// settings, the fleet's shared rate budget and the conditional-request
/// cache. The connectors crate only knows the budget and cache traits; the
/// worker implements them on the store. A connector that has no use for
/// the cache (only GitHub's listing is conditional) ignores it.
#[derive(Clone, Default)]
pub struct ConnectorDeps {
    pub http: HttpConfig,
    /// The shared budget and the credential's fingerprint (never the token)
    /// that names its key.
    pub budget: Option<(Arc<dyn SharedBudget>, String)>,
    pub page_cache: Option<Arc<dyn PageCache>>,
}

impl ConnectorDeps {
    /// HTTP settings only: each connector keeps its budget to itself.
    pub fn new(http: HttpConfig) -> ConnectorDeps {
        ConnectorDeps {
            http,
            ..ConnectorDeps::default()
        }
    }
}

/// The GitHub setting that turns root-commit aliases off.
pub const FIRST_COMMITS_SETTING: &str = "first_commits";

/// The connector of one connection. `settings` is the connection's
/// settings object (Drive needs the admin to impersonate; the others read
/// none of it).
pub fn build(
    spec: &ConnectionSpec,
    settings: &serde_json::Value,
    token: Token,
    deps: ConnectorDeps,
) -> Result<Box<dyn Connector>> {
    let ConnectorDeps {
        http,
        budget,
        page_cache,
    } = deps;
    let (url, scope) = (spec.base_url.as_str(), spec.scope.as_str());
    Ok(match spec.platform {
        Platform::Github => {
            // The web host of an Enterprise Server browsed under another
            // name than its API: the tenant comes from this configuration.
            let web_host = settings
                .get(cmcp_domain::WEB_HOST_SETTING)
                .and_then(serde_json::Value::as_str);
            // A person's connection lists what its token's account sees.
            let listing = crate::github::user::Listing::from_settings(settings)?;
            let mut c = match listing {
                crate::github::user::Listing::Org => GithubConnector::new(url, scope, token, http)?,
                crate::github::user::Listing::User => {
                    GithubConnector::for_user(url, scope, token, http)?
                }
            }
            .with_web_host(web_host)?;
            // Root commits feed the same-first-commit rung. They cost two
            // requests per repository the first time, so a person's
            // connection (a few hundred repos) asks them by default and a
            // company's (up to 100,000) only when its settings say
            // `"first_commits": true`.
            let first_commits = settings
                .get(FIRST_COMMITS_SETTING)
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(listing == crate::github::user::Listing::User);
            c = c.with_first_commits(first_commits);
            if let Some((budget, credential)) = budget {
                c = c.with_budget(budget, &credential);
            }
            if let Some(cache) = page_cache {
                c = c.with_page_cache(cache);
            }
            Box::new(c)
        }
        Platform::Bitbucket => {
            let c = BitbucketConnector::new(url, scope, token, http)?;
            Box::new(match budget {
                Some((budget, credential)) => c.with_budget(budget, &credential),
                None => c,
            })
        }
        Platform::Jira => {
            let c = JiraConnector::new(url, scope, token, http)?;
            Box::new(match budget {
                Some((budget, credential)) => c.with_budget(budget, &credential),
                None => c,
            })
        }
        Platform::Drive => {
            let c = DriveConnector::from_connection(spec, settings, token, &http)?;
            Box::new(match budget {
                Some((budget, credential)) => c.with_budget(budget, &credential),
                None => c,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConnectorError;
    use crate::common::budget::RateBudget;

    fn spec(platform: Platform) -> ConnectionSpec {
        ConnectionSpec {
            platform,
            scope: "acme".into(),
            base_url: "https://api.github.com".into(),
        }
    }

    fn none() -> serde_json::Value {
        serde_json::Value::Null
    }

    #[test]
    fn build_names_every_platform() {
        let c = build(
            &spec(Platform::Github),
            &none(),
            Token::new("t"),
            ConnectorDeps::default(),
        )
        .unwrap();
        assert_eq!(c.platform(), Platform::Github);
        for p in [Platform::Bitbucket, Platform::Jira] {
            let c = build(
                &spec(p),
                &none(),
                Token::new("basic:me@acme.com:t"),
                ConnectorDeps::default(),
            )
            .unwrap();
            assert_eq!(c.platform(), p);
        }
        // Drive without its settings (the admin to impersonate) cannot work.
        assert!(matches!(
            build(
                &spec(Platform::Drive),
                &none(),
                Token::new("t"),
                ConnectorDeps::default()
            ),
            Err(ConnectorError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn build_rejects_a_bad_spec() {
        let mut s = spec(Platform::Github);
        s.scope = " ".into();
        assert!(matches!(
            build(&s, &none(), Token::new("t"), ConnectorDeps::default()),
            Err(ConnectorError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn every_connector_spends_the_shared_budget_it_is_given() {
        let deps = ConnectorDeps {
            budget: Some((Arc::new(RateBudget::new()), "f1n93rpr1n7".into())),
            ..ConnectorDeps::default()
        };
        let tokens = [
            (Platform::Github, "t"),
            (Platform::Bitbucket, "basic:me@acme.com:t"),
            (Platform::Jira, "basic:me@acme.com:t"),
        ];
        for (p, token) in tokens {
            let c = build(&spec(p), &none(), Token::new(token), deps.clone()).unwrap();
            let key = c
                .budget_key()
                .unwrap_or_else(|| panic!("{p} has no budget"));
            assert!(key.starts_with(&format!("{p}:f1n93rpr1n7")), "{key}");
            let alone = build(
                &spec(p),
                &none(),
                Token::new(token),
                ConnectorDeps::default(),
            );
            assert_eq!(alone.unwrap().budget_key(), None);
        }
    }
}
