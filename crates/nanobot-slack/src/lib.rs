//! The Slack channel for nanobot, on slack-morphism (the Web API and the event types) and its own Socket Mode
//! client on tokio-tungstenite (every wait bounded: handshake, `hello`, pings, acknowledgements).
//!
//! [`SlackChannel`] implements [`nanobot_channels::Channel`]. It checks both tokens at start (`auth.test` with the
//! bot token, which also gives the bot's user id; `apps.connections.open` with the app-level token), then receives
//! events over Socket Mode (each envelope is acknowledged once queued; events are handled in order by the channel's
//! run loop; a connection silent for three ping intervals is given up, and a `disconnect` refresh reconnects).
//! For every `message` or `app_mention` event from a person (a message delivered as both is handled once) it
//! applies the channel's access control: `allowFrom` (pairing codes for denied direct messages), `dm.enabled` /
//! `dm.policy`, and `groupPolicy` in channels (`mention` answers only messages that mention the bot;
//! `groupRequireMention` makes `open` behave as `mention`; `allowlist` uses `groupAllowFrom`). Accepted messages get the `reactEmoji` reaction, shared files are downloaded to
//! `<media_dir>/slack/`, and the message goes on the bus with its `ts`, its thread and a per-thread session key.
//! When the bot is first addressed inside a thread it did not start, the thread's earlier messages are put in
//! front of the text (`includeThreadContext`, `threadContextLimit`).
//!
//! Replies are converted from Markdown to Slack mrkdwn, split at Slack's limit and posted in the thread (channel
//! messages start a thread under themselves when `replyInThread` is on; direct messages are answered inline unless
//! already in a thread). Outbound files go through `files.getUploadURLExternal` / `files.completeUploadExternal`.
//! When the final reply is out, `reactEmoji` is replaced by `doneEmoji`.
//!
//! It knows the bus, the channel toolkit and the config schema, never the agent. Tokens, paths and the pairing
//! store are passed in; nothing here reads the process environment. `baseUrl` points the Web API (including
//! `apps.connections.open`, whose answer names the Socket Mode URL) at another server, such as an emulator.
//!
//! ```no_run
//! use std::sync::Arc;
//! use nanobot_bus::InProcessBus;
//! use nanobot_channels::{ChannelManager, ManagerSettings};
//! use nanobot_slack::{SlackChannel, SlackSettings};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = nanobot_config::SlackConfig::default();
//! config.app_token = nanobot_config::Secret::new("xapp-1-…");
//! config.bot_token = nanobot_config::Secret::new("xoxb-…");
//! config.allow_from = vec!["U012ABCDEF".into()];
//! let channel = SlackChannel::new(SlackSettings::from_config(&config)?, "/tmp/nanobot-media")?;
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
//! use nanobot_slack::SlackSettings;
//!
//! let err = SlackSettings::from_config(&nanobot_config::SlackConfig::default()).unwrap_err();
//! assert!(err.to_string().contains("channels.slack.appToken is empty"));
//! ```

mod channel;
mod descriptor;
mod inbound;
mod settings;
mod socket;

pub use channel::{DEFAULT_API_TIMEOUT, META_CHANNEL_TYPE, META_MESSAGE_TS, META_THREAD_TS, SlackChannel};
pub use descriptor::DESCRIPTOR;
pub use settings::{DEFAULT_API_URL, DEFAULT_MAX_FILE_BYTES, SlackSettings};

/// The channel's name on the bus.
pub const NAME: &str = "slack";
