//! Integration tests of nanobot-core: the real OpenAI-compatible client against `nanobot_testkit::MockLlm`
//! over HTTP, real session files, real tools (and the real MCP `server-everything` when installed).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod agent_loop;
mod approval;
#[cfg(all(feature = "cron", feature = "mcp"))] // drives cron jobs and an MCP server
mod authority;
#[cfg(feature = "cron")] // also drives cron jobs
mod chat_rights;
mod commands;
mod common;
#[cfg(feature = "cron")] // also drives cron jobs
mod control_files;
mod embed;
mod exec_sessions;
mod goals;
mod heartbeat;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "cron")] // also drives cron jobs
mod memory_scopes;
mod my_tool;
mod python_compat;
mod recovery;
mod runner;
mod session_tools;
#[cfg(feature = "cron")] // also drives cron jobs
mod subagents;
mod usage;
