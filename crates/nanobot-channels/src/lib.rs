//! What every chat platform adapter shares: the [`Channel`] trait, the [`ChannelManager`] that runs channels
//! and delivers the agent's replies to them, access control ([`AccessControl`], [`PairingStore`]), message
//! splitting ([`split_message`]), Markdown → platform formatting ([`markdown_to_telegram_html`],
//! [`markdown_to_slack_mrkdwn`]), bounded downloads (the `download` module and feature: attachments saved with a
//! size limit, remote media fetched behind the SSRF guard), and how an adapter plugs in ([`ChannelDescriptor`]).
//!
//! This crate knows the bus ([`nanobot_bus`]) and nothing about the agent, LLM providers or any particular chat
//! platform SDK: platform crates (`nanobot-telegram`, …) implement [`Channel`], and the agent meets them only
//! through the bus. Configuration and paths are passed in; nothing here reads the process environment.
//!
//! ```
//! use nanobot_channels::{AllowList, markdown_to_telegram_html, split_message};
//!
//! let allow = AllowList::new(["42", "bob"]);
//! assert!(allow.allows("42|alice"));
//! assert!(allow.allows("7|bob"));
//! assert!(!allow.allows("7|eve"));
//! assert!(!AllowList::new(Vec::<String>::new()).allows("42"), "an empty list denies everyone");
//!
//! assert_eq!(markdown_to_telegram_html("**hi** my_var_name <3"), "<b>hi</b> my_var_name &lt;3");
//! assert_eq!(split_message("one two three", 8), ["one two", "three"]);
//! ```

mod access;
mod channel;
mod dedup;
pub mod descriptor;
#[cfg(feature = "download")]
pub mod download;
mod error;
mod format;
mod manager;
mod media;
mod pairing;
mod settings;
mod split;
mod token;
#[cfg(feature = "websocket")]
pub mod ws;

pub use access::{
    AccessControl, AccessDecision, AllowList, GroupPolicy, InboundContext, PAIRING_COMMAND, pairing_command,
    pairing_command_args,
};
pub use channel::{Channel, Heartbeat, Transcribe, TranscribeError};
pub use dedup::RecentIds;
pub use descriptor::{Block, Capabilities, ChannelDescriptor, Credentials, Finding, Places, Services};
#[cfg(feature = "download")]
pub use download::{Fetched, RemoteMedia, api_client};
pub use error::{ChannelError, TooLarge, server_text};
pub use format::{markdown_to_slack_mrkdwn, markdown_to_telegram_html, strip_markdown};
pub use manager::{
    ChannelHealth, ChannelManager, ChannelState, HealthRegistry, ManagerSettings, MediaRoots, RetryPolicy,
    RunningManager, SupervisorSettings,
};
pub use media::{AttachmentError, extension_for_mime, mime_for_name, read_attachment, safe_file_name};
pub use pairing::{PAIRING_TTL, PairingError, PairingRequest, PairingStore};
pub use settings::http_base_url;
pub use split::{DISCORD_LIMIT, SLACK_LIMIT, TELEGRAM_LIMIT, split_message};
pub use token::TokenCache;
