//! `gateway` (long-running mode) and `api` (the OpenAI-compatible HTTP surface).

use serde::{Deserialize, Serialize};

use super::extra::Extra;
use crate::Secret;

/// `gateway`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayConfig {
    /// Listen address of the gateway's HTTP server.
    pub host: String,
    /// Listen port of the gateway's HTTP server.
    pub port: u16,
    /// What a restart does (`"auto"`, …).
    #[serde(alias = "restart_mode")]
    pub restart_mode: String,
    /// The periodic heartbeat that reads `HEARTBEAT.md`.
    pub heartbeat: HeartbeatConfig,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 18790,
            restart_mode: "auto".into(),
            heartbeat: HeartbeatConfig::default(),
            extra: Extra::default(),
        }
    }
}

/// `gateway.heartbeat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatConfig {
    /// Whether the heartbeat runs.
    pub enabled: bool,
    /// Seconds between two heartbeats.
    #[serde(alias = "interval_s")]
    pub interval_s: u64,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_s: 1800,
            extra: Extra::default(),
        }
    }
}

/// `api`: the OpenAI-compatible HTTP API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiConfig {
    /// Listen address.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Request timeout in seconds.
    pub timeout: f64,
    /// Bearer key clients must send (`null`/`""` = no key; then only loopback should be exposed).
    #[serde(alias = "api_key")]
    pub api_key: Option<Secret>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8900,
            timeout: 120.0,
            api_key: Some(Secret::default()),
            extra: Extra::default(),
        }
    }
}
