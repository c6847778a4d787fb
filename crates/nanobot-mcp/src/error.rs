//! The crate's error type.

use std::time::Duration;

/// Everything that can go wrong while configuring, connecting to or calling an MCP server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server's configuration is unusable (missing command/url, bad header, ...).
    #[error("MCP server '{server}': invalid configuration: {reason}")]
    Config {
        /// The configured server name.
        server: String,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The stdio server's process could not be started.
    #[error("MCP server '{server}': cannot start `{command}`")]
    Spawn {
        /// The configured server name.
        server: String,
        /// The command that failed to start.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The URL of an HTTP server was refused by the SSRF guard.
    #[error("MCP server '{server}': URL {url} is not allowed")]
    Blocked {
        /// The configured server name.
        server: String,
        /// The refused URL.
        url: String,
        /// Why the guard refused it.
        #[source]
        source: nanobot_tools::ssrf::SsrfError,
    },
    /// An HTTP request of the legacy SSE transport failed.
    #[error("MCP server '{server}': HTTP error on {url}")]
    Http {
        /// The configured server name.
        server: String,
        /// The URL being requested.
        url: String,
        /// The underlying error.
        #[source]
        source: reqwest::Error,
    },
    /// The legacy SSE handshake did not produce a usable `endpoint` event.
    #[error("MCP server '{server}': SSE handshake failed: {reason}")]
    SseHandshake {
        /// The configured server name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// The MCP `initialize` handshake failed.
    #[error("MCP server '{server}': initialisation failed")]
    Initialize {
        /// The configured server name.
        server: String,
        /// The rmcp error.
        #[source]
        source: Box<rmcp::service::ClientInitializeError>,
    },
    /// Connecting (spawn + handshake + listing) took longer than allowed.
    #[error("MCP server '{server}': no answer within {timeout:?} while connecting")]
    ConnectTimeout {
        /// The configured server name.
        server: String,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// A request to a connected server failed (transport closed, protocol error, ...).
    #[error("MCP server '{server}': {operation} failed")]
    Service {
        /// The configured server name.
        server: String,
        /// The MCP operation (e.g. `tools/list`).
        operation: &'static str,
        /// The rmcp error.
        #[source]
        source: Box<rmcp::ServiceError>,
    },
    /// A request did not finish within the configured `toolTimeout`.
    #[error("MCP server '{server}': {operation} timed out after {timeout:?}")]
    Timeout {
        /// The configured server name.
        server: String,
        /// The MCP operation.
        operation: String,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// The server is not connected (it failed to start or has exited).
    #[error("MCP server '{server}' is not connected")]
    NotConnected {
        /// The configured server name.
        server: String,
    },
    /// Saving an image returned by a tool failed.
    #[error("cannot save MCP media to {path}")]
    Media {
        /// The file that could not be written.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
