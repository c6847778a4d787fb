//! The Signal channel for nanobot, as the Python nanobot 0.3.5's `signal` channel: messages through a
//! [signal-cli](https://github.com/AsamK/signal-cli) daemon (`signal-cli -a <number> daemon --http host:port`),
//! received from its event stream and sent with its JSON-RPC.
//!
//! [`SignalChannel`] implements [`nanobot_channels::Channel`]. It checks the daemon (`/api/v1/check`), turns on
//! typing indicators, and reads `receive` events from `/api/v1/events` (Server-Sent Events; a keep-alive every
//! 15 s). A daemon that is not there, or a stream that ends or goes quiet for a minute, ends
//! [`Channel::run`](nanobot_channels::Channel::run) with a transient error and the channel manager connects again
//! with its backoff.
//!
//! Messages, as 0.3.5 takes them:
//! - **Direct messages** (`dm`): from senders on `dm.allowFrom` (numbers with or without `+`, or UUIDs;
//!   `dm.policy: "open"`: anyone); a stranger gets a pairing code. The chat is the sender's number (their UUID when
//!   the number is hidden).
//! - **Groups** (`group`, off by default): groups on `group.allowFrom` (or every group with `group.policy:
//!   "open"`); with `group.requireMention` only messages that mention the bot (or commands, `/…`) are answered,
//!   with the group's recent messages (`groupMessageBufferSize`) as context and the sender's name before the text.
//! - Attachments are copied from signal-cli's attachments directory (`attachmentsDir`, by default
//!   `~/.local/share/signal-cli/attachments`) into `<media>/signal/` and named in the text.
//!
//! Answers: Markdown becomes Signal's text styles (bold, italic, strikethrough, monospace), split at
//! [`MAX_MESSAGE_CHARS`]; files go as data URIs (so a daemon on another machine gets them); "typing…" shows until
//! the answer is sent.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent; nothing here reads the process
//! environment.
//!
//! ```
//! use nanobot_signal::SignalSettings;
//!
//! let err = SignalSettings::from_block(&serde_json::json!({"daemonPort": 8080})).unwrap_err();
//! assert!(err.to_string().contains("channels.signal.phoneNumber is empty"));
//! ```

mod channel;
mod descriptor;
mod settings;
mod style;

pub use channel::{MAX_ATTACHMENT_BYTES, MAX_MESSAGE_CHARS, SignalChannel};
pub use descriptor::DESCRIPTOR;
pub use settings::{Policy, SignalSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "signal";
