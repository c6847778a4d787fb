//! Stored copies: the session's copy of a message (long tool results cut, inline images named), the checkpoints a
//! run writes, and the messages a checkpoint restores.

use std::collections::HashSet;

use async_trait::async_trait;
use nanobot_bus::InboundMessage;
use nanobot_providers::{ChatMessage, Content, ContentPart};
use nanobot_sessions::{INTERRUPTED_TOOL_RESULT, SessionMessage, SessionStore};
use serde_json::{Value, json};

use super::types::{IMAGE_PLACEHOLDER, STORED_TOOL_RESULT_MAX_CHARS, TURN_INTERRUPTED_NOTE};
use crate::runner::{CheckpointSink, RunCheckpoint};

/// The user's message as stored: the original text (no runtime context), images named, not inlined.
pub(super) fn stored_user_message(msg: &InboundMessage) -> SessionMessage {
    let mut text = msg.content.clone();
    for m in &msg.media {
        let kind = if crate::context::image_mime(std::path::Path::new(m)).is_some() {
            "image"
        } else {
            "file"
        };
        text.push_str(&format!("\n[{kind}: {m}]"));
    }
    let mut sm = SessionMessage::new("user", text);
    if msg.is_system_report() {
        sm = sm.with("sender_id", msg.sender_id.clone());
    }
    if msg.metadata.get(crate::tools::CONTINUATION_MARK) == Some(&Value::Bool(true)) {
        sm = sm.with(crate::tools::CONTINUATION_MARK, true);
    }
    sm
}

/// A message as stored: tool results over [`STORED_TOOL_RESULT_MAX_CHARS`] truncated, inline images replaced.
pub(crate) fn stored_message(m: &ChatMessage) -> SessionMessage {
    let m = match m {
        ChatMessage::Tool {
            tool_call_id,
            name,
            content,
        } => {
            let text = content.text();
            let text = if text.chars().count() > STORED_TOOL_RESULT_MAX_CHARS {
                let head: String = text.chars().take(STORED_TOOL_RESULT_MAX_CHARS).collect();
                format!("{head}\n... (truncated)")
            } else {
                text
            };
            ChatMessage::Tool {
                tool_call_id: tool_call_id.clone(),
                name: name.clone(),
                content: Content::Text(text),
            }
        }
        ChatMessage::User {
            content: Content::Parts(parts),
        } => ChatMessage::User {
            content: Content::Parts(
                parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::ImageUrl { url, .. } if url.starts_with("data:") => {
                            ContentPart::text(IMAGE_PLACEHOLDER)
                        }
                        other => other.clone(),
                    })
                    .collect(),
            ),
        },
        other => other.clone(),
    };
    match serde_json::to_value(&m) {
        Ok(Value::Object(map)) => SessionMessage::from_map(map),
        _ => SessionMessage::new(m.role(), m.text()),
    }
}

/// The note closing a user message whose turn ended without an answer.
pub(super) fn interrupted_note() -> SessionMessage {
    SessionMessage::new("assistant", TURN_INTERRUPTED_NOTE).with("_recovery_interrupted", true)
}

/// The messages to append for a checkpoint: user message, completed messages, and an "interrupted" result for
/// every call of the last assistant message that has none. A checkpoint written before the model answered
/// (no `run`) gives the user message and [`TURN_INTERRUPTED_NOTE`].
pub(super) fn recovered_messages(cp: &Value) -> Option<Vec<SessionMessage>> {
    let user: SessionMessage = serde_json::from_value(cp.get("user")?.clone()).ok()?;
    let run: RunCheckpoint = match cp.get("run") {
        Some(v) => serde_json::from_value(v.clone()).ok()?,
        None => return Some(vec![user, interrupted_note()]),
    };
    let mut out = vec![user];
    let mut answered: HashSet<String> = HashSet::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    for m in &run.messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => {
                answered.clear();
                pending = tool_calls
                    .iter()
                    .map(|c| (c.id.clone(), c.name.clone()))
                    .collect();
            }
            ChatMessage::Tool { tool_call_id, .. } => {
                answered.insert(tool_call_id.clone());
            }
            _ => {}
        }
        out.push(stored_message(m));
    }
    for (id, name) in pending {
        if !answered.contains(&id) {
            out.push(stored_message(&ChatMessage::tool_result(
                id,
                name,
                INTERRUPTED_TOOL_RESULT,
            )));
        }
    }
    Some(out)
}

/// Stores run checkpoints beside the session file (made by [`super::ledger::Ledger::open_turn`]).
pub(super) struct SessionCheckpoint {
    pub(super) store: SessionStore,
    pub(super) key: String,
    pub(super) user: SessionMessage,
    pub(super) turn_id: u64,
    /// The channel message's delivery id, when it has one (see [`super::ledger::Ledger::recover_checkpoint`]).
    pub(super) delivery: Option<String>,
}

impl SessionCheckpoint {
    /// The checkpoint of the turn: the user's message, and what the run did so far once it started (`run`).
    /// Without `run` it is the opening checkpoint, written before the model is asked (not synced: a killed process
    /// keeps it, and nothing has run yet that a power loss would make repeat).
    pub(super) fn payload(&self, run: Option<&RunCheckpoint>) -> Value {
        let mut payload =
            json!({"version": 1, "turn": self.turn_id, "user": self.user, "delivery": self.delivery});
        if let Some(run) = run {
            payload["run"] = json!(run);
        }
        payload
    }
}

#[async_trait]
impl CheckpointSink for SessionCheckpoint {
    async fn save(&self, checkpoint: &RunCheckpoint) {
        let payload = self.payload(Some(checkpoint));
        if let Err(e) = self.store.write_checkpoint(&self.key, &payload).await {
            tracing::warn!(session = %self.key, error = %e, "cannot write a checkpoint");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_providers::ToolCall;

    #[test]
    fn stored_copies_truncate_results_and_drop_inline_images() {
        let long = "x".repeat(1200);
        let m = stored_message(&ChatMessage::tool_result("c1", "read_file", long));
        let text = m.content_text().unwrap();
        assert!(text.starts_with(&"x".repeat(500)) && text.ends_with("... (truncated)"));
        assert!(text.len() < 600);
        let u = stored_message(&ChatMessage::user_parts(vec![
            ContentPart::image_url("data:image/png;base64,AAAA"),
            ContentPart::text("hi"),
        ]));
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(v["content"][0]["text"], IMAGE_PLACEHOLDER);
        assert!(!v.to_string().contains("base64"));
    }

    #[test]
    fn recovery_closes_pending_calls_without_rerunning() {
        let run = RunCheckpoint {
            phase: crate::runner::CheckpointPhase::AwaitingTools,
            iteration: 0,
            messages: vec![
                ChatMessage::assistant_tool_calls(
                    None,
                    vec![
                        ToolCall::new("a", "read_file", json!({})),
                        ToolCall::new("b", "exec", json!({})),
                    ],
                ),
                ChatMessage::tool_result("a", "read_file", "done"),
            ],
        };
        let cp = json!({"user": SessionMessage::new("user", "go"), "run": run});
        let msgs = recovered_messages(&cp).unwrap();
        let roles: Vec<_> = msgs.iter().map(|m| m.role().unwrap().to_owned()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
        assert_eq!(msgs[3].tool_call_id(), Some("b"));
        assert_eq!(msgs[3].content_text().as_deref(), Some(INTERRUPTED_TOOL_RESULT));
    }
}
