//! The `nanobot-gateway` binary: parses the command line, starts logging (stderr) and hands over to
//! [`nanobot_cli::run_gateway_binary`], which discovers the environment exactly as `nanobot` does and runs
//! `nanobot gateway` (or writes the systemd unit for `install-service`).

use std::process::ExitCode;

use clap::Parser;
use nanobot_cli::{CliEnv, GatewayCli};

fn main() -> ExitCode {
    let cli = GatewayCli::parse();
    let env = CliEnv::from_process();
    let filter = tracing_subscriber::EnvFilter::try_new(nanobot_cli::gateway_log_filter(&cli, &env))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    ExitCode::from(nanobot_cli::run_gateway_binary(cli, &env))
}
