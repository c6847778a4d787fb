//! The Discord channel for nanobot, on serenity.
//!
//! [`DiscordChannel`] implements [`nanobot_channels::Channel`]. It logs in over REST, connects to the gateway with
//! the intents for guild and direct messages (and their content), and for each message from a person checks the
//! channel's access control: `allowFrom` (with pairing codes for denied direct messages), `allowChannels`, and
//! `groupPolicy` in servers (`mention` answers only when the bot is mentioned or replied to; the mention is
//! removed from the text). Accepted messages get the read-receipt reaction, their attachments are downloaded to
//! `<media_dir>/discord/`, a typing indicator is kept alive until the reply is sent, and the message is published
//! on the bus. Replies are sent as Markdown (Discord renders it as is), split at Discord's 2000-character limit,
//! the first piece quoting the message it answers; outbound files are attached (ten per message).
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent. The token, paths and the pairing
//! store are passed in; nothing here reads the process environment. `baseUrl` points REST (and so the gateway URL,
//! which serenity asks from `GET /api/v10/gateway`) at another server, such as a local fake in tests.
//!
//! ```no_run
//! use std::sync::Arc;
//! use nanobot_bus::InProcessBus;
//! use nanobot_channels::{ChannelManager, ManagerSettings};
//! use nanobot_discord::{DiscordChannel, DiscordSettings};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = nanobot_config::DiscordConfig::default();
//! config.token = nanobot_config::Secret::new("bot-token");
//! config.allow_from = vec!["123456789012345678".into()];
//! let channel = DiscordChannel::new(DiscordSettings::from_config(&config)?, "/tmp/nanobot-media")?;
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
//! use nanobot_discord::DiscordSettings;
//!
//! let err = DiscordSettings::from_config(&nanobot_config::DiscordConfig::default()).unwrap_err();
//! assert!(err.to_string().contains("channels.discord.token is empty"));
//! ```

mod channel;
mod descriptor;
mod inbound;
mod settings;

pub use channel::DiscordChannel;
pub use descriptor::{DESCRIPTOR, token_looks_valid};
pub use settings::{DEFAULT_MAX_ATTACHMENT_BYTES, DiscordSettings, ProxySettings, REQUIRED_INTENTS};

/// The channel's name on the bus.
pub const NAME: &str = "discord";
