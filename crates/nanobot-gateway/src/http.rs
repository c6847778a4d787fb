//! The gateway's own HTTP surface on `gateway.host:gateway.port`: `GET /health` (liveness), `GET /ready`
//! (channels and provider), `GET /metrics` (Prometheus text).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nanobot_bus::Bus;
use nanobot_channels::{ChannelState, HealthRegistry};
use serde_json::json;

use crate::bus::GatewayBus;
use crate::metrics::{Gauges, Metrics};

/// What the health, readiness and metrics endpoints read.
#[derive(Debug, Clone)]
pub struct OpsState {
    /// Counters and histograms.
    pub metrics: Metrics,
    /// The bus (queue depths).
    pub bus: GatewayBus,
    /// The channels' health.
    pub channels: HealthRegistry,
    /// The provider's registry name.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The `websocket` channel, whose listener's refusals are reported with the other HTTP servers'.
    pub websocket: Option<nanobot_websocket::WebSocketChannel>,
}

impl OpsState {
    /// The gauges [`Metrics::render`] needs, read now.
    pub fn gauges(&self) -> Gauges {
        Gauges {
            inbound_queue: self.bus.inbound_len(),
            outbound_queue: self.bus.outbound_len(),
            channels: self.channels.snapshot(),
            partitions: self.bus.partitions(),
            session_lease_waits: self.bus.leases().map(|l| l.session_waits()),
        }
    }
}

/// The router of `/health`, `/ready` and `/metrics`.
pub fn ops_router(state: OpsState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(state))
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn ready(State(st): State<Arc<OpsState>>) -> Response {
    let channels = st.channels.snapshot();
    let channels_ok = channels.iter().all(|c| c.state == ChannelState::Running);
    let body = json!({
        "ready": channels_ok,
        "provider": {"name": st.provider, "model": st.model},
        "channels": channels,
        "turnsInFlight": st.metrics.in_flight(),
    });
    let status = if channels_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(st): State<Arc<OpsState>>) -> Response {
    if let Some(ws) = &st.websocket {
        for (kind, total) in ws.refusals() {
            st.metrics.sync_refusals(nanobot_websocket::NAME, kind, total);
        }
    }
    let text = st.metrics.render(&st.gauges());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}
