//! How nanobot talks to language models.
//!
//! **Owns:** the provider [`registry`] (specs and model→provider matching), the OpenAI-compatible
//! ([`OpenAiCompatClient`]) and Anthropic ([`AnthropicClient`]) clients, retries and fallback models
//! ([`RetryingProvider`], [`FallbackProvider`]), lenient tool-argument [`json`], transcription
//! ([`Transcriber`]), the shared HTTP client set-up ([`install_ring`], [`http_client`]) and the OAuth-based
//! providers: GitHub Copilot ([`copilot`]), OpenAI Codex ([`codex`]) and xAI Grok ([`grok`]), the latter two on
//! the Responses API, with 0.3.5's token files ([`oauth`]).
//!
//! The conversation types ([`ChatMessage`], [`ToolCall`], [`ToolSpec`], [`Usage`], [`StreamEvent`]), the
//! [`Provider`] trait and [`ProviderError`] live one floor down in `nanobot-types` (so tools, sessions, memory
//! and MCP need no HTTP client) and are re-exported here at their old paths.
//!
//! **Must not know:** tools beyond [`ToolSpec`], sessions, channels, the agent loop. It never reads the process
//! environment: the environment is passed in as a map ([`ProviderFactory::new`]).
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
//!
//! Resolving a provider from configuration (the environment is a map, never read here):
//!
//! ```
//! use nanobot_providers::ProviderFactory;
//! use nanobot_util::EnvMap;
//!
//! let config = nanobot_config::Config::default();
//! let env = EnvMap::from_iter([("OPENROUTER_API_KEY", "sk-or-test")]);
//! let factory = ProviderFactory::new(&config.providers, &config.agents.defaults, env);
//! let resolved = factory.resolve("anthropic/claude-opus-4-5").unwrap();
//! assert_eq!(resolved.name, "openrouter"); // the only provider with a key
//! assert_eq!(resolved.wire_model, "anthropic/claude-opus-4-5");
//! assert!(!format!("{resolved:?}").contains("sk-or-test")); // keys never reach Debug/logs
//! ```

mod anthropic;
mod capabilities;
pub mod codex;
pub mod copilot;
mod diagnose;
mod endpoint;
mod error;
mod factory;
pub mod grok;
mod http;
pub mod oauth;
mod openai;
pub mod registry;
mod resilience;
mod responses;
pub mod shaping;
mod text_tool_calls;
mod text_tools;
mod transcribe;
mod types;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicClient, DEFAULT_MAX_TOKENS};
pub use capabilities::{Capabilities, StreamWithTools};
pub use endpoint::Endpoint;
pub use error::{from_reqwest, parse_retry_after};
pub use factory::{
    OPENAI_COMPAT_TIMEOUT_VAR, ProviderFactory, ResolvedProvider, STREAM_IDLE_TIMEOUT_VAR, resolve_provider,
};
pub use http::{
    http_client, http_client_builder, install_ring, shared_http_client, system_roots, system_roots_loaded,
    tls_config,
};
pub use nanobot_types::{
    BoxError, ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, EventStream, FinishReason,
    Provider, ProviderError, ResponseAccumulator, StreamEvent, ToolCall, ToolChoice, ToolSpec, Usage,
    WaitKind, collect, response_events,
};
pub use nanobot_types::{json, json_limits};
pub use openai::{EMPTY_CONTENT, OpenAiCompatClient};
pub use registry::{Backend, ProviderSpec};
/// The HTTP client library named by this crate's API ([`Endpoint::with_http`], [`http_client`],
/// [`from_reqwest`]), re-exported so an embedder can build or pass a client of exactly this version without
/// depending on reqwest itself.
pub use reqwest;
pub use resilience::{FallbackProvider, RetryPolicy, RetryingProvider, Sleeper, tokio_sleeper};
pub use text_tool_calls::contains_text_tool_call;
pub use transcribe::{Transcriber, WhisperTranscriber, transcriber_from_config};
pub use types::{Timeouts, display_endpoint, is_local_url};
