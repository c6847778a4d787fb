//! [`SessionMessage`]: one stored message, kept as the JSON object it was read as.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time;

/// One message of a session: an OpenAI-style chat message plus whatever else the writer stored
/// (`timestamp`, `latency_ms`, `_command`, `tools_used`, fields of future versions…).
///
/// It is kept as the JSON object it was read as, so unknown fields survive a load → save round trip untouched;
/// the accessors read the well-known ones. The agent core converts it to its typed chat message with serde.
///
/// ```
/// use nanobot_sessions::SessionMessage;
///
/// let m = SessionMessage::new("user", "hello").with("_command", true);
/// assert_eq!(m.role(), Some("user"));
/// assert_eq!(m.content_text().as_deref(), Some("hello"));
/// assert!(m.timestamp().is_some());
/// assert_eq!(m.get("_command"), Some(&serde_json::json!(true)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionMessage(Map<String, Value>);

impl SessionMessage {
    /// A message with `role`, `content` and a `timestamp` of now (local time, as the Python nanobot writes it).
    pub fn new(role: &str, content: impl Into<Value>) -> Self {
        let mut map = Map::new();
        map.insert("role".into(), Value::String(role.to_owned()));
        map.insert("content".into(), content.into());
        map.insert("timestamp".into(), Value::String(time::format(time::now())));
        Self(map)
    }

    /// Wraps a JSON object as it is.
    pub fn from_map(map: Map<String, Value>) -> Self {
        Self(map)
    }

    /// The JSON object, consumed.
    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }

    /// The JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The JSON object, mutable.
    pub fn as_map_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.0
    }

    /// Sets a field and returns the message (builder style).
    #[must_use]
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    /// Any field by name.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// `role`: `user`, `assistant`, `tool`, `system`; `None` if missing or not a string.
    pub fn role(&self) -> Option<&str> {
        // Every writer (0.3.5, this crate, the API) puts `role` first: found there without hashing the key, which
        // matters because a turn asks it of every message of the history window several times.
        match self.0.iter().next() {
            Some((k, v)) if k == "role" => v.as_str(),
            _ => self.0.get("role").and_then(Value::as_str),
        }
    }

    /// `content` as stored: a string, an array of content parts, or `null`.
    pub fn content(&self) -> Option<&Value> {
        self.0.get("content")
    }

    /// The text of `content`: the string itself, or the `text` parts of a content array joined by newlines.
    /// `None` when there is no text (missing, `null`, or only non-text parts).
    pub fn content_text(&self) -> Option<String> {
        match self.content()? {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| match p {
                        Value::String(s) => Some(s.as_str()),
                        Value::Object(o) => o.get("text").and_then(Value::as_str),
                        _ => None,
                    })
                    .collect();
                (!texts.is_empty()).then(|| texts.join("\n"))
            }
            _ => None,
        }
    }

    /// `tool_calls` of an assistant message, as stored (`None` if absent or not an array).
    pub fn tool_calls(&self) -> Option<&Vec<Value>> {
        self.0.get("tool_calls").and_then(Value::as_array)
    }

    /// The `id` of each tool call of an assistant message, in order (empty if there are none).
    pub fn tool_call_ids(&self) -> Vec<&str> {
        self.tool_calls()
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("id").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `tool_call_id` of a tool-result message.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.0.get("tool_call_id").and_then(Value::as_str)
    }

    /// `name` (the tool name on a tool result).
    pub fn name(&self) -> Option<&str> {
        self.0.get("name").and_then(Value::as_str)
    }

    /// `timestamp` as stored (ISO 8601, local time without offset when written by the Python nanobot).
    pub fn timestamp(&self) -> Option<&str> {
        self.0.get("timestamp").and_then(Value::as_str)
    }

    /// Whether the message records a slash command or its reply (`"_command": true`); those stay in the file
    /// but never reach the model.
    pub fn is_command(&self) -> bool {
        self.0.get("_command").and_then(Value::as_bool) == Some(true)
    }

    /// Adds `timestamp` (now) when the message has none.
    pub(crate) fn ensure_timestamp(&mut self) {
        if !self.0.contains_key("timestamp") {
            self.0
                .insert("timestamp".into(), Value::String(time::format(time::now())));
        }
    }

    /// Name of the function called by the tool call with this `id`, if this message carries it.
    pub(crate) fn tool_call_name(&self, id: &str) -> Option<&str> {
        self.tool_calls()?
            .iter()
            .find(|c| c.get("id").and_then(Value::as_str) == Some(id))?
            .get("function")?
            .get("name")?
            .as_str()
    }
}

impl From<Map<String, Value>> for SessionMessage {
    fn from(map: Map<String, Value>) -> Self {
        Self(map)
    }
}

impl From<SessionMessage> for Value {
    fn from(m: SessionMessage) -> Self {
        Value::Object(m.0)
    }
}
