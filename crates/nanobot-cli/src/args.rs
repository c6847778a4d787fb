//! The command tree (clap derive). Parsing never touches the config or starts a runtime, so `--help` and
//! `--version` are instant.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// nanobot: a personal AI assistant you run yourself.
#[derive(Debug, Parser)]
#[command(name = "nanobot", version, about = "🐈 nanobot: a personal AI assistant you run yourself", long_about = None, disable_version_flag = true)]
#[command(
    after_help = "Start here: `nanobot onboard`, then `nanobot agent`. Run `nanobot` without a subcommand (or with \
                  agent options, such as `nanobot -m \"hi\"`) to talk to the agent."
)]
pub struct Cli {
    /// Print version.
    #[arg(short = 'v', long = "version", short_alias = 'V', action = clap::ArgAction::Version)]
    version: Option<bool>,
    /// Install the completion script for the shell this runs in (bash, zsh or fish), and load it from the
    /// shell's start-up file.
    #[arg(long = "install-completion", exclusive = true)]
    pub install_completion: bool,
    /// Print the completion script for the shell this runs in, to copy or to install by hand.
    #[arg(long = "show-completion", exclusive = true)]
    pub show_completion: bool,
    /// What to do (none only with `--install-completion` or `--show-completion`).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options the root command answers itself; any other leading option belongs to `agent`.
const ROOT_OPTIONS: [&str; 7] = [
    "-h",
    "--help",
    "-v",
    "-V",
    "--version",
    "--install-completion",
    "--show-completion",
];

/// The command line as 0.3.5 reads it: `nanobot` alone, or followed by an option that is not the root's own
/// (`nanobot -m "hi"`, `nanobot --session x`), means `nanobot agent …`. `args` includes the program name.
pub fn with_default_command<I>(args: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator<Item = std::ffi::OsString>,
{
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let first = args.get(1).map(|a| a.to_string_lossy().into_owned());
    let agent = match first.as_deref() {
        None => true,
        Some(a) => a.starts_with('-') && !ROOT_OPTIONS.contains(&a.split('=').next().unwrap_or(a)),
    };
    if agent {
        args.insert(1.min(args.len()), "agent".into());
    }
    args
}

/// `nanobot doctor`.
#[derive(Debug, Clone, Default, Args)]
pub struct DoctorArgs {
    /// Config and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Also send one tiny real request (one output token) to each configured model: the default and the
    /// fallbacks.
    #[arg(long)]
    pub online: bool,
}

/// `-c CONFIG` and `-w WORKSPACE`, shared by the subcommands that load a config.
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigArgs {
    /// Config file (default: ~/.nanobot/config.json).
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    /// Workspace directory (default: agents.defaults.workspace from the config).
    #[arg(short = 'w', long = "workspace", value_name = "WORKSPACE")]
    pub workspace: Option<PathBuf>,
}

/// Arguments of `nanobot usage`.
#[derive(Debug, Clone, Args)]
pub struct UsageArgs {
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Group by `day`, `model`, `chat` or `person`.
    #[arg(long, default_value = "day", value_parser = parse_group)]
    pub by: nanobot_usage::GroupBy,
    /// The last N days (0: everything recorded).
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub days: u32,
    /// Only this chat (`channel:chat_id`, e.g. `telegram:12345`).
    #[arg(long, value_name = "CHAT")]
    pub chat: Option<String>,
    /// Only this person (`channel:user_id`).
    #[arg(long, value_name = "PERSON")]
    pub person: Option<String>,
}

fn parse_group(s: &str) -> Result<nanobot_usage::GroupBy, String> {
    s.parse()
}

/// Arguments of `nanobot onboard`.
#[derive(Debug, Clone, Default, Args)]
pub struct OnboardArgs {
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Without an API key, a model server found on this machine (llama.cpp, LM Studio, Ollama, vLLM) is written
    /// into the config without asking (for scripts; on a terminal `onboard` asks).
    #[arg(long = "use-local", conflicts_with = "skip_local")]
    pub use_local: bool,
    /// Do not look for a model server on this machine.
    #[arg(long = "skip-local")]
    pub skip_local: bool,
    /// Refresh the config and templates, keeping every value, without asking anything (0.3.5's flag).
    #[arg(long = "refresh")]
    pub refresh: bool,
    /// Ask for the provider, API key, model, WebUI password and other settings on the terminal (0.3.5's
    /// set-up wizard), then save the config once; needs a terminal.
    #[arg(long = "wizard", conflicts_with_all = ["refresh", "use_local", "skip_local"])]
    pub wizard: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Write a default config and the workspace templates (or refresh them, keeping your values).
    Onboard(OnboardArgs),
    /// Talk to the agent: one message with `-m`, otherwise an interactive chat.
    Agent(AgentArgs),
    /// Show the config, workspace, model, provider keys (never their values), channels and MCP servers.
    Status(ConfigArgs),
    /// Check what would stop a working setup and say how to fix each problem.
    Doctor(DoctorArgs),
    /// Chat channels.
    Channels {
        /// What to do with the channels.
        #[command(subcommand)]
        action: ChannelsAction,
    },
    /// Scheduled jobs (`<workspace>/cron/jobs.json`).
    Cron {
        /// What to do with the jobs.
        #[command(subcommand)]
        action: CronAction,
    },
    /// MCP servers (`tools.mcpServers`).
    Mcp {
        /// What to do with the servers.
        #[command(subcommand)]
        action: McpAction,
    },
    /// Replay a scripted conversation through the real agent loop and tools, and check expectations.
    Eval(EvalArgs),
    /// What the assistant spent (model calls, tokens, cost) by day, model, chat or person, and the budgets.
    Usage(UsageArgs),
    /// Optional features: which channels this build has and which are enabled.
    Plugins {
        /// What to do.
        #[command(subcommand)]
        action: PluginsAction,
    },
    /// Deliver a message to a local trigger (made with `/trigger <name>` in a chat); the gateway answers it there.
    Trigger(TriggerArgs),
    /// Manage persisted session history.
    Sessions {
        /// What to do with the sessions.
        #[command(subcommand)]
        action: SessionsAction,
    },
    /// Run the long-running gateway: chat channels, cron and heartbeat, health/metrics, the OpenAI-compatible API.
    Gateway {
        /// How to run it.
        #[command(flatten)]
        args: GatewayArgs,
        /// What to do instead of running in the foreground.
        #[command(subcommand)]
        action: Option<GatewayAction>,
    },
    /// Serve only the OpenAI-compatible API (`/v1/chat/completions`).
    Serve(ServeArgs),
    /// Start the gateway with its `websocket` channel and open the WebUI in the browser.
    Webui(WebuiArgs),
    /// Gateway replicas' shared files on NATS (`gateway.bus.nats.store: jetstream`): export them to this home's
    /// JSONL layout, or import this home's files.
    Store {
        /// Which way.
        #[command(subcommand)]
        action: StoreAction,
    },
    /// OAuth providers: sign in (`login`) and out (`logout`).
    Provider {
        /// What to do.
        #[command(subcommand)]
        action: crate::provider_cmd::ProviderAction,
    },
}

/// `nanobot trigger ID [MESSAGE]` (0.3.5's command).
#[derive(Debug, Clone, Default, Args)]
pub struct TriggerArgs {
    /// Trigger ID returned by /trigger.
    pub trigger_id: String,
    /// Message to deliver; standard input is read when it is omitted.
    pub message: Option<String>,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// `nanobot webui` (the flags of nanobot 0.3.5).
#[derive(Debug, Clone, Default, Args)]
pub struct WebuiArgs {
    /// WebUI port (overrides channels.websocket.port).
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Port of the health/metrics server (overrides gateway.port).
    #[arg(long = "gateway-port")]
    pub gateway_port: Option<u16>,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Deprecated in 0.3.5; refused with a hint (`nanobot gateway` runs in the background under a supervisor).
    #[arg(long = "background")]
    pub background: bool,
    /// 0.3.5's frontend development server; this WebUI has no build step, so it is refused.
    #[arg(long = "dev")]
    pub dev: bool,
    /// Do not open a browser.
    #[arg(long = "no-open")]
    pub no_open: bool,
    /// Accept the local WebUI defaults without asking (the channel is turned on for this run either way).
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// `nanobot gateway`.
#[derive(Debug, Clone, Default, Args)]
pub struct GatewayArgs {
    /// Port of the health/metrics server (overrides gateway.port).
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Debug logging.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Do not serve the OpenAI-compatible API.
    #[arg(long = "no-api", overrides_with = "api")]
    pub no_api: bool,
    /// Serve the OpenAI-compatible API (on by default only when `api.apiKey` is set).
    #[arg(long = "api", overrides_with = "no_api")]
    pub api: bool,
    /// Run in the foreground (the default).
    #[arg(long = "foreground", conflicts_with = "background")]
    pub foreground: bool,
    /// Start as a background process (output in `<data dir>/logs/gateway.log`; see `gateway status|logs|stop`).
    #[arg(long = "background")]
    pub background: bool,
    /// Set by `--background` for the process it starts: leave the terminal's session.
    #[arg(long = "detached", hide = true)]
    pub detached: bool,
}

/// `nanobot plugins …`.
#[derive(Debug, Clone, Subcommand)]
#[non_exhaustive]
pub enum PluginsAction {
    /// List the optional features (channels and others) and whether they are enabled and built in.
    List(ConfigArgs),
    /// Enable a channel (sets `channels.<name>.enabled` in config.json).
    Enable {
        /// The channel (e.g. telegram, slack, email).
        name: String,
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
        /// 0.3.5 installs a feature's Python packages and this shows the installer's output; the channels are
        /// built into this program, so nothing is installed and this only says so.
        #[arg(long = "logs", overrides_with = "no_logs")]
        logs: bool,
        /// Print no installer output (the default).
        #[arg(long = "no-logs")]
        no_logs: bool,
    },
    /// Disable a channel.
    Disable {
        /// The channel.
        name: String,
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
    },
}

/// `nanobot store …` (nanobot-rs: the shared files of gateway replicas on the NATS server of
/// `gateway.bus.nats`).
#[derive(Debug, Clone, Subcommand)]
#[non_exhaustive]
pub enum StoreAction {
    /// Write the stored sessions, cron jobs, memory and profile into this home (`<data dir>/sessions/<workspace
    /// id>/`, `<workspace>/cron/jobs.json`, `<workspace>/memory/`, `SOUL.md`, `USER.md`), byte for byte.
    Export(StoreArgs),
    /// Publish this home's session files, cron jobs, memory and profile to the server.
    Import(StoreArgs),
}

/// The options of `nanobot store export|import`.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// Replace files that differ on the other side (by default they are listed and left alone).
    #[arg(long = "overwrite")]
    pub overwrite: bool,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// `nanobot sessions …`.
#[derive(Debug, Clone, Subcommand)]
#[non_exhaustive]
pub enum SessionsAction {
    /// Copy sessions back into the workspace before downgrading nanobot.
    RestoreWorkspace(ConfigArgs),
}

/// What `nanobot gateway` does instead of running in the foreground (0.3.5's subcommands).
#[derive(Debug, Clone, Subcommand)]
#[non_exhaustive]
pub enum GatewayAction {
    /// Show the background gateway status.
    Status(ConfigArgs),
    /// Show background gateway logs.
    Logs {
        /// Number of recent lines to show.
        #[arg(long = "tail", default_value_t = 200)]
        tail: usize,
        /// Follow new log output (`--no-follow` prints and ends).
        #[arg(long = "follow", overrides_with = "no_follow")]
        follow: bool,
        /// Print and end.
        #[arg(long = "no-follow")]
        no_follow: bool,
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Stop the background gateway.
    Stop {
        /// Seconds to wait after SIGTERM before killing it.
        #[arg(long = "timeout", default_value_t = 20)]
        timeout: u64,
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Restart the background gateway.
    Restart {
        /// Seconds to wait for the old one to stop.
        #[arg(long = "timeout", default_value_t = 20)]
        timeout: u64,
        /// Port of the health/metrics server (overrides gateway.port).
        #[arg(short = 'p', long = "port")]
        port: Option<u16>,
        /// Debug logging.
        #[arg(short = 'v', long = "verbose")]
        verbose: bool,
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Install a systemd user service for the gateway, then enable and start it.
    InstallService(InstallServiceArgs),
    /// Disable and remove the systemd user service.
    UninstallService {
        /// Which service.
        #[command(flatten)]
        service: ServiceArgs,
        /// Print what would be removed and run instead of doing it.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which gateway service `install-service` and `uninstall-service` act on.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// Service name: the unit is `<name>.service`, lower-cased, with characters other than letters, digits,
    /// `_`, `.` and `-` replaced by `-`.
    #[arg(long = "name", default_value = "nanobot-gateway")]
    pub name: String,
    /// Service manager: auto, systemd or launchd. `auto` and `systemd` mean a systemd user service; `launchd`
    /// (macOS LaunchAgents) is not built and is refused.
    #[arg(long = "manager", value_enum, default_value_t = ServiceManager::Auto, hide_possible_values = true)]
    pub manager: ServiceManager,
}

/// `--manager` of the service commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum ServiceManager {
    /// The platform's own (systemd here).
    Auto,
    /// A systemd user service.
    Systemd,
    /// A macOS LaunchAgent (not built).
    Launchd,
}

/// `nanobot gateway install-service`.
#[derive(Debug, Clone, Args)]
pub struct InstallServiceArgs {
    /// Port of the health/metrics server the service's gateway uses (passed on as its `-p`).
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Debug logging in the service's gateway (passed on as its `-v`).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Which service.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// Enable the service after writing it (`systemctl --user enable`; the default).
    #[arg(long = "enable", overrides_with = "no_enable")]
    pub enable: bool,
    /// Do not enable it.
    #[arg(long = "no-enable")]
    pub no_enable: bool,
    /// Start (or restart) the service after writing it (`systemctl --user restart`; the default).
    #[arg(long = "start", overrides_with = "no_start")]
    pub start: bool,
    /// Do not start it.
    #[arg(long = "no-start")]
    pub no_start: bool,
    /// Print the unit and the `systemctl` commands instead of writing and running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// `nanobot serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Port of the API (overrides api.port).
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Address to listen on (overrides api.host; a non-loopback address needs api.apiKey).
    #[arg(short = 'H', long = "host")]
    pub host: Option<String>,
    /// Per-request timeout in seconds (overrides api.timeout).
    #[arg(short = 't', long = "timeout")]
    pub timeout: Option<f64>,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Debug logging.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// `nanobot agent`.
#[derive(Debug, Clone, Default, Args)]
pub struct AgentArgs {
    /// Send this one message, print only the answer on stdout, and exit.
    #[arg(short = 'm', long = "message", value_name = "TEXT")]
    pub message: Option<String>,
    /// Session key.
    #[arg(
        short = 's',
        long = "session",
        value_name = "SESSION",
        default_value = "cli:direct"
    )]
    pub session: String,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the answer as plain text instead of rendering Markdown.
    #[arg(long = "no-markdown", overrides_with = "markdown")]
    pub no_markdown: bool,
    /// Render the answer's Markdown (the default; the last of `--markdown`/`--no-markdown` wins).
    #[arg(long = "markdown")]
    pub markdown: bool,
    /// Show the agent's logs (on stderr) while it works.
    #[arg(long = "logs", overrides_with = "no_logs")]
    pub logs: bool,
    /// Keep the agent's logs in the log files only (the default).
    #[arg(long = "no-logs")]
    pub no_logs: bool,
    /// Use the line-by-line chat prompt: the only interactive chat here (0.3.5's default is a full-screen
    /// terminal UI), so this changes nothing.
    #[arg(long = "classic", visible_alias = "no-tui")]
    pub classic: bool,
    /// Colours of 0.3.5's full-screen terminal UI: auto, dark or light. Checked, then unused: the line prompt
    /// here keeps the terminal's colours.
    #[arg(long = "theme", value_name = "THEME", default_value = "auto", value_parser = parse_theme)]
    pub theme: String,
}

/// `--theme`: `auto`, `dark` or `light`, in any case and with surrounding spaces, as 0.3.5 reads it.
fn parse_theme(value: &str) -> Result<String, String> {
    let theme = value.trim().to_ascii_lowercase();
    match theme.as_str() {
        "auto" | "dark" | "light" => Ok(theme),
        _ => Err("must be auto, dark, or light".to_owned()),
    }
}

/// `nanobot channels …`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum ChannelsAction {
    /// Which channels are enabled and whether their credentials look right.
    Status(ConfigArgs),
    /// Link a channel that logs in interactively (WhatsApp, personal WeChat: scan a QR code with your phone).
    Login(ChannelLoginArgs),
}

/// `nanobot channels login CHANNEL`.
#[derive(Debug, Clone, Args)]
pub struct ChannelLoginArgs {
    /// The channel (`whatsapp` or `weixin`).
    pub channel: String,
    /// Link again even if already linked (WhatsApp's old credentials are kept aside, not deleted; WeChat's
    /// working login is replaced only once the new scan is confirmed).
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// `nanobot mcp …`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum McpAction {
    /// Each server, its transport, whether it connects, and its tools.
    List {
        /// Config file and workspace.
        #[command(flatten)]
        config: ConfigArgs,
        /// Only show the configuration; do not start or connect to the servers.
        #[arg(long = "no-connect")]
        no_connect: bool,
    },
}

/// `-c`/`--config` for the cron commands (where `-c` is not the config: `cron add -c` is the expression,
/// as in the Python nanobot).
#[derive(Debug, Clone, Default, Args)]
pub struct CronConfigArgs {
    /// Config file (default: ~/.nanobot/config.json).
    #[arg(long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    /// Workspace directory (default: from the config).
    #[arg(short = 'w', long = "workspace", value_name = "WORKSPACE")]
    pub workspace: Option<PathBuf>,
}

impl From<CronConfigArgs> for ConfigArgs {
    fn from(a: CronConfigArgs) -> Self {
        ConfigArgs {
            config: a.config,
            workspace: a.workspace,
        }
    }
}

/// `nanobot cron …`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum CronAction {
    /// List the jobs.
    List {
        /// Config file and workspace.
        #[command(flatten)]
        config: CronConfigArgs,
        /// Include disabled jobs.
        #[arg(short = 'a', long = "all")]
        all: bool,
    },
    /// Add a job (exactly one of --every, --cron, --at).
    Add(CronAddArgs),
    /// Remove a job.
    Remove {
        /// The job id.
        id: String,
        /// Config file and workspace.
        #[command(flatten)]
        config: CronConfigArgs,
    },
    /// Enable (or with --disable, disable) a job.
    Enable {
        /// The job id.
        id: String,
        /// Disable instead.
        #[arg(long = "disable")]
        disable: bool,
        /// Config file and workspace.
        #[command(flatten)]
        config: CronConfigArgs,
    },
    /// Run a job now, as an agent turn, and print its answer.
    Run {
        /// The job id.
        id: String,
        /// Run it even when it is disabled.
        #[arg(short = 'f', long = "force")]
        force: bool,
        /// Config file and workspace.
        #[command(flatten)]
        config: CronConfigArgs,
    },
}

/// `nanobot cron add`.
#[derive(Debug, Clone, Default, Args)]
pub struct CronAddArgs {
    /// Job name.
    #[arg(short = 'n', long = "name")]
    pub name: String,
    /// The message the agent gets when the job fires.
    #[arg(short = 'm', long = "message")]
    pub message: String,
    /// Run every N seconds.
    #[arg(short = 'e', long = "every", value_name = "SECONDS")]
    pub every: Option<i64>,
    /// Crontab expression (5 fields, e.g. '0 9 * * MON-FRI').
    #[arg(short = 'c', long = "cron", value_name = "EXPR")]
    pub cron: Option<String>,
    /// IANA time zone for --cron (e.g. Europe/Berlin).
    #[arg(long = "tz", value_name = "TZ")]
    pub tz: Option<String>,
    /// Run once at this ISO time (e.g. 2026-12-01T09:00:00).
    #[arg(long = "at", value_name = "ISO")]
    pub at: Option<String>,
    /// Deliver the answer to a chat (--channel and --to).
    #[arg(short = 'd', long = "deliver")]
    pub deliver: bool,
    /// Chat id to deliver to.
    #[arg(long = "to")]
    pub to: Option<String>,
    /// Channel to deliver to (telegram, discord, slack …).
    #[arg(long = "channel")]
    pub channel: Option<String>,
    /// Config file and workspace.
    #[command(flatten)]
    pub config: CronConfigArgs,
}

/// `nanobot eval`.
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// The JSON trace to replay.
    #[arg(long = "trace", value_name = "FILE", required = true, num_args = 1..)]
    pub trace: Vec<PathBuf>,
    /// Workspace to run in (default: a fresh temporary directory, removed afterwards).
    #[arg(short = 'w', long = "workspace", value_name = "WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// Print each expectation's result as JSON lines instead of text.
    #[arg(long = "json")]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn agent_defaults_to_the_cli_direct_session() {
        let cli = Cli::try_parse_from(["nanobot", "agent", "-m", "hi"]).unwrap();
        let Some(Command::Agent(a)) = cli.command else {
            panic!("not agent")
        };
        assert_eq!(a.session, "cli:direct");
        assert_eq!(a.message.as_deref(), Some("hi"));
    }

    #[test]
    fn the_root_command_defaults_to_agent_as_0_3_5_does() {
        let rewrite = |args: &[&str]| -> Vec<String> {
            with_default_command(args.iter().map(std::ffi::OsString::from))
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(rewrite(&["nanobot"]), ["nanobot", "agent"]);
        assert_eq!(
            rewrite(&["nanobot", "-m", "hi"]),
            ["nanobot", "agent", "-m", "hi"]
        );
        assert_eq!(
            rewrite(&["nanobot", "--message=hi"]),
            ["nanobot", "agent", "--message=hi"]
        );
        for kept in [
            &["nanobot", "-v"][..],
            &["nanobot", "--help"],
            &["nanobot", "status"],
            &["nanobot", "--version=x"],
        ] {
            assert_eq!(rewrite(kept), kept);
        }
    }

    #[test]
    fn cron_add_takes_the_python_flags() {
        let cli = Cli::try_parse_from([
            "nanobot",
            "cron",
            "add",
            "-n",
            "brief",
            "-m",
            "Morning",
            "-c",
            "0 9 * * MON-FRI",
            "--tz",
            "Europe/Berlin",
            "--config",
            "/x/config.json",
        ])
        .unwrap();
        let Some(Command::Cron {
            action: CronAction::Add(a),
        }) = cli.command
        else {
            panic!("not cron add")
        };
        assert_eq!(a.cron.as_deref(), Some("0 9 * * MON-FRI"));
        assert_eq!(
            a.config.config.as_deref(),
            Some(std::path::Path::new("/x/config.json"))
        );
    }

    #[test]
    fn python_style_toggles_are_accepted_and_the_last_one_wins() {
        let cli = Cli::try_parse_from(["nanobot", "agent", "-m", "x", "--logs", "--no-logs", "--markdown"])
            .unwrap();
        let Some(Command::Agent(a)) = cli.command else {
            panic!("not agent")
        };
        assert!(!a.logs && !a.no_markdown);
        let cli = Cli::try_parse_from(["nanobot", "agent", "--markdown", "--no-markdown"]).unwrap();
        let Some(Command::Agent(a)) = cli.command else {
            panic!("not agent")
        };
        assert!(a.no_markdown);
    }

    #[test]
    fn unknown_flags_are_usage_errors() {
        let err = Cli::try_parse_from(["nanobot", "agent", "--bogus"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
