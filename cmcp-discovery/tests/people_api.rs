//! `POST /v1/people/{person}/github` on a running `serve`: the token is
//! checked against a simulated GitHub, a write-capable one is linked with
//! its risk, the first sync is queued and run by serve's own worker, and
//! only the person (or a service naming them) may link, list or unlink;
//! each linking answer fits the OpenAPI document serve publishes.

use std::path::Path;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

mod support;

use support::{binary, cli};

/// A member key of `person`, made with the CLI.
fn member_key(dir: &Path, person: &str) -> String {
    let out = cli(
        dir,
        &[
            "keys", "create", "--role", "member", "--name", person, "--person", person,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("key (shown once, keep it safe): "))
        .expect("a key line")
        .trim()
        .to_owned()
}

struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_links_their_github_over_the_api_and_serve_syncs_it() {
    cmcp_tests::init_tls();
    let sim = cmcp_fixtures::GithubSim::start(cmcp_fixtures::GithubSimConfig {
        repos: 2,
        token: Some(cmcp_tests::TOKEN.to_owned()),
        ..cmcp_fixtures::GithubSimConfig::default()
    })
    .await
    .unwrap();
    let alice_token = "ghp_aliceApiTokenThatMustNeverLeak00001";
    sim.add_user("alice", 7_001, alice_token, Some("repo"));
    sim.create_user_repo("alice", "notes", true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fast.toml"),
        "[queue]\npoll_interval = \"100ms\"\n",
    )
    .unwrap();
    // Migrate (and make the key file) before serve and the CLI share it.
    let path = dir.path().to_owned();
    let (alice, bob) = tokio::task::spawn_blocking(move || {
        assert!(cli(&path, &["migrate"]).status.success());
        (member_key(&path, "alice"), member_key(&path, "bob"))
    })
    .await
    .unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let _serve = Serve(
        binary(
            dir.path(),
            &[
                "--config",
                "fast.toml",
                "serve",
                "--listen",
                &addr.to_string(),
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start serve"),
    );
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let ready = cmcp_tests::eventually("serve answers", || async {
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    });
    ready.await;

    let link = |key: Option<&str>, token: &str| {
        let mut req = http
            .post(format!("{base}/v1/people/alice/github"))
            .json(&json!({"token": token, "base_url": sim.base_url()}));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    // Every linking answer is held to the document serve publishes.
    let doc: Value = http
        .get(format!("{base}/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let contract = cmcp_admin::testing::Contract::new(doc);
    let answer = |r: reqwest::Response| async {
        let status = r.status();
        let text = r.text().await.unwrap();
        let broken = contract.check(
            &reqwest::Method::POST,
            "/v1/people/alice/github",
            status.as_u16(),
            text.as_bytes(),
        );
        assert!(broken.is_empty(), "{broken:?}");
        (status, text)
    };
    let (status, _) = answer(link(None, alice_token).await.unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = answer(link(Some(&bob), alice_token).await.unwrap()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "bob may not link for alice");
    let (status, text) = answer(link(Some(&alice), "ghp_notAKnownToken").await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(!text.contains("ghp_notAKnownToken"), "{text}");

    let (status, text) = answer(link(Some(&alice), alice_token).await.unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    assert!(!text.contains(alice_token), "{text}");
    let linked: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(linked["login"], "alice");
    assert_eq!(linked["risks"][0]["code"], "write-scope", "{linked}");
    let connection = linked["connection_id"].as_str().unwrap().to_owned();

    // serve's worker runs the queued first sync: alice's repo shows in her
    // manifest.
    let manifest = format!("{base}/v1/people/alice/manifest");
    cmcp_tests::eventually_within("the first sync ran", Duration::from_secs(60), || async {
        let r = http.get(&manifest).bearer_auth(&alice).send().await.ok()?;
        let text = r.text().await.ok()?;
        text.contains("alice/notes").then_some(())
    })
    .await;

    let accounts = format!("{base}/v1/people/alice/accounts");
    let r = http.get(&accounts).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = http
        .get(&accounts)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    let list: Value = r.json().await.unwrap();
    assert_eq!(list[0]["connection_id"], connection.as_str(), "{list}");

    let unlink = format!("{base}/v1/people/alice/accounts/{connection}");
    let r = http
        .delete(&unlink)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let gone: Value = r.json().await.unwrap();
    assert_eq!(gone["spaces_tombstoned"], 1, "{gone}");
    let r = http
        .delete(&unlink)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = http
        .get(&accounts)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap(), json!([]));
}
