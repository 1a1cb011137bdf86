//! The store's conformance suite: every behaviour is written once and run
//! against SQLite and PostgreSQL by `conformance!`.

mod sightings;
mod suite;
mod upgrade;

/// Expand each named behaviour into a SQLite test and a PostgreSQL test;
/// `module => a, b` names behaviours of another module than `suite`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        conformance!(suite => $($name),*);
    };
    ($module:ident => $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = cmcp_registry::testing::TestDb::sqlite().await;
                    crate::$module::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = cmcp_registry::testing::TestDb::postgres().await else { return };
                    crate::$module::$name(&db).await;
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

mod sighting_cases {
    conformance!(
        sightings =>
        two_company_connections_share_spaces,
        person_reading_company_space_records_only_a_sighting,
        person_never_writes_another_persons_space,
        company_takes_over_a_private_space_and_records_it,
        tombstone_only_on_authority,
        private_owner_may_tombstone_her_space,
        unchanged_resighting_writes_nothing,
        access_lost_sighting_keeps_no_space_alive,
    );
}
