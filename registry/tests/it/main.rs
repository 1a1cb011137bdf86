//! The store's conformance suite: every behaviour is written once and run
//! against SQLite and PostgreSQL by `conformance!`.

mod suite;

/// Expand each named behaviour into a SQLite test and a PostgreSQL test.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::suite::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::suite::$name(&db).await;
                }
            )*
        }
    };
}

conformance!(
    migrations_are_idempotent,
    connection_token_is_sealed_and_opens,
    duplicate_and_invalid_connections_are_refused,
    apply_page_creates_spaces_with_aliases,
    unchanged_page_writes_nothing,
    rename_keeps_space_id_and_old_alias_resolves,
    renaming_back_reopens_the_old_value,
    transfer_retires_old_owner_aliases,
    complete_listing_marks_unseen_missing_and_revives,
    person_connection_cannot_write_company_space,
    reused_name_resolves_to_both_active_first,
    lease_excludes_a_second_holder_until_it_lapses,
    runs_record_their_figures,
    audit_log_is_append_only,
    tombstone_keeps_aliases,
    resolve_by_address_and_unknown_input,
);
