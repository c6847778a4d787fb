//! The heartbeat: every `gateway.heartbeat.intervalS` the gateway reads `HEARTBEAT.md`; when it lists tasks,
//! the model decides through a virtual `heartbeat` tool whether to `skip` or `run` them; on `run` the tasks
//! are processed as an agent turn in the `heartbeat` session and the answer goes to the most recently active
//! chat. Nothing is sent when there is nothing to report.
//!
//! It runs as the protected cron job `heartbeat` (the gateway reacts to that job's runs).

use std::path::PathBuf;
use std::sync::Arc;

use nanobot_bus::{Bus, InboundMessage, OutboundMessage};
use nanobot_core::{AgentLoop, TurnOptions};
use nanobot_providers::{ChatMessage, ChatRequest, Provider, ToolSpec};
use serde_json::{Value, json};

use crate::bus::{GatewayBus, Route};
use crate::error::GatewayError;

/// The session heartbeat turns run in.
pub const HEARTBEAT_SESSION: &str = "heartbeat";
/// The file the heartbeat reads, in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// An answer that means "nothing to report" (also: an empty answer).
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";

const DECIDE_SYSTEM: &str = "You are a heartbeat agent. Call the heartbeat tool to report your decision.";

/// What one heartbeat did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HeartbeatOutcome {
    /// `HEARTBEAT.md` is missing or lists no tasks (no model call).
    NoTasks,
    /// The model decided there is nothing to do now.
    Skipped,
    /// The tasks ran as a turn.
    Ran {
        /// The tasks the model chose.
        tasks: String,
        /// The turn's answer.
        response: String,
        /// Where the answer was delivered (`None`: nothing to report, or no chat known yet).
        delivered_to: Option<Route>,
    },
}

/// Runs heartbeats (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct HeartbeatService {
    agent: AgentLoop,
    provider: Arc<dyn Provider>,
    model: String,
    workspace: PathBuf,
    bus: GatewayBus,
}

impl std::fmt::Debug for HeartbeatService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatService")
            .field("model", &self.model)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// True when `HEARTBEAT.md` holds nothing actionable: only blank lines, headings, HTML comments and empty
/// checkboxes (the Python nanobot's rule).
pub fn is_heartbeat_empty(content: &str) -> bool {
    let mut in_comment = false;
    for line in content.lines() {
        let line = line.trim();
        if in_comment {
            if line.contains("-->") {
                in_comment = false;
            }
            continue;
        }
        if line.starts_with("<!--") {
            in_comment = !line.contains("-->");
            continue;
        }
        if line.is_empty()
            || line.starts_with('#')
            || matches!(line, "- [ ]" | "* [ ]" | "- [x]" | "* [x]" | "-" | "*")
        {
            continue;
        }
        return false;
    }
    true
}

fn heartbeat_tool() -> ToolSpec {
    ToolSpec {
        name: "heartbeat".into(),
        description: "Report the heartbeat decision after reviewing the tasks.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["skip", "run"],
                    "description": "skip = nothing to do, run = there are active tasks to carry out"
                },
                "tasks": {
                    "type": "string",
                    "description": "Natural-language summary of the active tasks (required for run)"
                }
            },
            "required": ["action"]
        }),
    }
}

impl HeartbeatService {
    /// A heartbeat asking `provider` (`model`) and running tasks on `agent`, delivering through `bus`.
    pub fn new(
        agent: AgentLoop,
        provider: Arc<dyn Provider>,
        model: impl Into<String>,
        workspace: impl Into<PathBuf>,
        bus: GatewayBus,
    ) -> Self {
        Self {
            agent,
            provider,
            model: model.into(),
            workspace: workspace.into(),
            bus,
        }
    }

    /// Asks the model whether the tasks in `content` need doing now: `Some(tasks)` to run them.
    async fn decide(&self, content: &str) -> Result<Option<String>, GatewayError> {
        let messages = vec![
            ChatMessage::system(DECIDE_SYSTEM),
            ChatMessage::user(format!(
                "Review the following HEARTBEAT.md and decide whether there are active tasks.\n\n{content}"
            )),
        ];
        let request = ChatRequest::new(&self.model, messages).with_tools(vec![heartbeat_tool()]);
        let response = self
            .provider
            .chat(request)
            .await
            .map_err(GatewayError::Heartbeat)?;
        let Some(call) = response.tool_calls.iter().find(|c| c.name == "heartbeat") else {
            return Ok(None);
        };
        let action = call
            .arguments
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("skip");
        if action != "run" {
            return Ok(None);
        }
        let tasks = call
            .arguments
            .get("tasks")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map_or_else(|| content.to_owned(), str::to_owned);
        Ok(Some(tasks))
    }

    /// One heartbeat: read the file, decide, maybe run and deliver.
    pub async fn tick(&self) -> Result<HeartbeatOutcome, GatewayError> {
        let path = self.workspace.join(HEARTBEAT_FILE);
        let content = match tokio::fs::read_to_string(&path).await {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HeartbeatOutcome::NoTasks),
            Err(e) => return Err(GatewayError::io("read", path, e)),
        };
        if is_heartbeat_empty(&content) {
            tracing::debug!("heartbeat: no tasks");
            return Ok(HeartbeatOutcome::NoTasks);
        }
        let Some(tasks) = self.decide(&content).await? else {
            tracing::info!("heartbeat: nothing to do");
            return Ok(HeartbeatOutcome::Skipped);
        };
        tracing::info!("heartbeat: running tasks");
        let target = self.bus.last_route();
        let (channel, chat_id) = match &target {
            Some(r) => (r.channel.clone(), r.chat_id.clone()),
            None => ("cli".to_owned(), "direct".to_owned()),
        };
        let msg =
            InboundMessage::new(channel, "heartbeat", chat_id, &tasks).with_session_key(HEARTBEAT_SESSION);
        let opts = TurnOptions {
            is_cron: true,
            ..TurnOptions::default()
        };
        let reply = self.agent.process_message(msg, opts).await?;
        let response = reply.content.trim().to_owned();
        let silent = response.is_empty() || response.contains(HEARTBEAT_OK) || reply.delivered_by_tool;
        let mut delivered_to = None;
        if !silent {
            match target {
                Some(route) => {
                    let out = OutboundMessage::reply(&route.channel, &route.chat_id, &response);
                    match self.bus.publish_outbound(out).await {
                        Ok(()) => delivered_to = Some(route),
                        Err(e) => tracing::warn!(error = %e, "heartbeat: cannot deliver the result"),
                    }
                }
                None => tracing::info!("heartbeat: no active chat to deliver the result to"),
            }
        }
        Ok(HeartbeatOutcome::Ran {
            tasks,
            response,
            delivered_to,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_heartbeat_files_are_recognised() {
        assert!(is_heartbeat_empty(""));
        assert!(is_heartbeat_empty(
            "# Heartbeat Tasks\n\n<!-- Add tasks below.\nThey run every 30 minutes. -->\n\n## Active\n- [ ]\n"
        ));
        assert!(!is_heartbeat_empty("# Tasks\n- [ ] check the weather in Paris\n"));
        assert!(!is_heartbeat_empty("remind me to drink water"));
    }
}
