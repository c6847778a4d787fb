//! The QQ channel for nanobot, over the official QQ Bot API (no public URL needed).
//!
//! [`QqChannel`] implements [`nanobot_channels::Channel`]. It gets an app access token from `appId`/`secret`
//! (`POST getAppAccessToken`; cached, renewed a minute before it expires and when the API answers 401), asks
//! `GET /gateway/bot` for the WebSocket address and speaks the gateway protocol: Hello (op 10), Identify (op 2,
//! intents for group/C2C, guild direct and guild @-messages), heartbeats (op 1) that must be acknowledged (op 11)
//! within one interval, READY. After a dropped connection it resumes (op 6) with the session id and the last
//! sequence number, so events sent meanwhile are replayed; message ids already handled are skipped. An invalid
//! session (op 9, close codes 4006/4007/4009) identifies afresh; a refused token (close code 4004) stops the
//! channel with an authentication error. Every wait is bounded: connect, Hello, READY/RESUMED, heartbeat
//! acknowledgements, REST calls.
//!
//! Messages: C2C (`C2C_MESSAGE_CREATE`), group @-messages (`GROUP_AT_MESSAGE_CREATE`; a group message that does
//! not mention the bot is ignored), guild @-messages and guild direct messages. They go through the channel's
//! access control (`allowFrom` by openid; strangers in a direct chat get a pairing code, in groups they are
//! ignored). Attachments are downloaded into `mediaDir` (default `<media>/qq/`) within `downloadMaxBytes`, only
//! from http(s) URLs that do not point at internal addresses, without following redirects.
//!
//! Replies are passive replies through the REST API: they name the message id they answer and carry an
//! increasing `msg_seq` (`POST /v2/users/{openid}/messages`, `/v2/groups/{group_openid}/messages`, and
//! `/channels/{id}/messages`, `/dms/{guild_id}/messages` for guilds), as plain text or QQ Markdown
//! (`msgFormat`). The `ackMessage` (default "⏳ Processing...") is sent first unless empty. Files the agent sends
//! (local paths up to 20 MiB) are uploaded as rich media (`POST .../files`, base64) and sent as `msg_type` 7 to
//! single chats and groups; a file that cannot be sent is named in a note.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. `baseUrl` (nanobot-rs only) points the API and the token endpoint at another server (a fake in
//! tests).
//!
//! ```
//! use nanobot_qq::QqSettings;
//!
//! let err = QqSettings::from_block(&serde_json::json!({"enabled": true})).unwrap_err();
//! assert!(err.to_string().contains("channels.qq.appId is empty"));
//! ```

mod api;
mod channel;
mod descriptor;
mod settings;

pub use channel::{INTENTS, META_CHAT_TYPE, META_MESSAGE_ID, QqChannel};
pub use descriptor::DESCRIPTOR;
pub use settings::{
    DEFAULT_ACK_MESSAGE, DEFAULT_API_URL, DEFAULT_DOWNLOAD_MAX_BYTES, DEFAULT_TOKEN_URL, MsgFormat,
    QqSettings,
};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "qq";
