//! The conditional-request cache: per connection, rewritten only on a new
//! ETag, forgotten on demand.

use cmcp_registry::testing::TestDb;

both_backends!(pages_are_cached_per_connection_and_rewritten_only_on_a_new_etag,);

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
