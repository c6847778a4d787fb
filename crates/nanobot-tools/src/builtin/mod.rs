//! The built-in tools, with the names and parameters the Python nanobot presents to the model.

use std::sync::Arc;

use crate::registry::ToolRegistry;
use crate::sandbox::Sandbox;

pub mod cli_apps;
pub mod edit;
pub mod exec;
pub mod exec_session;
pub mod fs;
pub mod guard;
pub mod patch;
pub mod search;
#[cfg(feature = "web")]
pub mod web;

pub use cli_apps::RunCliAppTool;
pub use edit::EditFileTool;
pub use exec::{
    ConfinementReport, ExecTool, LandlockSupport, SHELLS, command_of, confinement_report, landlock_support,
    warn_if_degraded,
};
pub use exec_session::{ExecSessionTool, ExecSessions, ListExecSessionsTool};
pub use fs::{ListDirTool, ReadFileTool, WriteFileTool};
pub use patch::ApplyPatchTool;
pub use search::{FindFilesTool, GlobTool, GrepTool};
#[cfg(feature = "web")]
pub use web::{WebFetchTool, WebSearchTool};

/// Registers `read_file`, `write_file`, `edit_file`, `apply_patch`, `list_dir`, `glob`, `find_files` and `grep`,
/// all sharing `sandbox`.
pub fn register_fs_tools(registry: &ToolRegistry, sandbox: &Sandbox) {
    let sb = Arc::new(sandbox.clone());
    registry.register(Arc::new(ReadFileTool::new(sb.clone())));
    registry.register(Arc::new(WriteFileTool::new(sb.clone())));
    registry.register(Arc::new(EditFileTool::new(sb.clone())));
    registry.register(Arc::new(ApplyPatchTool::new(sb.clone())));
    registry.register(Arc::new(ListDirTool::new(sb.clone())));
    registry.register(Arc::new(GlobTool::new(sb.clone())));
    registry.register(Arc::new(FindFilesTool::new(sb.clone())));
    registry.register(Arc::new(GrepTool::new(sb)));
}

/// Registers `web_search` and `web_fetch` (cargo feature `web`).
#[cfg(feature = "web")]
pub fn register_web_tools(registry: &ToolRegistry, settings: &crate::settings::WebSettings) {
    let s = Arc::new(settings.clone());
    registry.register(Arc::new(WebSearchTool::new(s.clone())));
    registry.register(Arc::new(WebFetchTool::new(s)));
}

/// Registers `exec` and its session tools ([`register_exec`]). Fails on invalid `allowPatterns`/`denyPatterns`.
pub fn register_exec_tool(
    registry: &ToolRegistry,
    settings: &crate::settings::ExecSettings,
    sandbox: &Sandbox,
) -> Result<(), crate::ToolError> {
    register_exec(
        registry,
        ExecTool::new(settings.clone(), Arc::new(sandbox.clone()))?,
    );
    Ok(())
}

/// Registers `exec` with its session tools, `exec_session` and `list_exec_sessions` (which share its sessions).
pub fn register_exec(registry: &ToolRegistry, exec: ExecTool) {
    registry.register(Arc::new(ExecSessionTool::new(exec.sessions())));
    registry.register(Arc::new(ListExecSessionsTool::new(exec.sessions())));
    registry.register(Arc::new(exec));
}
