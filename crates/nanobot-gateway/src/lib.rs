//! nanobot's long-running mode: the wiring behind `nanobot gateway`, `nanobot-gateway` and `nanobot serve`.
//!
//! **Owns:** [`Gateway`] (starts the agent on a [`nanobot_runtime::Runtime`] (the one dispatcher, cron with the
//! protected `dream` and `heartbeat` jobs), the [`ChannelManager`](nanobot_channels::ChannelManager) with the
//! channels enabled in the config, and two HTTP servers; shuts them down gracefully), the gateway's HTTP surface
//! ([`http`]: `/health`, `/ready`, `/metrics`), the OpenAI-compatible API ([`api`]), [`Metrics`] fed through an
//! agent hook, the [`GatewayBus`], the systemd unit of `install-service` ([`service`]), and the front doors
//! [`run_gateway`] / [`run_serve`] the binaries call.
//!
//! **Must not know:** how the agent works inside (that is `nanobot-core`), platform SDK details (channel crates),
//! the process environment (the binaries pass [`GatewayOptions::env`] in).
//!
//! ```
//! use nanobot_gateway::{GatewayOptions, service::ServiceUnit};
//!
//! let config = nanobot_config::Config::default();
//! let env = nanobot_runtime::Environment::new("/home/me", nanobot_util::EnvMap::new());
//! let opts = GatewayOptions::serve(config, env);
//! assert!(opts.api && !opts.channels && !opts.cron);
//!
//! let unit = ServiceUnit { program: "/usr/bin/nanobot".into(), args: vec!["gateway".into()], stop_timeout_secs: 45 };
//! assert!(unit.render().contains("ExecStart=/usr/bin/nanobot gateway\n"));
//! ```

pub mod api;
mod bus;
mod error;
mod gateway;
pub mod http;
pub mod metrics;
mod replicas;
pub mod server;
pub mod service;
mod webui;

pub use bus::{GatewayBus, INTERNAL_CHANNELS};
pub use error::GatewayError;
pub use gateway::{
    ALLOW_UNSUPPORTED_CHANNELS_VAR, BUILT_CHANNELS, CHANNELS, DEFAULT_SHUTDOWN_GRACE, Gateway,
    GatewayOptions, RESTART_NOTIFY_CHANNEL_VAR, RESTART_NOTIFY_CHAT_ID_VAR, RESTART_NOTIFY_METADATA_VAR,
    RESTART_STARTED_AT_VAR, ShutdownReport, check_api_bind, config_wants_api, restart_notice_vars,
    unsupported_channels,
};
pub use metrics::{Metrics, MetricsHook, TurnOutcome};
pub use replicas::{OPEN_BUS, StoreTransfer, StoreTransferReport, bus_status, store_transfer};

/// Waits for Ctrl-C or SIGTERM.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening (call it early: a signal before this point uses the default action).
    pub fn new() -> Self {
        Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    /// The next Ctrl-C or SIGTERM.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(term) = &mut self.term {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

async fn run_until_signal(
    opts: GatewayOptions,
    what: &str,
) -> Result<(ShutdownReport, Option<nanobot_core::RestartRequest>), GatewayError> {
    let mut signals = Signals::new();
    let gateway = Gateway::start(opts).await?;
    if let Some(a) = gateway.http_addr() {
        eprintln!("nanobot {what}: health and metrics on http://{a}");
    }
    if let Some(a) = gateway.api_addr() {
        eprintln!("nanobot {what}: OpenAI-compatible API on http://{a}/v1");
    }
    let restart = tokio::select! {
        () = signals.recv() => None,
        r = gateway.restart_requested() => Some(r),
    };
    match &restart {
        Some(_) => eprintln!("nanobot {what}: restarting (press Ctrl-C to exit at once)"),
        None => eprintln!("nanobot {what}: shutting down (press Ctrl-C again to exit at once)"),
    }
    tokio::select! {
        report = gateway.shutdown() => Ok((report, restart)),
        () = signals.recv() => Err(GatewayError::Interrupted),
    }
}

/// `nanobot gateway` / `nanobot-gateway`: runs everything until Ctrl-C or SIGTERM, then shuts down gracefully.
/// A second signal during the shutdown returns [`GatewayError::Interrupted`] at once: the caller should then exit
/// the process immediately (`std::process::exit(130)`) rather than wait for the runtime to wind down. An owner's
/// `/restart` also ends it gracefully here (see [`run_gateway_with_restart`] to start the next one).
pub async fn run_gateway(opts: GatewayOptions) -> Result<ShutdownReport, GatewayError> {
    Ok(run_until_signal(opts, "gateway").await?.0)
}

/// [`run_gateway`], also returning the chat whose `/restart` ended it: the caller then starts the gateway again
/// with [`restart_notice_vars`] in its environment, and the new one tells that chat it is back.
pub async fn run_gateway_with_restart(
    opts: GatewayOptions,
) -> Result<(ShutdownReport, Option<nanobot_core::RestartRequest>), GatewayError> {
    run_until_signal(opts, "gateway").await
}

/// `nanobot serve`: the OpenAI-compatible API alone (channels, cron and the ops server are turned off), until
/// Ctrl-C or SIGTERM. Same shutdown contract as [`run_gateway`].
pub async fn run_serve(mut opts: GatewayOptions) -> Result<ShutdownReport, GatewayError> {
    opts.api = true;
    opts.ops_http = false;
    opts.channels = false;
    opts.cron = false;
    Ok(run_until_signal(opts, "serve").await?.0)
}
