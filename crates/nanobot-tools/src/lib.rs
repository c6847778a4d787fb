//! # nanobot-tools
//!
//! What the agent can do, and the guards around it.
//!
//! This crate owns the [`Tool`] trait (and [`TypedTool`] for tools whose JSON Schema derives
//! from an args struct), schema-driven argument casting and validation ([`ArgsSchema`]), the
//! [`ToolRegistry`] that runs tools safely (errors and panics become error results with
//! [`ERROR_HINT`], empty output gets a marker, long output is saved to the workspace), the
//! built-in tools ([`builtin`]: `read_file`, `write_file`, `edit_file`, `list_dir`, `glob`,
//! `grep`, `exec`, `web_search`, `web_fetch`), the path [`sandbox`] and the [`ssrf`] guard, the kernel
//! confinement of what runs code ([`confine`]) and egress by domain for it ([`egress`]: a proxy and the bridge a
//! sandbox without network runs first).
//!
//! It must not know about configuration files, the environment, channels or the agent loop:
//! the agent core resolves config into the [`settings`] structs and passes them in. Providers
//! see tools only as [`nanobot_types::ToolSpec`].
//!
//! ```
//! use std::sync::Arc;
//! use nanobot_tools::{builtin, ToolContext, ToolRegistry};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let ws = tempfile::tempdir().unwrap();
//! let reg = ToolRegistry::default();
//! let sandbox = nanobot_tools::sandbox::Sandbox::new(ws.path(), true);
//! builtin::register_fs_tools(&reg, &sandbox);
//! let ctx = ToolContext::new(ws.path());
//! reg.execute("write_file", serde_json::json!({"path": "a.txt", "content": "hi\n"}), &ctx).await;
//! let out = reg.execute("read_file", serde_json::json!({"path": "a.txt"}), &ctx).await;
//! assert_eq!(out.text.lines().next(), Some("1| hi"));
//! // escaping the workspace is refused
//! let out = reg.execute("read_file", serde_json::json!({"path": "../x"}), &ctx).await;
//! assert!(out.is_error);
//! # });
//! ```

pub mod builtin;
/// The HTTP client library named by this crate's API (the SSRF guard's client builder), re-exported so an
/// embedder uses exactly this version without depending on reqwest itself.
pub use reqwest;
pub mod confine;
pub mod egress;
mod error;
pub mod fuzzing;
mod registry;
pub mod sandbox;
mod schema;
pub mod settings;
/// The SSRF guard (the `nanobot-ssrf` crate, shared with MCP and the channels that fetch remote media).
pub use nanobot_ssrf as ssrf;
mod tool;
mod validate;

pub use error::ToolError;
pub use registry::{ERROR_HINT, TOOL_RESULTS_DIR, ToolRegistry};
pub use schema::{ArgsSchema, TypedTool, cast_value, parse_args, schema_for};
pub use settings::{
    ExecSandbox, ExecSettings, FsSettings, LOCAL_TOOLS, RegistrySettings, SearchProvider, SearchSettings,
    Secret, ToolSelection, WebSettings,
};
pub use tool::{CodeRun, Effects, Extensions, HiddenPaths, Tool, ToolContext, ToolOutput};

/// Installs ring as the process's rustls crypto provider (needed before building a `reqwest`
/// client); a no-op when one is installed already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
