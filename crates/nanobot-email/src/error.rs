//! The crate's error type.

use std::time::Duration;

use nanobot_channels::ChannelError;

use crate::NAME;

/// What went wrong talking to the mail servers or with the channel's local files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmailError {
    /// `channels.email` is unusable; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Loading the trusted CA certificates or building the TLS client failed.
    #[error("TLS set-up: {0}")]
    Tls(String),
    /// The TCP connection or TLS handshake to `endpoint` failed.
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        /// `host:port`.
        endpoint: String,
        /// The I/O or TLS error.
        #[source]
        source: std::io::Error,
    },
    /// `endpoint` did not answer `what` within the time limit.
    #[error("{endpoint}: no answer to {what} within {limit:?}")]
    Timeout {
        /// `host:port`.
        endpoint: String,
        /// The step that timed out (`connect`, `login`, `IDLE`, …).
        what: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The server rejected the user name or password.
    #[error("{endpoint}: login as {username:?} rejected: {message}")]
    Login {
        /// `host:port`.
        endpoint: String,
        /// The user name (never the password).
        username: String,
        /// The server's answer.
        message: String,
    },
    /// The server refused something the channel needs (STARTTLS, the mailbox, a command).
    #[error("{endpoint}: {message}")]
    Protocol {
        /// `host:port`.
        endpoint: String,
        /// What was refused.
        message: String,
    },
    /// An IMAP command failed.
    #[error("IMAP {endpoint}: {what}: {source}")]
    Imap {
        /// `host:port`.
        endpoint: String,
        /// The command.
        what: &'static str,
        /// The client's error.
        #[source]
        source: async_imap::error::Error,
    },
    /// Sending by SMTP failed.
    #[error("SMTP {endpoint}: {message}")]
    Smtp {
        /// `host:port`.
        endpoint: String,
        /// lettre's error and the server's reply, cleaned of the password in every form AUTH sends it (a server
        /// that quotes what it got would quote it) and bounded in length.
        message: String,
        /// The server refused for good (a 5xx reply): trying again will not help.
        permanent: bool,
        /// The server refused the credentials (535, 534 or 530).
        auth_failure: bool,
    },
    /// Building the outgoing message failed (bad address, attachment).
    #[error("composing the reply: {0}")]
    Compose(String),
    /// Reading or writing a local file (state file, media) failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The state file exists but is not what this crate writes.
    #[error("{path}: not a valid e-mail state file: {message}")]
    State {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl EmailError {
    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// True when trying again later may succeed (network trouble, a busy server).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } | Self::Imap { .. } => true,
            Self::Smtp { permanent, .. } => !permanent,
            _ => false,
        }
    }
}

impl From<EmailError> for ChannelError {
    fn from(e: EmailError) -> Self {
        let channel = NAME.to_string();
        match e {
            EmailError::Config(message) => ChannelError::Config { channel, message },
            EmailError::Login { .. } => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            EmailError::Smtp {
                auth_failure: true, ..
            } => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            EmailError::Io { path, source } => ChannelError::Io { path, source },
            e if e.is_transient() => ChannelError::Transient {
                channel,
                source: Box::new(e),
            },
            // A server refusing STARTTLS or a mailbox, a broken state file, a TLS set-up problem: retried with
            // backoff too (the operator may fix the server side), but reported as is.
            e @ (EmailError::Protocol { .. } | EmailError::State { .. } | EmailError::Tls(_)) => {
                ChannelError::Transient {
                    channel,
                    source: Box::new(e),
                }
            }
            e => ChannelError::Rejected {
                channel,
                source: Box::new(e),
            },
        }
    }
}

impl EmailError {
    /// An SMTP failure from lettre's `source`, its text cleaned of `secrets` ([`nanobot_channels::server_text`]).
    pub(crate) fn smtp(endpoint: String, source: &lettre::transport::smtp::Error, secrets: &[&str]) -> Self {
        Self::Smtp {
            endpoint,
            message: nanobot_channels::server_text(&nanobot_util::error_chain(source), secrets),
            permanent: source.is_permanent(),
            auth_failure: is_smtp_auth_failure(source),
        }
    }
}

/// SMTP 535 (authentication credentials invalid) and 534/530 (authentication required / too weak).
fn is_smtp_auth_failure(e: &lettre::transport::smtp::Error) -> bool {
    e.status()
        .is_some_and(|code| matches!(code.to_string().as_str(), "535" | "534" | "530"))
}
