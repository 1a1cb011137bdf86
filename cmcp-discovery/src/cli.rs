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
    /// How log lines are written on stderr; also CMCP_DISCOVERY_LOG_FORMAT.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
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
    Worker {
        /// Serve /healthz, /readyz and /metrics here; also CMCP_DISCOVERY_WORKER_LISTEN.
        #[arg(long)]
        listen: Option<String>,
    },
    /// The webhook gateway only: POST /hooks/{platform}/{connection} plus health and metrics.
    Gateway {
        /// Listen address; also CMCP_DISCOVERY_LISTEN.
        #[arg(long)]
        listen: Option<String>,
    },
    /// Apply the registry's and the queue's migrations, then exit.
    Migrate,
    /// Ask a running serve/gateway whether it is healthy: exit 0 on a 2xx, 1 otherwise.
    Health {
        /// The URL to GET.
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Manage connections.
    #[command(subcommand)]
    Connection(ConnectionCmd),
    /// Queue a sync of one connection. With --wait, exit 3 when the run ends partial.
    Sync {
        connection: String,
        /// Run a worker in this process and wait for the run to finish.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Print the run (or the queued job) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reconcile now: a complete listing of one connection (or of every
    /// enabled or held one) compared with the registry, recording what
    /// webhooks missed.
    Reconcile {
        connection: Option<String>,
        /// Run a worker in this process and wait for the runs to finish.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Print the queued reconciles, or with --wait the runs and the
        /// drift report, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The drift report: what the latest reconcile of each connection found
    /// that no webhook had delivered.
    Drift {
        #[arg(long)]
        connection: Option<String>,
        #[arg(long)]
        json: bool,
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
    /// Shell completions on stdout (e.g. `completions bash > /etc/bash_completion.d/cmcp-discovery`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff) on stdout: `man <(cmcp-discovery man)`.
    Man,
    /// Check the setup: store, migrations, master key, every credential,
    /// the public URL, the clock. Exits 1 when a check fails; changes nothing.
    Doctor {
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
    /// cMCP's places (projects, teams, clients) that proposals map to.
    #[command(subcommand)]
    Places(PlacesCmd),
    /// API keys for the admin API and the /admin screen.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// A person's linked accounts: link a personal GitHub, unlink, list.
    #[command(subcommand)]
    People(PeopleCmd),
    /// The change feed after a cursor, oldest first (what cMCP polls at
    /// /v1/changes); prints the cursor to continue from.
    Changes {
        /// The `next` of an earlier call; 0 is the start.
        #[arg(long, default_value = "0")]
        after: String,
        #[arg(long, default_value_t = 500)]
        limit: i64,
        /// Only what this person may see (company spaces and theirs).
        #[arg(long)]
        person: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Webhook deliveries: list, show, replay failed ones.
    #[command(subcommand)]
    Deliveries(crate::commands::deliveries::DeliveriesCmd),
    /// Offline demo against the simulated upstream: sync, rename, sync again.
    /// Only in builds with the `demo` feature (the default).
    #[cfg(feature = "demo")]
    Demo {
        /// Repos in the simulated org.
        #[arg(long, default_value_t = 40)]
        repos: usize,
    },
}

impl Command {
    /// `serve`, `worker` and `gateway`: the commands that run until they
    /// are stopped (the rest do one thing and exit).
    pub fn is_long_running(&self) -> bool {
        matches!(
            self,
            Command::Serve { .. } | Command::Worker { .. } | Command::Gateway { .. }
        )
    }
}

/// `connection add`: the platform's arguments, and how to print the result.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// Print the new connection as JSON (never its token).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub platform: AddCmd,
}

#[derive(Debug, Subcommand)]
pub enum ConnectionCmd {
    /// Add a connection.
    Add(AddArgs),
    /// List connections with their status, risks and last run.
    List {
        #[arg(long)]
        json: bool,
    },
    /// The connection's webhook URL, the steps to register it, and (with --show-secret) its secret.
    WebhookInfo {
        connection: String,
        /// Print the webhook secret (audited).
        #[arg(long)]
        show_secret: bool,
        /// Print the URL, the steps and (with --show-secret) the secret as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Confirm that the spaces a held connection's listing lacked are gone:
    /// they are marked missing and the hold ends (audited).
    ConfirmMissing {
        connection: String,
        /// Why they are gone (kept in the audit log).
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
    /// Make a new webhook secret; the old one stays valid for the overlap.
    RotateSecret {
        connection: String,
        /// Seconds the old secret keeps working.
        #[arg(long, default_value_t = 86_400)]
        overlap_secs: u64,
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
        /// GHES only: the host people browse (and html_url names) when it differs from the API host, e.g. an API reached by an internal name or address. The connection's tenant; never github.com.
        #[arg(long, value_name = "HOST")]
        web_host: Option<String>,
        /// Connection id (default: github-<org>).
        #[arg(long)]
        id: Option<String>,
        /// A person's own token: it only ever writes that person's spaces.
        #[arg(long, value_name = "PERSON")]
        person: Option<String>,
    },
    /// A Bitbucket Cloud workspace (its projects and repositories).
    Bitbucket {
        /// Workspace id (slug).
        #[arg(long)]
        workspace: String,
        /// File holding the token: an API token with --email (Basic auth), else a workspace/project access token (Bearer). App passwords are refused.
        #[arg(long)]
        token_file: PathBuf,
        /// Atlassian account e-mail that goes with an API token.
        #[arg(long)]
        email: Option<String>,
        #[arg(long, default_value = "https://api.bitbucket.org")]
        base_url: String,
        /// Connection id (default: bitbucket-<workspace>).
        #[arg(long)]
        id: Option<String>,
    },
    /// A Jira Cloud site (its projects, archived and trashed ones included).
    Jira {
        /// The site, e.g. acme.atlassian.net (https:// is assumed).
        #[arg(long)]
        site: String,
        /// File holding the API token.
        #[arg(long)]
        token_file: PathBuf,
        /// Atlassian account e-mail of the token.
        #[arg(long)]
        email: String,
        /// A scoped API token: calls go through https://api.atlassian.com/ex/jira/<cloud id>.
        #[arg(long, requires = "cloud_id")]
        scoped: bool,
        /// The site's cloudId (needed with --scoped).
        #[arg(long)]
        cloud_id: Option<String>,
        /// Connection id (default: jira-<site host>).
        #[arg(long)]
        id: Option<String>,
    },
    /// A Google Workspace domain (its shared drives and their folders), read by a service account with domain-wide delegation.
    Drive {
        /// The Workspace domain, e.g. example.com.
        #[arg(long)]
        domain: String,
        /// The service account's JSON key file (stored sealed; never shown again).
        #[arg(long)]
        service_account_file: PathBuf,
        /// The Workspace admin to impersonate (needs drive.readonly delegated).
        #[arg(long)]
        subject: String,
        /// Folder levels listed below each shared drive (1 = the drive root's folders).
        #[arg(long, default_value_t = 2)]
        depth: u32,
        /// List every shared drive of the domain as its admin (useDomainAdminAccess).
        #[arg(long)]
        domain_admin_access: bool,
        #[arg(long, default_value = "https://www.googleapis.com")]
        base_url: String,
        /// OAuth token endpoint (default: the key's token_uri).
        #[arg(long)]
        token_url: Option<String>,
        /// Connection id (default: drive-<domain>).
        #[arg(long)]
        id: Option<String>,
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
        /// Answer as the API does for this person: company spaces and the
        /// person's private ones, the strongest match or an ambiguity.
        /// Without it, every match of every owner (the operator's view).
        #[arg(long)]
        person: Option<String>,
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

#[derive(Debug, Subcommand)]
pub enum PlacesCmd {
    /// Load the complete set of places from a JSON array of {id, kind, name, key?, aliases?}; places not in it are retired.
    Import {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// List places, retired ones included.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PeopleCmd {
    /// Link PERSON's GitHub: the token is checked (GET /user), a
    /// write-capable token is accepted and shown as a risk, the first sync
    /// is queued.
    LinkGithub {
        person: String,
        /// A file holding the token on one line (never an argument).
        #[arg(long)]
        token_file: PathBuf,
        /// An Enterprise Server's API (`https://host/api/v3`).
        #[arg(long, default_value = cmcp_worker::people::DEFAULT_GITHUB_API)]
        base_url: String,
        #[arg(long)]
        json: bool,
    },
    /// Unlink one of PERSON's connections: its token and sightings go, the
    /// spaces only they had are tombstoned.
    Unlink {
        person: String,
        connection: String,
        #[arg(long)]
        json: bool,
    },
    /// PERSON's linked accounts with their risks.
    Accounts {
        person: String,
        #[arg(long)]
        json: bool,
    },
    /// PERSON's suggestions: places their private spaces match, with the
    /// evidence (newest first).
    Suggestions {
        person: String,
        #[arg(long)]
        json: bool,
    },
    /// PERSON accepts or declines their suggestion ID (audited).
    Decide {
        person: String,
        id: i64,
        #[arg(value_parser = ["accept", "decline"])]
        decision: String,
    },
    /// Requests people sent to the ADMINs: to join a place, to create a
    /// project.
    Requests {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Create a key and print it once.
    Create {
        /// admin, member or service.
        #[arg(long)]
        role: String,
        /// Named powers of an admin key: mappings, connections (comma-separated).
        #[arg(long, value_delimiter = ',')]
        powers: Vec<String>,
        #[arg(long)]
        name: String,
        /// A member key's person: the key acts for that person only.
        #[arg(long)]
        person: Option<String>,
        /// Print the key's row and the key (once) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List keys (never the keys themselves).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key and end its sessions.
    Revoke {
        id: String,
        #[arg(long)]
        json: bool,
    },
}
