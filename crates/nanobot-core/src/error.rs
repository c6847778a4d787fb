//! [`CoreError`]: what can go wrong while building or running the agent.

use std::path::PathBuf;

/// A boxed error, for hook and memory-service implementations that have their own error types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why building or running the agent failed.
///
/// A failing *model call* inside a turn does not surface here: it ends the turn with a clear message to the user
/// ([`crate::StopReason::Error`]). These errors are about set-up, storage and the bus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// The provider could not be resolved or a model call failed outside a turn.
    #[error("LLM provider: {0}")]
    Provider(#[from] nanobot_providers::ProviderError),
    /// Reading or writing a session file failed.
    #[error("session store: {0}")]
    Session(#[from] nanobot_sessions::SessionError),
    /// The cron store or a schedule was rejected.
    #[cfg(feature = "cron")]
    #[error("cron: {0}")]
    Cron(#[from] nanobot_cron::CronError),
    /// The built-in skills could not be written.
    #[error("skills: {0}")]
    Skills(#[from] nanobot_skills::SkillsError),
    /// A tool could not be set up.
    #[error("tool set-up: {0}")]
    Tool(#[from] nanobot_tools::ToolError),
    /// The message bus is closed.
    #[error("message bus: {0}")]
    Bus(#[from] nanobot_bus::BusError),
    /// A setting is missing or invalid; the message names it.
    #[error("configuration: {0}")]
    Config(String),
    /// The embedding builder lacks something; the message names it.
    #[error("agent builder: {0}")]
    Builder(String),
    /// A file operation failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The agent loop has stopped; the request was not processed.
    #[error("the agent loop has stopped")]
    Stopped,
    /// The turn was cancelled (by `/stop` or shutdown).
    #[error("the turn was cancelled")]
    Cancelled,
}

impl CoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
