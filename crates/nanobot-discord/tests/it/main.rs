//! Integration tests of nanobot-discord: the real serenity client against a fake Discord gateway + REST server.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod e2e;
mod fake;
