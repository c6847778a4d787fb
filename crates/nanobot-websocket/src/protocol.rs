//! The wire format shared with nanobot 0.3.5's websocket channel: JSON text frames, client → server envelopes
//! with a `type`, server → client events with an `event` (see `docs/websocket.md`).

use nanobot_bus::{OutboundKind, OutboundMessage};
use serde_json::{Map, Value, json};

/// True for the chat ids the protocol accepts: 1–64 of `A–Z a–z 0–9 _ : -`.
pub fn is_valid_chat_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
}

/// One client frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inbound {
    /// A JSON object with a string `type`.
    Envelope(Map<String, Value>),
    /// Plain text, or a JSON object without `type` whose `content`/`text`/`message` is text (legacy frames go
    /// to the connection's default chat).
    Legacy(String),
    /// Nothing to do (empty, or JSON carrying no text).
    Ignore,
}

/// Classifies one text frame as 0.3.5 does.
pub(crate) fn parse(raw: &str) -> Inbound {
    let text = raw.trim();
    if text.is_empty() {
        return Inbound::Ignore;
    }
    if !text.starts_with('{') {
        return Inbound::Legacy(text.to_string());
    }
    match serde_json::from_str::<Value>(text) {
        Err(_) => Inbound::Legacy(text.to_string()),
        Ok(Value::Object(obj)) => {
            if obj.get("type").is_some_and(Value::is_string) {
                return Inbound::Envelope(obj);
            }
            for key in ["content", "text", "message"] {
                if let Some(s) = obj.get(key).and_then(Value::as_str)
                    && !s.trim().is_empty()
                {
                    return Inbound::Legacy(s.to_string());
                }
            }
            Inbound::Ignore
        }
        Ok(_) => Inbound::Ignore,
    }
}

/// The event an outbound bus message becomes: `message` (with `kind` `progress` / `tool_hint` for the agent's
/// breadcrumbs), `delta` or `stream_end`.
pub(crate) fn event(msg: &OutboundMessage) -> Value {
    let mut v = match &msg.kind {
        OutboundKind::StreamDelta { stream_id } => {
            json!({"event": "delta", "chat_id": msg.chat_id, "text": msg.content, "stream_id": stream_id})
        }
        OutboundKind::StreamEnd { stream_id } => {
            // 0.3.5 puts the complete text on stream_end when it differs from the deltas; ours always carries
            // the final text, which a client may use to replace what it assembled.
            json!({"event": "stream_end", "chat_id": msg.chat_id, "stream_id": stream_id, "text": msg.content})
        }
        kind => {
            let mut v = json!({"event": "message", "chat_id": msg.chat_id, "text": msg.content});
            match kind {
                OutboundKind::Progress => v["kind"] = json!("progress"),
                OutboundKind::ToolHint => v["kind"] = json!("tool_hint"),
                _ => {}
            }
            if !msg.media.is_empty() {
                v["media"] = json!(msg.media);
            }
            if let Some(r) = &msg.reply_to {
                v["reply_to"] = json!(r);
            }
            v
        }
    };
    if let Some(turn) = msg.metadata.get("turn_id").and_then(Value::as_str) {
        v["turn_id"] = json!(turn);
    }
    v
}

/// A control event (`ready`, `attached`, `error`, `webui_response`, …).
pub(crate) fn control(event: &str, fields: Value) -> String {
    let mut v = json!({"event": event});
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), fields) {
        obj.extend(extra);
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_classified_like_0_3_5() {
        assert_eq!(parse("  hi "), Inbound::Legacy("hi".into()));
        assert_eq!(parse(""), Inbound::Ignore);
        assert_eq!(parse("{not json"), Inbound::Legacy("{not json".into()));
        assert_eq!(parse(r#"{"content":"yo"}"#), Inbound::Legacy("yo".into()));
        assert_eq!(parse(r#"{"text":"  "}"#), Inbound::Ignore);
        assert_eq!(parse("[1]"), Inbound::Legacy("[1]".into()));
        assert!(matches!(parse(r#"{"type":"new_chat"}"#), Inbound::Envelope(_)));
        assert_eq!(parse(r#"{"type":1}"#), Inbound::Ignore);
    }

    #[test]
    fn chat_ids_are_compact() {
        assert!(is_valid_chat_id("3f1c-ab_CD:9"));
        assert!(!is_valid_chat_id(""));
        assert!(!is_valid_chat_id("a/b"));
        assert!(!is_valid_chat_id("../x"));
        assert!(!is_valid_chat_id(&"a".repeat(65)));
    }

    #[test]
    fn bus_kinds_become_separate_events() {
        let mut m = OutboundMessage::reply("websocket", "c1", "hello");
        assert_eq!(
            event(&m),
            json!({"event": "message", "chat_id": "c1", "text": "hello"})
        );
        m.kind = OutboundKind::ToolHint;
        assert_eq!(event(&m)["kind"], "tool_hint");
        m.kind = OutboundKind::Progress;
        assert_eq!(event(&m)["kind"], "progress");
        m.kind = OutboundKind::StreamDelta {
            stream_id: "s".into(),
        };
        assert_eq!(
            event(&m),
            json!({"event": "delta", "chat_id": "c1", "text": "hello", "stream_id": "s"})
        );
        m.kind = OutboundKind::StreamEnd {
            stream_id: "s".into(),
        };
        assert_eq!(event(&m)["event"], "stream_end");
        assert_eq!(
            control("error", json!({"detail": "x"})),
            r#"{"event":"error","detail":"x"}"#
        );
    }
}
