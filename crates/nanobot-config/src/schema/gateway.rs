//! `gateway` (long-running mode) and `api` (the OpenAI-compatible HTTP surface).

use serde::{Deserialize, Serialize};

use super::extra::Extra;
use crate::{Secret, SecretMap};

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
    /// Connection limits of the gateway's HTTP server (nanobot-rs). Written back only when changed.
    #[serde(skip_serializing_if = "ServerLimitsConfig::is_default")]
    pub limits: ServerLimitsConfig,
    /// The message bus between channels and the agent (nanobot-rs): in-process, or NATS JetStream shared by
    /// gateway replicas. Under `gateway` because 0.3.5 refuses unknown top-level keys (it ignores them here).
    /// Written back only when changed.
    #[serde(skip_serializing_if = "BusConfig::is_default")]
    pub bus: BusConfig,
    /// OpenTelemetry traces of turns, model calls, tool calls and channel sends (nanobot-rs), exported over
    /// OTLP/HTTP; off by default. Under `gateway` for the same reason as `bus`. Written back only when changed.
    #[serde(skip_serializing_if = "TracingConfig::is_default")]
    pub tracing: TracingConfig,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

/// `gateway.tracing`: where spans go (`docs/configuration.md`, "Traces"). Used by every command that runs turns
/// (`agent`, `gateway`, `serve`), not only the gateway.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP address (`http://localhost:4318`; `/v1/traces` is added unless the URL ends with
    /// it). Empty: off, unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    pub endpoint: String,
    /// Headers sent with every export, such as a hosted collector's API key (`${VAR}` works).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<SecretMap>,
    /// `service.name` of the spans (`OTEL_SERVICE_NAME` when empty, else `nanobot`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl TracingConfig {
    /// Whether nothing differs from the defaults (then it is not written back).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The traces URL for `endpoint` (`/v1/traces` added unless it ends with it), or `None` when it is empty.
    pub fn traces_url(endpoint: &str) -> Option<String> {
        let e = endpoint.trim().trim_end_matches('/');
        match e {
            "" => None,
            _ if e.ends_with("/v1/traces") => Some(e.to_owned()),
            _ => Some(format!("{e}/v1/traces")),
        }
    }
}

/// `gateway.bus.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusKind {
    /// The bounded in-process bus: one gateway process, nothing to install.
    #[default]
    Memory,
    /// NATS JetStream (`gateway.bus.nats`): several gateway replicas share one durable queue.
    Nats,
}

/// `gateway.bus.nats.store`: where replicas keep sessions (and, as it grows, the cron store and memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// One data directory shared by every replica (the same machine, or a shared volume).
    #[default]
    Directory,
    /// Each replica has its own home; the files live on the NATS JetStream server (`<stream>_FILES`) and the
    /// local ones are copies, brought up to date before each access (`docs/scaling.md`).
    Jetstream,
}

/// `gateway.bus`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BusConfig {
    /// `memory` (default) or `nats`.
    pub kind: BusKind,
    /// The NATS server and streams, used when `kind` is `nats`.
    #[serde(skip_serializing_if = "NatsBusConfig::is_default")]
    pub nats: NatsBusConfig,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl BusConfig {
    /// Whether nothing differs from the defaults (then it is not written back).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `gateway.bus.nats`: see `docs/scaling.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NatsBusConfig {
    /// Server URL: `nats://host:4222`, or `tls://host:4222` (the system's certificates; `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` honoured). A user and password may be in it.
    pub url: String,
    /// Authentication token, when the server wants one (`${VAR}` works).
    pub token: Option<Secret>,
    /// User name, with `password` (instead of both in `url`).
    pub user: Option<String>,
    /// Password of `user` (`${VAR}` works).
    pub password: Option<Secret>,
    /// NKey seed (`SU…`, `${VAR}` works): the server knows only its public key.
    pub nkey_seed: Option<Secret>,
    /// Credentials file (`.creds`, made by `nsc`) for a server in operator mode: a path, used as written.
    pub creds_file: Option<String>,
    /// Client certificate (PEM) presented over TLS, with `tlsKey`: a path, used as written.
    pub tls_cert: Option<String>,
    /// Private key (PEM) of `tlsCert`: a path, used as written.
    pub tls_key: Option<String>,
    /// Certificate authorities (PEM) of the server's certificate, instead of the system's store: a path, used as written.
    pub tls_ca_file: Option<String>,
    /// Start even when the server lets a client without credentials publish on the bus's subjects (anyone who
    /// reaches it could act as any user). Default `false`: the gateway refuses such a server.
    pub allow_anonymous: bool,
    /// Deployment key every replica shares (at least 32 characters; `${VAR}` works): messages and lease records
    /// on the bus are then sealed with it, so a NATS client without it can neither read nor act.
    pub key: Option<Secret>,
    /// Stream name prefix (`<stream>_IN`, `<stream>_OUT`, `<stream>_LEASES`).
    pub stream: String,
    /// Subject prefix (`<prefix>.in.<partition>`, `<prefix>.out.<channel>`).
    pub subject_prefix: String,
    /// Inbound partitions: how many sessions may run at once across all replicas (1-1024). Change it only with
    /// every gateway stopped and the inbound stream empty.
    pub partitions: u16,
    /// Seconds a taken message may go without progress before another replica gets it.
    pub ack_wait_s: u64,
    /// Seconds a lease (cron, a channel's connection) lasts without renewal: how soon another replica takes
    /// over from one that died.
    pub lease_time_s: u64,
    /// This replica's name (lease holder, logs); empty: `<host name>-<PID>`.
    pub replica: String,
    /// Seconds to wait for the server at start-up.
    pub connect_timeout_s: u64,
    /// Seconds each JetStream request may take.
    pub request_timeout_s: u64,
    /// Stream replicas in a NATS cluster (1 on a single server).
    pub stream_replicas: usize,
    /// Seconds a reply waits on the server for the replica holding its channel before the server drops it (0:
    /// until taken). Replies to a channel no replica runs any more would otherwise pile up.
    pub outbound_max_age_s: u64,
    /// `directory` (default: the replicas share one data directory) or `jetstream` (sessions on the server, each
    /// replica with its own home).
    pub store: StoreKind,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for NatsBusConfig {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            token: None,
            user: None,
            password: None,
            nkey_seed: None,
            creds_file: None,
            tls_cert: None,
            tls_key: None,
            tls_ca_file: None,
            allow_anonymous: false,
            key: None,
            stream: "NANOBOT".into(),
            subject_prefix: "nanobot".into(),
            partitions: 16,
            ack_wait_s: 30,
            lease_time_s: 15,
            replica: String::new(),
            connect_timeout_s: 10,
            request_timeout_s: 10,
            stream_replicas: 1,
            outbound_max_age_s: 86_400,
            store: StoreKind::Directory,
            extra: Extra::default(),
        }
    }
}

impl NatsBusConfig {
    /// Whether nothing differs from the defaults (then it is not written back).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 18790,
            restart_mode: "auto".into(),
            heartbeat: HeartbeatConfig::default(),
            limits: ServerLimitsConfig::default(),
            bus: BusConfig::default(),
            tracing: TracingConfig::default(),
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
    /// Connection limits of the API server (nanobot-rs). Written back only when changed.
    #[serde(skip_serializing_if = "ServerLimitsConfig::is_default")]
    pub limits: ServerLimitsConfig,
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
            limits: ServerLimitsConfig::default(),
            extra: Extra::default(),
        }
    }
}

/// `api.limits` and `gateway.limits`: what one HTTP client may hold of a server nanobot opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerLimitsConfig {
    /// Seconds a client has to send a complete request head, counted from the connection's start or the end
    /// of its previous response (so it also bounds an idle kept-alive connection).
    #[serde(alias = "header_read_timeout")]
    pub header_read_timeout: f64,
    /// Seconds a connection may wait for the client without a byte arriving, while the server is not busy
    /// answering it (a request body that stops coming, an idle kept-alive connection).
    #[serde(alias = "idle_timeout")]
    pub idle_timeout: f64,
    /// Connections one client address may hold open at once; more are refused with 503.
    #[serde(alias = "max_connections_per_client")]
    pub max_connections_per_client: u32,
    /// Largest request body of the main POST route (`/v1/chat/completions`), in bytes; larger ones get 413.
    #[serde(alias = "max_body_bytes")]
    pub max_body_bytes: u64,
    /// Largest request body of every other route, in bytes.
    #[serde(alias = "max_other_body_bytes")]
    pub max_other_body_bytes: u64,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ServerLimitsConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: 10.0,
            idle_timeout: 60.0,
            max_connections_per_client: 64,
            max_body_bytes: 20 * 1024 * 1024,
            max_other_body_bytes: 64 * 1024,
            extra: Extra::default(),
        }
    }
}

impl ServerLimitsConfig {
    /// Whether nothing differs from the defaults (then it is not written back).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}
