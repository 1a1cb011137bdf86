//! A GitHub Enterprise Server reached by another name than people browse it
//! under: its API answers on `127.0.0.1`, its `html_url` and `clone_url`
//! name `ghe.acme.test`. The connection's tenant comes from its
//! configuration (the base URL and its web host setting), so a sync and a
//! repository webhook's re-read build the same addresses; a connection that
//! was not told the web host refuses what it reads instead of inventing a
//! tenant from it; and nothing but `https://api.github.com` can claim
//! `github.com`.

use std::time::Duration;

use cmcp_domain::RunTrigger;
use cmcp_domain::{
    AliasKind, ConnectionSpec, Owner, Platform, RunOutcome, SpaceAddress, SpaceKind, SpaceStatus,
    Token,
};
use cmcp_fixtures::{GithubSim, GithubSimConfig, WebhookTarget};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{DeliveryStatus, NewConnection, SpaceFilter, Store};
use cmcp_tests::{TOKEN, cipher, fast_http, init_tls, serve_gateway, start_worker, sync_context};
use cmcp_worker::{SyncOutcome, run_sync};

both_backends!(
    ghes_with_its_own_web_host_syncs_and_takes_repository_webhooks,
    ghes_without_its_web_host_refuses_its_records,
    no_base_url_but_api_github_com_claims_github_com,
);

const GHES: &str = "ghes-acme";
const WEB_HOST: &str = "ghe.acme.test";
const LIMIT: Duration = Duration::from_secs(60);

async fn ghes_sim(repos: usize) -> GithubSim {
    init_tls();
    GithubSim::start(GithubSimConfig {
        repos,
        path_prefix: "/api/v3".into(),
        web_host: Some(WEB_HOST.into()),
        token: Some(TOKEN.into()),
        ..GithubSimConfig::default()
    })
    .await
    .expect("simulated GHES")
}

async fn add(store: &Store, id: &str, base_url: &str, settings: serde_json::Value) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "acme".to_owned(),
                    base_url: base_url.to_owned(),
                },
                owner: Owner::Company,
                token: Token::new(TOKEN),
                settings,
            },
            "test",
        )
        .await
        .expect("add connection");
}

fn repo(host: &str, id: u64) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubRepo, host, &id.to_string()).unwrap()
}

async fn active_repos(store: &Store) -> Vec<SpaceAddress> {
    store
        .list_spaces(&SpaceFilter {
            status: Some(SpaceStatus::Active),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.address.kind() == SpaceKind::GithubRepo)
        .map(|s| s.address)
        .collect()
}

async fn active_name(store: &Store, address: &SpaceAddress) -> Option<String> {
    store
        .alias_history(address)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.is_active() && a.kind == AliasKind::Name)
        .map(|a| a.raw)
}

async fn ghes_with_its_own_web_host_syncs_and_takes_repository_webhooks(db: TestDb) {
    cmcp_worker::queue::setup(&db.store).await.unwrap();
    let sim = ghes_sim(12).await;
    assert!(sim.base_url().starts_with("http://127.0.0.1:"));
    add(
        &db.store,
        GHES,
        &sim.base_url(),
        serde_json::json!({ "web_host": WEB_HOST }),
    )
    .await;
    let ctx = sync_context(&db.store, fast_http());

    let outcome = run_sync(&ctx, GHES, RunTrigger::Test).await.unwrap();
    assert_eq!(
        outcome.run_outcome(),
        Some(RunOutcome::Complete),
        "{outcome:?}"
    );
    let mut want: Vec<SpaceAddress> = sim.repos().iter().map(|r| repo(WEB_HOST, r.id)).collect();
    want.sort();
    let mut got = active_repos(&db.store).await;
    got.sort();
    assert_eq!(got, want, "every repo in the configured tenant {WEB_HOST}");
    let org = SpaceAddress::new(SpaceKind::GithubOrg, WEB_HOST, &sim.org_id().to_string()).unwrap();
    assert!(db.store.get_space(&org).await.unwrap().is_some());

    // A repository webhook through the gateway: its re-read by id lands on
    // the same address the sync wrote.
    let secret = db
        .store
        .current_webhook_secret(&cipher(), GHES)
        .await
        .unwrap();
    let (base, gateway) = serve_gateway(&db.store).await;
    let worker = start_worker(&db.store, &ctx);
    sim.set_webhook(Some(WebhookTarget {
        url: format!("{base}/hooks/github/{GHES}"),
        secret: secret.expose().to_owned(),
        hook_id: 91,
    }));
    let id = sim.repos()[4].id;
    sim.rename_repo(id, "renamed-on-ghes");
    let address = repo(WEB_HOST, id);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let rows = db.store.list_deliveries(GHES).await.unwrap();
        if let Some(failed) = rows.iter().find(|r| r.status == DeliveryStatus::Failed) {
            panic!("the delivery failed: {failed:?}");
        }
        if rows.len() == 1 && rows[0].status == DeliveryStatus::Processed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivery not processed: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        active_name(&db.store, &address).await.as_deref(),
        Some("renamed-on-ghes")
    );
    assert_eq!(
        active_repos(&db.store).await.len(),
        12,
        "the re-read wrote no second space"
    );
    let found = db
        .store
        .resolve(&format!("git@{WEB_HOST}:acme/renamed-on-ghes.git"))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].space.address, address);
    worker.stop().await;
    gateway.abort();
}

async fn ghes_without_its_web_host_refuses_its_records(db: TestDb) {
    let sim = ghes_sim(3).await;
    add(&db.store, GHES, &sim.base_url(), serde_json::json!({})).await;
    let ctx = sync_context(&db.store, fast_http());
    let outcome = run_sync(&ctx, GHES, RunTrigger::Test).await.unwrap();
    let SyncOutcome::Failed { why, intent, .. } = &outcome else {
        panic!("expected a failed run: {outcome:?}");
    };
    assert!(
        why.contains(WEB_HOST) && why.contains("127.0.0.1") && why.contains("web host"),
        "the error says which host answered and what to configure: {why}"
    );
    assert!(
        intent.is_permanent(),
        "only configuration fixes it: {intent:?}"
    );
    assert!(
        active_repos(&db.store).await.is_empty(),
        "no space was written outside the tenant"
    );
}

async fn no_base_url_but_api_github_com_claims_github_com(db: TestDb) {
    let sim = GithubSim::start(GithubSimConfig {
        repos: 2,
        web_host: Some("github.com".into()),
        token: Some(TOKEN.into()),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    add(
        &db.store,
        GHES,
        &sim.base_url(),
        serde_json::json!({ "web_host": "github.com" }),
    )
    .await;
    let ctx = sync_context(&db.store, fast_http());
    let outcome = run_sync(&ctx, GHES, RunTrigger::Test).await.unwrap();
    let SyncOutcome::Failed { why, intent, .. } = &outcome else {
        panic!("a simulator claiming github.com must fail: {outcome:?}");
    };
    assert!(why.contains("github.com"), "{why}");
    assert!(intent.is_permanent(), "{intent:?}");
    // Without the setting, the answers' github.com URLs are outside the
    // tenant the base URL gives (127.0.0.1): refused, not adopted.
    add(&db.store, "plain", &sim.base_url(), serde_json::json!({})).await;
    let outcome = run_sync(&ctx, "plain", RunTrigger::Test).await.unwrap();
    assert_eq!(
        outcome.run_outcome(),
        Some(RunOutcome::Failed),
        "{outcome:?}"
    );
    assert!(active_repos(&db.store).await.is_empty());
    assert!(
        db.store
            .list_spaces(&SpaceFilter::default())
            .await
            .unwrap()
            .iter()
            .all(|s| s.address.tenant() != "github.com"),
        "nothing claims github.com"
    );
}
