//! End-to-end behaviours of issue-sized slices. Each file lists its
//! behaviours once with `both_backends!`, which runs every one of them
//! against SQLite and PostgreSQL.

// The kit's `both_backends!` (defined in `cmcp_registry::testing`), in
// scope in every module of this binary without an import.
#[macro_use]
extern crate cmcp_tests;

mod bitbucket_budget;
mod budget_shown;
mod catalogues;
mod cheap_resync;
mod delivery_retries;
mod drive;
mod drive_channels;
mod ghes;
mod lease;
mod listing_integrity;
mod observe;
mod ownership;
mod people;
mod reconcile;
mod retention;
mod retry_intent;
mod schedule;
mod shared_budget;
mod signed_hooks;
mod suggestions;
mod sync;
mod upstream_abuse;
mod webhooks;
mod worker_restart;
