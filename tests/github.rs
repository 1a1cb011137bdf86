//! The GitHub harness: a registry, a simulated GitHub org, a connection
//! between them, and the assertions that the registry equals the upstream
//! exactly and that no byte of the database holds the token.

use std::collections::{BTreeMap, BTreeSet};

use cmcp_connectors::HttpConfig;
use cmcp_domain::{
    AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceStatus, Token,
    Visibility,
};
use cmcp_fixtures::{GithubSim, GithubSimConfig, RepoSnapshot};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewConnection, SpaceFilter, Store};
use cmcp_worker::SyncContext;

use crate::{CONNECTION, TOKEN, init_tls, sync_context};

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
        let ctx = sync_context(&db.store, http);
        Harness { db, sim, ctx }
    }

    pub fn store(&self) -> &Store {
        &self.db.store
    }
}

pub async fn add_connection(store: &Store, id: &str, base_url: &str, owner: Owner) {
    add_connection_with(store, id, base_url, owner, serde_json::json!({})).await;
}

/// [`add_connection`] with connection `settings` (e.g. `first_commits`).
pub async fn add_connection_with(
    store: &Store,
    id: &str,
    base_url: &str,
    owner: Owner,
    settings: serde_json::Value,
) {
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
                settings,
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

/// The aliases a repo of a company connection must have, as (kind,
/// normalised value); company connections record no `first-commit` unless
/// their settings ask for it.
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
