//! Integration tests of nanobot-gateway: the gateway started in-process against MockLlm over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod api;
mod common;
mod heartbeat;
mod limits;
mod openai_sdk;
mod ops;
