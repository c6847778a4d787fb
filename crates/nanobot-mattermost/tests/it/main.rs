//! The Mattermost channel against the testkit's fake Mattermost server (the fake itself is checked by
//! mattermostdriver and by the Python nanobot 0.3.5's own Mattermost channel in the testkit's tests): real HTTP
//! and a real WebSocket on loopback, under the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
