//! Integration tests of nanobot-runtime: agents composed from real `config.json` values against
//! `nanobot_testkit::MockLlm` over HTTP, real session files, real cron stores.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod config;
mod durable_bus;
mod exec_confinement;
mod presets;
mod system_jobs;
mod triggers;
