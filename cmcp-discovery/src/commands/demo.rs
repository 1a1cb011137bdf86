//! `demo`: the whole slice offline. A simulated GitHub org on loopback, a
//! connection to it, a sync through the real queue and worker, a rename
//! upstream, a second sync, and what the registry made of it. The SQLite
//! file stays, so `spaces list` and `spaces resolve` work afterwards.

use std::time::Duration;

use anyhow::{Context, Result};
use cmcp_domain::{ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, Token};
use cmcp_fixtures::{Faults, GithubSim, GithubSimConfig};
use cmcp_registry::{NewConnection, RegistryError};

use super::spaces::print_history;
use super::sync::{print_run, sync_and_wait};
use crate::app::App;
use crate::config::Config;

const CONNECTION: &str = "demo-github";
/// The simulator checks it like GitHub would; it is not a real credential.
const DEMO_TOKEN: &str = "ghp_demoTokenForTheSimulatedUpstream0001";

pub async fn run(mut cfg: Config, repos: usize) -> Result<()> {
    // Quick retries against the simulator's injected faults.
    cfg.http.backoff_min = Duration::from_millis(50);
    cfg.http.backoff_max = Duration::from_millis(500);
    cfg.queue.poll_interval = Duration::from_millis(200);
    let app = App::open(cfg).await?;

    let sim = GithubSim::start(GithubSimConfig {
        org: "acme".to_owned(),
        repos,
        token: Some(DEMO_TOKEN.to_owned()),
        oauth_scopes: Some("repo, read:org".to_owned()),
        latency: Duration::from_millis(10),
        faults: Faults {
            server_error: 0.05,
            drop_connection: 0.03,
            rate_limited_429: 0.03,
            ..Faults::default()
        },
        ..GithubSimConfig::default()
    })
    .await
    .context("cannot start the simulated upstream on loopback")?;
    let per_page = 10u32;
    let mut app = app;
    app.cfg.http.per_page = per_page;
    println!(
        "== simulated GitHub org 'acme' with {repos} repos at {} (5% 5xx, 3% dropped connections, 3% 429s)",
        sim.base_url()
    );

    let token = Token::new(DEMO_TOKEN);
    match app.store.get_connection(CONNECTION).await {
        Ok(_) => {
            app.store
                .update_connection_endpoint(
                    &app.cipher,
                    CONNECTION,
                    &sim.base_url(),
                    &token,
                    "demo",
                )
                .await?;
        }
        Err(RegistryError::NotFound { .. }) => {
            app.store
                .create_connection(
                    &app.cipher,
                    NewConnection {
                        id: CONNECTION.to_owned(),
                        spec: ConnectionSpec {
                            platform: Platform::Github,
                            scope: "acme".to_owned(),
                            base_url: sim.base_url(),
                        },
                        owner: Owner::Company,
                        token,
                        settings: serde_json::json!({}),
                    },
                    "demo",
                )
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    println!(
        "== connection {CONNECTION} (token sealed in {})",
        app.cfg.database_url()
    );

    println!("\n== first sync, through the queue and a worker ({per_page} repos per page)");
    queue_and_wait(&app).await?;
    let conn = app.store.get_connection(CONNECTION).await?;
    for risk in &conn.risks {
        println!("  RISK [{}] {}", risk.code, risk.message);
    }

    let victim = sim
        .repos()
        .get(2)
        .cloned()
        .context("the simulated org needs at least 3 repos")?;
    let new_name = "payments-api";
    sim.rename_repo(victim.id, new_name);
    println!(
        "\n== upstream: {} renamed to acme/{new_name}",
        victim.full_name
    );

    println!("\n== second sync");
    queue_and_wait(&app).await?;

    let host = url::Url::parse(&victim.html_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "github.com".to_owned());
    let address = SpaceAddress::new(SpaceKind::GithubRepo, &host, &victim.id.to_string())?;
    println!("\n== {address}: same space id, new aliases active, old ones retired");
    print_history(&app.store.alias_history(&address).await?);
    let old = app.store.resolve(&victim.ssh_url).await?;
    if let Some(r) = old.first() {
        println!(
            "  resolving the old remote {} still finds {} (retired alias: {})",
            victim.ssh_url, r.space.address, r.retired
        );
    }
    let total = app.store.count_spaces(Some(CONNECTION), None).await?;
    println!("\n== {total} spaces registered (the org and its repos). Try:");
    println!("  cmcp-discovery spaces list");
    println!("  cmcp-discovery spaces resolve {}", victim.ssh_url);
    println!("  cmcp-discovery spaces resolve https://{host}/acme/{new_name}");
    println!("  cmcp-discovery connection list");
    sim.shutdown().await;
    Ok(())
}

/// Queue a sync of the demo connection, run it with an in-process worker
/// and print the run's figures.
async fn queue_and_wait(app: &App) -> Result<()> {
    let since = chrono::Utc::now().timestamp_millis();
    app.queue()
        .push(
            cmcp_worker::SyncConnection::new(CONNECTION, "demo"),
            None,
            None,
        )
        .await?;
    let run = sync_and_wait(app, CONNECTION, since, Duration::from_secs(120)).await?;
    print_run(&run);
    Ok(())
}
