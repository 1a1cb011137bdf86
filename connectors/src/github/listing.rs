//! The repository listing: page 1, then pages 2..N concurrently, each page
//! fetched conditionally against the cache.
//!
//! Why concurrent pages: a 50,000-repository organisation is 500 pages, and
//! read one at a time its listing costs 500 round trips. Page 1's
//! `rel="last"` link says how many pages there are; pages 2..N are built by
//! setting the `page` parameter of that URL (GitHub's documented page
//! numbering) and fetched at most `max_concurrency` at a time, each one
//! admitted by the credential's budget. Without a `last` link (cursor
//! pagination, a single page) the listing follows `rel="next"` as given.
//! Pages reach the sink as they arrive, in any order; the listing is
//! complete only if every page succeeded and it adds up ([`Tally`]): page
//! numbers are offsets, so a repository created or deleted while the pages
//! are read shifts them, and one read twice makes the run partial (found by
//! the registry, which keeps every address anyway).
//!
//! Why conditional: each page is asked with the ETag of its last answer; a
//! 304 costs no budget and the cached body stands in for the page, so the
//! records still flow and the listing stays complete. The cache is written
//! only when a page's ETag changed, and holds only the fields the mapping
//! reads (a tenth of a full page).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use cmcp_domain::SpaceRecord;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, LINK};
use tokio::sync::mpsc::Sender;
use url::Url;

use super::first_commit::RootKey;
use super::permissions::Writable;
use super::{GithubConnector, MAX_PER_PAGE, PLATFORM, mapping, model, scopes};

/// The largest organisation the fleet plans for (`DESIGN.md`: 100,000
/// repos per tenant). A page count beyond it comes from a broken or hostile
/// upstream, and reading it would spend the budget for hours.
pub const MAX_REPOS_PER_ORG: u64 = 100_000;
use crate::ListingReport;
use crate::common::http::{Conditional, Counters, Exhausted};
use crate::common::link;
use crate::common::page_cache::CachedPage;
use crate::common::tally::Tally;
use crate::error::{ConnectorError, Result};

/// Names the cached-page format in the cache key: a change to the kept
/// fields (or to the mapping) changes it, so stale copies are never read.
const CACHE_FORMAT: &str = "github-repos-v3";
/// The repository fields kept in the cache: what [`model::Repo`] reads.
const REPO_FIELDS: &[&str] = &[
    "id",
    "node_id",
    "name",
    "full_name",
    "owner",
    "private",
    "html_url",
    "clone_url",
    "ssh_url",
    "archived",
    "visibility",
    "default_branch",
    "pushed_at",
    "permissions",
];
/// The owner fields kept: what [`model::Owner`] reads.
const OWNER_FIELDS: &[&str] = &["login", "id", "html_url"];

/// The cache key of a page URL.
fn cache_key(url: &Url) -> String {
    format!("{CACHE_FORMAT} {url}")
}

/// A page as cached: the items already reduced to the fields the mapping
/// reads (a repository object has about a hundred fields, some 5 KB, so a
/// full page is ~10 times larger than what a 304 needs to stand in for it).
fn compact(items: &[Kept]) -> String {
    serde_json::to_string(items).unwrap_or_default()
}

/// One item of a listing page, decoded keeping only [`REPO_FIELDS`] (and
/// the owner's [`OWNER_FIELDS`]): the other fields are skipped by the
/// parser without being built, so a page costs a tenth of the allocations
/// and memory of a whole `serde_json::Value` per repository. An item that
/// is not an object is kept as it came, and the mapping refuses it on its
/// own, as any malformed item.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
struct Kept(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Kept {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Kept, D::Error> {
        d.deserialize_any(KeptVisitor(REPO_FIELDS)).map(Kept)
    }
}

/// Builds a `serde_json::Value`, keeping of an object only the `.0`
/// fields (and of its `owner`, only [`OWNER_FIELDS`]).
struct KeptVisitor(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for KeptVisitor {
    type Value = serde_json::Value;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<serde_json::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// An object's key: the kept field it names, or none (nothing allocated
/// for a key that is skipped).
struct FieldName(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for FieldName {
    type Value = Option<&'static str>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Option<&'static str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FieldName {
    type Value = Option<&'static str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Option<&'static str>, E> {
        Ok(self.0.iter().find(|f| **f == v).copied())
    }
}

impl<'de> serde::de::Visitor<'de> for KeptVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<serde_json::Value, A::Error> {
        let mut kept = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(FieldName(self.0))? {
            match key {
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Some("owner") => {
                    let owner = map.next_value_seed(KeptVisitor(OWNER_FIELDS))?;
                    kept.insert("owner".to_owned(), owner);
                }
                Some(name) => {
                    kept.insert(name.to_owned(), map.next_value()?);
                }
            }
        }
        Ok(serde_json::Value::Object(kept))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<serde_json::Value, A::Error> {
        let mut all = Vec::new();
        while let Some(v) = seq.next_element()? {
            all.push(v);
        }
        Ok(serde_json::Value::Array(all))
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> std::result::Result<serde_json::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> std::result::Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_none<E>(self) -> std::result::Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<serde_json::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// One page read and mapped.
struct Page {
    records: Vec<SpaceRecord>,
    failures: Vec<String>,
    /// Items refused as outside the tenant.
    foreign: u64,
    headers: HeaderMap,
    url: Url,
    /// What to ask each record's root commit by (record index, key).
    roots: Vec<(usize, RootKey)>,
    /// Repositories the caller may write to.
    writable: Writable,
}

/// What the pages told beyond their records, summed over the listing.
#[derive(Default)]
struct Notes {
    /// Items refused as outside the tenant.
    foreign: u64,
    writable: Writable,
}

/// Errors that end the whole listing rather than making it partial.
fn ends_listing(error: &ConnectorError) -> bool {
    matches!(
        error,
        ConnectorError::RateLimited { .. } | ConnectorError::Unauthorized { .. }
    )
}

impl GithubConnector {
    pub(super) async fn list_inner(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        // A person's listing has no container: their account is not a
        // space, only their repositories are.
        let mut scopes = if self.listing == super::user::Listing::User {
            self.read_own_user(counters).await?
        } else {
            let (org_record, scopes) = self.read_org(counters).await?;
            self.send(sink, vec![org_record]).await?;
            scopes
        };
        let host = self.tenant.clone();

        let mut tally = Tally::new("repositories");
        let mut notes = Notes::default();
        let first_url = self.repos_url();
        let first = match self.fetch_page(&first_url, 1, &host, counters).await {
            Ok(p) => Some(p),
            Err(Exhausted { error, attempts }) => {
                if ends_listing(&error) {
                    return Err(error);
                }
                tracing::warn!(page = 1, attempts, error = %error, "listing page failed; listing is partial");
                tally.fail(format!("page 1: {error} after {attempts} attempts"));
                None
            }
        };
        if let Some(first) = first {
            let last = self.last_page(&first, &mut tally);
            let next = link::next_url(&first.headers, &first.url);
            let first_url = first.url.clone();
            self.take(first, sink, &mut scopes, &mut tally, &mut notes)
                .await?;
            match (last, next) {
                (Some((last_url, n)), _) => {
                    self.fetch_numbered(
                        &last_url,
                        n,
                        &host,
                        sink,
                        counters,
                        &mut scopes,
                        &mut tally,
                        &mut notes,
                    )
                    .await?;
                }
                (None, Some(next)) => {
                    self.follow_next(
                        first_url,
                        next,
                        &host,
                        sink,
                        counters,
                        &mut scopes,
                        &mut tally,
                        &mut notes,
                    )
                    .await?;
                }
                (None, None) => {}
            }
        }

        // A classic token's scopes decide; without them (a fine-grained
        // or App token) the repositories' permissions do.
        let risks = match scopes.as_deref() {
            Some(s) => scopes::write_scope_risk(s),
            None => notes.writable.risk(),
        }
        .into_iter()
        .collect();
        let items = tally.admitted();
        let failures = tally.finish(true);
        let report = ListingReport {
            complete: failures.is_empty(),
            figures: counters.figures(),
            failures,
            risks,
            skipped_foreign: notes.foreign,
        };
        tracing::info!(
            pages = report.figures.pages,
            repos = items,
            skipped_foreign = notes.foreign,
            requests = report.figures.requests,
            not_modified = report.figures.not_modified,
            retries = report.figures.retries,
            rate_limit_waits = report.figures.rate_limit_waits,
            complete = report.complete,
            "listing finished"
        );
        Ok(report)
    }

    /// The `rel="last"` URL and its page number, when usable: on the API
    /// origin and page-numbered.
    fn last_page(&self, first: &Page, tally: &mut Tally) -> Option<(Url, u32)> {
        let last = match link::last_url(&first.headers, &first.url)? {
            Ok(u) => u,
            Err(e) => {
                tally.fail(format!("page 1: unparsable last link: {e}"));
                return None;
            }
        };
        if !self.client.same_origin(&last) {
            let error = ConnectorError::Pagination {
                platform: PLATFORM,
                url: last.to_string(),
                why: format!(
                    "not on the API origin {}",
                    self.client.base().origin().ascii_serialization()
                ),
            };
            tally.fail(format!("page 1: {error}"));
            return None;
        }
        // Not page-numbered: fall back to following `next`.
        let n = link::page_number(&last)?;
        let cap = self.max_pages();
        if n > cap {
            // A page count no organisation we plan for can have: read
            // nothing more (page 1 is kept) and say why.
            tally.fail(format!(
                "page 1: rel=\"last\" claims {n} pages, above the sanity cap of {cap} \
                 ({MAX_REPOS_PER_ORG} repositories); listing stopped"
            ));
            return Some((last, 1));
        }
        Some((last, n))
    }

    /// The most pages a listing may have: [`MAX_REPOS_PER_ORG`] at the page
    /// size asked for.
    fn max_pages(&self) -> u32 {
        let per_page = self.client.http().config().per_page.clamp(1, MAX_PER_PAGE);
        u32::try_from(MAX_REPOS_PER_ORG.div_ceil(u64::from(per_page))).unwrap_or(u32::MAX)
    }

    /// Pages 2..=n, built from the last URL, at most `max_concurrency`
    /// requests in flight. After an error that ends the listing, pages not
    /// yet started are skipped but those in flight are awaited, so every
    /// budget reservation is settled.
    ///
    /// Why twice as many pages under way as requests in flight, and why
    /// pages are handed on beside the fetches rather than between them: a
    /// page is more than its request (a cache read before it, a budget
    /// reservation and settlement around it, the cache write and mapping
    /// after it), and the sink waits whenever the registry is behind. Were
    /// the next request started only once a page had gone all the way
    /// through, the wire would sit idle for each of those steps. Here a
    /// request is ready whenever one ends, and up to `max_concurrency`
    /// mapped pages wait for the sink while the next ones are fetched
    /// (bounded: the fetches pause once that many wait).
    #[allow(clippy::too_many_arguments)]
    async fn fetch_numbered(
        &self,
        last: &Url,
        n: u32,
        host: &str,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
        scopes: &mut Option<Vec<String>>,
        tally: &mut Tally,
        notes: &mut Notes,
    ) -> Result<()> {
        let stop = AtomicBool::new(false);
        let width = self.client.http().config().max_concurrency.max(1);
        let mut pages = futures::stream::iter(2..=n)
            .map(|number| {
                let url = link::with_page(last, number);
                let stop = &stop;
                async move {
                    if stop.load(Ordering::SeqCst) {
                        return (number, None);
                    }
                    (
                        number,
                        Some(self.fetch_page(&url, number, host, counters).await),
                    )
                }
            })
            .buffer_unordered(width * 2);
        let mut ready: VecDeque<Vec<SpaceRecord>> = VecDeque::new();
        let mut fetched_all = false;
        let mut fatal = None;
        loop {
            tokio::select! {
                permit = sink.reserve(), if !ready.is_empty() => match permit {
                    Ok(permit) => permit.send(ready.pop_front().unwrap_or_default()),
                    Err(_) => {
                        stop.store(true, Ordering::SeqCst);
                        ready.clear();
                        fatal.get_or_insert(ConnectorError::SinkClosed { platform: PLATFORM });
                    }
                },
                next = pages.next(), if !fetched_all && ready.len() < width => match next {
                    None => fetched_all = true,
                    Some((_, None)) => {}
                    Some((_, Some(Ok(page)))) => {
                        if fatal.is_none() {
                            let records = self.admit_page(page, scopes, tally, notes);
                            if !records.is_empty() {
                                ready.push_back(records);
                            }
                        }
                    }
                    Some((number, Some(Err(Exhausted { error, attempts })))) => {
                        if ends_listing(&error) {
                            stop.store(true, Ordering::SeqCst);
                            fatal.get_or_insert(error);
                        } else {
                            tracing::warn!(page = number, attempts, error = %error, "listing page failed; listing is partial");
                            tally.fail(format!("page {number}: {error} after {attempts} attempts"));
                        }
                    }
                },
                else => break,
            }
        }
        match fatal {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Follows `rel="next"` exactly as given, one page at a time.
    #[allow(clippy::too_many_arguments)]
    async fn follow_next(
        &self,
        first_url: Url,
        next: std::result::Result<Url, url::ParseError>,
        host: &str,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
        scopes: &mut Option<Vec<String>>,
        tally: &mut Tally,
        notes: &mut Notes,
    ) -> Result<()> {
        let mut seen_urls = HashSet::from([first_url.to_string(), self.repos_url().to_string()]);
        let mut next = Some(next);
        let mut number = 1u32;
        while let Some(candidate) = next.take() {
            let url = match self.checked_next(candidate, &seen_urls) {
                Ok(u) => u,
                Err(why) => {
                    tally.fail(format!("page {number}: {why}"));
                    break;
                }
            };
            number += 1;
            if number > self.max_pages() {
                tally.fail(format!(
                    "page {number}: the next chain goes past the sanity cap of {} pages \
                     ({MAX_REPOS_PER_ORG} repositories); listing stopped",
                    self.max_pages()
                ));
                break;
            }
            seen_urls.insert(url.to_string());
            let page = match self.fetch_page(&url, number, host, counters).await {
                Ok(p) => p,
                Err(Exhausted { error, attempts }) => {
                    if ends_listing(&error) {
                        return Err(error);
                    }
                    tracing::warn!(page = number, attempts, error = %error, "listing page failed; listing is partial");
                    tally.fail(format!("page {number}: {error} after {attempts} attempts"));
                    break;
                }
            };
            next = link::next_url(&page.headers, &page.url);
            self.take(page, sink, scopes, tally, notes).await?;
        }
        Ok(())
    }

    /// A `next` link we may follow: parsable, on the API origin, not read yet.
    fn checked_next(
        &self,
        candidate: std::result::Result<Url, url::ParseError>,
        seen: &HashSet<String>,
    ) -> std::result::Result<Url, String> {
        let n = candidate.map_err(|e| format!("unparsable next link: {e}"))?;
        let why = if !self.client.same_origin(&n) {
            format!(
                "not on the API origin {}",
                self.client.base().origin().ascii_serialization()
            )
        } else if seen.contains(n.as_str()) {
            "that page was already read (pagination loop)".to_owned()
        } else {
            return Ok(n);
        };
        Err(ConnectorError::Pagination {
            platform: PLATFORM,
            url: n.to_string(),
            why,
        }
        .to_string())
    }

    /// Hands a page's records to the sink and keeps its scopes and
    /// failures.
    async fn take(
        &self,
        page: Page,
        sink: &Sender<Vec<SpaceRecord>>,
        scopes: &mut Option<Vec<String>>,
        tally: &mut Tally,
        notes: &mut Notes,
    ) -> Result<()> {
        let records = self.admit_page(page, scopes, tally, notes);
        self.send(sink, records).await
    }

    /// A page's records, as served (a repository served twice is found
    /// by the registry, see [`Tally`]); keeps its scopes and failures.
    fn admit_page(
        &self,
        page: Page,
        scopes: &mut Option<Vec<String>>,
        tally: &mut Tally,
        notes: &mut Notes,
    ) -> Vec<SpaceRecord> {
        if let Some(s) = scopes::scopes(&page.headers) {
            *scopes = Some(s);
        }
        for f in page.failures {
            tally.fail(f);
        }
        notes.foreign += page.foreign;
        notes.writable.merge(page.writable);
        tally.passed(page.records.len());
        page.records
    }

    /// Reads one page, conditionally when the cache has an answer for it,
    /// and maps its items.
    async fn fetch_page(
        &self,
        url: &Url,
        number: u32,
        host: &str,
        counters: &Counters,
    ) -> std::result::Result<Page, Exhausted> {
        let key = cache_key(url);
        let cached = match &self.cache {
            Some(cache) => cache.get(&key).await,
            None => None,
        };
        let http = self.client.http();
        let answer = http
            .get_json_conditional::<Vec<Kept>>(
                url,
                counters,
                cached.as_ref().map(|c| c.etag.as_str()),
            )
            .await?;
        let (items, headers, answered) = match (answer, cached) {
            (Conditional::Modified { fetched, etag, .. }, cached) => {
                // Written only when the page changed: an unchanged listing
                // writes nothing.
                if let (Some(cache), Some(etag)) = (&self.cache, etag)
                    && cached.as_ref().map(|c| c.etag.as_str()) != Some(etag.as_str())
                {
                    let link = fetched
                        .headers
                        .get(LINK)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let page = CachedPage {
                        etag,
                        body: compact(&fetched.value),
                        link,
                        fetched_at: None,
                    };
                    cache.put(&key, &page).await;
                }
                (fetched.value, fetched.headers, fetched.url)
            }
            (
                Conditional::NotModified {
                    mut headers,
                    url: answered,
                },
                Some(cached),
            ) => {
                if let Some(cache) = &self.cache
                    && cached.wants_touch(chrono::Utc::now())
                {
                    cache.touch(&key).await;
                }
                let items = match serde_json::from_str::<Vec<Kept>>(&cached.body) {
                    Ok(items) => items,
                    Err(e) => {
                        // A cached body that no longer parses: read it afresh.
                        tracing::warn!(page = number, error = %e, "cached page unreadable; fetching in full");
                        let fetched = http.get_json::<Vec<Kept>>(url, counters).await?;
                        counters.page();
                        let page = self.map_page(
                            number,
                            fetched.value,
                            fetched.headers,
                            fetched.url,
                            host,
                        );
                        return Ok(self.page_with_first_commits(page, counters).await);
                    }
                };
                if !headers.contains_key(LINK)
                    && let Some(v) = cached.link.and_then(|l| HeaderValue::from_str(&l).ok())
                {
                    headers.insert(LINK, v);
                }
                (items, headers, answered)
            }
            (Conditional::NotModified { .. }, None) => {
                return Err(Exhausted {
                    error: ConnectorError::Http {
                        platform: PLATFORM,
                        status: 304,
                        detail: format!("{url}: Not Modified without a cached page"),
                    },
                    attempts: 1,
                });
            }
        };
        counters.page();
        let page = self.map_page(number, items, headers, answered, host);
        Ok(self.page_with_first_commits(page, counters).await)
    }

    /// The page with each repository's `first-commit` alias added.
    async fn page_with_first_commits(&self, mut page: Page, counters: &Counters) -> Page {
        let keys = std::mem::take(&mut page.roots);
        self.add_first_commits(&mut page.records, keys, counters)
            .await;
        page
    }

    fn map_page(
        &self,
        number: u32,
        items: Vec<Kept>,
        headers: HeaderMap,
        url: Url,
        host: &str,
    ) -> Page {
        let mut records = Vec::with_capacity(items.len());
        let mut failures = Vec::new();
        let mut foreign = 0;
        let mut roots = Vec::new();
        let mut writable = Writable::default();
        for (i, item) in items.into_iter().enumerate() {
            let repo = match serde_json::from_value::<model::Repo>(item.0) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("page {number}: item {}: {e}", i + 1));
                    continue;
                }
            };
            if mapping::foreign_host(mapping::repo_hosts(&repo), host).is_some() {
                foreign += 1;
            }
            writable.note(&repo.full_name, repo.permissions.as_ref());
            match mapping::repo_record(&repo, host) {
                Ok(r) => {
                    roots.push((records.len(), RootKey::of(&repo)));
                    records.push(r);
                }
                Err(e) => failures.push(format!("page {number}: item {}: {e}", i + 1)),
            }
        }
        Page {
            records,
            failures,
            foreign,
            headers,
            url,
            roots,
            writable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_decoded_keeping_only_what_the_mapping_reads() {
        let body = br#"[{"id": 7, "hooks_url": "x", "topics": ["a", {"b": null}], "owner": {"login": "acme", "avatar_url": "y", "id": 9}, "name": "api\u00e9"}, 42, "text", null, [1]]"#;
        let items: Vec<Kept> = serde_json::from_slice(body).unwrap();
        let items: Vec<serde_json::Value> = items.into_iter().map(|k| k.0).collect();
        assert_eq!(
            items,
            vec![
                serde_json::json!({"id": 7, "owner": {"login": "acme", "id": 9}, "name": "api\u{e9}"}),
                serde_json::json!(42),
                serde_json::json!("text"),
                serde_json::Value::Null,
                serde_json::json!([1]),
            ]
        );
        assert!(serde_json::from_slice::<Vec<Kept>>(br#"[{"id": 7,}]"#).is_err());
    }

    #[test]
    fn a_compacted_page_keeps_exactly_what_the_mapping_reads() {
        let item = serde_json::json!({
            "id": 7, "node_id": "R_7", "name": "api", "full_name": "acme/api",
            "owner": {"login": "acme", "id": 9, "html_url": "https://github.com/acme", "avatar_url": "x"},
            "private": true, "html_url": "https://github.com/acme/api",
            "clone_url": "https://github.com/acme/api.git", "ssh_url": "git@github.com:acme/api.git",
            "archived": false, "visibility": "private", "hooks_url": "https://api.github.com/x",
            "description": "dropped"
        });
        let kept: Kept = serde_json::from_value(item.clone()).unwrap();
        let text = compact(std::slice::from_ref(&kept));
        assert!(
            !text.contains("hooks_url") && !text.contains("avatar_url"),
            "{text}"
        );
        let back: Vec<model::Repo> = serde_json::from_str(&text).unwrap();
        let full: model::Repo = serde_json::from_value(item).unwrap();
        let host = "github.com";
        assert_eq!(
            mapping::repo_record(&back[0], host).unwrap(),
            mapping::repo_record(&full, host).unwrap()
        );
    }
}
