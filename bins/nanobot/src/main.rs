//! The `nanobot` binary: parses the command line, starts logging (stderr only) and hands over to
//! [`nanobot_cli`]. `--help` and `--version` are answered by the parser before anything else happens.

use std::process::ExitCode;

use clap::Parser;
use nanobot_cli::{Cli, CliEnv};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with code 0; usage errors to stderr with code 2.
            let code = e.exit_code();
            let _ = e.print();
            return ExitCode::from(u8::try_from(code).unwrap_or(nanobot_cli::EXIT_USAGE));
        }
    };
    let env = CliEnv::from_process();
    let filter = tracing_subscriber::EnvFilter::try_new(nanobot_cli::log_filter(&cli, &env))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    ExitCode::from(nanobot_cli::run(cli, &env))
}
