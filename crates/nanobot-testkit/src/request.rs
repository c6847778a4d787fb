//! What the mock records about every request it receives.

use serde_json::Value;

/// The wire format a request was made in, decided by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireFormat {
    /// `POST …/chat/completions` (and `GET …/models`).
    OpenAi,
    /// `POST …/messages`.
    Anthropic,
}

/// One HTTP request as the mock received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// 0-based arrival order.
    pub index: usize,
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path without the query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// Headers in arrival order; names are lower-case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Value::Null` for an empty body, `Value::String` with the text when it is not JSON.
    pub body: Value,
    /// The body as text (lossy UTF-8).
    pub raw_body: String,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    ///
    /// ```
    /// # use nanobot_testkit::RecordedRequest;
    /// let req = RecordedRequest {
    ///     index: 0, method: "POST".into(), path: "/v1/messages".into(), query: None,
    ///     headers: vec![("x-api-key".into(), "k".into())], body: serde_json::Value::Null, raw_body: String::new(),
    /// };
    /// assert_eq!(req.header("X-Api-Key"), Some("k"));
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The wire format, from the path (`None` for other paths).
    pub fn format(&self) -> Option<WireFormat> {
        if self.path.ends_with("/chat/completions") || self.path.ends_with("/models") {
            Some(WireFormat::OpenAi)
        } else if self.path.ends_with("/messages") {
            Some(WireFormat::Anthropic)
        } else {
            None
        }
    }

    /// The body's `model` field.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// Whether the body asked for streaming (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The body's `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The body's `tools` array (empty if absent).
    pub fn tools(&self) -> &[Value] {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Names of the offered tools, for either format (`tools[].function.name` or `tools[].name`).
    pub fn tool_names(&self) -> Vec<String> {
        self.tools()
            .iter()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The system prompt as text: OpenAI `system` messages joined, or Anthropic's top-level `system`
    /// (a string or text blocks).
    pub fn system_text(&self) -> Option<String> {
        if let Some(system) = self.body.get("system") {
            return Some(text_of(system));
        }
        let parts: Vec<String> = self
            .messages()
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .filter_map(|m| m.get("content").map(text_of))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n"))
    }

    /// Role of the last message (`"user"`, `"assistant"`, `"tool"`, …).
    pub fn last_role(&self) -> Option<&str> {
        self.messages().last()?.get("role")?.as_str()
    }

    /// Whether the last message carries tool results: OpenAI role `tool`, or an Anthropic `user` message
    /// with `tool_result` blocks. True on the follow-up requests of a tool loop.
    pub fn ends_with_tool_result(&self) -> bool {
        self.messages().last().is_some_and(|m| {
            m.get("role").and_then(Value::as_str) == Some("tool")
                || m.get("content").and_then(Value::as_array).is_some_and(|blocks| {
                    blocks
                        .iter()
                        .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                })
        })
    }

    /// Every tool result in the conversation, in order, for either format.
    pub fn tool_results(&self) -> Vec<SentToolResult> {
        let mut out = Vec::new();
        for m in self.messages() {
            if m.get("role").and_then(Value::as_str) == Some("tool") {
                out.push(SentToolResult {
                    call_id: str_field(m, "tool_call_id"),
                    content: m.get("content").map(text_of).unwrap_or_default(),
                    is_error: false,
                });
            } else if let Some(blocks) = m.get("content").and_then(Value::as_array) {
                for b in blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                {
                    out.push(SentToolResult {
                        call_id: str_field(b, "tool_use_id"),
                        content: b.get("content").map(text_of).unwrap_or_default(),
                        is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                    });
                }
            }
        }
        out
    }

    /// Text of the last `user` message that has text (string content or `text` parts/blocks). Anthropic user
    /// messages that carry only `tool_result` blocks are skipped.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|m| m.get("content"))
            .map(text_of)
            .find(|t| !t.is_empty())
    }
}

/// A tool result the client sent back to the model, in either format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentToolResult {
    /// OpenAI `tool_call_id` / Anthropic `tool_use_id`.
    pub call_id: String,
    /// The result as text (string content, or the text parts joined with newlines).
    pub content: String,
    /// Anthropic `is_error` (always `false` for OpenAI).
    pub is_error: bool,
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Text of a message content: a string, or the `text` of its `text` parts joined with newlines.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(body: Value) -> RecordedRequest {
        RecordedRequest {
            index: 0,
            method: "POST".into(),
            path: "/v1/messages".into(),
            query: None,
            headers: Vec::new(),
            raw_body: body.to_string(),
            body,
        }
    }

    #[test]
    fn last_user_text_skips_tool_results() {
        let r = req(json!({"system": [{"type":"text","text":"sys"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "please be slow"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "a", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        ]}));
        assert_eq!(r.last_user_text().as_deref(), Some("please be slow"));
        assert_eq!(r.system_text().as_deref(), Some("sys"));
        assert_eq!(r.format(), Some(WireFormat::Anthropic));
        assert!(r.ends_with_tool_result());
        assert_eq!(r.last_role(), Some("user"));
        assert_eq!(
            r.tool_results(),
            vec![SentToolResult {
                call_id: "t".into(),
                content: "ok".into(),
                is_error: false
            }]
        );
    }

    #[test]
    fn openai_system_and_tools() {
        let r = req(
            json!({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "read_file"}}]}),
        );
        assert_eq!(r.system_text().as_deref(), Some("S"));
        assert_eq!(r.last_user_text().as_deref(), Some("hi"));
        assert_eq!(r.tool_names(), vec!["read_file".to_owned()]);
        assert!(!r.ends_with_tool_result());
        let t = req(json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1"}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "res"}]},
        ]}));
        assert!(t.ends_with_tool_result());
        assert_eq!(t.tool_results()[0].call_id, "c1");
        assert_eq!(t.tool_results()[0].content, "res");
    }
}
