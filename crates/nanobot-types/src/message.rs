//! Conversation types shared by every provider.
//!
//! They serialise to exactly the OpenAI chat-completions message shape that the Python nanobot stores in its
//! session files: tool-call `arguments` are a JSON *string* on the wire and in files, and parsed [`Value`]s in
//! memory. Unknown keys (`timestamp`, `latency_ms`, …) are ignored on deserialisation.

use std::fmt;
use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::json::{ParsedArguments, parse_arguments, to_python_json};

/// A tool as a model sees it: a name, what it does, and the JSON Schema of its arguments.
///
/// This is all a provider ever learns about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`read_file`, `mcp_github_search`).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema (an `object` schema) of the arguments.
    pub parameters: Value,
}

/// One part of a multi-part message content (text or an image).
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    /// `{"type":"text","text":…}`
    Text {
        /// The text.
        text: String,
    },
    /// `{"type":"image_url","image_url":{"url":…}}`; the URL may be a `data:` URL.
    ImageUrl {
        /// `http(s)://…` or `data:image/png;base64,…`.
        url: String,
        /// Optional `detail` hint (`low`, `high`, `auto`).
        detail: Option<String>,
    },
    /// Any other part, kept verbatim so nothing is lost on a round trip.
    Other(Value),
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image part from a URL (`https://…` or `data:…`).
    pub fn image_url(url: impl Into<String>) -> Self {
        Self::ImageUrl {
            url: url.into(),
            detail: None,
        }
    }
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text { text } => json!({"type": "text", "text": text}).serialize(s),
            Self::ImageUrl { url, detail } => {
                let mut image = Map::new();
                image.insert("url".into(), Value::String(url.clone()));
                if let Some(d) = detail {
                    image.insert("detail".into(), Value::String(d.clone()));
                }
                json!({"type": "image_url", "image_url": image}).serialize(s)
            }
            Self::Other(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.get("type").and_then(Value::as_str) {
            Some("text") => match v.get("text").and_then(Value::as_str) {
                Some(t) => Ok(Self::Text { text: t.to_owned() }),
                None => Ok(Self::Other(v)),
            },
            Some("image_url") => {
                let image = v.get("image_url");
                let url = image.and_then(|i| i.get("url").and_then(Value::as_str).or_else(|| i.as_str()));
                match url {
                    Some(url) => Ok(Self::ImageUrl {
                        url: url.to_owned(),
                        detail: image
                            .and_then(|i| i.get("detail"))
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    }),
                    None => Ok(Self::Other(v)),
                }
            }
            _ => Ok(Self::Other(v)),
        }
    }
}

/// Message content: a plain string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string (the common case).
    Text(String),
    /// Multi-part content (text and images).
    Parts(Vec<ContentPart>),
}

impl Content {
    /// All text of the content, parts joined by a newline; images are skipped.
    pub fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// True when there is no text and no non-text part.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Text(t) => t.is_empty(),
            Self::Parts(parts) => parts
                .iter()
                .all(|p| matches!(p, ContentPart::Text { text } if text.is_empty())),
        }
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Self::Text(s)
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Self::Text(s.to_owned())
    }
}

impl Default for Content {
    fn default() -> Self {
        Self::Text(String::new())
    }
}

fn content_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
    Ok(Option::<Content>::deserialize(d)?.unwrap_or_default())
}

/// A tool call the model asked for. `arguments` are parsed JSON in memory and a JSON string on the wire.
///
/// Arguments that were not valid JSON are repaired leniently; when even that fails, `arguments` holds the raw
/// text as a JSON string and [`ToolCall::arguments_error`] says why — the runner should answer the model with a
/// tool error instead of running the tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The id the model gave the call (`call_…`, `toolu_…`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The parsed arguments (an object, normally).
    pub arguments: Value,
    /// Set when the arguments could not be parsed even leniently; `arguments` is then the raw string.
    pub arguments_error: Option<String>,
}

impl ToolCall {
    /// A tool call with already-parsed arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            arguments_error: None,
        }
    }

    /// A tool call from raw argument text as a model wrote it, repaired leniently when needed.
    pub fn from_raw(id: impl Into<String>, name: impl Into<String>, raw_arguments: &str) -> Self {
        let (arguments, arguments_error) = match parse_arguments(raw_arguments) {
            ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => (v, None),
            ParsedArguments::Invalid(e) => (Value::String(raw_arguments.to_owned()), Some(e)),
        };
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            arguments_error,
        }
    }

    /// The arguments as the JSON string that goes on the wire (Python `json.dumps` style, non-ASCII kept).
    /// Unparseable arguments are written back exactly as the model sent them.
    pub fn arguments_json(&self) -> String {
        match (&self.arguments_error, &self.arguments) {
            (Some(_), Value::String(raw)) => raw.clone(),
            (_, v) => to_python_json(v),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunction,
}

fn function_type() -> String {
    "function".to_owned()
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireToolCall {
            id: self.id.clone(),
            kind: function_type(),
            function: WireFunction {
                name: self.name.clone(),
                arguments: Value::String(self.arguments_json()),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireToolCall::deserialize(d)?;
        match w.function.arguments {
            Value::String(raw) => Ok(Self::from_raw(w.id, w.function.name, &raw)),
            Value::Null => Ok(Self::new(w.id, w.function.name, Value::Object(Map::new()))),
            Value::Object(o) => Ok(Self::new(w.id, w.function.name, Value::Object(o))),
            other => Err(D::Error::custom(format!(
                "tool call `{}`: `function.arguments` must be a JSON string or object, got {other}",
                w.function.name
            ))),
        }
    }
}

/// One message of a conversation, in the OpenAI chat-completions shape (tagged by `role`).
///
/// Read from JSON by its `role` first, then that role's fields ([`ChatMessage::from_json_map`]); unknown fields
/// (a stored message's `timestamp`, say) are ignored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// The system prompt.
    System {
        /// Prompt text (or parts).
        content: Content,
    },
    /// What the user said: text, or text and images.
    User {
        /// Text or parts.
        content: Content,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text; `None` (JSON `null`) when the model only called tools. The key is always written.
        /// (A list of parts in a file is read as its joined text.)
        content: Option<String>,
        /// Tool calls the model made (omitted when empty).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Reasoning / chain of thought (DeepSeek-R1, Kimi, Qwen…), kept for providers that need it back.
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
        /// Anthropic thinking blocks (with signatures), kept verbatim to send back in the same turn.
        #[serde(skip_serializing_if = "Option::is_none")]
        thinking_blocks: Option<Vec<Value>>,
    },
    /// The result of a tool call.
    Tool {
        /// Which call this answers.
        tool_call_id: String,
        /// The tool's name (Python nanobot writes it).
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The result text (or parts).
        content: Content,
    },
}

/// The fields of a system or user message (the role read before).
#[derive(Deserialize)]
struct TextFields {
    #[serde(deserialize_with = "content_or_empty", default)]
    content: Content,
}

/// The fields of an assistant message.
#[derive(Deserialize)]
struct AssistantFields {
    #[serde(default, deserialize_with = "opt_text")]
    content: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty_vec")]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    thinking_blocks: Option<Vec<Value>>,
}

/// The fields of a tool result.
#[derive(Deserialize)]
struct ToolFields {
    tool_call_id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(deserialize_with = "content_or_empty", default)]
    content: Content,
}

/// The roles a message may have.
const ROLES: &[&str] = &["system", "user", "assistant", "tool"];

impl<'de> Deserialize<'de> for ChatMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Self::from_json_map(&map).map_err(D::Error::custom)
    }
}

fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Content>::deserialize(d)? {
        None => None,
        Some(Content::Text(t)) => Some(t),
        Some(parts) => Some(parts.text()),
    })
}

fn null_as_empty_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ToolCall>, D::Error> {
    Ok(Option::<Vec<ToolCall>>::deserialize(d)?.unwrap_or_default())
}

impl ChatMessage {
    /// Reads a message from a JSON object (a stored session line, a request's message) where it is, without
    /// copying it first: its `role`, then that role's fields.
    ///
    /// ```
    /// use nanobot_types::ChatMessage;
    /// let line = serde_json::json!({"role": "user", "content": "hi", "timestamp": "2026-01-01T10:00:00"});
    /// let m = ChatMessage::from_json_map(line.as_object().unwrap()).unwrap();
    /// assert_eq!(m, ChatMessage::user("hi"));
    /// let err = ChatMessage::from_json_map(serde_json::json!({"role": "robot"}).as_object().unwrap());
    /// assert!(err.unwrap_err().to_string().contains("unknown variant `robot`"));
    /// ```
    pub fn from_json_map(map: &Map<String, Value>) -> Result<Self, serde_json::Error> {
        // `role` comes first in what every writer writes: found there without hashing the key.
        let role = match map
            .iter()
            .next()
            .filter(|(k, _)| *k == "role")
            .map(|(_, v)| v)
            .or_else(|| map.get("role"))
        {
            Some(Value::String(role)) => role.as_str(),
            Some(other) => {
                return Err(serde_json::Error::custom(format!(
                    "`role` must be a string, got {other}"
                )));
            }
            None => return Err(serde_json::Error::missing_field("role")),
        };
        Ok(match role {
            "system" => Self::System {
                content: TextFields::deserialize(map)?.content,
            },
            "user" => Self::User {
                content: TextFields::deserialize(map)?.content,
            },
            "assistant" => {
                let f = AssistantFields::deserialize(map)?;
                Self::Assistant {
                    content: f.content,
                    tool_calls: f.tool_calls,
                    reasoning_content: f.reasoning_content,
                    thinking_blocks: f.thinking_blocks,
                }
            }
            "tool" => {
                let f = ToolFields::deserialize(map)?;
                Self::Tool {
                    tool_call_id: f.tool_call_id,
                    name: f.name,
                    content: f.content,
                }
            }
            other => return Err(serde_json::Error::unknown_variant(other, ROLES)),
        })
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::System {
            content: Content::Text(text.into()),
        }
    }

    /// A plain-text user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User {
            content: Content::Text(text.into()),
        }
    }

    /// A user message with several parts (text and images).
    pub fn user_parts(parts: Vec<ContentPart>) -> Self {
        Self::User {
            content: Content::Parts(parts),
        }
    }

    /// A plain-text assistant answer.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::Assistant {
            content: Some(text.into()),
            tool_calls: Vec::new(),
            reasoning_content: None,
            thinking_blocks: None,
        }
    }

    /// An assistant message that calls tools (with optional text).
    pub fn assistant_tool_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self::Assistant {
            content,
            tool_calls,
            reasoning_content: None,
            thinking_blocks: None,
        }
    }

    /// A tool result.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            name: Some(name.into()),
            content: Content::Text(content.into()),
        }
    }

    /// The role as written on the wire (`system`, `user`, `assistant`, `tool`).
    pub fn role(&self) -> &'static str {
        match self {
            Self::System { .. } => "system",
            Self::User { .. } => "user",
            Self::Assistant { .. } => "assistant",
            Self::Tool { .. } => "tool",
        }
    }

    /// The message's text (parts joined; empty for a tool-call-only assistant message).
    pub fn text(&self) -> String {
        match self {
            Self::System { content } | Self::User { content } | Self::Tool { content, .. } => content.text(),
            Self::Assistant { content, .. } => content.clone().unwrap_or_default(),
        }
    }

    /// The tool calls of an assistant message (empty otherwise).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// Token usage reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Total (input + output) as reported, or the sum.
    pub total_tokens: u64,
    /// Input tokens served from the prompt cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the prompt cache, when reported (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Output tokens spent on reasoning (part of `completion_tokens`), when reported (OpenAI's
    /// `completion_tokens_details.reasoning_tokens`, the Responses API's `output_tokens_details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// Why the model stopped. Providers add reasons, so matches need a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end (`stop`, `end_turn`).
    #[default]
    Stop,
    /// The model called tools (`tool_calls`, `tool_use`).
    ToolCalls,
    /// Hit the output-token limit (`length`, `max_tokens`).
    Length,
    /// Filtered by the provider.
    ContentFilter,
    /// Anything else, verbatim.
    Other(String),
}

impl FinishReason {
    /// Maps an OpenAI `finish_reason` or Anthropic `stop_reason` string.
    pub fn from_wire(s: &str) -> Self {
        match s {
            "stop" | "end_turn" | "stop_sequence" | "eos" => Self::Stop,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "length" | "max_tokens" | "model_context_window_exceeded" => Self::Length,
            "content_filter" | "refusal" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The OpenAI spelling (`stop`, `tool_calls`, `length`, `content_filter`, or the verbatim value).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
            Self::ContentFilter => "content_filter",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the model may use the tools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides (what nanobot sends whenever tools are given).
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This named tool.
    Tool(String),
}

/// Everything a provider needs for one model call.
///
/// The conversation and the tools are shared, not owned: a clone (a retry, the next model of a fallback chain)
/// copies pointers, not the history and the tools' schemas. Build them from a `Vec` with `.into()`
/// ([`ChatRequest::new`], [`ChatRequest::with_tools`] do); change a shared list with [`Arc::make_mut`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The model name as configured (provider prefixes are handled by the provider).
    pub model: String,
    /// The conversation.
    pub messages: Arc<Vec<ChatMessage>>,
    /// Tools offered (empty: none).
    pub tools: Vec<Arc<ToolSpec>>,
    /// Output-token limit.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// `low` / `medium` / `high` for reasoning models (Anthropic: thinking budget).
    pub reasoning_effort: Option<String>,
    /// Tool choice; `None` means `auto` when tools are given.
    pub tool_choice: Option<ToolChoice>,
}

impl ChatRequest {
    /// A request for `model` with these messages and nothing else set.
    pub fn new(model: impl Into<String>, messages: impl Into<Arc<Vec<ChatMessage>>>) -> Self {
        Self {
            model: model.into(),
            messages: messages.into(),
            ..Self::default()
        }
    }

    /// Sets the tools (specs, or shared specs as a registry hands them out).
    pub fn with_tools<T: Into<Arc<ToolSpec>>>(mut self, tools: impl IntoIterator<Item = T>) -> Self {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the output-token limit.
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, t: f64) -> Self {
        self.temperature = Some(t);
        self
    }
}

/// A complete (collected) model answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    /// The answer text, if any.
    pub content: Option<String>,
    /// Tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// Token usage, when the provider reported it.
    pub usage: Option<Usage>,
    /// Reasoning text, when the model produced any.
    pub reasoning_content: Option<String>,
    /// Anthropic thinking blocks (verbatim, with signatures).
    pub thinking_blocks: Option<Vec<Value>>,
}

impl ChatResponse {
    /// True when the model asked for at least one tool call.
    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }

    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            reasoning_content: self.reasoning_content.clone(),
            thinking_blocks: self.thinking_blocks.clone(),
        }
    }
}

/// One event of a streamed answer. The collector ([`crate::ResponseAccumulator`]) turns them into a
/// [`ChatResponse`]. Providers stream new kinds of event, so matches need a `_` arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// More answer text.
    TextDelta(String),
    /// More reasoning text.
    ReasoningDelta(String),
    /// A piece of a tool call. Pieces with the same `index` belong together: `id` and `name` are set (never
    /// concatenated) when present, `arguments` pieces are appended.
    ToolCallDelta {
        /// Position of the call in this answer.
        index: usize,
        /// The call id, when this piece carries it.
        id: Option<String>,
        /// The tool name, when this piece carries it.
        name: Option<String>,
        /// A piece of the JSON argument text.
        arguments: String,
    },
    /// A complete Anthropic thinking block (kept to send back).
    ThinkingBlock(Value),
    /// Token usage.
    Usage(Usage),
    /// The model finished.
    Done(FinishReason),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_session_lines_round_trip() {
        let line = r#"{"role": "assistant", "content": "", "tool_calls": [{"id": "call_0_1", "type": "function", "function": {"name": "exec", "arguments": "{\"command\": \"rm -rf /home/user/nonexistent\"}"}}], "timestamp": "2026-11-22T04:40:08.094296"}"#;
        let m: ChatMessage = serde_json::from_str(line).unwrap();
        let calls = m.tool_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            calls[0].arguments,
            json!({"command": "rm -rf /home/user/nonexistent"})
        );
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(
            back,
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0_1", "type": "function",
                "function": {"name": "exec", "arguments": "{\"command\": \"rm -rf /home/user/nonexistent\"}"}}]})
        );
        let tool = r#"{"role": "tool", "tool_call_id": "call_0_1", "name": "exec", "content": "\nExit code: 0", "timestamp": "x"}"#;
        let t: ChatMessage = serde_json::from_str(tool).unwrap();
        assert_eq!(t, ChatMessage::tool_result("call_0_1", "exec", "\nExit code: 0"));
    }

    #[test]
    fn assistant_content_key_always_present() {
        let m = ChatMessage::assistant_tool_calls(None, vec![ToolCall::new("c", "t", json!({"a": 1}))]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["content"], Value::Null);
        assert_eq!(v["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
    }

    #[test]
    fn unrepairable_arguments_are_kept_raw_and_marked() {
        let c = ToolCall::from_raw("c", "t", "");
        assert_eq!(c.arguments, json!({}));
        let bad = ToolCall::from_raw("c", "t", "not json at all ]]");
        assert!(bad.arguments_error.is_some());
        assert_eq!(bad.arguments_json(), "not json at all ]]");
        let wire = serde_json::to_value(&bad).unwrap();
        assert_eq!(wire["function"]["arguments"], "not json at all ]]");
    }

    #[test]
    fn assistant_parts_and_nulls_are_tolerated() {
        let m: ChatMessage = serde_json::from_str(
            r#"{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_calls":null}"#,
        )
        .unwrap();
        assert_eq!(m, ChatMessage::assistant("a\nb"));
        let u: ChatMessage = serde_json::from_str(r#"{"role":"user","content":null}"#).unwrap();
        assert_eq!(u, ChatMessage::user(""));
    }

    #[test]
    fn a_message_is_read_by_its_role_wherever_the_role_is_and_bad_ones_are_named() {
        // The role after the other fields (another writer's order): the same message.
        let late: ChatMessage =
            serde_json::from_str(r#"{"content":"hi","timestamp":"t","role":"user"}"#).unwrap();
        assert_eq!(late, ChatMessage::user("hi"));
        let map = json!({"tool_call_id": "c1", "content": "ok", "role": "tool"});
        assert_eq!(
            ChatMessage::from_json_map(map.as_object().unwrap()).unwrap(),
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                name: None,
                content: Content::Text("ok".into()),
            }
        );
        let err = |text: &str| serde_json::from_str::<ChatMessage>(text).unwrap_err().to_string();
        assert!(err(r#"{"content":"hi"}"#).contains("missing field `role`"));
        assert!(err(r#"{"role":7,"content":"hi"}"#).contains("`role` must be a string"));
        assert!(err(r#"{"role":"robot"}"#).contains("unknown variant `robot`"));
        assert!(err(r#"{"role":"tool","content":"x"}"#).contains("missing field `tool_call_id`"));
        assert!(err(r#"[1, 2]"#).contains("invalid type"));
        // The same through a stored object as through text.
        for line in [
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{}"}}],"reasoning_content":"r"}"#,
            r#"{"role":"system","content":[{"type":"text","text":"s"}]}"#,
            r#"{"role":"user"}"#,
        ] {
            let v: Value = serde_json::from_str(line).unwrap();
            let from_map = ChatMessage::from_json_map(v.as_object().unwrap()).unwrap();
            assert_eq!(
                from_map,
                serde_json::from_str::<ChatMessage>(line).unwrap(),
                "{line}"
            );
        }
    }

    #[test]
    fn image_parts_round_trip() {
        let m = ChatMessage::user_parts(vec![
            ContentPart::text("look"),
            ContentPart::image_url("data:image/png;base64,AA"),
        ]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["content"][1],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}})
        );
        let back: ChatMessage = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }
}
