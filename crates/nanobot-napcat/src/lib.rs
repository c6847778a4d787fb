//! The NapCat channel for nanobot: QQ through a OneBot v11 implementation (NapCat, or another one such as
//! LLOneBot or Lagrange) over its forward WebSocket, as the Python nanobot 0.3.5's `napcat` channel.
//!
//! [`NapcatChannel`] implements [`nanobot_channels::Channel`]. It connects to `wsUrl` directly (no proxy of the
//! environment; the HTTP/1.1 upgrade sent by reqwest with `Authorization: Bearer <accessToken>` when a token is
//! set, because the WebSocket library's own handshake logs the request whole at TRACE level), asks
//! `get_login_info` for the bot's own QQ number, then reads events:
//! private and group messages (array form; a plain string is one text segment, CQ codes are not parsed) and
//! `group_increase` notices. Actions go out as frames with an `echo` and wait, bounded, for the answer with that
//! echo. A lost connection ends [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the
//! channel manager connects again with its backoff; a refused token (HTTP 401 or 403) is an authentication error,
//! which stops the channel.
//!
//! Chats keep 0.3.5's ids, `private:<QQ number>` and `group:<group number>`, so sessions carry over. A group
//! message is taken when it mentions the bot (an `at` segment naming it) or replies to one of its messages;
//! otherwise by `groupPolicy` (or the group's entry in `groupPolicyOverrides`): `mention` takes none, `open`
//! every one, a number from 0 to 1 that share at random. Its text reaches the agent as `<nickname>: <text>`.
//! Senders must be on `allowFrom` in private chats and groups alike (`"*"` allows everyone); a stranger in a
//! private chat gets a pairing code, in a group is ignored. With `welcomeNewMembers`, a member joining a group
//! reaches the agent as `[group event] new member <name> joined group <id>` (if that member is allowed).
//!
//! Images in messages are downloaded into `<media>/napcat/` behind the shared download guard (only http(s), no
//! internal address unless `tools.ssrfWhitelist` allows it, no redirects), within `maxImageBytes` both as
//! declared and as read. Answers go out with `send_msg` as array messages: the images the agent sends first (a
//! local file as base64, an http(s) URL as is once the guard lets it pass), then the text, split at
//! [`PIECE_LIMIT`] characters.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment. The token never appears in an error or a log line.
//!
//! ```
//! use nanobot_napcat::NapcatSettings;
//!
//! let err = NapcatSettings::from_block(&serde_json::json!({"wsUrl": "http://127.0.0.1:3001"})).unwrap_err();
//! assert!(err.to_string().contains("channels.napcat.wsUrl must be a ws:// or wss:// URL"));
//! ```

mod channel;
mod descriptor;
mod settings;

pub use channel::{MAX_IMAGE_SEND_BYTES, META_MESSAGE_ID, NapcatChannel, PIECE_LIMIT};
pub use descriptor::DESCRIPTOR;
pub use settings::{DEFAULT_MAX_IMAGE_BYTES, DEFAULT_WS_URL, GroupMode, NapcatSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "napcat";
