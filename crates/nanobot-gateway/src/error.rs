//! [`GatewayError`]: everything that can stop the gateway from starting or shutting down cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors of the gateway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The API would listen on a non-loopback address without `api.apiKey`.
    #[error(
        "refusing to serve the API on {host}:{port} without a key: set `api.apiKey` in the config, \
         or bind `api.host` to 127.0.0.1"
    )]
    UnprotectedApi {
        /// `api.host`.
        host: String,
        /// `api.port`.
        port: u16,
    },
    /// Channels are enabled that this build cannot run.
    #[error(
        "enabled channel(s) this build cannot run: {}; disable them in `channels` of the config, or set \
         NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS=1 to start without them (channels built in: {}; an adapter left \
         out of this build comes back with its cargo feature, e.g. `--features telegram`)",
        names.join(", "),
        crate::BUILT_CHANNELS.join(", ")
    )]
    UnsupportedChannels {
        /// The channel names, in file order.
        names: Vec<String>,
    },
    /// A listen address could not be parsed or resolved.
    #[error("{field}: `{value}` is not a valid listen address")]
    BadAddress {
        /// The config key (`gateway.host`, `api.host`).
        field: &'static str,
        /// What it held.
        value: String,
    },
    /// Binding a listener failed (port in use, permission).
    #[error("cannot listen on {addr} ({field}): {source}")]
    Bind {
        /// The config key the address came from.
        field: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent could not be built from the config.
    #[error(transparent)]
    Core(#[from] nanobot_core::CoreError),
    /// The agent could not be composed from the config (a bad setting, the provider, the system jobs).
    #[error(transparent)]
    Runtime(#[from] nanobot_runtime::RuntimeError),
    /// The provider could not be resolved from the config.
    #[error(transparent)]
    Provider(#[from] nanobot_providers::ProviderError),
    /// A channel could not be built from its config.
    #[error("channel {channel}: {source}")]
    Channel {
        /// Channel name.
        channel: &'static str,
        /// The cause.
        #[source]
        source: nanobot_channels::ChannelError,
    },
    /// The cron store refused a system job.
    #[error(transparent)]
    Cron(#[from] nanobot_cron::CronError),
    /// A file could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The message bus of `gateway.bus` could not be set up (the NATS server unreachable, a bad setting); the
    /// text names the setting or the server.
    #[error("gateway.bus: {0}")]
    Bus(String),
    /// A second Ctrl-C / SIGTERM arrived during the graceful shutdown.
    #[error("interrupted again during shutdown: exiting at once")]
    Interrupted,
}

impl GatewayError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
