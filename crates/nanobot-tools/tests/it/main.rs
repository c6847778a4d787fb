//! Integration tests of nanobot-tools: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may unwrap")]

mod cli_apps;
mod confine;
mod credentials;
mod edit_compat;
mod effects;
mod egress;
mod exec;
mod exec_sessions;
mod fs;
mod fs_handles;
mod fuzz_arguments;
mod registry;
mod schemas;
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

/// Whether process `pid` is gone (or a zombie, or has SIGKILL pending: delivery is asynchronous).
pub(crate) fn process_ended(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let pending = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(0);
    let state = field("State:");
    status.is_empty()
        || state.starts_with('Z')
        || state.starts_with('X')
        || (pending("SigPnd:") | pending("ShdPnd:")) & (1 << 8) != 0
}
