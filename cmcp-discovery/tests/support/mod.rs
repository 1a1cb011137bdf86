//! The binary as the tests launch it: in `dir`, with none of the
//! operator's `CMCP_DISCOVERY_*` settings leaking in from the environment
//! that runs the tests (each test sets what it means to).

use std::path::Path;
use std::process::{Command, Output};

/// `cmcp-discovery ARGS` in `dir`, with a clean configuration environment;
/// add `.env(…)`, stdio or `.spawn()` as the test needs.
pub fn binary(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cmcp-discovery"));
    cmd.args(args).current_dir(dir);
    for var in [
        "DATABASE_URL",
        "MASTER_KEY",
        "CONFIG",
        "DATA_DIR",
        "LOG",
        "PUBLIC_URL",
    ] {
        cmd.env_remove(format!("CMCP_DISCOVERY_{var}"));
    }
    // The binary sets its own malloc settings (see `observe.rs`).
    cmd.env_remove("MALLOC_ARENA_MAX");
    cmd.env_remove("MALLOC_MMAP_THRESHOLD_");
    cmd
}

/// Runs `cmcp-discovery ARGS` in `dir` to the end.
pub fn cli(dir: &Path, args: &[&str]) -> Output {
    binary(dir, args).output().expect("run cmcp-discovery")
}
