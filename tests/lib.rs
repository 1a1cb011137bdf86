//! The test kit every end-to-end test uses: databases on SQLite or
//! PostgreSQL with the [`both_backends!`] macro that runs a behaviour on
//! both, the tests' [`cipher`], [`eventually`], and a harness per simulated
//! platform (GitHub, Bitbucket and Jira, Drive) with the assertions that the
//! registry equals the upstream exactly; plus the gateway and a worker
//! running in this process.
//!
//! The database half (`TestDb`, `both_backends!`, `cipher`) is defined in
//! `cmcp_registry::testing` and re-exported here: the gateway's and the
//! admin's own suites use it from there, because a dev-dependency of those
//! crates on this one would build them twice (see that module).

use std::future::Future;
use std::time::Duration;

use cmcp_connectors::HttpConfig;
use cmcp_domain::{ConnectionSpec, Owner, Token};
use cmcp_registry::{NewConnection, Store};
use cmcp_worker::{SyncConfig, SyncContext};

pub use cmcp_registry::both_backends;
pub use cmcp_registry::testing::{TestDb, cipher};

mod atlassian;
mod drive;
mod github;
mod serve;

pub use atlassian::{
    ATLASSIAN_EMAIL, ATLASSIAN_SECRET, atlassian_token, bitbucket, bitbucket_spec, jira,
};
pub use drive::{
    DRIVE_CONNECTION, DriveHarness, DriveRow, assert_drive_registry_matches, drive_registry,
    expected_drive_registry,
};
pub use github::{
    Harness, SIM_TENANT, add_connection, add_connection_with, assert_database_has_no_token,
    assert_registry_matches, expected_aliases, repo_address,
};
pub use serve::{RunningWorker, serve_gateway, start_worker};

pub const TOKEN: &str = "ghp_e2eSecretTokenThatMustNeverLeak42";
pub const CONNECTION: &str = "github-acme";

pub fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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

/// A sync context over `store` with test settings, for any platform.
pub fn sync_context(store: &Store, http: HttpConfig) -> SyncContext {
    SyncContext {
        store: store.clone(),
        cipher: cipher(),
        http,
        sync: SyncConfig {
            lease_ttl: Duration::from_secs(10),
            page_buffer: 4,
            // An upstream outage in a test lasts seconds, not hours.
            delivery_retry_min: Duration::from_millis(200),
            delivery_retry_max: Duration::from_secs(2),
            ..SyncConfig::default()
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

/// How long [`eventually`] waits for something that happens in the
/// background (a delivery processed, a job run).
pub const EVENTUALLY: Duration = Duration::from_secs(60);

/// Poll `check` every 50 ms until it yields a value; fail after
/// [`EVENTUALLY`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, EVENTUALLY, check).await
}

/// [`eventually`] with its own limit, for what takes longer (a fleet of
/// processes finishing a large sync).
pub async fn eventually_within<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs one statement of raw SQL on either backend (a test breaking or
/// ageing the store on purpose); panics on an error.
pub async fn exec(store: &Store, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    match store {
        Store::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(drop),
        Store::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(drop),
    }
    .unwrap_or_else(|e| panic!("{e}"));
}
