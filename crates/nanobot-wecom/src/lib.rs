//! The WeCom (Enterprise WeChat, 企业微信) channel for nanobot, as the Python nanobot 0.3.5's `wecom` channel: an
//! AI bot (智能机器人) on WeCom's long connection (`wss://openws.work.weixin.qq.com`), the protocol of
//! `wecom-aibot-sdk-python` 0.1.x. No public URL is needed.
//!
//! [`WecomChannel`] implements [`nanobot_channels::Channel`]. It opens the WebSocket (the shared upgrade of
//! `nanobot_channels::ws`, directly: 0.3.5 bypasses the system proxy for this host too), subscribes with
//! `aibot_subscribe {bot_id, secret}`, and sends a `ping` every 30 s. Every frame it sends carries a `req_id` and
//! waits, bounded, for the server's acknowledgement. A lost connection, or two pings unanswered in a row, ends
//! [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects again
//! with its backoff. A refused bot id or secret (errcode 853000) is an authentication error naming the keys,
//! never the secret; so is a `disconnected_event` (another connection subscribed with the bot and took it over:
//! reconnecting would only take it back, so the channel stops, as the SDK does).
//!
//! Messages (`aibot_msg_callback`): `text`, `image`, `file`, `voice` (WeCom has already transcribed it: `[voice]
//! <text>`) and `mixed`. The chat is the sender's userid in a single chat and the group's `chatid` in a group
//! (WeCom delivers only group messages that @-mention the bot; the mention stays in the text, as in 0.3.5). A
//! `msgid` seen among the last 1,000 is dropped. The sender must be on `allowFrom` (or paired), in groups too; a
//! stranger in a single chat gets a pairing code (0.3.5 drops it silently). Images and files are fetched with the
//! shared `RemoteMedia` behind the SSRF guard (at most [`MAX_MEDIA_BYTES`]), decrypted (AES-256-CBC with the
//! message's `aeskey`) and saved as new files in `<media>/wecom/` (named after a hash of the whole `msgid`, never
//! over another file), named in the text as `[image: <path>]`. Metadata: `message_id`, `msg_type`, `chat_type`
//! (0.3.5's), and `is_group`.
//!
//! Callbacks are read without waiting for the channel (at most 256 of each kind queue; more are dropped with a
//! warning). Events are answered as they come, so a welcome never waits behind a message's download; messages
//! are checked in the order they were read, then taken in side by side, each chat's published in order.
//!
//! Answers go on the chat's last callback (its `req_id`, for [`CALLBACK_TTL`] from when the message was read) as
//! `aibot_respond_msg` streams, each message its own stream: progress `finish: false`, the answer `finish: true`,
//! as 0.3.5; split at [`MAX_STREAM_BYTES`] bytes. Replies to one callback go one at a time, in order; one left
//! unacknowledged retires the callback (a late acknowledgement could not be told from the next reply's), and the
//! chat's answers go on their own. A chat without a callback (a scheduled message) gets `aibot_send_msg`
//! markdown. Files are uploaded in WeCom's three steps (init with the file's md5, 512 KiB base64 chunks, finish)
//! and sent as media. Once part of an answer has gone out, a later part's failure is not retried (the manager would
//! send it all again): it is `Rejected`, naming what was not sent. On `enter_chat` an allowed user gets
//! `welcomeMessage` (0.3.5 looks for a `chatid` the real event does not have, so it never welcomes anyone).
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. `wsUrl` (nanobot-rs only) points the connection at another server (a fake in tests).
//!
//! ```
//! use nanobot_wecom::WecomSettings;
//!
//! let err = WecomSettings::from_block(&serde_json::json!({"enabled": true, "secret": "s3cret"})).unwrap_err();
//! assert!(err.to_string().contains("channels.wecom.botId is empty"));
//! let s = WecomSettings::from_block(&serde_json::json!({"botId": "aib-1", "secret": "s3cret"})).unwrap();
//! assert_eq!(s.ws_url, nanobot_wecom::DEFAULT_WS_URL);
//! assert!(!format!("{s:?}").contains("s3cret"));
//! ```

mod channel;
mod descriptor;
mod link;
mod media;
mod settings;

pub use channel::{
    CALLBACK_TTL, DEFAULT_PING_INTERVAL, MAX_MEDIA_BYTES, MAX_STREAM_BYTES, MAX_UPLOAD_BYTES,
    MAX_UPLOAD_CHUNKS, META_CHAT_TYPE, META_MESSAGE_ID, META_MSG_TYPE, UPLOAD_CHUNK_BYTES, WecomChannel,
};
pub use descriptor::DESCRIPTOR;
pub use settings::{DEFAULT_WS_URL, WecomSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "wecom";
