//! Integration tests of cmcp-connectors over real sockets against the
//! simulated upstreams of `cmcp-fixtures`. One binary, a module per area.

mod bitbucket;
mod drive;
mod github;
mod jira;
mod support;
