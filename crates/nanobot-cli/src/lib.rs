//! The nanobot command line, as a library: every command's logic lives here, `bins/nanobot` only parses,
//! starts logging and calls [`run`].
//!
//! **Owns:** the command tree ([`Cli`]), loading the config for `-c`/`-w` with the user-facing messages
//! (missing config → "run `nanobot onboard`", no API key → the provider and the key/variable to set, a bad
//! value → file, line and field), the exit codes ([`error`]: 0 ok, 1 runtime, 2 usage/config), `onboard`
//! (config + workspace templates), `agent` (one-shot and interactive), `status`, `doctor`, `channels status`,
//! `cron …`, `mcp list` and `eval` (scripted traces through the real loop and tools).
//!
//! **Must not know:** how the agent works inside (that is `nanobot-core`), chat platforms, the gateway's
//! HTTP surface. It never reads the process environment itself: the binary passes a [`CliEnv`]
//! ([`CliEnv::from_process`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use clap::Parser;
//! use nanobot_cli::{Cli, CliEnv};
//!
//! let home = tempfile::tempdir()?;
//! let env = CliEnv::for_home(home.path(), nanobot_util::EnvMap::new());
//! let mut out = Vec::new();
//!
//! // No config yet: a usage error (exit code 2) that says what to do.
//! let err = nanobot_cli::run_with(Cli::parse_from(["nanobot", "agent", "-m", "hi"]), &env, &mut out).unwrap_err();
//! assert!(err.to_string().contains("nanobot onboard"));
//! assert_eq!(err.exit_code(), nanobot_cli::EXIT_USAGE);
//!
//! nanobot_cli::run_with(Cli::parse_from(["nanobot", "onboard"]), &env, &mut out)?;
//! assert!(home.path().join(".nanobot/config.json").is_file());
//! assert!(home.path().join(".nanobot/workspace/AGENTS.md").is_file());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod agent;
mod args;
mod channels_login;
mod cli_history;
mod completion;
mod cron_cmd;
mod daemon;
mod doctor_online;
pub mod error;
mod eval;
mod gateway;
mod launcher;
mod local_servers;
mod mcp_cmd;
mod onboard;
mod onboard_wizard;
mod plugins;
mod provider_cmd;
mod render;
mod setup;
mod status;
mod traces;
mod usage_cmd;
mod webui;

use std::io::Write;

pub use args::{
    AgentArgs, ChannelLoginArgs, ChannelsAction, Cli, Command, ConfigArgs, CronAction, CronAddArgs,
    CronConfigArgs, DoctorArgs, EvalArgs, GatewayAction, GatewayArgs, McpAction, OnboardArgs, PluginsAction,
    ServeArgs, SessionsAction, StoreAction, StoreArgs, TriggerArgs, WebuiArgs, with_default_command,
};
pub use error::{CliError, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE};
pub use eval::{
    Expect, ExpectationResult, OneOrMany, ScriptedCall, ScriptedResponse, Trace, TraceReport, TraceTurn,
};
pub use gateway::{GatewayCli, gateway_log_filter, gateway_log_plan, run_gateway_binary};
pub use launcher::{EXIT_LAUNCHER_GONE, LAUNCHER_PID_VAR, LauncherBinding, bind_to_launcher};
/// Runs the egress bridge when the program was started as one inside a sandbox (`tools.network.allowedDomains`)
/// and exits with its command's status; returns at once otherwise. The programs call it first thing in `main`.
pub use nanobot_tools::egress::run_bridge_if_asked as run_egress_bridge_if_asked;
pub use onboard::{OnboardReport, TEMPLATES, default_config};
pub use provider_cmd::{ProviderAction, ProviderLoginArgs, ProviderLogoutArgs};
pub use render::MarkdownStream;
pub use setup::CliEnv;

/// The `tracing` filter for this command line: `NANOBOT_LOG` (else `RUST_LOG`) when set, `info` with
/// `agent --logs`, else `warn`.
pub fn log_filter(cli: &Cli, env: &CliEnv) -> String {
    let default = match cli.command.as_ref() {
        Some(Command::Agent(a)) if a.logs => "info",
        // One-shot: a failed turn is reported once, by the error line itself (the runner's log line and the
        // retries' lines would repeat it).
        Some(Command::Agent(a)) if a.message.is_some() => {
            "warn,nanobot_core::runner=off,nanobot_providers=error"
        }
        Some(Command::Gateway {
            args: a,
            action: None,
        }) if a.verbose => "info,nanobot=debug",
        Some(Command::Serve(a)) if a.verbose => "info,nanobot=debug",
        Some(Command::Gateway { action: None, .. } | Command::Serve(_) | Command::Webui(_)) => "info",
        _ => "warn",
    };
    nanobot_logging::filter_from(|k| env.vars.get(k), default)
}

/// Where this command line's log lines go. The interactive chat keeps the screen for the conversation: its
/// lines go to rotated files in `<data dir>/logs/` (and to stderr too only with `--logs`). The long-running
/// services (`gateway`, `serve`) write to stderr (the terminal, or the service manager's journal) and to the same
/// rotated files. Every other command writes to stderr only (stdout carries only answers). Colour only on a
/// terminal without `NO_COLOR`, never in files. The commands that run turns (`agent`, `gateway`, `serve`) export
/// their spans when a collector is configured (`gateway.tracing`).
pub fn log_plan(cli: &Cli, env: &CliEnv) -> nanobot_logging::LogPlan {
    let filter = log_filter(cli, env);
    let colour = nanobot_logging::colour(env.stderr_tty, |k| env.vars.get(k));
    match cli.command.as_ref() {
        Some(Command::Agent(a)) => nanobot_logging::LogPlan {
            filter,
            stderr: a.logs || a.message.is_some(),
            colour,
            dir: a
                .message
                .is_none()
                .then(|| env.paths(a.config.config.as_deref()).0.logs_dir()),
            trace: traces::trace_plan(env, &a.config),
        },
        Some(Command::Gateway {
            args: a,
            action: None,
        }) => gateway::service_log_plan(filter, colour, env, &a.config),
        Some(Command::Serve(a)) => gateway::service_log_plan(filter, colour, env, &a.config),
        _ => nanobot_logging::LogPlan {
            filter,
            stderr: true,
            colour,
            dir: None,
            trace: None,
        },
    }
}

/// Runs a parsed command against the real terminal (stdout) and returns the exit code, having printed any
/// error to stderr.
pub fn run(cli: Cli, env: &CliEnv) -> u8 {
    traces::install_hooks();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = run_with(cli, env, &mut out);
    let _ = out.flush();
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            if is_broken_pipe(&e) {
                return EXIT_OK;
            }
            eprintln!("Error: {e}");
            e.exit_code()
        }
    }
}

fn is_broken_pipe(e: &CliError) -> bool {
    matches!(e, CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

fn write_out(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("write", "stdout", e))
}

/// `nanobot onboard`: the config and templates, then (without an API key) a model server on this machine,
/// written into the config on `--use-local` or when the user says yes on a terminal.
fn onboard_cmd(env: &CliEnv, a: &args::OnboardArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if a.wizard {
        return onboard_wizard::run(env, a, out);
    }
    if env.stdin_tty && env.stdout_tty && !a.refresh {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        onboard_with(env, a, out, &local_servers::USUAL, Some(&mut input))
    } else {
        onboard_with(env, a, out, &local_servers::USUAL, None)
    }
}

/// [`onboard_cmd`] probing `candidates` on this machine; `input` is the user's terminal when there is one (the
/// question is asked there).
pub(crate) fn onboard_with(
    env: &CliEnv,
    a: &args::OnboardArgs,
    out: &mut dyn Write,
    candidates: &[local_servers::Candidate],
    mut input: Option<&mut dyn std::io::BufRead>,
) -> Result<(), CliError> {
    let interactive = input.is_some();
    let report = onboard::onboard(env, &a.config)?;
    let mut setup = setup::load(env, &a.config, true).ok();
    let has_key = setup
        .as_ref()
        .is_some_and(|s| s.loaded.config.providers.first_with_key().is_some());
    // Without a key, a model server on this machine is the quickest way to a first chat.
    let local = if has_key || a.skip_local {
        Vec::new()
    } else {
        local_servers::find(candidates, "127.0.0.1")
    };
    let (Some(found), Some(s)) = (local.first(), setup.as_mut()) else {
        let config = setup.map(|s| s.loaded.config);
        return write_out(
            out,
            &onboard::render_report(&report, config.as_ref(), onboard::LocalOutcome::None),
        );
    };
    let changes = onboard::local_changes(&s.loaded.config, found);
    let write = if changes.is_empty() {
        false
    } else if a.use_local {
        true
    } else if let Some(input) = input.as_mut() {
        write_out(
            out,
            &format!(
                "Found a local model server: {} at {}. Write these settings into {}?\n{}[Y/n] ",
                found.candidate.server,
                found.base,
                report.config_path.display(),
                onboard::describe_changes(&changes)
            ),
        )?;
        let mut answer = String::new();
        input
            .read_line(&mut answer)
            .map_err(|e| CliError::io("read", "stdin", e))?;
        matches!(answer.trim().to_ascii_lowercase().as_str(), "" | "y" | "yes")
    } else {
        false
    };
    let outcome = if changes.is_empty() {
        onboard::LocalOutcome::AlreadySet(found)
    } else if write {
        onboard::apply_local(&mut s.loaded.config, &changes);
        s.loaded.save().map_err(|e| CliError::from_config(e, None))?;
        onboard::LocalOutcome::Written(found, &changes)
    } else if interactive && !a.use_local {
        onboard::LocalOutcome::Declined(found)
    } else {
        onboard::LocalOutcome::Offered(found, &changes)
    };
    write_out(
        out,
        &onboard::render_report(&report, Some(&s.loaded.config), outcome),
    )
}

/// A tokio runtime for the commands that need one (only those: `--help`/`--version` never get here).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::io("start", "the async runtime", e))
}

/// Runs a parsed command, writing its normal output to `out` (the interactive chat uses the terminal
/// directly).
pub fn run_with(cli: Cli, env: &CliEnv, out: &mut dyn Write) -> Result<(), CliError> {
    let command = match cli.command {
        Some(_) if cli.install_completion || cli.show_completion => {
            return Err(CliError::Usage(
                "--install-completion and --show-completion take no command".into(),
            ));
        }
        Some(command) => command,
        None if cli.install_completion => return completion::install(env, out),
        None if cli.show_completion => return completion::show(env, out),
        None => return Err(CliError::Usage("no command given (see `nanobot --help`)".into())),
    };
    match command {
        Command::Onboard(a) => onboard_cmd(env, &a, out),
        Command::Status(a) => write_out(out, &status::status_text(env, &a)?),
        Command::Usage(a) => write_out(out, &usage_cmd::usage_text(env, &a)?),
        Command::Doctor(a) => {
            let mut findings = status::doctor(env, &a.config);
            if a.online
                && let Ok(s) = setup::load(env, &a.config, true)
            {
                let core_env = env.core_env(&s.paths);
                findings.extend(doctor_online::findings(&s.loaded.config, &core_env.vars));
            }
            let (text, problems) = status::doctor_text(&findings);
            write_out(out, &text)?;
            if problems > 0 {
                return Err(CliError::DoctorFailed(problems));
            }
            Ok(())
        }
        Command::Channels {
            action: ChannelsAction::Status(a),
        } => write_out(out, &status::channels_text(env, &a)?),
        Command::Channels {
            action: ChannelsAction::Login(a),
        } => channels_login::login(env, &a, out),
        Command::Cron { action } => cron(action, env, out),
        Command::Mcp {
            action: McpAction::List { config, no_connect },
        } => {
            let s = setup::load(env, &config, true)?;
            let text = if no_connect {
                mcp_cmd::list_text(env, &s, false)
            } else {
                runtime()?.block_on(mcp_cmd::list_connected(env, &s))
            }?;
            write_out(out, &text)
        }
        Command::Agent(a) => {
            let rt = runtime()?;
            let result = rt.block_on(agent::run(env, &a, out));
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            result
        }
        Command::Eval(a) => {
            let rt = runtime()?;
            rt.block_on(eval::run(env, &a, out))
        }
        Command::Gateway { args, action } => gateway::gateway_command(env, &["gateway"], &args, action, out),
        Command::Sessions {
            action: SessionsAction::RestoreWorkspace(a),
        } => restore_workspace(env, &a, out),
        Command::Trigger(a) => trigger(env, &a, &mut std::io::stdin().lock(), out),
        Command::Store { action } => store(action, env, out),
        Command::Plugins { action } => match action {
            PluginsAction::List(a) => plugins::list(env, &a, out),
            PluginsAction::Enable {
                name, config, logs, ..
            } => {
                if logs {
                    let _ = writeln!(out, "{}", plugins::NOTHING_TO_INSTALL);
                }
                plugins::set(env, &config, &name, true, out)
            }
            PluginsAction::Disable { name, config } => plugins::set(env, &config, &name, false, out),
        },
        Command::Serve(a) => gateway::serve(env, &a),
        Command::Webui(a) => webui::webui(env, &a, out),
        Command::Provider { action } => provider_cmd::run(env, action, out),
    }
}

/// `nanobot trigger ID [MESSAGE]`: queues a delivery for the gateway (outside the workspace; see
/// [`nanobot_cron::triggers`]). Without a message argument, a message piped on standard input is read.
fn trigger(
    env: &CliEnv,
    a: &args::TriggerArgs,
    stdin: &mut dyn std::io::BufRead,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    use nanobot_cron::triggers::MAX_MESSAGE_BYTES;
    use std::io::{IsTerminal as _, Read as _};
    let s = setup::load(env, &a.config, true)?;
    let content = match &a.message {
        Some(m) => m.clone(),
        None if !std::io::stdin().is_terminal() => {
            let mut buf = Vec::new();
            stdin
                .take(MAX_MESSAGE_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| CliError::Failed(format!("cannot read the message from standard input: {e}")))?;
            String::from_utf8(buf)
                .map_err(|_| CliError::Failed("the message on standard input is not UTF-8".into()))?
        }
        None => String::new(),
    };
    if content.trim().is_empty() {
        return Err(CliError::Usage(
            "the trigger message is required (an argument, or piped on standard input)".into(),
        ));
    }
    let store = nanobot_cron::TriggerStore::new(&s.workspace, s.paths.data_dir().join("triggers"));
    let delivery = store
        .enqueue(&a.trigger_id, &content)
        .map_err(|e| CliError::Failed(e.to_string()))?;
    write_out(
        out,
        &format!("Queued {} ({})\n", delivery.trigger_id, delivery.id),
    )
}

/// `nanobot store export|import`: the shared files of gateway replicas between the NATS server and this home.
fn store(action: StoreAction, env: &CliEnv, out: &mut dyn Write) -> Result<(), CliError> {
    let (how, a) = match action {
        StoreAction::Export(a) => (nanobot_gateway::StoreTransfer::Export, a),
        StoreAction::Import(a) => (nanobot_gateway::StoreTransfer::Import, a),
    };
    let s = setup::load(env, &a.config, true)?;
    let sessions = nanobot_sessions::SessionStore::new(s.paths.data_dir(), &s.workspace)
        .map_err(nanobot_core::CoreError::from)?;
    let dir = sessions.dir().to_owned();
    let mut areas = vec![
        ("sessions".to_owned(), dir.clone()),
        (
            nanobot_cron::SHARED_JOBS_NAME.to_owned(),
            nanobot_config::paths::workspace::cron_jobs(&s.workspace),
        ),
        // The usage ledger's month files (`usage/<YYYY-MM>.jsonl`).
        ("usage".to_owned(), s.paths.data_dir().join("usage")),
    ];
    areas.extend(memory_files(&s.workspace, how));
    let rt = runtime()?;
    let report = rt
        .block_on(nanobot_gateway::store_transfer(
            &s.loaded.config,
            areas,
            how,
            a.overwrite,
        ))
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let text = match how {
        nanobot_gateway::StoreTransfer::Export => format!(
            "Exported {} file(s) from {} to {}; {} already matched.\n",
            report.moved,
            report.stream,
            dir.display(),
            report.unchanged
        ),
        _ => format!(
            "Imported {} file(s) from {} into {}; {} already matched.\n",
            report.moved,
            dir.display(),
            report.stream,
            report.unchanged
        ),
    };
    write_out(out, &text)?;
    if report.conflicts.is_empty() {
        return Ok(());
    }
    let mut text =
        String::from("These differ on both sides and were left as they were (--overwrite replaces them):\n");
    for c in &report.conflicts {
        text.push_str(&format!("- {c}\n"));
    }
    write_out(out, &text)?;
    Err(CliError::Failed(format!(
        "{} file(s) were not transferred",
        report.conflicts.len()
    )))
}

/// The memory files `nanobot store` moves: on export everything stored under `memory/` and `profile/` (conflict
/// copies too); on import the files the memory sync shares ([`nanobot_memory::shared_files_of`]), not the other
/// files a home keeps there.
fn memory_files(
    workspace: &std::path::Path,
    how: nanobot_gateway::StoreTransfer,
) -> Vec<(String, std::path::PathBuf)> {
    use nanobot_memory::{MEMORY_DIR, SHARED_PROFILE_DIR};
    if how == nanobot_gateway::StoreTransfer::Export {
        return vec![
            (MEMORY_DIR.to_owned(), workspace.join(MEMORY_DIR)),
            (SHARED_PROFILE_DIR.to_owned(), workspace.to_owned()),
        ];
    }
    nanobot_memory::shared_files_of(workspace)
}

/// `nanobot sessions restore-workspace`: 0.3.5's rollback copy into `<workspace>/sessions/`.
fn restore_workspace(env: &CliEnv, a: &ConfigArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let s = setup::load(env, a, true)?;
    let store = nanobot_sessions::SessionStore::new(s.paths.data_dir(), &s.workspace)
        .map_err(nanobot_core::CoreError::from)?;
    let rt = runtime()?;
    let report = rt
        .block_on(store.restore_to_workspace())
        .map_err(nanobot_core::CoreError::from)?;
    write_out(
        out,
        &format!(
            "Restored {} session file(s) to {}; {} already matched.\n",
            report.restored,
            s.workspace.join("sessions").display(),
            report.unchanged
        ),
    )?;
    if report.conflicts.is_empty() {
        return Ok(());
    }
    let mut text = String::from("Rollback is incomplete: existing or invalid files require manual review.\n");
    for p in &report.conflicts {
        text.push_str(&format!("- {}\n", p.display()));
    }
    write_out(out, &text)?;
    Err(CliError::Failed(format!(
        "{} session file(s) were not restored",
        report.conflicts.len()
    )))
}

fn cron(action: CronAction, env: &CliEnv, out: &mut dyn Write) -> Result<(), CliError> {
    match action {
        CronAction::List { config, all } => {
            let s = setup::load(env, &config.into(), true)?;
            write_out(out, &cron_cmd::list_text(&s, all)?)
        }
        CronAction::Add(a) => {
            let s = setup::load(env, &a.config.clone().into(), true)?;
            write_out(out, &cron_cmd::add(&s, &a)?)
        }
        CronAction::Remove { id, config } => {
            let s = setup::load(env, &config.into(), true)?;
            write_out(out, &cron_cmd::remove(&s, &id)?)
        }
        CronAction::Enable { id, disable, config } => {
            let s = setup::load(env, &config.into(), true)?;
            write_out(out, &cron_cmd::enable(&s, &id, !disable)?)
        }
        CronAction::Run { id, force, config } => {
            let s = setup::load(env, &config.into(), true)?;
            let rt = runtime()?;
            let text = rt.block_on(agent::run_cron_job(env, &s, &id, force))?;
            write_out(out, &text)
        }
    }
}
