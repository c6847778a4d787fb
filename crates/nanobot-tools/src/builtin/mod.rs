//! The built-in tools, with the names and parameters the Python nanobot presents to the model.

use std::sync::Arc;

use crate::registry::ToolRegistry;
use crate::sandbox::Sandbox;

pub mod fs;
pub mod guard;
pub mod search;

pub use fs::{EditFileTool, ListDirTool, ReadFileTool, WriteFileTool};
pub use search::{GlobTool, GrepTool};

/// Registers `read_file`, `write_file`, `edit_file`, `list_dir`, `glob` and `grep`, all sharing
/// `sandbox`.
pub fn register_fs_tools(registry: &ToolRegistry, sandbox: &Sandbox) {
    let sb = Arc::new(sandbox.clone());
    registry.register(Arc::new(ReadFileTool::new(sb.clone())));
    registry.register(Arc::new(WriteFileTool::new(sb.clone())));
    registry.register(Arc::new(EditFileTool::new(sb.clone())));
    registry.register(Arc::new(ListDirTool::new(sb.clone())));
    registry.register(Arc::new(GlobTool::new(sb.clone())));
    registry.register(Arc::new(GrepTool::new(sb)));
}
