//! Config → agent: `config.json` (the Python-compatible schema) turned into the typed settings, tools, skills,
//! memory, MCP servers and cron store `nanobot-core` takes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use nanobot_config::{ChannelsConfig, Config, ToolProfile};
use nanobot_core::rights::ChatRights;
use nanobot_core::{AgentLoop, AgentLoopBuilder, AgentSettings, MemoryAdapter, builtin_skills_dir};
use nanobot_providers::Provider;
#[cfg(feature = "web")]
use nanobot_tools::builtin::register_web_tools;
use nanobot_tools::builtin::{ExecTool, register_fs_tools};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ExecSandbox, ExecSettings, RegistrySettings, Tool, ToolRegistry, ToolSelection};

use crate::env::Environment;
use crate::error::RuntimeError;

/// Tokens set aside for the system prompt and tool definitions when sizing the consolidation budget.
const MEMORY_RESERVED_TOKENS: usize = 8_000;

/// The agent's settings from `agents.defaults` of `config`, paths resolved against `env`.
pub fn agent_settings(config: &Config, env: &Environment) -> Result<AgentSettings, RuntimeError> {
    let d = &config.resolved_defaults();
    let paths = env.paths();
    let tz: Tz = match d.timezone.trim() {
        "" => Tz::UTC,
        name => name.parse().map_err(|_| {
            RuntimeError::Config(format!(
                "agents.defaults.timezone: unknown IANA time zone `{name}`"
            ))
        })?,
    };
    let workspace = paths.workspace(&d.workspace);
    if let Some(problem) = paths.workspace_problem(&workspace) {
        return Err(RuntimeError::Config(format!(
            "agents.defaults.workspace: {problem}"
        )));
    }
    let mut s = AgentSettings::new(workspace, paths.data_dir(), d.model.clone());
    s.restrict_to_workspace = config.tools.restrict_to_workspace;
    s.max_session_messages_per_minute = config.tools.max_session_messages_per_minute;
    s.my_enabled = config.tools.my.enable;
    s.my_allow_set = config.tools.my.allow_set;
    s.home = Some(env.home.clone());
    s.max_tokens = d.max_tokens;
    s.context_window_tokens = d.context_window_tokens;
    s.temperature = Some(d.temperature);
    s.reasoning_effort = d.reasoning_effort.clone();
    s.max_tool_iterations = d.max_tool_iterations.max(1) as usize;
    s.max_concurrent_subagents = d.max_concurrent_subagents.max(1) as usize;
    s.tool_hint_max_length = d.tool_hint_max_length.max(8) as usize;
    if let Some(w) = d.memory_window {
        s.max_history_messages = w.max(2) as usize;
    }
    s.timezone = tz;
    s.bot_name = d.bot_name.clone();
    s.unified_session = d.unified_session;
    s.memory_scope = match d.memory_scope {
        nanobot_config::MemoryScopeSetting::Shared => nanobot_memory::MemoryScope::Shared,
        nanobot_config::MemoryScopeSetting::PerChat => nanobot_memory::MemoryScope::PerChat,
        nanobot_config::MemoryScopeSetting::PerUser => nanobot_memory::MemoryScope::PerUser,
    };
    s.turn_timeout = Duration::from_secs_f64(d.timeouts.turn.clamp(0.001, 604_800.0));
    let approval = &config.tools.approval;
    s.approval = nanobot_core::ApprovalSettings::new(
        approval.mode,
        Duration::from_secs(approval.timeout_s.clamp(1, 86_400)),
    )
    .with_approvers(approval.approvers.iter().cloned());
    if let Some(n) = max_concurrent_requests(env) {
        s.max_concurrent_sessions = n;
    }
    // A model server on this machine or the LAN usually runs a small model at tens of seconds a call: a
    // confused one would loop for hours under the cloud defaults. Caps left at their defaults are lowered.
    let defaults = nanobot_config::AgentDefaults::default();
    if model_is_local(config, env) {
        if d.max_tool_iterations == defaults.max_tool_iterations {
            s.max_tool_iterations = LOCAL_MAX_TOOL_ITERATIONS;
        }
        if d.timeouts.turn == defaults.timeouts.turn {
            s.turn_timeout = LOCAL_TURN_TIMEOUT;
        }
        // A small model that loops writes until the answer's cap: 8192 tokens is minutes of CPU, and on a small
        // window most of it.
        if d.max_tokens == defaults.max_tokens {
            s.max_tokens = LOCAL_MAX_TOKENS.min((d.context_window_tokens / 4).max(256));
        }
    }
    Ok(s)
}

/// Whether the default model's endpoint is on this machine or the LAN (loopback, private, link-local addresses,
/// `localhost`, `*.local`): a local server, usually slower to start and to answer than a cloud API.
pub fn model_is_local(config: &Config, env: &Environment) -> bool {
    let d = config.resolved_defaults();
    nanobot_providers::ProviderFactory::new(&config.providers, &d, env.vars.clone()).is_local_model(&d.model)
}

/// The tool-iteration cap for a model on a local server when `agents.defaults.maxToolIterations` is left at its
/// default (200).
pub const LOCAL_MAX_TOOL_ITERATIONS: usize = 30;

/// The answer's cap (`maxTokens`) for a model on a local server when `agents.defaults.maxTokens` is left at its
/// default (8192); at most a quarter of `contextWindowTokens`.
pub const LOCAL_MAX_TOKENS: u32 = 2048;

/// The turn limit for a model on a local server when `agents.defaults.timeouts.turn` is left at its default
/// (3600 s).
pub const LOCAL_TURN_TIMEOUT: Duration = Duration::from_secs(1200);

/// 0.3.5's `NANOBOT_MAX_CONCURRENT_REQUESTS`: how many turns run at once (a positive integer; unset, empty or
/// ≤ 0 leaves the default; anything else is ignored with a warning naming the variable).
fn max_concurrent_requests(env: &Environment) -> Option<usize> {
    let var = nanobot_config::env_vars::NANOBOT_MAX_CONCURRENT_REQUESTS;
    let raw = env.vars.get(var)?.trim();
    if raw.is_empty() {
        return None;
    }
    match raw.parse::<i64>() {
        Ok(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX).min(4096)),
        Ok(_) => None,
        Err(_) => {
            tracing::warn!("{var}={raw:?} is not an integer; it is ignored");
            None
        }
    }
}

/// The `exec` settings `config.tools.exec` asks for in `env` (also what `nanobot doctor` reports on).
pub fn exec_settings(config: &Config, env: &Environment) -> ExecSettings {
    let exec = &config.tools.exec;
    let sandbox_mode = ExecSandbox::from_config(&exec.sandbox).unwrap_or_else(|fallback| {
        tracing::warn!(value = %exec.sandbox, "tools.exec.sandbox: unsupported value; using auto");
        fallback
    });
    ExecSettings {
        timeout: Duration::from_secs(exec.timeout.max(1)),
        path_prepend: exec.path_prepend.clone(),
        path_append: exec.path_append.clone(),
        sandbox: sandbox_mode,
        extra_writable: expand_paths(&exec.sandbox_rw_binds, &env.home),
        extra_readable: expand_paths(&exec.sandbox_ro_binds, &env.home),
        data_dir: Some(env.paths().data_dir()),
        hide_paths: expand_paths(&exec.hide_paths, &env.home),
        network: exec.network,
        limits: nanobot_tools::confine::ExecLimits {
            max_processes: exec.max_processes,
            cpu_seconds: exec.max_cpu_seconds,
            memory_mb: exec.max_memory_mb,
            file_size_mb: exec.max_file_size_mb,
        },
        allowed_env_keys: exec.allowed_env_keys.clone(),
        allow_patterns: exec.allow_patterns.clone(),
        deny_patterns: exec.deny_patterns.clone(),
        restrict_to_workspace: config.tools.restrict_to_workspace,
        parent_env: env.vars.clone(),
        egress: egress_settings(config),
        ..ExecSettings::default()
    }
}

/// `~`-expanded absolute paths of a config list (relative entries are dropped: a bind needs a fixed place).
fn expand_paths(list: &[String], home: &Path) -> Vec<PathBuf> {
    list.iter()
        .map(|p| nanobot_config::paths::expand_tilde(p.trim(), home))
        .filter(|p| p.is_absolute())
        .collect()
}

/// For a long-running program at start: logs, on a thread of its own (the kernel probe runs bubblewrap), what
/// `exec`'s confinement lacks on this machine, when `exec` is on. A one-shot run does not probe at start (it would
/// exit before the probe ends); its first command warns instead.
pub fn warn_if_exec_degraded(config: &Config, env: &Environment, workspace: &Path) {
    if !config.tools.exec.enable {
        return;
    }
    let settings = exec_settings(config, env);
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let _ = std::thread::Builder::new()
        .name("nanobot-exec-probe".into())
        .spawn(move || nanobot_tools::builtin::warn_if_degraded(&settings, &ws));
}

/// The tools shared by the main agent and subagents (files, exec, web), built from `config.tools`.
pub fn base_tools(
    config: &Config,
    env: &Environment,
    workspace: &Path,
    extra_read_root: Option<PathBuf>,
) -> Result<Vec<Arc<dyn Tool>>, RuntimeError> {
    let t = &config.tools;
    let reg = ToolRegistry::default();
    // nanobot's data directory (config with keys, sessions, cron, pairing) stays out of the file tools' reach in
    // every mode; the workspace stays reachable when it lies inside it.
    let mut sandbox = Sandbox::new(workspace, t.restrict_to_workspace)
        .with_home(Some(env.home.clone()))
        .with_data_dir(Some(env.paths().data_dir()));
    if let Some(root) = extra_read_root {
        sandbox = sandbox.with_read_root(root);
    }
    if t.file.enable {
        register_fs_tools(&reg, &sandbox);
    }
    if t.exec.enable {
        let exec = ExecTool::new(exec_settings(config, env), Arc::new(sandbox.clone()))
            .map_err(nanobot_core::CoreError::from)?;
        if t.cli_apps.enable {
            let registry = env.paths().data_dir().join("cli-apps").join("installed.json");
            reg.register(Arc::new(nanobot_tools::builtin::RunCliAppTool::new(
                exec.clone(),
                registry,
                t.cli_apps.run_timeout,
            )));
        }
        nanobot_tools::builtin::register_exec(&reg, exec);
    }
    #[cfg(not(feature = "web"))]
    if t.web.enable {
        tracing::debug!("web_search and web_fetch are not in this build (cargo feature `web`)");
    }
    #[cfg(feature = "web")]
    if t.web.enable {
        let ssrf = ssrf_guard(config)?;
        let search = &t.web.search;
        let provider = nanobot_tools::SearchProvider::from_config(&search.provider).unwrap_or_else(|| {
            tracing::warn!(provider = %search.provider, "tools.web.search.provider: unknown; using duckduckgo");
            nanobot_tools::SearchProvider::DuckDuckGo
        });
        let web = nanobot_tools::WebSettings {
            proxy: t.web.proxy.clone().filter(|p| !p.trim().is_empty()),
            user_agent: t.web.user_agent.clone(),
            search: nanobot_tools::SearchSettings {
                provider,
                api_key: nanobot_tools::Secret::new(search.api_key.expose()),
                base_url: search.base_url.clone(),
                max_results: search.max_results.clamp(1, 10),
                timeout: Duration::from_secs(search.timeout.max(1)),
            },
            ssrf,
            allowed_domains: web_domains(t),
            ..nanobot_tools::WebSettings::default()
        };
        register_web_tools(&reg, &web);
    }
    Ok(reg.names().into_iter().filter_map(|n| reg.get(&n)).collect())
}

/// The domains the web tools may fetch: `tools.network.allowedDomains` governs them as it governs every program;
/// `tools.web.allowedDomains` alone (the older key) still does, and with both, the web entries the network list
/// allows.
pub fn web_domains(t: &nanobot_config::ToolsConfig) -> Option<Vec<String>> {
    match (&t.network.allowed_domains, &t.web.allowed_domains) {
        (None, web) => web.clone(),
        (Some(network), None) => Some(network.clone()),
        (Some(network), Some(web)) => {
            let network = nanobot_tools::egress::DomainList::new(network);
            let web = nanobot_tools::egress::DomainList::new(web);
            Some(
                web.domains()
                    .iter()
                    .filter(|d| network.allows(d))
                    .cloned()
                    .collect(),
            )
        }
    }
}

/// Egress by domain for confined programs (`tools.network`), `None` when `allowedDomains` is not set: the proxy
/// resolves `hosts` itself (their addresses pass the SSRF guard) and checks every other address against
/// `tools.ssrfWhitelist`.
pub fn egress_settings(config: &Config) -> Option<nanobot_tools::egress::EgressSettings> {
    let network = &config.tools.network;
    let allowed = network.allowed_domains.as_ref()?;
    let hosts: Vec<(String, std::net::IpAddr)> = network
        .hosts
        .iter()
        .filter_map(|(name, address)| Some((name.clone(), address.trim().parse().ok()?)))
        .collect();
    let mut whitelist = config.tools.ssrf_whitelist.clone();
    whitelist.extend(hosts.iter().map(|(_, ip)| ip.to_string()));
    // A bad whitelist entry is reported where the web tools are built; here it only narrows.
    let guard = nanobot_tools::ssrf::SsrfGuard::from_cidrs(&whitelist)
        .or_else(|_| {
            nanobot_tools::ssrf::SsrfGuard::from_cidrs(
                &hosts.iter().map(|(_, ip)| ip.to_string()).collect::<Vec<_>>(),
            )
        })
        .unwrap_or_default()
        .with_resolver(Arc::new(nanobot_tools::egress::HostsResolver::new(hosts)));
    let mut settings =
        nanobot_tools::egress::EgressSettings::new(nanobot_tools::egress::DomainList::new(allowed), guard);
    settings.credentials = credentials(config);
    Some(settings)
}

/// The credentials granted to domains (`tools.secrets`), which nanobot's egress proxy puts into requests to them
/// (verifying the servers against the system's store, which programs given them also trust). `None` when none
/// are granted, or without `tools.network.allowedDomains` (which validation refuses).
pub fn credentials(config: &Config) -> Option<Arc<nanobot_tools::egress::Credentials>> {
    use nanobot_tools::egress::{Credentials, DomainList, Grant, TrustedRoots};
    let secrets = &config.tools.secrets;
    if secrets.is_empty() || config.tools.network.allowed_domains.is_none() {
        return None;
    }
    let upstream = match nanobot_providers::tls_config() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "tools.secrets: no TLS set-up; no credential is used");
            return None;
        }
    };
    let grants = secrets
        .iter()
        .map(|(name, g)| Grant::new(name, g.value.clone(), DomainList::new(&g.domains)))
        .collect();
    let roots: TrustedRoots = Arc::new(nanobot_providers::system_roots);
    Some(Arc::new(Credentials::new(grants, &upstream, roots)))
}

#[cfg(any(feature = "web", feature = "mcp"))]
fn ssrf_guard(config: &Config) -> Result<nanobot_tools::ssrf::SsrfGuard, RuntimeError> {
    nanobot_tools::ssrf::SsrfGuard::from_cidrs(&config.tools.ssrf_whitelist)
        .map_err(|e| RuntimeError::Config(format!("tools.ssrfWhitelist: {e}")))
}

/// Registry settings from `agents.defaults` and the tools offered (`tools.only`, else `tools.profile`).
pub fn registry_settings(config: &Config) -> RegistrySettings {
    RegistrySettings {
        max_tool_result_chars: config.agents.defaults.max_tool_result_chars as usize,
        selection: tool_selection(&config.tools),
        credentials: credentials(config),
        ..RegistrySettings::default()
    }
}

/// The tools offered to the model: `tools.only` when set, else `tools.profile` (an unknown profile, which
/// validation refuses, offers every tool).
pub fn tool_selection(tools: &nanobot_config::ToolsConfig) -> ToolSelection {
    if !tools.only.is_empty() {
        return ToolSelection::only(tools.only.iter().cloned());
    }
    match tools.tool_profile() {
        Some(ToolProfile::Local) => ToolSelection::local(),
        Some(ToolProfile::Chat) => ToolSelection::none(),
        _ => ToolSelection::all(),
    }
}

/// The provider `config` names, with its key from the config or `env.vars` (with retries and fallbacks).
pub fn provider(config: &Config, env: &Environment) -> Result<Arc<dyn Provider>, RuntimeError> {
    nanobot_providers::install_ring();
    let defaults = config.resolved_defaults();
    // The data directory of this config (where 0.3.5 keeps the xAI login), not only `NANOBOT_CONFIG`'s.
    Ok(
        nanobot_providers::ProviderFactory::new(&config.providers, &defaults, env.vars.clone())
            .with_data_dir(env.paths().data_dir())
            .build_with_fallbacks(&defaults.model)?,
    )
}

/// The loop the CLI and the gateway run: provider resolved from `config` and `env.vars`, tools from
/// `config.tools`, skills, memory, MCP servers, the cron store of the workspace, sessions under the data
/// directory. Nothing is read from the process environment.
pub fn build_agent(config: &Config, env: &Environment) -> Result<AgentLoop, RuntimeError> {
    Ok(agent_builder(config, env, provider(config, env)?)?.build()?)
}

/// Like [`build_agent`] with a given provider, returning the builder so callers can add hooks or tools.
pub fn agent_builder(
    config: &Config,
    env: &Environment,
    provider: Arc<dyn Provider>,
) -> Result<AgentLoopBuilder, RuntimeError> {
    agent_builder_shared(config, env, provider, None)
}

/// [`agent_builder`] whose session store, cron store and memory files keep their files in `shared` too (gateway
/// replicas with separate homes, `gateway.bus.nats.store: jetstream`); `None` is [`agent_builder`].
pub fn agent_builder_shared(
    config: &Config,
    env: &Environment,
    provider: Arc<dyn Provider>,
    shared: Option<Arc<dyn nanobot_util::SharedFiles>>,
) -> Result<AgentLoopBuilder, RuntimeError> {
    let settings = agent_settings(config, env)?;
    let ws = settings.workspace.clone();
    std::fs::create_dir_all(&ws).map_err(|e| {
        RuntimeError::Config(format!(
            "agents.defaults.workspace: cannot create {}: {e}",
            ws.display()
        ))
    })?;
    let builtin_dir = builtin_skills_dir(&settings.data_dir);
    let skills = nanobot_skills::SkillsLoader::new(
        &ws,
        builtin_dir.clone(),
        nanobot_skills::RequirementEnv::new(env.vars.clone()),
    )
    .with_disabled(config.agents.defaults.disabled_skills.iter().cloned());
    if let Err(e) = skills.materialize_builtins() {
        tracing::warn!(error = %e, "cannot write the built-in skills; they stay unavailable to read_file");
    }
    let base = base_tools(config, env, &ws, Some(builtin_dir))?;
    let tz = settings.timezone;
    let data_dir = settings.data_dir.clone();
    let mut store_options = nanobot_sessions::StoreOptions::default();
    if let Some(files) = &shared {
        store_options = store_options.shared(files.clone());
    }
    let sessions = nanobot_sessions::SessionStore::with_options(&data_dir, &ws, store_options)
        .map_err(nanobot_core::CoreError::from)?;
    let d = &config.resolved_defaults();
    let budget = nanobot_memory::Budget::resolve(
        d.memory_window.map(|w| w as usize),
        d.context_window_tokens as usize,
        d.max_tokens as usize,
        MEMORY_RESERVED_TOKENS,
    );
    let consolidation = nanobot_memory::ConsolidationSettings::new(settings.model.clone(), budget);
    let dream_model = d.dream.model_override.clone().filter(|m| !m.trim().is_empty());
    let dream = nanobot_memory::DreamSettings::new(dream_model.unwrap_or_else(|| settings.model.clone()));
    let ledger = Arc::new(crate::usage::ledger_in(config, &data_dir, tz, shared.clone()));
    // Consolidation and Dream call the model outside any turn: their calls are recorded as `memory`.
    let metered: Arc<dyn Provider> = Arc::new(crate::usage::MeteredProvider::new(
        provider.clone(),
        ledger.clone(),
        "memory",
    ));
    let memory = match nanobot_memory::Memory::open(&ws, sessions.clone(), metered, consolidation, dream) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e, "long-term memory unavailable; /compact falls back to raw archives");
            None
        }
    };
    let mut builder = AgentLoop::builder(provider, settings).usage_ledger(ledger);
    if let Some(files) = &shared {
        builder = builder.memory_files(files.clone());
    }
    let mut builder = builder
        .sessions(sessions)
        .registry_settings(registry_settings(config))
        .base_tools(base)
        .skills(skills)
        .chat_rights(chat_rights(&config.channels));
    if !config.model_presets.is_empty() {
        builder = builder.model_presets(Arc::new(
            crate::ConfigPresets::new(config, env.vars.clone()).with_data_dir(env.paths().data_dir()),
        ));
    }
    if let Some(m) = memory {
        #[cfg(feature = "memory-search")]
        {
            builder = builder.tool(Arc::new(m.search_tool()));
        }
        builder = builder.memory(Arc::new(MemoryAdapter::new(m)));
    }
    #[cfg(not(feature = "mcp"))]
    if !config.tools.mcp_servers.is_empty() {
        tracing::warn!(
            servers = %config.tools.mcp_servers.keys().cloned().collect::<Vec<_>>().join(", "),
            "tools.mcpServers is set but this build has no MCP support (cargo feature `mcp`): the servers are left out"
        );
    }
    #[cfg(feature = "mcp")]
    if !config.tools.mcp_servers.is_empty() {
        let opts = nanobot_mcp::McpOptions {
            parent_env: env.vars.clone(),
            media_dir: Some(env.paths().media_dir(Some("mcp"))),
            ssrf: ssrf_guard(config)?,
            confinement: crate::mcp::confinement(config, env),
            ..nanobot_mcp::McpOptions::default()
        };
        let (manager, errors) = crate::mcp::mcp_manager(&config.tools.mcp_servers, opts);
        for e in errors {
            tracing::warn!(error = %e, "MCP server left out");
        }
        builder = builder.mcp(manager);
    }
    let mut store = nanobot_cron::JobStore::new(nanobot_config::paths::workspace::cron_jobs(&ws));
    if let Some(files) = shared {
        store = store.with_shared(files);
    }
    let legacy = data_dir.join("cron").join("jobs.json");
    if legacy.is_file()
        && let Err(e) = store.migrate_from(&legacy)
    {
        tracing::warn!(error = %e, path = %legacy.display(), "cannot migrate the old cron store");
    }
    Ok(builder.cron(store, tz))
}

/// The rights the configured channels give a turn beyond its own chat: each channel's `allowFrom` (the
/// `message` tool may reach those chats, and no others).
pub fn chat_rights(channels: &ChannelsConfig) -> ChatRights {
    let mut rights = ChatRights::default()
        .with_channel("telegram", &channels.telegram.allow_from)
        .with_channel("discord", &channels.discord.allow_from)
        .with_channel("slack", &channels.slack.allow_from);
    for name in channels.other.names() {
        let entries: Vec<String> = channels
            .other
            .get(name)
            .and_then(|b| b.get("allowFrom"))
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(serde_json::Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        rights = rights.with_channel(name, entries);
    }
    rights
}
