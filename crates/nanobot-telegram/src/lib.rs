//! The Telegram channel for nanobot, on teloxide.
//!
//! [`TelegramChannel`] implements [`nanobot_channels::Channel`]: it receives messages by long polling (pending
//! updates dropped at start) or through a webhook, checks them against the channel's access control (allow-list,
//! pairing codes, group policy), downloads photos, voice notes, audio and documents to a media directory (voice
//! and audio transcribed when a [`Transcribe`](nanobot_channels::Transcribe) is given), keeps a typing indicator
//! alive until the reply for that chat is sent, and publishes the result on the bus. Replies are split at
//! Telegram's limit and sent as HTML (plain text when Telegram rejects the markup); streamed answers are shown by
//! editing one message. Sends go through teloxide's `Throttle` adaptor, which queues them within Telegram's
//! limits (about one message a second per chat, twenty a minute per group, thirty a second overall) instead of
//! running into flood waits.
//!
//! The receive loops are ours, not teloxide's update listeners, for reasons the listeners cannot meet:
//! - polling: teloxide's `Polling` stream yields nothing for an empty long poll, so the manager's watchdog could
//!   not tell an idle bot from a stuck one; ours beats the [`Heartbeat`](nanobot_channels::Heartbeat) after
//!   every poll (the backoff and the obeyed `retry_after` are the same as teloxide's);
//! - webhook: teloxide's router compares the secret token in non-constant time, queues updates without bound
//!   and has no connection limits; ours compares in constant time, queues at most 64 updates (a request waits
//!   for room before it is answered) and is served by `nanobot_http` with its per-client, header and idle
//!   limits.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent. Paths, secrets and the pairing
//! store are passed in; nothing here reads the process environment. It is usable as a library on its own:
//!
//! ```no_run
//! use std::sync::Arc;
//! use nanobot_bus::InProcessBus;
//! use nanobot_channels::{ChannelManager, ManagerSettings};
//! use nanobot_telegram::{TelegramChannel, TelegramSettings};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = nanobot_config::TelegramConfig::default();
//! config.token = nanobot_config::Secret::new("123:ABC");
//! config.allow_from = vec!["42".into()];
//! let channel = TelegramChannel::new(TelegramSettings::from_config(&config)?, "/tmp/nanobot-media")?;
//! let mut manager = ChannelManager::new(ManagerSettings::default());
//! manager.add(Arc::new(channel));
//! manager.run(Arc::new(InProcessBus::default()), CancellationToken::new()).await;
//! # Ok(())
//! # }
//! ```

mod channel;
mod descriptor;
mod media;
mod settings;

pub use channel::{BOT_COMMANDS, TelegramChannel};
pub use descriptor::{DESCRIPTOR, token_looks_valid};
pub use settings::{TelegramSettings, WebhookSettings};

/// The channel's name on the bus (and the key of its config block).
pub const NAME: &str = "telegram";
