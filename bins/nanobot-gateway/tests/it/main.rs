//! End-to-end tests of the `nanobot-gateway` binary: started as a process against MockLlm over loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod logs;
mod process;
