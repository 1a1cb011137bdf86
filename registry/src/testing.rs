//! Databases for tests, shared by every crate's test suite: a fresh SQLite
//! file, or a fresh PostgreSQL database created on the server named by
//! `CMCP_TEST_POSTGRES_URL`. Under `CI=true` PostgreSQL is not optional: when
//! no URL is set the local default is used, and an unreachable server fails
//! the test instead of skipping it.

use std::time::Duration;

use crate::store::{Store, StoreOptions};

pub const POSTGRES_URL_ENV: &str = "CMCP_TEST_POSTGRES_URL";
const CI_DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A migrated store on its own database, removed again on drop.
pub struct TestDb {
    pub store: Store,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg_cleanup: Option<(String, String)>,
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The PostgreSQL server tests should use, if any.
pub fn postgres_admin_url() -> Option<String> {
    match std::env::var(POSTGRES_URL_ENV) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ if in_ci() => Some(CI_DEFAULT_POSTGRES_URL.to_owned()),
        _ => None,
    }
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        Self::sqlite_at(None).await
    }

    /// A SQLite store migrated only up to `version`, for upgrade tests.
    pub async fn sqlite_migrated_to(version: i64) -> TestDb {
        Self::sqlite_at(Some(version)).await
    }

    async fn sqlite_at(version: Option<i64>) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("registry.db");
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&url, &StoreOptions::default())
            .await
            .expect("open sqlite");
        match version {
            None => store.migrate().await.expect("migrate sqlite"),
            Some(v) => store.migrate_to(v).await.expect("migrate sqlite"),
        }
        TestDb {
            store,
            url,
            _dir: Some(dir),
            pg_cleanup: None,
        }
    }

    /// `None` (with a note on stderr) when no PostgreSQL is configured and
    /// this is not CI. Panics when one is configured but unreachable.
    pub async fn postgres() -> Option<TestDb> {
        Self::postgres_at(None).await
    }

    /// A PostgreSQL store migrated only up to `version`, for upgrade tests.
    pub async fn postgres_migrated_to(version: i64) -> Option<TestDb> {
        Self::postgres_at(Some(version)).await
    }

    async fn postgres_at(version: Option<i64>) -> Option<TestDb> {
        let Some(admin_url) = postgres_admin_url() else {
            eprintln!(
                "note: PostgreSQL half skipped: set {POSTGRES_URL_ENV} (CI=true uses {CI_DEFAULT_POSTGRES_URL})"
            );
            return None;
        };
        let name = format!("cmcp_test_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin_url} is unreachable: {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let url = replace_database(&admin_url, &name);
        let store = Store::connect(
            &url,
            &StoreOptions {
                max_connections: 10,
                connect_timeout: Duration::from_secs(10),
            },
        )
        .await
        .expect("open test database");
        match version {
            None => store.migrate().await.expect("migrate postgres"),
            Some(v) => store.migrate_to(v).await.expect("migrate postgres"),
        }
        Some(TestDb {
            store,
            url,
            _dir: None,
            pg_cleanup: Some((admin_url, name)),
        })
    }
}

/// The same server URL pointing at another database.
pub fn replace_database(url: &str, db: &str) -> String {
    let mut u = url::Url::parse(url).expect("postgres url");
    u.set_path(&format!("/{db}"));
    u.to_string()
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.pg_cleanup.take() else {
            return;
        };
        let store = self.store.clone();
        // Drop runs outside any async context we can rely on: use a thread
        // with its own small runtime.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                store.close().await;
                if let Ok(admin) = sqlx::PgPool::connect(&admin_url).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&admin)
                    .await;
                    admin.close().await;
                }
            });
        })
        .join();
    }
}
