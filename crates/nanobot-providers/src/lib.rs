//! How nanobot talks to language models.
//!
//! This crate owns the conversation types ([`ChatMessage`], [`ToolCall`], [`ToolSpec`], [`Usage`],
//! [`StreamEvent`]), the object-safe [`Provider`] trait with its single streaming method, the typed
//! [`ProviderError`], lenient tool-argument JSON, and the shared HTTP client set-up ([`install_ring`],
//! [`http_client`]). It knows nothing about tools beyond [`ToolSpec`], sessions, channels or the agent loop,
//! and never reads the process environment: keys and environment maps are passed in.
//!
//! ```
//! use nanobot_providers::{ChatMessage, ToolCall};
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

mod error;
mod http;
pub mod json;
mod provider;
mod types;

pub use error::{BoxError, ProviderError, parse_retry_after};
pub use http::{http_client, http_client_builder, install_ring};
pub use provider::{EventStream, Provider, ResponseAccumulator, collect, response_events};
pub use types::{
    ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, FinishReason, StreamEvent, Timeouts,
    ToolCall, ToolChoice, ToolSpec, Usage,
};
