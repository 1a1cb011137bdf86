//! `/admin` is as strict as `/v1`: a table walks every view and action
//! with each combination of powers and expects what the API twin allows.
//! The screen sends CSP, frame and nosniff headers, bounds its paging, and
//! marks its cookie `Secure` behind an https public URL.

use cmcp_admin::AdminState;
use cmcp_registry::testing::TestDb;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};

use crate::screen::{Screen, admin_key, csrf_of, serve};
use crate::support::connection;

both_backends!(
    every_view_and_action_needs_the_power_of_its_api_twin,
    screen_headers_paging_and_secure_cookie,
    sign_in_attempts_are_limited_per_client_address,
);

/// Served with the peer address (as `listen::serve` gives it): the
/// eleventh attempt within a minute is 429, whatever the key.
pub async fn sign_in_attempts_are_limited_per_client_address(db: TestDb) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = cmcp_admin::router(AdminState::new(db.store.clone()))
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let good = admin_key(&db, &[]).await;
    let mut statuses = Vec::new();
    for i in 0..12 {
        let key = if i == 11 { good.as_str() } else { "guess" };
        let resp = http
            .post(format!("{base}/admin/sign-in"))
            .form(&[("key", key)])
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(&statuses[10..], &[429, 429], "even the right key waits");
}

/// (powers, sees proposals (`GET /v1/proposals`: mappings), sees
/// connections (`GET /v1/connections`: connections)); deciding and
/// switching a connection need the same powers as their views.
const TABLE: &[(&[&str], bool, bool)] = &[
    (&[], false, false),
    (&["mappings"], true, false),
    (&["connections"], false, true),
    (&["mappings", "connections"], true, true),
];

async fn post(screen: &Screen, cookie: &str, path: &str, form: &[(&str, &str)]) -> StatusCode {
    screen
        .http
        .post(format!("{}{path}", screen.base))
        .header(COOKIE, cookie)
        .form(form)
        .send()
        .await
        .unwrap()
        .status()
}

pub async fn every_view_and_action_needs_the_power_of_its_api_twin(db: TestDb) {
    connection(&db.store, "bb-strict").await;
    let screen = serve(&db).await;
    for (powers, proposals, connections) in TABLE {
        let cookie = screen.sign_in(&admin_key(&db, powers).await).await;
        let html = screen.page(&cookie, "").await;
        assert_eq!(
            !html.contains("Proposals need an admin key"),
            *proposals,
            "{powers:?}: proposals view"
        );
        assert_eq!(
            html.contains("bb-strict"),
            *connections,
            "{powers:?}: connections view"
        );
        let csrf = csrf_of(&html);
        let decide = post(
            &screen,
            &cookie,
            "/admin/decide",
            &[("csrf", &csrf), ("action", "approve"), ("reason", "t")],
        )
        .await;
        assert_eq!(
            decide == StatusCode::FORBIDDEN,
            !*proposals,
            "{powers:?}: decide answered {decide}"
        );
        let switch = post(
            &screen,
            &cookie,
            "/admin/connection",
            &[("csrf", &csrf), ("id", "bb-strict"), ("status", "enabled")],
        )
        .await;
        assert_eq!(
            switch == StatusCode::FORBIDDEN,
            !*connections,
            "{powers:?}: connection change answered {switch}"
        );
    }
}

pub async fn screen_headers_paging_and_secure_cookie(db: TestDb) {
    let screen = serve(&db).await;
    let cookie = screen.sign_in(&admin_key(&db, &["mappings"]).await).await;
    let resp = screen
        .http
        .get(format!("{}/admin?page=9223372036854775807", screen.base))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "a huge page does not overflow"
    );
    let h = resp.headers();
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(
        !h.get_all(SET_COOKIE)
            .iter()
            .any(|c| c.to_str().unwrap().contains("Secure")),
        "plain http: no Secure flag"
    );
    // Behind an https public URL the cookie is Secure.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app =
        cmcp_admin::router(AdminState::new(db.store.clone()).behind("https://discovery.example"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let key = admin_key(&db, &[]).await;
    let resp = screen
        .http
        .post(format!("{base}/admin/sign-in"))
        .form(&[("key", key.as_str())])
        .send()
        .await
        .unwrap();
    let set = resp.headers()[SET_COOKIE].to_str().unwrap();
    assert!(set.contains("; Secure"), "{set}");
}
