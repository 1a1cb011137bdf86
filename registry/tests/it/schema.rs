//! The schema itself: migrations are idempotent, and both backends have
//! the same tables and columns.

use std::collections::BTreeMap;

use cmcp_registry::Store;
use cmcp_registry::testing::TestDb;

both_backends!(migrations_are_idempotent);

async fn migrations_are_idempotent(db: TestDb) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}

/// table → column → (type, NOT NULL), types named the same way for both
/// dialects.
type Schema = BTreeMap<String, BTreeMap<String, (String, bool)>>;

/// The migration history tables are bookkeeping, not schema; the queue's
/// tables belong to apalis (and `migrate` does not create them).
const NOT_SCHEMA: [&str; 2] = ["_cmcp_migrations", "_sqlx_migrations"];

/// The one place the dialects spell a type differently: SQLite's 64-bit
/// `INTEGER` (the rowid of `INTEGER PRIMARY KEY`) is PostgreSQL's `bigint`
/// (`BIGSERIAL`), and a byte string is `BLOB` against `bytea`. Anything
/// else is compared as written.
fn type_name(declared: &str) -> String {
    match declared.to_ascii_lowercase().as_str() {
        "integer" | "bigint" | "int8" => "bigint".to_owned(),
        "blob" | "bytea" => "bytes".to_owned(),
        other => other.to_owned(),
    }
}

async fn schema(store: &Store) -> Schema {
    let rows: Vec<(String, String, String, bool)> = match store {
        Store::Sqlite(pool) => {
            let rows: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
                "SELECT m.name, p.name, p.type, p.\"notnull\", p.pk \
                 FROM sqlite_master m JOIN pragma_table_xinfo(m.name) p \
                 WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            // A SQLite primary key column is NOT NULL whether or not it is
            // declared so (PostgreSQL always says so).
            rows.into_iter()
                .map(|(t, c, ty, not_null, pk)| (t, c, ty, not_null == 1 || pk > 0))
                .collect()
        }
        Store::Postgres(pool) => {
            let rows: Vec<(String, String, String, String)> = sqlx::query_as(
                "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text \
                 FROM information_schema.columns WHERE table_schema = 'public'",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            rows.into_iter()
                .map(|(t, c, ty, nullable)| (t, c, ty, nullable == "NO"))
                .collect()
        }
    };
    let mut out = Schema::new();
    for (table, column, ty, not_null) in rows {
        if NOT_SCHEMA.contains(&table.as_str()) {
            continue;
        }
        out.entry(table)
            .or_default()
            .insert(column, (type_name(&ty), not_null));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_and_postgres_migrations_give_the_same_tables_and_columns() {
    let sqlite = TestDb::sqlite().await;
    let Some(postgres) = TestDb::postgres().await else {
        return;
    };
    let lite = schema(&sqlite.store).await;
    let pg = schema(&postgres.store).await;
    assert!(lite.len() >= 18, "the registry's tables: {:?}", lite.keys());
    let tables = |s: &Schema| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(tables(&lite), tables(&pg), "tables (SQLite, PostgreSQL)");
    for (table, columns) in &lite {
        assert_eq!(
            Some(columns),
            pg.get(table),
            "columns of {table} (SQLite, PostgreSQL)"
        );
    }
}

/// Webhook bodies are compressed with lz4 on PostgreSQL (pglz cost a sixth
/// of the server's CPU under load); the server here is built with lz4.
#[tokio::test(flavor = "multi_thread")]
async fn webhook_bodies_compress_with_lz4_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pool) = &db.store else {
        unreachable!("a PostgreSQL store")
    };
    let method: String = sqlx::query_scalar(
        "SELECT attcompression::text FROM pg_attribute \
         WHERE attrelid = 'webhook_deliveries'::regclass AND attname = 'body'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(method, "l", "lz4");
}

/// On PostgreSQL a delivery body is compressed in its row, and stays there
/// while the row fits a page: a GitHub payload of 7.6 KB is stored in
/// under a third of its bytes (with `toast_tuple_target` at a page it
/// was stored whole: rows under the target are never compressed), a body
/// lz4 brings to a few KB stays out of the TOAST table (at the default
/// EXTENDED storage it would go there, in ~2 KB chunks, each a heap row
/// and an index entry of their own), and only a body that leaves the row
/// over a page even compressed goes to TOAST. The row's short values (id,
/// keys, headers) stay in it too.
#[tokio::test(flavor = "multi_thread")]
async fn delivery_bodies_are_compressed_in_the_row_until_it_exceeds_a_page_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pool) = &db.store else {
        unreachable!("a PostgreSQL store")
    };
    cmcp_registry::testing::company_connection(&db.store, "gh", cmcp_domain::Platform::Github)
        .await;
    // Hex of a xorshift stream (lz4 cannot shrink it much) in a JSON
    // envelope that repeats (it can).
    let hex = |n: usize, mut x: u64| -> String {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from_digit((x & 0xf) as u32, 16).unwrap()
            })
            .collect()
    };
    let body = |random: usize| {
        format!(
            "{{\"noise\":\"{}\",\"commits\":[{}]}}",
            hex(random, 0x9e37_79b9_7f4a_7c15),
            vec!["{\"message\":\"Fix the build\",\"author\":{\"name\":\"Ada\"}}"; 120].join(",")
        )
        .into_bytes()
    };
    // The row's other values as the gateway writes them: a ULID, a GUID
    // delivery key, a SHA-256 replay key and the kept headers, each longer
    // than a TOAST pointer (at EXTENDED storage, each went to TOAST before
    // the body was compressed).
    let insert = |id: &'static str, body: Vec<u8>| {
        let guid = format!("c32c6948-d907-44f6-8e91-c312eb5662{id}");
        let headers = format!(
            "[[\"x-github-event\",\"push\"],[\"x-github-delivery\",\"{guid}\"],\
             [\"x-github-hook-id\",\"1\"],[\"content-type\",\"application/json\"]]"
        );
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, connection_id, platform, delivery_key, event, \
               received_at, headers, body, verification, status, replay_key) \
             VALUES ($1, 'gh', 'github', $2, 'push', 1, $3, $4, 'hmac-sha256', 'received', $5)",
        )
        .bind(format!("01JF0QZ3V8M2K6T4N9P7R5W1{id}"))
        .bind(guid)
        .bind(headers)
        .bind(body)
        .bind(hex(64, id.len() as u64 + 7))
        .execute(pool)
    };
    // The latest body's stored and raw sizes, and the TOAST table's size
    // in bytes (0 until a chunk is written to it).
    let toasted = || async {
        sqlx::query_as::<_, (i32, i32, i64)>(
            "SELECT pg_column_size(body), octet_length(body), \
               (SELECT pg_relation_size(reltoastrelid) FROM pg_class \
                WHERE oid = 'webhook_deliveries'::regclass) \
             FROM webhook_deliveries ORDER BY id DESC LIMIT 1",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let sample: &[u8] =
        include_bytes!("../../../fixtures/data/github/webhooks/webhook-repository-renamed.json");
    insert("d0", sample.to_vec()).await.unwrap();
    let (stored, raw, toast_bytes) = toasted().await;
    assert_eq!(raw as usize, sample.len());
    assert!(stored * 3 < raw, "a {raw}-byte payload stored in {stored}");
    assert_eq!(toast_bytes, 0, "the payload went to TOAST");
    insert("d1", body(5_000)).await.unwrap();
    let (stored, raw, toast_bytes) = toasted().await;
    // Compressed, yet over the default line: with the default storage
    // this body would have gone to TOAST.
    assert!(stored > 2_100 && stored < raw, "{stored} of {raw} bytes");
    assert_eq!(
        toast_bytes, 0,
        "a {stored}-byte compressed body, or a short value beside it, went to TOAST"
    );
    insert("d2", body(20_000)).await.unwrap();
    let (stored, raw, toast_bytes) = toasted().await;
    assert!(stored > 8_160, "{stored} of {raw} bytes");
    assert!(toast_bytes > 0, "a body over a page stays out of the row");
}
