//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing sessions.
///
/// Every variant that concerns a file names it (and the line, when one line is at fault), so the operator can
/// open the file and look.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A file-system operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done ("read", "append to", "rename", …).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A complete line of a session file is not valid JSON.
    #[error("{}:{line}: invalid JSON", path.display())]
    Json {
        /// The session file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's error (with its column).
        #[source]
        source: serde_json::Error,
    },
    /// A line is valid JSON but not what a session file may hold.
    #[error("{}:{line}: {what}", path.display())]
    Invalid {
        /// The session file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        what: String,
    },
    /// `<workspace>/.nanobot/workspace-id` holds something that cannot name a directory.
    #[error("invalid workspace id in {}: {reason}", path.display())]
    WorkspaceId {
        /// The workspace-id file.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// A session namespace (`sessions/<id>/`, its `.workspace` marker) cannot be claimed.
    #[error("{}: {what}", path.display())]
    Namespace {
        /// The folder or file at fault.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A checkpoint file exists but is not valid JSON.
    #[error("invalid checkpoint {}", path.display())]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be serialised (e.g. a map key that is not a string).
    #[error("cannot serialise {what}")]
    Serialize {
        /// What was being serialised.
        what: &'static str,
        /// The serialiser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A session key that cannot name a session (a control character). The message names the character and
    /// its position, never a path, so it can be shown to a remote client.
    #[error("{what}")]
    InvalidKey {
        /// What is wrong.
        what: String,
    },
    /// A hashed session file records another key in its first line (a SHA-256 collision or a planted file):
    /// refused rather than mixed.
    #[error("{} belongs to another session key", path.display())]
    KeyMismatch {
        /// The session file.
        path: PathBuf,
    },
    /// An empty session key was given.
    #[error("session key must not be empty")]
    EmptyKey,
    /// The shared store of gateway replicas ([`StoreOptions::shared`](crate::StoreOptions::shared)) could not
    /// bring a file up to date or publish a change (another replica changed it first, the server is away…).
    #[error(transparent)]
    Shared(#[from] nanobot_util::SharedFilesError),
    /// The blocking task that performed the I/O panicked or was cancelled.
    #[error("session I/O task failed")]
    Task(#[from] tokio::task::JoinError),
}

impl SessionError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = SessionError> = std::result::Result<T, E>;
