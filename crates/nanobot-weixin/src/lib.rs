//! The personal WeChat (微信) channel for nanobot, as the Python nanobot 0.3.5's `weixin` channel: the bot is a
//! personal WeChat account linked by a QR code to Tencent's iLink bot API (`https://ilinkai.weixin.qq.com`,
//! openclaw-weixin's protocol 2.4.6). No WeChat client runs here and no public URL is needed: messages come by an
//! HTTP long poll, answers go by HTTP, media through the iLink CDN enciphered with AES-128-ECB.
//!
//! - **Login** ([`login`], behind `nanobot channels login weixin [--force]`): a QR code printed in the terminal,
//!   scanned and confirmed on the phone (with the number the phone shows when WeChat asks for one), then the bot
//!   token is written to `<stateDir>/account.json` and into `channels.weixin` of `config.json`, both as 0.3.5
//!   writes them, so a home moves between 0.3.5 and nanobot-rs either way. The gateway never logs in on its own:
//!   without a token the channel stops with an error saying to run that command.
//! - **The poll** ([`WeixinChannel`] implements [`nanobot_channels::Channel`]): `getupdates` with the cursor
//!   saved in `account.json`, held by the server (35 s, or what it says). A network failure or a server error ends
//!   [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager polls again
//!   with its backoff, from the saved cursor, which only moves once its messages are handled (at a stop, a batch
//!   being handled is finished first, within a few seconds); `-14` (the login expired, answered to the poll or
//!   to a send) stops the channel with one clear error, unless a newer login is found in `account.json`.
//! - **Who gets through**: the sender must be on `allowFrom` (exact ids, or `*`) or paired; a stranger gets a
//!   pairing code, sent on their own context token, and nothing reaches the bus. The bot's own messages and
//!   repeats (by message id, over the last 1,000) are dropped.
//! - **Messages in**, rendered as 0.3.5 renders them: text, quotes (`[引用: <title> | <text>]`), images, files,
//!   videos and voices (WeChat's transcript, else the file, transcribed when a transcriber is given), downloaded
//!   from the CDN (at most [`MAX_MEDIA_BYTES`]), deciphered ([`crypto`]) and saved under `<media>/weixin/`.
//!   Metadata: `message_id` (and `is_group`).
//! - **Answers** must quote the user's latest *context token*: files first (each uploaded enciphered and sent as
//!   its own message; one that fails is named as `[Failed to send: <name>]`), then the text cleaned and split at
//!   [`MAX_MESSAGE_CHARS`] ([`split_text`]). At most `contextMessageBudget` sends go on one token; without a
//!   usable token (none yet, the budget spent, or the server's `-2`) the reply is kept (three per chat) and sent
//!   when the user writes again, as 0.3.5 does. "Typing" shows from the message until the answer.
//! - **Streaming** only buffers, as in 0.3.5 (WeChat has no incremental messages): the answer goes whole when it
//!   ends. With `blockStreaming`, a long answer goes out in blocks of `blockStreamingMinChars` as it grows.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. The token never appears in `Debug`, an error or a log line.
//!
//! ```
//! use nanobot_weixin::{WeixinSettings, crypto, split_text};
//!
//! let s = WeixinSettings::from_block(&serde_json::json!({
//!     "enabled": true, "token": "bot-token", "allowFrom": ["alice@im.wechat"], "context_message_budget": 10
//! })).unwrap();
//! assert_eq!(s.base_url, nanobot_weixin::DEFAULT_BASE_URL);
//! assert_eq!(s.context_message_budget, 10);
//! assert!(!format!("{s:?}").contains("bot-token"));
//!
//! let err = WeixinSettings::from_block(&serde_json::json!({"blockStreamingMinChars": 100})).unwrap_err();
//! assert!(err.to_string().contains("channels.weixin.blockStreamingMinChars is 100"));
//!
//! // 0.3.5 cuts Chinese text after its sentence marks, and cleans what WeChat renders badly.
//! assert_eq!(split_text("第一句。第二句。第三句。", 10), ["第一句。", "第二句。", "第三句。"]);
//! assert_eq!(split_text("a <b>", 1800), ["a ＜b＞"]);
//!
//! let key = [9u8; 16];
//! assert_eq!(crypto::decrypt(&key, &crypto::encrypt(&key, b"media")).unwrap(), b"media");
//! ```

mod account;
mod api;
mod channel;
pub mod crypto;
mod descriptor;
mod login;
mod settings;
mod text;

pub use account::{ACCOUNT_FILE, REPLACED_KEY};
pub use channel::{MAX_MEDIA_BYTES, MAX_UPLOAD_BYTES, META_MESSAGE_ID, WeixinChannel};
pub use descriptor::DESCRIPTOR;
pub use login::{
    LOGIN_BOUND, LoggedIn, LoginError, MAX_QR_REFRESHES, login, render_qr, write_config_credentials,
};
pub use settings::{DEFAULT_BASE_URL, DEFAULT_CDN_BASE_URL, DEFAULT_POLL_TIMEOUT_SECS, WeixinSettings};
pub use text::{MAX_MESSAGE_CHARS, sanitize, split_text};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "weixin";
