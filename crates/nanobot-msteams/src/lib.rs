//! The Microsoft Teams channel for nanobot, as the Python nanobot 0.3.5's `msteams` channel: a webhook the Bot
//! Framework posts users' messages to, answers through the Bot Connector.
//!
//! [`MsTeamsChannel`] implements [`nanobot_channels::Channel`]. It listens on `host:port` at `path` (the bot's
//! messaging endpoint, 0.0.0.0:3978/api/messages by default) and checks the token on every request as the Bot
//! Framework's SDKs do: RS256, signed by a key of the set the Bot Framework publishes (fetched and kept for an
//! hour, fetched again when a new key appears), endorsed for the activity's channel, issued by
//! `https://api.botframework.com` for this app (`appId`), in date (five minutes of clock skew), and naming the
//! activity's `serviceUrl`. A request that fails gets 401 and is never seen by the agent; `validateInboundAuth:
//! false` turns the check off, loudly.
//!
//! Messages, as 0.3.5 takes them: personal chats only (group chats and channels are ignored); mentions taken out
//! of the text and quoted replies given as "User is replying to: … / User reply: …"; senders on `allowFrom` (AAD
//! object id or Teams id); strangers get a pairing code. Files users share (their download links, behind the
//! SSRF guard) and images (from the Bot Connector, with the bot's token) are saved into `<media>/msteams/`.
//!
//! Answers go to the conversation's Bot Connector (`serviceUrl`, only on `trustedServiceUrlHosts` and only over
//! HTTPS) with the bot's token (client credentials of `appId`/`appPassword` from Azure AD, kept until a minute
//! before it expires), as replies to the message they answer with `replyInThread`. Long answers are split below
//! Teams' size limit; images go inline (up to [`MAX_INLINE_IMAGE_BYTES`]), other files are named as not sent.
//! The conversation references live where 0.3.5 keeps them (`<workspace>/state/msteams_conversations.json` and its
//! `_meta` sidecar, pruned by `refTtlDays`, `pruneWebChatRefs`, `pruneNonPersonalRefs`), so a home works with either.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. The password and tokens never appear in an error or a log line.
//!
//! ```
//! use nanobot_msteams::MsTeamsSettings;
//!
//! let err = MsTeamsSettings::from_block(&serde_json::json!({"appId": "0000-app"})).unwrap_err();
//! assert!(err.to_string().contains("channels.msteams.appPassword is empty"));
//! ```

mod auth;
mod channel;
mod descriptor;
mod refs;
mod settings;
mod text;

pub use channel::{MAX_FILE_BYTES, MAX_INLINE_IMAGE_BYTES, MAX_MESSAGE_BYTES, META_MSTEAMS, MsTeamsChannel};
pub use descriptor::DESCRIPTOR;
pub use refs::ConversationRef;
pub use settings::{
    BOT_FRAMEWORK_ISSUER, BOT_FRAMEWORK_SCOPE, DEFAULT_LOGIN_ENDPOINT, DEFAULT_OPEN_ID_METADATA,
    DEFAULT_TRUSTED_SERVICE_URL_HOSTS, MsTeamsSettings,
};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "msteams";
