//! The store's conformance suite: a file per store module, every behaviour
//! written once and run against SQLite and PostgreSQL by `both_backends!`.

// The test kit's `both_backends!` (from `cmcp_registry::testing`), in scope
// in every module.
#[macro_use]
extern crate cmcp_registry;

mod audit;
mod connections;
mod runs;
mod schema;
mod spaces;
mod support;
