//! Integration tests of nanobot-slack: Socket Mode against a local fake, the Web API against the `emulate` Slack
//! emulator (npm `emulate@0.12.2` on Node 22).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod e2e;
mod harness;
