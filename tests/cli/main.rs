//! End-to-end tests of the `nanobot` binary: each test runs the built executable with a temporary HOME
//! (children get HOME and the environment through `Command::env`; the test process env is never changed),
//! against `MockLlm` from nanobot-testkit over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

mod agent;
mod basics;
mod compat_flags;
mod compat_python;
mod cron;
mod doctor;
mod egress;
mod eval;
mod gateway;
mod help_compat;
mod interactive;
mod interrupt;
mod local_first;
mod mcp;
mod provider;
mod replicas;
mod service;
mod store;
mod support;
mod traces;
mod usage;
mod webui;
mod whatsapp;
mod wizard;
