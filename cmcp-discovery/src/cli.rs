use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cmcp-discovery",
    version,
    about = "Discovers a company's repos, projects and drives and keeps a registry of stable space ids"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Config file (TOML); also CMCP_DISCOVERY_CONFIG.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// sqlite://PATH (default: the file in the data dir) or postgres://…; also CMCP_DISCOVERY_DATABASE_URL.
    #[arg(long, global = true)]
    pub database_url: Option<String>,
    /// Data directory of the embedded default; also CMCP_DISCOVERY_DATA_DIR.
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    /// Log filter (e.g. info, debug, cmcp_worker=trace); also CMCP_DISCOVERY_LOG.
    #[arg(long, global = true)]
    pub log: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Worker and HTTP health/readiness/metrics in one process.
    Serve {
        /// Listen address; also CMCP_DISCOVERY_LISTEN.
        #[arg(long)]
        listen: Option<String>,
    },
    /// A worker process only (for a fleet on PostgreSQL).
    Worker,
    /// Apply the registry's and the queue's migrations, then exit.
    Migrate,
    /// Manage connections.
    #[command(subcommand)]
    Connection(ConnectionCmd),
    /// Queue a sync of one connection.
    Sync {
        connection: String,
        /// Run a worker in this process and wait for the run to finish.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
    },
    /// Read the registry.
    #[command(subcommand)]
    Spaces(SpacesCmd),
    /// Sync runs and their figures.
    Runs {
        /// Only this connection's runs.
        connection: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// The audit log, newest first.
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Offline demo against the simulated upstream: sync, rename, sync again.
    Demo {
        /// Repos in the simulated org.
        #[arg(long, default_value_t = 40)]
        repos: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConnectionCmd {
    /// Add a connection.
    #[command(subcommand)]
    Add(AddCmd),
    /// List connections with their status, risks and last run.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AddCmd {
    /// A GitHub org (github.com or GitHub Enterprise Server).
    Github {
        #[arg(long)]
        org: String,
        /// File holding the token (read-only: fine-grained with Metadata read, or an App installation token).
        #[arg(long)]
        token_file: PathBuf,
        /// API base: https://api.github.com (default) or https://HOST/api/v3 for GHES.
        #[arg(long, default_value = "https://api.github.com")]
        base_url: String,
        /// Connection id (default: github-<org>).
        #[arg(long)]
        id: Option<String>,
        /// A person's own token: it only ever writes that person's spaces.
        #[arg(long, value_name = "PERSON")]
        person: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SpacesCmd {
    /// List spaces.
    List {
        #[arg(long)]
        connection: Option<String>,
        /// active, missing or tombstoned.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 0)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Find the space a fingerprint names: a git remote, a web URL, a full name, a key, or a space address.
    Resolve {
        alias: String,
        #[arg(long)]
        json: bool,
    },
    /// Every alias a space ever had.
    History {
        address: String,
        #[arg(long)]
        json: bool,
    },
}
