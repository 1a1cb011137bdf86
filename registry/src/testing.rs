//! The low half of the test kit, shared by every crate's test suite
//! (compiled only with the `testing` feature, or for this crate's own unit
//! tests): databases for tests (a fresh SQLite file, or a fresh PostgreSQL
//! database created on the server named by `CMCP_TEST_POSTGRES_URL`), the
//! [`both_backends!`](crate::both_backends) macro that runs a behaviour on
//! both, the tests' [`cipher`], and [`fuzz`], the runner of every fuzz
//! target. Under `CI=true` PostgreSQL is not
//! optional: when no URL is set the local default is used, and an
//! unreachable server fails the test instead of skipping it.
//!
//! Why here and not in the tests crate: `cmcp-tests` (which re-exports all
//! of this next to the simulator harnesses) depends on the worker and the
//! webhook gateway. A dev-dependency of the gateway, the admin or the
//! registry itself on `cmcp-tests` would build those crates a second time,
//! and their types would not match the ones under test. Everything the
//! suites of those crates share needs nothing above the registry, so it
//! lives at the lowest crate that knows `TestDb`.

use std::time::Duration;

pub mod fuzz;

use crate::NewConnection;
use crate::cipher::Cipher;
use crate::store::{Store, StoreOptions};
use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};

/// Expand each named `async fn(TestDb)` of the invoking module into a
/// SQLite test and a PostgreSQL test (`<module>::sqlite::<name>`,
/// `<module>::postgres::<name>`). Without a configured server the
/// PostgreSQL test passes after a note on stderr, except under `CI=true`
/// (see [`TestDb::postgres`]). The invoking crate needs `tokio` (with its
/// `macros` and multi-thread runtime) among its dependencies.
///
/// ```ignore
/// both_backends!(rename_keeps_space_id, transfer_retires_old_aliases);
///
/// async fn rename_keeps_space_id(db: TestDb) { /* … */ }
/// ```
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::testing::TestDb::sqlite().await;
                    super::$name(db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = $crate::testing::TestDb::postgres().await else { return };
                    super::$name(db).await;
                }
            )*
        }
    };
}

/// The master key of every test: a fixed key, so a store written by one
/// helper opens with any other's cipher.
pub fn cipher() -> Cipher {
    Cipher::from_key_bytes(&[42u8; 32]).expect("a 32-byte key")
}

/// Create a company connection `id` of `platform` (scope `acme`, an
/// unreachable base URL, token `t`) and return its webhook secret.
pub async fn company_connection(store: &Store, id: &str, platform: Platform) -> String {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform,
                    scope: "acme".into(),
                    base_url: "http://127.0.0.1:9".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .expect("test connection");
    store
        .current_webhook_secret(&cipher(), id)
        .await
        .expect("its webhook secret")
        .expose()
        .to_owned()
}

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
        Some(Self::postgres_on(&admin_url, version).await)
    }

    /// A new database on the server of `admin_url`, keeping its query (so
    /// `?sslmode=require` gives a TLS store, `disable` a plain one).
    pub async fn postgres_on(admin_url: &str, version: Option<i64>) -> TestDb {
        let admin_url = admin_url.to_owned();
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
                ..StoreOptions::default()
            },
        )
        .await
        .expect("open test database");
        match version {
            None => store.migrate().await.expect("migrate postgres"),
            Some(v) => store.migrate_to(v).await.expect("migrate postgres"),
        }
        TestDb {
            store,
            url,
            _dir: None,
            pg_cleanup: Some((admin_url, name)),
        }
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
                // Bounded: a connection given back to the pool just before
                // this drop is returned by a task of the test's runtime,
                // which this drop blocks. On a current-thread runtime that
                // task never runs, and an unbounded close waited for it
                // forever; FORCE below ends such a connection instead.
                let _ = tokio::time::timeout(Duration::from_secs(1), store.close()).await;
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

/// A signed GitHub delivery of connection `gh` (the test kit's usual
/// company connection), keyed `key`, to be stored as `status`.
pub fn delivery(key: &str, status: crate::DeliveryStatus) -> crate::NewDelivery {
    crate::NewDelivery {
        connection_id: "gh".to_owned(),
        platform: Platform::Github,
        delivery_key: key.to_owned(),
        event: "repository.renamed".to_owned(),
        headers: vec![("x-github-event".to_owned(), "repository".to_owned())],
        body: br#"{"action":"renamed"}"#.to_vec(),
        verification: "hmac-sha256".to_owned(),
        status,
        error: None,
        replay_key: None,
    }
}

/// Each delivery the `handle-delivery` jobs name, with the job that names
/// it (a batch's deliveries share one). Panics when a delivery is named by
/// two jobs.
pub async fn job_of_each_delivery(store: &Store) -> std::collections::HashMap<String, String> {
    let mut named = std::collections::HashMap::new();
    for (job, args) in store.delivery_jobs().await.expect("read the delivery jobs") {
        for id in args.ids() {
            if let Some(other) = named.insert(id.clone(), job.clone()) {
                panic!("delivery {id} is named by jobs {other} and {job}");
            }
        }
    }
    named
}

/// Wait until every committed change is readable from the change feed. On
/// PostgreSQL the feed holds back while any older transaction in the
/// cluster is still open (other tests' included); SQLite returns at once.
pub async fn settle_changes(store: &Store) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let newest: Option<(i64, i64)> = match store {
            Store::Sqlite(_) => return,
            Store::Postgres(pool) => {
                sqlx::query_as("SELECT tx, id FROM space_changes ORDER BY tx DESC, id DESC LIMIT 1")
                    .fetch_optional(pool)
                    .await
                    .expect("read the newest change")
            }
        };
        let head = store.change_head().await.expect("read the feed head");
        if newest.is_none_or(|(tx, id)| (head.tx, head.id) >= (tx, id)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the change feed did not catch up within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Log a round's wait for the matching turn after `after` instead of
/// [`crate::store::MATCHING_WAIT_WARNING`] (for the whole process).
pub fn matching_wait_warning_after(after: std::time::Duration) {
    crate::store::MATCHING_WAIT_WARNING_MS.store(
        u64::try_from(after.as_millis()).unwrap_or(u64::MAX).max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// A round of mapping proposals that another process of the store is
/// running, until [`AnotherRound::end`]: on PostgreSQL a connection of its
/// own, outside every pool of this process, holding the rounds' advisory
/// lock; on SQLite (one process holds an embedded store) the turn taken
/// through another pool of the file.
pub enum AnotherRound {
    Postgres(sqlx::PgConnection),
    Sqlite(Store, crate::MatchingTurn),
}

impl AnotherRound {
    pub async fn begin(db: &TestDb) -> AnotherRound {
        AnotherRound::of(db, None).await
    }

    /// A round of `person`'s suggestions ([`Store::suggestion_turn`]).
    pub async fn of_person(db: &TestDb, person: &str) -> AnotherRound {
        AnotherRound::of(db, Some(person)).await
    }

    async fn of(db: &TestDb, person: Option<&str>) -> AnotherRound {
        match &db.store {
            Store::Postgres(_) => {
                use sqlx::Connection;
                let mut c = sqlx::PgConnection::connect(&db.url)
                    .await
                    .expect("another connection");
                crate::store::advisory_lock(person, true)
                    .execute(&mut c)
                    .await
                    .expect("the rounds' lock");
                AnotherRound::Postgres(c)
            }
            Store::Sqlite(_) => {
                let other = Store::connect(&db.url, &StoreOptions::default())
                    .await
                    .expect("another pool");
                let turn = match person {
                    None => other.matching_turn().await,
                    Some(person) => other.suggestion_turn(person).await,
                }
                .expect("the file's turn");
                AnotherRound::Sqlite(other, turn)
            }
        }
    }

    pub async fn end(self) {
        match self {
            AnotherRound::Postgres(c) => {
                use sqlx::Connection;
                c.close().await.expect("close the other connection");
            }
            AnotherRound::Sqlite(other, turn) => {
                turn.end().await.expect("give the turn back");
                other.close().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test on a current-thread runtime (plain `#[tokio::test]`) that
    /// used a PostgreSQL store and ended right after giving a connection
    /// back hung for ever in this drop, which waited for the pool to close
    /// while blocking the only thread that could return the connection. It
    /// is run on a thread of its own here, so that a hang fails the test.
    #[test]
    fn a_postgres_database_is_dropped_after_a_current_thread_test() {
        let Some(admin_url) = postgres_admin_url() else {
            return;
        };
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let name = rt.block_on(async {
                let db = TestDb::postgres_on(&admin_url, None).await;
                let Store::Postgres(pool) = &db.store else {
                    unreachable!("a PostgreSQL store")
                };
                let tx = pool.begin().await.unwrap();
                tx.rollback().await.unwrap();
                let name = db.pg_cleanup.as_ref().map(|(_, n)| n.clone()).unwrap();
                drop(db);
                name
            });
            let _ = done.send(name);
        });
        let name = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the test database's drop returned");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let left: i64 = rt.block_on(async {
            let admin = sqlx::PgPool::connect(&postgres_admin_url().unwrap())
                .await
                .unwrap();
            let (n,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
                    .bind(&name)
                    .fetch_one(&admin)
                    .await
                    .unwrap();
            admin.close().await;
            n
        });
        assert_eq!(left, 0, "{name} was dropped");
    }
}
