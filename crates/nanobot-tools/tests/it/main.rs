//! Integration tests of nanobot-tools: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may unwrap")]

mod cli_apps;
mod confine;
mod exec;
mod exec_sessions;
mod fs;
mod fs_handles;
mod fuzz_arguments;
mod registry;
#[cfg(feature = "web")]
mod web;

use std::path::Path;

use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ToolContext, ToolRegistry, builtin};

/// A registry with the file tools over `ws` (restricted to it).
pub fn fs_registry(ws: &Path, restrict: bool) -> ToolRegistry {
    let reg = ToolRegistry::default();
    builtin::register_fs_tools(&reg, &Sandbox::new(ws, restrict));
    reg
}

/// A context for `ws`.
pub fn ctx(ws: &Path) -> ToolContext {
    ToolContext::new(ws).with_session("cli:test")
}
