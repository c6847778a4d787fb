//! Integration tests for nanobot-mcp: real npm MCP servers over stdio, streamable HTTP and SSE,
//! and an rmcp test server (in-process over HTTP, and as a stdio child) for the edge cases.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unreachable_pub,
    reason = "test helpers outside #[test] functions may panic"
)]

mod confined;
mod edge;
mod everything;
mod filesystem;
mod peers;
mod test_server;
