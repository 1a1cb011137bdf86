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

fn main() -> std::process::ExitCode {
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
