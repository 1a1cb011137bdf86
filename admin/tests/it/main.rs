//! Admin behaviours (proposal lifecycle, bulk decisions, authorisation),
//! each run on SQLite and PostgreSQL by `both_backends!`.

// The test kit's `both_backends!`, in scope in every module. It comes from
// `cmcp_registry::testing`, not from `cmcp-tests`, which carries the worker,
// the gateway and the simulators this suite has no use for.
#[macro_use]
extern crate cmcp_registry;

mod api;
mod browser;
mod client_api;
mod contract;
mod deliveries;
mod lifecycle;
mod me_browser;
mod screen;
mod screen_strict;
mod suggestions;
mod support;
