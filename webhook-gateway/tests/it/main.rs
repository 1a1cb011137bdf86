//! The webhook gateway's integration tests: one binary, a module per
//! platform. Every webhook sample in `fixtures/data/<platform>/webhooks/` is
//! signed with a connection's secret, verified and parsed, exactly the path a
//! real delivery takes.

// The test kit's `both_backends!`, in scope in every module. It comes from
// `cmcp_registry::testing`, not from `cmcp-tests`: that crate depends on
// this one, so a dev-dependency on it would build the gateway twice.
#[macro_use]
extern crate cmcp_registry;

mod batches;
mod bitbucket;
mod cached;
mod edge;
mod github;
mod hooks;
mod jira;
mod signing;
mod support;
