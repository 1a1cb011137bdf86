//! What every platform connector shares: HTTP settings, request execution
//! with retries and rate-limit waits, `Link` pagination and the rate budget.
//! Platform modules depend on this one and never on each other.

pub mod atlassian;
pub mod budget;
pub mod config;
pub mod http;
pub mod link;
pub mod metrics;
pub mod page_cache;
pub mod policy;
pub mod shared;
pub mod tally;
