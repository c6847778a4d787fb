//! The crate's error type.

/// What went wrong in the websocket channel's own work (stores, media).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebSocketError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A store the WebUI reads through failed.
    #[error("{what}: {source}")]
    Store {
        /// What was being read.
        what: &'static str,
        /// The store's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store given to the channel cannot do this (e.g. create sessions for forks).
    #[error("the WebUI store cannot {0}")]
    Unsupported(&'static str),
    /// An attachment was refused (the reason is the 0.3.5 wire word: `mime`, `size`, `decode`, …).
    #[error("attachment rejected: {0}")]
    Attachment(&'static str),
}
