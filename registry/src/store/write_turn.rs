//! SQLite writers of one process take turns, one database file at a time.
//!
//! SQLite lets one writer hold a file. Every other connection that wants to
//! write meets `SQLITE_BUSY`, and its busy handler sleeps (1 ms, then 2, 5,
//! 10, up to 100 ms) and tries again. Under load that sleeping is most of a
//! writer's wait: the lock is often free long before the sleeper wakes. A
//! first sync of 50,000 repos counted about 3,000 such sleeps, because the page
//! apply, the rate budget's reserve and settle of every request and the page
//! cache all write to the same file.
//!
//! Inside one process the writers can queue instead: each takes this file's
//! turn (a fair async mutex) before it begins writing, and the next in line
//! starts the moment the holder is done. Writers in other processes (and the
//! job queue's own pool) still meet the busy handler, which stays as it was.
//! A turn is waited for at most [`SQLITE_BUSY_TIMEOUT`], the same bound the
//! busy handler has, and then the write fails as a transient error.
//!
//! A file also has a second turn, for rounds of mapping proposals
//! ([`crate::Store::matching_turn`]): a round reads, computes and writes
//! for as long as it runs, so it is not a write turn, which it would hold
//! against every other writer.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use sqlx::SqlitePool;
use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};

use super::{SQLITE_BUSY_TIMEOUT, Store};
use crate::{RegistryError, Result};

type Turn = Arc<TurnLock<()>>;
type WeakTurn = Weak<TurnLock<()>>;

/// What a turn is taken for: a file has one turn for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Purpose {
    /// Writing (every write of the store).
    Write,
    /// A round of mapping proposals, which reads and writes for as long as
    /// it runs ([`crate::Store::matching_turn`]).
    Matching,
    /// A round of a person's suggestions ([`crate::Store::suggestion_turn`]).
    Suggestions,
}

/// One turn per database and purpose, shared by every pool of this
/// process that opens it; a database is named by its file's path (SQLite)
/// or its server's address and name (PostgreSQL). Weak, so that a
/// database no pool holds any more leaves no entry behind once the map is
/// next touched.
static TURNS: LazyLock<Mutex<HashMap<(OsString, Purpose), WeakTurn>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn turn_of(database: OsString, purpose: Purpose) -> Turn {
    let mut turns = TURNS.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (database, purpose);
    if let Some(turn) = turns.get(&key).and_then(Weak::upgrade) {
        return turn;
    }
    turns.retain(|_, turn| turn.strong_count() > 0);
    let turn = Arc::new(TurnLock::new(()));
    turns.insert(key, Arc::downgrade(&turn));
    turn
}

fn file_of(pool: &SqlitePool) -> OsString {
    pool.connect_options().get_filename().as_os_str().to_owned()
}

/// Waits for this pool's file's turn to write. Hold the guard until the
/// write has committed.
pub(crate) async fn sqlite(pool: &SqlitePool) -> Result<OwnedMutexGuard<()>> {
    let turn = turn_of(file_of(pool), Purpose::Write);
    tokio::time::timeout(SQLITE_BUSY_TIMEOUT, turn.lock_owned())
        .await
        .map_err(|_| RegistryError::Database(sqlx::Error::PoolTimedOut))
}

/// Waits, however long the round before takes, for this process's turn to
/// run a round (`purpose`: of mapping proposals, or of a person's
/// suggestions) on the store's database. On SQLite that is the whole turn;
/// on PostgreSQL it comes before the advisory lock, so that the rounds of
/// one process waiting for another's hold no connection of the pool but
/// one.
pub(crate) async fn matching(store: &Store, purpose: Purpose) -> OwnedMutexGuard<()> {
    let database = match store {
        Store::Sqlite(pool) => file_of(pool),
        Store::Postgres(pool) => {
            let o = pool.connect_options();
            format!(
                "{}:{}/{}",
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            )
            .into()
        }
    };
    turn_of(database, purpose).lock_owned().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{Store, StoreOptions, in_tx};

    #[tokio::test]
    async fn one_file_has_one_turn_while_it_is_held_and_dead_turns_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.db");
        let b = dir.path().join("b.db");

        let first = turn_of(a.clone().into(), Purpose::Write);
        let again = turn_of(a.clone().into(), Purpose::Write);
        assert!(Arc::ptr_eq(&first, &again), "one file, one turn");
        let other = turn_of(b.clone().into(), Purpose::Write);
        assert!(!Arc::ptr_eq(&first, &other), "two files, two turns");
        let matching = turn_of(a.clone().into(), Purpose::Matching);
        assert!(
            !Arc::ptr_eq(&first, &matching),
            "one file, one turn for each purpose"
        );

        let held = Arc::clone(&first).lock_owned().await;
        assert!(again.try_lock().is_err(), "the turn is held");
        assert!(other.try_lock().is_ok(), "another file's turn is free");
        drop(held);
        assert!(again.try_lock().is_ok(), "the turn is free again");

        drop((first, again, other, matching));
        let _fresh = turn_of(dir.path().join("c.db").into(), Purpose::Write);
        let turns = TURNS.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            turns
                .keys()
                .all(|(file, _)| *file != a.as_os_str() && *file != b.as_os_str()),
            "a turn no pool holds is dropped from the map"
        );
    }

    /// Two pools of this process open one file (as the gateway and the worker
    /// of one binary do). While one holds the file's turn, no write through
    /// the other starts: not a single statement, not a transaction, not a
    /// batch of deliveries. Nothing else would stop them (no SQLite lock is
    /// held), so without the turn they would all finish at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_through_any_pool_of_the_file_waits_for_its_turn() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("turns.db").display());
        let one = Store::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        one.migrate().await.unwrap();
        let two = Store::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let Store::Sqlite(pool) = &one else {
            unreachable!("a sqlite: url opens SQLite")
        };
        let held = sqlite(pool).await.unwrap();

        let statement = tokio::spawn({
            let two = two.clone();
            async move { two.forget_cached_pages("c").await.map(drop) }
        });
        let batch = tokio::spawn({
            let two = two.clone();
            async move { two.record_deliveries(&[]).await.map(drop) }
        });
        let transaction = tokio::spawn(async move {
            in_tx!(&two, tx => {
                sqlx::query("DELETE FROM http_cache WHERE connection_id = 'c'")
                    .execute(&mut *tx)
                    .await?;
            });
            Ok::<_, RegistryError>(())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (what, task) in [
            ("statement", &statement),
            ("batch", &batch),
            ("transaction", &transaction),
        ] {
            assert!(
                !task.is_finished(),
                "the {what} began while another writer held the turn"
            );
        }

        drop(held);
        for task in [statement, batch, transaction] {
            tokio::time::timeout(SQLITE_BUSY_TIMEOUT, task)
                .await
                .expect("the write goes ahead once the turn is free")
                .unwrap()
                .unwrap();
        }
    }
}
