//! A person's `/me` page in a real headless Chromium (the driver of
//! `browser.rs`): alice signs in with her member key, sees her linked
//! account with its risk, her private spaces with upstream names shown as
//! text, and accepts a suggestion; the page has the screen's headers, a
//! forged or token-less POST is refused, and neither realm's session opens
//! the other.

use cmcp_admin::create_key_for;
use cmcp_domain::{Owner, RiskCode, RiskNotice};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SuggestionKind, SuggestionState};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, ORIGIN};
use serde_json::Value;

use crate::browser::{start, tools};
use crate::screen::{admin_key, serve};
use crate::support::repo;

both_backends!(a_person_accepts_a_suggestion_on_their_page_in_a_real_browser,);

const XSS: &str = "<img src=x onerror=alert(1)>";

pub async fn a_person_accepts_a_suggestion_on_their_page_in_a_real_browser(db: TestDb) {
    let Some((driver_bin, browser_bin)) = tools() else {
        return;
    };
    crate::suggestions::seed(&db.store).await;
    let alice = Owner::Person("alice".into());
    let hostile = repo(
        4,
        &crate::support::project(1, "PAY", "Payments"),
        XSS,
        "git@bitbucket.org:alice/x.git",
    );
    db.store
        .apply_page(
            "bb-alice",
            &alice,
            &[cmcp_domain::SpaceRecord {
                container: None,
                ..hostile
            }],
        )
        .await
        .unwrap();
    let risk = "token reports write permissions on 1 repository (alice/x: push)";
    db.store
        .set_connection_risks(
            "bb-alice",
            &[RiskNotice {
                code: RiskCode::WriteScope,
                message: risk.to_owned(),
            }],
        )
        .await
        .unwrap();
    let suggestion = db.store.list_suggestions("alice").await.unwrap()[0].clone();
    assert_eq!(suggestion.kind, SuggestionKind::RequestToJoin);
    let member = create_key_for(&db.store, "alice", "member", &[], Some("alice"), "test")
        .await
        .unwrap()
        .1;

    let srv = serve(&db).await;
    // The screen's headers, before anyone signs in.
    let r = srv
        .http
        .get(format!("{}/me", srv.base))
        .send()
        .await
        .unwrap();
    let h = r.headers();
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    // An admin key is no member key.
    let admin = admin_key(&db, &["mappings"]).await;
    let r = srv
        .http
        .post(format!("{}/me/sign-in", srv.base))
        .form(&[("key", admin.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    let d = start(&driver_bin, &browser_bin).await;
    d.go(&format!("{}/me", srv.base)).await;
    d.type_in("input[name=key]", &member).await;
    d.click("#sign-in").await;
    let shown = d.text("tr[data-account=\"bb-alice\"] td.risks").await;
    assert_eq!(shown, risk);
    let hostile_at = "space:bitbucket-repo:acme/r-4";
    let name = d.text(&format!("tr[data-space=\"{hostile_at}\"] td")).await;
    assert!(name.starts_with(XSS), "the name is shown as text: {name}");
    let alert = d
        .cmd(reqwest::Method::GET, "/alert/text", Value::Null)
        .await;
    assert_eq!(alert["error"], "no such alert", "a script ran: {alert}");
    let row = format!("tr[data-suggestion=\"{}\"]", suggestion.id);
    assert!(d.text(&row).await.contains("Payments"));

    // A forged cross-site POST, and one without the token, are refused.
    let sid = d.cookie("cmcp_me").await;
    let plain = reqwest::Client::new();
    let id = suggestion.id.to_string();
    let forged = plain
        .post(format!("{}/me/decide", srv.base))
        .header(COOKIE, format!("cmcp_me={sid}"))
        .header(ORIGIN, "https://attacker.example")
        .form(&[("id", id.as_str()), ("decision", "decline")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let tokenless = plain
        .post(format!("{}/me/decide", srv.base))
        .header(COOKIE, format!("cmcp_me={sid}"))
        .form(&[("id", id.as_str()), ("decision", "decline")])
        .send()
        .await
        .unwrap();
    assert_eq!(tokenless.status(), StatusCode::FORBIDDEN);
    // The member's session is no admin session.
    let admin_page = plain
        .get(format!("{}/admin", srv.base))
        .header(COOKIE, format!("cmcp_admin={sid}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(admin_page.contains("Admin key"), "{admin_page}");
    assert_eq!(
        db.store.list_suggestions("alice").await.unwrap()[0].state,
        SuggestionState::Open
    );

    d.click(&format!("#accept-{}", suggestion.id)).await;
    assert!(
        d.text(".msg").await.contains("accepted"),
        "the page says so"
    );
    let after = &db.store.list_suggestions("alice").await.unwrap()[0];
    assert_eq!(after.state, SuggestionState::Accepted);
    assert_eq!(
        db.store.list_requests().await.unwrap().len(),
        1,
        "the join request reaches the ADMINs"
    );
    let audit = db.store.list_audit(20).await.unwrap();
    assert!(audit.iter().any(|e| e.action == "suggestion.request-join"));
}
