//! The `websocket` channel of nanobot and the WebUI it serves.
//!
//! [`WebSocketChannel`] implements [`nanobot_channels::Channel`]: a server (TCP, loopback by default, or a Unix
//! socket) that speaks nanobot 0.3.5's websocket protocol, so a client written for one works with the other. On
//! connect a client gets `{"event":"ready","chat_id":…,"client_id":…}`; it sends `message` envelopes (or plain
//! text) and receives the agent's answer as typed events: `delta` pieces closed by `stream_end`, `message` with
//! `kind` `tool_hint` or `progress` for the agent's breadcrumbs, and `message` for replies. Connections subscribe
//! to chats (`new_chat`, `attach`); every subscriber of a chat receives its events, no one else does. The full
//! protocol is in `docs/websocket.md`.
//!
//! The same listener serves the WebUI: a page written without a framework (HTML, CSS and JS built into the
//! binary, see [`ASSETS`]) under a strict content security policy ([`CONTENT_SECURITY_POLICY`]).
//!
//! Security: a non-loopback bind needs a credential ([`WebSocketSettings::from_config`] refuses it otherwise);
//! the upgrade checks `Origin` (a browser page of another site cannot connect), `Host` on loopback listeners
//! (DNS rebinding), `allowFrom` on the `client_id`, then the token (static `token`, or a one-time token issued
//! by `tokenIssuePath` or `/webui/bootstrap`). Only WebUI connections (bootstrap token from this machine's
//! browser, the issue secret, or a trusted proxy's assertion) may use `webui_request` (session list, memory,
//! cron). There are no cookies, so no request carries ambient authority.
//!
//! It knows the bus and the channel toolkit, never the agent: sessions, memory and cron are read through a
//! [`WebUiStore`] the composer passes in; nothing here reads the process environment or `~/.nanobot`.
//!
//! ```
//! use nanobot_websocket::{WebSocketChannel, WebSocketConfig, WebSocketSettings};
//!
//! let raw = serde_json::json!({"port": 0, "token_issue_path": "/auth/token"});
//! let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&raw).unwrap()).unwrap();
//! let channel = WebSocketChannel::new(settings, "/tmp/nanobot-media/websocket");
//! assert_eq!(channel.settings().token_issue_path.as_deref(), Some("/auth/token"));
//!
//! let open = serde_json::json!({"host": "0.0.0.0"});
//! let err = WebSocketSettings::from_config(&WebSocketConfig::from_json(&open).unwrap()).unwrap_err();
//! assert!(err.to_string().contains("not a loopback address"));
//! ```

mod channel;
mod error;
mod listen;
mod media;
mod protocol;
mod server;
mod settings;
mod store;
mod tokens;

pub use channel::WebSocketChannel;
pub use error::WebSocketError;
pub use listen::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS_PER_CLIENT, TLS_HANDSHAKE_TIMEOUT};
pub use media::{MAX_ATTACHMENTS, MAX_FILE_BYTES};
pub use protocol::is_valid_chat_id;
pub use server::{ASSETS, CONTENT_SECURITY_POLICY};
pub use settings::{
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_PORT, DEFAULT_TOKEN_TTL_S, Listen, TlsFiles, TrustedProxy,
    TrustedProxyAuthConfig, WebSocketConfig, WebSocketSettings,
};
pub use store::{ChatOwner, SessionSummary, WebUiStore};

/// The channel's name on the bus (session keys are `websocket:<chat_id>`, as in 0.3.5).
pub const NAME: &str = "websocket";
