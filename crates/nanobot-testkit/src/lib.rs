//! Dev-only test helpers for nanobot-rs.
//!
//! **Owns:** [`MockLlm`], a scripted LLM served over real HTTP on `127.0.0.1:<random port>` that speaks the
//! OpenAI chat-completions format (JSON and SSE, tool calls split across chunks, `reasoning_content`,
//! `stream_options.include_usage`) and the Anthropic Messages format (JSON and streaming events, `tool_use`
//! and `thinking` blocks), with injectable faults (429 + `Retry-After`, 500, dropped connections, stalled
//! streams, delays) and a record of every request.
//!
//! Also: [`TempHome`] (a temporary HOME with `.nanobot/` and a workspace, never touching the process
//! environment) and [`peers`] (finding real peer programs under `.ci/.peers/`, the skip-or-fail rule,
//! [`peers::ChildGuard`], readiness waits), [`telegram_emulator`] (the Telegram Bot API emulator behind a proxy
//! that makes it answer like Telegram), fakes of the Feishu, DingTalk and QQ servers, a OneBot v11 (NapCat) fake
//! ([`fake_onebot`]), a Mattermost server fake (REST API v4 and its WebSocket, [`fake_mattermost`]), the Microsoft
//! services a Teams bot talks to (Bot Framework keys and tokens, Azure AD, the Bot Connector: [`fake_msteams`]), a
//! signal-cli daemon in HTTP mode (JSON-RPC, its event stream, attachments on disk: [`fake_signal`]), WeCom's
//! AI-bot long-connection server (subscribe, heartbeats, callbacks, streamed replies, uploads, encrypted media:
//! [`fake_wecom`]), personal WeChat's iLink bot API and media CDN (QR login, long poll, sends, AES-128-ECB media:
//! [`fake_weixin`]), a
//! [`file_server`] for code that fetches remote files, [`host_echo`] for what may leave a sandbox, an OpenTelemetry collector's traces endpoint ([`otlp`]), fake OAuth servers ([`fake_oauth`]: GitHub's device flow
//! and Copilot token exchange), a real Matrix homeserver (synapse from the peers, SQLite in a temp dir, started
//! once per test binary: [`synapse`]), and [`secrets`] (proof that
//! no secret leaves an adapter).
//!
//! **Must not know:** any nanobot crate. It is a `[dev-dependencies]` entry only; point the real clients at it.
//!
//! # Example
//!
//! ```
//! use nanobot_testkit::{MockLlm, MockReply};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
//! nanobot_testkit::install_ring();
//! let mock = MockLlm::start().await;
//! mock.push(MockReply::tool_call("read_file", json!({"path": "a.txt"})));
//! mock.push(MockReply::text("Done."));
//!
//! let client = reqwest::Client::new();
//! let url = format!("{}/chat/completions", mock.openai_base_url());
//! let body = json!({"model": "m", "messages": [{"role": "user", "content": "read a.txt"}]});
//! let first: serde_json::Value = client.post(&url).json(&body).send().await?.json().await?;
//! assert_eq!(first["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
//! assert_eq!(first["choices"][0]["finish_reason"], "tool_calls");
//!
//! let second: serde_json::Value = client.post(&url).json(&body).send().await?.json().await?;
//! assert_eq!(second["choices"][0]["message"]["content"], "Done.");
//! assert_eq!(mock.requests()[0].last_user_text().as_deref(), Some("read a.txt"));
//!
//! // Nothing scripted any more: the default fallback is a loud HTTP 500.
//! let third = client.post(&url).json(&body).send().await?;
//! assert_eq!(third.status(), 500);
//! # Ok(()) }
//! ```
//!
//! # Replies
//!
//! | builder | OpenAI | Anthropic |
//! |---|---|---|
//! | [`MockReply::text`] | `message.content` / `delta.content` pieces | `text` block / `text_delta` |
//! | [`MockReply::tool_call`], [`MockReply::tool_calls`], [`MockReply::raw_arguments`] | `tool_calls[]`, arguments split by `index` | `tool_use` block / `input_json_delta` |
//! | [`MockReply::with_reasoning`] | `reasoning_content` | `thinking` block (+ `signature_delta`) |
//! | [`MockReply::error`] (+ [`MockReply::retry_after_secs`]) | `{"error":{message,type,param,code}}` | `{"type":"error","error":{type,message}}` |
//! | [`MockReply::drop_connection`] | socket closed, no answer | same |
//! | [`MockReply::empty_stream`] | `data: [DONE]` only | no events |
//!
//! Streaming is chosen by the request's `"stream": true`. Text and arguments are split into several chunks
//! (up to 4 by default, [`MockReply::chunk_chars`] to change). Tool-call ids default to `call_1`, `call_2`, …
//! counted per mock across both formats.
//!
//! # Faults
//!
//! [`MockReply::stall_after_chunks`] sends `n` content deltas and then hangs; [`MockReply::drop_after_chunks`]
//! aborts the connection after `n` deltas; [`MockReply::error_event_after_chunks`] ends the stream with an
//! in-stream error event after `n` deltas; [`MockReply::delay`] waits (tokio time) before answering. To
//! test "nothing more arrives", use `#[tokio::test(start_paused = true)]` with `tokio::time::timeout`.
//!
//! [`MockLlm::cancelled`] / [`MockLlm::wait_for_cancelled`] tell which requests the client abandoned before
//! the answer was complete (e.g. `/stop` during a `delay` or a stalled stream).
//!
//! # Choosing a reply
//!
//! Rules first ([`MockLlm::when_last_user_contains`], [`MockLlm::when`]; `_once` variants are consumed), then
//! the FIFO script ([`MockLlm::push`]), then the fallback ([`MockLlm::set_fallback`], default HTTP 500 with
//! [`NO_REPLY_LEFT`]). `GET /v1/models` answers a fixed list and consumes nothing.
//!
//! # Runtimes
//!
//! [`MockLlm::start`] serves on the caller's tokio runtime (so `start_paused` clocks apply to delays); share
//! it between tasks with `Arc<MockLlm>`. When the test thread blocks (e.g. `std::process::Command::output()`
//! on a nanobot binary), use [`MockLlm::start_background`], which has its own runtime thread.
//! [`MockLlm::nanobot_config`] gives the `config.json` fragment that points nanobot at the mock.

mod anthropic;
pub mod fake_dingtalk;
pub mod fake_feishu;
pub mod fake_mattermost;
// Fake Microsoft Teams / Bot Framework services (docs in the module: a `///` here would break their links).
pub mod fake_msteams;
pub mod fake_oauth;
pub mod fake_onebot;
pub mod fake_qq;
// A fake signal-cli daemon (HTTP JSON-RPC and SSE events) for the Signal channel's tests.
pub mod fake_signal;
// A fake WeCom AI-bot long-connection server (WebSocket frames, uploads, AES-encrypted media) for the WeCom channel.
pub mod fake_wecom;
// A fake of personal WeChat's iLink bot API (QR login, long poll, sends, typing) and its AES-128-ECB media CDN.
pub mod fake_weixin;
pub mod file_server;
mod home;
pub mod host_echo;
mod mock;
mod openai;
mod render;
mod reply;
mod request;

pub mod nats;
pub mod otlp;
pub mod peers;
pub mod secrets;
pub mod sse;
// A real Matrix homeserver (matrix-synapse from .ci/.peers/synapse-venv) and a client-server API client for it.
pub mod synapse;
pub mod telegram_emulator;
mod wait;

pub use home::TempHome;
pub use mock::{MockLlm, NO_REPLY_LEFT};
pub use reply::{MockReply, ToolCallSpec};
pub use request::{RecordedRequest, SentToolResult, WireFormat};

/// Installs rustls' ring crypto provider as the process default (needed before building a reqwest 0.13
/// client). Safe to call any number of times.
pub fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
