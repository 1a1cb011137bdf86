//! End-to-end behaviours of issue-sized slices. Each file lists its
//! behaviours once with `both_backends!`, which runs every one of them
//! against SQLite and PostgreSQL.

/// Expand each named `async fn(TestDb)` of the invoking module into a
/// SQLite test and a PostgreSQL test (`<module>::sqlite::<name>`,
/// `<module>::postgres::<name>`). Defined before the `mod` lines so every
/// file sees it.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    super::$name(db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    super::$name(db).await;
                }
            )*
        }
    };
}

mod bitbucket_budget;
mod catalogues;
mod cheap_resync;
mod drive;
mod drive_channels;
mod lease;
mod ownership;
mod retry_intent;
mod shared_budget;
mod signed_hooks;
mod sync;
mod webhooks;
