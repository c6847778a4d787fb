//! The crate's error type.

use std::time::Duration;

/// What went wrong in a channel: classified by what the caller does next (retry or give up).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The channel's configuration is unusable (missing token, bad URL, …); restarting will not help.
    #[error("channel {channel}: invalid configuration: {message}")]
    Config {
        /// Channel name.
        channel: String,
        /// What is wrong, naming the config key.
        message: String,
    },
    /// The platform rejected the credentials.
    #[error("channel {channel}: authentication failed")]
    Auth {
        /// Channel name.
        channel: String,
        /// The platform's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The platform asked us to slow down.
    #[error("channel {channel}: rate limited (retry after {retry_after:?})")]
    RateLimited {
        /// Channel name.
        channel: String,
        /// How long the platform asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// A network or server failure that may pass.
    #[error("channel {channel}: transient failure")]
    Transient {
        /// Channel name.
        channel: String,
        /// The underlying failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The platform refused the request itself (bad chat id, message too long, …); retrying will not help.
    #[error("channel {channel}: request rejected")]
    Rejected {
        /// Channel name.
        channel: String,
        /// The platform's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The outbound message names a chat id this channel cannot use.
    #[error("channel {channel}: invalid chat id {chat_id:?}")]
    InvalidChatId {
        /// Channel name.
        channel: String,
        /// The chat id as given.
        chat_id: String,
    },
    /// No running channel has this name.
    #[error("no channel named {0:?}")]
    UnknownChannel(String),
    /// Reading or writing a local file (media, pairing store) failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The message bus was closed.
    #[error(transparent)]
    Bus(#[from] nanobot_bus::BusError),
    /// Access control storage failed.
    #[error(transparent)]
    Pairing(#[from] crate::PairingError),
}

impl ChannelError {
    /// A [`ChannelError::Transient`] failure of `channel` (network trouble, 5xx, a dropped connection).
    pub fn transient(
        channel: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Transient {
            channel: channel.into(),
            source: source.into(),
        }
    }

    /// A [`ChannelError::Rejected`] request of `channel` (the platform refused it; retrying will not help).
    pub fn rejected(
        channel: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Rejected {
            channel: channel.into(),
            source: source.into(),
        }
    }

    /// A [`ChannelError::Auth`] failure of `channel` (the platform refused the credentials).
    pub fn auth(
        channel: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Auth {
            channel: channel.into(),
            source: source.into(),
        }
    }

    /// A [`ChannelError::Rejected`] download or file of `channel` over `max` bytes ([`ChannelError::is_too_large`]).
    pub fn too_large(channel: impl Into<String>, what: impl Into<String>, max: u64) -> Self {
        Self::Rejected {
            channel: channel.into(),
            source: Box::new(TooLarge {
                what: what.into(),
                max,
            }),
        }
    }

    /// True when this is [`ChannelError::too_large`]: something was over its size limit.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Self::Rejected { source, .. } if source.is::<TooLarge>())
    }

    /// True when sending again later may succeed (network trouble, rate limits).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::RateLimited { .. } | Self::Transient { .. })
    }

    /// How long the platform asked us to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Something was larger than it may be (the source of [`ChannelError::too_large`]).
#[derive(Debug, thiserror::Error)]
#[error("{what} is larger than {max} bytes")]
pub struct TooLarge {
    /// What (`attachment`, `file`, …).
    pub what: String,
    /// The limit, in bytes.
    pub max: u64,
}

/// Text a server sent (an error message) made fit for an error or a log line: every non-empty `secret` is replaced
/// by `[REDACTED]` (a broken proxy, or a hostile server, may quote the request it got, credentials included), and
/// at most 300 characters are kept.
///
/// ```
/// use nanobot_channels::server_text;
///
/// let reply = r#"bad request {"AppSecret":"s3cr3t-value"}"#;
/// assert_eq!(server_text(reply, &["s3cr3t-value", ""]), r#"bad request {"AppSecret":"[REDACTED]"}"#);
/// assert_eq!(server_text(&"x".repeat(1000), &[]).chars().count(), 301);
/// ```
pub fn server_text(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.trim().is_empty()) {
        out = out.replace(secret, "[REDACTED]");
    }
    if out.chars().count() > 300 {
        out = out.chars().take(300).chain(std::iter::once('…')).collect();
    }
    out
}
