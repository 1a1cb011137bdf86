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

/// The glibc malloc settings a long-running process runs with.
///
/// - `MALLOC_ARENA_MAX=2`: glibc gives threads that contend for malloc
///   arenas of their own, up to eight per core, and an arena keeps what it
///   freed. A sync's many short-lived allocations spread over the
///   runtime's threads then left the process larger the longer it ran
///   (`sync_bench`: the 100,000-repo first sync peaked 21 % above the
///   10,000-repo one with the default, 3–11 % with two arenas).
/// - `MALLOC_MMAP_THRESHOLD_=131072`: glibc serves an allocation of 128 KiB
///   or more with a mapping of its own, returned whole when freed, but
///   after the first such free it raises that threshold (up to 32 MiB) and
///   serves the next ones from the arena. A listing page's body (~500 KiB,
///   grown in steps) then fragments the arena, more the longer the run:
///   with the threshold fixed, the same syncs peaked 4–9 MiB lower and
///   1–7 % apart between 10,000 and 100,000 repositories, where they were
///   5–13 % apart, at the same speed.
///
/// Both are read from the environment when the process starts, so the
/// process starts itself again with the ones the operator did not set, the
/// same process id and arguments. A restart that fails goes on with
/// glibc's defaults.
///
/// Only the long-running commands (`serve`, `worker`, `gateway`) restart:
/// a one-shot command exits long before its arenas matter. The restart
/// runs `/proc/self/exe`, the very file this process was started from,
/// even when a package upgrade has since replaced or removed the file at
/// its path: a process never turns into another version halfway through
/// its start.
///
/// `sync_bench` (tests/benches) runs its children with a copy of these,
/// and the Containerfile and the systemd unit set them: change them
/// together.
const MALLOC_SETTINGS: [(&str, &str); 2] = [
    ("MALLOC_ARENA_MAX", "2"),
    ("MALLOC_MMAP_THRESHOLD_", "131072"),
];

fn with_malloc_settings(command: &cli::Command) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let missing: Vec<(&str, &str)> = MALLOC_SETTINGS
            .into_iter()
            .filter(|(var, _)| std::env::var_os(var).is_none())
            .collect();
        if !command.is_long_running() || missing.is_empty() {
            return;
        }
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| "cmcp-discovery".into());
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .envs(missing)
            .exec();
        eprintln!("warning: could not restart with the malloc settings ({err}); going on");
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = command;
}

fn main() -> std::process::ExitCode {
    // Parsed first: `--help` and usage errors exit here, and only the
    // long-running commands start again with the malloc settings.
    let cli = cli::Cli::parse();
    with_malloc_settings(&cli.command);
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
