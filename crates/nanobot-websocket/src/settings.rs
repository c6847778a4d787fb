//! `channels.websocket`: the raw block (0.3.5's keys and defaults) and the validated [`WebSocketSettings`].

use std::net::IpAddr;

use ipnet::IpNet;
use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::NAME;

/// The default port (0.3.5: `http://127.0.0.1:8765`).
pub const DEFAULT_PORT: u16 = 8765;
/// Default lifetime of an issued token, in seconds.
pub const DEFAULT_TOKEN_TTL_S: u64 = 300;
/// Default largest inbound frame: room for four ~6 MB images as base64 data URLs.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 37_748_736;

/// `channels.websocket` as written in `config.json` (camelCase; snake_case keys are accepted too).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[non_exhaustive]
pub struct WebSocketConfig {
    /// Whether the channel runs (0.3.5 default: on, when the block exists).
    pub enabled: bool,
    /// Interface to bind.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Listen on this Unix socket instead of TCP (absolute path; the socket is made `0600`).
    pub unix_socket_path: String,
    /// Path of the WebSocket upgrade (the page is served on `/` either way).
    pub path: String,
    /// Public `ws://`/`wss://` URL the bootstrap returns instead of deriving one from `Host`.
    pub public_ws_url: String,
    /// Static token accepted as `?token=` on the upgrade.
    pub token: Secret,
    /// Path where `GET` issues a short-lived one-time token.
    pub token_issue_path: String,
    /// Secret a token request must present (`Authorization: Bearer …` or `X-Nanobot-Auth`).
    pub token_issue_secret: Secret,
    /// Authentication asserted by a reverse proxy at a trusted address.
    pub trusted_proxy_auth: Option<TrustedProxyAuthConfig>,
    /// Lifetime of issued tokens, seconds (30–86400).
    pub token_ttl_s: u64,
    /// Refuse upgrades without a valid (static or issued) token.
    pub websocket_requires_token: bool,
    /// Client ids allowed to connect (`"*"` = everyone).
    pub allow_from: Vec<String>,
    /// Stream answers as `delta` events.
    pub streaming: bool,
    /// Largest inbound frame, bytes (1024–41943040).
    pub max_message_bytes: usize,
    /// Seconds between pings.
    pub ping_interval_s: f64,
    /// Seconds to wait for a pong.
    pub ping_timeout_s: f64,
    /// TLS certificate chain (PEM) for `wss://`; set together with `sslKeyfile`.
    pub ssl_certfile: String,
    /// TLS private key (PEM) for `wss://`; set together with `sslCertfile`.
    pub ssl_keyfile: String,
    /// Seconds a client has for its TLS handshake and for each request head (0.1–600; ours, not 0.3.5's).
    pub header_read_timeout_s: f64,
    /// Connections one client address may hold before their WebSocket upgrade (1–4096; ours, not 0.3.5's).
    pub max_connections_per_client: usize,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            host: "127.0.0.1".into(),
            port: DEFAULT_PORT,
            unix_socket_path: String::new(),
            path: "/".into(),
            public_ws_url: String::new(),
            token: Secret::default(),
            token_issue_path: String::new(),
            token_issue_secret: Secret::default(),
            trusted_proxy_auth: None,
            token_ttl_s: DEFAULT_TOKEN_TTL_S,
            websocket_requires_token: true,
            allow_from: vec!["*".into()],
            streaming: true,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            ping_interval_s: 20.0,
            ping_timeout_s: 20.0,
            ssl_certfile: String::new(),
            ssl_keyfile: String::new(),
            header_read_timeout_s: crate::HEADER_READ_TIMEOUT.as_secs_f64(),
            max_connections_per_client: crate::MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

/// `channels.websocket.trustedProxyAuth`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[non_exhaustive]
pub struct TrustedProxyAuthConfig {
    /// Peer networks whose requests may assert authentication.
    pub trusted_peer_cidrs: Vec<String>,
    /// Header the proxy sets on authenticated requests.
    pub assertion_header: String,
}

impl WebSocketConfig {
    /// Reads the raw `channels.websocket` block. Errors name the key (`channels.websocket.port: …`).
    pub fn from_json(block: &Value) -> Result<Self, ChannelError> {
        let block = camel_keys(block);
        serde_path_to_error::deserialize(&block).map_err(|e| {
            let path = e.path().to_string();
            bad(format!("channels.websocket.{path}: {}", e.inner()))
        })
    }
}

/// snake_case keys → camelCase (0.3.5 accepts both spellings).
fn camel_keys(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, val) in map {
                let mut key = String::with_capacity(k.len());
                let mut up = false;
                for c in k.chars() {
                    if c == '_' {
                        up = true;
                    } else if up {
                        key.extend(c.to_uppercase());
                        up = false;
                    } else {
                        key.push(c);
                    }
                }
                // allowFrom entries and header names are values, not keys: only recurse into objects.
                out.insert(key, camel_keys(val));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn bad(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.into(),
        message,
    }
}

/// Where the channel listens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Listen {
    /// A TCP address (host as configured, resolved at bind time).
    Tcp {
        /// Host name or address.
        host: String,
        /// Port (0 = any free port).
        port: u16,
    },
    /// A Unix socket path.
    Unix(std::path::PathBuf),
}

/// Authentication asserted by a trusted reverse proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxy {
    /// Peers allowed to assert.
    pub networks: Vec<IpNet>,
    /// The assertion header (lowercase).
    pub header: String,
}

impl TrustedProxy {
    /// True when `peer` is trusted and presented a non-empty assertion.
    pub fn admits(&self, peer: Option<IpAddr>, header_value: Option<&str>) -> bool {
        let Some(peer) = peer else { return false };
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        self.networks.iter().any(|n| n.contains(&peer)) && header_value.is_some_and(|v| !v.trim().is_empty())
    }
}

/// The validated settings of the websocket channel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebSocketSettings {
    /// Where to listen.
    pub listen: Listen,
    /// The upgrade path (normalised: leading `/`, no trailing `/` except the root).
    pub path: String,
    /// `publicWsUrl`, if set.
    pub public_ws_url: Option<String>,
    /// Static token (empty = none).
    pub token: Secret,
    /// Token issue route (normalised), if any.
    pub token_issue_path: Option<String>,
    /// Secret for the token issue route and the bootstrap (falls back to `token`).
    pub token_issue_secret: Secret,
    /// Trusted proxy authentication.
    pub trusted_proxy: Option<TrustedProxy>,
    /// Lifetime of issued tokens.
    pub token_ttl: std::time::Duration,
    /// Upgrades need a valid token.
    pub requires_token: bool,
    /// `allowFrom`.
    pub allow_from: Vec<String>,
    /// Ask the agent for streamed answers.
    pub streaming: bool,
    /// Largest inbound frame.
    pub max_message_bytes: usize,
    /// Ping interval.
    pub ping_interval: std::time::Duration,
    /// How long after a ping the peer has to answer (any frame counts): a connection silent for
    /// `ping_interval + ping_timeout` is closed.
    pub ping_timeout: std::time::Duration,
    /// Bound on a client's TLS handshake and on receiving each request head (default
    /// [`crate::HEADER_READ_TIMEOUT`]); slow-header connections are closed.
    pub header_read_timeout: std::time::Duration,
    /// Most connections one client address may hold in their HTTP phase (default
    /// [`crate::MAX_CONNECTIONS_PER_CLIENT`]); see the `listen` module.
    pub max_connections_per_client: usize,
    /// Serve `wss://`/`https://` with this PEM certificate chain and private key (`sslCertfile`, `sslKeyfile`).
    pub tls: Option<TlsFiles>,
}

/// The PEM files of the listener's TLS certificate (`sslCertfile`) and key (`sslKeyfile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: std::path::PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
}

/// Normalises a configured HTTP path: leading `/`, no trailing `/` (except the root).
pub(crate) fn normalize_path(p: &str) -> String {
    let p = p.trim();
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".into()
    } else if trimmed.starts_with('/') {
        trimmed.into()
    } else {
        format!("/{trimmed}")
    }
}

/// True for `localhost`, loopback addresses and Unix sockets' empty host.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    let h = h.trim_end_matches('.').to_ascii_lowercase();
    if h == "localhost" || h.ends_with(".localhost") {
        return true;
    }
    h.parse::<IpAddr>().is_ok_and(|ip| match ip {
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        v4 => v4.is_loopback(),
    })
}

impl WebSocketSettings {
    /// Validates a raw block; errors name the key.
    pub fn from_config(c: &WebSocketConfig) -> Result<Self, ChannelError> {
        if !c.path.starts_with('/') {
            return Err(bad(format!(
                "channels.websocket.path {:?} must start with \"/\"",
                c.path
            )));
        }
        let path = normalize_path(&c.path);
        let token_issue_path = match c.token_issue_path.trim() {
            "" => None,
            p if !p.starts_with('/') => {
                return Err(bad(format!(
                    "channels.websocket.tokenIssuePath {p:?} must start with \"/\""
                )));
            }
            p => Some(normalize_path(p)),
        };
        if token_issue_path.as_deref() == Some(path.as_str()) {
            return Err(bad(
                "channels.websocket.tokenIssuePath must differ from path (the WebSocket upgrade path)".into(),
            ));
        }
        if !(30..=86_400).contains(&c.token_ttl_s) {
            return Err(bad(format!(
                "channels.websocket.tokenTtlS {} must be between 30 and 86400",
                c.token_ttl_s
            )));
        }
        if !(1024..=41_943_040).contains(&c.max_message_bytes) {
            return Err(bad(format!(
                "channels.websocket.maxMessageBytes {} must be between 1024 and 41943040",
                c.max_message_bytes
            )));
        }
        let tls = match (c.ssl_certfile.trim(), c.ssl_keyfile.trim()) {
            ("", "") => None,
            (cert, key) if !cert.is_empty() && !key.is_empty() => Some(TlsFiles {
                cert: cert.into(),
                key: key.into(),
            }),
            _ => {
                return Err(bad(
                    "channels.websocket.sslCertfile and sslKeyfile must both be set for wss://, or both left empty"
                        .into(),
                ));
            }
        };
        let public_ws_url = match c.public_ws_url.trim() {
            "" => None,
            u => {
                let ok = (u.starts_with("ws://") || u.starts_with("wss://"))
                    && !u.contains('@')
                    && !u.contains('?')
                    && !u.contains('#');
                if !ok {
                    return Err(bad(format!(
                        "channels.websocket.publicWsUrl {u:?} must be an absolute ws:// or wss:// URL without credentials, query or fragment"
                    )));
                }
                Some(u.to_string())
            }
        };
        let trusted_proxy = match &c.trusted_proxy_auth {
            None => None,
            Some(t) => Some(trusted_proxy(t)?),
        };
        let listen = match c.unix_socket_path.trim() {
            "" => Listen::Tcp {
                host: c.host.trim().to_string(),
                port: c.port,
            },
            p => {
                if p.contains('\0') || !p.starts_with('/') {
                    return Err(bad(format!(
                        "channels.websocket.unixSocketPath {p:?} must be an absolute path"
                    )));
                }
                Listen::Unix(p.into())
            }
        };
        let token = Secret::new(c.token.expose().trim());
        let issue_secret = match c.token_issue_secret.expose().trim() {
            "" => token.clone(),
            s => Secret::new(s),
        };
        // Beyond 0.3.5 (which only checks 0.0.0.0 and ::): any address other than loopback is reachable from
        // other machines, so it needs a credential.
        if let Listen::Tcp { host, .. } = &listen
            && !is_loopback_host(host)
            && token.is_empty()
            && issue_secret.is_empty()
            && trusted_proxy.is_none()
        {
            return Err(bad(format!(
                "channels.websocket.host {host:?} is not a loopback address, but neither token, tokenIssueSecret nor trustedProxyAuth is set; set one to prevent unauthenticated access"
            )));
        }
        if !(0.1..=600.0).contains(&c.header_read_timeout_s) {
            return Err(bad(format!(
                "channels.websocket.headerReadTimeoutS {} must be between 0.1 and 600 seconds",
                c.header_read_timeout_s
            )));
        }
        if !(1..=4096).contains(&c.max_connections_per_client) {
            return Err(bad(format!(
                "channels.websocket.maxConnectionsPerClient {} must be between 1 and 4096",
                c.max_connections_per_client
            )));
        }
        Ok(Self {
            listen,
            path,
            public_ws_url,
            token,
            token_issue_path,
            token_issue_secret: issue_secret,
            trusted_proxy,
            token_ttl: std::time::Duration::from_secs(c.token_ttl_s),
            requires_token: c.websocket_requires_token,
            allow_from: c.allow_from.clone(),
            streaming: c.streaming,
            max_message_bytes: c.max_message_bytes,
            ping_interval: std::time::Duration::from_secs_f64(c.ping_interval_s.clamp(5.0, 300.0)),
            ping_timeout: std::time::Duration::from_secs_f64(c.ping_timeout_s.clamp(5.0, 300.0)),
            header_read_timeout: std::time::Duration::from_secs_f64(c.header_read_timeout_s),
            max_connections_per_client: c.max_connections_per_client,
            tls,
        })
    }

    /// Loopback TCP settings on `port` (0 = any free port) with the 0.3.5 defaults.
    pub fn loopback(port: u16) -> Self {
        let c = WebSocketConfig {
            port,
            ..WebSocketConfig::default()
        };
        match Self::from_config(&c) {
            Ok(s) => s,
            // The defaults are valid; keep a usable value rather than panic.
            Err(_) => Self {
                listen: Listen::Tcp {
                    host: "127.0.0.1".into(),
                    port,
                },
                path: "/".into(),
                public_ws_url: None,
                token: Secret::default(),
                token_issue_path: None,
                token_issue_secret: Secret::default(),
                trusted_proxy: None,
                token_ttl: std::time::Duration::from_secs(DEFAULT_TOKEN_TTL_S),
                requires_token: true,
                allow_from: vec!["*".into()],
                streaming: true,
                max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                ping_interval: std::time::Duration::from_secs(20),
                ping_timeout: std::time::Duration::from_secs(20),
                header_read_timeout: crate::HEADER_READ_TIMEOUT,
                max_connections_per_client: crate::MAX_CONNECTIONS_PER_CLIENT,
                tls: None,
            },
        }
    }
}

fn trusted_proxy(t: &TrustedProxyAuthConfig) -> Result<TrustedProxy, ChannelError> {
    if t.trusted_peer_cidrs.is_empty() {
        return Err(bad(
            "channels.websocket.trustedProxyAuth.trustedPeerCidrs must list at least one network".into(),
        ));
    }
    let mut networks = Vec::new();
    for raw in &t.trusted_peer_cidrs {
        let raw = raw.trim();
        let net: IpNet = raw
            .parse()
            .or_else(|_| raw.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| {
                bad(format!(
                    "channels.websocket.trustedProxyAuth.trustedPeerCidrs: invalid CIDR {raw:?}"
                ))
            })?;
        if net.prefix_len() == 0 {
            return Err(bad(format!(
                "channels.websocket.trustedProxyAuth.trustedPeerCidrs: {raw:?} trusts every address"
            )));
        }
        if let IpNet::V6(v6) = net
            && v6.contains(
                &"::ffff:0.0.0.0"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
            )
            && v6.contains(
                &"::ffff:255.255.255.255"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
            )
        {
            return Err(bad(format!(
                "channels.websocket.trustedProxyAuth.trustedPeerCidrs: {raw:?} covers every IPv4-mapped address"
            )));
        }
        networks.push(net.trunc());
    }
    let header = t.assertion_header.trim().to_ascii_lowercase();
    let routing = matches!(
        header.as_str(),
        "host" | "forwarded" | "x-real-ip" | "cf-connecting-ip"
    ) || header.starts_with("x-forwarded-");
    if header.is_empty() || header.chars().any(|c| c.is_whitespace() || c.is_control()) || routing {
        return Err(bad(format!(
            "channels.websocket.trustedProxyAuth.assertionHeader {:?} must name a proxy-set authentication header (not a routing header such as Host or X-Forwarded-*)",
            t.assertion_header
        )));
    }
    Ok(TrustedProxy { networks, header })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(v: Value) -> Result<WebSocketSettings, ChannelError> {
        WebSocketSettings::from_config(&WebSocketConfig::from_json(&v)?)
    }

    #[test]
    fn defaults_follow_0_3_5() {
        let c = WebSocketConfig::from_json(&json!({})).unwrap();
        assert!(c.enabled && c.websocket_requires_token && c.streaming);
        assert_eq!(
            (c.host.as_str(), c.port, c.path.as_str()),
            ("127.0.0.1", 8765, "/")
        );
        assert_eq!(c.allow_from, ["*"]);
        let s = settings(json!({"token_ttl_s": 60, "tokenIssuePath": "/auth/"})).unwrap();
        assert_eq!(s.token_ttl.as_secs(), 60);
        assert_eq!(s.token_issue_path.as_deref(), Some("/auth"));
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = settings(json!({"port": "x"})).unwrap_err().to_string();
        assert!(e.contains("channels.websocket.port"), "{e}");
        let e = settings(json!({"path": "ws"})).unwrap_err().to_string();
        assert!(e.contains("channels.websocket.path"), "{e}");
        let e = settings(json!({"path": "/ws", "tokenIssuePath": "/ws/"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tokenIssuePath must differ"), "{e}");
        let e = settings(json!({"tokenTtlS": 5})).unwrap_err().to_string();
        assert!(e.contains("tokenTtlS"), "{e}");
    }

    #[test]
    fn non_loopback_bind_needs_a_credential() {
        for host in ["0.0.0.0", "::", "192.168.1.5", "example.org"] {
            let e = settings(json!({"host": host})).unwrap_err().to_string();
            assert!(e.contains("not a loopback address"), "{host}: {e}");
        }
        assert!(settings(json!({"host": "0.0.0.0", "token": "t"})).is_ok());
        assert!(settings(json!({"host": "0.0.0.0", "tokenIssueSecret": "s"})).is_ok());
        for host in ["127.0.0.1", "localhost", "::1", "127.1.2.3"] {
            assert!(settings(json!({"host": host})).is_ok(), "{host}");
        }
    }

    #[test]
    fn trusted_proxy_rejects_universal_networks_and_routing_headers() {
        let e = settings(
            json!({"trustedProxyAuth": {"trustedPeerCidrs": ["0.0.0.0/0"], "assertionHeader": "X-User"}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("trusts every address"), "{e}");
        let e = settings(
            json!({"trustedProxyAuth": {"trustedPeerCidrs": ["::/64"], "assertionHeader": "X-User"}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("IPv4-mapped"), "{e}");
        let e = settings(json!({"trustedProxyAuth": {"trustedPeerCidrs": ["10.0.0.1"], "assertionHeader": "X-Forwarded-User"}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("assertionHeader"), "{e}");
        let s = settings(json!({"trusted_proxy_auth": {"trusted_peer_cidrs": ["10.0.0.0/8"], "assertion_header": "X-Auth-User"}}))
            .unwrap();
        let p = s.trusted_proxy.unwrap();
        assert!(p.admits(Some("10.1.2.3".parse().unwrap()), Some("alice")));
        assert!(p.admits(Some("::ffff:10.1.2.3".parse().unwrap()), Some("alice")));
        assert!(!p.admits(Some("10.1.2.3".parse().unwrap()), Some(" ")));
        assert!(!p.admits(Some("11.1.2.3".parse().unwrap()), Some("alice")));
    }

    #[test]
    fn debug_hides_secrets() {
        let s = settings(json!({"token": "SECRET-1", "tokenIssueSecret": "SECRET-2"})).unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("SECRET-1") && !shown.contains("SECRET-2"),
            "{shown}"
        );
    }
}
