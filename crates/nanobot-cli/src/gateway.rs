//! `nanobot gateway` and `nanobot serve`: the long-running modes of `nanobot-gateway`, started with the config
//! this command line loads (`-c`, `-w`, the environment).

use crate::args::{GatewayArgs, ServeArgs};
use crate::error::CliError;
use crate::setup::{self, CliEnv};

fn finish(
    rt: tokio::runtime::Runtime,
    result: Result<nanobot_gateway::ShutdownReport, nanobot_gateway::GatewayError>,
) -> Result<(), CliError> {
    match result {
        Ok(report) => {
            if !report.drained {
                eprintln!("some turns did not finish before the shutdown deadline and were cancelled");
            }
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            Ok(())
        }
        Err(nanobot_gateway::GatewayError::Interrupted) => {
            // Second signal: leave at once.
            rt.shutdown_background();
            Err(CliError::Interrupted)
        }
        Err(e) => {
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            Err(CliError::Gateway(e))
        }
    }
}

/// `nanobot gateway`.
pub(crate) fn gateway(env: &CliEnv, a: &GatewayArgs) -> Result<(), CliError> {
    let s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    let mut opts = nanobot_gateway::GatewayOptions::gateway(s.loaded.config, env.core_env(&s.paths));
    opts.port = a.port;
    opts.api = (opts.api || a.api) && !a.no_api;
    let rt = crate::runtime()?;
    let result = rt.block_on(nanobot_gateway::run_gateway(opts));
    finish(rt, result)
}

/// `nanobot serve`.
pub(crate) fn serve(env: &CliEnv, a: &ServeArgs) -> Result<(), CliError> {
    let mut s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    if let Some(p) = a.port {
        s.loaded.config.api.port = p;
    }
    if let Some(h) = &a.host {
        s.loaded.config.api.host = h.clone();
    }
    let opts = nanobot_gateway::GatewayOptions::serve(s.loaded.config, env.core_env(&s.paths));
    let rt = crate::runtime()?;
    let result = rt.block_on(nanobot_gateway::run_serve(opts));
    finish(rt, result)
}

/// The `nanobot-gateway` program's command line: `nanobot gateway`'s options, plus `install-service`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "nanobot-gateway",
    version,
    about = "Runs nanobot in long-running mode: chat channels, cron and heartbeat, health/metrics and the \
             OpenAI-compatible API."
)]
pub struct GatewayCli {
    /// The same options as `nanobot gateway`.
    #[command(flatten)]
    pub args: GatewayArgs,
    /// What to do instead of running.
    #[command(subcommand)]
    pub command: Option<GatewaySub>,
}

/// `nanobot-gateway`'s subcommands.
#[derive(Debug, clap::Subcommand)]
#[non_exhaustive]
pub enum GatewaySub {
    /// Write a systemd user unit that runs this gateway.
    InstallService {
        /// Print the unit instead of writing it.
        #[arg(long)]
        dry_run: bool,
    },
}

/// The `tracing` filter of `nanobot-gateway`: `NANOBOT_LOG`, else `RUST_LOG`, else `info` (`-v`: debug for
/// nanobot).
pub fn gateway_log_filter(cli: &GatewayCli, env: &CliEnv) -> String {
    for var in [nanobot_config::env_vars::NANOBOT_LOG, "RUST_LOG"] {
        if let Some(f) = env.vars.non_empty(var) {
            return f.to_owned();
        }
    }
    if cli.args.verbose {
        "info,nanobot=debug".to_owned()
    } else {
        "info".to_owned()
    }
}

/// Where `nanobot-gateway`'s log lines go: stderr (colour only on a terminal without `NO_COLOR`) and rotated
/// files in `<data dir>/logs/`, as `nanobot gateway`.
pub fn gateway_log_plan(cli: &GatewayCli, env: &CliEnv) -> nanobot_logging::LogPlan {
    let colour = nanobot_logging::colour(env.stderr_tty, |k| env.vars.get(k));
    service_log_plan(gateway_log_filter(cli, env), colour, env, &cli.args.config)
}

/// The log plan of a long-running service (`gateway`, `serve`): stderr and the rotated files of the data
/// directory that `config` selects.
pub(crate) fn service_log_plan(
    filter: String,
    colour: bool,
    env: &CliEnv,
    config: &crate::args::ConfigArgs,
) -> nanobot_logging::LogPlan {
    nanobot_logging::LogPlan {
        filter,
        stderr: true,
        colour,
        dir: Some(env.paths(config.config.as_deref()).0.logs_dir()),
    }
}

/// Runs the `nanobot-gateway` program: the environment is discovered exactly as for `nanobot` (this crate's
/// [`CliEnv`]), and running is `nanobot gateway`. Returns the exit code, having printed any error.
pub fn run_gateway_binary(cli: GatewayCli, env: &CliEnv) -> u8 {
    let result = match cli.command {
        Some(GatewaySub::InstallService { dry_run }) => install_service(env, &cli.args, dry_run),
        None => gateway(env, &cli.args),
    };
    match result {
        Ok(()) => crate::EXIT_OK,
        Err(e) => {
            eprintln!("Error: {e}");
            e.exit_code()
        }
    }
}

/// `nanobot-gateway install-service`: a systemd user unit running this program with the same `-c`/`-w`.
fn install_service(env: &CliEnv, a: &GatewayArgs, dry_run: bool) -> Result<(), CliError> {
    let (paths, _) = env.paths(a.config.config.as_deref());
    let mut unit_args = vec!["-c".to_owned(), paths.config_path().display().to_string()];
    if let Some(ws) = &a.config.workspace {
        unit_args.extend(["-w".to_owned(), env.absolute(ws).display().to_string()]);
    }
    let program = std::env::current_exe().map_err(|e| CliError::io("find", "this program's path", e))?;
    let unit = nanobot_gateway::service::ServiceUnit {
        program,
        args: unit_args,
        stop_timeout_secs: nanobot_gateway::DEFAULT_SHUTDOWN_GRACE.as_secs() + 15,
    };
    if dry_run {
        print!("{}", unit.render());
        return Ok(());
    }
    let xdg = env
        .vars
        .get("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let target = nanobot_gateway::service::ServiceUnit::path(&env.home, xdg.as_deref());
    let path = unit.install(&target).map_err(CliError::Gateway)?;
    println!("Wrote {}", path.display());
    println!(
        "Enable it with: systemctl --user daemon-reload && systemctl --user enable --now nanobot-gateway"
    );
    Ok(())
}
