//! `nanobot status`, `nanobot doctor` and `nanobot channels status`. Secrets are never printed: only whether
//! a key is set and where it comes from.

use std::fmt::Write as _;
use std::path::Path;
#[cfg(feature = "email")]
use std::time::Duration;

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

/// Channel name → (enabled, credentials set) for the typed channels and every other block.
pub(crate) fn channel_states(config: &Config) -> Vec<(String, bool, bool)> {
    let c = &config.channels;
    let mut out = vec![
        (
            "telegram".to_owned(),
            c.telegram.enabled,
            !c.telegram.token.is_empty(),
        ),
        (
            "discord".to_owned(),
            c.discord.enabled,
            !c.discord.token.is_empty(),
        ),
        (
            "slack".to_owned(),
            c.slack.enabled,
            !c.slack.bot_token.is_empty() && !c.slack.app_token.is_empty(),
        ),
    ];
    for name in c.other.names() {
        if let Some(block) = c.other.get(name).filter(|v| v.is_object()) {
            let set = |key: &str| {
                block
                    .get(key)
                    .and_then(|v| v.as_str())
                    .is_some_and(|v| !v.trim().is_empty())
            };
            let creds = match name {
                "feishu" => set("appId") && set("appSecret"),
                "dingtalk" => set("clientId") && set("clientSecret"),
                "qq" => set("appId") && set("secret"),
                "mattermost" => set("serverUrl") && set("token"),
                "msteams" => set("appId") && set("appPassword"),
                "mochat" => set("clawToken"),
                // Both mail servers need a password (an app password for Gmail / Fastmail).
                "email" => ["imapPassword", "smtpPassword"].iter().all(|k| {
                    block
                        .get(*k)
                        .and_then(|v| v.as_str())
                        .is_some_and(|v| !v.is_empty())
                }),
                _ => true,
            };
            out.push((name.to_owned(), c.other.is_enabled(name), creds));
        }
    }
    out
}

/// Doctor findings for the Feishu and DingTalk blocks (kept raw in the config; read as their adapters do).
fn raw_channel_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    if c.other.is_enabled("feishu")
        && let Some(block) = c.other.get("feishu")
    {
        match nanobot_config::FeishuConfig::from_block(block) {
            Err(e) => f.push(Finding::problem(&e, "fix the value named in `channels.feishu`")),
            Ok(cfg) if cfg.app_id.trim().is_empty() || cfg.app_secret.is_empty() => f.push(Finding::problem(
                "feishu is enabled but `appId` or `appSecret` is empty",
                "copy the App ID (cli_…) and App Secret from the app's Credentials page in the Feishu/Lark console",
            )),
            Ok(cfg) if !matches!(cfg.domain.as_str(), "feishu" | "lark") => f.push(Finding::problem(
                "feishu `domain` must be \"feishu\" or \"lark\"",
                "set `channels.feishu.domain` to \"feishu\" (China) or \"lark\" (international)",
            )),
            Ok(cfg) => {
                f.push(Finding::ok("feishu credentials set"));
                if cfg.allow_from.is_empty() {
                    f.push(Finding::warn(
                        "feishu `allowFrom` is empty: nobody can talk to the bot",
                        "add open_ids (ou_…) to `channels.feishu.allowFrom` (or \"*\")",
                    ));
                }
            }
        }
    }
    if c.other.is_enabled("dingtalk")
        && let Some(block) = c.other.get("dingtalk")
    {
        match nanobot_config::DingTalkConfig::from_block(block) {
            Err(e) => f.push(Finding::problem(&e, "fix the value named in `channels.dingtalk`")),
            Ok(cfg) if cfg.client_id.trim().is_empty() || cfg.client_secret.is_empty() => {
                f.push(Finding::problem(
                    "dingtalk is enabled but `clientId` or `clientSecret` is empty",
                    "copy the AppKey and AppSecret of the robot's app from the DingTalk developer console",
                ))
            }
            Ok(cfg) => {
                f.push(Finding::ok("dingtalk credentials set"));
                if cfg.allow_from.is_empty() {
                    f.push(Finding::warn(
                        "dingtalk `allowFrom` is empty: nobody can talk to the bot",
                        "add staff ids to `channels.dingtalk.allowFrom` (or \"*\")",
                    ));
                }
            }
        }
    }
}

#[cfg(feature = "mochat")]
/// Doctor findings for `channels.mochat` (raw in the config; read by the adapter's own parser).
fn mochat_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    if c.other.is_enabled(nanobot_mochat::NAME)
        && let Some(block) = c.other.get(nanobot_mochat::NAME)
    {
        match nanobot_mochat::MochatSettings::from_block(block) {
            Err(e) => f.push(Finding::problem(
                e.to_string(),
                "set the agent's claw token and fix the value named in `channels.mochat`",
            )),
            Ok(s) => {
                f.push(Finding::ok("mochat claw token set"));
                if s.allow_from.is_empty() {
                    f.push(Finding::warn(
                        "mochat `allowFrom` is empty: nobody can talk to the agent",
                        "add user ids to `channels.mochat.allowFrom` (or \"*\")",
                    ));
                }
                if s.sessions.is_empty() && s.panels.is_empty() {
                    f.push(Finding::warn(
                        "mochat has no `sessions` or `panels`: nothing is watched",
                        "list session / panel ids in `channels.mochat.sessions` / `panels` (or \"*\")",
                    ));
                }
            }
        }
    }
}

#[cfg(feature = "qq")]
/// Doctor findings for `channels.qq` (raw in the config; read by the adapter's own parser).
fn qq_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    if c.other.is_enabled(nanobot_qq::NAME)
        && let Some(block) = c.other.get(nanobot_qq::NAME)
    {
        match nanobot_qq::QqSettings::from_block(block) {
            Err(e) => f.push(Finding::problem(
                e.to_string(),
                "copy the AppID and AppSecret from the bot's page on q.qq.com into `channels.qq`",
            )),
            Ok(s) => {
                f.push(Finding::ok("qq credentials set"));
                if s.allow_from.is_empty() {
                    f.push(Finding::warn(
                        "qq `allowFrom` is empty: nobody can talk to the bot",
                        "add user openids to `channels.qq.allowFrom` (or \"*\")",
                    ));
                }
            }
        }
    }
}

#[cfg(feature = "mattermost")]
/// Doctor findings for `channels.mattermost` (raw in the config; read by the adapter's own parser).
fn mattermost_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    let Some(block) = c
        .other
        .get(nanobot_mattermost::NAME)
        .filter(|_| c.other.is_enabled(nanobot_mattermost::NAME))
    else {
        return;
    };
    match nanobot_mattermost::MattermostSettings::from_block(block) {
        Err(e) => f.push(Finding::problem(
            e.to_string(),
            "create a bot account (System Console → Bot Accounts) and put the server's address and the bot's \
             access token in `channels.mattermost` (serverUrl, token)",
        )),
        Ok(s) => {
            f.push(Finding::ok(format!("mattermost: server {}", s.server_url)));
            if s.server_url.starts_with("http://") {
                f.push(Finding::warn(
                    format!(
                        "mattermost: {} is plain http: the token travels unencrypted",
                        s.server_url
                    ),
                    "use the server's https:// address in `channels.mattermost.serverUrl`",
                ));
            }
            if s.allow_from.is_empty() && s.dm_allow_from.is_empty() {
                f.push(Finding::warn(
                    "mattermost `allowFrom` is empty: nobody can talk to the bot",
                    "add user ids (or usernames with `allowFromMatchMode: \"username\"`) to \
                     `channels.mattermost.allowFrom` (or \"*\")",
                ));
            }
        }
    }
}

#[cfg(feature = "msteams")]
/// Doctor findings for `channels.msteams` (raw in the config; read by the adapter's own parser).
fn msteams_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    let Some(block) = c
        .other
        .get(nanobot_msteams::NAME)
        .filter(|_| c.other.is_enabled(nanobot_msteams::NAME))
    else {
        return;
    };
    let s = match nanobot_msteams::MsTeamsSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            f.push(Finding::problem(
                e.to_string(),
                "register a bot (Azure Bot, or the Teams Developer Portal) and put its Microsoft App ID and a \
                 client secret in `channels.msteams` (appId, appPassword; tenantId for a single-tenant bot)",
            ));
            return;
        }
    };
    f.push(Finding::ok(format!(
        "msteams: app {} answers on http://{}:{}{} (the bot's messaging endpoint must reach it over HTTPS)",
        s.app_id, s.host, s.port, s.path
    )));
    if !s.validate_inbound_auth {
        f.push(Finding::warn(
            "msteams: validateInboundAuth is off: anyone who reaches the webhook can write as any user",
            "remove `channels.msteams.validateInboundAuth` (it is on by default)",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(Finding::warn(
            "msteams `allowFrom` is empty: nobody can talk to the bot",
            "add users' AAD object ids to `channels.msteams.allowFrom` (or \"*\"); a stranger's message gets a \
             pairing code",
        ));
    }
}

#[cfg(feature = "napcat")]
/// Doctor findings for `channels.napcat` (raw in the config; read by the adapter's own parser).
fn napcat_findings(c: &nanobot_config::ChannelsConfig, f: &mut Vec<Finding>) {
    let Some(block) = c
        .other
        .get(nanobot_napcat::NAME)
        .filter(|_| c.other.is_enabled(nanobot_napcat::NAME))
    else {
        return;
    };
    let s = match nanobot_napcat::NapcatSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            f.push(Finding::problem(
                e.to_string(),
                "fix the value named in `channels.napcat` (see docs/channels.md, NapCat)",
            ));
            return;
        }
    };
    let shown = s.shown_url();
    f.push(Finding::ok(format!("napcat: NapCat's WebSocket at {shown}")));
    if s.access_token.is_empty() && !s.on_this_machine() {
        f.push(Finding::warn(
            format!(
                "napcat: {shown} is reached without `accessToken`: whoever reaches it can act as the bot"
            ),
            "set the same token in NapCat's WebSocket server and in `channels.napcat.accessToken`",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(Finding::warn(
            "napcat `allowFrom` is empty: nobody can talk to the bot",
            "add QQ numbers to `channels.napcat.allowFrom` (or \"*\")",
        ));
    }
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
    let enabled: Vec<String> = channel_states(config)
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
    f.extend(check_channels(config));
    #[cfg(feature = "whatsapp")]
    f.extend(check_whatsapp(config, &s.paths, &env.vars));
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
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                nanobot_providers::install_ring();
                let out = rt.block_on(make());
                rt.shutdown_background();
                Some(out)
            })
            .join()
            .ok()
            .flatten()
    })
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

/// `<digits>:<35-ish of [A-Za-z0-9_-]>`.
pub(crate) fn telegram_token_ok(t: &str) -> bool {
    match t.split_once(':') {
        Some((id, secret)) => {
            !id.is_empty()
                && id.chars().all(|c| c.is_ascii_digit())
                && secret.len() >= 30
                && secret
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }
        None => false,
    }
}

/// Three dot-separated base64url parts.
pub(crate) fn discord_token_ok(t: &str) -> bool {
    let parts: Vec<&str> = t.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        && t.len() >= 50
}

#[cfg(feature = "whatsapp")]
/// The WhatsApp channel's settings as the gateway builds them, or the problem that stops it.
fn whatsapp_settings(
    config: &Config,
    paths: &nanobot_config::paths::NanobotPaths,
    vars: &nanobot_util::EnvMap,
) -> Option<Result<nanobot_whatsapp::WhatsAppSettings, nanobot_whatsapp::WhatsAppError>> {
    let block = config.channels.other.get(nanobot_whatsapp::NAME)?;
    Some(
        nanobot_whatsapp::WhatsAppConfig::from_block(block)
            .and_then(|c| {
                nanobot_whatsapp::WhatsAppSettings::from_config(&c, &paths.data_dir(), &paths.media_dir(None))
            })
            .map(|mut s| {
                s.bridge = s.bridge.with_environment(vars);
                s
            }),
    )
}

#[cfg(feature = "whatsapp")]
/// Doctor findings for WhatsApp: the block, the bridge's npm packages, a linked device, `allowFrom`.
fn check_whatsapp(
    config: &Config,
    paths: &nanobot_config::paths::NanobotPaths,
    vars: &nanobot_util::EnvMap,
) -> Vec<Finding> {
    let mut f = Vec::new();
    if !config.channels.other.is_enabled(nanobot_whatsapp::NAME) {
        return f;
    }
    let s = match whatsapp_settings(config, paths, vars) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            f.push(Finding::problem(
                e.to_string(),
                "fix the value named in `channels.whatsapp`",
            ));
            return f;
        }
        None => return f,
    };
    if s.bridge.socket_module.is_none() && !nanobot_whatsapp::bridge_installed(&s.bridge) {
        f.push(Finding::problem(
            format!("whatsapp bridge not installed (no ws / @whiskeysockets/baileys in {})", s.bridge.node_modules().display()),
            "run `nanobot channels login whatsapp` (installs the bridge with npm, then shows the QR code to scan)",
        ));
    }
    // A user switching from the Python nanobot 0.3.5: its login (a neonize database) cannot be used here.
    let python_login = config
        .channels
        .other
        .get(nanobot_whatsapp::NAME)
        .and_then(|b| nanobot_whatsapp::WhatsAppConfig::from_block(b).ok())
        .and_then(|c| nanobot_whatsapp::python_login(&c.database_path, &paths.data_dir()));
    if nanobot_whatsapp::credentials_present(&s.auth_dir) {
        f.push(Finding::ok(format!(
            "whatsapp device linked (credentials in {})",
            s.auth_dir.display()
        )));
    } else if let Some(db) = python_login {
        f.push(Finding::problem(
            format!(
                "whatsapp is enabled but no device is linked for nanobot-rs: the Python nanobot 0.3.5's login ({}) is \
                 a neonize database, which nanobot-rs cannot use",
                db.display()
            ),
            format!(
                "run `nanobot channels login whatsapp` and scan the QR code with WhatsApp → Linked devices: nanobot-rs \
                 becomes another linked device; {} is left as it is, so 0.3.5 still works when you switch back",
                db.display()
            ),
        ));
    } else {
        f.push(Finding::problem(
            format!(
                "whatsapp is enabled but no device is linked (no credentials in {})",
                s.auth_dir.display()
            ),
            "run `nanobot channels login whatsapp` and scan the QR code with WhatsApp → Linked devices",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(Finding::warn(
            "whatsapp `allowFrom` is empty: nobody can talk to the bot",
            "add phone numbers with country code (e.g. \"+4915512345678\") to `channels.whatsapp.allowFrom`",
        ));
    }
    f
}

fn check_channels(config: &Config) -> Vec<Finding> {
    let mut f = Vec::new();
    let c = &config.channels;
    if c.telegram.enabled {
        let t = c.telegram.token.expose();
        if t.is_empty() {
            f.push(Finding::problem(
                "telegram is enabled but has no token",
                "set `channels.telegram.token` to the token from @BotFather",
            ));
        } else if !telegram_token_ok(t) {
            f.push(Finding::problem(
                "telegram token does not look like a bot token (`123456789:AA…`)",
                "copy the whole token from @BotFather into `channels.telegram.token`",
            ));
        } else {
            f.push(Finding::ok("telegram token format"));
        }
        if c.telegram.allow_from.is_empty() {
            f.push(Finding::warn(
                "telegram `allowFrom` is empty: nobody can talk to the bot",
                "add your user id or username to `channels.telegram.allowFrom` (or \"*\" for everyone)",
            ));
        }
    }
    if c.discord.enabled {
        let t = c.discord.token.expose();
        if t.is_empty() {
            f.push(Finding::problem(
                "discord is enabled but has no token",
                "set `channels.discord.token` to the bot token from the Discord developer portal",
            ));
        } else if !discord_token_ok(t) {
            f.push(Finding::problem(
                "discord token does not look like a bot token (three dot-separated parts)",
                "copy the bot token (not the client secret) into `channels.discord.token`",
            ));
        } else {
            f.push(Finding::ok("discord token format"));
        }
        if c.discord.allow_from.is_empty() {
            f.push(Finding::warn(
                "discord `allowFrom` is empty: nobody can talk to the bot",
                "add user ids to `channels.discord.allowFrom` (or \"*\")",
            ));
        }
    }
    if c.slack.enabled {
        let bot = c.slack.bot_token.expose();
        let app = c.slack.app_token.expose();
        if !bot.starts_with("xoxb-") {
            f.push(Finding::problem(
                "slack bot token missing or not an `xoxb-…` token",
                "set `channels.slack.botToken` to the Bot User OAuth Token (xoxb-…)",
            ));
        }
        if c.slack.mode == "socket" && !app.starts_with("xapp-") {
            f.push(Finding::problem(
                "slack app token missing or not an `xapp-…` token (needed for socket mode)",
                "set `channels.slack.appToken` to an app-level token with connections:write (xapp-…)",
            ));
        }
        if bot.starts_with("xoxb-") && (c.slack.mode != "socket" || app.starts_with("xapp-")) {
            f.push(Finding::ok("slack token formats"));
        }
    }
    raw_channel_findings(c, &mut f);
    #[cfg(feature = "qq")]
    qq_findings(c, &mut f);
    #[cfg(feature = "napcat")]
    napcat_findings(c, &mut f);
    #[cfg(feature = "mattermost")]
    mattermost_findings(c, &mut f);
    #[cfg(feature = "msteams")]
    msteams_findings(c, &mut f);
    #[cfg(feature = "mochat")]
    mochat_findings(c, &mut f);
    #[cfg(feature = "email")]
    if let Some(block) = c.other.get("email").filter(|_| c.other.is_enabled("email")) {
        f.extend(check_email(block));
    }
    f
}

#[cfg(feature = "email")]
/// `channels.email`: consent, the settings the channel validates at start, and the anti-spoofing checks.
fn check_email(block: &serde_json::Value) -> Vec<Finding> {
    let mut f = Vec::new();
    let settings = match nanobot_email::EmailSettings::from_block(block, "media", "data") {
        Ok(s) => s,
        Err(e) => {
            f.push(Finding::problem(
                format!("email channel: {e}"),
                "complete `channels.email` (IMAP and SMTP host, user name and an app password)",
            ));
            return f;
        }
    };
    if settings.consent_granted {
        f.push(Finding::ok(format!(
            "email channel: {} via {} / {}",
            settings.imap.username,
            settings.imap.endpoint(),
            settings.smtp.endpoint()
        )));
    } else {
        f.push(Finding::problem(
            "email channel enabled but `channels.email.consentGranted` is false: it reads and sends nothing",
            "set `channels.email.consentGranted` to true once the mailbox owner agrees",
        ));
    }
    if settings.allow_from.is_empty() {
        f.push(Finding::warn(
            "email channel: `allowFrom` is empty, so every mail is left unanswered",
            "add the sender addresses to serve to `channels.email.allowFrom`",
        ));
    }
    if !settings.verify_dkim && !settings.verify_spf {
        f.push(Finding::warn(
            "email channel: verifyDkim and verifySpf are off, so a forged From address on allowFrom is served",
            "turn them on and set `channels.email.trustedAuthservIds` to your provider's receiving server",
        ));
    }
    if settings.consent_granted {
        let result = imap_login_bounded(&settings, Duration::from_secs(10), Duration::from_secs(20));
        f.push(imap_login_finding(&settings, result));
    }
    f
}

#[cfg(feature = "email")]
/// Tries the IMAP login (connect, TLS, login, select, log out) with every step bounded by `step` and the whole by
/// `overall`. Runs on a current-thread runtime of its own in a scoped thread, so it works whether or not the caller
/// is inside a tokio runtime.
fn imap_login_bounded(
    settings: &nanobot_email::EmailSettings,
    step: Duration,
    overall: Duration,
) -> Result<(), String> {
    let mut settings = settings.clone();
    settings.timeout = settings.timeout.min(step);
    on_own_runtime(|| async {
        match tokio::time::timeout(overall, nanobot_email::check_imap_login(&settings)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "no answer from {} within {} s",
                settings.imap.endpoint(),
                overall.as_secs()
            )),
        }
    })
    .unwrap_or_else(|| Err("the IMAP check could not run".into()))
}

#[cfg(feature = "email")]
/// The finding of the IMAP login check: names the account and the server, never the password.
fn imap_login_finding(settings: &nanobot_email::EmailSettings, result: Result<(), String>) -> Finding {
    let user = &settings.imap.username;
    let server = settings.imap.endpoint();
    match result {
        Ok(()) => Finding::ok(format!(
            "email channel: IMAP login as {user} at {server} works (mailbox {})",
            settings.imap.mailbox
        )),
        Err(e) => {
            // Whatever the error says, the password is not repeated.
            let password = settings.imap.password.expose();
            let e = if password.is_empty() {
                e
            } else {
                e.replace(password, "<password>")
            };
            Finding::problem(
                format!("email channel: IMAP check of {user} at {server} failed: {e}"),
                "check `channels.email.imapHost`, `imapPort`, `imapUseSsl`, `imapUsername` and `imapPassword` \
                 (Gmail and Fastmail need an app password)",
            )
        }
    }
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
    #[cfg_attr(not(feature = "whatsapp"), allow(unused_mut))]
    for (name, enabled, mut creds) in channel_states(config) {
        #[cfg(feature = "whatsapp")]
        if name == nanobot_whatsapp::NAME {
            // WhatsApp's credentials are the linked device's, in the data directory.
            creds = matches!(whatsapp_settings(config, &s.paths, &env.vars),
                Some(Ok(w)) if nanobot_whatsapp::credentials_present(&w.auth_dir));
        }
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
        let states = channel_states(&config);
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
            conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
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
    fn the_imap_login_finding_names_account_and_server_never_the_password() {
        let s = nanobot_email::EmailSettings::from_block(&email_block(993, true), "m", "d").unwrap();
        let err = nanobot_email::EmailError::Login {
            endpoint: s.imap.endpoint(),
            username: s.imap.username.clone(),
            message: "[AUTHENTICATIONFAILED] bad SECRET-IMAP-PW".into(),
        };
        let x = imap_login_finding(&s, Err(err.to_string()));
        assert_eq!(x.level, Level::Problem);
        assert!(
            x.what.contains("bot@x.org") && x.what.contains("127.0.0.1:993"),
            "{x:?}"
        );
        assert!(x.what.contains("AUTHENTICATIONFAILED"), "{x:?}");
        assert!(!x.what.contains("SECRET"), "{x:?}");
        assert_eq!(imap_login_finding(&s, Ok(())).level, Level::Ok);
    }

    #[test]
    fn token_formats() {
        assert!(telegram_token_ok("123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(!telegram_token_ok("AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(!telegram_token_ok("12x:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(discord_token_ok(
            "MTA1NjQ4ODk1NzQ5NjQ2OTU2OA.GkNwYm.abcdefghijklmnopqrstuvwxyz0123456789AB"
        ));
        assert!(!discord_token_ok("not-a-token"));
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
        let states = channel_states(&config);
        assert!(states.contains(&("feishu".into(), true, false)), "{states:?}");
        assert!(states.contains(&("dingtalk".into(), true, true)), "{states:?}");
        let findings = check_channels(&config);
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
            let text = doctor_text(&check_channels(&mm)).0;
            assert!(text.contains("mattermost: server http://chat.lan"), "{text}");
            assert!(text.contains("plain http"), "{text}");
            assert!(text.contains("mattermost `allowFrom` is empty"), "{text}");
            assert!(!text.contains("MMTOK-9"), "{text}");
            assert!(channel_states(&mm).contains(&("mattermost".into(), true, true)));
            let mm: Config = serde_json::from_str(
                r#"{"channels":{"mattermost":{"enabled":true,"serverUrl":"https://chat.lan"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&mm)).0;
            assert!(text.contains("channels.mattermost.token is empty"), "{text}");
        }
        #[cfg(feature = "msteams")]
        {
            let teams: Config = serde_json::from_str(
                r#"{"channels":{"msteams":{"enabled":true,"appId":"app-7","appPassword":"TEAMSPW-9","validateInboundAuth":false}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&teams)).0;
            assert!(
                text.contains("msteams: app app-7 answers on http://0.0.0.0:3978/api/messages"),
                "{text}"
            );
            assert!(text.contains("validateInboundAuth is off"), "{text}");
            assert!(text.contains("msteams `allowFrom` is empty"), "{text}");
            assert!(!text.contains("TEAMSPW-9"), "{text}");
            assert!(channel_states(&teams).contains(&("msteams".into(), true, true)));
            let teams: Config =
                serde_json::from_str(r#"{"channels":{"msteams":{"enabled":true,"appId":"app-7"}}}"#).unwrap();
            let text = doctor_text(&check_channels(&teams)).0;
            assert!(text.contains("channels.msteams.appPassword is empty"), "{text}");
            assert!(channel_states(&teams).contains(&("msteams".into(), true, false)));
        }
        #[cfg(feature = "napcat")]
        {
            let napcat: Config = serde_json::from_str(
                r#"{"channels":{"napcat":{"enabled":true,"wsUrl":"ws://napcat.lan:3001"}}}"#,
            )
            .unwrap();
            let text = doctor_text(&check_channels(&napcat)).0;
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
            let text = doctor_text(&check_channels(&napcat)).0;
            assert!(text.contains("channels.napcat.groupPolicy"), "{text}");
            assert!(!text.contains("TOK-9"), "{text}");
        }
        let qq: Config = serde_json::from_str(
            r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":"SECRET9","msgFormat":"html"}}}"#,
        )
        .unwrap();
        assert!(channel_states(&qq).contains(&("qq".into(), true, true)));
        let text = doctor_text(&check_channels(&qq)).0;
        assert!(text.contains("channels.qq.msgFormat"), "{text}");
        assert!(!text.contains("SECRET9"), "{text}");
        let qq: Config =
            serde_json::from_str(r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":""}}}"#)
                .unwrap();
        assert!(channel_states(&qq).contains(&("qq".into(), true, false)));
        let text = doctor_text(&check_channels(&qq)).0;
        assert!(text.contains("channels.qq.secret is empty"), "{text}");
        let qq: Config =
            serde_json::from_str(r#"{"channels":{"qq":{"enabled":true,"appId":"102","secret":"SECRET9"}}}"#)
                .unwrap();
        let text = doctor_text(&check_channels(&qq)).0;
        assert!(text.contains("✓ qq credentials set"), "{text}");
        assert!(text.contains("qq `allowFrom` is empty"), "{text}");
        let mochat: Config = serde_json::from_str(
            r#"{"channels":{"mochat":{"enabled":true,"clawToken":"TOKEN7","allowFrom":["u"],"sessions":["*"]}}}"#,
        )
        .unwrap();
        assert!(channel_states(&mochat).contains(&("mochat".into(), true, true)));
        let text = doctor_text(&check_channels(&mochat)).0;
        assert!(text.contains("✓ mochat claw token set"), "{text}");
        assert!(!text.contains("TOKEN7"), "{text}");
        let mochat: Config =
            serde_json::from_str(r#"{"channels":{"mochat":{"enabled":true,"clawToken":""}}}"#).unwrap();
        let text = doctor_text(&check_channels(&mochat)).0;
        assert!(text.contains("channels.mochat.clawToken is empty"), "{text}");
        let bad: Config =
            serde_json::from_str(r#"{"channels":{"feishu":{"enabled":true,"allowFrom":7}}}"#).unwrap();
        let text = doctor_text(&check_channels(&bad)).0;
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
