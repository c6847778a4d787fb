//! `nanobot gateway` and `nanobot serve`: the long-running modes of `nanobot-gateway`, started with the config
//! this command line loads (`-c`, `-w`, the environment).

use std::time::Duration;

use crate::args::{
    ConfigArgs, GatewayAction, GatewayArgs, InstallServiceArgs, ServeArgs, ServiceArgs, ServiceManager,
};
use crate::daemon;
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

/// `nanobot gateway [status|logs|stop|restart|install-service|uninstall-service]`, and `--background`.
/// `program_words` are the words this program needs before the gateway's options (`["gateway"]` for `nanobot`,
/// none for `nanobot-gateway`): the service unit repeats them.
pub(crate) fn gateway_command(
    env: &CliEnv,
    program_words: &[&str],
    a: &GatewayArgs,
    action: Option<GatewayAction>,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    // A subcommand's own `-c`/`-w` win over those given before it.
    let pick = |c: &ConfigArgs| ConfigArgs {
        config: c.config.clone().or_else(|| a.config.config.clone()),
        workspace: c.workspace.clone().or_else(|| a.config.workspace.clone()),
    };
    match action {
        None if a.background => start_background(env, a, out),
        None => gateway(env, a),
        Some(GatewayAction::Status(c)) => {
            let inst = daemon::Instance::resolve(env, &pick(&c));
            daemon::print_status(&inst, &daemon::status(&inst), out);
            Ok(())
        }
        Some(GatewayAction::Logs {
            tail,
            follow: _,
            no_follow,
            config,
        }) => daemon::logs(
            &daemon::Instance::resolve(env, &pick(&config)),
            tail,
            !no_follow,
            out,
        ),
        Some(GatewayAction::Stop { timeout, config }) => {
            let inst = daemon::Instance::resolve(env, &pick(&config));
            if daemon::stop(&inst, Duration::from_secs(timeout))? {
                let _ = writeln!(out, "Gateway stopped.");
            } else {
                let _ = writeln!(out, "Gateway was not stopped: gateway_not_running");
            }
            daemon::print_status(&inst, &daemon::status(&inst), out);
            Ok(())
        }
        Some(GatewayAction::Restart {
            timeout,
            port,
            verbose,
            config,
        }) => {
            let args = GatewayArgs {
                port: port.or(a.port),
                config: pick(&config),
                verbose: verbose || a.verbose,
                ..a.clone()
            };
            let inst = daemon::Instance::resolve(env, &args.config);
            if !daemon::stop(&inst, Duration::from_secs(timeout))? {
                let _ = writeln!(out, "Gateway is not running; there is nothing to restart.");
                let _ = writeln!(
                    out,
                    "Start a persistent gateway with `nanobot gateway --background`."
                );
                daemon::print_status(&inst, &daemon::status(&inst), out);
                return Err(CliError::Failed("the gateway is not running".into()));
            }
            start_background(env, &args, out)
        }
        Some(GatewayAction::InstallService(mut i)) => {
            i.config = pick(&i.config);
            i.port = i.port.or(a.port);
            i.verbose |= a.verbose;
            install_service(env, program_words, &i, out)
        }
        Some(GatewayAction::UninstallService { service, dry_run }) => {
            uninstall_service(env, &service, dry_run, out)
        }
    }
}

/// `nanobot gateway --background`: the config is checked here (its errors belong on this terminal), then the
/// gateway starts detached.
fn start_background(env: &CliEnv, a: &GatewayArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let s = setup::load(env, &a.config, true)?;
    let gw = &s.loaded.config.gateway;
    let opts = daemon::StartOptions {
        port: a.port.unwrap_or(gw.port),
        host: gw.host.clone(),
        verbose: a.verbose,
        api: match (a.api, a.no_api) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
    };
    daemon::start(&daemon::Instance::resolve(env, &a.config), &opts, out)
}

/// `nanobot gateway` in the foreground.
pub(crate) fn gateway(env: &CliEnv, a: &GatewayArgs) -> Result<(), CliError> {
    if a.detached {
        // Started by `--background`: out of the terminal's session, so closing it does not end the gateway.
        let _ = nix::unistd::setsid();
    }
    let s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    let mut opts = nanobot_gateway::GatewayOptions::gateway(s.loaded.config, env.core_env(&s.paths));
    opts.port = a.port;
    opts.api = (opts.api || a.api) && !a.no_api;
    let rt = crate::runtime()?;
    match rt.block_on(nanobot_gateway::run_gateway_with_restart(opts)) {
        Ok((report, Some(request))) => {
            if !report.drained {
                eprintln!("some turns did not finish before the restart deadline and were cancelled");
            }
            rt.shutdown_timeout(Duration::from_secs(5));
            restart_process(&request)
        }
        Ok((report, None)) => finish(rt, Ok(report)),
        Err(e) => finish(rt, Err(e)),
    }
}

/// Replaces this process with a new one on the same command line (same pid: a service manager or the
/// background record keeps following it), telling it which chat asked for the restart (0.3.5's variables).
fn restart_process(request: &nanobot_core::RestartRequest) -> Result<(), CliError> {
    use std::os::unix::process::CommandExt as _;
    let program = std::env::current_exe().map_err(|e| CliError::io("find", "this program's path", e))?;
    // The same process (pid and parent): a launcher's pid stays valid and is kept (`crate::launcher`).
    let err = std::process::Command::new(&program)
        .args(std::env::args_os().skip(1))
        .envs(nanobot_gateway::restart_notice_vars(request))
        .exec();
    Err(CliError::io("restart", &program, err))
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
    if let Some(t) = a.timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(CliError::Usage(format!(
                "--timeout must be a positive number of seconds, not {t}"
            )));
        }
        s.loaded.config.api.timeout = t;
    }
    let opts = nanobot_gateway::GatewayOptions::serve(s.loaded.config, env.core_env(&s.paths));
    let rt = crate::runtime()?;
    let result = rt.block_on(nanobot_gateway::run_serve(opts));
    finish(rt, result)
}

/// The `nanobot-gateway` program's command line: `nanobot gateway`'s options and subcommands.
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
    pub command: Option<GatewayAction>,
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
        trace: crate::traces::trace_plan(env, config),
    }
}

/// Runs the `nanobot-gateway` program: the environment is discovered exactly as for `nanobot` (this crate's
/// [`CliEnv`]), and running is `nanobot gateway`. Returns the exit code, having printed any error.
pub fn run_gateway_binary(cli: GatewayCli, env: &CliEnv) -> u8 {
    crate::traces::install_hooks();
    let result = gateway_command(env, &[], &cli.args, cli.command, &mut std::io::stdout());
    match result {
        Ok(()) => crate::EXIT_OK,
        Err(e) => {
            eprintln!("Error: {e}");
            e.exit_code()
        }
    }
}

/// The unit file name for `--name` (0.3.5's rule): lower-cased, runs of characters other than letters, digits,
/// `_`, `.` and `-` become one `-`, leading and trailing `.`/`-` go, empty means `nanobot-gateway`; `.service` is
/// added unless already there.
fn unit_name(name: &str) -> String {
    let mut stem = String::new();
    for c in name.trim().to_lowercase().chars() {
        if c.is_ascii_alphanumeric() || "_.-".contains(c) {
            stem.push(c);
        } else if !stem.ends_with('-') {
            stem.push('-');
        }
    }
    let stem = stem.trim_matches(['.', '-']);
    let stem = if stem.is_empty() { "nanobot-gateway" } else { stem };
    if stem.ends_with(".service") {
        stem.to_owned()
    } else {
        format!("{stem}.service")
    }
}

/// `--manager`: systemd is the only service manager built; `launchd` is refused by name.
fn check_manager(manager: ServiceManager) -> Result<(), CliError> {
    match manager {
        ServiceManager::Auto | ServiceManager::Systemd => Ok(()),
        ServiceManager::Launchd => Err(CliError::Usage(
            "--manager launchd: macOS LaunchAgents are not built; only systemd user services are \
             (`--manager systemd`)"
                .into(),
        )),
    }
}

/// Runs `systemctl --user <args>`; a failure (or no `systemctl`) is an error naming the command and `written`.
fn systemctl(args: &[&str], written: &std::path::Path) -> Result<(), CliError> {
    let shown = format!("systemctl --user {}", args.join(" "));
    let status = std::process::Command::new("systemctl")
        .arg("--user")
        .args(args)
        .stdin(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(CliError::Failed(format!(
            "`{shown}` failed ({s}); the unit is written at {}",
            written.display()
        ))),
        Err(e) => Err(CliError::Failed(format!(
            "cannot run `{shown}`: {e}; the unit is written at {}",
            written.display()
        ))),
    }
}

/// `gateway install-service`: a systemd user unit running this program's gateway with the same `-c`/`-w` (and
/// `-p`/`-v` when given), then, as 0.3.5, `systemctl --user daemon-reload`, `enable` and `restart` (the last two
/// unless `--no-enable`/`--no-start`).
fn install_service(
    env: &CliEnv,
    program_words: &[&str],
    a: &InstallServiceArgs,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    check_manager(a.service.manager)?;
    let unit_file = unit_name(&a.service.name);
    let (paths, _) = env.paths(a.config.config.as_deref());
    let mut unit_args: Vec<String> = program_words.iter().map(|w| (*w).to_owned()).collect();
    unit_args.extend(["-c".to_owned(), paths.config_path().display().to_string()]);
    if let Some(ws) = &a.config.workspace {
        unit_args.extend(["-w".to_owned(), env.absolute(ws).display().to_string()]);
    }
    if let Some(port) = a.port {
        unit_args.extend(["-p".to_owned(), port.to_string()]);
    }
    if a.verbose {
        unit_args.push("-v".to_owned());
    }
    let program = std::env::current_exe().map_err(|e| CliError::io("find", "this program's path", e))?;
    let unit = nanobot_gateway::service::ServiceUnit {
        program,
        args: unit_args,
        stop_timeout_secs: nanobot_gateway::DEFAULT_SHUTDOWN_GRACE.as_secs() + 15,
    };
    let mut commands: Vec<Vec<&str>> = vec![vec!["daemon-reload"]];
    if !a.no_enable {
        commands.push(vec!["enable", &unit_file]);
    }
    if !a.no_start {
        commands.push(vec!["restart", &unit_file]);
    }
    if a.dry_run {
        // The unit, then the commands as comments, so the output stays a valid unit file.
        let _ = write!(out, "{}", unit.render());
        for c in &commands {
            let _ = writeln!(out, "# then: systemctl --user {}", c.join(" "));
        }
        return Ok(());
    }
    let target = unit_path(env, &unit_file);
    let path = unit.install(&target).map_err(CliError::Gateway)?;
    let _ = writeln!(out, "Wrote {}", path.display());
    for c in &commands {
        systemctl(c, &path)?;
        let _ = writeln!(out, "Ran systemctl --user {}", c.join(" "));
    }
    let _ = writeln!(out, "Gateway service installed.");
    Ok(())
}

/// Where the systemd user unit `unit_file` is written (`$XDG_CONFIG_HOME/systemd/user`, else
/// `~/.config/systemd/user`).
fn unit_path(env: &CliEnv, unit_file: &str) -> std::path::PathBuf {
    let xdg = env
        .vars
        .get("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let default = nanobot_gateway::service::ServiceUnit::path(&env.home, xdg.as_deref());
    default.with_file_name(unit_file)
}

/// `gateway uninstall-service`: `systemctl --user disable --now` (best effort), removes the unit, then
/// `systemctl --user daemon-reload` (best effort: a machine without a user systemd still gets the file removed).
fn uninstall_service(
    env: &CliEnv,
    service: &ServiceArgs,
    dry_run: bool,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    check_manager(service.manager)?;
    let unit_file = unit_name(&service.name);
    let path = unit_path(env, &unit_file);
    let commands: [&[&str]; 2] = [&["disable", "--now", &unit_file], &["daemon-reload"]];
    let _ = writeln!(out, "Path: {}", path.display());
    let _ = writeln!(out, "Commands:");
    for c in commands {
        let _ = writeln!(out, "  systemctl --user {}", c.join(" "));
    }
    if dry_run {
        return Ok(());
    }
    let best_effort = |args: &[&str]| {
        let _ = std::process::Command::new("systemctl")
            .arg("--user")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    };
    best_effort(commands[0]);
    match std::fs::remove_file(&path) {
        Ok(()) => {
            let _ = writeln!(out, "Gateway service uninstalled.");
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = writeln!(out, "No gateway service was installed.");
        }
        Err(e) => return Err(CliError::io("remove", &path, e)),
    }
    best_effort(commands[1]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unit_name;

    #[test]
    fn unit_names_follow_0_3_5s_rule() {
        for (name, unit) in [
            ("nanobot-gateway", "nanobot-gateway.service"),
            ("My Bot!", "my-bot.service"),
            ("  a  b  ", "a-b.service"),
            ("work.service", "work.service"),
            ("-.bot.-", "bot.service"),
            ("€€", "nanobot-gateway.service"),
            ("", "nanobot-gateway.service"),
        ] {
            assert_eq!(unit_name(name), unit, "{name:?}");
        }
    }
}
