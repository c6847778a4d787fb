//! The `nanobot-gateway` binary: parses the command line, starts logging (stderr), loads the config and hands
//! over to [`nanobot_gateway::run_gateway`] (or writes the systemd unit for `install-service`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use nanobot_config::env_vars;
use nanobot_config::paths::NanobotPaths;
use nanobot_gateway::service::ServiceUnit;
use nanobot_gateway::{GatewayError, GatewayOptions};

/// Runs nanobot in long-running mode: chat channels, cron and heartbeat, health/metrics and the
/// OpenAI-compatible API.
#[derive(Debug, Parser)]
#[command(name = "nanobot-gateway", version, about)]
struct Args {
    /// Port of the health/metrics server (overrides `gateway.port`).
    #[arg(long)]
    port: Option<u16>,
    /// Workspace directory (overrides `agents.defaults.workspace`).
    #[arg(short = 'w', long)]
    workspace: Option<PathBuf>,
    /// Config file (default: `$NANOBOT_CONFIG` or `~/.nanobot/config.json`).
    #[arg(short = 'c', long)]
    config: Option<PathBuf>,
    /// Debug logging.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Do not serve the OpenAI-compatible API.
    #[arg(long, overrides_with = "api")]
    no_api: bool,
    /// Serve the OpenAI-compatible API (on by default only when `api.apiKey` is set).
    #[arg(long, overrides_with = "no_api")]
    api: bool,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Write a systemd user unit that runs this gateway.
    InstallService {
        /// Print the unit instead of writing it.
        #[arg(long)]
        dry_run: bool,
    },
}

fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let default_filter = if args.verbose {
        "info,nanobot=debug"
    } else {
        "info"
    };
    let get = |k: &str| vars.get(k).map(String::as_str);
    let plan = nanobot_logging::LogPlan {
        filter: nanobot_logging::filter_from(get, default_filter),
        stderr: true,
        colour: nanobot_logging::colour(std::io::IsTerminal::is_terminal(&std::io::stderr()), get),
        dir: None,
    };
    let _logs = nanobot_logging::init(&plan)
        .or_else(|e| {
            eprintln!("nanobot-gateway: {e}; using `{default_filter}`");
            nanobot_logging::init(&nanobot_logging::LogPlan {
                filter: default_filter.into(),
                ..plan.clone()
            })
        })
        .ok();
    match run(args, vars) {
        Ok(code) => code,
        Err(e) => {
            if matches!(e.downcast_ref::<GatewayError>(), Some(GatewayError::Interrupted)) {
                // Second signal: leave at once, without waiting for anything.
                std::process::exit(130);
            }
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args, vars: BTreeMap<String, String>) -> anyhow::Result<ExitCode> {
    let home = vars
        .get(env_vars::HOME)
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let config_path = args
        .config
        .clone()
        .or_else(|| {
            vars.get(env_vars::NANOBOT_CONFIG)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        })
        .map(|p| absolute(&p, &cwd));
    let paths = match &config_path {
        Some(p) => NanobotPaths::with_config_path(&home, p),
        None => NanobotPaths::new(&home),
    };
    let workspace = args.workspace.as_ref().map(|w| absolute(w, &cwd));

    if let Some(Sub::InstallService { dry_run }) = args.command {
        let mut unit_args = vec!["-c".to_owned(), paths.config_path().display().to_string()];
        if let Some(ws) = &workspace {
            unit_args.extend(["-w".to_owned(), ws.display().to_string()]);
        }
        let unit = ServiceUnit {
            program: std::env::current_exe().context("cannot find this program's path")?,
            args: unit_args,
            stop_timeout_secs: nanobot_gateway::DEFAULT_SHUTDOWN_GRACE.as_secs() + 15,
        };
        if dry_run {
            print!("{}", unit.render());
            return Ok(ExitCode::SUCCESS);
        }
        let xdg = vars
            .get("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let path = unit.install(&ServiceUnit::path(&home, xdg.as_deref()))?;
        println!("Wrote {}", path.display());
        println!(
            "Enable it with: systemctl --user daemon-reload && systemctl --user enable --now nanobot-gateway"
        );
        return Ok(ExitCode::SUCCESS);
    }

    let mut loaded = nanobot_config::load(paths.config_path(), &vars)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(ws) = &workspace {
        loaded.config.agents.defaults.workspace = ws.display().to_string();
    }
    let hash: HashMap<String, String> = vars.into_iter().collect();
    let mut env = nanobot_core::Environment::new(&home, hash);
    env.config_path = Some(paths.config_path().to_path_buf());
    let mut opts = GatewayOptions::gateway(loaded.config, env);
    opts.port = args.port;
    opts.api = (opts.api || args.api) && !args.no_api;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let report = runtime.block_on(nanobot_gateway::run_gateway(opts))?;
    if !report.drained {
        eprintln!("some turns did not finish before the shutdown deadline and were cancelled");
    }
    Ok(ExitCode::SUCCESS)
}
