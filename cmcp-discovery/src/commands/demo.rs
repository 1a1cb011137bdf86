//! `demo`: the whole fleet offline. Simulated GitHub, Bitbucket Cloud, Jira
//! Cloud and Google Drive on loopback; a connection to each; syncs through
//! the real queue and worker; a rename arriving by signed webhook through
//! the real gateway; a project key change; and the ADMIN's proposals left
//! waiting. The SQLite file stays, so `spaces …`, `serve` and `/admin` work
//! afterwards.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use cmcp_domain::{ConnectionSpec, Owner, Platform, RunOutcome, Token};
use cmcp_fixtures::{
    BitbucketSim, BitbucketSimConfig, DriveSim, DriveSimConfig, Faults, GithubSim, GithubSimConfig,
    JiraSim, JiraSimConfig, WebhookTarget,
};
use cmcp_registry::{NewConnection, RegistryError, SyncRunRow};
use cmcp_webhook_gateway::{EdgeState, Hooks, router};
use cmcp_worker::{SyncConnection, WorkerOptions, run_workers};

use super::spaces::print_history;
use super::sync::{print_run, wait_for_run};
use crate::app::App;
use crate::config::Config;

/// The simulators check these like the platforms would; they are not real
/// credentials.
const GITHUB_TOKEN: &str = "ghp_demoTokenForTheSimulatedUpstream0001";
const ATLASSIAN_EMAIL: &str = "admin@acme.example";
const ATLASSIAN_TOKEN: &str = "ATATT3xDemoTokenForTheSimulatedUpstream";

struct Sims {
    github: GithubSim,
    bitbucket: BitbucketSim,
    jira: JiraSim,
    drive: DriveSim,
}

pub async fn run(mut cfg: Config, repos: usize) -> Result<()> {
    // Quick retries against the simulators' injected faults.
    cfg.http.backoff_min = Duration::from_millis(50);
    cfg.http.backoff_max = Duration::from_millis(500);
    cfg.http.per_page = 10;
    cfg.queue.poll_interval = Duration::from_millis(100);
    // A one-shot command: its pool opens connections as it needs them.
    let app = App::open(cfg, false).await?;
    let sims = start_sims(repos).await?;
    println!("== simulated upstreams on loopback:");
    println!(
        "   github    {} (org acme, {repos} repos; 5% 5xx, 3% dropped connections, 3% 429s)",
        sims.github.base_url()
    );
    println!(
        "   bitbucket {} (workspace acme, 3 projects, 12 repos)",
        sims.bitbucket.base_url()
    );
    println!(
        "   jira      {} (site acme.atlassian.net, 6 projects)",
        sims.jira.base_url()
    );
    println!(
        "   drive     {} (domain {}, 2 shared drives, folders 2 levels deep)",
        sims.drive.base_url(),
        sims.drive.domain()
    );

    let ids = upsert_connections(&app, &sims).await?;
    println!(
        "== connections {} (tokens sealed in {})",
        ids.join(", "),
        app.cfg.database_url()
    );

    // One worker and the webhook gateway for the whole demo, as `serve` runs them.
    let opts = WorkerOptions::unique("demo");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(run_workers(app.worker_state(&opts), opts, async move {
        let _ = stopped.await;
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("bind the demo gateway")?;
    let gateway_url = format!("http://{}", listener.local_addr()?);
    let edge = router(EdgeState {
        store: app.store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(app.cipher.clone(), app.cfg.gateway.clone())),
    });
    let gateway = tokio::spawn(async move { axum::serve(listener, edge).await });

    let result = narrate(&app, &sims, &ids, &gateway_url).await;
    let _ = stop.send(());
    let _ = worker.await;
    gateway.abort();
    result
}

async fn start_sims(repos: usize) -> Result<Sims> {
    let github = GithubSim::start(GithubSimConfig {
        org: "acme".to_owned(),
        repos,
        token: Some(GITHUB_TOKEN.to_owned()),
        oauth_scopes: Some("repo, read:org".to_owned()),
        latency: Duration::from_millis(5),
        faults: Faults {
            server_error: 0.05,
            drop_connection: 0.03,
            rate_limited_429: 0.03,
            ..Faults::default()
        },
        ..GithubSimConfig::default()
    });
    let bitbucket = BitbucketSim::start(BitbucketSimConfig {
        projects: 3,
        repos: 12,
        token: Some(ATLASSIAN_TOKEN.to_owned()),
        email: Some(ATLASSIAN_EMAIL.to_owned()),
        ..BitbucketSimConfig::default()
    });
    let jira = JiraSim::start(JiraSimConfig {
        projects: 6,
        token: Some(ATLASSIAN_TOKEN.to_owned()),
        email: Some(ATLASSIAN_EMAIL.to_owned()),
        ..JiraSimConfig::default()
    });
    let drive = DriveSim::start(DriveSimConfig {
        drives: 2,
        folders_per_level: 2,
        depth: 2,
        ..DriveSimConfig::default()
    });
    let (github, bitbucket, jira, drive) = tokio::join!(github, bitbucket, jira, drive);
    Ok(Sims {
        github: github.context("start the GitHub simulator")?,
        bitbucket: bitbucket.context("start the Bitbucket simulator")?,
        jira: jira.context("start the Jira simulator")?,
        drive: drive.context("start the Drive simulator")?,
    })
}

/// Create the four demo connections, or point existing ones (from an
/// earlier demo) at this run's simulators.
async fn upsert_connections(app: &App, sims: &Sims) -> Result<Vec<String>> {
    let atlassian = Token::new(format!("basic:{ATLASSIAN_EMAIL}:{ATLASSIAN_TOKEN}"));
    let wanted = [
        (
            "demo-github",
            Platform::Github,
            "acme".to_owned(),
            sims.github.base_url(),
            Token::new(GITHUB_TOKEN),
            serde_json::json!({}),
        ),
        (
            "demo-bitbucket",
            Platform::Bitbucket,
            sims.bitbucket.workspace(),
            sims.bitbucket.base_url(),
            atlassian.clone(),
            serde_json::json!({}),
        ),
        (
            "demo-jira",
            Platform::Jira,
            sims.jira.site(),
            sims.jira.base_url(),
            atlassian,
            serde_json::json!({}),
        ),
        (
            "demo-drive",
            Platform::Drive,
            sims.drive.domain(),
            sims.drive.base_url(),
            Token::new(cmcp_fixtures::drive::TEST_SERVICE_ACCOUNT_JSON),
            serde_json::json!({ "subject": "admin@example.com", "depth": 2, "domain_admin_access": true, "token_url": sims.drive.token_url() }),
        ),
    ];
    let mut ids = Vec::new();
    for (id, platform, scope, base_url, token, settings) in wanted {
        match app.store.get_connection(id).await {
            Ok(_) => {
                app.store
                    .update_connection_endpoint(
                        &app.cipher,
                        id,
                        &base_url,
                        &token,
                        Some(&settings),
                        "demo",
                    )
                    .await?;
            }
            Err(RegistryError::NotFound { .. }) => {
                app.store
                    .create_connection(
                        &app.cipher,
                        NewConnection {
                            id: id.to_owned(),
                            spec: ConnectionSpec {
                                platform,
                                scope,
                                base_url,
                            },
                            owner: Owner::Company,
                            token,
                            settings,
                        },
                        "demo",
                    )
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
        app.store.ensure_webhook_secret(&app.cipher, id).await?;
        ids.push(id.to_owned());
    }
    Ok(ids)
}

/// Queue a sync of each connection and wait for all of them to finish.
async fn sync_all(app: &App, ids: &[String]) -> Result<Vec<SyncRunRow>> {
    let since = chrono::Utc::now().timestamp_millis();
    for id in ids {
        app.queue()
            .push(
                SyncConnection::new(id.as_str(), cmcp_domain::RunTrigger::Demo),
                None,
                None,
            )
            .await?;
    }
    let mut runs = Vec::new();
    for id in ids {
        let run = tokio::time::timeout(
            Duration::from_secs(120),
            wait_for_run(&app.store, id, since),
        )
        .await
        .with_context(|| format!("no finished run of {id} within two minutes"))??;
        runs.push(run);
    }
    Ok(runs)
}

async fn narrate(app: &App, sims: &Sims, ids: &[String], gateway_url: &str) -> Result<()> {
    println!("\n== first syncs, through the queue and a worker (10 items per page)");
    for run in sync_all(app, ids).await? {
        print_run(&run);
        if run.outcome != RunOutcome::Complete {
            bail!(
                "the first sync of {} ended {}",
                run.connection_id,
                run.outcome.as_str()
            );
        }
    }
    let github = app.store.get_connection("demo-github").await?;
    for risk in &github.risks {
        println!("  demo-github RISK [{}] {}", risk.code, risk.message);
    }

    // A rename upstream arrives as a signed webhook; no sync runs.
    let secret = app
        .store
        .current_webhook_secret(&app.cipher, "demo-github")
        .await?;
    sims.github.set_webhook(Some(WebhookTarget {
        url: format!("{gateway_url}/hooks/github/demo-github"),
        secret: secret.expose().to_owned(),
        hook_id: 4242,
    }));
    let victim = sims
        .github
        .repos()
        .get(2)
        .cloned()
        .context("the simulated org needs at least 3 repos")?;
    let new_name = "payments-api";
    let runs_before = app.store.list_runs(Some("demo-github"), 100).await?.len();
    let started = std::time::Instant::now();
    sims.github.rename_repo(victim.id, new_name);
    println!(
        "\n== upstream: {} renamed to acme/{new_name}; GitHub sends a signed `repository` webhook",
        victim.full_name
    );
    let new_remote = format!("git@{}:acme/{new_name}.git", sims.github.web_host());
    loop {
        if app
            .store
            .resolve(&new_remote)
            .await?
            .iter()
            .any(|r| !r.retired)
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("the rename did not arrive by webhook within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let runs_after = app.store.list_runs(Some("demo-github"), 100).await?.len();
    println!(
        "   verified, stored, re-read by id and applied in {} ms ({} sync runs started meanwhile)",
        started.elapsed().as_millis(),
        runs_after - runs_before
    );
    let address = cmcp_domain::SpaceAddress::new(
        cmcp_domain::SpaceKind::GithubRepo,
        &sims.github.web_host(),
        &victim.id.to_string(),
    )?;
    println!("   {address}: same space id, new aliases active, old ones retired");
    print_history(&app.store.alias_history(&address).await?);

    // A Jira project key change and a Bitbucket rename, picked up by a sync.
    let jira_project = sims
        .jira
        .projects()
        .first()
        .cloned()
        .context("the Jira simulator has projects")?;
    sims.jira.change_project_key(&jira_project.id, "PAY");
    let bb_repo = sims
        .bitbucket
        .repos()
        .first()
        .cloned()
        .context("the Bitbucket simulator has repos")?;
    sims.bitbucket
        .rename_repo(&bb_repo.uuid, "payments-gateway");
    println!(
        "\n== upstream: Jira project {} is now PAY; Bitbucket repo {} is now payments-gateway",
        jira_project.key, bb_repo.full_name
    );
    for run in sync_all(app, &ids[1..3]).await? {
        print_run(&run);
    }
    for input in [jira_project.key.as_str(), "PAY"] {
        for r in app
            .store
            .resolve(input)
            .await?
            .iter()
            .filter(|r| r.space.address.kind() == cmcp_domain::SpaceKind::JiraProject)
        {
            let how = if r.retired {
                "retired alias, still resolves"
            } else if input == "PAY" {
                "current key"
            } else {
                "earlier key: Jira keeps it in projectKeys, so it stays an alias"
            };
            println!(
                "   resolve {input:<6} → {} ({}) [{how}]",
                r.space.address, r.space.display_name
            );
        }
    }

    // The ADMIN's side: cMCP's places, and proposals waiting for a decision.
    let admin_key = cmcp_admin::seed_demo_places_and_key(&app.store)
        .await
        .context("seed the demo places")?;
    let pending = app
        .store
        .count_proposals(&cmcp_registry::ProposalFilter {
            state: Some(cmcp_registry::ProposalState::Proposed),
            ..Default::default()
        })
        .await?;
    println!(
        "\n== cMCP places loaded (Acme, Payments/PAY, Platform, Mobile App): {pending} mapping proposals wait for an ADMIN"
    );
    println!("   start the server:  cmcp-discovery serve");
    println!("   then open:         http://{}/admin", app.cfg.listen);
    println!("   one-time admin key (shown once, stored only as a hash): {admin_key}");

    let total = app.store.count_spaces(None, None).await?;
    println!("\n== {total} spaces registered across the four platforms. Try:");
    println!("  cmcp-discovery spaces list");
    println!("  cmcp-discovery spaces resolve {}", victim.ssh_url);
    println!("  cmcp-discovery spaces resolve {}", jira_project.key);
    println!("  cmcp-discovery connection list");
    Ok(())
}
