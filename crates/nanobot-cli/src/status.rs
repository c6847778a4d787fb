//! `nanobot status`, `nanobot doctor` and `nanobot channels status`. Secrets are never printed: only whether
//! a key is set and where it comes from.

use std::fmt::Write as _;
use std::path::Path;

use nanobot_config::Config;
use nanobot_providers::{ProviderError, ProviderFactory, registry};

use crate::args::ConfigArgs;
use crate::error::CliError;
use crate::setup::{self, CliEnv, Setup};

/// Where a provider's key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// `providers.<name>.apiKey` in the config.
    Config,
    /// The named environment variable.
    Env(String),
}

/// Providers that have a key: (config key, where it comes from), registry order, then custom blocks.
pub(crate) fn providers_with_keys(config: &Config, env: &nanobot_util::EnvMap) -> Vec<(String, KeySource)> {
    let mut out = Vec::new();
    for spec in registry::PROVIDERS {
        let key = registry::config_key(spec.name);
        if config.providers.get(&key).is_some_and(|b| b.has_api_key()) {
            out.push((key, KeySource::Config));
        } else if let Some(var) = spec.env_keys.iter().find(|v| env.non_empty(v).is_some()) {
            out.push((key, KeySource::Env((*var).to_owned())));
        }
    }
    for (name, block) in config.providers.iter() {
        if registry::find_spec(name).is_none() && block.has_api_key() {
            out.push((name.to_owned(), KeySource::Config));
        }
    }
    out
}

/// The files and environment the channels' descriptors read (`doctor`, `channels status`), for a loaded setup.
pub(crate) struct ChannelPlaces {
    data_dir: std::path::PathBuf,
    media_root: std::path::PathBuf,
    workspace: std::path::PathBuf,
    vars: nanobot_util::EnvMap,
}

impl ChannelPlaces {
    pub(crate) fn of(s: &Setup, vars: &nanobot_util::EnvMap) -> Self {
        Self {
            data_dir: s.paths.data_dir(),
            media_root: s.paths.media_dir(None),
            workspace: s.workspace.clone(),
            vars: vars.clone(),
        }
    }

    pub(crate) fn get(&self) -> nanobot_channels::Places<'_> {
        nanobot_channels::Places {
            data_dir: &self.data_dir,
            media_root: &self.media_root,
            workspace: &self.workspace,
            vars: &self.vars,
        }
    }
}

/// Channel name → (enabled, credentials set) for the typed channels and every other block: each built channel as
/// its descriptor says; a channel this build does not have as its block says (credentials unknown: "yes").
pub(crate) fn channel_states(
    config: &Config,
    places: &nanobot_channels::Places<'_>,
) -> Vec<(String, bool, bool)> {
    let c = &config.channels;
    let typed = [
        ("telegram", c.telegram.enabled),
        ("discord", c.discord.enabled),
        ("slack", c.slack.enabled),
    ];
    let others = c
        .other
        .names()
        .filter(|n| c.other.get(n).is_some_and(serde_json::Value::is_object))
        .map(|n| (n, c.other.is_enabled(n)));
    typed
        .into_iter()
        .chain(others)
        .map(
            |(name, on)| match nanobot_gateway::CHANNELS.iter().find(|d| d.name == name) {
                Some(d) => (
                    name.to_owned(),
                    d.enabled(config),
                    d.credentials_set(config, places),
                ),
                None => (name.to_owned(), on, true),
            },
        )
        .collect()
}

fn yes(b: bool) -> &'static str {
    if b { "✓" } else { "✗" }
}

/// The text of `nanobot status` (also used by tests).
pub(crate) fn status_text(env: &CliEnv, args: &ConfigArgs) -> Result<String, CliError> {
    let (paths, _) = env.paths(args.config.as_deref());
    let mut out = String::from("🐈 nanobot status\n\n");
    let config_path = paths.config_path();
    if !config_path.exists() {
        let _ = writeln!(
            out,
            "Config:    {} ✗ (run `nanobot onboard`)",
            config_path.display()
        );
        return Ok(out);
    }
    let s = setup::load(env, args, true)?;
    let config = &s.loaded.config;
    let _ = writeln!(out, "Config:    {} ✓", config_path.display());
    let _ = writeln!(
        out,
        "Workspace: {} {}",
        s.workspace.display(),
        yes(s.workspace.is_dir())
    );
    let d = &config.resolved_defaults();
    let _ = writeln!(out, "Model:     {}", d.model);
    let vars = env.vars.clone();
    match ProviderFactory::new(&config.providers, d, vars.clone()).resolve(&d.model) {
        Ok(r) => {
            let _ = writeln!(
                out,
                "Provider:  {} ({}; matched by {})",
                r.name, r.base_url, r.rule
            );
        }
        Err(e) => {
            let e = CliError::from_provider(e, config_path);
            let _ = writeln!(out, "Provider:  ✗ {e}");
        }
    }
    let keys = providers_with_keys(config, &vars);
    if keys.is_empty() {
        let _ = writeln!(out, "API keys:  none set");
    } else {
        let _ = writeln!(out, "API keys:");
        for (name, src) in keys {
            let from = match src {
                KeySource::Config => "config".to_owned(),
                KeySource::Env(v) => format!("env {v}"),
            };
            let _ = writeln!(out, "  {name:<16} ✓ ({from})");
        }
    }
    let unsupported = nanobot_gateway::unsupported_channels(config);
    let places = ChannelPlaces::of(&s, &vars);
    let enabled: Vec<String> = channel_states(config, &places.get())
        .into_iter()
        .filter(|(_, on, _)| *on)
        .map(|(n, _, _)| {
            if unsupported.contains(&n) {
                format!("{n} (✗ not supported by this build: the gateway refuses to start)")
            } else {
                n
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "Channels:  {}",
        if enabled.is_empty() {
            "none enabled (the CLI always works)".to_owned()
        } else {
            enabled.join(", ")
        }
    );
    let servers = &config.tools.mcp_servers;
    if servers.is_empty() {
        let _ = writeln!(out, "MCP:       no servers configured");
    } else {
        let _ = writeln!(out, "MCP:");
        for (name, cfg) in servers {
            match nanobot_runtime::mcp::server_spec(name, cfg) {
                Ok(spec) => {
                    let _ = writeln!(
                        out,
                        "  {name:<16} {:<15} {}",
                        spec.transport.kind().as_str(),
                        spec.transport.target()
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "  {name:<16} ✗ {e}");
                }
            }
        }
    }
    let _ = writeln!(out, "Cron jobs: {}", cron_summary(&s.workspace));
    Ok(out)
}

fn cron_summary(workspace: &Path) -> String {
    let store = nanobot_cron::JobStore::new(nanobot_config::paths::workspace::cron_jobs(workspace));
    match store.load() {
        Ok(f) => {
            let on = f.jobs.iter().filter(|j| j.enabled).count();
            format!("{} ({} enabled)", f.jobs.len(), on)
        }
        Err(e) => format!("✗ {e}"),
    }
}

/// How bad a doctor finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Fine.
    Ok,
    /// Works, but probably not as intended.
    Warn,
    /// Stops a working setup.
    Problem,
}

/// One doctor finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// How bad.
    pub level: Level,
    /// What was checked and found.
    pub what: String,
    /// How to fix it (empty when fine).
    pub fix: String,
}

impl From<nanobot_channels::Finding> for Finding {
    fn from(f: nanobot_channels::Finding) -> Self {
        let level = match f.level {
            nanobot_channels::descriptor::Level::Ok => Level::Ok,
            nanobot_channels::descriptor::Level::Warn => Level::Warn,
            nanobot_channels::descriptor::Level::Problem => Level::Problem,
        };
        Finding {
            level,
            what: f.what,
            fix: f.fix,
        }
    }
}

impl Finding {
    pub(crate) fn ok(what: impl Into<String>) -> Self {
        Finding {
            level: Level::Ok,
            what: what.into(),
            fix: String::new(),
        }
    }
    pub(crate) fn warn(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            level: Level::Warn,
            what: what.into(),
            fix: fix.into(),
        }
    }
    pub(crate) fn problem(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            level: Level::Problem,
            what: what.into(),
            fix: fix.into(),
        }
    }
}

/// `message` prefixed with the config file and, when the message names a dotted config field
/// (`agents.defaults.timezone`) found in the file's `text`, its line.
fn with_place(path: &Path, text: Option<&str>, message: &str) -> String {
    let line = text.and_then(|t| {
        message
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '[' || c == ']'))
            .filter(|w| w.contains('.') && w.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
            .find_map(|field| crate::error::locate_field(t, field))
    });
    match line {
        Some(l) => format!("{}, line {l}: {message}", path.display()),
        None => format!("{}: {message}", path.display()),
    }
}

/// Runs the doctor's checks.
pub(crate) fn doctor(env: &CliEnv, args: &ConfigArgs) -> Vec<Finding> {
    let mut f = Vec::new();
    let s: Setup = match setup::load(env, args, true) {
        Ok(s) => {
            f.push(Finding::ok(format!(
                "config loads: {}",
                s.paths.config_path().display()
            )));
            for w in &s.loaded.warnings {
                f.push(Finding::warn(w.message.clone(), "remove or correct the key"));
            }
            s
        }
        Err(e) => {
            let fix = match &e {
                CliError::NoConfig { .. } => "run `nanobot onboard`".to_owned(),
                _ => "correct the file at the place named above".to_owned(),
            };
            f.push(Finding::problem(e.to_string(), fix));
            return f;
        }
    };
    let config = &s.loaded.config;
    let d = &config.resolved_defaults();
    let config_path = s.paths.config_path();
    // What `agent` and `gateway` build from the config, built the same way: whatever they refuse is reported
    // here, with the file, and the line of the field the error names.
    let text = std::fs::read_to_string(config_path).ok();
    let core_env = env.core_env(&s.paths);
    let refused = nanobot_runtime::agent_settings(config, &core_env)
        .err()
        .or_else(|| nanobot_runtime::base_tools(config, &core_env, &s.workspace, None).err());
    if let Some(e) = &refused {
        f.push(Finding::problem(
            with_place(config_path, text.as_deref(), &e.to_string()),
            "correct the field named above; `nanobot agent` and `nanobot gateway` refuse this config",
        ));
    }
    if refused.is_none() {
        f.extend(check_prompt(config, &core_env));
    }
    f.extend(check_spending(config, &d.model));
    f.push(Finding::ok(crate::traces::doctor_line(
        env,
        &config.gateway.tracing,
    )));
    match ProviderFactory::new(&config.providers, d, env.vars.clone()).resolve(&d.model) {
        Ok(r) => f.push(Finding::ok(format!(
            "model `{}` → provider `{}` ({})",
            d.model, r.name, r.base_url
        ))),
        Err(e) => {
            let fix = match &e {
                ProviderError::MissingApiKey { .. } => {
                    "add the key as described, then run `nanobot doctor` again"
                }
                _ => {
                    "set `agents.defaults.model` / `agents.defaults.provider` or a provider's apiKey/apiBase"
                }
            };
            f.push(Finding::problem(
                CliError::from_provider(e, config_path).to_string(),
                fix,
            ));
        }
    }
    f.push(check_workspace(&s.workspace));
    for (name, _) in crate::onboard::TEMPLATES {
        if !s.workspace.join(name).exists() && s.workspace.is_dir() {
            f.push(Finding::warn(
                format!("workspace file {name} is missing"),
                "run `nanobot onboard` (it only adds missing files)",
            ));
        }
    }
    f.extend(check_channels(config, &ChannelPlaces::of(&s, &env.vars).get()));
    for name in nanobot_gateway::unsupported_channels(config) {
        f.push(Finding::problem(
            format!(
                "channel `{name}` is enabled but this build cannot run it (the gateway refuses to start)"
            ),
            format!(
                "set `channels.{name}.enabled` to false, or start the gateway with {}=1 to run without it",
                nanobot_gateway::ALLOW_UNSUPPORTED_CHANNELS_VAR
            ),
        ));
    }
    let confinement =
        (!config.tools.mcp_servers.is_empty()).then(|| nanobot_runtime::mcp::confinement(config, &core_env));
    for (name, cfg) in &config.tools.mcp_servers {
        match nanobot_runtime::mcp::server_spec(name, cfg) {
            Ok(spec) => {
                f.push(Finding::ok(format!(
                    "MCP server `{name}`: {} {}",
                    spec.transport.kind().as_str(),
                    spec.transport.target()
                )));
                use nanobot_mcp::confine::ConfinementOutcome as Outcome;
                match confinement.as_ref().and_then(|c| c.describe(&spec)) {
                    Some(Outcome::Confined(line)) => {
                        f.push(Finding::ok(format!("MCP server `{name}`: {line}")))
                    }
                    Some(Outcome::Trusted(line)) => f.push(Finding::warn(
                        format!("MCP server `{name}`: {line}"),
                        format!(
                            "remove `tools.mcpServers.{name}.trusted` to run it confined (give it \
                             `writablePaths` if it must write elsewhere)"
                        ),
                    )),
                    Some(Outcome::Weaker(line)) => f.push(Finding::problem(
                        format!("MCP server `{name}`: {line}"),
                        "install bubblewrap (Debian/Ubuntu: `apt install bubblewrap`) and leave \
                         `tools.exec.sandbox` unset, so MCP servers and exec run confined",
                    )),
                    None => {}
                }
            }
            Err(e) => f.push(Finding::problem(
                format!("MCP server `{name}`: {e}"),
                format!("fix `tools.mcpServers.{name}` (give `command` for stdio or `url` for HTTP)"),
            )),
        }
    }
    if config.tools.exec.enable {
        f.extend(check_exec(env, &s));
    }
    if config.tools.web.enable {
        f.push(check_web_egress(&config.tools));
    }
    f.extend(check_credentials(&config.tools));
    f.extend(check_shared_memory(config));
    let cron = nanobot_config::paths::workspace::cron_jobs(&s.workspace);
    if cron.exists() {
        match nanobot_cron::JobStore::new(&cron).load() {
            Ok(file) => f.push(Finding::ok(format!("cron store: {} job(s)", file.jobs.len()))),
            Err(e) => f.push(Finding::problem(
                format!("cron store unreadable: {e}"),
                format!("fix or move {}", cron.display()),
            )),
        }
    }
    f.extend(check_bus(config));
    f
}

/// The prompt every request carries before the conversation (system prompt and tools, built as `agent` builds
/// them) against the context window: on a small local model the tools alone can fill it. Nothing when the
/// provider cannot be built (reported on its own).
fn check_prompt(config: &Config, env: &nanobot_runtime::Environment) -> Option<Finding> {
    let size = on_own_runtime(|| async {
        let provider = nanobot_runtime::provider(config, env).ok()?;
        let agent = nanobot_runtime::agent_builder(config, env, provider)
            .ok()?
            .build()
            .ok()?;
        let size = agent.prompt_size();
        agent.shutdown().await;
        Some(size)
    })
    .flatten()?;
    let profile = if config.tools.only.is_empty() {
        match config.tools.profile.trim() {
            "" => "full".to_owned(),
            p => p.to_ascii_lowercase(),
        }
    } else {
        "tools.only".to_owned()
    };
    let mcp = if config.tools.mcp_servers.is_empty() {
        String::new()
    } else {
        "; MCP servers' tools come on top once connected".to_owned()
    };
    let what = format!(
        "prompt: about {} tokens before the conversation (system prompt {}, {} tools {}; profile {profile}) of the \
         {} tokens a request may carry (contextWindowTokens {} less maxTokens {}){mcp}; tools: {}",
        size.total(),
        size.system_tokens,
        size.tools.len(),
        size.tool_tokens,
        size.input_budget(),
        size.context_window_tokens,
        size.max_tokens,
        if size.tools.is_empty() {
            "none".to_owned()
        } else {
            size.tools.join(", ")
        },
    );
    let mut fixes = Vec::new();
    if profile == "full" {
        fixes.push(
            "offer fewer tools: `tools.profile: \"local\"` (files, exec, web_fetch, cron) or a list in `tools.only`"
                .to_owned(),
        );
    }
    if size.max_tokens as usize * 4 > size.context_window_tokens as usize {
        fixes.push(format!(
            "lower `agents.defaults.maxTokens` ({} keeps most of the window for the answer; a quarter, {}, is plenty)",
            size.max_tokens,
            size.context_window_tokens / 4
        ));
    }
    fixes.push(
        "if the model's server serves a larger window, raise `agents.defaults.contextWindowTokens` (`nanobot doctor \
         --online` asks a local server)"
            .to_owned(),
    );
    let fix = fixes.join("; or ");
    Some(if size.total() >= size.input_budget() {
        Finding::problem(format!("{what}: the prompt alone does not fit"), fix)
    } else if size.total() * 2 > size.input_budget() {
        Finding::warn(
            format!("{what}: over half the room is taken before the user's words"),
            fix,
        )
    } else {
        Finding::ok(what)
    })
}

/// `gateway.bus`: for NATS, the server (reached, bounded by its connect timeout), its streams and who holds the
/// leases; nothing is created.
fn check_bus(config: &Config) -> Option<Finding> {
    if config.gateway.bus.kind == nanobot_config::BusKind::Memory {
        return None;
    }
    let found = on_own_runtime(|| nanobot_gateway::bus_status(config));
    Some(match found {
        Some(Ok(Some(status)))
            if status.contains(nanobot_gateway::OPEN_BUS) && config.gateway.bus.nats.allow_anonymous =>
        {
            Finding::warn(
                format!("gateway bus: {status}"),
                "give nats-server users (a password, a token, NKeys or client certificates), set them in \
                 `gateway.bus.nats`, and drop `allowAnonymous` (docs/scaling.md)",
            )
        }
        Some(Ok(Some(status))) if status.contains(nanobot_gateway::OPEN_BUS) => Finding::problem(
            format!("gateway bus: {status}"),
            "give nats-server users (a password, a token, NKeys or client certificates) and set them in \
             `gateway.bus.nats` (docs/scaling.md); `allowAnonymous: true` runs on it anyway",
        ),
        Some(Ok(Some(status))) => Finding::ok(format!("gateway bus: {status}")),
        Some(Ok(None)) => return None,
        Some(Err(e)) => Finding::problem(
            e.to_string(),
            "start nats-server with JetStream (`nats-server -js`), or correct `gateway.bus.nats` (see docs/scaling.md)",
        ),
        None => Finding::problem(
            "gateway bus: the check could not run",
            "run `nanobot doctor` again",
        ),
    })
}

/// Runs the future `make` returns on a current-thread runtime of its own, in a scoped thread, so it works whether
/// or not the caller is inside a tokio runtime. `None` when no runtime could be started (or the thread
/// panicked). A name lookup still running on the blocking pool does not hold the caller up.
pub(crate) fn on_own_runtime<F, T>(make: impl FnOnce() -> F + Send) -> Option<T>
where
    F: std::future::Future<Output = T>,
    T: Send,
{
    nanobot_providers::install_ring();
    nanobot_channels::descriptor::on_own_runtime(make)
}

/// The people allowed on the enabled channels (`allowFrom` entries; `"*"` stands for anyone).
fn allowed_people(config: &Config) -> Vec<String> {
    let c = &config.channels;
    let mut lists: Vec<(String, Vec<String>)> = Vec::new();
    if c.telegram.enabled {
        lists.push(("telegram".into(), c.telegram.allow_from.clone()));
    }
    if c.discord.enabled {
        lists.push(("discord".into(), c.discord.allow_from.clone()));
    }
    if c.slack.enabled {
        lists.push(("slack".into(), c.slack.allow_from.clone()));
    }
    for name in c.other.names() {
        if !c.other.is_enabled(name) {
            continue;
        }
        let entries = c
            .other
            .get(name)
            .and_then(|b| b.get("allowFrom"))
            .and_then(|a| a.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_str()).map(str::to_owned).collect())
            .unwrap_or_default();
        lists.push((name.to_owned(), entries));
    }
    let mut people: Vec<String> = lists
        .into_iter()
        .flat_map(|(ch, entries)| {
            entries
                .into_iter()
                .map(|e| e.trim().to_owned())
                .filter(|e| !e.is_empty())
                .map(move |e| format!("{ch}:{e}"))
        })
        .collect();
    people.sort();
    people.dedup();
    people
}

/// Memory is shared by everyone the agent talks to (`agents.defaults.memoryScope: shared`): warn when several
/// people (or anyone) may talk to it. With a divided memory, say how it is divided.
fn check_shared_memory(config: &Config) -> Option<Finding> {
    let scope = config.agents.defaults.memory_scope;
    if scope != nanobot_config::MemoryScopeSetting::Shared {
        let how = match scope {
            nanobot_config::MemoryScopeSetting::PerUser => {
                "per-user: each person's private chats have their own memory, each group chat its own"
            }
            _ => "per-chat: each chat (private or group) has its own memory",
        };
        return Some(Finding::ok(format!("memory: {how}")));
    }
    let people = allowed_people(config);
    let open = people.iter().any(|p| p.ends_with(":*"));
    if people.len() < 2 && !open {
        return None;
    }
    let who = if open {
        "anyone (allowFrom has \"*\")".to_owned()
    } else {
        format!("{} people ({})", people.len(), people.join(", "))
    };
    Some(Finding::warn(
        format!(
            "memory is shared: {who} may talk to the agent, and long-term memory (MEMORY.md, history, Dream) is one \
             for all of them, so what one person tells the agent can reach the others (chats, cron jobs and \
             memory_search are kept apart)"
        ),
        "set agents.defaults.memoryScope to \"per-user\" (or \"per-chat\") in config.json, so each person (or chat) \
         has a memory of their own",
    ))
}

/// Where the web tools may connect (`tools.web.allowedDomains`).
fn check_web_egress(tools: &nanobot_config::ToolsConfig) -> Finding {
    match nanobot_runtime::web_domains(tools) {
        None => Finding::ok(
            "web: egress: any domain (set tools.network.allowedDomains to limit web_fetch/web_search, exec and MCP \
             servers)",
        ),
        Some(list) if list.is_empty() => Finding::ok("web: egress: none (the allowed domains are empty)"),
        Some(list) => Finding::ok(format!("web: egress limited to {}", list.join(", "))),
    }
}

/// The credentials programs may use and where they go (`tools.secrets`), never their values.
fn check_credentials(tools: &nanobot_config::ToolsConfig) -> Vec<Finding> {
    tools
        .secrets
        .iter()
        .map(|(name, grant)| {
            Finding::ok(format!(
                "credential {name}: put into requests to {} by nanobot's proxy (programs see a placeholder)",
                grant.domains.join(", ")
            ))
        })
        .collect()
}

/// What `exec` will enforce on this machine: Landlock ABI, namespaces, what is hidden, limits.
fn check_exec(env: &CliEnv, s: &Setup) -> Vec<Finding> {
    let core_env = env.core_env(&s.paths);
    let settings = nanobot_runtime::exec_settings(&s.loaded.config, &core_env);
    let ws = std::fs::canonicalize(&s.workspace).unwrap_or_else(|_| s.workspace.clone());
    let report = nanobot_tools::builtin::confinement_report(&settings, &ws);
    let mut f: Vec<Finding> = report
        .facts
        .into_iter()
        .map(|fact| Finding::ok(format!("exec: {fact}")))
        .collect();
    for w in report.warnings {
        f.push(Finding::warn(
            format!("exec: {w}"),
            "see docs/security.md (install bubblewrap; allow unprivileged user namespaces)",
        ));
    }
    f
}

fn check_workspace(ws: &Path) -> Finding {
    if !ws.exists() {
        return Finding::problem(
            format!("workspace {} does not exist", ws.display()),
            "run `nanobot onboard` (or `nanobot onboard -w <dir>`)",
        );
    }
    if !ws.is_dir() {
        return Finding::problem(
            format!("workspace {} is not a directory", ws.display()),
            "set `agents.defaults.workspace` to a directory",
        );
    }
    if let Err(e) = std::fs::read_dir(ws) {
        return Finding::problem(
            format!("workspace {} is not readable: {e}", ws.display()),
            format!("fix its permissions (chmod u+rwx {})", ws.display()),
        );
    }
    match tempfile::Builder::new().prefix(".nanobot-doctor").tempfile_in(ws) {
        Ok(_) => Finding::ok(format!("workspace {} is readable and writable", ws.display())),
        Err(e) => Finding::problem(
            format!("workspace {} is not writable: {e}", ws.display()),
            format!("fix its permissions (chmod u+rwx {})", ws.display()),
        ),
    }
}

/// Every built channel's findings about its block, as its descriptor checks it.
fn check_channels(config: &Config, places: &nanobot_channels::Places<'_>) -> Vec<Finding> {
    nanobot_gateway::CHANNELS
        .iter()
        .flat_map(|d| (d.doctor)(config, places))
        .map(Finding::from)
        .collect()
}

/// What spending is limited to, and whether a money limit can hold for the agent's model (it counts priced calls
/// only).
fn check_spending(config: &Config, model: &str) -> Vec<Finding> {
    let budget = nanobot_runtime::budget(config);
    let parts = crate::usage_cmd::budget_parts(&budget);
    if parts.is_empty() {
        return vec![Finding::ok(
            "spending: no budget set (agents.defaults.budget); `/usage` and `nanobot usage` show what is spent",
        )];
    }
    let mut f = vec![Finding::ok(format!("budget: {}", parts.join("; ")))];
    let money = [&budget.overall, &budget.per_person, &budget.per_chat]
        .iter()
        .any(|l| l.daily.cost.is_some() || l.monthly.cost.is_some());
    if money && nanobot_runtime::prices(config).price(model).is_none() {
        f.push(Finding::warn(
            format!(
                "agents.defaults.budget sets money limits, but the model {model} has no price: its calls count \
                 only against token limits"
            ),
            format!("add its price per million tokens: agents.defaults.prices.\"{model}\": {{\"input\": …, \"output\": …}}"),
        ));
    }
    f
}

/// The text of `nanobot doctor` and the number of problems.
pub(crate) fn doctor_text(findings: &[Finding]) -> (String, usize) {
    let mut out = String::from("🐈 nanobot doctor\n\n");
    let mut problems = 0;
    for x in findings {
        let mark = match x.level {
            Level::Ok => "✓",
            Level::Warn => "!",
            Level::Problem => {
                problems += 1;
                "✗"
            }
        };
        let _ = writeln!(out, "{mark} {}", x.what);
        if !x.fix.is_empty() {
            let _ = writeln!(out, "    fix: {}", x.fix);
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if problems == 0 {
            "No problems found.".to_owned()
        } else {
            format!("{problems} problem(s) found.")
        }
    );
    (out, problems)
}

/// The text of `nanobot channels status`.
pub(crate) fn channels_text(env: &CliEnv, args: &ConfigArgs) -> Result<String, CliError> {
    let s = setup::load(env, args, true)?;
    let config = &s.loaded.config;
    let mut out = format!(
        "{:<12} {:<8} {:<12} {}\n",
        "Channel", "Enabled", "Credentials", "Allowed"
    );
    let places = ChannelPlaces::of(&s, &env.vars);
    for (name, enabled, creds) in channel_states(config, &places.get()) {
        let allowed = match name.as_str() {
            "telegram" => allow_text(&config.channels.telegram.allow_from),
            "discord" => allow_text(&config.channels.discord.allow_from),
            "slack" => allow_text(&config.channels.slack.allow_from),
            other => config
                .channels
                .other
                .get(other)
                .and_then(|b| b.get("allowFrom"))
                .and_then(|a| a.as_array())
                .map(|a| {
                    if a.is_empty() {
                        "nobody".to_owned()
                    } else {
                        format!("{} entries", a.len())
                    }
                })
                .unwrap_or_else(|| "-".to_owned()),
        };
        let _ = writeln!(out, "{name:<12} {:<8} {:<12} {allowed}", yes(enabled), yes(creds));
        if enabled && !nanobot_gateway::BUILT_CHANNELS.contains(&name.as_str()) {
            let _ = writeln!(
                out,
                "{:<12} ✗ not supported by this build: the gateway refuses to start",
                ""
            );
        }
    }
    Ok(out)
}

fn allow_text(list: &[String]) -> String {
    if list.is_empty() {
        "nobody".to_owned()
    } else if list.iter().any(|x| x == "*") {
        "everyone".to_owned()
    } else {
        format!("{} entries", list.len())
    }
}

/// Places for tests of `doctor` and `channels status` (nothing there: no linked devices, no files).
#[cfg(test)]
fn test_places() -> nanobot_channels::Places<'static> {
    static VARS: std::sync::LazyLock<nanobot_util::EnvMap> =
        std::sync::LazyLock::new(nanobot_util::EnvMap::new);
    nanobot_channels::Places {
        data_dir: Path::new("/nonexistent/nanobot-data"),
        media_root: Path::new("/nonexistent/nanobot-data/media"),
        workspace: Path::new("/nonexistent/nanobot-workspace"),
        vars: &VARS,
    }
}

/// The doctor's findings for an enabled `channels.email` block.
#[cfg(all(test, feature = "email"))]
fn check_email(block: &serde_json::Value) -> Vec<Finding> {
    let mut block = block.clone();
    block["enabled"] = serde_json::json!(true);
    let config: Config =
        serde_json::from_value(serde_json::json!({"channels": {"email": block}})).unwrap_or_default();
    check_channels(&config, &test_places())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_warns_when_several_people_share_memory() {
        let one: Config = serde_json::from_value(serde_json::json!({
            "channels": {"telegram": {"enabled": true, "allowFrom": ["111"]}}
        }))
        .unwrap();
        assert!(check_shared_memory(&one).is_none());
        let two: Config = serde_json::from_value(serde_json::json!({
            "channels": {"telegram": {"enabled": true, "allowFrom": ["111", "222"]}}
        }))
        .unwrap();
        let f = check_shared_memory(&two).unwrap();
        assert!(f.level == Level::Warn && f.what.contains("2 people"), "{f:?}");
        let open: Config = serde_json::from_value(serde_json::json!({
            "channels": {"email": {"enabled": true, "allowFrom": ["*"]}}
        }))
        .unwrap();
        assert!(check_shared_memory(&open).unwrap().what.contains("anyone"));
        let disabled: Config = serde_json::from_value(serde_json::json!({
            "channels": {"telegram": {"enabled": false, "allowFrom": ["111", "222"]}}
        }))
        .unwrap();
        assert!(check_shared_memory(&disabled).is_none());
        let scoped: Config = serde_json::from_value(serde_json::json!({
            "agents": {"defaults": {"memoryScope": "per-user"}},
            "channels": {"telegram": {"enabled": true, "allowFrom": ["111", "222"]}}
        }))
        .unwrap();
        let f = check_shared_memory(&scoped).unwrap();
        assert!(f.level == Level::Ok && f.what.contains("per-user"), "{f:?}");
    }

    #[test]
    fn doctor_shows_the_web_egress_allow_list() {
        let tools =
            |v: serde_json::Value| -> nanobot_config::ToolsConfig { serde_json::from_value(v).unwrap() };
        assert!(
            check_web_egress(&tools(serde_json::json!({})))
                .what
                .contains("any domain")
        );
        let f = check_web_egress(&tools(
            serde_json::json!({"web": {"allowedDomains": ["example.org", "*.wikipedia.org"]}}),
        ));
        assert_eq!(f.what, "web: egress limited to example.org, *.wikipedia.org");
        // tools.network governs the web tools too; with both, the web entries it allows.
        let f = check_web_egress(&tools(
            serde_json::json!({"network": {"allowedDomains": ["pypi.org"]}}),
        ));
        assert_eq!(f.what, "web: egress limited to pypi.org");
        let f = check_web_egress(&tools(serde_json::json!({
            "network": {"allowedDomains": ["wikipedia.org"]},
            "web": {"allowedDomains": ["en.wikipedia.org", "example.org"]}
        })));
        assert_eq!(f.what, "web: egress limited to en.wikipedia.org");
    }

    #[test]
    fn doctor_says_where_commands_may_connect() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["tools"]["network"] = serde_json::json!({"allowedDomains": ["pypi.org", "api.github.com"]});
        v["tools"]["secrets"] = serde_json::json!({"GITHUB_TOKEN": {"value": "ghp_doctor_secret", "domains": ["api.github.com"]}});
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let (text, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        assert!(
            text.contains("credential GITHUB_TOKEN: put into requests to api.github.com by nanobot's proxy"),
            "{text}"
        );
        assert!(!text.contains("ghp_doctor_secret"), "{text}");
        let k = nanobot_tools::confine::kernel_support();
        let expected = if k.bwrap.is_ok() {
            // This test program is not its own egress bridge (the nanobot programs are).
            "! exec: tools.network.allowedDomains is set but this program cannot run the egress bridge"
        } else if k.landlock.is_ok() {
            "! exec: tools.network.allowedDomains needs bubblewrap"
        } else {
            "! exec: tools.network.allowedDomains is NOT enforced"
        };
        assert!(text.contains(expected), "{text}");
        assert!(
            text.contains("web: egress limited to pypi.org, api.github.com"),
            "{text}"
        );
    }

    #[test]
    fn doctor_covers_the_email_channel() {
        let block = serde_json::json!({"enabled": true, "imapHost": "imap.x.org"});
        let f = check_email(&block);
        assert!(
            f.iter()
                .any(|x| x.level == Level::Problem && x.what.contains("channels.email.imapUsername")),
            "{f:?}"
        );
        let block = serde_json::json!({
            "enabled": true, "consentGranted": false,
            "imapHost": "imap.x.org", "imapUsername": "bot@x.org", "imapPassword": "pw",
            "smtpHost": "smtp.x.org", "smtpUsername": "bot@x.org", "smtpPassword": "pw",
            "verifyDkim": false, "verifySpf": false,
        });
        let f = check_email(&block);
        assert!(
            f.iter()
                .any(|x| x.level == Level::Problem && x.what.contains("consentGranted")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|x| x.level == Level::Warn && x.what.contains("allowFrom")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|x| x.level == Level::Warn && x.what.contains("verifyDkim")),
            "{f:?}"
        );
        assert!(
            f.iter().all(|x| !x.what.contains("pw")),
            "no secret echoed: {f:?}"
        );
        let config: Config = serde_json::from_value(serde_json::json!({"channels": {"email": {
            "enabled": true, "imapPassword": "pw", "smtpPassword": ""}}}))
        .unwrap();
        let states = channel_states(&config, &test_places());
        assert!(states.contains(&("email".to_owned(), true, false)), "{states:?}");
    }

    fn email_block(port: u16, ssl: bool) -> serde_json::Value {
        serde_json::json!({
            "enabled": true, "consentGranted": true,
            "imapHost": "127.0.0.1", "imapPort": port, "imapUseSsl": ssl,
            "imapUsername": "bot@x.org", "imapPassword": "SECRET-IMAP-PW",
            "smtpHost": "127.0.0.1", "smtpUsername": "bot@x.org", "smtpPassword": "SECRET-SMTP-PW",
            "allowFrom": ["a@x.org"], "verifyDkim": false, "verifySpf": false,
        })
    }

    fn login_problem(f: &[Finding]) -> &Finding {
        let shown = format!("{f:?}");
        assert!(!shown.contains("SECRET-"), "no password in the findings: {shown}");
        f.iter()
            .find(|x| x.what.contains("IMAP check"))
            .unwrap_or_else(|| panic!("an IMAP check finding: {shown}"))
    }

    #[test]
    fn doctor_reports_an_unreachable_imap_server_by_account_and_server() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let f = check_email(&email_block(port, true));
        let x = login_problem(&f);
        assert_eq!(x.level, Level::Problem, "{x:?}");
        assert!(x.what.contains("bot@x.org"), "{x:?}");
        assert!(x.what.contains(&format!("127.0.0.1:{port}")), "{x:?}");
    }

    #[test]
    fn doctor_reports_a_server_that_refuses_and_never_sends_the_password_in_clear() {
        use std::io::{BufRead as _, BufReader, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // A minimal IMAP server without TLS: greets, then refuses every command with NO.
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            conn.write_all(b"* OK fake IMAP ready\r\n").unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut received = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                received.push_str(&line);
                let tag = line.split_whitespace().next().unwrap_or("*").to_string();
                let _ = conn.write_all(format!("{tag} NO not here\r\n").as_bytes());
                line.clear();
            }
            received
        });
        let f = check_email(&email_block(port, false));
        let x = login_problem(&f);
        assert_eq!(x.level, Level::Problem, "{x:?}");
        assert!(
            x.what.contains("bot@x.org") && x.what.contains(&format!("127.0.0.1:{port}")),
            "{x:?}"
        );
        assert!(x.what.contains("STARTTLS"), "names the refusal: {x:?}");
        let received = server.join().unwrap();
        assert!(received.contains("STARTTLS"), "{received}");
        assert!(
            !received.contains("SECRET") && !received.to_uppercase().contains("LOGIN"),
            "no login attempted without TLS: {received}"
        );
    }

    #[test]
    fn keys_are_listed_by_source_never_by_value() {
        let config: Config =
            serde_json::from_str(r#"{"providers":{"anthropic":{"apiKey":"sk-ant-secret"}}}"#).unwrap();
        let env = nanobot_util::EnvMap::from_iter([("OPENROUTER_API_KEY", "sk-or-secret")]);
        let keys = providers_with_keys(&config, &env);
        assert!(keys.contains(&("anthropic".into(), KeySource::Config)));
        assert!(keys.contains(&("openrouter".into(), KeySource::Env("OPENROUTER_API_KEY".into()))));
    }

    #[test]
    fn doctor_flags_bad_telegram_token_and_missing_key() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["channels"]["telegram"]["enabled"] = true.into();
        v["channels"]["telegram"]["token"] = "oops".into();
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let findings = doctor(&env, &ConfigArgs::default());
        let (text, problems) = doctor_text(&findings);
        assert!(problems >= 2, "{text}");
        assert!(text.contains("telegram token does not look like"), "{text}");
        assert!(
            text.contains("OPENROUTER_API_KEY") || text.contains("apiKey"),
            "{text}"
        );
        assert!(!text.contains("oops"), "{text}");
    }

    #[test]
    fn doctor_shows_what_exec_enforces_here() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let (text, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        assert!(text.contains("exec: Landlock"), "{text}");
        assert!(text.contains("exec: exec confinement:"), "{text}");
        assert!(
            text.contains("exec: limits:") || text.contains("prlimit"),
            "{text}"
        );
        let data = std::fs::canonicalize(dir.path().join(".nanobot")).unwrap();
        match &nanobot_tools::confine::kernel_support().bwrap {
            Ok(_) => assert!(
                text.contains(&format!("hidden from exec (empty tmpfs): {}", data.display())),
                "{text}"
            ),
            Err(_) => assert!(text.contains("! exec:"), "a degraded machine must warn: {text}"),
        }
        // with no sandbox at all the doctor says so loudly
        let cfg = dir.path().join(".nanobot/config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["tools"]["exec"]["sandbox"] = "none".into();
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let (text, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        assert!(
            text.contains("! exec: exec runs WITHOUT kernel confinement"),
            "{text}"
        );
    }

    #[test]
    fn doctor_says_how_each_mcp_server_runs() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let notes = std::fs::canonicalize(dir.path()).unwrap().join("notes");
        std::fs::create_dir_all(&notes).unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["tools"]["mcpServers"] = serde_json::json!({
            "notes": {"command": "sh", "args": [notes.display().to_string()]},
            "gh": {"command": "sh", "trusted": true}
        });
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let (text, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        let k = nanobot_tools::confine::kernel_support();
        if k.bwrap.is_ok() || k.landlock.is_ok() {
            let own = std::fs::canonicalize(dir.path().join(".nanobot"))
                .unwrap()
                .join("mcp/notes");
            let line = text
                .lines()
                .find(|l| l.starts_with("✓ MCP server `notes`: confined ("))
                .unwrap_or_else(|| panic!("{text}"));
            assert!(line.contains(&notes.display().to_string()), "{line}");
            assert!(line.contains(&own.display().to_string()), "{line}");
        }
        assert!(
            text.contains(
                "! MCP server `gh`: trusted: runs unconfined with nanobot's own rights (tools.mcpServers.gh.trusted)"
            ),
            "{text}"
        );
        // Confinement turned off: a problem, with the fix.
        v["tools"]["exec"]["sandbox"] = "none".into();
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let (text, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        assert!(
            text.contains("✗ MCP server `notes`: runs unconfined: tools.exec.sandbox is \"none\""),
            "{text}"
        );
        assert!(text.contains("install bubblewrap"), "{text}");
    }
}

#[cfg(test)]
mod raw_channel_tests {
    use super::*;

    #[test]
    fn feishu_and_dingtalk_are_checked() {
        let config: Config = serde_json::from_str(
            r#"{"channels":{"feishu":{"enabled":true,"appId":"cli_1","appSecret":""},
                "dingtalk":{"enabled":true,"clientId":"d","clientSecret":"SECRET5","allowFrom":["s1"]}}}"#,
        )
        .unwrap();
        let states = channel_states(&config, &test_places());
        assert!(states.contains(&("feishu".into(), true, false)), "{states:?}");
        assert!(states.contains(&("dingtalk".into(), true, true)), "{states:?}");
        let findings = check_channels(&config, &test_places());
        let text = doctor_text(&findings).0;
        assert!(
            text.contains("✗ feishu is enabled but `appId` or `appSecret` is empty"),
            "{text}"
        );
        assert!(text.contains("✓ dingtalk credentials set"), "{text}");
        assert!(!text.contains("SECRET5"));
        #[cfg(feature = "mattermost")]
        {
            let mm: Config = serde_json::from_str(
                r#"{"channels":{"mattermost":{"enabled":true,"serverUrl":"http://chat.lan","token":"MMTOK-9"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&mm, &test_places())).0;
            assert!(text.contains("mattermost: server http://chat.lan"), "{text}");
            assert!(text.contains("plain http"), "{text}");
            assert!(text.contains("mattermost `allowFrom` is empty"), "{text}");
            assert!(!text.contains("MMTOK-9"), "{text}");
            assert!(channel_states(&mm, &test_places()).contains(&("mattermost".into(), true, true)));
            let mm: Config = serde_json::from_str(
                r#"{"channels":{"mattermost":{"enabled":true,"serverUrl":"https://chat.lan"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&mm, &test_places())).0;
            assert!(text.contains("channels.mattermost.token is empty"), "{text}");
        }
        #[cfg(feature = "msteams")]
        {
            let teams: Config = serde_json::from_str(
                r#"{"channels":{"msteams":{"enabled":true,"appId":"app-7","appPassword":"TEAMSPW-9","validateInboundAuth":false}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&teams, &test_places())).0;
            assert!(
                text.contains("msteams: app app-7 answers on http://0.0.0.0:3978/api/messages"),
                "{text}"
            );
            assert!(text.contains("validateInboundAuth is off"), "{text}");
            assert!(text.contains("msteams `allowFrom` is empty"), "{text}");
            assert!(!text.contains("TEAMSPW-9"), "{text}");
            assert!(channel_states(&teams, &test_places()).contains(&("msteams".into(), true, true)));
            let teams: Config =
                serde_json::from_str(r#"{"channels":{"msteams":{"enabled":true,"appId":"app-7"}}}"#).unwrap();
            let text = doctor_text(&check_channels(&teams, &test_places())).0;
            assert!(text.contains("channels.msteams.appPassword is empty"), "{text}");
            assert!(channel_states(&teams, &test_places()).contains(&("msteams".into(), true, false)));
        }
        #[cfg(feature = "signal")]
        {
            let signal: Config = serde_json::from_str(
                r#"{"channels":{"signal":{"enabled":true,"phoneNumber":"+15550001","group":{"enabled":true}}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&signal, &test_places())).0;
            assert!(
                text.contains("signal: +15550001 through signal-cli at http://localhost:8080"),
                "{text}"
            );
            assert!(text.contains("signal `dm.allowFrom` is empty"), "{text}");
            assert!(text.contains("`group.allowFrom` is empty"), "{text}");
            assert!(text.contains("signal-cli's attachments directory"), "{text}");
            assert!(channel_states(&signal, &test_places()).contains(&("signal".into(), true, true)));
            let signal: Config = serde_json::from_str(r#"{"channels":{"signal":{"enabled":true}}}"#).unwrap();
            let text = doctor_text(&check_channels(&signal, &test_places())).0;
            assert!(text.contains("channels.signal.phoneNumber is empty"), "{text}");
        }
        #[cfg(feature = "napcat")]
        {
            let napcat: Config = serde_json::from_str(
                r#"{"channels":{"napcat":{"enabled":true,"wsUrl":"ws://napcat.lan:3001"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&napcat, &test_places())).0;
            assert!(
                text.contains("napcat: NapCat's WebSocket at ws://napcat.lan:3001"),
                "{text}"
            );
            assert!(text.contains("without `accessToken`"), "{text}");
            assert!(text.contains("napcat `allowFrom` is empty"), "{text}");
            let napcat: Config = serde_json::from_str(
                r#"{"channels":{"napcat":{"enabled":true,"accessToken":"TOK-9","groupPolicy":"sometimes"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&napcat, &test_places())).0;
            assert!(text.contains("channels.napcat.groupPolicy"), "{text}");
            assert!(!text.contains("TOK-9"), "{text}");
        }
        let qq: Config = serde_json::from_str(
            r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":"SECRET9","msgFormat":"html"}}}"#,
        )
        .unwrap();
        assert!(channel_states(&qq, &test_places()).contains(&("qq".into(), true, true)));
        let text = doctor_text(&check_channels(&qq, &test_places())).0;
        assert!(text.contains("channels.qq.msgFormat"), "{text}");
        assert!(!text.contains("SECRET9"), "{text}");
        let qq: Config =
            serde_json::from_str(r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":""}}}"#)
                .unwrap();
        assert!(channel_states(&qq, &test_places()).contains(&("qq".into(), true, false)));
        let text = doctor_text(&check_channels(&qq, &test_places())).0;
        assert!(text.contains("channels.qq.secret is empty"), "{text}");
        let qq: Config =
            serde_json::from_str(r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":"SECRET9"}}}"#)
                .unwrap();
        let text = doctor_text(&check_channels(&qq, &test_places())).0;
        assert!(text.contains("✓ qq credentials set"), "{text}");
        assert!(text.contains("qq `allowFrom` is empty"), "{text}");
        let mochat: Config = serde_json::from_str(
            r#"{"channels":{"mochat":{"enabled":true,"clawToken":"TOKEN7","allowFrom":["u"],"sessions":["*"]}}}"#,
        )
        .unwrap();
        assert!(channel_states(&mochat, &test_places()).contains(&("mochat".into(), true, true)));
        let text = doctor_text(&check_channels(&mochat, &test_places())).0;
        assert!(text.contains("✓ mochat claw token set"), "{text}");
        assert!(!text.contains("TOKEN7"), "{text}");
        let mochat: Config =
            serde_json::from_str(r#"{"channels":{"mochat":{"enabled":true,"clawToken":""}}}"#).unwrap();
        let text = doctor_text(&check_channels(&mochat, &test_places())).0;
        assert!(text.contains("channels.mochat.clawToken is empty"), "{text}");
        let bad: Config =
            serde_json::from_str(r#"{"channels":{"feishu":{"enabled":true,"allowFrom":7}}}"#).unwrap();
        let text = doctor_text(&check_channels(&bad, &test_places())).0;
        assert!(text.contains("channels.feishu"), "{text}");
    }

    /// `status` and `doctor` over a config holding every kind of secret, and over configs that fail to load with
    /// a secret in the wrong place: no value ever appears.
    #[test]
    fn status_and_doctor_never_print_secrets() {
        let secrets = [
            "sk-SEKRIT-prov",
            "hdr-SEKRIT",
            "123456789:AAHSEKRITtgtoken",
            "xoxb-SEKRIT-bot",
            "xapp-SEKRIT-app",
            "SEKRIT.discord.token",
            "SEKRIT-search",
            "SEKRIT-api",
            "SEKRIT-mcp-env",
        ];
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), nanobot_util::EnvMap::new());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let cfg = dir.path().join(".nanobot/config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["providers"]["openai"] =
            serde_json::json!({"apiKey": secrets[0], "extraHeaders": {"X-K": secrets[1]}});
        v["channels"]["telegram"] =
            serde_json::json!({"enabled": true, "token": secrets[2], "allowFrom": ["*"]});
        v["channels"]["slack"] =
            serde_json::json!({"enabled": true, "botToken": secrets[3], "appToken": secrets[4]});
        v["channels"]["discord"] = serde_json::json!({"enabled": true, "token": secrets[5]});
        v["tools"]["web"]["search"]["apiKey"] = secrets[6].into();
        v["api"]["apiKey"] = secrets[7].into();
        v["tools"]["mcpServers"] = serde_json::json!({"gh": {"command": "x", "env": {"TOKEN": secrets[8]}}});
        std::fs::write(&cfg, serde_json::to_string(&v).unwrap()).unwrap();
        let status = status_text(&env, &ConfigArgs::default()).unwrap();
        let (report, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
        for s in secrets {
            assert!(!status.contains(s), "status shows {s}:\n{status}");
            assert!(!report.contains(s), "doctor shows {s}:\n{report}");
        }
        for broken in [
            serde_json::json!({"providers": {"custom": secrets[0]}}),
            serde_json::json!({"channels": {"telegram": {"token": 123_456_789_012_u64}}}),
        ] {
            std::fs::write(&cfg, broken.to_string()).unwrap();
            let err = match status_text(&env, &ConfigArgs::default()) {
                Ok(text) => text,
                Err(e) => format!("{e} {e:?}"),
            };
            let (report, _) = doctor_text(&doctor(&env, &ConfigArgs::default()));
            for s in [secrets[0], "123456789012"] {
                assert!(!err.contains(s), "status shows {s}:\n{err}");
                assert!(!report.contains(s), "doctor shows {s}:\n{report}");
            }
        }
    }
}
