//! Integration tests for nanobot-providers: real HTTP against `nanobot_testkit::MockLlm` (and aimock when
//! installed).

#![allow(clippy::unwrap_used, reason = "test helpers outside #[test] fns may panic")]

mod aimock;
mod anthropic;
mod codex;
mod common;
mod copilot;
mod diagnose;
mod factory;
mod grok;
mod local_server;
mod openai;
mod registry;
mod resilience;
mod shaping;
mod timeouts;
mod transcribe;
