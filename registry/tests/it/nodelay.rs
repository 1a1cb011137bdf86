//! The store's PostgreSQL sockets send without Nagle's delay.
//!
//! sqlx-core 0.9.0 as published leaves `TCP_NODELAY` off (upstream issue
//! launchbadge/sqlx#4335); the workspace patches it (see `[patch.crates-io]`
//! in `Cargo.toml`). Over TLS a statement larger than one 16 KB record goes
//! out as several writes: without the option the kernel holds the second
//! until the server acknowledges the first, which PostgreSQL delays about
//! 40 ms (the delayed-ACK minimum) while it waits for the rest of the
//! message. So every such round trip takes at least 40 ms without the fix
//! and about a millisecond on loopback with it. The bound is the stall
//! itself, far above any noise on the median of twenty round trips; it is the
//! symptom, not a speed target (speed is measured by `sync_bench`).

use std::time::{Duration, Instant};

use cmcp_registry::testing::postgres_admin_url;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};

/// The delayed-ACK minimum on Linux is 40 ms; a stalled round trip cannot
/// be faster than that.
const STALL: Duration = Duration::from_millis(40);

#[tokio::test]
async fn a_40_kb_statement_over_tls_is_not_held_back_by_nagle() {
    let Some(url) = postgres_admin_url() else {
        eprintln!("note: skipped: no PostgreSQL configured");
        return;
    };
    let options: PgConnectOptions = url.parse().expect("a PostgreSQL URL");
    let mut conn = PgConnection::connect_with(&options.ssl_mode(PgSslMode::Require))
        .await
        .expect("the test server accepts TLS (sslmode=require)");
    let tls: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .expect("pg_stat_ssl");
    assert!(tls, "the premise: this connection is encrypted");

    let body = "x".repeat(40 * 1024);
    let mut rounds = Vec::new();
    // The first rounds prepare the statement and run while the kernel still
    // acknowledges at once (quick-ACK after connecting); only the rounds
    // after them show the stall.
    for round in 0..25 {
        let started = Instant::now();
        let n: i32 = sqlx::query_scalar("SELECT length($1)")
            .bind(&body)
            .fetch_one(&mut conn)
            .await
            .expect("round trip");
        assert_eq!(n, 40 * 1024);
        if round >= 5 {
            rounds.push(started.elapsed());
        }
    }
    rounds.sort();
    let median = rounds[rounds.len() / 2];
    conn.close().await.ok();
    assert!(
        median < STALL,
        "the median of 20 round trips of a 40 KB statement took {median:?}: \
         the socket waits for delayed ACKs (TCP_NODELAY is off)"
    );
}
