//! Configuration in layers, each overriding the one before: defaults in
//! code, then a TOML file (`--config` or `CMCP_DISCOVERY_CONFIG`), then
//! `CMCP_DISCOVERY_*` environment variables (a nested key joins its parts
//! with `__`: `CMCP_DISCOVERY_HTTP__TIMEOUT=45s` sets `[http] timeout`),
//! then command-line flags. Every key can be set each way, as
//! `deploy/cmcp-discovery.example.toml` documents (a test walks them all).
//!
//! Unknown keys are errors, so a typo never silently falls back to a
//! default, and an invalid value (the log filter included) stops the start
//! with the key and the layer it came from.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use cmcp_connectors::HttpConfig;
use cmcp_registry::StoreOptions;
use cmcp_worker::{QueueConfig, ReconcileConfig, RetentionConfig, SyncConfig};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

pub const ENV_PREFIX: &str = "CMCP_DISCOVERY_";
pub const DEFAULT_DATA_DIR: &str = ".cmcp-discovery";
pub const DB_FILE: &str = "cmcp-discovery.db";
pub const KEY_FILE: &str = "master.key";

/// `CMCP_DISCOVERY_*` variables that are not config keys: the config file's
/// path, and the master key (read by the cipher, never part of the config).
const NOT_KEYS: [&str; 2] = ["config", "master_key"];

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the embedded default keeps its SQLite file and master key.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; empty means the SQLite file in
    /// `data_dir`.
    pub database_url: String,
    /// Address of the health/readiness/metrics listener of `serve`.
    pub listen: String,
    /// Address where `worker` serves `/healthz`, `/readyz` and `/metrics`;
    /// empty: it serves nothing.
    pub worker_listen: String,
    /// After SIGTERM a listener answers `/readyz` 503 and goes on serving
    /// at least this long (and until its workers have stopped), so a load
    /// balancer can take it out of rotation first. A second signal cuts it
    /// short.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub drain_grace: std::time::Duration,
    /// How often a process reads its store gauges (queues, connections,
    /// staleness) for `/metrics`.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub metrics_sample_every: std::time::Duration,
    /// `tracing` filter, e.g. `info` or `cmcp_worker=debug,info`.
    pub log: String,
    pub log_format: LogFormat,
    /// The pool each process keeps to the registry.
    pub store: StoreConfig,
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
    /// How long `serve` may answer an API key from memory (PostgreSQL
    /// only; `0s`: never). Every revocation is announced to every process,
    /// which forgets its keys at once, and while that announcement cannot
    /// be heard keys are read from the store; this bounds the rest.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub api_key_cache: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            database_url: String::new(),
            listen: "127.0.0.1:8080".to_owned(),
            worker_listen: String::new(),
            drain_grace: std::time::Duration::from_secs(5),
            metrics_sample_every: std::time::Duration::from_secs(15),
            log: "info".to_owned(),
            log_format: LogFormat::Text,
            store: StoreConfig::default(),
            http: HttpConfig::default(),
            queue: QueueConfig::default(),
            sync: SyncConfig::default(),
            reconcile: ReconcileConfig::default(),
            retention: RetentionConfig::default(),
            public_url: "http://127.0.0.1:8080".to_owned(),
            gateway: cmcp_webhook_gateway::GatewayConfig::default(),
            drive_channels_every: std::time::Duration::from_secs(600),
            api_key_cache: std::time::Duration::from_secs(60),
        }
    }
}

/// `[store]`: the pool of connections each process keeps to the registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// At most this many connections per process (each fleet member has
    /// its own pool: the server must allow the sum).
    pub max_connections: u32,
    /// Connections `serve`, `worker` and `gateway` open at start and keep
    /// (at most `max_connections`); a one-shot command opens one. A burst
    /// then never waits for a new connection, and a connection closed at
    /// the end of its life is replaced in the background.
    pub min_connections: u32,
    /// How long a statement may wait for a connection (and a connection to
    /// open) before it fails.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub connect_timeout: std::time::Duration,
    /// PostgreSQL ends a session whose transaction sat idle this long (a
    /// holder that lost it); `0s` keeps the server's setting.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub idle_in_transaction_timeout: std::time::Duration,
    /// SQLite: the page cache of the whole pool in KiB, shared out among
    /// its connections (at least 64 each). The file's pages stay in the
    /// operating system's cache either way; this bounds the copies each
    /// connection keeps, so a process's memory does not follow the file.
    pub sqlite_cache_kib: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        let d = StoreOptions::kept();
        StoreConfig {
            max_connections: d.max_connections,
            min_connections: d.min_connections,
            connect_timeout: d.connect_timeout,
            idle_in_transaction_timeout: d.idle_in_transaction_timeout,
            sqlite_cache_kib: d.sqlite_cache_kib,
        }
    }
}

impl StoreConfig {
    fn validate(&self) -> Result<()> {
        if self.max_connections == 0 {
            anyhow::bail!("max_connections must be at least 1");
        }
        if self.min_connections > self.max_connections {
            anyhow::bail!(
                "min_connections ({}) is more than max_connections ({})",
                self.min_connections,
                self.max_connections
            );
        }
        if self.connect_timeout.is_zero() {
            anyhow::bail!("connect_timeout must be more than zero");
        }
        Ok(())
    }

    /// The pool of a long-running process (`keep` true: its connections
    /// opened now and kept), or of a one-shot command (opened as needed).
    pub fn options(&self, keep: bool) -> StoreOptions {
        StoreOptions {
            max_connections: self.max_connections,
            min_connections: if keep { self.min_connections } else { 0 },
            connect_timeout: self.connect_timeout,
            idle_in_transaction_timeout: self.idle_in_transaction_timeout,
            sqlite_cache_kib: self.sqlite_cache_kib,
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
    pub worker_listen: Option<String>,
    pub log: Option<String>,
    pub log_format: Option<LogFormat>,
}

impl Config {
    pub fn load(flags: &Overrides) -> Result<Config> {
        let file = flags
            .config_file
            .clone()
            .or_else(|| env("CONFIG").map(PathBuf::from));
        Config::from_figment(&Config::layers(file.as_deref(), flags)?)
    }

    /// The layers, lowest first. A named file must exist: a missing one is
    /// a mistake, not an empty layer.
    fn layers(file: Option<&Path>, flags: &Overrides) -> Result<Figment> {
        let mut figment = Figment::new();
        if let Some(path) = file {
            std::fs::metadata(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            figment = figment.merge(Toml::file(path));
        }
        figment = figment.merge(Env::prefixed(ENV_PREFIX).split("__").filter(|key| {
            !NOT_KEYS
                .iter()
                .any(|k| key.as_str().eq_ignore_ascii_case(k))
        }));
        let flags = [
            Flag::new("data_dir", flags.data_dir.as_ref()),
            Flag::new("database_url", flags.database_url.as_ref()),
            Flag::new("listen", flags.listen.as_ref()),
            Flag::new("worker_listen", flags.worker_listen.as_ref()),
            Flag::new("log", flags.log.as_ref()),
            Flag::new("log_format", flags.log_format.as_ref()),
        ];
        for flag in flags.into_iter().flatten() {
            figment = figment.merge(flag);
        }
        Ok(figment)
    }

    /// Extracts and checks the merged layers; an error names the key and
    /// the layer its value came from.
    fn from_figment(figment: &Figment) -> Result<Config> {
        let cfg: Config = figment
            .extract()
            .map_err(|e| anyhow!("invalid configuration: {}", describe(&e)))?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&cfg.log) {
            anyhow::bail!(
                "invalid configuration: key `log` ({}): not a log filter: {e}",
                source_of(figment, "log")
            );
        }
        cfg.store.validate().with_context(|| {
            format!(
                "invalid configuration: [store] settings ({})",
                source_of(figment, "store")
            )
        })?;
        cfg.http.validate().with_context(|| {
            format!(
                "invalid configuration: [http] settings ({})",
                source_of(figment, "http")
            )
        })?;
        Ok(cfg)
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

/// Every error figment found, each with its key and the layer it came from.
fn describe(e: &figment::Error) -> String {
    e.clone()
        .into_iter()
        .map(|e| {
            let origin = e
                .metadata
                .as_ref()
                .map_or_else(|| "default".to_owned(), |m| origin(m, &e.path));
            if e.path.is_empty() {
                format!("{origin}: {}", e.kind)
            } else {
                format!("key `{}` ({origin}): {}", e.path.join("."), e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Which layer set `key`: a file's path, a variable's name, a flag, or
/// the default.
fn source_of(figment: &Figment, key: &str) -> String {
    let path: Vec<String> = key.split('.').map(str::to_owned).collect();
    figment
        .find_metadata(key)
        .map_or_else(|| "default".to_owned(), |m| origin(m, &path))
}

/// A layer named for an operator: the variable itself for the environment
/// (`CMCP_DISCOVERY_HTTP__TIMEOUT`), the file's path, or the flag.
fn origin(m: &figment::Metadata, path: &[String]) -> String {
    if m.name.contains("environment variable") && !path.is_empty() {
        return format!(
            "environment variable {ENV_PREFIX}{}",
            path.join("__").to_ascii_uppercase()
        );
    }
    match &m.source {
        Some(source) => format!("{} {source}", m.name),
        None => m.name.to_string(),
    }
}

/// One command-line flag as a layer of its own, so that an error names it.
struct Flag {
    key: &'static str,
    value: figment::value::Value,
}

impl Flag {
    fn new<T: Serialize>(key: &'static str, value: Option<&T>) -> Option<Flag> {
        let value = figment::value::Value::serialize(value?).ok()?;
        Some(Flag { key, value })
    }
}

impl figment::Provider for Flag {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(format!("flag --{}", self.key.replace('_', "-")))
    }

    fn data(
        &self,
    ) -> std::result::Result<
        figment::value::Map<figment::Profile, figment::value::Dict>,
        figment::Error,
    > {
        let mut dict = figment::value::Dict::new();
        dict.insert(self.key.to_owned(), self.value.clone());
        Ok(figment::Profile::Default.collect(dict))
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(format!("{ENV_PREFIX}{name}"))
        .ok()
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
// figment's `Jail` closures must return its own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cmcp-discovery.example.toml")
    }

    fn from_file(path: &Path) -> Result<Config> {
        Config::from_figment(&Config::layers(Some(path), &Overrides::default())?)
    }

    /// `(dotted path, value)` of every leaf of a TOML table.
    fn leaves(prefix: &str, value: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&path, v, out);
                }
            }
            other => out.push((prefix.to_owned(), other.clone())),
        }
    }

    /// The value as an operator would write it in a variable.
    fn env_text(v: &toml::Value) -> String {
        match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// The value as one line of a TOML file, under its table.
    fn toml_text(path: &str, v: &toml::Value) -> String {
        match path.rsplit_once('.') {
            Some((table, key)) => format!("[{table}]\n{key} = {v}\n"),
            None => format!("{path} = {v}\n"),
        }
    }

    // In a `Jail`, as every test that reads variables: the jail's lock
    // keeps other tests' variables (the fuzz targets set thousands) out.
    #[test]
    fn the_commented_example_config_parses() {
        Jail::expect_with(|_jail| {
            let cfg = from_file(&example_path()).unwrap();
            assert_eq!(cfg.listen, "0.0.0.0:8080");
            assert!(cfg.database_url.starts_with("postgres://"));
            assert_eq!(cfg.http.per_page, 100);
            Ok(())
        });
    }

    /// Every key the config has is in the example file, and each of the
    /// example's keys, set alone by file or alone by variable, gives the
    /// same config (unknown keys are refused either way, so neither layer
    /// can drop one silently).
    #[test]
    fn every_key_is_documented_and_can_be_set_by_file_and_by_variable() {
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        let example: toml::Value =
            toml::from_str(&std::fs::read_to_string(example_path()).unwrap()).unwrap();
        let (mut known, mut documented) = (Vec::new(), Vec::new());
        leaves("", &defaults, &mut known);
        leaves("", &example, &mut documented);
        let documented_keys: Vec<&str> = documented.iter().map(|(k, _)| k.as_str()).collect();
        let mut missing = Vec::new();
        for (key, _) in &known {
            missing.extend((!documented_keys.contains(&key.as_str())).then_some(key));
        }
        assert!(
            missing.is_empty(),
            "missing from deploy/cmcp-discovery.example.toml: {missing:?}"
        );
        for (key, value) in &documented {
            Jail::expect_with(|jail| {
                jail.create_file("one.toml", &toml_text(key, value))?;
                let by_file = from_file(Path::new("one.toml")).map_err(|e| e.to_string())?;
                let var = format!(
                    "{ENV_PREFIX}{}",
                    key.replace('.', "__").to_ascii_uppercase()
                );
                jail.set_env(&var, env_text(value));
                let by_env = Config::load(&Overrides::default()).map_err(|e| e.to_string())?;
                assert_eq!(
                    format!("{by_file:?}"),
                    format!("{by_env:?}"),
                    "`{key}` set by file and by {var}"
                );
                Ok(())
            });
        }
    }

    #[test]
    fn layers_override_in_order_defaults_file_variables_flags() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "listen = \"10.0.0.1:1\"\nlog = \"debug\"\n[http]\ntimeout = \"5s\"\n",
            )?;
            jail.set_env("CMCP_DISCOVERY_CONFIG", "c.toml");
            let cfg = Config::load(&Overrides::default()).unwrap();
            assert_eq!(
                (cfg.listen.as_str(), cfg.log.as_str()),
                ("10.0.0.1:1", "debug")
            );
            assert_eq!(cfg.http.timeout, std::time::Duration::from_secs(5));
            jail.set_env("CMCP_DISCOVERY_LISTEN", "10.0.0.2:2");
            jail.set_env("CMCP_DISCOVERY_HTTP__TIMEOUT", "7s");
            let cfg = Config::load(&Overrides::default()).unwrap();
            assert_eq!(cfg.listen, "10.0.0.2:2");
            assert_eq!(cfg.http.timeout, std::time::Duration::from_secs(7));
            let flags = Overrides {
                listen: Some("10.0.0.3:3".into()),
                log_format: Some(LogFormat::Json),
                ..Overrides::default()
            };
            let cfg = Config::load(&flags).unwrap();
            assert_eq!(cfg.listen, "10.0.0.3:3");
            assert_eq!(cfg.log_format, LogFormat::Json);
            assert_eq!(cfg.log, "debug", "untouched layers stay");
            // The master key is never a config key, and does not trip the
            // unknown-key check.
            jail.set_env("CMCP_DISCOVERY_MASTER_KEY", "00");
            Config::load(&flags).unwrap();
            Ok(())
        });
    }

    #[test]
    fn an_invalid_value_names_its_key_and_where_it_came_from() {
        Jail::expect_with(|jail| {
            jail.set_env("CMCP_DISCOVERY_HTTP__MAX_ATTEMPTS", "lots");
            let err = Config::load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("key `http.max_attempts`"), "{err}");
            assert!(err.contains("CMCP_DISCOVERY_HTTP__MAX_ATTEMPTS"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("CMCP_DISCOVERY_LOG", "info,[=");
            let err = Config::load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("key `log`"), "{err}");
            assert!(err.contains("CMCP_DISCOVERY_LOG"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.create_file("bad.toml", "log_format = \"yaml\"\n")?;
            let err = from_file(Path::new("bad.toml")).unwrap_err().to_string();
            assert!(err.contains("key `log_format`"), "{err}");
            assert!(err.contains("bad.toml"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("CMCP_DISCOVERY_DATABSE_URL", "sqlite://x.db");
            let err = Config::load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("databse_url"), "{err}");
            Ok(())
        });
        let flags = Overrides {
            log: Some("info,[=".into()),
            ..Overrides::default()
        };
        Jail::expect_with(|_jail| {
            let err = Config::load(&flags).unwrap_err().to_string();
            assert!(err.contains("flag --log"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_store_pool_that_cannot_be_kept_is_refused_and_one_shot_commands_keep_none() {
        Jail::expect_with(|jail| {
            jail.set_env("CMCP_DISCOVERY_STORE__MAX_CONNECTIONS", "4");
            jail.set_env("CMCP_DISCOVERY_STORE__MIN_CONNECTIONS", "5");
            let err = Config::load(&Overrides::default()).unwrap_err();
            let err = format!("{err:#}");
            assert!(err.contains("[store]"), "{err}");
            assert!(
                err.contains("min_connections (5) is more than max_connections (4)"),
                "{err}"
            );
            jail.set_env("CMCP_DISCOVERY_STORE__MIN_CONNECTIONS", "3");
            let cfg = Config::load(&Overrides::default()).unwrap();
            assert_eq!(cfg.store.options(true).min_connections, 3);
            assert_eq!(cfg.store.options(false).min_connections, 0);
            assert_eq!(cfg.store.options(false).max_connections, 4);
            jail.set_env("CMCP_DISCOVERY_STORE__MAX_CONNECTIONS", "0");
            jail.set_env("CMCP_DISCOVERY_STORE__MIN_CONNECTIONS", "0");
            let err = format!("{:#}", Config::load(&Overrides::default()).unwrap_err());
            assert!(err.contains("max_connections must be at least 1"), "{err}");
            Ok(())
        });
    }

    /// Fuzz target (issue 13's list: the config loader): any file text and
    /// any variable value give a config or an error naming a key, never a
    /// panic. Mutations of the example file reach past the TOML parser into
    /// the typed fields. `PROPTEST_CASES` sets the number of inputs.
    mod fuzz {
        use super::*;
        use cmcp_registry::testing::fuzz::fuzz;
        use proptest::prelude::*;

        fn example_lines() -> Vec<String> {
            std::fs::read_to_string(example_path())
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        // Inputs per target: PROPTEST_CASES, or CMCP_FUZZ_SECONDS for a
        // length of time (cmcp_registry::testing::fuzz).
        #[test]
        fn any_file_text_loads_or_is_refused() {
            fuzz("config_any_text", ".{0,400}", |text: String| {
                let fig = Figment::new().merge(Toml::string(&text));
                let _ = Config::from_figment(&fig);
                Ok(())
            });
        }

        #[test]
        fn a_mutated_example_loads_or_names_the_key() {
            let value = prop_oneof![
                Just("\"\"".to_owned()),
                Just("-1".to_owned()),
                Just("18446744073709551616".to_owned()),
                Just("\"1000000000000h\"".to_owned()),
                Just("\"0s\"".to_owned()),
                Just("nan".to_owned()),
                Just("[]".to_owned()),
                "[ -~]{0,24}".prop_map(|s| format!("{s:?}")),
            ];
            let example = example_lines();
            fuzz(
                "config_mutated_example",
                (0usize..200, value),
                |(line, value)| {
                    let mut lines = example.clone();
                    let i = line % lines.len();
                    if let Some((key, _)) = lines[i].split_once(" = ") {
                        lines[i] = format!("{key} = {value}");
                    }
                    let fig = Figment::new().merge(Toml::string(&lines.join("\n")));
                    if let Err(e) = Config::from_figment(&fig) {
                        prop_assert!(
                            e.to_string().contains("key") || e.to_string().contains("TOML"),
                            "{e}"
                        );
                    }
                    Ok(())
                },
            );
        }

        #[test]
        fn any_variable_value_loads_or_is_refused() {
            let key = prop::sample::select(vec![
                "LOG",
                "LOG_FORMAT",
                "LISTEN",
                "HTTP__TIMEOUT",
                "HTTP__MAX_ATTEMPTS",
                "HTTP__PER_PAGE",
                "QUEUE__CONCURRENCY",
                "SYNC__MAX_MISSING_FRACTION",
                "RECONCILE__SCHEDULE",
                "GATEWAY__MAX_BODY_BYTES",
            ]);
            fuzz("config_variables", (key, "[ -~]{0,40}"), |(key, value)| {
                Jail::expect_with(|jail| {
                    jail.set_env(format!("{ENV_PREFIX}{key}"), &value);
                    let _ = Config::load(&Overrides::default());
                    Ok(())
                });
                Ok(())
            });
        }
    }

    #[test]
    fn a_named_config_file_that_is_missing_is_an_error() {
        Jail::expect_with(|_jail| {
            let err = from_file(Path::new("/nonexistent/cmcp.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("cannot read config file"), "{err}");
            Ok(())
        });
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
