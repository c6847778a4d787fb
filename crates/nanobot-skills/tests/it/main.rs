//! Integration tests for nanobot-skills: precedence, requirement checks, disabled skills, summary
//! format, `$skill` injection and the embedded built-ins.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

mod builtins;
mod loading;
