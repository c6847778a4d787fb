//! Integration tests of nanobot-gateway: the gateway started in-process against MockLlm over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod api;
mod common;
mod email;
mod heartbeat;
mod isolation;
mod limits;
mod matrix;
mod mattermost;
mod mochat;
mod msteams;
mod napcat;
mod openai_sdk;
mod ops;
mod qq;
mod replicas;
mod restart;
mod signal;
mod telegram_attacks;
mod websocket;
mod webui_browser;
mod wecom;
mod weixin;
mod whatsapp;
// nanobot-email's harness for real mail servers (Dovecot, aiosmtpd); not every helper is used here.
#[allow(dead_code, unreachable_pub)]
#[path = "../../../nanobot-email/tests/it/peers.rs"]
mod email_peers;
