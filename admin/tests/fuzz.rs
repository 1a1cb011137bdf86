//! Fuzzing the `/admin` screen's forms on stable Rust: the sign-in,
//! sign-out, decision (one by one and a whole group) and connection forms,
//! the paging and view parameters, and the cookie and Origin headers, sent
//! through the real router over a migrated SQLite store with a signed-in
//! ADMIN. Inputs are any bytes and real forms with fields dropped,
//! doubled, replaced or cut. None may panic or answer 5xx; a refusal is a
//! 4xx page that says why; a redirect never leaves `/admin`.
//!
//! Inputs per target: `PROPTEST_CASES=N` (256 by default), or
//! `CMCP_FUZZ_SECONDS=S` for as long as S seconds per target (see
//! `cmcp_registry::testing::fuzz`). `.ci/run` runs a short pass; a long
//! one is `PROPTEST_CASES=10000000 cargo test --release -p cmcp-admin --test fuzz -- --nocapture`.

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use cmcp_admin::session::{COOKIE_NAME, csrf_for};
use cmcp_admin::{AdminState, create_key};
use cmcp_registry::testing::TestDb;
use cmcp_registry::testing::fuzz::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tower::ServiceExt;

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

/// A store with proposals, an ADMIN's session and another ADMIN key to
/// sign in with, and the router.
struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
    key: String,
    cookie: String,
    csrf: String,
    proposals: Vec<i64>,
    _db: TestDb,
}

/// The fixture the fuzz targets share.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(new_fixture)
}

/// A fixture of its own, for a test that needs known state.
fn own_fixture() -> &'static Fixture {
    Box::leak(Box::new(new_fixture()))
}

fn new_fixture() -> Fixture {
    {
        // The targets run on several test threads at once, each blocking on
        // this runtime.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (db, key, sid, proposals) = rt.block_on(async {
            let db = TestDb::sqlite().await;
            let store = &db.store;
            support::connection(store, "bb").await;
            let pay = support::project(1, "PAY", "Payments");
            let ops = support::project(2, "OPS", "Operations");
            support::put(store, &[pay.clone(), ops.clone()]).await;
            store
                .put_places(
                    &[
                        support::place("payments", "Payments", Some("PAY")),
                        support::place("operations", "Operations", Some("OPS")),
                    ],
                    "fuzz",
                )
                .await
                .unwrap();
            support::refresh(store).await;
            let proposals = support::proposals(store, "proposed")
                .await
                .iter()
                .map(|p| p.id)
                .collect();
            let powers = ["mappings".to_owned(), "connections".to_owned()];
            let (row, _) = create_key(store, "fuzz", "admin", &powers, "fuzz")
                .await
                .unwrap();
            let sid = cmcp_admin::session::start(store, &row.id).await.unwrap();
            // The sign-in form carries another key: its sessions, capped
            // per key, never end the one every other form is sent with.
            let (_, key) = create_key(store, "fuzz-sign-in", "admin", &powers, "fuzz")
                .await
                .unwrap();
            (db, key, sid, proposals)
        });
        let app = cmcp_admin::router(AdminState::new(db.store.clone()));
        Fixture {
            rt,
            app,
            key,
            cookie: format!("{COOKIE_NAME}={sid}"),
            csrf: csrf_for(&sid),
            proposals,
            _db: db,
        }
    }
}

/// One request to the screen.
#[derive(Debug, Clone)]
struct Ask {
    post: Option<&'static str>,
    query: Vec<u8>,
    body: Vec<u8>,
    signed_in: bool,
    cookie: Option<Vec<u8>>,
    origin: Option<Vec<u8>>,
}

/// Send it; check what every answer must be.
fn answer(ask: &Ask) -> Result<(StatusCode, String), TestCaseError> {
    answer_on(fixture(), ask)
}

fn answer_on(fx: &Fixture, ask: &Ask) -> Result<(StatusCode, String), TestCaseError> {
    let path = ask.post.unwrap_or("/admin");
    let uri = match ask.query.is_empty() {
        true => path.to_owned(),
        false => format!("{path}?{}", escape_uri(&ask.query)),
    };
    let mut req = Request::builder()
        .method(if ask.post.is_some() { "POST" } else { "GET" })
        .uri(uri)
        .header(header::HOST, "admin.example")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if ask.signed_in {
        req = req.header(header::COOKIE, &fx.cookie);
    }
    if let Some(c) = ask.cookie.as_deref()
        && let Ok(v) = header::HeaderValue::from_bytes(c)
    {
        req = req.header(header::COOKIE, v);
    }
    if let Some(o) = ask.origin.as_deref()
        && let Ok(v) = header::HeaderValue::from_bytes(o)
    {
        req = req.header(header::ORIGIN, v);
    }
    let req = req.body(Body::from(ask.body.clone())).unwrap();
    let (status, location, text) = fx.rt.block_on(async {
        let resp = fx.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let location = (
            resp.headers()
                .get(header::LOCATION)
                .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned()),
            format!("{:?}", resp.headers()),
        );
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            location,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    });
    prop_assert!(
        !status.is_server_error(),
        "{} answered {status}: {text}",
        path
    );
    if status.is_client_error() {
        prop_assert!(
            text.trim().len() > 10,
            "a refusal says why: {status} {text:?}"
        );
    }
    if status.is_redirection() {
        let (to, all) = location;
        prop_assert!(
            to.as_deref()
                .is_some_and(|to| to == "/admin" || to.starts_with("/admin?")),
            "a redirect left /admin: {status} {all}"
        );
    }
    Ok((status, text))
}

/// Keep the URI parseable: the query's bytes as a browser sends them,
/// percent-encoding all but what a query holds as it is (`%` too stays, so
/// broken escapes reach the parser).
fn escape_uri(q: &[u8]) -> String {
    q.iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            b'-' | b'.' | b'_' | b'~' | b'=' | b'&' | b'%' | b'+' | b';' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const POSTS: [&str; 4] = [
    "/admin/sign-in",
    "/admin/sign-out",
    "/admin/decide",
    "/admin/connection",
];

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn noise() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[ -~]{0,40}",
        ".{0,40}",
        any::<i64>().prop_map(|n| n.to_string()),
        Just("9223372036854775808".to_owned()),
        Just("-1".to_owned()),
        Just("//evil.example/admin?".to_owned()),
        Just("/admin?view=pending&x=".to_owned()),
    ]
}

/// A real form the screen renders, as `(name, value)` pairs.
fn real_form(fx: &Fixture, which: u8, id: usize) -> (&'static str, Vec<(String, String)>) {
    let pid = fx.proposals[id % fx.proposals.len()].to_string();
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    match which % 4 {
        0 => ("/admin/sign-in", vec![pair("key", &fx.key)]),
        1 => (
            "/admin/decide",
            vec![
                pair("csrf", &fx.csrf),
                pair("back", "/admin?view=pending&page=0"),
                pair("reason", "fuzz"),
                pair("id", &pid),
                pair("action", ["approve", "reject", "undo"][id % 3]),
            ],
        ),
        2 => (
            "/admin/decide",
            vec![
                pair("csrf", &fx.csrf),
                pair("g:bitbucket:high", &pid),
                pair("reason", "fuzz"),
                pair("action", "approve-all:bitbucket:high"),
            ],
        ),
        _ => (
            "/admin/connection",
            vec![
                pair("csrf", &fx.csrf),
                pair("id", "bb"),
                pair("status", ["enabled", "disabled", "unlinked"][id % 3]),
                pair("reason", "fuzz"),
            ],
        ),
    }
}

/// How a real form is broken.
#[derive(Debug, Clone)]
enum Mutation {
    Drop(usize),
    Double(usize),
    Replace(usize, String),
    Rename(usize, String),
    Cut(usize),
    Flip(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Drop),
        any::<usize>().prop_map(Mutation::Double),
        (any::<usize>(), noise()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        (any::<usize>(), noise()).prop_map(|(i, v)| Mutation::Rename(i, v)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
    ]
}

fn encode(pairs: &[(String, String)]) -> Vec<u8> {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
        .into_bytes()
}

fn mutate(mut pairs: Vec<(String, String)>, ms: &[Mutation]) -> Vec<u8> {
    let mut raw_edits = Vec::new();
    for m in ms {
        let n = pairs.len().max(1);
        match m {
            Mutation::Drop(i) if !pairs.is_empty() => {
                pairs.remove(i % n);
            }
            Mutation::Double(i) if !pairs.is_empty() => {
                let p = pairs[i % n].clone();
                pairs.push(p);
            }
            Mutation::Replace(i, v) if !pairs.is_empty() => pairs[i % n].1 = v.clone(),
            Mutation::Rename(i, k) if !pairs.is_empty() => pairs[i % n].0 = k.clone(),
            other => raw_edits.push(other.clone()),
        }
    }
    let mut body = encode(&pairs);
    for m in raw_edits {
        let n = body.len().max(1);
        match m {
            Mutation::Cut(i) => body.truncate(i % n),
            Mutation::Flip(i, b) if !body.is_empty() => body[i % n] ^= b,
            _ => {}
        }
    }
    body
}

#[test]
fn any_bytes_to_any_form_are_refused_clearly() {
    let strategy = (
        prop::sample::select(POSTS.to_vec()),
        bytes(600),
        any::<bool>(),
        prop::option::of(prop_oneof![
            Just(b"https://admin.example".to_vec()),
            Just(b"https://evil.example".to_vec()),
            bytes(40)
        ]),
    );
    fuzz(
        "admin_forms_any_bytes",
        strategy,
        |(post, body, signed_in, origin)| {
            answer(&Ask {
                post: Some(post),
                query: Vec::new(),
                body,
                signed_in,
                cookie: None,
                origin,
            })?;
            Ok(())
        },
    );
}

#[test]
fn mutated_real_forms_are_done_or_refused_clearly() {
    let strategy = (
        any::<u8>(),
        any::<usize>(),
        prop::collection::vec(mutation(), 0..4),
    );
    fuzz("admin_forms_mutated", strategy, |(which, id, ms)| {
        let fx = fixture();
        let (post, pairs) = real_form(fx, which, id);
        let untouched = ms.is_empty();
        let (status, _) = answer(&Ask {
            post: Some(post),
            query: Vec::new(),
            body: mutate(pairs, &ms),
            signed_in: true,
            cookie: None,
            origin: Some(b"https://admin.example".to_vec()),
        })?;
        // The untouched sign-in form is a live admin key: it signs in.
        if untouched && post == "/admin/sign-in" {
            prop_assert_eq!(status, StatusCode::SEE_OTHER);
        }
        Ok(())
    });
}

#[test]
fn any_paging_and_view_parameters_render_or_are_refused() {
    let pairs = prop::collection::vec(
        (
            prop_oneof![
                Just("view".to_owned()),
                Just("page".to_owned()),
                Just("msg".to_owned()),
                "[a-z]{0,6}",
            ],
            prop_oneof![
                Just("pending".to_owned()),
                Just("decided".to_owned()),
                Just("connections".to_owned()),
                noise(),
            ],
        ),
        0..5,
    )
    .prop_map(|p| encode(&p));
    let query = prop_oneof![pairs, bytes(200)];
    fuzz(
        "admin_paging_params",
        (query, any::<bool>()),
        |(query, signed_in)| {
            let (status, text) = answer(&Ask {
                post: None,
                query,
                body: Vec::new(),
                signed_in,
                cookie: None,
                origin: None,
            })?;
            if status == StatusCode::OK && signed_in {
                prop_assert!(text.contains("</html>"), "a whole page: {text}");
            }
            Ok(())
        },
    );
}

#[test]
fn any_cookie_and_origin_headers_are_refused_clearly() {
    let cookie = prop_oneof![
        bytes(120),
        ".{0,60}".prop_map(|v| format!("{COOKIE_NAME}={v}").into_bytes()),
        ".{0,60}".prop_map(|v| format!("a=b; {COOKIE_NAME}={v}; {COOKIE_NAME}=").into_bytes()),
    ];
    let strategy = (
        prop::option::of(prop::sample::select(POSTS.to_vec())),
        cookie,
        prop::option::of(bytes(60)),
    );
    fuzz("admin_cookie_origin", strategy, |(post, cookie, origin)| {
        answer(&Ask {
            post,
            query: Vec::new(),
            body: b"csrf=x&action=approve&id=1&reason=r".to_vec(),
            signed_in: false,
            cookie: Some(cookie),
            origin,
        })?;
        Ok(())
    });
}

/// The forms the mutations start from are the screen's own and work as
/// they are, so the mutations reach past the session and CSRF checks, also
/// after more sign-ins than a key keeps sessions (the fuzzed sign-in form
/// must not end the session the other forms are sent with).
#[test]
fn the_real_forms_work_before_they_are_mutated() {
    let fx = own_fixture();
    let sign_ins = usize::try_from(cmcp_registry::SESSIONS_PER_KEY).unwrap() + 5;
    for which in std::iter::repeat_n(0u8, sign_ins).chain(0..4u8) {
        let (post, pairs) = real_form(fx, which, usize::from(which));
        let ask = Ask {
            post: Some(post),
            query: Vec::new(),
            body: encode(&pairs),
            signed_in: true,
            cookie: None,
            origin: Some(b"https://admin.example".to_vec()),
        };
        let (status, text) = answer_on(fx, &ask).unwrap();
        assert_eq!(status, StatusCode::SEE_OTHER, "{post} {which}: {text}");
    }
    let screen = Ask {
        post: None,
        query: Vec::new(),
        body: Vec::new(),
        signed_in: true,
        cookie: None,
        origin: None,
    };
    let (status, text) = answer_on(fx, &screen).unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("Sign out"), "still signed in: {text}");
}

/// Found by `admin_forms_mutated`: a `back` field with a control character
/// made the redirect's Location invalid, so the screen answered a 303 with
/// no Location. Such a `back` is ignored now.
#[test]
fn a_back_link_no_header_can_carry_is_ignored() {
    let fx = own_fixture();
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let form = vec![
        pair("csrf", &fx.csrf),
        pair("back", "/admin?view=pe\u{14}nding"),
        pair("id", "bb"),
        pair("status", "enabled"),
    ];
    let ask = Ask {
        post: Some("/admin/connection"),
        query: Vec::new(),
        body: encode(&form),
        signed_in: true,
        cookie: None,
        origin: None,
    };
    let (status, text) = answer_on(fx, &ask).unwrap();
    assert_eq!(status, StatusCode::SEE_OTHER, "{text}");
}
