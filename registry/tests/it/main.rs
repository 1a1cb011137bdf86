//! The store's conformance suite: a file per store module, every behaviour
//! written once and run against SQLite and PostgreSQL by `both_backends!`.

// The test kit's `both_backends!` (from `cmcp_registry::testing`), in scope
// in every module.
#[macro_use]
extern crate cmcp_registry;

mod audit;
mod budgets;
mod changes;
mod connections;
mod drive_channels;
mod http_cache;
mod keys;
mod manifest;
mod nodelay;
mod places;
mod proposals;
mod resolve;
mod runs;
mod schema;
mod sightings;
mod spaces;
mod support;
mod unseen;
mod upgrade;
mod upgrade_each;
mod webhooks;
