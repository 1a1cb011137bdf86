//! End-to-end behaviours of issue-sized slices, each run against SQLite and
//! PostgreSQL by `both_backends!`.

mod sync;

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::sync::$name(db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::sync::$name(db).await;
                }
            )*
        }
    };
}

both_backends!(
    full_sync_of_1000_repos_gives_exactly_1000_spaces,
    rename_upstream_keeps_space_id_and_old_alias_resolves,
    failing_page_makes_a_partial_run_that_marks_nothing_missing,
    ten_percent_faults_still_end_with_the_exact_registry,
    complete_listing_marks_deleted_and_transferred_repos_missing,
    sync_through_the_queue_and_a_worker,
    token_never_reaches_the_database,
    second_holder_defers_while_a_sync_runs,
);
