//! The Mattermost channel for nanobot, as the Python nanobot 0.3.5's `mattermost` channel: the bot account's events
//! from the server's WebSocket, its answers as posts through the REST API (v4).
//!
//! [`MattermostChannel`] implements [`nanobot_channels::Channel`]. It asks `GET /api/v4/users/me` who the bot is,
//! then opens `ws(s)://<serverUrl>/api/v4/websocket` (the shared upgrade of `nanobot_channels::ws`, the token in
//! the `Authorization` header and never in a log) and reads `posted` events. A lost connection ends
//! [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects again
//! with its backoff; a refused token (HTTP 401) is an authentication error, which stops the channel.
//!
//! Posts: system posts and the bot's own are skipped; with `teamId`, channel posts of other teams too. A direct
//! message is taken from senders on `allowFrom` or `dm.allowFrom` (`dm.policy: "allowlist"`: `dm.allowFrom`
//! only; `dm.enabled: false`: none); a stranger gets a pairing code. A channel post is taken by `groupPolicy`
//! (`groupPolicyInThread` for a post in a thread): `mention` when it @mentions the bot, `open` always,
//! `allowlist` in the channels of `groupAllowFrom`; its sender must be on `allowFrom` too. `allowFromMatchMode`
//! matches senders by id, username or e-mail address. The mention is taken out of the text. The post gets
//! `reactEmoji` while it is answered and `doneEmoji` after.
//!
//! Threads as 0.3.5: with `replyInThread` (the default) a channel post's answer opens a thread under it, and
//! the session is `mattermost:<channel>:<thread root>` (a direct message keeps the chat's session). A post in a
//! thread brings the thread's earlier posts (`includeThreadContext`, up to `threadContextLimit`), once per thread.
//! Files of a post are downloaded into `<media>/mattermost/`; files the agent sends are uploaded and attached to
//! the first post of the answer, which is split at [`MAX_POST_CHARS`] characters.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. The token never appears in an error or a log line.
//!
//! ```
//! use nanobot_mattermost::MattermostSettings;
//!
//! let err = MattermostSettings::from_block(&serde_json::json!({"serverUrl": "https://chat.example.com"})).unwrap_err();
//! assert!(err.to_string().contains("channels.mattermost.token is empty"));
//! ```

mod channel;
mod descriptor;
mod settings;

pub use channel::{META_MATTERMOST, META_MESSAGE_ID, MattermostChannel};
pub use descriptor::DESCRIPTOR;
pub use settings::{ChannelPolicy, MAX_FILE_BYTES, MAX_POST_CHARS, MatchMode, MattermostSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "mattermost";
