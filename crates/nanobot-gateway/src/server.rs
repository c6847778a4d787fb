//! The gateway's HTTP listeners run on [`nanobot_http`] (one bounded accept loop for every listener nanobot
//! opens); this module maps the `api.limits` / `gateway.limits` config blocks onto it and counts its refusals in
//! the gateway's metrics (`nanobot_http_refused_total{server,kind}`).

use std::sync::Arc;

use nanobot_config::ServerLimitsConfig;
pub use nanobot_http::ServerLimits;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The limits a config block asks for (already validated by the config loader; clamped here anyway).
pub fn limits_from_config(c: &ServerLimitsConfig) -> ServerLimits {
    let secs = |v: f64| std::time::Duration::from_secs_f64(v.clamp(0.001, 86_400.0));
    let mut limits = ServerLimits::default();
    limits.header_read_timeout = secs(c.header_read_timeout);
    limits.idle_timeout = secs(c.idle_timeout);
    limits.max_connections_per_client = (c.max_connections_per_client as usize).max(1);
    limits.max_body_bytes = usize::try_from(c.max_body_bytes).unwrap_or(usize::MAX).max(1);
    limits.max_other_body_bytes = usize::try_from(c.max_other_body_bytes)
        .unwrap_or(usize::MAX)
        .max(1);
    limits
}

impl nanobot_http::RefusalObserver for Metrics {
    fn refused(&self, server: &'static str, kind: &'static str) {
        self.record_refusal(server, kind);
    }
}

/// Serves `router` on `listener` within `limits` until `stop` (see [`nanobot_http::serve`]), counting refusals in
/// `metrics` under `name` (`api`, `gateway`).
pub fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ServerLimits,
    metrics: Metrics,
    stop: CancellationToken,
    name: &'static str,
) -> JoinHandle<()> {
    nanobot_http::serve(listener, router, limits, Arc::new(metrics), stop, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_library_defaults_agree() {
        assert_eq!(
            limits_from_config(&ServerLimitsConfig::default()),
            ServerLimits::default()
        );
    }
}
