//! The matching crate's one test binary: the ladder's rungs in memory, and
//! the incremental refresh against the store on both backends.

mod incremental;
mod ladder;
