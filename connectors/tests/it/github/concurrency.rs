//! Pages 2..N fetched concurrently within `max_concurrency`, and listings
//! made conditional by a page cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmcp_connectors::HttpConfig;
use cmcp_connectors::common::page_cache::{CachedPage, PageCache};
use cmcp_fixtures::GithubSimConfig;

use super::{assert_exactly_the_sims_repos, connector, sim};
use crate::support::{fast_cfg, list};

/// A page cache in memory that counts its writes.
#[derive(Default)]
struct MemoryCache {
    pages: Mutex<HashMap<String, CachedPage>>,
    writes: AtomicUsize,
}

#[async_trait::async_trait]
impl PageCache for MemoryCache {
    async fn get(&self, url: &str) -> Option<CachedPage> {
        self.pages.lock().unwrap().get(url).cloned()
    }

    async fn put(&self, url: &str, page: &CachedPage) {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.pages
            .lock()
            .unwrap()
            .insert(url.to_owned(), page.clone());
    }
}

#[tokio::test]
async fn pages_after_the_first_overlap_but_never_exceed_max_concurrency() {
    let sim = sim(GithubSimConfig {
        repos: 300,
        latency: Duration::from_millis(20),
        ..GithubSimConfig::default()
    })
    .await;
    let cfg = HttpConfig {
        per_page: 10,
        max_concurrency: 3,
        ..fast_cfg()
    };
    let listed = list(&connector(&sim, cfg)).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert_eq!(report.figures.pages, 30);
    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());
    let stats = sim.stats();
    assert!(stats.max_in_flight <= 3, "{stats:?}");
    assert!(
        stats.max_in_flight > 1,
        "pages were fetched one by one: {stats:?}"
    );
}

#[tokio::test]
async fn an_unchanged_listing_is_answered_from_the_cache_with_304s_and_no_writes() {
    let sim = sim(GithubSimConfig {
        repos: 250,
        ..GithubSimConfig::default()
    })
    .await;
    let cache = Arc::new(MemoryCache::default());
    let cfg = HttpConfig {
        per_page: 50,
        ..fast_cfg()
    };
    let c = connector(&sim, cfg.clone()).with_page_cache(cache.clone());
    let first = list(&c).await;
    assert!(first.result.as_ref().unwrap().complete);
    assert_eq!(cache.writes.load(Ordering::SeqCst), 5, "one write per page");

    sim.reset_stats();
    let c = connector(&sim, cfg.clone()).with_page_cache(cache.clone());
    let second = list(&c).await;
    let report = second.result.as_ref().unwrap();
    assert!(report.complete, "{:?}", report.failures);
    assert_eq!(report.figures.pages, 5);
    assert_eq!(report.figures.not_modified, 5);
    assert_eq!(sim.stats().not_modified, 5);
    assert_eq!(cache.writes.load(Ordering::SeqCst), 5, "nothing rewritten");
    assert_exactly_the_sims_repos(&second.records(), &sim, &sim.web_host());

    // One changed repository rewrites exactly its page.
    let renamed = sim.repos()[120].id;
    sim.rename_repo(renamed, "billing-service");
    let c = connector(&sim, cfg).with_page_cache(cache.clone());
    let third = list(&c).await;
    let report = third.result.as_ref().unwrap();
    assert!(report.complete);
    assert_eq!(report.figures.not_modified, 4);
    assert_eq!(cache.writes.load(Ordering::SeqCst), 6);
    assert_exactly_the_sims_repos(&third.records(), &sim, &sim.web_host());
}
