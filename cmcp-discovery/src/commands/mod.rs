//! One function per command; each opens only what it needs.

mod connection;
pub mod deliveries;
#[cfg(feature = "demo")]
mod demo;
mod doctor;
mod health;
mod keys;
mod people;
mod places;
mod progress;
mod reconcile;
mod serve;
mod spaces;
mod sync;
mod webhooks;

use anyhow::Result;

use crate::app::App;
use crate::cli::{Cli, Command};
use crate::config::{Config, Overrides};

/// A run that ended partial: `main` exits with [`PARTIAL_EXIT`] for it.
#[derive(Debug)]
pub struct PartialRun(pub String);

impl std::fmt::Display for PartialRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartialRun {}

/// Exit codes, as the README documents them: 0 ok, 1 error, 2 usage (clap's
/// own), 3 a sync that ended partial.
pub const PARTIAL_EXIT: u8 = 3;

pub async fn run(cli: Cli) -> Result<()> {
    // A probe needs no configuration and no store; nor do the generated
    // completions and manual.
    match &cli.command {
        Command::Health { url } => return health::run(url).await,
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "cmcp-discovery", &mut std::io::stdout());
            return Ok(());
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?;
            return Ok(());
        }
        _ => {}
    }
    let overrides = Overrides {
        config_file: cli.global.config.clone(),
        database_url: cli.global.database_url.clone(),
        data_dir: cli.global.data_dir.clone(),
        listen: match &cli.command {
            Command::Serve { listen } => listen.clone(),
            Command::Gateway { listen } => listen.clone(),
            _ => None,
        },
        worker_listen: match &cli.command {
            Command::Worker { listen } => listen.clone(),
            _ => None,
        },
        log: cli.global.log.clone(),
        log_format: cli.global.log_format,
    };
    let cfg = Config::load(&overrides)?;
    // The demo narrates on stdout; keep the logs to warnings unless asked.
    // A check of the setup must not migrate or create what it checks.
    if let Command::Doctor { json } = cli.command {
        crate::logging::init(&cfg.log, cfg.log_format);
        return doctor::run(cfg, json).await;
    }
    #[cfg(feature = "demo")]
    let cfg = if matches!(cli.command, Command::Demo { .. })
        && overrides.log.is_none()
        && std::env::var("CMCP_DISCOVERY_LOG").is_err()
    {
        Config {
            log: "warn".to_owned(),
            ..cfg
        }
    } else {
        cfg
    };
    crate::logging::init(&cfg.log, cfg.log_format);
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Demo { repos } => demo::run(cfg, repos).await,
        command => {
            let app = App::open(cfg, command.is_long_running()).await?;
            match command {
                Command::Serve { .. } => serve::serve(&app).await,
                Command::Worker { .. } => serve::worker(&app).await,
                Command::Gateway { .. } => serve::gateway(&app).await,
                Command::Migrate => {
                    println!("migrations applied ({:?} backend)", app.store.backend());
                    Ok(())
                }
                Command::Connection(cmd) => connection::run(&app, cmd).await,
                Command::Sync {
                    connection,
                    wait,
                    timeout_secs,
                    json,
                } => sync::run(&app, &connection, wait, timeout_secs, json).await,
                Command::Reconcile {
                    connection,
                    wait,
                    timeout_secs,
                    json,
                } => reconcile::run(&app, connection.as_deref(), wait, timeout_secs, json).await,
                Command::Drift { connection, json } => {
                    reconcile::drift(&app, connection.as_deref(), json).await
                }
                Command::Spaces(cmd) => spaces::run(&app, cmd).await,
                Command::Places(cmd) => places::run(&app, cmd).await,
                Command::Keys(cmd) => keys::run(&app, cmd).await,
                Command::People(cmd) => people::run(&app, cmd).await,
                Command::Runs {
                    connection,
                    limit,
                    json,
                } => sync::runs(&app, connection.as_deref(), limit, json).await,
                Command::Audit { limit, json } => spaces::audit(&app, limit, json).await,
                Command::Deliveries(cmd) => deliveries::run(&app, cmd).await,
                Command::Changes {
                    after,
                    limit,
                    person,
                    json,
                } => spaces::changes(&app, &after, limit, person.as_deref(), json).await,
                Command::Health { .. }
                | Command::Completions { .. }
                | Command::Man
                | Command::Doctor { .. } => {
                    unreachable!("handled above")
                }
                #[cfg(feature = "demo")]
                Command::Demo { .. } => unreachable!("handled above"),
            }
        }
    }
}

/// Milliseconds since the epoch as an RFC 3339 UTC time.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}
