//! Errors of the ledger.

use std::path::PathBuf;

/// Why usage could not be recorded or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// Reading or writing a ledger file failed.
    #[error("usage ledger: cannot {op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The shared store (replicas) failed.
    #[error("usage ledger: {0}")]
    Shared(#[from] nanobot_util::SharedFilesError),
}
