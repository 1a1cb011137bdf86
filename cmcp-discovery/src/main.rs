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
///
/// Only the long-running commands (`serve`, `worker`, `gateway`) restart:
/// a one-shot command exits long before its arenas matter. The restart
/// runs `/proc/self/exe`, the very file this process was started from,
/// even when a package upgrade has since replaced or removed the file at
/// its path: a process never turns into another version halfway through
/// its start.
fn with_two_malloc_arenas(command: &cli::Command) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        const MALLOC_ARENA_MAX: &str = "MALLOC_ARENA_MAX";
        if !command.is_long_running() || std::env::var_os(MALLOC_ARENA_MAX).is_some() {
            return;
        }
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| "cmcp-discovery".into());
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .env(MALLOC_ARENA_MAX, "2")
            .exec();
        eprintln!("warning: could not restart with {MALLOC_ARENA_MAX}=2 ({err}); going on");
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = command;
}

fn main() -> std::process::ExitCode {
    // Parsed first: `--help` and usage errors exit here, and only the
    // long-running commands start again with two arenas.
    let cli = cli::Cli::parse();
    with_two_malloc_arenas(&cli.command);
    // reqwest is built without a default TLS provider; sqlx already brings
    // ring, so install it once for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
