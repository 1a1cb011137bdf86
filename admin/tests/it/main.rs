//! Admin behaviours (proposal lifecycle, bulk decisions, authorisation),
//! each run on SQLite and PostgreSQL by `both_backends!`.

mod api;
mod browser;
mod lifecycle;
mod screen;
mod support;

macro_rules! both_backends {
    ($suite:ident => $module:ident: $($name:ident),* $(,)?) => {
        mod $suite {
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
        }
    };
}

both_backends!(lifecycle_on => lifecycle:
    key_and_name_rungs_are_stored_with_evidence_in_words,
    rerun_with_same_evidence_proposes_nothing_new,
    rejected_stays_rejected_until_evidence_changes,
    conflict_is_reported_not_resolved,
    same_first_commit_rung_fires_on_stored_aliases,
    approval_writes_mapping_and_undo_removes_it,
    retired_place_key_still_matches_and_says_so,
    places_missing_from_import_are_retired_not_deleted,
    a_persons_spaces_never_become_company_proposals,
    changed_evidence_supersedes_an_open_proposal,
    demo_seed_leaves_proposals_and_an_admin_key,
);

both_backends!(api_on => api:
    every_route_answers_401_without_a_key,
    every_route_answers_403_without_the_power,
    member_and_service_keys_cannot_decide,
    admin_without_mappings_power_cannot_decide,
    bulk_approve_of_1000_writes_1000_mappings_and_audit_entries,
    bulk_with_one_invalid_item_leaves_nothing,
    connection_disable_is_audited,
    revoked_key_is_refused,
    openapi_document_lists_the_routes,
);

both_backends!(screen_on => screen:
    sign_in_sets_a_strict_httponly_cookie_and_sign_out_ends_it,
    forged_posts_are_refused,
    upstream_names_render_as_text,
    five_thousand_pending_are_paged_and_groups_decide,
    connections_show_their_rate_budget,
);

both_backends!(browser_on => browser:
    admin_approves_three_proposals_in_a_real_browser,
);
