//! Integration tests of nanobot-core: the real OpenAI-compatible client against `nanobot_testkit::MockLlm`
//! over HTTP, real session files, real tools (and the real MCP `server-everything` when installed).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod agent_loop;
mod approval;
mod chat_rights;
mod commands;
mod common;
mod control_files;
mod embed;
mod heartbeat;
#[cfg(feature = "mcp")]
mod mcp;
mod memory_scopes;
mod python_compat;
mod recovery;
mod runner;
mod subagents;
