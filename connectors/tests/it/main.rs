//! Integration tests of cmcp-connectors over real sockets against the
//! simulated upstreams of `cmcp-fixtures`. One binary, a module per area.

mod github;
mod support;
