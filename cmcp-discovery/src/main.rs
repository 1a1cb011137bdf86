//! `cmcp-discovery`: parse the command line, load the configuration, run
//! the command. Everything else lives in the library crates.

mod app;
mod cli;
mod commands;
mod config;
mod linker;
mod logging;
mod observe;

use clap::Parser;

/// glibc's malloc gives threads that contend for it arenas of their own,
/// up to eight per core, and an arena keeps what it freed. A sync's many
/// short-lived allocations spread over the runtime's threads then leave
/// the process larger the longer it runs (`sync_bench`: the 100,000-repo
/// first sync peaked 21 % above the 10,000-repo one with the default,
/// 3–11 % above it with two arenas, medians of three). The limit is read
/// from the environment when the process starts, so the process starts
/// itself again with it, the same process id and arguments, unless the
/// operator set one. A restart that fails goes on with the default.
fn with_two_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        const MALLOC_ARENA_MAX: &str = "MALLOC_ARENA_MAX";
        if std::env::var_os(MALLOC_ARENA_MAX).is_some() {
            return;
        }
        if let Ok(exe) = std::env::current_exe() {
            let err = std::process::Command::new(exe)
                .args(std::env::args_os().skip(1))
                .env(MALLOC_ARENA_MAX, "2")
                .exec();
            eprintln!("warning: could not restart with {MALLOC_ARENA_MAX}=2 ({err}); going on");
        }
    }
}

fn main() -> std::process::ExitCode {
    with_two_malloc_arenas();
    // reqwest is built without a default TLS provider; sqlx already brings
    // ring, so install it once for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<commands::PartialRun>().is_some() {
                std::process::ExitCode::from(commands::PARTIAL_EXIT)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}
