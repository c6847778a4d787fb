//! The heartbeat: now and then, read `HEARTBEAT.md`; if it lists tasks, let the model decide (through a virtual
//! `heartbeat` tool) whether to run them now; run them as a turn in the `heartbeat` session, let the notification
//! gate decide (0.3.5's `evaluate_notification`, failing closed) whether the answer is worth a message, and
//! deliver it to the most recently active chat. Silent when there is nothing to do or report. The heartbeat's
//! turn cannot message a chat itself (`message` refuses in its session): everything passes the gate.

use std::path::Path;
use std::sync::Arc;

use nanobot_bus::{InboundMessage, OutboundMessage};
use nanobot_providers::{ChatMessage, ChatRequest, ToolChoice, ToolSpec};
use serde_json::json;

use crate::agent_loop::{AgentLoop, TurnOptions};
use crate::control::{EVALUATOR_PROMPT_FILE, HEARTBEAT_FILE};
use crate::error::CoreError;

/// The heartbeat's session key.
pub(crate) const HEARTBEAT_SESSION: &str = "heartbeat";
/// The answer that means "nothing to report" (never delivered).
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";
/// What the notification gate is told unless the workspace has [`EVALUATOR_PROMPT_FILE`]. It must keep asking
/// for the `evaluate_notification` tool: without that call the gate stays silent (it fails closed).
pub(crate) const DEFAULT_EVALUATOR_PROMPT: &str = "You decide whether a result of the assistant's background work is worth a message to the user. You get the task it was given and its answer; answer by calling evaluate_notification.\n\nNotify for anything the user can act on, errors, finished deliverables, reminders and timers that came due, and whatever the user asked to be told about (a reminder the user set notifies even when the answer only repeats it).\n\nStay silent for routine checks with nothing new, confirmations that all is well, and empty answers; and when the answer talks about its own instructions, its configuration files (HEARTBEAT.md and the like) or whether to notify: the user should never see the assistant reasoning about whether to speak.";

/// What one heartbeat did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeartbeatOutcome {
    /// `HEARTBEAT.md` is missing or lists no tasks: the model was not asked.
    NoTasks,
    /// The model decided there is nothing to do now.
    Skipped,
    /// Not run: a budget is used up (`agents.defaults.budget`; the message names it). The model was not asked.
    OverBudget {
        /// Which limit, and when it resets.
        limit: String,
    },
    /// Not run: control files (`HEARTBEAT.md`, bootstrap files, memory, skills) hold changes the model made and
    /// the user has not confirmed (docs/security.md, "Control files"). The model was not asked.
    Held {
        /// The held files, relative to the workspace.
        files: Vec<String>,
    },
    /// The tasks ran; `delivered_to` is the chat (`channel:chat_id`) that got the answer, if any.
    Ran {
        /// The tasks the model chose to run.
        tasks: String,
        /// The answer.
        answer: String,
        /// Where it was delivered (`None`: nothing to report, or no active chat).
        delivered_to: Option<String>,
    },
}

impl HeartbeatOutcome {
    /// A short label: `empty` (no tasks), `skip` or `run` (what metrics count).
    pub fn label(&self) -> &'static str {
        match self {
            HeartbeatOutcome::NoTasks => "empty",
            HeartbeatOutcome::Skipped => "skip",
            HeartbeatOutcome::Ran { .. } => "run",
            HeartbeatOutcome::Held { .. } => "held",
            HeartbeatOutcome::OverBudget { .. } => "over_budget",
        }
    }
}

/// True when `HEARTBEAT.md` text has something to do: any line that is not blank, a heading, an HTML comment or
/// an empty checkbox.
pub(crate) fn has_tasks(text: &str) -> bool {
    let mut in_comment = false;
    text.lines().any(|line| {
        let l = line.trim();
        if in_comment {
            if l.contains("-->") {
                in_comment = false;
            }
            return false;
        }
        if l.starts_with("<!--") {
            in_comment = !l.contains("-->");
            return false;
        }
        !(l.is_empty()
            || l.starts_with('#')
            || matches!(l, "- [ ]" | "* [ ]" | "- [x]" | "* [x]" | "-" | "*"))
    })
}

/// The notification gate's one tool (0.3.5's).
fn evaluate_tool() -> ToolSpec {
    ToolSpec {
        name: "evaluate_notification".into(),
        description: "Decide whether the user should be told about this background result.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "should_notify": {"type": "boolean", "description": "true: the user should see it; false: routine or empty, stay silent"},
                "reason": {"type": "string", "description": "The reason, in one sentence"}
            },
            "required": ["should_notify"]
        }),
    }
}

fn heartbeat_tool() -> ToolSpec {
    ToolSpec {
        name: "heartbeat".into(),
        description: "Report whether the tasks in HEARTBEAT.md should run now.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["skip", "run"], "description": "skip: nothing to do now; run: do the tasks now"},
                "tasks": {"type": "string", "description": "For run: the tasks to do now, as instructions"}
            },
            "required": ["action"]
        }),
    }
}

impl AgentLoop {
    /// Runs one heartbeat: one model call to decide, and a turn when the model says `run`. The protected
    /// `heartbeat` cron job calls it through [`AgentLoop::run_system_job`] (its only caller in long-running
    /// mode). Reports go to the chat of the most recent message from a real channel, else to the most recently
    /// updated chat session on disk.
    pub async fn heartbeat_tick(&self) -> Result<HeartbeatOutcome, CoreError> {
        if let Some(files) = self.hold_unattended("heartbeat").await {
            return Ok(HeartbeatOutcome::Held { files });
        }
        let ws = self.settings().workspace.clone();
        // Beneath a handle of the workspace: a HEARTBEAT.md that a command replaced by a link leading out of
        // it (or a FIFO) is refused, never followed.
        let files = nanobot_util::ConfinedDir::new(&ws);
        let read = tokio::task::spawn_blocking(move || files.read_to_string(Path::new(HEARTBEAT_FILE)))
            .await
            .map_err(|e| CoreError::io("reading", ws.join(HEARTBEAT_FILE), std::io::Error::other(e)))?;
        let text = match read {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(HeartbeatOutcome::NoTasks),
            Err(e) => return Err(CoreError::io("reading", ws.join(HEARTBEAT_FILE), e)),
        };
        if !has_tasks(&text) {
            return Ok(HeartbeatOutcome::NoTasks);
        }
        // The chat the answer would go to pays for the heartbeat's calls, and its budget holds for them.
        let target = match self.last_route() {
            Some(r) => Some(r),
            None => self.most_recent_chat().await,
        };
        let (channel, chat_id) = target.clone().unwrap_or_else(|| ("cli".into(), "direct".into()));
        let payer = crate::agent_loop::Payer::unattended(format!("{channel}:{chat_id}"), "heartbeat");
        if let Some(over) = self.spending().over_budget(&payer).await {
            tracing::info!(limit = %over.config_key(), "heartbeat not run: over budget");
            return Ok(HeartbeatOutcome::OverBudget {
                limit: over.to_string(),
            });
        }
        let now = chrono::Utc::now().with_timezone(&self.settings().timezone);
        let request = ChatRequest {
            model: self.settings().model.clone(),
            messages: Arc::new(vec![
                ChatMessage::system(
                    "You are the heartbeat of a personal assistant. Read the user's HEARTBEAT.md and decide whether \
                     any task should be done now. Always answer by calling the heartbeat tool.",
                ),
                ChatMessage::user(format!(
                    "Current time: {} ({})\n\nHEARTBEAT.md:\n\n{text}",
                    now.format("%Y-%m-%d %H:%M %A"),
                    self.settings().timezone.name()
                )),
            ]),
            tools: vec![Arc::new(heartbeat_tool())],
            max_tokens: Some(1024),
            temperature: self.settings().temperature,
            reasoning_effort: None,
            tool_choice: Some(ToolChoice::Auto),
        };
        let model = request.model.clone();
        let response = crate::traced_chat(self.provider().as_ref(), request).await?;
        self.spending()
            .record(HEARTBEAT_SESSION, &payer, &model, response.usage)
            .await;
        let decision = response.tool_calls.iter().find(|c| c.name == "heartbeat");
        let Some(call) = decision else {
            return Ok(HeartbeatOutcome::Skipped);
        };
        let action = call
            .arguments
            .get("action")
            .and_then(|a| a.as_str())
            .unwrap_or("skip");
        let tasks = call
            .arguments
            .get("tasks")
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .trim()
            .to_owned();
        if action != "run" {
            return Ok(HeartbeatOutcome::Skipped);
        }
        let tasks = if tasks.is_empty() {
            text.trim().to_owned()
        } else {
            tasks
        };
        let prompt = format!(
            "[Heartbeat] Scheduled check. Do these tasks now:\n\n{tasks}\n\nIf there is nothing worth telling the \
             user, reply exactly {HEARTBEAT_OK}."
        );
        let msg = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Heartbeat,
            &channel,
            "heartbeat",
            &chat_id,
            &prompt,
        )
        .with_session_key(HEARTBEAT_SESSION);
        let reply = self
            .process_message(
                msg,
                TurnOptions {
                    is_cron: true,
                    ..TurnOptions::default()
                },
            )
            .await?;
        let answer = reply.content.trim().to_owned();
        let mut delivered_to = None;
        let worth_telling = !answer.is_empty()
            && !answer.contains(HEARTBEAT_OK)
            && !reply.delivered_by_tool
            && self.should_notify(&prompt, &answer, &payer).await;
        if worth_telling
            && let Some((c, id)) = target
            && let Some(bus) = self.bus()
        {
            bus.publish_outbound(OutboundMessage::reply(&c, &id, &answer))
                .await?;
            delivered_to = Some(format!("{c}:{id}"));
        }
        Ok(HeartbeatOutcome::Ran {
            tasks,
            answer,
            delivered_to,
        })
    }

    /// The notification gate (0.3.5's): one model call, given the task and the answer, that must call
    /// `evaluate_notification`. Fails closed: no call, a failed call or anything unreadable means silence.
    async fn should_notify(&self, task: &str, answer: &str, payer: &crate::agent_loop::Payer) -> bool {
        let ws = self.settings().workspace.clone();
        let custom = tokio::task::spawn_blocking(move || {
            nanobot_util::workspace_prompt(
                &nanobot_util::ConfinedDir::new(&ws),
                Path::new(EVALUATOR_PROMPT_FILE),
            )
        })
        .await
        .ok()
        .flatten();
        let request = ChatRequest {
            model: self.settings().model.clone(),
            messages: Arc::new(vec![
                ChatMessage::system(custom.unwrap_or_else(|| DEFAULT_EVALUATOR_PROMPT.to_owned())),
                ChatMessage::user(format!("## Original task\n{task}\n\n## Agent response\n{answer}")),
            ]),
            tools: vec![Arc::new(evaluate_tool())],
            max_tokens: Some(4096),
            temperature: Some(0.0),
            reasoning_effort: None,
            tool_choice: Some(ToolChoice::Auto),
        };
        let model = request.model.clone();
        let response = crate::traced_chat(self.provider().as_ref(), request).await;
        if let Ok(r) = &response {
            self.spending()
                .record(HEARTBEAT_SESSION, payer, &model, r.usage)
                .await;
        }
        match response {
            Ok(r) => match r.tool_calls.iter().find(|c| c.name == "evaluate_notification") {
                Some(call) => {
                    let notify = call.arguments.get("should_notify").and_then(|v| v.as_bool()) == Some(true);
                    let reason = call
                        .arguments
                        .get("reason")
                        .and_then(|v| v.as_str())
                        .unwrap_or("");
                    tracing::info!(notify, reason, "heartbeat: notification gate");
                    notify
                }
                None => {
                    tracing::warn!(
                        "heartbeat: the notification gate did not call evaluate_notification; silent"
                    );
                    false
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat: the notification gate failed; silent");
                false
            }
        }
    }

    /// The most recently updated session whose key is a real chat (`channel:chat_id`, not internal).
    async fn most_recent_chat(&self) -> Option<(String, String)> {
        let sessions = self.sessions().list_sessions().await.ok()?;
        sessions.into_iter().find_map(|s| {
            let (c, id) = s.key.split_once(':')?;
            (!nanobot_bus::is_internal_channel(c) && !id.is_empty()).then(|| (c.to_owned(), id.to_owned()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_detection_ignores_headings_comments_and_empty_boxes() {
        assert!(!has_tasks(
            "# Heartbeat\n\n<!-- add tasks below\n- example -->\n- [ ]\n"
        ));
        assert!(has_tasks("# Heartbeat\n- [ ] check the weather for Berlin\n"));
        assert!(has_tasks("Remind me to stretch"));
    }
}
