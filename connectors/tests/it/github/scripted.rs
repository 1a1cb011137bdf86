//! Answers the simulator does not give, from a scripted server: the exact
//! request headers, secondary limits without `retry-after`, permission 403s,
//! foreign pagination links, 410 and undecodable 200s.

use std::time::{Duration, Instant};

use cmcp_connectors::{Connector, ConnectorError, GithubConnector, HttpConfig, ReadOutcome};
use cmcp_domain::{SpaceAddress, SpaceKind, Token};

use super::TOKEN;
use crate::support::{Answer, Scripted, fast_cfg, list};

const ORG: &str =
    r#"{"login":"acme","id":5,"node_id":"O_kgDOAAAABQ","html_url":"https://127.0.0.1/acme"}"#;
const REPOS: &str = r#"[{"id":42,"name":"x","full_name":"acme/x","owner":{"login":"acme","id":5},"html_url":"https://127.0.0.1/acme/x","private":false}]"#;

fn connector(server: &Scripted, cfg: HttpConfig) -> GithubConnector {
    GithubConnector::new(&server.base_url, "acme", Token::new(TOKEN), cfg).unwrap()
}

fn ok(body: &str) -> Answer {
    ("200 OK", Vec::new(), body.to_owned())
}

#[tokio::test]
async fn requests_carry_githubs_headers_and_a_bearer_token() {
    let server = Scripted::start(vec![(
        "404 Not Found",
        Vec::new(),
        r#"{"message":"Not Found"}"#.into(),
    )])
    .await;
    let c = connector(&server, fast_cfg());
    // The simulator's base URL implies the web host 127.0.0.1: no org read.
    let address = SpaceAddress::new(SpaceKind::GithubRepo, "127.0.0.1", "42").unwrap();
    assert_eq!(c.read(&address).await.unwrap(), ReadOutcome::Gone);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let head = requests[0].to_ascii_lowercase();
    assert!(
        head.starts_with("get /repositories/42 http/1.1\r\n"),
        "{head}"
    );
    for line in [
        format!("authorization: bearer {}\r\n", TOKEN.to_ascii_lowercase()),
        "accept: application/vnd.github+json\r\n".to_owned(),
        "x-github-api-version: 2022-11-28\r\n".to_owned(),
        "user-agent: cmcp-discovery/".to_owned(),
    ] {
        assert!(head.contains(&line), "missing {line:?} in {head}");
    }
}

#[tokio::test]
async fn a_secondary_limit_without_retry_after_waits_the_minimum() {
    let server = Scripted::start(vec![
        (
            "403 Forbidden",
            Vec::new(),
            r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#.into(),
        ),
        ok(ORG),
        ok("[]"),
    ])
    .await;
    let cfg = HttpConfig {
        secondary_limit_min_wait: Duration::from_millis(300),
        ..fast_cfg()
    };
    let started = Instant::now();
    let listed = list(&connector(&server, cfg)).await;
    let report = listed.result.expect("listing");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(report.complete);
    assert_eq!(report.figures.retries, 1);
    assert_eq!(report.figures.rate_limit_waits, 1);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_permission_403_is_permission_denied_and_not_retried() {
    let server = Scripted::start(vec![(
        "403 Forbidden",
        vec![("x-accepted-github-permissions", "metadata=read".into())],
        r#"{"message":"Resource not accessible by personal access token"}"#.into(),
    )])
    .await;
    match list(&connector(&server, fast_cfg())).await.result {
        Err(ConnectorError::PermissionDenied {
            detail,
            accepted_permissions,
            ..
        }) => {
            assert_eq!(detail, "Resource not accessible by personal access token");
            assert_eq!(accepted_permissions.as_deref(), Some("metadata=read"));
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_next_link_to_another_origin_is_not_followed() {
    let server = Scripted::start(vec![
        ok(ORG),
        (
            "200 OK",
            vec![(
                "link",
                "<http://evil.invalid/orgs/acme/repos?page=2>; rel=\"next\"".into(),
            )],
            REPOS.into(),
        ),
    ])
    .await;
    let listed = list(&connector(&server, fast_cfg())).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(!report.complete);
    assert!(
        report.failures[0].contains("refusing to follow pagination link http://evil.invalid/"),
        "{:?}",
        report.failures
    );
    assert_eq!(listed.records().len(), 2, "the org and the page read");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_410_is_gone() {
    let server = Scripted::start(vec![(
        "410 Gone",
        Vec::new(),
        r#"{"message":"Repository access blocked"}"#.into(),
    )])
    .await;
    let address = SpaceAddress::new(SpaceKind::GithubRepo, "127.0.0.1", "7").unwrap();
    let outcome = connector(&server, fast_cfg()).read(&address).await.unwrap();
    assert_eq!(outcome, ReadOutcome::Gone);
}

#[tokio::test]
async fn an_undecodable_200_is_retried() {
    let server = Scripted::start(vec![ok("<html>proxy error</html>"), ok(ORG), ok(REPOS)]).await;
    let listed = list(&connector(&server, fast_cfg())).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert_eq!(report.figures.retries, 1);
    assert_eq!(listed.records().len(), 2);
    assert_eq!(
        listed.records()[1].address.to_string(),
        "space:github-repo:127.0.0.1/42"
    );
}

#[tokio::test]
async fn an_undecodable_item_makes_the_listing_partial_but_keeps_the_rest() {
    let server = Scripted::start(vec![
        ok(ORG),
        ok(&format!(
            "[{}, {{\"name\": \"no-id\"}}]",
            REPOS.trim_start_matches('[').trim_end_matches(']')
        )),
    ])
    .await;
    let listed = list(&connector(&server, fast_cfg())).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(!report.complete);
    assert!(
        report.failures[0].starts_with("page 1: item 2:"),
        "{:?}",
        report.failures
    );
    assert_eq!(listed.records().len(), 2);
}
