//! The `nanobot` binary: binds itself to the Python launcher that started it, if one did
//! ([`nanobot_cli::bind_to_launcher`]), then parses the command line, starts logging (stderr, files under
//! `logs/` for the interactive chat, both for `gateway`/`serve`) and hands over to [`nanobot_cli`]. `--help`
//! and `--version` are answered by the parser before anything else happens.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use nanobot_cli::{Cli, CliEnv};

fn main() -> ExitCode {
    // Started inside a sandbox as its egress bridge (`tools.network.allowedDomains`): that, and nothing else.
    nanobot_cli::run_egress_bridge_if_asked();
    // Started by the Python wheel's launcher: end with it, whatever ends it (SIGKILL included).
    let launcher = std::env::var_os(nanobot_cli::LAUNCHER_PID_VAR);
    if nanobot_cli::bind_to_launcher(launcher.as_deref()) == nanobot_cli::LauncherBinding::Gone {
        return ExitCode::from(nanobot_cli::EXIT_LAUNCHER_GONE);
    }
    // `--version` shows this program's version, not that of the library crate that defines the command line.
    // `nanobot` alone or with agent options (`nanobot -m "hi"`) talks to the agent, as in 0.3.5.
    let parsed = Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .try_get_matches_from(nanobot_cli::with_default_command(std::env::args_os()))
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with code 0; usage errors to stderr with code 2.
            let code = e.exit_code();
            let _ = e.print();
            return ExitCode::from(u8::try_from(code).unwrap_or(nanobot_cli::EXIT_USAGE));
        }
    };
    let env = CliEnv::from_process();
    let plan = nanobot_cli::log_plan(&cli, &env);
    let _logs = match nanobot_logging::init(&plan) {
        Ok(guard) => Some(guard),
        Err(e) => {
            eprintln!("nanobot: {e}; logging to stderr instead");
            let traces_failed = matches!(e, nanobot_logging::LoggingError::Traces { .. });
            let fallback = nanobot_logging::LogPlan {
                filter: "warn".into(),
                stderr: true,
                dir: None,
                trace: if traces_failed { None } else { plan.trace.clone() },
                ..plan
            };
            nanobot_logging::init(&fallback).ok()
        }
    };
    ExitCode::from(nanobot_cli::run(cli, &env))
}
