//! Persistence: stored copies of messages, run checkpoints and crash recovery, `system` routing targets.

use super::redelivery::Earlier;
#[allow(unused_imports)]
use super::*;

impl LoopInner {
    pub(super) async fn recover_checkpoint(&self, key: &str) {
        let cp = match self.sessions.read_checkpoint(key).await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %key, error = %e, "unreadable checkpoint ignored");
                let _ = self.sessions.clear_checkpoint(key).await;
                return;
            }
        };
        // The channel message the interrupted turn answered, when it had one: its turn may have been saved just
        // before the process died (then the checkpoint is left over, not lost work), and restoring it records
        // the delivery as started in the same write, so a redelivery neither repeats the question nor is lost.
        let delivery = cp.get("delivery").and_then(Value::as_str).map(str::to_owned);
        if let Some(id) = &delivery {
            let saved = self
                .sessions
                .metadata(key)
                .await
                .is_ok_and(|m| redelivery::earlier(&m, id) == Some(Earlier::Answered));
            if saved {
                tracing::info!(session = %key, "a checkpoint of a turn already saved was left over; dropped");
                let _ = self.sessions.clear_checkpoint(key).await;
                return;
            }
        }
        match recovered_messages(&cp) {
            Some(msgs) => {
                tracing::warn!(session = %key, messages = msgs.len(), "recovering an interrupted turn from its checkpoint");
                let restored = match delivery {
                    Some(id) => {
                        self.sessions
                            .append_with_header(key, msgs, move |h| {
                                redelivery::record(&mut h.metadata, &id, Earlier::Started);
                            })
                            .await
                    }
                    None => self.sessions.append(key, msgs).await,
                };
                if let Err(e) = restored {
                    tracing::error!(session = %key, error = %e, "cannot restore the checkpoint");
                    return;
                }
            }
            None => tracing::warn!(session = %key, "malformed checkpoint ignored"),
        }
        let _ = self.sessions.clear_checkpoint(key).await;
    }
}

/// `(channel, chat_id, session key)` a system report is routed back to (its typed origin,
/// [`InboundMessage::report_origin`]); `None` for chat messages.
pub(super) fn system_target(msg: &InboundMessage) -> Option<(String, String, String)> {
    let (c, id) = msg.report_origin()?;
    let key = msg
        .session_key_override
        .clone()
        .unwrap_or_else(|| format!("{c}:{id}"));
    Some((c, id, key))
}

/// Where the answer to `msg` goes: the origin of a system report, else the message's own chat.
pub(super) fn reply_route(msg: &InboundMessage) -> (String, String) {
    match system_target(msg) {
        Some((c, id, _)) => (c, id),
        None => (msg.channel.clone(), msg.chat_id.clone()),
    }
}

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
pub fn stored_message(m: &ChatMessage) -> SessionMessage {
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

/// Stores run checkpoints beside the session file.
pub(super) struct SessionCheckpoint {
    pub(super) store: SessionStore,
    pub(super) key: String,
    pub(super) user: SessionMessage,
    pub(super) turn_id: u64,
    /// The channel message's delivery id, when it has one (see `recover_checkpoint`).
    pub(super) delivery: Option<String>,
}

impl SessionCheckpoint {
    /// The opening checkpoint: the user's message, before the model is asked.
    pub(super) async fn begin(&self) {
        let payload =
            json!({"version": 1, "turn": self.turn_id, "user": self.user, "delivery": self.delivery});
        if let Err(e) = self.store.write_checkpoint(&self.key, &payload).await {
            tracing::warn!(session = %self.key, error = %e, "cannot write the opening checkpoint");
        }
    }
}

#[async_trait]
impl CheckpointSink for SessionCheckpoint {
    async fn save(&self, checkpoint: &RunCheckpoint) {
        let payload = json!({
            "version": 1,
            "turn": self.turn_id,
            "user": self.user,
            "delivery": self.delivery,
            "run": checkpoint,
        });
        if let Err(e) = self.store.write_checkpoint(&self.key, &payload).await {
            tracing::warn!(session = %self.key, error = %e, "cannot write a checkpoint");
        }
    }
}
