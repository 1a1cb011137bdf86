//! The webhook gateway's integration tests: one binary, a module per
//! platform. Every webhook sample in `fixtures/data/<platform>/webhooks/` is
//! signed with a connection's secret, verified and parsed, exactly the path a
//! real delivery takes.

mod bitbucket;
mod github;
mod jira;
mod signing;
mod support;
