//! The crate's error type.

use std::path::PathBuf;
use std::time::Duration;

use crate::sandbox::SandboxError;
use crate::ssrf::SsrfError;

/// Why a tool call (or a guard in front of it) failed.
///
/// The registry turns every `ToolError` into an error *result* for the model (with
/// [`crate::ERROR_HINT`] appended); it never aborts the agent's turn. The text the model sees is
/// the error followed by its source chain (see [`ToolError::model_text`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// Arguments that do not fit the tool's schema or its own rules.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// A path outside the sandbox, or one that cannot be resolved.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A URL refused by the SSRF guard.
    #[error(transparent)]
    Ssrf(#[from] SsrfError),
    /// A file-system operation on `path` failed.
    #[error("{op} {path}", path = path.display())]
    Io {
        /// What was being done (`reading`, `writing`, …).
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The exec safety guard refused a command.
    #[error("Command blocked by safety guard ({0})")]
    Blocked(String),
    /// The operation ran out of time.
    #[error("timed out after {} seconds", .0.as_secs())]
    Timeout(Duration),
    /// The turn was cancelled (for example by `/stop`).
    #[error("cancelled")]
    Cancelled,
    /// An HTTP request failed.
    #[error("HTTP request failed")]
    Http(#[from] reqwest::Error),
    /// The tool failed for a reason it explains itself.
    #[error("{0}")]
    Failed(String),
    /// The tool panicked; the panic was caught.
    #[error("tool panicked: {0}")]
    Panicked(String),
}

impl ToolError {
    /// Shorthand for [`ToolError::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The error and its source chain, `: `-separated: what the model reads.
    pub fn model_text(&self) -> String {
        nanobot_util::error_chain(self)
    }
}
