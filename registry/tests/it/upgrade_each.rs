//! Every migration applies on top of the schema before it with data in it,
//! in both dialects, and that data survives.
//!
//! For each migration N (read from `migrations/<dialect>/`), a new database
//! gets the migrations before N one at a time, each followed by its seed:
//! representative rows written under the schema as it was right after that
//! migration. Before N, every table that exists must hold a row (so a new
//! table without seed rows fails); then N and the rest are applied and
//! every row of every earlier table must still be there, with the same
//! value in every column that still exists. A migration missing from
//! [`SEEDS`] fails the test: a new migration brings its seed rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use cmcp_registry::Store;
use cmcp_registry::testing::TestDb;

/// Rows each migration's schema can hold, written right after it ran.
/// `{blob}` is a small binary value in the dialect's spelling.
const SEEDS: &[(i64, &str)] = &[
    (
        20261130000001,
        "INSERT INTO connections (id, platform, scope, base_url, owner, token_sealed, settings, status, risks, lease_owner, lease_until, created_at, updated_at) \
           VALUES ('gh-acme', 'github', 'acme', 'https://api.github.com', 'company', {blob}, '{}', 'enabled', '[]', 'w1', 5000, 1000, 1000);
         INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, container, status, archived, trashed, visibility, first_seen_at, last_changed_at, missing_since, tombstoned_at) \
           VALUES ('space:github-repo:github.com/11', 'github-repo', 'github.com', '11', 'gh-acme', 'company', 'acme/r11', NULL, 'active', FALSE, FALSE, 'private', 2000, 3000, NULL, NULL);
         INSERT INTO aliases (space_address, kind, value, raw, valid_from, valid_to) \
           VALUES ('space:github-repo:github.com/11', 'full-name', 'acme/r11', 'acme/r11', 2000, NULL);
         INSERT INTO sync_runs (id, connection_id, triggered_by, worker, outcome, started_at, finished_at, pages, requests, items_seen, created, error) \
           VALUES ('run-1', 'gh-acme', 'cli', 'w1', 'partial', 1000, 2000, 3, 4, 60, 60, 'page 2 failed');
         INSERT INTO audit_log (at, actor, action, target, reason, before_json, after_json) \
           VALUES (1000, 'cli:ops', 'connection.create', 'connection:gh-acme', 'onboarding', NULL, '{\"id\":\"gh-acme\"}')",
    ),
    (
        20261130000002,
        "INSERT INTO rate_budgets (budget_key, remaining, request_limit, reset_at, window_floor, paused_until, in_flight, updated_at) \
           VALUES ('github:fp:core', 4211, 5000, 9000, NULL, NULL, 1, 1000);
         INSERT INTO rate_budget_users (connection_id, budget_key, updated_at) VALUES ('gh-acme', 'github:fp:core', 1000)",
    ),
    (
        20261130000003,
        "INSERT INTO drive_page_tokens (connection_id, drive_id, page_token, updated_at) VALUES ('gh-acme', 'd1', 'tok-1', 1000)",
    ),
    (
        20261130000004,
        "INSERT INTO http_cache (connection_id, url, etag, body, link, fetched_at) \
           VALUES ('gh-acme', 'https://api.github.com/orgs/acme/repos?page=1', 'W/\"e1\"', '[]', '<x>; rel=\"next\"', 1000)",
    ),
    (
        20261130000005,
        "INSERT INTO webhook_secrets (connection_id, secret_sealed, created_at, valid_until) VALUES ('gh-acme', {blob}, 1000, NULL);
         INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at) \
           VALUES ('dl-1', 'gh-acme', 'github', 'hook:1:guid-1', 'repository.renamed', 1000, '[[\"x-github-event\",\"repository\"]]', {blob}, 'hmac-sha256', 'processed', NULL, 1100)",
    ),
    (
        20261130000006,
        "INSERT INTO places (id, kind, name, place_key, status, retired_at, created_at, updated_at) VALUES ('pl-1', 'project', 'Payments', 'PAY', 'active', NULL, 1000, 1000);
         INSERT INTO place_aliases (place_id, kind, value, raw, valid_from, valid_to) VALUES ('pl-1', 'name', 'payments', 'Payments', 1000, NULL);
         INSERT INTO proposals (container, platform, space_name, target, place_id, create_name, evidence_json, evidence_text, confidence, conflict, state, evidence_hash, created_at, decided_by, decided_at, reason) \
           VALUES ('space:github-repo:github.com/11', 'github', 'acme/r11', 'place:pl-1', 'pl-1', NULL, '[]', 'name equal', 80, FALSE, 'approved', 'h1', 1000, 'admin', 1500, 'same team');
         INSERT INTO mappings (space_address, place_id, approved_by, proposal_id, created_at) VALUES ('space:github-repo:github.com/11', 'pl-1', 'admin', NULL, 1500);
         INSERT INTO api_keys (id, name, key_hash, role, powers, created_at, created_by, revoked_at) VALUES ('key_1', 'ops', 'hash-1', 'admin', 'mappings,connections', 1000, 'cli', NULL);
         INSERT INTO admin_sessions (id_hash, key_id, csrf_hash, created_at, expires_at) VALUES ('sess-1', 'key_1', 'csrf-1', 1000, 99000)",
    ),
    (
        20261130000007,
        "INSERT INTO drive_channels (connection_id, drive_id, channel_id, token_sealed, resource_id, expiration, created_at, stopped_at) \
           VALUES ('gh-acme', 'd1', 'ch-1', {blob}, 'res-1', 5000, 1000, NULL)",
    ),
    (
        20261201090500,
        "INSERT INTO master_key_canary (id, sealed, created_at) VALUES (1, {blob}, 1000)",
    ),
    (
        20261201091500,
        "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, status, first_seen_at, last_changed_at, missing_since) \
           VALUES ('space:github-repo:github.com/12', 'github-repo', 'github.com', '12', 'gh-acme', 'company', 'acme/r12', 'missing', 2000, 4000, 4000);
         INSERT INTO sightings (connection_id, space_address, state, first_seen_at, last_seen_at, state_since) \
           VALUES ('gh-acme', 'space:github-repo:github.com/12', 'missing', 2000, 3000, 4000)",
    ),
    (
        20261201091501,
        "INSERT INTO owner_changes (space_address, from_owner, to_owner, person, connection_id, at) \
           VALUES ('space:github-repo:github.com/11', 'person:alice', 'company', 'alice', 'gh-acme', 3000)",
    ),
    (
        20261201100000,
        "INSERT INTO space_changes (kind, space_address, owner, detail, at) \
           VALUES ('state-changed', 'space:github-repo:github.com/12', 'company', '{\"state\":\"missing\"}', 4000)",
    ),
    (
        20261201100001,
        "INSERT INTO api_keys (id, name, key_hash, role, powers, created_at, created_by, revoked_at, person) \
           VALUES ('key_2', 'alice', 'hash-2', 'member', '', 1000, 'cli', NULL, 'alice')",
    ),
    (
        20261201110000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, attempts, next_attempt_at, body_sha256) \
           VALUES ('dl-2', 'gh-acme', 'github', 'hook:1:guid-2', 'repository.deleted', 2000, '[]', {blob}, 'hmac-sha256', 'failed', 'HTTP 500', 2100, 3, NULL, 'abc123')",
    ),
    (
        20261201120000,
        "INSERT INTO drift_changes (connection_id, run_id, space_address, kind, at) VALUES ('gh-acme', 'run-1', 'space:github-repo:github.com/11', 'renamed', 2000);
         INSERT INTO connection_holds (connection_id, run_id, would_miss, seen_before, reason, since) VALUES ('gh-acme', 'run-1', 5, 10, 'too many would go', 2000);
         INSERT INTO held_missing (connection_id, space_address) VALUES ('gh-acme', 'space:github-repo:github.com/12');
         INSERT INTO schedule_ticks (schedule, connection_id, tick_at, queued_at) VALUES ('reconcile', 'gh-acme', 60000, 60000)",
    ),
    (
        20261201150000,
        "INSERT INTO place_members (place_id, person, added_at) VALUES ('pl-1', 'alice', 1000);
         INSERT INTO suggestions (person, space_address, target, kind, place_id, create_name, evidence_json, evidence_text, confidence, evidence_hash, state, created_at, updated_at, decided_by, decided_at) \
           VALUES ('alice', 'space:github-repo:github.com/11', 'place:pl-1', 'link', 'pl-1', NULL, '[]', 'same remote', 90, 'h1', 'declined', 1000, 2000, 'alice', 2000)",
    ),
    (
        20261201190000,
        "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, status, first_seen_at, last_changed_at) \
           VALUES ('space:github-repo:github.com/13', 'github-repo', 'github.com', '13', 'gh-acme', 'company', 'acme/r13', 'active', 2000, 2000);
         INSERT INTO sightings (connection_id, space_address, state, first_seen_at, last_seen_at, state_since, last_seen_run) \
           VALUES ('gh-acme', 'space:github-repo:github.com/13', 'seen', 2000, 3000, 2000, 'run-1')",
    ),
    (
        // PostgreSQL only: the change feed's statement triggers see a new space.
        20261201190001,
        "INSERT INTO spaces (address, kind, tenant, stable_id, connection_id, owner, display_name, status, first_seen_at, last_changed_at) \
           VALUES ('space:github-repo:github.com/14', 'github-repo', 'github.com', '14', 'gh-acme', 'company', 'acme/r14', 'active', 2000, 2000);
         INSERT INTO aliases (space_address, kind, value, raw, valid_from, valid_to) \
           VALUES ('space:github-repo:github.com/14', 'full-name', 'acme/r14', 'acme/r14', 2000, NULL)",
    ),
    (
        20261201200000,
        "INSERT INTO matching_position (name, tx, id) VALUES ('proposals', 0, 7);
         INSERT INTO matching_dirty (space_address, old_container) VALUES ('space:github-repo:github.com/11', NULL)",
    ),
    (
        20261201210000,
        "INSERT INTO space_changes_pruned (one, tx, id, pruned_at) VALUES (1, 0, 3, 5000)",
    ),
    (
        // No table: the key-change notification (PostgreSQL) fires on a revoke.
        20261201210001,
        "INSERT INTO api_keys (id, name, key_hash, role, powers, created_at, created_by, revoked_at, person) \
           VALUES ('key_3', 'old', 'hash-3', 'service', '', 1000, 'cli', NULL, NULL);
         UPDATE api_keys SET revoked_at = 6000 WHERE id = 'key_3'",
    ),
    (
        20261202060000,
        "INSERT INTO admin_sessions (id_hash, key_id, csrf_hash, created_at, expires_at) \
           VALUES ('sess-3', 'key_3', 'csrf-1', 7000, 8000)",
    ),
    (
        // No table: PostgreSQL compresses webhook bodies with lz4 from here.
        20261203060000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at) \
           VALUES ('dl-9', 'gh-acme', 'github', 'hook:1:guid-9', 'repository.renamed', 9000, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL)",
    ),
    (
        // No table: one index of unprocessed deliveries fewer.
        20261204180000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at) \
           VALUES ('dl-10', 'gh-acme', 'github', 'hook:1:guid-10', 'repository.renamed', 9100, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL)",
    ),
    (
        // No table: body_sha256 is renamed replay_key.
        20261205000000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, replay_key) \
           VALUES ('dl-11', 'gh-acme', 'github', 'hook:1:guid-11', 'repository.renamed', 9200, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL, 'key-11')",
    ),
    (
        // No table: PostgreSQL keeps bodies of up to a page in the row.
        20261205090000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, replay_key) \
           VALUES ('dl-12', 'gh-acme', 'github', 'hook:1:guid-12', 'repository.renamed', 9300, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL, 'key-12')",
    ),
    (
        // No table: PostgreSQL compresses bodies under a page in the row.
        20261205120000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, replay_key) \
           VALUES ('dl-13', 'gh-acme', 'github', 'hook:1:guid-13', 'repository.renamed', 9400, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL, 'key-13')",
    ),
    (
        // No table: PostgreSQL keeps a delivery's short columns in the row.
        20261206000000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, replay_key) \
           VALUES ('dl-14', 'gh-acme', 'github', 'hook:1:guid-14', 'repository.renamed', 9500, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL, 'key-14')",
    ),
    (
        // No table: PostgreSQL's deliveries lose their foreign key, and
        // connections refuse a DELETE.
        20261206120000,
        "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, received_at, headers, body, verification, status, error, processed_at, replay_key) \
           VALUES ('dl-15', 'gh-acme', 'github', 'hook:1:guid-15', 'repository.renamed', 9600, '[]', {blob}, 'hmac-sha256', 'received', NULL, NULL, 'key-15')",
    ),
    (
        // An index: suggestions found by their space.
        20261207120000,
        "INSERT INTO suggestions (person, space_address, target, kind, place_id, create_name, evidence_json, evidence_text, confidence, evidence_hash, state, created_at, updated_at, decided_by, decided_at) \
           VALUES ('bob', 'space:github-repo:github.com/11', 'place:pl-1', 'link', 'pl-1', NULL, '[]', 'same remote', 90, 'h2', 'open', 9700, 9700, NULL, NULL)",
    ),
    (
        // No table: PostgreSQL's aliases and sightings lose their foreign
        // key to their space, and spaces refuse a DELETE.
        20261207180000,
        "INSERT INTO aliases (space_address, kind, value, raw, valid_from, valid_to) \
           VALUES ('space:github-repo:github.com/11', 'node-id', 'R_11', 'R_11', 9800, NULL)",
    ),
    (
        20261207200000,
        "INSERT INTO space_changes (kind, space_address, owner, detail, at) \
           VALUES ('alias-added', 'space:github-repo:github.com/11', 'company', \
                   '{\"alias_kind\":\"node-id\",\"value\":\"R_11\",\"raw\":\"R_11\"}', 9900)",
    ),
];

#[derive(Clone, Copy, Debug)]
enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    fn dir(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
    }

    fn blob(self) -> &'static str {
        match self {
            Dialect::Sqlite => "X'00FF10'",
            Dialect::Postgres => "'\\x00ff10'::bytea",
        }
    }
}

/// The migration versions of a dialect, in order.
fn versions(dialect: Dialect) -> Vec<i64> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dialect.dir());
    let mut v: Vec<i64> = std::fs::read_dir(&dir)
        .expect("the migrations directory")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".sql")?.split('_').next()?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

fn seed_of(version: i64) -> &'static str {
    SEEDS
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, sql)| *sql)
        .unwrap_or_else(|| {
            panic!("migration {version} has no seed rows in upgrade_each.rs SEEDS: add some")
        })
}

async fn exec(store: &Store, sql: &str) {
    for statement in sql.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        let s = statement.to_owned();
        let r = match store {
            Store::Sqlite(pool) => sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                .execute(pool)
                .await
                .map(|_| ()),
            Store::Postgres(pool) => sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                .execute(pool)
                .await
                .map(|_| ()),
        };
        r.unwrap_or_else(|e| panic!("seed statement failed: {e}\n{statement}"));
    }
}

async fn texts(store: &Store, sql: String) -> Vec<Vec<Option<String>>> {
    use sqlx::Row;
    match store {
        Store::Sqlite(pool) => sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<Option<String>, _>(i))
                    .collect()
            })
            .collect(),
        Store::Postgres(pool) => sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<Option<String>, _>(i))
                    .collect()
            })
            .collect(),
    }
}

/// The registry's tables and their columns.
async fn schema(store: &Store) -> BTreeMap<String, Vec<String>> {
    let sql = match store {
        Store::Sqlite(_) => {
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p \
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_cmcp_migrations' \
             ORDER BY m.name, p.cid"
        }
        Store::Postgres(_) => {
            "SELECT table_name::text, column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name <> '_cmcp_migrations' \
             ORDER BY table_name, ordinal_position"
        }
    };
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in texts(store, sql.to_owned()).await {
        let (t, c) = (row[0].clone().unwrap(), row[1].clone().unwrap());
        out.entry(t).or_default().push(c);
    }
    out
}

/// Every row of `table`, each column as text, over `columns`.
async fn rows(store: &Store, table: &str, columns: &[String]) -> BTreeSet<Vec<Option<String>>> {
    let cols: Vec<String> = columns
        .iter()
        .map(|c| match store {
            Store::Sqlite(_) => format!("quote(\"{c}\")"),
            Store::Postgres(_) => format!("\"{c}\"::text"),
        })
        .collect();
    let sql = format!("SELECT {} FROM \"{table}\"", cols.join(", "));
    texts(store, sql).await.into_iter().collect()
}

/// Migration `n` (at `index`) onto a database holding seed rows of every
/// migration before it.
async fn upgrade_onto_seeded(db: TestDb, dialect: Dialect, all: &[i64], index: usize) {
    let store = &db.store;
    for &m in &all[..index] {
        store
            .migrate_to(m)
            .await
            .expect("migrate to the earlier version");
        exec(store, &seed_of(m).replace("{blob}", dialect.blob())).await;
    }
    let n = all[index];
    let before_schema = schema(store).await;
    let mut before = BTreeMap::new();
    for (table, columns) in &before_schema {
        let r = rows(store, table, columns).await;
        assert!(
            !r.is_empty(),
            "{dialect:?}: table {table} holds no row before migration {n}: add seed rows for it"
        );
        before.insert(table.clone(), r);
    }
    store
        .migrate()
        .await
        .unwrap_or_else(|e| panic!("{dialect:?}: migration {n} onto data: {e}"));
    let after_schema = schema(store).await;
    for (table, old_rows) in &before {
        let Some(now_columns) = after_schema.get(table) else {
            panic!("{dialect:?}: migration {n} and later dropped table {table} with its data");
        };
        let kept: Vec<String> = before_schema[table]
            .iter()
            .filter(|c| now_columns.contains(c))
            .cloned()
            .collect();
        let positions: Vec<usize> = before_schema[table]
            .iter()
            .enumerate()
            .filter(|(_, c)| now_columns.contains(c))
            .map(|(i, _)| i)
            .collect();
        let old: BTreeSet<Vec<Option<String>>> = old_rows
            .iter()
            .map(|r| positions.iter().map(|&i| r[i].clone()).collect())
            .collect();
        let now = rows(store, table, &kept).await;
        assert!(
            old.is_subset(&now),
            "{dialect:?}: after migration {n}, rows of {table} changed or went.\nbefore: {old:?}\nafter: {now:?}"
        );
    }
    // Migrating forward after it is a no-op.
    store.migrate().await.expect("idempotent");
}

async fn every_migration(dialect: Dialect) {
    let all = versions(dialect);
    assert!(all.len() > 1, "{dialect:?}: migrations found");
    // A new migration brings its seed rows, even one the loop below would
    // only reach as the last.
    for v in &all {
        seed_of(*v);
    }
    for index in 1..all.len() {
        let db = match dialect {
            Dialect::Sqlite => TestDb::sqlite_migrated_to(all[0] - 1).await,
            Dialect::Postgres => match TestDb::postgres_migrated_to(all[0] - 1).await {
                Some(db) => db,
                None => return,
            },
        };
        upgrade_onto_seeded(db, dialect, &all, index).await;
    }
}

#[test]
fn both_dialects_have_the_same_migrations_and_every_one_has_seed_rows() {
    assert_eq!(versions(Dialect::Sqlite), versions(Dialect::Postgres));
    let seeded: Vec<i64> = SEEDS.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        versions(Dialect::Sqlite),
        seeded,
        "SEEDS lists every migration, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_migration_applies_onto_the_previous_schema_with_data() {
    every_migration(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_migration_applies_onto_the_previous_schema_with_data() {
    every_migration(Dialect::Postgres).await;
}
