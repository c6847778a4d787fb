//! The crate's error type.

use std::path::PathBuf;

use nanobot_channels::ChannelError;

use crate::NAME;

/// What went wrong with WhatsApp: the bridge, the linked device or the configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WhatsAppError {
    /// `channels.whatsapp` is unusable; the message names the key.
    #[error("{0}")]
    Config(String),
    /// The Node.js program could not be started.
    #[error("cannot start {node:?} (Node.js 20 or later is needed for the WhatsApp bridge): {source}")]
    NodeMissing {
        /// The program tried.
        node: PathBuf,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// The bridge's npm packages are not installed.
    #[error("the WhatsApp bridge's npm packages are missing in {dir}: {detail}")]
    NotInstalled {
        /// Where they were looked for.
        dir: PathBuf,
        /// What is missing and what to do.
        detail: String,
    },
    /// Reading or writing a local file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The bridge process failed (did not start listening, exited, broke the protocol).
    #[error("WhatsApp bridge: {0}")]
    Bridge(String),
    /// WhatsApp logged this linked device out (from the phone, or after a long time offline).
    #[error(
        "WhatsApp logged this device out: link it again with `nanobot channels login whatsapp` (the old credentials \
         are no longer valid)"
    )]
    LoggedOut,
    /// No device is linked yet (the bridge asked for a QR scan).
    #[error(
        "WhatsApp is not linked yet: run `nanobot channels login whatsapp` and scan the QR code with your phone"
    )]
    NotLinked,
    /// The WhatsApp connection closed.
    #[error("WhatsApp connection closed: {0}")]
    Closed(String),
    /// A step took longer than its bound.
    #[error("WhatsApp: timed out {0}")]
    Timeout(&'static str),
    /// The QR code could not be rendered.
    #[error("cannot render the QR code: {0}")]
    Qr(String),
}

impl WhatsAppError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

impl From<WhatsAppError> for ChannelError {
    fn from(e: WhatsAppError) -> Self {
        let channel = NAME.to_string();
        match e {
            WhatsAppError::Config(message) => ChannelError::Config { channel, message },
            e @ (WhatsAppError::NodeMissing { .. } | WhatsAppError::NotInstalled { .. }) => {
                ChannelError::Config {
                    channel,
                    message: e.to_string(),
                }
            }
            e @ (WhatsAppError::LoggedOut | WhatsAppError::NotLinked) => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            WhatsAppError::Io { path, source } => ChannelError::Io {
                path: path.display().to_string(),
                source,
            },
            e => ChannelError::Transient {
                channel,
                source: Box::new(e),
            },
        }
    }
}
