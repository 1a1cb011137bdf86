//! The webhook gateway's integration tests: one binary, a module per
//! platform. Every webhook sample in `fixtures/data/<platform>/webhooks/` is
//! signed with a connection's secret, verified and parsed, exactly the path a
//! real delivery takes.

mod bitbucket;
mod github;
mod hooks;
mod jira;
mod signing;
mod support;

/// Expand each behaviour of `hooks` into a SQLite and a PostgreSQL test.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::hooks::$name(db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::hooks::$name(db).await;
                }
            )*
        }
    };
}

both_backends!(
    signed_delivery_is_stored_with_its_job,
    forged_deliveries_are_refused_without_a_job,
    unknown_routes_and_oversized_bodies_are_refused,
    duplicate_delivery_makes_one_row_and_one_job,
    signed_but_unparseable_is_kept_as_failed,
    failing_store_answers_503_and_writes_nothing,
    rotation_accepts_the_old_secret_only_during_the_overlap,
);
