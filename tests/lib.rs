//! Shared pieces of the end-to-end tests: a registry on SQLite or
//! PostgreSQL, a simulated GitHub org, a connection between them, and the
//! assertion that the registry equals the upstream exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cmcp_connectors::HttpConfig;
use cmcp_domain::{
    AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceStatus, Token,
    Visibility,
};
use cmcp_fixtures::{GithubSim, GithubSimConfig, RepoSnapshot};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{Cipher, NewConnection, SpaceFilter, Store};
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, router};
use cmcp_worker::{
    Queue, QueueConfig, SyncConfig, SyncContext, WorkerOptions, WorkerState, run_workers,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "ghp_e2eSecretTokenThatMustNeverLeak42";
pub const CONNECTION: &str = "github-acme";

pub fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn cipher() -> Cipher {
    Cipher::from_key_bytes(&[42u8; 32]).expect("key")
}

/// Retries fast enough for tests; the semantics are the production ones.
pub fn fast_http() -> HttpConfig {
    HttpConfig {
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(200),
        secondary_limit_min_wait: Duration::from_millis(100),
        max_attempts: 8,
        per_page: 100,
        ..HttpConfig::default()
    }
}

pub struct Harness {
    pub db: TestDb,
    pub sim: GithubSim,
    pub ctx: SyncContext,
}

impl Harness {
    pub async fn start(db: TestDb, sim_cfg: GithubSimConfig, http: HttpConfig) -> Harness {
        init_tls();
        let sim = GithubSim::start(GithubSimConfig {
            token: Some(TOKEN.to_owned()),
            ..sim_cfg
        })
        .await
        .expect("simulator");
        add_connection(&db.store, CONNECTION, &sim.base_url(), Owner::Company).await;
        let ctx = SyncContext {
            store: db.store.clone(),
            cipher: cipher(),
            http,
            sync: SyncConfig {
                lease_ttl: Duration::from_secs(10),
                page_buffer: 4,
            },
            holder: "test-worker".to_owned(),
        };
        Harness { db, sim, ctx }
    }

    pub fn store(&self) -> &Store {
        &self.db.store
    }
}

pub async fn add_connection(store: &Store, id: &str, base_url: &str, owner: Owner) {
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
                owner,
                token: Token::new(TOKEN),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .expect("add connection");
}

/// The tenant of a connection to the simulated GitHub: the host it listens
/// on (only `https://api.github.com` may claim `github.com`).
pub const SIM_TENANT: &str = "127.0.0.1";

pub fn repo_address(id: u64) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubRepo, SIM_TENANT, &id.to_string()).expect("address")
}

/// The aliases a repo must have, as (kind, normalised value).
pub fn expected_aliases(r: &RepoSnapshot) -> BTreeSet<(AliasKind, String)> {
    [
        (AliasKind::Name, r.name.as_str()),
        (AliasKind::FullName, r.full_name.as_str()),
        (AliasKind::WebUrl, r.html_url.as_str()),
        (AliasKind::GitRemote, r.clone_url.as_str()),
        (AliasKind::GitRemote, r.ssh_url.as_str()),
        (AliasKind::HostId, r.node_id.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k, k.normalise(v).expect("normalises")))
    .collect()
}

/// The registry's active repo spaces of the connection equal the
/// simulator's org listing: same ids, names, state and exact active aliases.
pub async fn assert_registry_matches(store: &Store, sim: &GithubSim) {
    let spaces = store
        .list_spaces(&SpaceFilter {
            connection_id: Some(CONNECTION.to_owned()),
            status: Some(SpaceStatus::Active),
            ..Default::default()
        })
        .await
        .expect("list");
    let repos: BTreeMap<SpaceAddress, &cmcp_registry::SpaceRow> = spaces
        .iter()
        .filter(|s| s.address.kind() == SpaceKind::GithubRepo)
        .map(|s| (s.address.clone(), s))
        .collect();
    let upstream = sim.repos();
    assert_eq!(
        repos.len(),
        upstream.len(),
        "active repo spaces vs upstream repos"
    );
    let mut aliases: BTreeMap<SpaceAddress, BTreeSet<(AliasKind, String)>> = BTreeMap::new();
    for a in store.active_aliases(CONNECTION).await.expect("aliases") {
        aliases
            .entry(a.space_address.clone())
            .or_default()
            .insert((a.kind, a.value));
    }
    let org = SpaceAddress::new(SpaceKind::GithubOrg, SIM_TENANT, &sim.org_id().to_string())
        .expect("org");
    for r in &upstream {
        let address = repo_address(r.id);
        let space = repos
            .get(&address)
            .unwrap_or_else(|| panic!("{address} ({}) missing from the registry", r.full_name));
        assert_eq!(space.display_name, r.full_name, "{address}");
        assert_eq!(space.archived, r.archived, "{address}");
        let vis = if r.private {
            Visibility::Private
        } else {
            Visibility::Public
        };
        assert_eq!(space.visibility, Some(vis), "{address}");
        assert_eq!(space.container.as_ref(), Some(&org), "{address}");
        assert_eq!(
            aliases.get(&address),
            Some(&expected_aliases(r)),
            "{address} aliases"
        );
    }
    let org_space = spaces
        .iter()
        .find(|s| s.address == org)
        .expect("the org is a space");
    assert_eq!(
        org_space.display_name.to_lowercase(),
        sim.org().to_lowercase()
    );
}

/// Every byte of the SQLite file (with its WAL) or every row of every
/// PostgreSQL table, the queue's included, is free of the token.
pub async fn assert_database_has_no_token(store: &Store, url: &str) {
    match store {
        Store::Sqlite(pool) => {
            let _ = sqlx::query("PRAGMA wal_checkpoint(FULL)")
                .execute(pool)
                .await;
            let path = url.trim_start_matches("sqlite://");
            let mut checked = 0;
            for suffix in ["", "-wal", "-shm"] {
                if let Ok(bytes) = std::fs::read(format!("{path}{suffix}")) {
                    checked += bytes.len();
                    assert!(
                        !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
                        "token found in {path}{suffix}"
                    );
                }
            }
            assert!(checked > 10_000, "the database file was read");
        }
        Store::Postgres(pool) => {
            let tables: Vec<(String,)> = sqlx::query_as(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname IN ('public', 'apalis')",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            assert!(tables.len() >= 5, "{tables:?}");
            for (table,) in tables {
                let (text,): (Option<String>,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT string_agg(t::text, ' ') FROM {table} t"
                )))
                .fetch_one(pool)
                .await
                .unwrap();
                assert!(
                    !text.unwrap_or_default().contains(TOKEN),
                    "token found in {table}"
                );
            }
        }
    }
}

/// A sync context over `store` with test settings, for any platform.
pub fn sync_context(store: &Store, http: HttpConfig) -> SyncContext {
    SyncContext {
        store: store.clone(),
        cipher: cipher(),
        http,
        sync: SyncConfig {
            lease_ttl: Duration::from_secs(10),
            page_buffer: 4,
        },
        holder: "test-worker".to_owned(),
    }
}

/// Adds a company connection of any platform with `token` as its secret.
pub async fn add_spec_connection(store: &Store, id: &str, spec: ConnectionSpec, token: Token) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec,
                owner: Owner::Company,
                token,
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .expect("add connection");
}

// ---------------------------------------------------------------- Drive --

/// The Drive connection of the Drive end-to-end tests.
pub const DRIVE_CONNECTION: &str = "drive-example";

/// A registry, a simulated Workspace domain, and a Drive connection between
/// them (listing `depth` folder levels).
pub struct DriveHarness {
    pub db: TestDb,
    pub sim: cmcp_fixtures::DriveSim,
    pub ctx: SyncContext,
    pub depth: u32,
}

impl DriveHarness {
    pub async fn start(
        db: TestDb,
        sim_cfg: cmcp_fixtures::DriveSimConfig,
        depth: u32,
    ) -> DriveHarness {
        init_tls();
        let sim = cmcp_fixtures::DriveSim::start(sim_cfg)
            .await
            .expect("drive simulator");
        db.store
            .create_connection(
                &cipher(),
                NewConnection {
                    id: DRIVE_CONNECTION.to_owned(),
                    spec: ConnectionSpec {
                        platform: Platform::Drive,
                        scope: sim.domain(),
                        base_url: sim.base_url(),
                    },
                    owner: Owner::Company,
                    token: Token::new(cmcp_fixtures::drive::TEST_SERVICE_ACCOUNT_JSON),
                    settings: serde_json::json!({
                        "subject": "admin@example.com",
                        "depth": depth,
                        "domain_admin_access": true,
                        "token_url": sim.token_url(),
                    }),
                },
                "test",
            )
            .await
            .expect("add drive connection");
        let ctx = SyncContext {
            store: db.store.clone(),
            cipher: cipher(),
            http: fast_http(),
            sync: SyncConfig {
                lease_ttl: Duration::from_secs(10),
                page_buffer: 4,
            },
            holder: "test-worker".to_owned(),
        };
        DriveHarness {
            db,
            sim,
            ctx,
            depth,
        }
    }

    pub fn store(&self) -> &Store {
        &self.db.store
    }

    pub fn folder_address(&self, id: &str) -> SpaceAddress {
        SpaceAddress::new(SpaceKind::DriveFolder, &self.sim.domain(), id).expect("address")
    }

    pub fn drive_address(&self, id: &str) -> SpaceAddress {
        SpaceAddress::new(SpaceKind::DriveSharedDrive, &self.sim.domain(), id).expect("address")
    }
}

/// One Drive space as compared: display name, container, active aliases.
pub type DriveRow = (String, Option<SpaceAddress>, BTreeSet<(AliasKind, String)>);

fn normalised(pairs: [(AliasKind, &str); 3]) -> BTreeSet<(AliasKind, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (k, k.normalise(v).expect("normalises")))
        .collect()
}

/// What the registry must hold for the simulator's domain at `depth`:
/// every drive, every non-trashed folder within the depth.
pub fn expected_drive_registry(h: &DriveHarness) -> BTreeMap<SpaceAddress, DriveRow> {
    let mut out = BTreeMap::new();
    for d in h.sim.drives() {
        let url = format!("https://drive.google.com/drive/folders/{}", d.id);
        out.insert(
            h.drive_address(&d.id),
            (
                d.name.clone(),
                None,
                normalised([
                    (AliasKind::Name, &d.name),
                    (AliasKind::Path, &d.name),
                    (AliasKind::WebUrl, &url),
                ]),
            ),
        );
    }
    for f in h.sim.folders() {
        if f.trashed || f.depth > h.depth {
            continue;
        }
        let container = if f.parent == f.drive_id {
            h.drive_address(&f.parent)
        } else {
            h.folder_address(&f.parent)
        };
        out.insert(
            h.folder_address(&f.id),
            (
                f.path.clone(),
                Some(container),
                normalised([
                    (AliasKind::Name, &f.name),
                    (AliasKind::Path, &f.path),
                    (AliasKind::WebUrl, &f.web_view_link),
                ]),
            ),
        );
    }
    out
}

/// The registry's active spaces of the Drive connection, as compared.
pub async fn drive_registry(store: &Store) -> BTreeMap<SpaceAddress, DriveRow> {
    let spaces = store
        .list_spaces(&SpaceFilter {
            connection_id: Some(DRIVE_CONNECTION.to_owned()),
            status: Some(SpaceStatus::Active),
            ..Default::default()
        })
        .await
        .expect("list");
    let mut aliases: BTreeMap<SpaceAddress, BTreeSet<(AliasKind, String)>> = BTreeMap::new();
    for a in store
        .active_aliases(DRIVE_CONNECTION)
        .await
        .expect("aliases")
    {
        aliases
            .entry(a.space_address.clone())
            .or_default()
            .insert((a.kind, a.value));
    }
    spaces
        .into_iter()
        .map(|s| {
            let a = aliases.remove(&s.address).unwrap_or_default();
            (s.address, (s.display_name, s.container, a))
        })
        .collect()
}

/// The registry's active Drive spaces equal the simulator's domain exactly.
pub async fn assert_drive_registry_matches(h: &DriveHarness) {
    let got = drive_registry(h.store()).await;
    let want = expected_drive_registry(h);
    assert_eq!(got.len(), want.len(), "active Drive spaces vs upstream");
    for (address, row) in &want {
        assert_eq!(got.get(address), Some(row), "{address}");
    }
}

/// The webhook gateway (webhook routes on, cipher of the tests) on a free
/// loopback port; returns its base URL.
pub async fn serve_gateway(store: &Store) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(EdgeState {
        store: store.clone(),
        metrics: None,
        hooks: Some(Hooks {
            cipher: cipher(),
            config: GatewayConfig::default(),
        }),
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), task)
}

/// A worker running in this process until `stop`.
pub struct RunningWorker {
    stop: oneshot::Sender<()>,
    task: JoinHandle<cmcp_worker::Result<()>>,
}

/// Start a worker on the store's queues with `ctx` (its holder renamed to
/// the worker's unique name), polling every 50 ms.
pub fn start_worker(store: &Store, ctx: &SyncContext) -> RunningWorker {
    let qcfg = QueueConfig {
        poll_interval: Duration::from_millis(50),
        ..QueueConfig::default()
    };
    let opts = WorkerOptions::unique("it");
    let mut ctx = ctx.clone();
    ctx.holder = opts.name.clone();
    let state = Arc::new(WorkerState {
        ctx,
        queue: Queue::new(store, &qcfg),
        queue_config: qcfg,
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run_workers(state, opts, async move {
        let _ = stopped.await;
    }));
    RunningWorker { stop, task }
}

impl RunningWorker {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}
