//! Integration tests of nanobot-runtime: agents composed from real `config.json` values against
//! `nanobot_testkit::MockLlm` over HTTP, real session files, real cron stores.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod config;
mod durable_bus;
mod exec_confinement;
mod presets;
mod system_jobs;
mod triggers;

/// The agent of `config` in `home` (no environment variables), started on an in-process bus with `opts`.
fn start_in_process(
    home: &nanobot_testkit::TempHome,
    config: &nanobot_config::Config,
    opts: nanobot_runtime::RuntimeOptions,
) -> (
    nanobot_core::AgentLoop,
    std::sync::Arc<nanobot_bus::InProcessBus>,
    nanobot_runtime::Runtime,
) {
    let env = nanobot_runtime::Environment::new(home.home(), std::collections::HashMap::new());
    let agent = nanobot_runtime::build_agent(config, &env).unwrap();
    let bus = std::sync::Arc::new(nanobot_bus::InProcessBus::new(16));
    let rt = nanobot_runtime::Runtime::start(agent.clone(), bus.clone(), config, opts).unwrap();
    (agent, bus, rt)
}
