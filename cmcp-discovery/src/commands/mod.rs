//! One function per command; each opens only what it needs.

mod connection;
#[cfg(feature = "demo")]
mod demo;
mod health;
mod keys;
mod people;
mod places;
mod serve;
mod spaces;
mod sync;
mod webhooks;

use anyhow::Result;

use crate::app::App;
use crate::cli::{Cli, Command};
use crate::config::{Config, Overrides};

pub async fn run(cli: Cli) -> Result<()> {
    // A probe needs no configuration and no store.
    if let Command::Health { url } = &cli.command {
        return health::run(url).await;
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
        log: cli.global.log.clone(),
    };
    let cfg = Config::load(&overrides)?;
    // The demo narrates on stdout; keep the logs to warnings unless asked.
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
    crate::logging::init(&cfg.log, &cfg.log_format);
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Demo { repos } => demo::run(cfg, repos).await,
        command => {
            let app = App::open(cfg).await?;
            match command {
                Command::Serve { .. } => serve::serve(&app).await,
                Command::Worker => serve::worker(&app).await,
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
                } => sync::run(&app, &connection, wait, timeout_secs).await,
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
                Command::Changes {
                    after,
                    limit,
                    person,
                    json,
                } => spaces::changes(&app, &after, limit, person.as_deref(), json).await,
                Command::Health { .. } => unreachable!("handled above"),
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
