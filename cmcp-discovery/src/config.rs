//! Configuration: defaults in code, then a TOML file, then `CMCP_DISCOVERY_*`
//! environment variables, then command-line flags. Unknown keys are errors,
//! so a typo never silently falls back to a default.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cmcp_connectors::HttpConfig;
use cmcp_worker::{QueueConfig, ReconcileConfig, RetentionConfig, SyncConfig};
use serde::Deserialize;

pub const ENV_PREFIX: &str = "CMCP_DISCOVERY_";
pub const DEFAULT_DATA_DIR: &str = ".cmcp-discovery";
pub const DB_FILE: &str = "cmcp-discovery.db";
pub const KEY_FILE: &str = "master.key";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the embedded default keeps its SQLite file and master key.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; empty means the SQLite file in
    /// `data_dir`.
    pub database_url: String,
    /// Address of the health/readiness/metrics listener of `serve`.
    pub listen: String,
    /// `tracing` filter, e.g. `info` or `cmcp_worker=debug,info`.
    pub log: String,
    /// `text` or `json`.
    pub log_format: String,
    pub http: HttpConfig,
    pub queue: QueueConfig,
    pub sync: SyncConfig,
    /// The nightly reconciliation and the other schedules.
    pub reconcile: ReconcileConfig,
    /// What is pruned, and after how long.
    pub retention: RetentionConfig,
    /// The base URL platforms reach this fleet's webhook gateway at;
    /// `connection webhook-info` prints `<public_url>/hooks/<platform>/<id>`.
    pub public_url: String,
    /// Webhook gateway settings (body cap).
    pub gateway: cmcp_webhook_gateway::GatewayConfig,
    /// How often the fleet checks push channels (a scheduled job, one per
    /// connection per tick for the whole fleet): open the
    /// missing ones, renew those close to expiry, and catch up after a
    /// lapse. Drive channels last at most a week and are never renewed by
    /// Google, so this must run well within that.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub drive_channels_every: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            database_url: String::new(),
            listen: "127.0.0.1:8080".to_owned(),
            log: "info".to_owned(),
            log_format: "text".to_owned(),
            http: HttpConfig::default(),
            queue: QueueConfig::default(),
            sync: SyncConfig::default(),
            reconcile: ReconcileConfig::default(),
            retention: RetentionConfig::default(),
            public_url: "http://127.0.0.1:8080".to_owned(),
            gateway: cmcp_webhook_gateway::GatewayConfig::default(),
            drive_channels_every: std::time::Duration::from_secs(600),
        }
    }
}

/// Flags that override everything else.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub database_url: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub listen: Option<String>,
    pub log: Option<String>,
}

impl Config {
    pub fn load(flags: &Overrides) -> Result<Config> {
        let file = flags
            .config_file
            .clone()
            .or_else(|| env("CONFIG").map(PathBuf::from));
        let mut cfg = match &file {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(v) = env("DATA_DIR") {
            cfg.data_dir = PathBuf::from(v);
        }
        if let Some(v) = env("DATABASE_URL") {
            cfg.database_url = v;
        }
        if let Some(v) = env("LISTEN") {
            cfg.listen = v;
        }
        if let Some(v) = env("LOG") {
            cfg.log = v;
        }
        if let Some(v) = env("LOG_FORMAT") {
            cfg.log_format = v;
        }
        if let Some(v) = &flags.data_dir {
            cfg.data_dir = v.clone();
        }
        if let Some(v) = &flags.database_url {
            cfg.database_url = v.clone();
        }
        if let Some(v) = &flags.listen {
            cfg.listen = v.clone();
        }
        if let Some(v) = &flags.log {
            cfg.log = v.clone();
        }
        if !matches!(cfg.log_format.as_str(), "text" | "json") {
            anyhow::bail!(
                "log_format must be \"text\" or \"json\", not {:?}",
                cfg.log_format
            );
        }
        cfg.http.validate().context("invalid [http] settings")?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
    }

    /// The database URL, defaulting to the SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        if self.database_url.trim().is_empty() {
            format!("sqlite://{}", self.data_dir.join(DB_FILE).display())
        } else {
            self.database_url.clone()
        }
    }

    pub fn key_file(&self) -> PathBuf {
        self.data_dir.join(KEY_FILE)
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(format!("{ENV_PREFIX}{name}"))
        .ok()
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commented_example_config_parses() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cmcp-discovery.example.toml");
        let cfg = Config::from_file(&path).unwrap();
        assert_eq!(cfg.listen, "0.0.0.0:8080");
        assert!(cfg.database_url.starts_with("postgres://"));
        assert_eq!(cfg.http.per_page, 100);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<Config>("databse_url = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("databse_url"), "{err}");
    }

    #[test]
    fn default_database_is_the_sqlite_file_in_the_data_dir() {
        let cfg = Config::default();
        assert_eq!(
            cfg.database_url(),
            format!("sqlite://{DEFAULT_DATA_DIR}/{DB_FILE}")
        );
    }
}
