//! The `nanobot-gateway` binary: parses the command line, starts logging (stderr, colour only on a terminal)
//! and hands over to [`nanobot_cli::run_gateway_binary`], which discovers the environment exactly as `nanobot`
//! does and runs `nanobot gateway` (or writes the systemd unit for `install-service`).

use std::process::ExitCode;

use clap::Parser;
use nanobot_cli::{CliEnv, GatewayCli};

fn main() -> ExitCode {
    let cli = GatewayCli::parse();
    let env = CliEnv::from_process();
    let filter = nanobot_cli::gateway_log_filter(&cli, &env);
    let get = |k: &str| env.vars.get(k).map(String::as_str);
    let plan = nanobot_logging::LogPlan {
        filter,
        stderr: true,
        colour: nanobot_logging::colour(std::io::IsTerminal::is_terminal(&std::io::stderr()), get),
        dir: None,
    };
    let _logs = nanobot_logging::init(&plan)
        .or_else(|e| {
            eprintln!("nanobot-gateway: {e}; using `info`");
            nanobot_logging::init(&nanobot_logging::LogPlan {
                filter: "info".into(),
                ..plan.clone()
            })
        })
        .ok();
    ExitCode::from(nanobot_cli::run_gateway_binary(cli, &env))
}
