//! Turning session messages into the text the memory models read.

use nanobot_sessions::SessionMessage;
use serde_json::Value;

/// `YYYY-MM-DD HH:MM` from a stored ISO timestamp (`?` when missing).
pub(crate) fn short_stamp(ts: Option<&str>) -> String {
    match ts {
        Some(t) if t.len() >= 16 => t[..16].replace('T', " "),
        Some(t) if !t.is_empty() => t.to_owned(),
        _ => "?".to_owned(),
    }
}

/// Cuts `text` to at most `max` characters, marking the cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push_str(" …[truncated]");
    out
}

/// The names of the tools an assistant message called.
pub(crate) fn tool_names(m: &SessionMessage) -> Vec<String> {
    m.tool_calls()
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    c.get("function")
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One line per message, as the Python nanobot formats a conversation for consolidation:
/// `[YYYY-MM-DD HH:MM] ROLE [tools: a, b]: content`. Slash commands and empty messages are left out; each
/// message's text is cut to `max_chars`.
pub(crate) fn conversation_lines(messages: &[SessionMessage], max_chars: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for m in messages {
        if m.is_command() {
            continue;
        }
        let Some(role) = m.role() else { continue };
        let text = m.content_text().unwrap_or_default();
        let tools = tool_names(m);
        if text.trim().is_empty() && tools.is_empty() {
            continue;
        }
        let stamp = short_stamp(m.timestamp());
        let mut label = role.to_uppercase();
        if role == "tool"
            && let Some(name) = m.name()
        {
            label = format!("TOOL {name}");
        }
        if !tools.is_empty() {
            label = format!("{label} [tools: {}]", tools.join(", "));
        }
        lines.push(format!("[{stamp}] {label}: {}", truncate(text.trim(), max_chars)));
    }
    lines
}

/// The text of a message counted against the token budget: its content plus its tool-call arguments.
pub(crate) fn budget_text(m: &SessionMessage) -> String {
    let mut s = m.content_text().unwrap_or_default();
    if let Some(calls) = m.tool_calls() {
        for c in calls {
            s.push_str(&c.to_string());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_follow_the_python_shape() {
        let call = SessionMessage::from_map(
            json!({"role": "assistant", "content": null, "timestamp": "2026-03-01T10:05:07.123",
                   "tool_calls": [{"id": "c1", "type": "function",
                                   "function": {"name": "read_file", "arguments": "{}"}}]})
            .as_object()
            .cloned()
            .unwrap(),
        );
        let msgs = vec![
            SessionMessage::new("user", "hello").with("timestamp", "2026-03-01T10:05:00"),
            call,
            SessionMessage::new("tool", "x".repeat(50))
                .with("name", "read_file")
                .with("timestamp", "2026-03-01T10:05:08"),
            SessionMessage::new("user", "/status").with("_command", true),
        ];
        let lines = conversation_lines(&msgs, 10);
        assert_eq!(lines[0], "[2026-03-01 10:05] USER: hello");
        assert_eq!(lines[1], "[2026-03-01 10:05] ASSISTANT [tools: read_file]: ");
        assert_eq!(
            lines[2],
            "[2026-03-01 10:05] TOOL read_file: xxxxxxxxxx …[truncated]"
        );
        assert_eq!(lines.len(), 3);
    }
}
