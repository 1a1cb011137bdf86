//! Connections: the token sealed at rest, ids checked, duplicates refused.

use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{Cipher, NewConnection, RegistryError};

use crate::support::{TOKEN, add_connection, postgres_only};

both_backends!(
    connection_token_is_sealed_and_opens,
    duplicate_and_invalid_connections_are_refused,
    a_kept_pool_is_open_before_the_first_statement,
);

/// `min_connections` are opened by `connect`, before any statement asks
/// for one (a burst must not wait for a new server process); never more
/// than `max_connections`; none kept opens only the one `connect` checks.
async fn a_kept_pool_is_open_before_the_first_statement(db: TestDb) {
    use cmcp_registry::{Store, StoreOptions};

    let open = |min, max| {
        let url = db.url.clone();
        async move {
            let options = StoreOptions {
                max_connections: max,
                min_connections: min,
                ..StoreOptions::default()
            };
            Store::connect(&url, &options).await.unwrap()
        }
    };
    // A long-running process keeps its whole pool; by default (one-shot
    // commands, tools) connections open as they are asked for.
    let kept = StoreOptions::kept();
    assert_eq!(kept.min_connections, kept.max_connections);
    assert_eq!(StoreOptions::default().min_connections, 0);
    let kept = open(3, 4).await;
    assert_eq!(kept.open_connections(), 3);
    // In use, the kept ones are shared before a fourth is opened.
    assert_eq!(kept.key_by_hash("no-such-key").await.unwrap(), None);
    assert_eq!(kept.open_connections(), 3);
    assert_eq!(open(8, 2).await.open_connections(), 2);
    assert_eq!(open(0, 4).await.open_connections(), 1);
}

/// SQLite: the pool's page cache budget is shared out among its
/// connections, so the cache copies a process holds do not grow with the
/// number of connections the pool hands out in turn.
#[tokio::test]
async fn a_sqlite_pool_shares_out_one_page_cache_budget() {
    use cmcp_registry::{MIN_SQLITE_CACHE_KIB, Store, StoreOptions};

    let db = TestDb::sqlite().await;
    let cache_size = |max, kib| {
        let url = db.url.clone();
        async move {
            let options = StoreOptions {
                max_connections: max,
                sqlite_cache_kib: kib,
                ..StoreOptions::default()
            };
            let Store::Sqlite(pool) = Store::connect(&url, &options).await.unwrap() else {
                panic!("a sqlite url opens a sqlite store");
            };
            let (n,): (i64,) = sqlx::query_as("PRAGMA cache_size")
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    // Negative: KiB, as SQLite reads it.
    assert_eq!(cache_size(8, 1024).await, -128);
    assert_eq!(cache_size(1, 1024).await, -1024);
    assert_eq!(
        cache_size(100, 1024).await,
        -i64::from(MIN_SQLITE_CACHE_KIB)
    );
    assert_eq!(
        StoreOptions::default().sqlite_cache_per_connection_kib(),
        2048 / 10
    );
}

async fn connection_token_is_sealed_and_opens(db: TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let token = db
        .store
        .connection_token(&cipher(), "gh-acme")
        .await
        .unwrap();
    assert_eq!(token.expose(), TOKEN);
    // The row carries no token, and its Debug/JSON cannot leak one.
    let row = db.store.get_connection("gh-acme").await.unwrap();
    assert!(!format!("{row:?}").contains(TOKEN));
    assert!(!serde_json::to_string(&row).unwrap().contains(TOKEN));
    // Another master key cannot open it.
    let other = Cipher::from_key_bytes(&[1u8; 32]).unwrap();
    assert!(db.store.connection_token(&other, "gh-acme").await.is_err());
    // Creating it was audited.
    let audit = db.store.list_audit(10).await.unwrap();
    assert_eq!(audit[0].action, "connection.create");
    assert_eq!(audit[0].target, "connection:gh-acme");
    assert!(!serde_json::to_string(&audit).unwrap().contains(TOKEN));
}

async fn duplicate_and_invalid_connections_are_refused(db: TestDb) {
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let again = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "gh-acme".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(
        matches!(again, Err(RegistryError::AlreadyExists { .. })),
        "{again:?}"
    );
    let bad = db
        .store
        .create_connection(
            &cipher(),
            NewConnection {
                id: "Bad Id!".to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "x".into(),
                    base_url: "https://x".into(),
                },
                owner: Owner::Company,
                token: Token::new("t"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await;
    assert!(matches!(bad, Err(RegistryError::Invalid { .. })), "{bad:?}");
    let missing = db.store.get_connection("nope").await;
    assert!(matches!(missing, Err(RegistryError::NotFound { .. })));
}

/// A transaction its holder lost (a connection given back mid-transaction,
/// a task stuck between statements) does not hold its row locks for as long
/// as the pool keeps the connection: PostgreSQL ends the session once its
/// transaction has sat idle `idle_in_transaction_timeout`, and the writer it
/// blocked (here a lease renewal, as in a sync) goes on.
// Multi-threaded: `TestDb`'s drop blocks one thread while it drops the
// database over connections this runtime drives.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_left_idle_is_ended_and_frees_its_rows() {
    use std::time::Duration;

    use cmcp_registry::{Store, StoreOptions};

    let Some((db, _)) = postgres_only().await else {
        return;
    };
    add_connection(&db.store, "gh-acme", Owner::Company).await;
    let store = Store::connect(
        &db.url,
        &StoreOptions {
            idle_in_transaction_timeout: Duration::from_millis(500),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let Store::Postgres(pool) = &store else {
        unreachable!("a PostgreSQL URL")
    };
    let set: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(set, "500ms");
    assert!(
        store
            .try_acquire_lease("gh-acme", "w1", 60_000)
            .await
            .unwrap()
            == cmcp_registry::LeaseAttempt::Acquired
    );
    let mut lost = pool.begin().await.unwrap();
    sqlx::query("UPDATE connections SET updated_at = updated_at WHERE id = 'gh-acme'")
        .execute(&mut *lost)
        .await
        .unwrap();
    // Without the timeout this waits for ever on the row `lost` holds.
    let renewed = tokio::time::timeout(
        Duration::from_secs(30),
        store.renew_lease("gh-acme", "w1", 60_000),
    )
    .await
    .expect("the renewal was freed")
    .unwrap();
    assert!(renewed);
    let after = sqlx::query("SELECT 1").execute(&mut *lost).await;
    assert!(after.is_err(), "the idle session was ended");
}

/// A pooled connection is not pinged while in steady use, but one that sat
/// idle `PING_IF_IDLE_FOR` is, so a connection the server cut meanwhile (a
/// restart, a failover, an idle timeout on the way) is replaced before any
/// statement sees it. Without the check the next statement would fail on
/// the dead socket.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connection_the_server_cut_is_replaced_before_use() {
    use cmcp_registry::PING_IF_IDLE_FOR;

    let Some((db, pool)) = postgres_only().await else {
        return;
    };
    // Two pooled connections, both idle afterwards.
    let (a, b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    drop((a, b));
    // A dropped connection goes back to the pool on a task of its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pool.num_idle() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "idle connections to cut"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let other = sqlx::PgPool::connect(&db.url).await.unwrap();
    let cut: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
    )
    .fetch_one(&other)
    .await
    .unwrap();
    other.close().await;
    assert!(cut >= 2, "the pool's connections were cut ({cut})");
    tokio::time::sleep(PING_IF_IDLE_FOR + std::time::Duration::from_millis(200)).await;
    for _ in 0..4 {
        assert_eq!(db.store.key_by_hash("no-such-key").await.unwrap(), None);
    }
}
