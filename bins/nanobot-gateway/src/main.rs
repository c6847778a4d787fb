//! The `nanobot-gateway` binary: parses the command line, starts logging (stderr, colour only on a terminal, and rotated files in `<data dir>/logs/`;
//! spans to an OpenTelemetry collector when `gateway.tracing` names one)
//! and hands over to [`nanobot_cli::run_gateway_binary`], which discovers the environment exactly as `nanobot`
//! does and runs `nanobot gateway` (or writes the systemd unit for `install-service`).

use std::process::ExitCode;

use clap::Parser;
use nanobot_cli::{CliEnv, GatewayCli};

fn main() -> ExitCode {
    // Started inside a sandbox as its egress bridge (`tools.network.allowedDomains`): that, and nothing else.
    nanobot_cli::run_egress_bridge_if_asked();
    let cli = GatewayCli::parse();
    let env = CliEnv::from_process();
    let plan = nanobot_cli::gateway_log_plan(&cli, &env);
    let _logs = nanobot_logging::init(&plan)
        .or_else(|e| {
            // A bad filter or an unwritable log directory: stderr with `info` still works.
            eprintln!("nanobot-gateway: {e}; logging to stderr with `info`");
            let traces_failed = matches!(e, nanobot_logging::LoggingError::Traces { .. });
            nanobot_logging::init(&nanobot_logging::LogPlan {
                filter: "info".into(),
                dir: None,
                trace: if traces_failed { None } else { plan.trace.clone() },
                ..plan.clone()
            })
        })
        .ok();
    ExitCode::from(nanobot_cli::run_gateway_binary(cli, &env))
}
