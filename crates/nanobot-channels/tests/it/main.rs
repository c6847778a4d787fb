//! Integration tests of nanobot-channels.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

#[cfg(feature = "download")]
mod download;
mod layering;
mod manager;
mod pairing_compat;
