//! The kit part: what a run works with. The model (the agent's own and the presets a session may switch to), the
//! tools (MCP servers' included, registered once connected), the subagents, the prompt builder, and the hooks
//! every run carries (the host's, usage, logging).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

#[cfg(feature = "mcp")]
pub(super) use nanobot_mcp::McpManager;
use nanobot_providers::Provider;
#[cfg(not(feature = "mcp"))]
use nanobot_tools::Tool;
use nanobot_tools::ToolRegistry;
use nanobot_util::lock;
use serde_json::{Map, Value};

use crate::context::ContextBuilder;
use crate::hook::{AgentHook, LoggingHook, UsageHook};
use crate::presets::{DEFAULT_PRESET, ModelChoice, ModelPresets, session_preset};
use crate::subagent::SubagentManager;

/// Without the `mcp` feature there is no MCP manager: an uninhabited stand-in keeps the loop's code the same.
#[cfg(not(feature = "mcp"))]
#[derive(Debug, Clone)]
pub(super) enum McpManager {}

#[cfg(not(feature = "mcp"))]
impl McpManager {
    async fn connect(&self) {
        match *self {}
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        match *self {}
    }

    pub(super) async fn shutdown(&self) {
        match *self {}
    }
}

/// What the runs of one loop work with.
pub(super) struct Kit {
    /// The agent's own model settings, as a choice named `default`.
    pub(super) default_model: ModelChoice,
    pub(super) presets: Option<Arc<dyn ModelPresets>>,
    pub(super) tools: Arc<ToolRegistry>,
    pub(super) mcp: Option<McpManager>,
    mcp_registered: Mutex<HashSet<String>>,
    pub(super) subagents: SubagentManager,
    pub(super) context: ContextBuilder,
    /// The host's hooks (run first).
    hooks: Vec<Arc<dyn AgentHook>>,
    pub(super) usage: UsageHook,
}

impl Kit {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        default_model: ModelChoice,
        presets: Option<Arc<dyn ModelPresets>>,
        tools: Arc<ToolRegistry>,
        mcp: Option<McpManager>,
        subagents: SubagentManager,
        context: ContextBuilder,
        hooks: Vec<Arc<dyn AgentHook>>,
    ) -> Self {
        Self {
            default_model,
            presets,
            tools,
            mcp,
            mcp_registered: Mutex::default(),
            subagents,
            context,
            hooks,
            usage: UsageHook::new(),
        }
    }

    /// The agent's own provider.
    pub(super) fn provider(&self) -> &Arc<dyn Provider> {
        &self.default_model.provider
    }

    /// Connects the MCP servers (those not connected yet) and offers their tools.
    pub(super) async fn connect_mcp(&self) {
        let Some(mcp) = &self.mcp else { return };
        mcp.connect().await;
        let mut registered = lock(&self.mcp_registered);
        for tool in mcp.tools() {
            if registered.insert(tool.name().to_owned()) {
                self.tools.register(tool);
            }
        }
    }

    /// The model a session's turns run on: the preset its metadata names (`/model`), else the agent's own. A
    /// preset that can no longer be built (removed from the config, its key gone) falls back with a warning.
    pub(super) fn model_choice(&self, metadata: &Map<String, Value>) -> ModelChoice {
        let name = match session_preset(metadata) {
            Some(n) if n != DEFAULT_PRESET => n,
            _ => return self.default_model.clone(),
        };
        match self.presets.as_ref().map(|p| p.choose(name)) {
            Some(Ok(choice)) => choice,
            Some(Err(e)) => {
                tracing::warn!(preset = %name, error = %e, "the session's model preset is unavailable; using the default");
                self.default_model.clone()
            }
            None => {
                tracing::warn!(preset = %name, "the session names a model preset but none are configured; using the default");
                self.default_model.clone()
            }
        }
    }

    /// The tools a turn keeps from the model, where they cannot work: `create_goal` outside a `/goal` turn,
    /// `update_goal` with no goal active either (offered there, small models call them and are refused).
    pub(super) fn hidden_tools(goal_turn: bool, goal_active: bool) -> Vec<String> {
        let mut hidden = Vec::new();
        if !goal_turn {
            hidden.push("create_goal".to_owned());
            if !goal_active {
                hidden.push("update_goal".to_owned());
            }
        }
        hidden
    }

    /// The tool specs an ordinary turn offers (no goal set).
    pub(super) fn offered_tools(&self) -> Vec<Arc<nanobot_providers::ToolSpec>> {
        let hidden = Self::hidden_tools(false, false);
        let mut specs = self.tools.definitions();
        specs.retain(|t| !hidden.contains(&t.name));
        specs
    }

    /// The names of the presets a session may switch to.
    pub(super) fn preset_names(&self) -> Vec<String> {
        self.presets.as_ref().map(|p| p.names()).unwrap_or_default()
    }

    /// The hooks every run carries: the host's, then usage counting and logging.
    pub(super) fn run_hooks(&self) -> Vec<Arc<dyn AgentHook>> {
        let mut hooks = self.hooks.clone();
        hooks.push(Arc::new(self.usage.clone()));
        hooks.push(Arc::new(LoggingHook));
        hooks
    }
}
