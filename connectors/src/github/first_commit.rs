//! Root commits: each repository's first commit, recorded as its
//! `first-commit` alias so that a fork, a mirror or a re-upload of the
//! same history matches its source (the ladder's same-first-commit rung).
//!
//! GitHub has no "first commit" endpoint. `GET /repos/{o}/{r}/commits?
//! per_page=1` answers the newest commit with a `rel="last"` link whose
//! page is the oldest: two requests, one when the history is a single
//! commit, and 409 for an empty repository (no alias, asked again only
//! when it is pushed).
//!
//! Why cached by default branch and push time: a root commit never changes
//! while the branch and the history stay, so it is asked once per
//! repository and again only when `default_branch` or `pushed_at` moves.
//! The answer is kept in the connection's page cache, with the ETag and
//! URL of the last page, so an ask after a push whose last page did not
//! move is a free 304. A failed ask keeps what was known: a flaky answer
//! never retires the alias.

use cmcp_domain::{Alias, AliasKind, SpaceRecord};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use url::Url;

use super::GithubConnector;
use crate::common::http::{Conditional, Counters};
use crate::common::link;
use crate::common::page_cache::CachedPage;
use crate::error::ConnectorError;

/// Names the cached format; a change makes old copies unread.
const CACHE_FORMAT: &str = "github-root-v1";

/// What decides whether a repository's root commit must be asked again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RootKey {
    pub id: u64,
    pub full_name: String,
    pub default_branch: Option<String>,
    pub pushed_at: Option<String>,
}

impl RootKey {
    pub fn of(repo: &super::model::Repo) -> RootKey {
        RootKey {
            id: repo.id,
            full_name: repo.full_name.clone(),
            default_branch: repo.default_branch.clone(),
            pushed_at: repo.pushed_at.clone(),
        }
    }
}

/// The cached answer for one repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Known {
    default_branch: Option<String>,
    pushed_at: Option<String>,
    /// `None`: the repository was empty.
    sha: Option<String>,
}

fn cache_key(id: u64) -> String {
    format!("{CACHE_FORMAT} {id}")
}

/// The `sha` of the first commit of a `commits` page.
fn first_sha(items: &[serde_json::Value]) -> Option<String> {
    items.first()?.get("sha")?.as_str().map(str::to_owned)
}

impl GithubConnector {
    /// Adds the `first-commit` alias to each record of `keys` (record index,
    /// key), at most `max_concurrency` asks at a time.
    pub(super) async fn add_first_commits(
        &self,
        records: &mut [SpaceRecord],
        keys: Vec<(usize, RootKey)>,
        counters: &Counters,
    ) {
        if !self.first_commits {
            return;
        }
        let width = self.client.http().config().max_concurrency.max(1);
        let found: Vec<(usize, Option<String>)> = futures::stream::iter(keys)
            .map(|(i, key)| async move { (i, self.root_commit(&key, counters).await) })
            .buffer_unordered(width)
            .collect()
            .await;
        for (i, sha) in found {
            if let (Some(sha), Some(record)) = (sha, records.get_mut(i))
                && let Some(alias) = Alias::new(AliasKind::FirstCommit, &sha)
            {
                record.aliases.push(alias);
            }
        }
    }

    /// The root commit of one repository: cached while its branch and push
    /// time stay, else asked (see the module docs).
    async fn root_commit(&self, key: &RootKey, counters: &Counters) -> Option<String> {
        let cache_key = cache_key(key.id);
        let cached = match &self.cache {
            Some(c) => c.get(&cache_key).await,
            None => None,
        };
        let known: Option<Known> = cached
            .as_ref()
            .and_then(|c| serde_json::from_str(&c.body).ok());
        if let Some(k) = &known
            && k.default_branch == key.default_branch
            && k.pushed_at == key.pushed_at
        {
            if let (Some(cache), Some(c)) = (&self.cache, &cached)
                && c.wants_touch(chrono::Utc::now())
            {
                cache.touch(&cache_key).await;
            }
            return k.sha.clone();
        }
        let kept = known.as_ref().and_then(|k| k.sha.clone());
        match self
            .ask_root(key, cached.as_ref(), known.as_ref(), counters)
            .await
        {
            Ok((sha, etag, last)) => {
                if let Some(cache) = &self.cache {
                    let body = Known {
                        default_branch: key.default_branch.clone(),
                        pushed_at: key.pushed_at.clone(),
                        sha: sha.clone(),
                    };
                    let page = CachedPage {
                        etag: etag.unwrap_or_default(),
                        body: serde_json::to_string(&body).unwrap_or_default(),
                        link: last.map(|u| u.to_string()),
                        fetched_at: None,
                    };
                    cache.put(&cache_key, &page).await;
                }
                sha
            }
            Err(e) => {
                tracing::debug!(repo = key.id, error = %e, "root commit not read; keeping what was known");
                kept
            }
        }
    }

    /// Page 1, then the `rel="last"` page (conditional on the cached ETag
    /// when it is the same page as last time). Answers the sha (`None` for
    /// an empty repository), the ETag and URL of the page it came from.
    async fn ask_root(
        &self,
        key: &RootKey,
        cached: Option<&CachedPage>,
        known: Option<&Known>,
        counters: &Counters,
    ) -> Result<(Option<String>, Option<String>, Option<Url>), ConnectorError> {
        let Some((owner, name)) = key.full_name.split_once('/') else {
            return Err(ConnectorError::InvalidConfig {
                detail: format!("repository {} has no owner/name", key.id),
            });
        };
        let mut url = self.client.endpoint(&["repos", owner, name, "commits"]);
        url.query_pairs_mut().append_pair("per_page", "1");
        let http = self.client.http();
        let first = match http
            .get_json_conditional::<Vec<serde_json::Value>>(&url, counters, None)
            .await
        {
            Ok(Conditional::Modified { fetched, etag, .. }) => (fetched, etag),
            Ok(Conditional::NotModified { .. }) => {
                return Err(ConnectorError::InvalidConfig {
                    detail: "304 to an unconditional request".to_owned(),
                });
            }
            // An empty repository: nothing to record, and nothing lost.
            Err(e) if matches!(e.error, ConnectorError::Http { status: 409, .. }) => {
                return Ok((None, None, None));
            }
            Err(e) => return Err(e.error),
        };
        let (fetched, etag) = first;
        let last = match link::last_url(&fetched.headers, &fetched.url) {
            Some(Ok(u)) if self.client.same_origin(&u) => u,
            Some(Ok(u)) => {
                return Err(ConnectorError::Pagination {
                    platform: super::PLATFORM,
                    url: u.to_string(),
                    why: "not on the API origin".to_owned(),
                });
            }
            Some(Err(e)) => {
                return Err(ConnectorError::Pagination {
                    platform: super::PLATFORM,
                    url: url.to_string(),
                    why: format!("unparsable last link: {e}"),
                });
            }
            // One page: the newest commit is the root.
            None => return Ok((first_sha(&fetched.value), etag, Some(fetched.url))),
        };
        let same_page = cached.is_some_and(|c| c.link.as_deref() == Some(last.as_str()));
        let validator = cached.filter(|_| same_page).map(|c| c.etag.as_str());
        match http
            .get_json_conditional::<Vec<serde_json::Value>>(&last, counters, validator)
            .await
            .map_err(|e| e.error)?
        {
            Conditional::Modified { fetched, etag, .. } => {
                Ok((first_sha(&fetched.value), etag, Some(last)))
            }
            Conditional::NotModified { .. } => Ok((
                known.and_then(|k| k.sha.clone()),
                cached.map(|c| c.etag.clone()),
                Some(last),
            )),
        }
    }
}
