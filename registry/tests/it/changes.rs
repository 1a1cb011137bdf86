//! The change feed: every change once, in commit order, filtered per
//! caller after reading, and never skipping a transaction that commits
//! after a younger one (PostgreSQL).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use cmcp_domain::{Owner, SpaceAddress};
use cmcp_registry::testing::{TestDb, settle_changes};
use cmcp_registry::{ChangeKind, ChangeRow, Cursor, Store, Viewer};

use crate::support::{add_connection, addr, repo};

both_backends!(
    every_write_appears_once_with_its_kind,
    every_alias_is_in_the_feed_once_in_its_new_spaces_row_or_its_own,
    changes_a_caller_may_not_see_are_filtered_but_the_cursor_moves_alike,
    a_reader_polling_while_writers_commit_out_of_order_sees_every_change_once,
    an_older_open_transaction_holds_the_feed_back_until_it_commits,
    a_pruned_feed_refuses_older_cursors_and_diffs_them_whole,
);

/// Everything after `after`, page by page, for `viewer`.
pub async fn drain(
    store: &Store,
    mut after: Cursor,
    viewer: Option<&Viewer>,
) -> (Vec<ChangeRow>, Cursor) {
    settle_changes(store).await;
    let mut all = Vec::new();
    loop {
        let page = store.changes(after, 3, viewer).await.unwrap();
        let done = page.next == after;
        all.extend(page.changes);
        after = page.next;
        if done {
            return (all, after);
        }
    }
}

fn kinds(rows: &[ChangeRow]) -> BTreeMap<(ChangeKind, String), usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        let state = r
            .detail
            .get("state")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_owned();
        *m.entry((r.kind, state)).or_default() += 1;
    }
    m
}

/// The aliases a `space-created` row lists, as (kind, value, raw).
fn listed_aliases(row: &ChangeRow) -> Vec<(String, String, String)> {
    let field = |a: &serde_json::Value, k: &str| a[k].as_str().unwrap_or_default().to_owned();
    row.detail["aliases"]
        .as_array()
        .unwrap_or_else(|| panic!("no aliases in {row:?}"))
        .iter()
        .map(|a| (field(a, "alias_kind"), field(a, "value"), field(a, "raw")))
        .collect()
}

/// The space's active aliases in the order they were added.
async fn stored_aliases(s: &Store, address: &SpaceAddress) -> Vec<(String, String, String)> {
    let mut rows = s.alias_history(address).await.unwrap();
    rows.retain(|a| a.is_active());
    rows.sort_by_key(|a| a.id);
    rows.into_iter()
        .map(|a| (a.kind.as_str().to_owned(), a.value, a.raw))
        .collect()
}

async fn every_write_appears_once_with_its_kind(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    let (_, start) = drain(s, Cursor::default(), None).await;
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    let (created, c1) = drain(s, start, None).await;
    // One row: the new space with its aliases (name, full name, web URL,
    // host id, and the two remote spellings as one), none of its own.
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].kind, ChangeKind::SpaceCreated);
    assert_eq!(created[0].address, addr(1));
    assert_eq!(
        listed_aliases(&created[0]),
        stored_aliases(s, &addr(1)).await
    );
    assert_eq!(listed_aliases(&created[0]).len(), 5);
    // Unchanged re-reading writes nothing to the feed.
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    assert!(drain(s, c1, None).await.0.is_empty());
    // A rename retires the names and adds the new ones; an archive is a state.
    let mut renamed = repo(1, "acme", "api2");
    renamed.state.archived = true;
    s.apply_page("gh", &Owner::Company, &[renamed.clone()])
        .await
        .unwrap();
    let (rows, c2) = drain(s, c1, None).await;
    let k = kinds(&rows);
    // The host id stays; the four names and URLs are replaced.
    assert_eq!(
        k.get(&(ChangeKind::AliasRetired, String::new())),
        Some(&4),
        "{k:?}"
    );
    assert_eq!(
        k.get(&(ChangeKind::AliasAdded, String::new())),
        Some(&4),
        "{k:?}"
    );
    assert_eq!(
        k.get(&(ChangeKind::StateChanged, "archived".into())),
        Some(&1),
        "{k:?}"
    );
    // Missing, restored, access-lost, tombstoned.
    s.mark_missing("gh", &HashSet::new()).await.unwrap();
    s.apply_page("gh", &Owner::Company, &[renamed])
        .await
        .unwrap();
    s.lose_access("gh", &addr(1)).await.unwrap();
    s.apply_page("gh", &Owner::Company, &[repo(2, "acme", "gone")])
        .await
        .unwrap();
    let (_, c3) = drain(s, c2, None).await;
    s.tombstone("gh", &addr(2), true).await.unwrap();
    let (rows, _) = drain(s, c2, None).await;
    let states: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == ChangeKind::StateChanged)
        .filter_map(|r| r.detail["state"].as_str())
        .collect();
    assert_eq!(states, ["missing", "restored", "access-lost", "tombstoned"]);
    assert!(
        rows.iter()
            .filter(|r| r.cursor > c3)
            .all(|r| r.address == addr(2))
    );
    // Cursors strictly increase: nothing twice.
    let (all, _) = drain(s, Cursor::default(), None).await;
    assert!(all.windows(2).all(|w| w[0].cursor < w[1].cursor));
}

/// A new space's aliases are in its `space-created` row; an alias added to
/// a space that was already there is a row of its own, also when both
/// happen in one page. Every alias ever added is in the feed exactly once.
async fn every_alias_is_in_the_feed_once_in_its_new_spaces_row_or_its_own(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    s.apply_page("gh", &Owner::Company, &[repo(1, "acme", "api")])
        .await
        .unwrap();
    let (_, c1) = drain(s, Cursor::default(), None).await;
    // One page: repository 1 renamed, repository 2 new.
    s.apply_page(
        "gh",
        &Owner::Company,
        &[repo(1, "acme", "api2"), repo(2, "acme", "web")],
    )
    .await
    .unwrap();
    let (page, _) = drain(s, c1, None).await;
    let created: Vec<&ChangeRow> = page
        .iter()
        .filter(|c| c.kind == ChangeKind::SpaceCreated)
        .collect();
    assert_eq!(created.len(), 1, "{page:?}");
    assert_eq!(created[0].address, addr(2));
    assert_eq!(
        listed_aliases(created[0]),
        stored_aliases(s, &addr(2)).await
    );
    let added: Vec<&ChangeRow> = page
        .iter()
        .filter(|c| c.kind == ChangeKind::AliasAdded)
        .collect();
    assert_eq!(added.len(), 4, "the new names and URLs of 1: {page:?}");
    assert!(added.iter().all(|c| c.address == addr(1)), "{page:?}");

    let (all, _) = drain(s, Cursor::default(), None).await;
    let mut in_feed: Vec<(String, String, String)> = Vec::new();
    for c in &all {
        match c.kind {
            ChangeKind::SpaceCreated => in_feed.extend(
                listed_aliases(c)
                    .into_iter()
                    .map(|(kind, value, _)| (c.address.to_string(), kind, value)),
            ),
            ChangeKind::AliasAdded => in_feed.push((
                c.address.to_string(),
                c.detail["alias_kind"].as_str().unwrap().to_owned(),
                c.detail["value"].as_str().unwrap().to_owned(),
            )),
            _ => {}
        }
    }
    let mut stored = Vec::new();
    for a in [addr(1), addr(2)] {
        for row in s.alias_history(&a).await.unwrap() {
            stored.push((a.to_string(), row.kind.as_str().to_owned(), row.value));
        }
    }
    in_feed.sort();
    stored.sort();
    assert_eq!(in_feed, stored);
}

async fn changes_a_caller_may_not_see_are_filtered_but_the_cursor_moves_alike(db: TestDb) {
    let s = &db.store;
    let alice = Owner::Person("alice".into());
    add_connection(s, "gh", Owner::Company).await;
    add_connection(s, "gh-alice", alice.clone()).await;
    s.apply_page("gh-alice", &alice, &[repo(10, "alice", "notes")])
        .await
        .unwrap();
    s.apply_page("gh", &Owner::Company, &[repo(11, "acme", "api")])
        .await
        .unwrap();
    let a = Viewer::Person("alice".into());
    let b = Viewer::Person("bob".into());
    let (for_alice, end_a) = drain(s, Cursor::default(), Some(&a)).await;
    let (for_bob, end_b) = drain(s, Cursor::default(), Some(&b)).await;
    let (for_company, end_c) = drain(s, Cursor::default(), Some(&Viewer::Company)).await;
    assert_eq!(end_a, end_b);
    assert_eq!(end_b, end_c);
    assert!(for_alice.iter().any(|c| c.address == addr(10)));
    assert!(for_alice.iter().any(|c| c.address == addr(11)));
    for rows in [&for_bob, &for_company] {
        assert!(rows.iter().all(|c| c.address == addr(11)));
        assert!(!rows.is_empty());
    }
    // Taken over by a company connection: the owner change is the company's.
    s.apply_page("gh", &Owner::Company, &[repo(10, "alice", "notes")])
        .await
        .unwrap();
    let (rows, _) = drain(s, end_c, Some(&Viewer::Company)).await;
    let owner: Vec<_> = rows
        .iter()
        .filter(|r| r.kind == ChangeKind::OwnerChanged)
        .collect();
    assert_eq!(owner.len(), 1);
    assert_eq!(owner[0].detail["from"], "person");
    assert_eq!(owner[0].detail["to"], "company");
}

/// A writer that inserts one change and holds its transaction open for a
/// while before committing, so younger transactions commit first.
async fn slow_write(store: &Store, address: String, hold: Duration) {
    let sql = "INSERT INTO space_changes (kind, space_address, owner, detail, at) VALUES ('space-created', $1, 'company', '{}', 0)";
    match store {
        Store::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            sqlx::query(sql)
                .bind(&address)
                .execute(&mut *tx)
                .await
                .unwrap();
            tokio::time::sleep(hold).await;
            tx.commit().await.unwrap();
        }
        Store::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(sql)
                .bind(&address)
                .execute(&mut *tx)
                .await
                .unwrap();
            tokio::time::sleep(hold).await;
            tx.commit().await.unwrap();
        }
    }
}

async fn a_reader_polling_while_writers_commit_out_of_order_sees_every_change_once(db: TestDb) {
    let store = db.store.clone();
    let (_, start) = drain(&store, Cursor::default(), None).await;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..15u64 {
                    // Holds of different lengths: later writers overtake.
                    let hold = Duration::from_millis((w * 7 + i * 13) % 40);
                    slow_write(
                        &store,
                        format!("space:github-repo:github.com/{w}{i:03}"),
                        hold,
                    )
                    .await;
                }
            })
        })
        .collect();
    let reader = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut seen: Vec<String> = Vec::new();
            let mut after = start;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while seen.len() < 60 && tokio::time::Instant::now() < deadline {
                let page = store.changes(after, 7, None).await.unwrap();
                seen.extend(page.changes.into_iter().map(|c| c.address.to_string()));
                after = page.next;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            seen
        })
    };
    for w in writers {
        w.await.unwrap();
    }
    let seen = reader.await.unwrap();
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a change was read twice");
    assert_eq!(seen.len(), 60, "a committed change was skipped");
}

async fn an_older_open_transaction_holds_the_feed_back_until_it_commits(db: TestDb) {
    // SQLite has one writer at a time: nothing commits out of order.
    let Store::Postgres(pool) = &db.store else {
        return;
    };
    let (_, start) = drain(&db.store, Cursor::default(), None).await;
    let insert = "INSERT INTO space_changes (kind, space_address, owner, detail, at) \
                  VALUES ('space-created', $1, 'company', '{}', 0) RETURNING id";
    let mut older = pool.begin().await.unwrap();
    let (older_id,): (i64,) = sqlx::query_as(insert)
        .bind("space:github-repo:github.com/1")
        .fetch_one(&mut *older)
        .await
        .unwrap();
    let mut younger = pool.begin().await.unwrap();
    let (younger_id,): (i64,) = sqlx::query_as(insert)
        .bind("space:github-repo:github.com/2")
        .fetch_one(&mut *younger)
        .await
        .unwrap();
    younger.commit().await.unwrap();
    // A plain sequence reader would now move past the younger id and never
    // come back for the older one.
    let (naive,): (i64,) = sqlx::query_as("SELECT MAX(id) FROM space_changes")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(naive, younger_id);
    assert!(older_id < younger_id);
    let page = db.store.changes(start, 100, None).await.unwrap();
    assert!(
        page.changes.is_empty(),
        "the feed read past an open transaction"
    );
    assert_eq!(page.next, start);
    older.commit().await.unwrap();
    let (rows, _) = drain(&db.store, start, None).await;
    let ids: Vec<i64> = rows.iter().map(|r| r.cursor.id).collect();
    assert_eq!(ids, [older_id, younger_id]);
}

/// Retention prunes the feed's oldest rows; a reader behind them is told
/// (an error that says to re-read the manifest, a manifest answered whole,
/// a full recompute for matching), never given a page with a hole.
async fn a_pruned_feed_refuses_older_cursors_and_diffs_them_whole(db: TestDb) {
    let s = &db.store;
    add_connection(s, "gh", Owner::Company).await;
    s.apply_page(
        "gh",
        &Owner::Company,
        &[repo(1, "acme", "api"), repo(2, "acme", "web")],
    )
    .await
    .unwrap();
    let (old, through) = drain(s, Cursor::default(), None).await;
    assert_eq!(old.len(), 2, "a row a new space: {old:?}");
    let early = old[0].cursor;
    let version = s.manifest("alice", None, 1_000).await.unwrap().version;
    assert_eq!(version, through);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cut = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.apply_page("gh", &Owner::Company, &[repo(3, "acme", "docs")])
        .await
        .unwrap();
    settle_changes(s).await;
    assert_eq!(s.feed_pruned_through().await.unwrap(), None);

    let pruned = s.prune_changes(cut).await.unwrap();
    assert_eq!(pruned, old.len() as u64);
    assert_eq!(s.feed_pruned_through().await.unwrap(), Some(through));

    // Behind the pruned position: refused, saying what to do.
    for behind in [Cursor::default(), early] {
        let err = s.changes(behind, 10, None).await.unwrap_err();
        assert!(
            matches!(err, cmcp_registry::RegistryError::FeedPruned { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("read the manifest again"), "{err}");
    }
    // At it: exactly what came after, nothing lost.
    let (after, head) = drain(s, through, None).await;
    assert!(!after.is_empty());
    assert!(after.iter().all(|c| c.address == addr(3)), "{after:?}");

    // A manifest diff from before the pruned position cannot be made: the
    // whole manifest, flagged. From the position itself it is a diff.
    let m = s.manifest("alice", Some(early), 1_000).await.unwrap();
    assert!(m.too_old && m.full, "{m:?}");
    assert_eq!(m.spaces.len(), 3);
    let m = s.manifest("alice", Some(version), 1_000).await.unwrap();
    assert!(!m.too_old && !m.full, "{m:?}");
    assert_eq!(
        m.added
            .iter()
            .map(|e| e.address.clone())
            .collect::<Vec<_>>(),
        vec![addr(3)]
    );

    // The ladder's position is behind the pruned rows: a full recompute.
    assert!(s.matching_position().await.unwrap() < through);
    assert!(s.matching_backlog(100).await.unwrap().overflow);

    // Pruning everything leaves a head that is not "before everything",
    // so the newest version still diffs (to nothing).
    let all = s
        .prune_changes(chrono::Utc::now().timestamp_millis() + 1)
        .await
        .unwrap();
    assert_eq!(all, after.len() as u64);
    assert_eq!(s.change_head().await.unwrap(), head);
    let m = s.manifest("alice", Some(head), 1_000).await.unwrap();
    assert!(!m.too_old && !m.full && m.added.is_empty(), "{m:?}");
    assert!(s.changes(head, 10, None).await.unwrap().changes.is_empty());
    assert!(s.changes(through, 10, None).await.is_err());
    assert_eq!(s.prune_changes(i64::MAX).await.unwrap(), 0);
}
