//! Resolved agent settings, and building them (plus tools, provider, sessions…) from a `&Config`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use nanobot_config::Config;
use nanobot_config::paths::NanobotPaths;
use nanobot_tools::builtin::{ExecTool, register_fs_tools, register_web_tools};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::ssrf::SsrfGuard;
use nanobot_tools::{
    ExecSandbox, ExecSettings, RegistrySettings, SearchProvider, SearchSettings, Tool, ToolRegistry,
    WebSettings,
};

use crate::error::CoreError;

/// What the binaries pass in instead of letting a library read the process: the home directory, the
/// environment as a map, and the config file path when it is not the default.
///
/// `Debug` lists the variables' names only: their values include API keys.
#[derive(Clone, Default)]
pub struct Environment {
    /// The user's home directory.
    pub home: PathBuf,
    /// Environment variables (`std::env::vars().collect()` in a binary, a map in tests).
    pub vars: HashMap<String, String>,
    /// `--config` when given.
    pub config_path: Option<PathBuf>,
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Environment")
            .field("home", &self.home)
            .field("vars", &names)
            .field("config_path", &self.config_path)
            .finish()
    }
}

impl Environment {
    /// An environment with this home and variables.
    pub fn new(home: impl Into<PathBuf>, vars: HashMap<String, String>) -> Self {
        Self {
            home: home.into(),
            vars,
            config_path: None,
        }
    }

    /// The nanobot paths of this environment.
    pub fn paths(&self) -> NanobotPaths {
        match &self.config_path {
            Some(p) => NanobotPaths::with_config_path(&self.home, p),
            None => NanobotPaths::new(&self.home),
        }
    }
}

/// The agent's resolved settings (`agents.defaults` and a few more), in one place.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The workspace directory.
    pub workspace: PathBuf,
    /// The data directory (`~/.nanobot`): sessions live below it.
    pub data_dir: PathBuf,
    /// `tools.restrictToWorkspace` (default on outside a config). The `message` tool's attachments are confined to
    /// the workspace whatever this says.
    pub restrict_to_workspace: bool,
    /// The user's home directory, for `~` in attachment paths (`None`: `~` is refused).
    pub home: Option<PathBuf>,
    /// Model id.
    pub model: String,
    /// Output-token limit.
    pub max_tokens: u32,
    /// The model's context window.
    pub context_window_tokens: u32,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Tool iterations per turn.
    pub max_tool_iterations: usize,
    /// Subagents at once.
    pub max_concurrent_subagents: usize,
    /// Iteration cap of subagents.
    pub subagent_max_iterations: usize,
    /// Turns of different sessions processed at once.
    pub max_concurrent_sessions: usize,
    /// Characters of a tool hint's argument.
    pub tool_hint_max_length: usize,
    /// History messages replayed per turn.
    pub max_history_messages: usize,
    /// The user's time zone.
    pub timezone: Tz,
    /// The agent's name.
    pub bot_name: String,
    /// One session for every channel (`agents.defaults.unifiedSession`).
    pub unified_session: bool,
    /// Longest a turn may run (`agents.defaults.timeouts.turn`); then it is stopped and the user told so.
    pub turn_timeout: std::time::Duration,
}

impl AgentSettings {
    /// Defaults (as `agents.defaults`) for `workspace`, with sessions under `data_dir`.
    pub fn new(
        workspace: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            workspace: workspace.into(),
            data_dir: data_dir.into(),
            restrict_to_workspace: true,
            home: None,
            model: model.into(),
            max_tokens: 8192,
            context_window_tokens: 200_000,
            temperature: Some(0.1),
            reasoning_effort: None,
            max_tool_iterations: 200,
            max_concurrent_subagents: 4,
            subagent_max_iterations: 15,
            max_concurrent_sessions: 8,
            tool_hint_max_length: 40,
            max_history_messages: 500,
            timezone: Tz::UTC,
            bot_name: "nanobot".into(),
            unified_session: false,
            turn_timeout: std::time::Duration::from_secs(3600),
        }
    }

    /// Settings from `agents.defaults` of `config`, paths resolved against `env`.
    pub fn from_config(config: &Config, env: &Environment) -> Result<Self, CoreError> {
        let d = &config.agents.defaults;
        let paths = env.paths();
        let tz: Tz = match d.timezone.trim() {
            "" => Tz::UTC,
            name => name.parse().map_err(|_| {
                CoreError::Config(format!(
                    "agents.defaults.timezone: unknown IANA time zone `{name}`"
                ))
            })?,
        };
        let mut s = Self::new(paths.workspace(&d.workspace), paths.data_dir(), d.model.clone());
        s.restrict_to_workspace = config.tools.restrict_to_workspace;
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
        s.turn_timeout = std::time::Duration::from_secs_f64(d.timeouts.turn.clamp(0.001, 604_800.0));
        Ok(s)
    }
}

/// The `exec` settings `config.tools.exec` asks for in `env` (also what `nanobot doctor` reports on).
pub fn exec_settings_from_config(config: &Config, env: &Environment) -> ExecSettings {
    let sandbox_mode = ExecSandbox::from_config(&config.tools.exec.sandbox).unwrap_or_else(|fallback| {
        tracing::warn!(value = %config.tools.exec.sandbox, "tools.exec.sandbox: unsupported value; using auto");
        fallback
    });
    ExecSettings {
        timeout: Duration::from_secs(config.tools.exec.timeout.max(1)),
        path_prepend: config.tools.exec.path_prepend.clone(),
        path_append: config.tools.exec.path_append.clone(),
        sandbox: sandbox_mode,
        extra_writable: expand_paths(&config.tools.exec.sandbox_rw_binds, &env.home),
        extra_readable: expand_paths(&config.tools.exec.sandbox_ro_binds, &env.home),
        data_dir: Some(env.paths().data_dir()),
        hide_paths: expand_paths(&config.tools.exec.hide_paths, &env.home),
        network: config.tools.exec.network,
        limits: nanobot_tools::confine::ExecLimits {
            max_processes: config.tools.exec.max_processes,
            cpu_seconds: config.tools.exec.max_cpu_seconds,
            memory_mb: config.tools.exec.max_memory_mb,
            file_size_mb: config.tools.exec.max_file_size_mb,
        },
        allowed_env_keys: config.tools.exec.allowed_env_keys.clone(),
        allow_patterns: config.tools.exec.allow_patterns.clone(),
        deny_patterns: config.tools.exec.deny_patterns.clone(),
        restrict_to_workspace: config.tools.restrict_to_workspace,
        parent_env: env
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        ..ExecSettings::default()
    }
}

/// `~`-expanded absolute paths of a config list (relative entries are dropped: a bind needs a
/// fixed place).
fn expand_paths(list: &[String], home: &std::path::Path) -> Vec<PathBuf> {
    list.iter()
        .map(|p| nanobot_config::paths::expand_tilde(p.trim(), home))
        .filter(|p| p.is_absolute())
        .collect()
}

/// The tools shared by the main agent and subagents (files, exec, web), built from `config.tools`.
pub fn base_tools_from_config(
    config: &Config,
    env: &Environment,
    workspace: &std::path::Path,
    extra_read_root: Option<PathBuf>,
) -> Result<Vec<Arc<dyn Tool>>, CoreError> {
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
        let settings = exec_settings_from_config(config, env);
        let exec = ExecTool::new(settings, Arc::new(sandbox.clone()))?;
        exec.warn_if_degraded();
        reg.register(Arc::new(exec));
    }
    if t.web.enable {
        let ssrf = SsrfGuard::from_cidrs(&t.ssrf_whitelist)
            .map_err(|e| CoreError::Config(format!("tools.ssrfWhitelist: {e}")))?;
        let search = &t.web.search;
        let provider = SearchProvider::from_config(&search.provider).unwrap_or_else(|| {
            tracing::warn!(provider = %search.provider, "tools.web.search.provider: unknown; using duckduckgo");
            SearchProvider::DuckDuckGo
        });
        let web = WebSettings {
            proxy: t.web.proxy.clone().filter(|p| !p.trim().is_empty()),
            user_agent: t.web.user_agent.clone(),
            search: SearchSettings {
                provider,
                api_key: nanobot_tools::Secret::new(search.api_key.expose()),
                base_url: search.base_url.clone(),
                max_results: search.max_results.clamp(1, 10),
                timeout: Duration::from_secs(search.timeout.max(1)),
            },
            ssrf,
            allowed_domains: t.web.allowed_domains.clone(),
            ..WebSettings::default()
        };
        register_web_tools(&reg, &web);
    }
    Ok(reg.names().into_iter().filter_map(|n| reg.get(&n)).collect())
}

/// Registry settings from `agents.defaults`.
pub fn registry_settings(config: &Config) -> RegistrySettings {
    RegistrySettings {
        max_tool_result_chars: config.agents.defaults.max_tool_result_chars as usize,
        ..RegistrySettings::default()
    }
}

/// Tokens set aside for the system prompt and tool definitions when sizing the consolidation budget.
const MEMORY_RESERVED_TOKENS: usize = 8_000;

/// Where the built-in skills are written so `read_file` can read them: `<data dir>/builtin-skills`.
pub fn builtin_skills_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("builtin-skills")
}

impl crate::agent_loop::AgentLoop {
    /// The loop the CLI and the gateway run: provider (with retries and fallbacks) resolved from `config` and
    /// `env.vars`, tools from `config.tools`, skills, MCP servers, the cron store of the workspace, sessions
    /// under the data directory. Nothing is read from the process environment.
    pub fn from_config(config: &Config, env: &Environment) -> Result<Self, CoreError> {
        let provider = nanobot_providers::resolve_provider(config, "", &env.vars)?;
        Self::builder_from_config(config, env, provider)?.build()
    }

    /// Like [`AgentLoop::from_config`] with a given provider, returning the builder so callers can add memory,
    /// hooks or tools before building.
    pub fn builder_from_config(
        config: &Config,
        env: &Environment,
        provider: Arc<dyn nanobot_providers::Provider>,
    ) -> Result<crate::agent_loop::AgentLoopBuilder, CoreError> {
        let settings = AgentSettings::from_config(config, env)?;
        let ws = settings.workspace.clone();
        std::fs::create_dir_all(&ws).map_err(|e| CoreError::io("creating", &ws, e))?;
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
        let base = base_tools_from_config(config, env, &ws, Some(builtin_dir))?;
        let tz = settings.timezone;
        let data_dir = settings.data_dir.clone();
        let sessions = nanobot_sessions::SessionStore::new(&data_dir, &ws)?;
        let d = &config.agents.defaults;
        let budget = nanobot_memory::Budget::resolve(
            d.memory_window.map(|w| w as usize),
            d.context_window_tokens as usize,
            d.max_tokens as usize,
            MEMORY_RESERVED_TOKENS,
        );
        let consolidation = nanobot_memory::ConsolidationSettings::new(settings.model.clone(), budget);
        let dream_model = d.dream.model_override.clone().filter(|m| !m.trim().is_empty());
        let dream = nanobot_memory::DreamSettings::new(dream_model.unwrap_or_else(|| settings.model.clone()));
        let memory = match nanobot_memory::Memory::open(
            &ws,
            sessions.clone(),
            provider.clone(),
            consolidation,
            dream,
        ) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, "long-term memory unavailable; /compact falls back to raw archives");
                None
            }
        };
        let mut builder = crate::agent_loop::AgentLoop::builder(provider, settings)
            .sessions(sessions)
            .registry_settings(registry_settings(config))
            .base_tools(base)
            .skills(skills)
            .chat_rights(crate::rights::ChatRights::from_channels(&config.channels));
        if let Some(m) = memory {
            builder = builder
                .tool(Arc::new(m.search_tool()))
                .memory(Arc::new(crate::memory::MemoryAdapter::new(m)));
        }
        if !config.tools.mcp_servers.is_empty() {
            let ssrf = SsrfGuard::from_cidrs(&config.tools.ssrf_whitelist)
                .map_err(|e| CoreError::Config(format!("tools.ssrfWhitelist: {e}")))?;
            let opts = nanobot_mcp::McpOptions {
                parent_env: env.vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                media_dir: Some(env.paths().media_dir(Some("mcp"))),
                ssrf,
                ..nanobot_mcp::McpOptions::default()
            };
            let (manager, errors) = nanobot_mcp::McpManager::from_config(&config.tools.mcp_servers, opts);
            for e in errors {
                tracing::warn!(error = %e, "MCP server left out");
            }
            builder = builder.mcp(manager);
        }
        let store = nanobot_cron::JobStore::new(nanobot_config::paths::workspace::cron_jobs(&ws));
        let legacy = data_dir.join("cron").join("jobs.json");
        if legacy.is_file()
            && let Err(e) = store.migrate_from(&legacy)
        {
            tracing::warn!(error = %e, path = %legacy.display(), "cannot migrate the old cron store");
        }
        Ok(builder.cron(store, tz))
    }
}

impl crate::agent_loop::AgentLoop {
    /// Creates, updates or removes the protected system jobs from `config`: `dream` (every
    /// `agents.defaults.dream.intervalH` hours, when enabled) and `heartbeat` (every `gateway.heartbeat.intervalS`
    /// seconds, when enabled). The gateway calls it at start-up; a no-op without cron.
    pub fn install_system_jobs(&self, config: &Config) -> Result<(), CoreError> {
        let Some(cron) = self.cron() else { return Ok(()) };
        let dream = &config.agents.defaults.dream;
        if dream.enabled {
            let every = Duration::from_secs(u64::from(dream.interval_h.max(1)) * 3600);
            cron.upsert_system_job(
                "dream",
                "Dream (memory consolidation)",
                nanobot_cron::CronSchedule::every(every),
            )?;
        } else {
            cron.remove_system_job("dream")?;
        }
        let hb = &config.gateway.heartbeat;
        if hb.enabled {
            let every = Duration::from_secs(hb.interval_s.max(60));
            cron.upsert_system_job("heartbeat", "Heartbeat", nanobot_cron::CronSchedule::every(every))?;
        } else {
            cron.remove_system_job("heartbeat")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_debug_shows_names_not_values() {
        let env = Environment::new(
            "/home/u",
            HashMap::from([("OPENAI_API_KEY".to_owned(), "sk-SEKRIT".to_owned())]),
        );
        let dbg = format!("{env:?}");
        assert!(
            dbg.contains("OPENAI_API_KEY") && !dbg.contains("sk-SEKRIT"),
            "{dbg}"
        );
    }
}
