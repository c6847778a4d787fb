//! `spawn`: the agent starts a subagent on a task, in the background.

use async_trait::async_trait;
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use super::turn_info::turn_info;
use crate::subagent::{SubagentManager, SubagentOrigin};
/// Arguments of `spawn` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct SpawnArgs {
    /// The task for the subagent, with everything it needs to know.
    pub task: String,
    /// A short label for the task (shown to the user).
    pub label: Option<String>,
    /// The subagent's sampling temperature (0 = deterministic, higher = more creative; default: the agent's).
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Wait for the subagent and return its result to this turn (a consultation the answer depends on); default
    /// false: it runs in the background and reports when done.
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub wait: Option<bool>,
}

/// `spawn`: starts a subagent in the background.
#[derive(Debug, Clone)]
pub(crate) struct SpawnTool {
    manager: SubagentManager,
}

impl SpawnTool {
    /// A `spawn` tool starting subagents with `manager`.
    pub(crate) fn new(manager: SubagentManager) -> Self {
        Self { manager }
    }
}

#[async_trait]
impl TypedTool for SpawnTool {
    type Args = SpawnArgs;

    fn name(&self) -> &str {
        "spawn"
    }

    fn effects(&self, _args: &serde_json::Value) -> nanobot_tools::Effects {
        nanobot_tools::Effects::none().with_agent()
    }

    fn description(&self) -> &str {
        "Spawn a subagent to handle a task in the background. Use it for complex or time-consuming tasks that can \
         run independently; it completes the task and reports back when done. Set wait=true when its result must \
         inform the current turn: the call then returns the result. For deliverables, inspect the workspace first \
         and give the subagent a dedicated subdirectory when helpful."
    }

    async fn call(&self, args: SpawnArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.wait.unwrap_or(false) {
            let label = args
                .label
                .clone()
                .filter(|l| !l.trim().is_empty())
                .unwrap_or_else(|| crate::text::truncate_chars(&args.task, 30));
            return match self
                .manager
                .run_waiting(&args.task, args.temperature, &ctx.session_key, &ctx.cancel)
                .await
            {
                Some((true, result)) => Ok(ToolOutput::text(format!(
                    "Subagent [{label}] completed. Result:\n{result}"
                ))),
                Some((false, result)) => {
                    Ok(ToolOutput::error(format!("Subagent [{label}] failed: {result}")))
                }
                None => Ok(ToolOutput::error(format!("Subagent [{label}] was stopped."))),
            };
        }
        let bus = turn_info(ctx)
            .and_then(|i| i.bus.clone())
            .ok_or_else(|| ToolError::Failed("subagents need the message bus (run the agent loop)".into()))?;
        let origin = SubagentOrigin {
            channel: ctx.channel.clone(),
            chat_id: ctx.chat_id.clone(),
            session_key: ctx.session_key.clone(),
        };
        let label = args
            .label
            .clone()
            .unwrap_or_else(|| crate::text::truncate_chars(&args.task, 30));
        let id = self
            .manager
            .spawn_with(args.task, args.label, args.temperature, origin, bus);
        Ok(ToolOutput::text(format!(
            "Subagent [{label}] started (id: {id}). I'll report back when it completes."
        )))
    }
}
