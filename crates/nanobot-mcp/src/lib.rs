//! MCP client for nanobot: every server under `tools.mcpServers` becomes tools for the agent.
//!
//! This crate owns the three transports (stdio child processes, the legacy HTTP+SSE transport
//! that rmcp no longer ships, and streamable HTTP), the [`McpManager`] that connects all
//! configured servers lazily and concurrently, and the wrappers that turn a server's tools,
//! resources and prompts into [`nanobot_tools::Tool`]s named `mcp_<server>_<tool>`,
//! `mcp_<server>_resource_<name>` and `mcp_<server>_prompt_<name>`. Stdio servers are started in the kernel
//! confinement `exec` gets ([`confine`]: the data directory hidden, writes only where the server's config says),
//! unless the user marks one `trusted`.
//!
//! It must not know about the agent loop, providers, channels or the config file's location:
//! the caller passes the parsed config, the parent environment, the media directory and the
//! SSRF guard in, and registers the returned tools itself.
//!
//! # Example
//!
//! ```
//! use nanobot_mcp::{McpManager, McpOptions, RawServer, ServerSpec, TransportKind};
//!
//! let spec = ServerSpec::resolve(
//!     "everything",
//!     RawServer {
//!         command: Some("node".into()),
//!         args: vec!["server-everything/dist/index.js".into(), "stdio".into()],
//!         enabled_tools: Some(vec!["echo".into()]),
//!         ..RawServer::default()
//!     },
//! )?;
//! assert_eq!(spec.transport.kind(), TransportKind::Stdio);
//! assert_eq!(nanobot_mcp::naming::tool_name("everything", "echo"), "mcp_everything_echo");
//!
//! // Nothing is started until `connect()` (the agent calls it before a turn).
//! let manager = McpManager::new(vec![spec], McpOptions::default());
//! let status = manager.status();
//! assert!(!status[0].connected());
//! assert!(manager.tools().is_empty());
//! # Ok::<(), nanobot_mcp::McpError>(())
//! ```

mod client;
pub mod confine;
mod content;
mod error;
mod manager;
pub mod naming;
pub mod schema;
mod spec;
pub mod transport;
mod wrap;

pub use confine::StdioConfinement;
pub use content::Rendered;
pub use error::McpError;
pub use manager::{
    ConnectionState, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESULT_CHARS, DEFAULT_RETRY_INTERVAL, McpManager,
    McpOptions, ServerStatus,
};
/// The HTTP client library named by this crate's API (the optional shared client in the manager's settings),
/// re-exported so an embedder can pass a client of exactly this version without depending on reqwest itself.
pub use reqwest;
pub use spec::{DEFAULT_TOOL_TIMEOUT, RawServer, SecretMap, ServerSpec, TransportKind, TransportSpec};
pub use transport::{INHERITED_ENV, LegacySseTransport, child_env};
pub use wrap::McpTool;
