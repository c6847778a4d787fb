//! The bottom floor of nanobot: the conversation types everyone shares, and the contract of a model call.
//!
//! **Owns:** the conversation types ([`ChatMessage`], [`Content`], [`ToolCall`], [`ToolSpec`], [`Usage`],
//! [`StreamEvent`], [`ChatRequest`], [`ChatResponse`]) with their wire format (the OpenAI chat-completions
//! shape the Python nanobot 0.3.5 writes to its session files and sends to providers), lenient tool-argument
//! [`json`], the object-safe [`Provider`] trait with its one stream collector, the typed [`ProviderError`], and
//! the [`ApprovalPolicy`] that says when a tool call waits for the user (one type for the config that reads it
//! and the core that applies it).
//!
//! **Must not know:** HTTP clients, configuration, tools beyond [`ToolSpec`] and [`ApprovalPolicy`], sessions,
//! channels. Tools,
//! sessions, memory and MCP depend on this crate instead of `nanobot-providers`, so none of them pulls in an
//! HTTP client; `nanobot-providers` implements [`Provider`] and re-exports everything here at its old paths.
//!
//! ```
//! use nanobot_types::{ChatMessage, ToolCall};
//! use serde_json::json;
//!
//! // Session-file lines parse (unknown keys such as `timestamp` are ignored) ...
//! let line = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
//!     "function":{"name":"read_file","arguments":"{\"path\": \"a.txt\"}"}}],"timestamp":"t"}"#;
//! let msg: ChatMessage = serde_json::from_str(line).unwrap();
//! assert_eq!(msg.tool_calls()[0], ToolCall::new("c1", "read_file", json!({"path": "a.txt"})));
//! // ... and serialise back to the OpenAI shape, arguments as a JSON string.
//! let back = serde_json::to_value(&msg).unwrap();
//! assert_eq!(back["tool_calls"][0]["function"]["arguments"], "{\"path\": \"a.txt\"}");
//! ```

mod approval;
mod error;
pub mod json;
pub mod json_limits;
mod message;
mod provider;

pub use approval::ApprovalPolicy;
pub use error::{BoxError, ProviderError, WEB_PAGE_ANSWER, WaitKind};
pub use message::{
    ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, FinishReason, StreamEvent, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
pub use provider::{EventStream, Provider, ResponseAccumulator, collect, response_events};
