//! The DingTalk channel for nanobot, over Stream mode (no public URL needed).
//!
//! [`DingTalkChannel`] implements [`nanobot_channels::Channel`]. It opens a Stream connection with the app's
//! `clientId`/`clientSecret` (`POST /v1.0/gateway/connections/open`, subscribing to robot messages), connects the
//! WebSocket with the ticket it got, and acknowledges every frame: system pings (echoing their data), robot
//! message callbacks, events. A `disconnect` system frame, a dropped or silent connection makes it reconnect with
//! backoff (1 s doubling to 60 s); messages redelivered by id are handled once.
//!
//! Robot messages (text, rich text, pictures and files, which are downloaded to `<media_dir>/dingtalk/`) go
//! through the channel's access control (`allowFrom`, pairing codes for denied direct messages); a group message
//! marked `isInAtList: false` (the bot was not @mentioned) is ignored. `disablePrivateChat` answers direct
//! messages with a notice only; `groupUserIsolation` gives each user of a group a session of their own. Group chats
//! are addressed as `group:<openConversationId>`, users by staff id.
//!
//! Replies are Markdown robot messages (`sampleMarkdown`) sent with the access token (cached, renewed before it
//! expires and when the API answers 401): `groupMessages/send` to groups (headed with the sender's name),
//! `oToMessages/batchSend` to users, split at 4000 characters.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. `baseUrl` points the Open API at another server (a fake in tests).
//!
//! ```
//! use nanobot_dingtalk::DingTalkSettings;
//!
//! let err = DingTalkSettings::from_config(&nanobot_config::DingTalkConfig::default()).unwrap_err();
//! assert!(err.to_string().contains("channels.dingtalk.clientId is empty"));
//! ```

mod api;
mod channel;
mod settings;

pub use channel::{DingTalkChannel, GROUP_PREFIX, META_SENDER_NAME};
pub use settings::{DEFAULT_API_URL, DEFAULT_MAX_FILE_BYTES, DingTalkSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "dingtalk";
