//! End-to-end behaviours of issue-sized slices, each run against SQLite and
//! PostgreSQL by `both_backends!`.

mod bitbucket_budget;
mod catalogues;
mod cheap_resync;
mod drive;
mod drive_channels;
mod shared_budget;
mod signed_hooks;
mod sync;
mod webhooks;

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

/// The webhook behaviours (`webhooks.rs`), each on SQLite and PostgreSQL.
macro_rules! webhooks_both_backends {
    ($($name:ident),* $(,)?) => {
        mod webhooks_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::webhooks::$name(db).await;
                }
            )*
        }
        mod webhooks_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::webhooks::$name(db).await;
                }
            )*
        }
    };
}

webhooks_both_backends!(
    rename_arrives_by_webhook_without_a_full_sync,
    delivery_waits_for_a_worker_and_is_then_processed,
    rotated_secret_overlaps_then_the_old_one_is_refused,
);

/// Conditional re-syncs (`cheap_resync.rs`) and the fleet's shared rate
/// budget (`shared_budget.rs`), each on SQLite and PostgreSQL.
macro_rules! budget_both_backends {
    ($($module:ident::$name:ident),* $(,)?) => {
        mod budget_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::$module::$name(db).await;
                }
            )*
        }
        mod budget_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::$module::$name(db).await;
                }
            )*
        }
    };
}

budget_both_backends!(
    cheap_resync::unchanged_10000_repo_org_resyncs_with_304s_and_no_writes,
    shared_budget::two_workers_sharing_a_token_never_exceed_the_budget,
);
