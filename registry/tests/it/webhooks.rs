//! Webhook secrets (sealed, rotated with an overlap) and deliveries
//! (stored once per delivery key, finished, listed).

use cmcp_domain::ConnectionStatus;
use cmcp_domain::{Owner, Platform};
use cmcp_registry::testing::{TestDb, cipher, delivery};
use cmcp_registry::{
    Accepted, CHECKPOINT_BESIDE_AFTER_BYTES, Cipher, DeliveryStatus, NewDelivery, Premise,
    Recorded, RegistryError, Store,
};

use crate::support::{add_connection, try_exec};

both_backends!(
    a_webhook_secret_is_created_once_and_sealed,
    rotation_keeps_the_old_secret_only_for_the_overlap,
    a_delivery_key_is_stored_once_and_finished_once_processed,
    a_signed_body_replayed_under_a_new_key_is_a_duplicate,
    a_batch_dedupes_and_detects_replays_within_itself,
    a_premise_that_no_longer_holds_writes_nothing,
    a_delivery_writer_records_as_the_store_does_and_reconnects_after_a_failure,
    a_delivery_needs_its_connection_which_is_never_deleted,
    a_sqlite_delivery_writer_checkpoints_beside_its_commits,
    the_wal_sync_names_the_file_sqlite_writes_its_wal_to,
);

/// `Store::wal_sync` syncs the file SQLite appends its commits to: after a
/// delivery's commit it exists beside the database file, holds that commit
/// (it grew), and syncs. Missing, it is nothing to sync (SQLite removes it
/// only after a checkpoint that synced the database file). PostgreSQL has
/// none: its commit returns after its WAL flush.
async fn the_wal_sync_names_the_file_sqlite_writes_its_wal_to(db: TestDb) {
    let s = &db.store;
    let Store::Sqlite(pool) = s else {
        assert!(s.wal_sync().is_none());
        return;
    };
    add_connection(s, "gh", Owner::Company).await;
    let wal = s.wal_sync().expect("a SQLite store has a WAL to sync");
    let db_file = pool.connect_options().get_filename().to_path_buf();
    assert_eq!(wal.path().parent(), db_file.parent());
    let size = || std::fs::metadata(wal.path()).map(|m| m.len());
    let before = size().expect("the WAL file is there");
    let mut writer = s.delivery_writer();
    let big = NewDelivery {
        body: vec![b'x'; 16 * 1024],
        ..delivery("into-the-wal", DeliveryStatus::Failed)
    };
    writer.record(&[(&big, None)]).await.unwrap();
    assert!(
        size().unwrap() > before,
        "the commit went to {:?}",
        wal.path()
    );
    wal.sync().await.unwrap();

    // The last connection to close checkpoints the WAL into the database
    // file and removes it.
    let wal_path = wal.path().to_path_buf();
    pool.close().await;
    assert!(!wal_path.exists(), "{wal_path:?} is left");
    wal.sync().await.unwrap();
}

/// A delivery is answered once its commit returns, so on PostgreSQL that
/// commit waits for its WAL flush: `synchronous_commit` is `on` (the
/// server's default) for it, whichever way it is written (alone, or by a
/// gateway's writer on its own session), and no setting of ours lowers it
/// for the speed it would buy. Seen from inside the transactions: a
/// trigger records the setting as each row goes in. (SQLite's store runs
/// at `synchronous = NORMAL`, where a commit survives this process but not
/// the machine; that is not claimed here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_on_postgres_is_answered_after_its_wal_flush() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = &db.store;
    let Store::Postgres(pool) = s else {
        unreachable!()
    };
    sqlx::raw_sql(
        "CREATE TABLE sync_seen (key TEXT, level TEXT); \
         CREATE FUNCTION sync_seen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           INSERT INTO sync_seen VALUES (NEW.delivery_key, current_setting('synchronous_commit')); \
           RETURN NULL; END $$; \
         CREATE TRIGGER sync_seen AFTER INSERT ON webhook_deliveries \
           FOR EACH ROW EXECUTE FUNCTION sync_seen()",
    )
    .execute(pool)
    .await
    .unwrap();
    add_connection(s, "gh", Owner::Company).await;
    s.record_delivery(&delivery("alone", DeliveryStatus::Failed))
        .await
        .unwrap();
    let (a, b) = (
        delivery("batch-a", DeliveryStatus::Failed),
        delivery("batch-b", DeliveryStatus::Ignored),
    );
    let c = delivery("batch-c", DeliveryStatus::Failed);
    let mut writer = s.delivery_writer();
    // The first batch is the writer's single statement; the second
    // repeats a key, so it takes the writer's transaction instead.
    for batch in [&[(&a, None), (&b, None)], &[(&c, None), (&c, None)]] {
        assert_eq!(writer.record(batch).await.unwrap().len(), 2);
    }

    let seen: Vec<(String, String)> =
        sqlx::query_as("SELECT key, level FROM sync_seen ORDER BY key")
            .fetch_all(pool)
            .await
            .unwrap();
    let seen: Vec<(&str, &str)> = seen.iter().map(|(k, l)| (k.as_str(), l.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("alone", "on"),
            ("batch-a", "on"),
            ("batch-b", "on"),
            ("batch-c", "on")
        ]
    );
}

/// On SQLite, a delivery writer that has stored more than
/// `CHECKPOINT_BESIDE_AFTER_BYTES` of bodies has a checkpoint run beside
/// it, which copies them to the database file (far below the 1,000 WAL
/// pages at which SQLite's own checkpoint would), and every delivery is
/// still there after it; PostgreSQL has nothing of the kind.
async fn a_sqlite_delivery_writer_checkpoints_beside_its_commits(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    // The database file's size, with the WAL so far copied into it.
    let file_size = |pool: &sqlx::SqlitePool| {
        std::fs::metadata(pool.connect_options().get_filename())
            .unwrap()
            .len()
    };
    let before = match s {
        Store::Sqlite(pool) => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(pool)
                .await
                .unwrap();
            file_size(pool)
        }
        Store::Postgres(_) => 0,
    };
    let mut writer = s.delivery_writer();
    let body = vec![b'x'; 64 * 1024];
    let n = 2 * CHECKPOINT_BESIDE_AFTER_BYTES / body.len();
    for i in 0..n {
        let d = NewDelivery {
            body: body.clone(),
            ..delivery(&format!("w{i}"), DeliveryStatus::Failed)
        };
        let out = writer.record(&[(&d, None)]).await.unwrap();
        assert!(matches!(
            out[0],
            Accepted::Recorded(Recorded::Stored { .. })
        ));
        if i + 1 < CHECKPOINT_BESIDE_AFTER_BYTES / body.len() {
            assert_eq!(writer.checkpoints_beside(), 0, "not before the bytes");
        }
    }
    match s {
        Store::Sqlite(pool) => {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while writer.checkpoints_beside() == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no checkpoint ran beside the writer"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            // At least half of what the first checkpoint had to copy is
            // in the file (the rest may have filled free pages): no
            // checkpoint of SQLite's own runs at a WAL this small.
            let grown = file_size(pool).saturating_sub(before);
            assert!(
                grown as usize >= CHECKPOINT_BESIDE_AFTER_BYTES / 2,
                "the database file grew {grown} bytes"
            );
        }
        Store::Postgres(_) => assert_eq!(writer.checkpoints_beside(), 0),
    }
    drop(writer);
    assert_eq!(s.list_deliveries("gh").await.unwrap().len(), n);
}

/// A delivery is stored only for a connection that exists, whether its
/// premise is checked or not (on PostgreSQL the statement's check is all
/// there is: the table has no foreign key), and a connection is never
/// deleted, so no delivery outlives it.
async fn a_delivery_needs_its_connection_which_is_never_deleted(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let ghost = NewDelivery {
        connection_id: "ghost".to_owned(),
        ..delivery("g1", DeliveryStatus::Failed)
    };
    let err = s.record_delivery(&ghost).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::NotFound { what } if what.contains("ghost")),
        "{err:?}"
    );
    // In one batch beside a delivery for a connection that exists (one
    // statement on PostgreSQL): only that one is stored.
    let real = delivery("r1", DeliveryStatus::Failed);
    let premise = Some(Premise { secret_id: None });
    let out = s
        .record_deliveries(&[(&ghost, premise), (&real, premise)])
        .await
        .unwrap();
    assert_eq!(out[0], Accepted::Stale);
    assert!(matches!(
        out[1],
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    assert!(s.list_deliveries("ghost").await.unwrap().is_empty());

    let delete = try_exec(s, "DELETE FROM connections WHERE id = 'gh'").await;
    let err = delete.unwrap_err().to_string();
    assert!(err.contains("never deleted"), "{err}");
    assert_eq!(s.list_deliveries("gh").await.unwrap().len(), 1);
}

/// The same signed bytes under a new delivery id: recognised by the body's
/// hash and stored as nothing new. Other bodies, and bodies without a hash
/// (Drive notifications), are not affected.
async fn a_signed_body_replayed_under_a_new_key_is_a_duplicate(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let hashed = |key: &str, hash: Option<&str>| NewDelivery {
        replay_key: hash.map(str::to_owned),
        ..delivery(key, DeliveryStatus::Ignored)
    };
    let Recorded::Stored { id, .. } = s.record_delivery(&hashed("k1", Some("aa"))).await.unwrap()
    else {
        panic!("first copy is stored");
    };
    assert_eq!(
        s.record_delivery(&hashed("k2", Some("aa"))).await.unwrap(),
        Recorded::Replay { id: id.clone() }
    );
    assert!(matches!(
        s.record_delivery(&hashed("k3", Some("bb"))).await.unwrap(),
        Recorded::Stored { .. }
    ));
    for key in ["k4", "k5"] {
        assert!(matches!(
            s.record_delivery(&hashed(key, None)).await.unwrap(),
            Recorded::Stored { .. }
        ));
    }
    assert_eq!(s.list_deliveries("gh").await.unwrap().len(), 4);
}

async fn sealed_secrets(store: &Store) -> Vec<Vec<u8>> {
    let sql = "SELECT secret_sealed FROM webhook_secrets ORDER BY id";
    let rows: Vec<(Vec<u8>,)> = match store {
        Store::Sqlite(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
        Store::Postgres(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
    };
    rows.into_iter().map(|(b,)| b).collect()
}

async fn a_webhook_secret_is_created_once_and_sealed(db: TestDb) {
    let s = &db.store;
    let missing = s.ensure_webhook_secret(&cipher(), "nope").await;
    assert!(matches!(missing, Err(RegistryError::NotFound { .. })));
    add_connection(s, "gh", Owner::Company).await;
    assert!(s.ensure_webhook_secret(&cipher(), "gh").await.unwrap());
    assert!(!s.ensure_webhook_secret(&cipher(), "gh").await.unwrap());
    let secret = s.current_webhook_secret(&cipher(), "gh").await.unwrap();
    assert_eq!(secret.expose().len(), 64, "32 random bytes, hex");
    let all = s.webhook_secrets(&cipher(), "gh").await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].expose(), secret.expose());
    // At rest it is sealed: the stored bytes do not hold the secret.
    let stored = sealed_secrets(s).await;
    assert_eq!(stored.len(), 1);
    let text = secret.expose().as_bytes();
    assert!(!stored[0].windows(text.len()).any(|w| w == text));
    // Another master key cannot open it.
    let other = Cipher::from_key_bytes(&[1u8; 32]).unwrap();
    assert!(s.webhook_secrets(&other, "gh").await.is_err());
}

async fn rotation_keeps_the_old_secret_only_for_the_overlap(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let first = s.current_webhook_secret(&cipher(), "gh").await.unwrap();
    s.rotate_webhook_secret(&cipher(), "gh", 3_600_000, "admin:alice")
        .await
        .unwrap();
    let second = s.current_webhook_secret(&cipher(), "gh").await.unwrap();
    assert_ne!(first.expose(), second.expose());
    let valid: Vec<String> = s
        .webhook_secrets(&cipher(), "gh")
        .await
        .unwrap()
        .iter()
        .map(|t| t.expose().to_owned())
        .collect();
    assert_eq!(
        valid,
        [second.expose(), first.expose()],
        "current first, the old one during the overlap"
    );
    // Without an overlap only the new secret is valid.
    s.rotate_webhook_secret(&cipher(), "gh", 0, "admin:alice")
        .await
        .unwrap();
    let third = s.current_webhook_secret(&cipher(), "gh").await.unwrap();
    let valid = s.webhook_secrets(&cipher(), "gh").await.unwrap();
    assert_eq!(valid.len(), 1);
    assert_eq!(valid[0].expose(), third.expose());
    // Audited, never with a secret.
    let audit = s.list_audit(10).await.unwrap();
    let rotations: Vec<_> = audit
        .iter()
        .filter(|e| e.action == "connection.webhook-secret-rotated")
        .collect();
    assert_eq!(rotations.len(), 2);
    let json = serde_json::to_string(&audit).unwrap();
    for t in [&first, &second, &third] {
        assert!(!json.contains(t.expose()));
    }
}

/// The outcomes of a batch that begins with a delivery, a copy of its key
/// and a replay of its body: the first stored, then its duplicate and its
/// replay. Returns the first's id.
fn first_then_its_copies(out: &[Accepted]) -> String {
    let Accepted::Recorded(Recorded::Stored { id: first, .. }) = &out[0] else {
        panic!("the first copy is stored: {out:?}");
    };
    assert_eq!(
        out[1..3],
        [
            Accepted::Recorded(Recorded::Duplicate { id: first.clone() }),
            Accepted::Recorded(Recorded::Replay { id: first.clone() }),
        ]
    );
    first.clone()
}

/// A failed delivery with replay key `hash` (what replay detection
/// compares).
fn hashed(key: &str, hash: &str) -> NewDelivery {
    NewDelivery {
        replay_key: Some(hash.to_owned()),
        ..delivery(key, DeliveryStatus::Failed)
    }
}

async fn a_delivery_key_is_stored_once_and_finished_once_processed(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    // Ignored and failed deliveries are kept without a job.
    let Recorded::Stored { id, job_id } = s
        .record_delivery(&delivery("guid-1", DeliveryStatus::Ignored))
        .await
        .unwrap()
    else {
        panic!("a new delivery key is stored");
    };
    assert_eq!(job_id, None);
    let again = s
        .record_delivery(&delivery("guid-1", DeliveryStatus::Failed))
        .await
        .unwrap();
    assert_eq!(again, Recorded::Duplicate { id: id.clone() });
    let row = s.get_delivery(&id).await.unwrap();
    assert_eq!(row.delivery_key, "guid-1");
    assert_eq!(row.platform, Platform::Github);
    assert_eq!(row.status, DeliveryStatus::Ignored);
    assert!(
        row.body.is_empty(),
        "an ignored body is not kept past acceptance"
    );
    assert_eq!(
        row.headers,
        delivery("guid-1", DeliveryStatus::Ignored).headers
    );
    assert!(row.processed_at.is_some(), "nothing left to do");
    let Recorded::Stored { id: failed, .. } = s
        .record_delivery(&NewDelivery {
            error: Some("unparseable".to_owned()),
            ..delivery("guid-2", DeliveryStatus::Failed)
        })
        .await
        .unwrap()
    else {
        panic!("another delivery key is stored");
    };
    let listed: Vec<String> = s
        .list_deliveries("gh")
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_key)
        .collect();
    assert_eq!(listed, ["guid-1", "guid-2"]);
    assert_eq!(s.oldest_unprocessed_delivery().await.unwrap(), None);
    s.finish_delivery(&failed, DeliveryStatus::Processed, None)
        .await
        .unwrap();
    let row = s.get_delivery(&failed).await.unwrap();
    assert_eq!((row.status, row.error), (DeliveryStatus::Processed, None));
    let unknown = s
        .finish_delivery("01NOSUCHDELIVERY", DeliveryStatus::Processed, None)
        .await;
    assert!(matches!(unknown, Err(RegistryError::NotFound { .. })));
}

/// One transaction, one statement per delivery, in order: a later copy of
/// a key in the same batch is its duplicate, a later body with the same
/// hash its replay, exactly as if each had come in its own transaction.
async fn a_batch_dedupes_and_detects_replays_within_itself(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let batch = [
        hashed("k1", "aa"),
        hashed("k1", "cc"),
        hashed("k2", "aa"),
        hashed("k3", "bb"),
    ];
    let items: Vec<_> = batch.iter().map(|d| (d, None)).collect();
    let out = s.record_deliveries(&items).await.unwrap();
    first_then_its_copies(&out);
    assert!(matches!(
        out[3],
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    let mut keys: Vec<String> = s
        .list_deliveries("gh")
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_key)
        .collect();
    // Within one millisecond the order of ids is not the order of writes.
    keys.sort();
    assert_eq!(keys, ["k1", "k3"]);
}

/// A gateway's writer: the same outcomes as [`Store::record_deliveries`]
/// for a batch whose deliveries must see each other (a transaction) and
/// for one whose deliveries are independent (on PostgreSQL one statement
/// on the writer's own connection). On PostgreSQL that connection's
/// generic planning stays its own, and a batch that fails on a broken
/// connection leaves the next one to connect afresh.
async fn a_delivery_writer_records_as_the_store_does_and_reconnects_after_a_failure(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let mut writer = s.delivery_writer();
    let dependent = [hashed("k1", "aa"), hashed("k1", "cc"), hashed("k2", "aa")];
    let items: Vec<_> = dependent.iter().map(|d| (d, None)).collect();
    let out = writer.record(&items).await.unwrap();
    let first = first_then_its_copies(&out);
    let independent = [hashed("k3", "bb"), hashed("k1", "dd"), hashed("k4", "aa")];
    let items: Vec<_> = independent.iter().map(|d| (d, None)).collect();
    let out = writer.record(&items).await.unwrap();
    assert!(matches!(
        out[0],
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    assert_eq!(
        out[1..],
        [
            Accepted::Recorded(Recorded::Duplicate { id: first.clone() }),
            Accepted::Recorded(Recorded::Replay { id: first.clone() }),
        ]
    );
    let stored = || async { s.list_deliveries("gh").await.unwrap().len() };
    assert_eq!(stored().await, 2);
    let Store::Postgres(pool) = s else { return };
    let (mode,): (String,) = sqlx::query_as("SHOW plan_cache_mode")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(mode, "auto", "the pool keeps the default planning");
    let kill_writer = || async {
        let (killed,): (i64,) = sqlx::query_as(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query LIKE 'WITH input AS%'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        killed
    };
    let killed = kill_writer().await;
    // Its last statement was the batch's, not a COMMIT: the independent
    // batch was one statement, on the writer's own connection.
    assert_eq!(killed, 1, "the writer's own connection ran the batch");
    let next = [hashed("k5", "ee")];
    let items: Vec<_> = next.iter().map(|d| (d, None)).collect();
    writer
        .record(&items)
        .await
        .expect_err("the batch on the killed connection fails");
    let out = writer.record(&items).await.unwrap();
    assert!(matches!(
        out[0],
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    assert_eq!(stored().await, 3);
    // Cut while idle: the ping before the next batch finds it, and that
    // batch goes through on a new connection.
    assert_eq!(kill_writer().await, 1);
    tokio::time::sleep(cmcp_registry::PING_IF_IDLE_FOR).await;
    let idle = [hashed("k6", "ff")];
    let items: Vec<_> = idle.iter().map(|d| (d, None)).collect();
    let out = writer.record(&items).await.unwrap();
    assert!(matches!(
        out[0],
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    assert_eq!(stored().await, 4);
}

/// The statement that stores a delivery re-checks what the gateway's copy
/// of the connection said: the secret that verified it is still valid and
/// the connection still takes deliveries; otherwise nothing is written.
async fn a_premise_that_no_longer_holds_writes_nothing(db: TestDb) {
    let s = &db.store;
    let c = cipher();
    add_connection(s, "gh", Owner::Company).await;
    s.ensure_webhook_secret(&c, "gh").await.unwrap();
    let state = s.intake_state(&c, "gh").await.unwrap().unwrap();
    assert_eq!(state.platform, Platform::Github);
    assert_eq!(state.status, ConnectionStatus::Enabled);
    let [current] = state.secrets.as_slice() else {
        panic!("one current secret: {:?}", state.secrets.len());
    };
    assert_eq!(
        current.secret.expose(),
        s.current_webhook_secret(&c, "gh").await.unwrap().expose()
    );
    assert!(s.intake_state(&c, "nope").await.unwrap().is_none());
    let old = Some(Premise {
        secret_id: Some(current.id),
    });
    let write = |key: &'static str, premise: Option<Premise>| async move {
        let d = delivery(key, DeliveryStatus::Failed);
        s.record_deliveries(&[(&d, premise)])
            .await
            .unwrap()
            .pop()
            .unwrap()
    };
    assert!(matches!(
        write("p1", old).await,
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    // The old secret's overlap is cut short (another gateway's rotation).
    s.rotate_webhook_secret(&c, "gh", 0, "test").await.unwrap();
    assert_eq!(write("p2", old).await, Accepted::Stale);
    let fresh = s.intake_state(&c, "gh").await.unwrap().unwrap();
    assert_eq!(fresh.secrets.len(), 1);
    assert_ne!(fresh.secrets[0].id, current.id);
    let new = Some(Premise {
        secret_id: Some(fresh.secrets[0].id),
    });
    assert!(matches!(
        write("p3", new).await,
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    // Disabled: refused under any premise, even without a secret to check.
    s.set_connection_status("gh", ConnectionStatus::Disabled, "test", None)
        .await
        .unwrap();
    assert_eq!(write("p4", new).await, Accepted::Stale);
    assert_eq!(
        write("p5", Some(Premise { secret_id: None })).await,
        Accepted::Stale
    );
    // Held and rejected connections still take their webhooks.
    s.set_connection_status("gh", ConnectionStatus::Rejected, "test", None)
        .await
        .unwrap();
    assert!(matches!(
        write("p6", new).await,
        Accepted::Recorded(Recorded::Stored { .. })
    ));
    let mut keys: Vec<String> = s
        .list_deliveries("gh")
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["p1", "p3", "p6"]);
}
