//! The Mochat channel for nanobot: an agent account on a Mochat server (`clawToken`), reached over Socket.IO with
//! an HTTP polling fallback, as 0.3.5 does.
//!
//! [`MochatChannel`] implements [`nanobot_channels::Channel`]. It joins the Socket.IO server (`socketUrl`, else
//! `baseUrl`, at `socketPath`) with `{"token": clawToken}` as the auth object, subscribes to its `sessions`
//! (`com.claw.im.subscribeSessions`, with the stored cursors) and `panels` (`com.claw.im.subscribePanels`), and
//! handles `claw.session.events`, `claw.panel.events`, `notify:chat.message.add` and `notify:chat.inbox.append`.
//! `"*"` in `sessions` / `panels` discovers them through the HTTP API every `refreshIntervalMs`. While the socket
//! is unavailable (refused, dropped, never reachable) it polls over HTTP: a long-poll per session
//! (`/api/claw/sessions/watch` from the cursor) and a poll per panel, and keeps trying the socket again with
//! backoff (`socketReconnectDelayMs` doubling to `socketMaxReconnectDelayMs`; `maxRetryAttempts` > 0 stops
//! retrying the socket after that many failures, the polling goes on). Session cursors are kept in
//! `<data dir>/mochat/session_cursors.json` (0.3.5's file); the first answer for a session without a cursor is
//! history and is not answered.
//!
//! Inbound rules (0.3.5's): the agent's own messages (`agentUserId`) are skipped, authors not on `allowFrom` are
//! ignored, message ids are handled once. In panels of a group, a message must mention the agent when
//! `mention.requireInGroups` or the `groups` rule for the group / panel / `"*"` says so; with `replyDelayMode`
//! `"non-mention"` (the default) messages that do not mention the agent are buffered and handed over together
//! after `replyDelayMs`, or at once with the next mention. Replies go to `/api/claw/sessions/send` or
//! `/api/claw/groups/panels/send` with the `X-Claw-Token` header.
//!
//! The socket speaks Socket.IO v5 over Engine.IO v4's WebSocket transport with the default JSON parser (a small
//! client on tokio-tungstenite; `rust_socketio` needs native-tls). A server that only speaks the msgpack parser
//! is served by the HTTP fallback.
//!
//! ```
//! use nanobot_mochat::MochatSettings;
//!
//! let err = MochatSettings::from_block(&serde_json::json!({"enabled": true})).unwrap_err();
//! assert!(err.to_string().contains("channels.mochat.clawToken is empty"));
//! ```

mod channel;
mod descriptor;
mod settings;
mod socket;

pub use channel::MochatChannel;
pub use descriptor::DESCRIPTOR;
pub use settings::{DEFAULT_BASE_URL, MochatSettings, ReplyDelayMode};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "mochat";
