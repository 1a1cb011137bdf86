//! The conditional-request cache: per connection, rewritten only on a new
//! ETag, forgotten on demand.

use cmcp_registry::testing::TestDb;

both_backends!(
    pages_are_cached_per_connection_and_rewritten_only_on_a_new_etag,
    a_touch_keeps_a_page_current,
);

async fn pages_are_cached_per_connection_and_rewritten_only_on_a_new_etag(db: TestDb) {
    let s = &db.store;
    let url = "https://api.github.com/orgs/acme/repos?page=2";
    assert_eq!(s.cached_page("a", url).await.unwrap(), None);
    assert!(
        s.put_cached_page("a", url, "W/\"1\"", "[1]", Some("<x>; rel=\"last\""))
            .await
            .unwrap()
    );
    assert!(
        !s.put_cached_page("a", url, "W/\"1\"", "[1]", None)
            .await
            .unwrap(),
        "same etag: no write"
    );
    let page = s.cached_page("a", url).await.unwrap().unwrap();
    assert_eq!((page.etag.as_str(), page.body.as_str()), ("W/\"1\"", "[1]"));
    assert_eq!(page.link.as_deref(), Some("<x>; rel=\"last\""));
    assert_eq!(
        s.cached_page("b", url).await.unwrap(),
        None,
        "another connection"
    );
    assert!(
        s.put_cached_page("a", url, "W/\"2\"", "[2]", None)
            .await
            .unwrap()
    );
    assert_eq!(s.cached_page("a", url).await.unwrap().unwrap().body, "[2]");
    assert_eq!(s.forget_cached_pages("a").await.unwrap(), 1);
}

/// A touch moves a cached page's time forward, never back, and writes
/// nothing for a page not cached.
async fn a_touch_keeps_a_page_current(db: TestDb) {
    let s = &db.store;
    let url = "https://api.github.com/orgs/acme/repos?page=1";
    s.put_cached_page("a", url, "W/\"1\"", "[1]", None)
        .await
        .unwrap();
    let written = s.cached_page("a", url).await.unwrap().unwrap().fetched_at;
    let later = written + 2 * 86_400_000;
    assert!(s.touch_cached_page("a", url, later).await.unwrap());
    assert_eq!(
        s.cached_page("a", url).await.unwrap().unwrap().fetched_at,
        later
    );
    assert!(
        !s.touch_cached_page("a", url, written).await.unwrap(),
        "never moved back"
    );
    assert!(!s.touch_cached_page("b", url, later).await.unwrap());
    let page = s.cached_page("a", url).await.unwrap().unwrap();
    assert_eq!((page.etag.as_str(), page.body.as_str()), ("W/\"1\"", "[1]"));
}
