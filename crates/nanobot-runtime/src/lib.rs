//! The composition root of nanobot: everything between `config.json` and a running agent.
//!
//! **Owns:** environment discovery, done one way for every binary ([`Environment::discover`] /
//! [`Environment::from_process`]); config → agent wiring ([`build_agent`], [`agent_builder`]: typed
//! [`AgentSettings`](nanobot_core::AgentSettings), tools, skills, memory, MCP servers and the cron store from the
//! schema); the protected system jobs installed from the config ([`install_system_jobs`]; they run through
//! [`AgentLoop::run_system_job`](nanobot_core::AgentLoop::run_system_job), their one handler); the one bus
//! dispatcher with its [`TurnObserver`] for metrics; the usage ledger with the configured budget and prices
//! ([`usage_ledger`], [`budget`], [`prices`]; every agent it builds records its model calls there and keeps to the
//! budget); the [`Runtime`] lifecycle (start, stop accepting, drain, shutdown).
//!
//! **Must not know:** chat platforms or HTTP (the gateway composes those on top), the process environment
//! outside [`Environment::from_process`] (which only binaries call).
//!
//! ```
//! use std::path::Path;
//! use nanobot_runtime::Environment;
//! use nanobot_util::EnvMap;
//!
//! let vars = EnvMap::from_iter([("HOME", "/home/me")]);
//! let env = Environment::discover(vars, Path::new("/srv"), Some(Path::new("bot.json")));
//! assert_eq!(env.paths().config_path(), Path::new("/srv/bot.json"));
//!
//! let config = nanobot_config::Config::default();
//! let settings = nanobot_runtime::agent_settings(&config, &env)?;
//! assert_eq!(settings.workspace, Path::new("/home/me/.nanobot/workspace"));
//! # Ok::<(), nanobot_runtime::RuntimeError>(())
//! ```

mod dispatch;
mod env;
mod error;
#[cfg(feature = "mcp")]
pub mod mcp;
mod presets;
mod runtime;
mod system;
mod usage;
mod wiring;

pub use dispatch::{TurnObserver, TurnWatch};
pub use env::{Environment, absolute, explicit_config_path, home_from_vars};
pub use error::RuntimeError;
pub use presets::ConfigPresets;
pub use runtime::{Runtime, RuntimeOptions};
pub use system::{MIN_HEARTBEAT_INTERVAL, install_system_jobs, system_job_schedule};
pub use usage::{budget, prices, usage_ledger};
pub use wiring::{
    LOCAL_MAX_TOKENS, LOCAL_MAX_TOOL_ITERATIONS, LOCAL_TURN_TIMEOUT, agent_builder, agent_builder_shared,
    agent_settings, base_tools, build_agent, chat_rights, credentials, egress_settings, exec_settings,
    model_is_local, provider, registry_settings, tool_selection, warn_if_exec_degraded, web_domains,
};
