//! The Feishu (Lark) channel for nanobot, over the long-connection event mode (no public URL needed).
//!
//! [`FeishuChannel`] implements [`nanobot_channels::Channel`]. It asks the Open API for a long-connection endpoint
//! with the app's credentials (`POST /callback/ws/endpoint`), opens the WebSocket and speaks the SDKs' framed
//! protocol ([`frame::Frame`], protobuf): pings at the interval the server sets, every data frame acknowledged,
//! events split over several frames joined. A dropped connection ends
//! [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects again
//! with its backoff; events redelivered by id are handled once.
//!
//! `im.message.receive_v1` events from people go through the channel's access control (`allowFrom`, pairing codes
//! for denied direct messages) and `groupPolicy` (`mention` answers only messages that @mention the bot or
//! `@_all`); text and posts are read with mentions resolved, images and files are downloaded to
//! `<media_dir>/feishu/`. A reply to another message starts with `[Reply to: …]`, the quoted message's text (read
//! with `GET /open-apis/im/v1/messages/{id}`, cut at 200 characters). Accepted messages get the `reactEmoji`
//! reaction and go on the bus with a session per topic in groups (`topicIsolation`).
//!
//! Replies go through the IM API with the tenant access token (cached, renewed before it expires and when the API
//! rejects it): short plain text as text messages, links and longer plain text as posts (rich text), other Markdown as
//! cards (0.3.5's choice), split at 4000 characters, quoting the user's message when `replyToMessage` is on and always
//! inside a topic. Files in a reply's `media` go first: images uploaded to `/open-apis/im/v1/images` and sent as
//! `image` messages, other files uploaded to `/open-apis/im/v1/files` and sent as `audio`, `media` (video) or `file`
//! messages ([`MAX_IMAGE_UPLOAD_BYTES`], [`MAX_FILE_UPLOAD_BYTES`]); `http(s)` links among them are fetched behind the
//! SSRF guard ([`FeishuChannel::with_ssrf_guard`]) and uploaded the same way; a file that cannot go out leaves
//! `[file not sent: <name>]` in the chat.
//!
//! With `streaming` on (the default), [`Channel::supports_streaming`](nanobot_channels::Channel::supports_streaming)
//! is true and a streamed answer is one CardKit card: created and sent with the first words, its Markdown element
//! updated at most every [`FeishuSettings::stream_edit_interval`], written whole and taken out of streaming mode at
//! the stream's end (every call with a strictly increasing `sequence`; a failed update turns streaming mode on
//! again and retries once). Tool hints arriving meanwhile are shown inside the card. When no card can be made, or
//! the final text cannot be written into it, the answer goes out as regular messages. `doneEmoji` (if set)
//! replaces the reaction when the turn is over: after a reply, or a stream end not marked
//! [`META_STREAM_RESUMING`](nanobot_bus::META_STREAM_RESUMING).
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. `domain` picks Feishu or Lark; `baseUrl` points everything at another server (a fake in tests).
//!
//! ```no_run
//! use std::sync::Arc;
//! use nanobot_bus::InProcessBus;
//! use nanobot_channels::{ChannelManager, ManagerSettings};
//! use nanobot_feishu::{FeishuChannel, FeishuSettings};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = nanobot_config::FeishuConfig::default();
//! config.app_id = "cli_a1b2c3".into();
//! config.app_secret = nanobot_config::Secret::new("…");
//! config.allow_from = vec!["ou_0123456789abcdef".into()];
//! let channel = FeishuChannel::new(FeishuSettings::from_config(&config)?, "/tmp/nanobot-media")?;
//! let mut manager = ChannelManager::new(ManagerSettings::default());
//! manager.add(Arc::new(channel));
//! manager.run(Arc::new(InProcessBus::default()), CancellationToken::new()).await;
//! # Ok(())
//! # }
//! ```
//!
//! Settings are validated up front, with errors naming the config key:
//!
//! ```
//! use nanobot_feishu::FeishuSettings;
//!
//! let err = FeishuSettings::from_config(&nanobot_config::FeishuConfig::default()).unwrap_err();
//! assert!(err.to_string().contains("channels.feishu.appId is empty"));
//! ```

mod api;
mod channel;
mod descriptor;
mod files;
mod format;
pub mod frame;
mod inbound;
mod settings;
mod stream;

pub use channel::{FeishuChannel, META_CHAT_TYPE, META_MESSAGE_ID, META_THREAD_ID};
pub use descriptor::DESCRIPTOR;
pub use files::{MAX_FILE_UPLOAD_BYTES, MAX_IMAGE_UPLOAD_BYTES};
pub use settings::{
    DEFAULT_MAX_FILE_BYTES, DEFAULT_STREAM_EDIT_INTERVAL, FEISHU_URL, FeishuSettings, LARK_URL,
};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "feishu";
