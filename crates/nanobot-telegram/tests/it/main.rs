//! Integration tests of nanobot-telegram: end to end against the `telegram-test-api` emulator.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod e2e;
