//! The WeCom channel against the testkit's fake WeCom AI-bot server (the fake itself is checked by
//! wecom-aibot-sdk-python and by the Python nanobot 0.3.5's own WeCom channel in the testkit's tests): a real
//! WebSocket and real HTTP media downloads on loopback, under the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
