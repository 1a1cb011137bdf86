//! The `/admin` screen over plain HTTP: sessions, CSRF, Origin, escaping,
//! paging, and the forms deciding proposals.

use cmcp_admin::{AdminState, create_key};
use cmcp_registry::testing::TestDb;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};

use crate::support::{connection, place, project, proposals, put, refresh};

both_backends!(
    sign_in_sets_a_strict_httponly_cookie_and_sign_out_ends_it,
    forged_posts_are_refused,
    upstream_names_render_as_text,
    five_thousand_pending_are_paged_and_groups_decide,
    connections_show_their_rate_budget,
);

pub struct Screen {
    pub base: String,
    pub http: reqwest::Client,
}

pub async fn serve(db: &TestDb) -> Screen {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = cmcp_admin::router(AdminState::new(db.store.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Screen {
        base,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    }
}

pub async fn admin_key(db: &TestDb, powers: &[&str]) -> String {
    let powers: Vec<String> = powers.iter().map(|p| (*p).to_owned()).collect();
    create_key(&db.store, "screen admin", "admin", &powers, "test")
        .await
        .unwrap()
        .1
}

impl Screen {
    /// Sign in; returns the `Cookie` header value.
    pub async fn sign_in(&self, key: &str) -> String {
        let resp = self
            .http
            .post(format!("{}/admin/sign-in", self.base))
            .form(&[("key", key)])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let cookie = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        cookie.split(';').next().unwrap().to_owned()
    }

    pub async fn page(&self, cookie: &str, query: &str) -> String {
        let resp = self
            .http
            .get(format!("{}/admin{query}", self.base))
            .header(COOKIE, cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap()
    }
}

pub fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_owned()
}

async fn seeded(db: &TestDb, n: usize) {
    connection(&db.store, "bb").await;
    let projects: Vec<_> = (0..n)
        .map(|i| project(i, &format!("K{i}"), &format!("Project {i}")))
        .collect();
    put(&db.store, &projects).await;
    let places: Vec<_> = (0..n)
        .map(|i| {
            place(
                &format!("p{i}"),
                &format!("Place {i}"),
                Some(&format!("K{i}")),
            )
        })
        .collect();
    db.store.put_places(&places, "t").await.unwrap();
    refresh(&db.store).await;
}

pub async fn sign_in_sets_a_strict_httponly_cookie_and_sign_out_ends_it(db: TestDb) {
    let srv = serve(&db).await;
    let member = create_key(&db.store, "m", "member", &[], "t")
        .await
        .unwrap()
        .1;
    let resp = srv
        .http
        .post(format!("{}/admin/sign-in", srv.base))
        .form(&[("key", member.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::UNAUTHORIZED,
        "a member key cannot sign in"
    );
    let key = admin_key(&db, &["mappings"]).await;
    let resp = srv
        .http
        .post(format!("{}/admin/sign-in", srv.base))
        .form(&[("key", key.as_str())])
        .send()
        .await
        .unwrap();
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let html = srv.page(&cookie, "").await;
    assert!(html.contains("Signed in as screen admin"));
    let csrf = csrf_of(&html);
    let resp = srv
        .http
        .post(format!("{}/admin/sign-out", srv.base))
        .header(COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let html = srv.page(&cookie, "").await;
    assert!(
        html.contains("name=\"key\""),
        "signed out: the sign-in form again"
    );
}

pub async fn forged_posts_are_refused(db: TestDb) {
    seeded(&db, 3).await;
    let id = proposals(&db.store, "proposed").await[0].id.to_string();
    let srv = serve(&db).await;
    let cookie = srv.sign_in(&admin_key(&db, &["mappings"]).await).await;
    let csrf = csrf_of(&srv.page(&cookie, "").await);
    let post = |form: Vec<(&'static str, String)>, origin: Option<&'static str>| {
        let mut req = srv
            .http
            .post(format!("{}/admin/decide", srv.base))
            .header(COOKIE, &cookie)
            .form(&form);
        if let Some(o) = origin {
            req = req.header(ORIGIN, o);
        }
        req.send()
    };
    let no_token = post(vec![("action", "approve".into()), ("id", id.clone())], None)
        .await
        .unwrap();
    assert_eq!(no_token.status(), StatusCode::FORBIDDEN);
    let wrong = post(
        vec![
            ("action", "approve".into()),
            ("id", id.clone()),
            ("csrf", "0".repeat(64)),
        ],
        None,
    )
    .await
    .unwrap();
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    let foreign = post(
        vec![
            ("action", "approve".into()),
            ("id", id.clone()),
            ("csrf", csrf.clone()),
        ],
        Some("https://evil.example"),
    )
    .await
    .unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert!(
        db.store.list_mappings().await.unwrap().is_empty(),
        "a forged post decided"
    );
    let own = post(
        vec![
            ("action", "approve".into()),
            ("id", id),
            ("csrf", csrf),
            ("reason", "ok".into()),
        ],
        None,
    )
    .await
    .unwrap();
    assert_eq!(own.status(), StatusCode::SEE_OTHER);
    assert_eq!(db.store.list_mappings().await.unwrap().len(), 1);
}

pub async fn upstream_names_render_as_text(db: TestDb) {
    connection(&db.store, "bb").await;
    put(&db.store, &[project(1, "XSS", "<script>alert(1)</script>")]).await;
    refresh(&db.store).await;
    let srv = serve(&db).await;
    let cookie = srv.sign_in(&admin_key(&db, &["mappings"]).await).await;
    let html = srv.page(&cookie, "").await;
    assert!(!html.contains("<script>alert(1)</script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

pub async fn five_thousand_pending_are_paged_and_groups_decide(db: TestDb) {
    seeded(&db, 5000).await;
    let srv = serve(&db).await;
    let cookie = srv.sign_in(&admin_key(&db, &["mappings"]).await).await;
    let html = srv.page(&cookie, "?view=pending&page=49").await;
    assert!(html.contains("Page 50 of 50 (5000 in all)"), "pager");
    assert_eq!(html.matches("type=\"checkbox\"").count(), 100);
    // "Approve all in this group" decides the rows of the group on this page.
    let csrf = csrf_of(&html);
    let mut form: Vec<(String, String)> = vec![
        ("csrf".into(), csrf),
        ("action".into(), "approve-all:bitbucket:high".into()),
        ("reason".into(), "keys equal".into()),
    ];
    for p in db
        .store
        .list_proposals(&cmcp_registry::ProposalFilter {
            state: Some(cmcp_registry::ProposalState::Proposed),
            limit: 100,
            offset: 4900,
            ..Default::default()
        })
        .await
        .unwrap()
    {
        form.push(("g:bitbucket:high".into(), p.id.to_string()));
    }
    let resp = srv
        .http
        .post(format!("{}/admin/decide", srv.base))
        .header(COOKIE, &cookie)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert!(resp.headers()[LOCATION].to_str().unwrap().contains("msg="));
    assert_eq!(db.store.list_mappings().await.unwrap().len(), 100);
    let decided = srv.page(&cookie, "?view=decided").await;
    assert!(decided.contains("100 approved, 0 rejected"));
}

pub async fn connections_show_their_rate_budget(db: TestDb) {
    use cmcp_registry::{BudgetGrant, BudgetSettlement, BudgetTiming};

    connection(&db.store, "bb").await;
    connection(&db.store, "bb-unused").await;
    // Jira (and Drive) answer with no budget headers: a request settles
    // with nothing known, which is not "no request sent".
    db.store
        .create_connection(
            &cmcp_registry::testing::cipher(),
            cmcp_registry::NewConnection {
                id: "jira-acme".to_owned(),
                spec: cmcp_domain::ConnectionSpec {
                    platform: cmcp_domain::Platform::Jira,
                    scope: "acme.atlassian.net".to_owned(),
                    base_url: "https://acme.atlassian.net".to_owned(),
                },
                owner: cmcp_domain::Owner::Company,
                token: cmcp_domain::Token::new("basic:me@acme.example:t0ken"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
    // One request through the store's own protocol: reserve, then settle
    // with what the answer's headers said.
    let key = "bitbucket:fp-test:core";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let reset = 1_900_000_000_000; // 2030-03-17 17:46:40 UTC
    db.store.note_budget_user("bb", key).await.unwrap();
    assert_eq!(
        db.store
            .reserve_budget(key, 1, now, BudgetTiming::default())
            .await
            .unwrap(),
        BudgetGrant::Go
    );
    db.store
        .settle_budget(
            key,
            BudgetSettlement {
                remaining: Some(4211),
                reset_at: Some(reset),
                limit: Some(5000),
                paused_until: None,
                free: false,
            },
            now,
        )
        .await
        .unwrap();

    let jira_key = "jira:fp-test:rest";
    db.store
        .note_budget_user("jira-acme", jira_key)
        .await
        .unwrap();
    assert_eq!(
        db.store
            .reserve_budget(jira_key, 1, now, BudgetTiming::default())
            .await
            .unwrap(),
        BudgetGrant::Go
    );
    db.store
        .settle_budget(
            jira_key,
            BudgetSettlement {
                remaining: None,
                reset_at: None,
                limit: None,
                paused_until: None,
                free: false,
            },
            now,
        )
        .await
        .unwrap();

    let srv = serve(&db).await;
    let k = admin_key(&db, &["mappings", "connections"]).await;
    let html = srv.page(&srv.sign_in(&k).await, "").await;
    assert!(
        html.contains("4211/5000 left, resets at 2030-03-17 17:46:40 UTC"),
        "{html}"
    );
    assert_eq!(
        html.matches("not known yet (no request sent)").count(),
        1,
        "only the connection that sent nothing: {html}"
    );
    assert!(
        html.contains(
            "jira sends no budget figures (it paces requests with Retry-After); last request "
        ),
        "{html}"
    );
    assert!(!html.contains("unknown left"), "{html}");
    assert!(!html.contains("not reported"));

    let list: serde_json::Value = srv
        .http
        .get(format!("{}/v1/connections", srv.base))
        .bearer_auth(&k)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let item = |id: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["connection"]["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {list}"))
            .clone()
    };
    let b = &item("bb")["rate_budget"];
    assert_eq!(b["remaining"], 4211, "{list}");
    assert_eq!(b["request_limit"], 5000);
    assert_eq!(b["reset_at"], reset);
    assert!(item("bb-unused")["rate_budget"].is_null(), "{list}");
}
