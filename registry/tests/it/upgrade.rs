//! Existing databases migrate forward: data written under an older schema
//! is still there, and means the same, after the newer migrations.

use cmcp_domain::{Owner, SpaceAddress, SpaceStatus};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SightingState, Store};

/// The last migration before spaces had sightings.
const BEFORE_SIGHTINGS: i64 = 20261130000007;

fn space(id: &str) -> SpaceAddress {
    format!("space:github-repo:github.com/{id}")
        .parse()
        .unwrap()
}

/// Rows as the old schema held them: one company connection that wrote an
/// active and a missing space, and a person's connection with one space.
async fn write_old_rows(store: &Store) {
    macro_rules! rows {
        ($pool:expr) => {{
            let pool = $pool;
            for (id, owner) in [("gh-acme", "company"), ("gh-alice", "person:alice")] {
                sqlx::query(
                    "INSERT INTO connections (id, platform, scope, base_url, owner, token_sealed, created_at, updated_at) \
                     VALUES ($1, 'github', 'acme', 'https://api.github.com', $2, $3, 1000, 1000)",
                )
                .bind(id)
                .bind(owner)
                .bind(vec![1u8, 2, 3])
                .execute(pool)
                .await
                .expect("old connection");
            }
            for (stable, conn, owner, status, missing) in [
                ("11", "gh-acme", "company", "active", None),
                ("12", "gh-acme", "company", "missing", Some(5000i64)),
                ("21", "gh-alice", "person:alice", "active", None),
            ] {
                sqlx::query(
                    "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, \
                     status, first_seen_at, last_changed_at, missing_since) \
                     VALUES ($1, 'github-repo', 'github.com', $2, $3, $4, $5, $6, 2000, 4000, $7)",
                )
                .bind(space(stable).to_string())
                .bind(stable)
                .bind(conn)
                .bind(owner)
                .bind(format!("acme/r{stable}"))
                .bind(status)
                .bind(missing)
                .execute(pool)
                .await
                .expect("old space");
            }
        }};
    }
    match store {
        Store::Sqlite(pool) => rows!(pool),
        Store::Postgres(pool) => rows!(pool),
    }
}

async fn connection_becomes_the_first_sighting(db: TestDb) {
    write_old_rows(&db.store).await;
    db.store.migrate().await.expect("migrate forward");

    let active = db.store.sightings(&space("11")).await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].connection_id, "gh-acme");
    assert_eq!(active[0].state, SightingState::Seen);
    assert_eq!(active[0].first_seen_at, 2000);
    assert_eq!(active[0].last_seen_at, 4000);

    let missing = db.store.sightings(&space("12")).await.unwrap();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].state, SightingState::Missing);
    assert_eq!(missing[0].state_since, 5000);

    let private = db.store.sightings(&space("21")).await.unwrap();
    assert_eq!(private[0].connection_id, "gh-alice");
    assert_eq!(
        db.store
            .get_space(&space("21"))
            .await
            .unwrap()
            .unwrap()
            .owner,
        Owner::Person("alice".into())
    );
    // The store reads the migrated rows through the sightings.
    assert_eq!(
        db.store.count_spaces(Some("gh-acme"), None).await.unwrap(),
        2
    );
    assert_eq!(
        db.store
            .count_spaces(Some("gh-acme"), Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        1
    );
    assert!(db.store.owner_changes(0, 0).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_old_connection_becomes_the_first_sighting() {
    connection_becomes_the_first_sighting(TestDb::sqlite_migrated_to(BEFORE_SIGHTINGS).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_old_connection_becomes_the_first_sighting() {
    let Some(db) = TestDb::postgres_migrated_to(BEFORE_SIGHTINGS).await else {
        return;
    };
    connection_becomes_the_first_sighting(db).await;
}
