//! [`MemoryError`]: what can go wrong while reading or writing memory.

use std::path::PathBuf;

/// Why a memory operation failed.
///
/// A model that does not answer as asked is *not* an error: consolidation falls back to a raw archive and Dream
/// reports what it did. These errors are about storage, the index and unreachable models.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A file-system operation on `path` failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done (`reading`, `appending to`, …).
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something that cannot be read back (the message says what and where).
    #[error("{}:{line}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The 1-based line (0 when the whole file is meant).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Writing JSON failed.
    #[error("encoding {what} as JSON")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The session store failed.
    #[error("session store")]
    Session(#[from] nanobot_sessions::SessionError),
    /// The model could not be reached or refused the request.
    #[error("model call")]
    Provider(#[from] nanobot_types::ProviderError),
    /// The search index (SQLite) failed.
    #[cfg(feature = "search")]
    #[error("search index {}", path.display())]
    Index {
        /// The index database.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: rusqlite::Error,
    },
    /// A Dream record that does not exist was asked for.
    #[error("no Dream record {0}")]
    NoSuchRecord(u64),
    /// A background task could not finish (it panicked or was cancelled).
    #[error("background task")]
    Task(#[from] tokio::task::JoinError),
    /// The shared store of the memory files (gateway replicas, [`crate::MemorySync`]) failed; the message names
    /// the file.
    #[error(transparent)]
    Shared(#[from] nanobot_util::SharedFilesError),
}

impl MemoryError {
    /// Shorthand for [`MemoryError::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
