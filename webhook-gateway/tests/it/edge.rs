//! The edge under slow, stalled and flooding clients, over real sockets
//! (`listen::serve` on `127.0.0.1:0`, raw TCP on the client side so a test
//! can stop half-way through a header or a body). Each behaviour runs on
//! SQLite and PostgreSQL. Timeouts are set short here; the defaults are in
//! `GatewayConfig::default`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cmcp_domain::Platform;
use cmcp_registry::Store;
use cmcp_registry::testing::{TestDb, cipher, company_connection};
use cmcp_webhook_gateway::verify::GITHUB_SIGNATURE_HEADER;
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, WebhookSecret, router, sign};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::fixture;

both_backends!(
    stalled_header_and_idle_connection_are_closed,
    trickled_body_is_cut_at_the_read_deadline,
    body_bytes_in_flight_past_the_cap_answer_503_at_once,
    requests_past_the_cap_answer_503_at_once,
    unknown_disabled_and_forged_answer_alike_before_the_body,
    held_and_rejected_connections_still_take_deliveries,
    media_types_the_platform_does_not_send_are_415,
);

/// Short bounds so the tests run in a second or two.
fn limits() -> GatewayConfig {
    GatewayConfig {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(600),
        request_timeout: Duration::from_secs(5),
        ..GatewayConfig::default()
    }
}

/// Serve the edge with `config` on a fresh port; a GitHub connection `gh`
/// exists. Returns the address and `gh`'s secret.
async fn serve(db: &TestDb, config: GatewayConfig) -> (SocketAddr, String) {
    crate::hooks::setup_queue(&db.store).await;
    let secret = company_connection(&db.store, "gh", Platform::Github).await;
    let app = router(EdgeState {
        store: db.store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(cipher(), config.clone())),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        cmcp_webhook_gateway::listen::serve(listener, app, &config, std::future::pending()).await
    });
    (addr, secret)
}

/// The head of a GitHub delivery to `path` declaring `length` body bytes.
fn head(path: &str, length: usize, extra: &[(&str, String)]) -> String {
    let mut h = format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         x-github-event: repository\r\nx-github-delivery: d-1\r\nx-github-hook-id: 1\r\n\
         content-length: {length}\r\n"
    );
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// Read until the peer closes or `within` passes: the bytes, and whether
/// it closed.
async fn read_until_close(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), false),
        }
    }
}

/// Read one response head (status line and headers).
async fn response_head(s: &mut TcpStream, within: Duration) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !got.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            got.push(byte[0]);
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    String::from_utf8_lossy(&got).into_owned()
}

fn status(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub async fn stalled_header_and_idle_connection_are_closed(db: TestDb) {
    let (addr, _) = serve(&db, limits()).await;
    // A header block that never ends.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /hooks/github/gh HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_close(&mut s, Duration::from_secs(5)).await;
    assert!(closed, "a stalled header block is closed");
    assert!(started.elapsed() < Duration::from_secs(3));
    // A kept-alive connection that goes quiet after one request.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (text, closed) = read_until_close(&mut s, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(closed, "an idle keep-alive connection is closed");
}

pub async fn trickled_body_is_cut_at_the_read_deadline(db: TestDb) {
    let (addr, _) = serve(&db, limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head("/hooks/github/gh", 10_000, &[]).as_bytes())
        .await
        .unwrap();
    // One byte every 100 ms: never a stall, never done.
    let started = Instant::now();
    let (mut rd, mut wr) = s.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if wr.write_all(b"{").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut got = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), rd.read(&mut got))
        .await
        .expect("answered before the trickle ends")
        .unwrap();
    let text = String::from_utf8_lossy(&got[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    trickle.abort();
    assert!(
        db.store.list_deliveries("gh").await.unwrap().is_empty(),
        "nothing stored"
    );
}

pub async fn body_bytes_in_flight_past_the_cap_answer_503_at_once(db: TestDb) {
    let config = GatewayConfig {
        max_inflight_body_bytes: 100_000,
        ..limits()
    };
    let (addr, secret) = serve(&db, config).await;
    // A delivery holding 80 KB of the budget while its body stalls.
    let mut holder = TcpStream::connect(addr).await.unwrap();
    holder
        .write_all(head("/hooks/github/gh", 80_000, &[]).as_bytes())
        .await
        .unwrap();
    holder.write_all(b"{").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut second = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    second
        .write_all(head("/hooks/github/gh", 80_000, &[]).as_bytes())
        .await
        .unwrap();
    let answer = response_head(&mut second, Duration::from_secs(2)).await;
    assert_eq!(status(&answer), 503, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_millis(500), "at once");
    // Once the holder is gone (its body timed out), the budget is back.
    let _ = read_until_close(&mut holder, Duration::from_secs(3)).await;
    drop(holder);
    let body = fixture("github", "webhook-repository-renamed.json");
    let signature = sign(&WebhookSecret::from(secret.as_str()), &body);
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(
            head(
                "/hooks/github/gh",
                body.len(),
                &[(GITHUB_SIGNATURE_HEADER, signature)],
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    third.write_all(&body).await.unwrap();
    let answer = response_head(&mut third, Duration::from_secs(3)).await;
    assert_eq!(status(&answer), 202, "{answer}");
}

pub async fn requests_past_the_cap_answer_503_at_once(db: TestDb) {
    let config = GatewayConfig {
        max_concurrent_requests: 2,
        ..limits()
    };
    let (addr, _) = serve(&db, config).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(head("/hooks/github/gh", 1_000, &[]).as_bytes())
            .await
            .unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = response_head(&mut third, Duration::from_secs(2)).await;
    assert_eq!(status(&answer), 503, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after"),
        "{answer}"
    );
}

/// An unknown connection, a disabled one and a forged signature: one
/// status, one body. The unknown and disabled ones are answered before a
/// body byte is sent (the client here never sends one).
pub async fn unknown_disabled_and_forged_answer_alike_before_the_body(db: TestDb) {
    let (addr, _) = serve(&db, limits()).await;
    company_connection(&db.store, "gh-off", Platform::Github).await;
    let disable = "UPDATE connections SET status = 'disabled' WHERE id = 'gh-off'";
    match &db.store {
        Store::Sqlite(p) => drop(sqlx::query(disable).execute(p).await.unwrap()),
        Store::Postgres(p) => drop(sqlx::query(disable).execute(p).await.unwrap()),
    }
    let mut answers = Vec::new();
    for path in ["/hooks/github/no-such-connection", "/hooks/github/gh-off"] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        s.write_all(head(path, 20_000_000, &[]).as_bytes())
            .await
            .unwrap();
        let (text, _) = read_until_close(&mut s, Duration::from_secs(2)).await;
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{path}: refused without waiting for the body"
        );
        answers.push(text);
    }
    let body = fixture("github", "webhook-repository-renamed.json");
    let forged = sign(&WebhookSecret::from("not the secret"), &body);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        head(
            "/hooks/github/gh",
            body.len(),
            &[
                (GITHUB_SIGNATURE_HEADER, forged),
                ("connection", "close".into()),
            ],
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    s.write_all(&body).await.unwrap();
    answers.push(read_until_close(&mut s, Duration::from_secs(2)).await.0);
    let comparable: Vec<(u16, &str)> = answers
        .iter()
        .map(|a| (status(a), a.rsplit("\r\n\r\n").next().unwrap_or("")))
        .collect();
    assert_eq!(comparable[0].0, 401, "{answers:?}");
    assert!(
        comparable.iter().all(|c| *c == comparable[0]),
        "{comparable:?}"
    );
}

pub async fn media_types_the_platform_does_not_send_are_415(db: TestDb) {
    let (addr, secret) = serve(&db, limits()).await;
    let body = br#"{"zen":"x"}"#;
    let signature = sign(&WebhookSecret::from(secret.as_str()), body);
    let h = head(
        "/hooks/github/gh",
        body.len(),
        &[(GITHUB_SIGNATURE_HEADER, signature)],
    )
    .replace("application/json", "text/plain");
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(h.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let answer = response_head(&mut s, Duration::from_secs(2)).await;
    assert_eq!(status(&answer), 415, "{answer}");
    assert!(db.store.list_deliveries("gh").await.unwrap().is_empty());
}

/// A held connection (the breaker) and one whose credential was refused
/// are still read: their signed deliveries are stored, as an enabled
/// connection's are. Only disabled and unlinked ones are refused.
pub async fn held_and_rejected_connections_still_take_deliveries(db: TestDb) {
    let (addr, secret) = serve(&db, limits()).await;
    for (n, state) in ["held", "rejected"].into_iter().enumerate() {
        let sql = format!("UPDATE connections SET status = '{state}' WHERE id = 'gh'");
        match &db.store {
            Store::Sqlite(p) => drop(
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(p)
                    .await
                    .unwrap(),
            ),
            Store::Postgres(p) => drop(
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(p)
                    .await
                    .unwrap(),
            ),
        }
        let body = format!(r#"{{"zen":"delivery {n}"}}"#).into_bytes();
        let signature = sign(&WebhookSecret::from(secret.as_str()), &body);
        let h = head(
            "/hooks/github/gh",
            body.len(),
            &[(GITHUB_SIGNATURE_HEADER, signature)],
        )
        .replace(
            "x-github-delivery: d-1",
            &format!("x-github-delivery: held-{n}"),
        );
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(h.as_bytes()).await.unwrap();
        s.write_all(&body).await.unwrap();
        let answer = response_head(&mut s, Duration::from_secs(2)).await;
        assert!(matches!(status(&answer), 200 | 202), "{state}: {answer}");
        assert_eq!(
            db.store.list_deliveries("gh").await.unwrap().len(),
            n + 1,
            "{state}"
        );
    }
}
