//! [`Metrics`]: counters and histograms of the running gateway, fed by the agent through [`MetricsHook`] (model
//! calls, tokens, tool calls) and by the gateway itself (turns, latency, API requests), kept in a
//! `prometheus-client` registry and rendered by [`Metrics::render`] in the text exposition format (OpenMetrics
//! text, which Prometheus also reads as its classic text format).

use nanobot_util::lock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nanobot_channels::{ChannelHealth, ChannelState};
use nanobot_core::{AgentHook, BoxError, IterationEnd, StopReason, ToolBatch, Veto};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How a turn ended, as counted in `nanobot_turns_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TurnOutcome {
    /// A final answer (or a command's reply).
    Ok,
    /// The model call failed or the turn could not run.
    Error,
    /// Stopped (`/stop`, client gone, shutdown).
    Cancelled,
    /// The iteration cap was reached.
    MaxIterations,
}

impl TurnOutcome {
    /// The outcome for a core stop reason (`None`: a command, which is `Ok`).
    pub fn from_stop(reason: Option<StopReason>) -> Self {
        match reason {
            None | Some(StopReason::Completed) => Self::Ok,
            Some(StopReason::Error) => Self::Error,
            Some(StopReason::Cancelled) => Self::Cancelled,
            Some(StopReason::MaxIterations) => Self::MaxIterations,
            Some(_) => Self::Error,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::MaxIterations => "max_iterations",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TurnLabels {
    channel: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ApiLabels {
    route: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelKindLabels {
    model: String,
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    decision: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    server: String,
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PartitionLabels {
    partition: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RoleLabels {
    role: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metric handles; each is also registered in `registry` (handles share their values with it).
#[derive(Debug)]
struct Inner {
    registry: Registry,
    turns: Family<TurnLabels, Counter>,
    /// Turns by outcome over all channels (not exposed; read by [`Metrics::turns`]).
    turns_by_outcome: Family<OutcomeLabels, Counter>,
    turn_latency: Family<ChannelLabels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    api_requests: Family<ApiLabels, Counter>,
    api_latency: Histogram,
    tool_calls: Family<ToolLabels, Counter>,
    errors: Family<KindLabels, Counter>,
    llm_requests: Counter,
    tokens: Family<KindLabels, Counter>,
    model_tokens: Family<ModelKindLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, AtomicU64>>,
    unpriced_tokens: Family<ModelLabels, Counter>,
    heartbeats: Family<DecisionLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
}

impl Inner {
    fn new() -> Self {
        let mut registry = Registry::default();
        let turns = Family::<TurnLabels, Counter>::default();
        let turn_latency: Family<ChannelLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let in_flight = Gauge::default();
        let llm_requests = Counter::default();
        let tokens = Family::<KindLabels, Counter>::default();
        for kind in ["prompt", "completion", "cache_read", "reasoning"] {
            let _created = tokens.get_or_create(&KindLabels { kind: kind.into() });
        }
        let tool_calls = Family::<ToolLabels, Counter>::default();
        let refusals = Family::<RefusalLabels, Counter>::default();
        let errors = Family::<KindLabels, Counter>::default();
        let heartbeats = Family::<DecisionLabels, Counter>::default();
        let api_requests = Family::<ApiLabels, Counter>::default();
        let api_latency = latency_histogram();
        // Registration order is exposition order.
        registry.register(
            "nanobot_turns",
            "Agent turns by channel and outcome",
            turns.clone(),
        );
        registry.register(
            "nanobot_turns_in_flight",
            "Agent turns running now",
            in_flight.clone(),
        );
        registry.register(
            "nanobot_turn_duration_seconds",
            "Latency of agent turns by channel",
            turn_latency.clone(),
        );
        registry.register("nanobot_llm_requests", "Model calls", llm_requests.clone());
        registry.register(
            "nanobot_llm_tokens",
            "Tokens reported by the provider",
            tokens.clone(),
        );
        let model_tokens = Family::<ModelKindLabels, Counter>::default();
        let cost = Family::<ModelLabels, Counter<f64, AtomicU64>>::default();
        let unpriced_tokens = Family::<ModelLabels, Counter>::default();
        registry.register(
            "nanobot_llm_model_tokens",
            "Tokens reported by the provider, by model and kind",
            model_tokens.clone(),
        );
        registry.register(
            "nanobot_llm_cost",
            "Cost of model calls by model, from agents.defaults.prices (US dollars for the default prices)",
            cost.clone(),
        );
        registry.register(
            "nanobot_llm_unpriced_tokens",
            "Tokens of model calls whose model has no price (their cost is unknown)",
            unpriced_tokens.clone(),
        );
        registry.register("nanobot_tool_calls", "Tool calls by tool", tool_calls.clone());
        registry.register(
            "nanobot_http_refused",
            "Connections and requests the HTTP servers refused or closed, by server and kind",
            refusals.clone(),
        );
        registry.register("nanobot_errors", "Errors by kind", errors.clone());
        registry.register("nanobot_heartbeats", "Heartbeat decisions", heartbeats.clone());
        registry.register(
            "nanobot_api_requests",
            "OpenAI-compatible API requests by route and status",
            api_requests.clone(),
        );
        registry.register(
            "nanobot_api_request_duration_seconds",
            "Latency of API requests",
            api_latency.clone(),
        );
        Self {
            registry,
            turns,
            turns_by_outcome: Family::default(),
            turn_latency,
            in_flight,
            api_requests,
            api_latency,
            tool_calls,
            errors,
            llm_requests,
            tokens,
            model_tokens,
            cost,
            unpriced_tokens,
            heartbeats,
            refusals,
        }
    }
}

/// The gateway's metrics. Cheap to clone; clones share the counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
    started: Instant,
    /// Leased roles (replicas on a shared bus) and whether this replica holds each.
    roles: Arc<std::sync::Mutex<std::collections::BTreeMap<String, Arc<AtomicBool>>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`Metrics::render`] reads besides the counters.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Inbound messages waiting on the bus.
    pub inbound_queue: usize,
    /// Outbound messages waiting on the bus.
    pub outbound_queue: usize,
    /// Health of every channel.
    pub channels: Vec<ChannelHealth>,
    /// The bus's partitions (a bus shared by replicas; empty in process).
    pub partitions: Vec<nanobot_bus::PartitionStats>,
    /// [`nanobot_bus::Leases::session_waits`] (a bus shared by replicas; `None` in process).
    pub session_lease_waits: Option<u64>,
}

impl Metrics {
    /// Empty metrics; uptime counts from now.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner::new()),
            started: Instant::now(),
            roles: Arc::default(),
        }
    }

    /// The flag saying whether this replica holds `role` (set by whoever holds the lease), shown as
    /// `nanobot_replica_role_held` (only on a bus shared by replicas).
    pub fn role_held(&self, role: &nanobot_bus::Role) -> Arc<AtomicBool> {
        lock(&self.roles).entry(role.key()).or_default().clone()
    }

    /// The agent hook that feeds model calls, tokens and tool calls into these metrics (costs from the default
    /// prices), for an agent without a usage ledger.
    pub fn hook(&self) -> Arc<MetricsHook> {
        self.hook_with_prices(nanobot_usage::PriceTable::default())
    }

    /// [`Metrics::hook`] with costs from `prices`.
    pub fn hook_with_prices(&self, prices: nanobot_usage::PriceTable) -> Arc<MetricsHook> {
        Arc::new(MetricsHook {
            metrics: self.clone(),
            prices: Some(Arc::new(prices)),
        })
    }

    /// The agent hook that counts a turn's tool calls and the model calls the provider reported no usage for,
    /// for an agent whose recorded calls, tokens and costs come from its usage ledger
    /// ([`Metrics::count_usage_of`]).
    pub fn calls_hook(&self) -> Arc<MetricsHook> {
        Arc::new(MetricsHook {
            metrics: self.clone(),
            prices: None,
        })
    }

    /// Counts each call this process records in `ledger`, with its tokens and cost (at the ledger's prices): the
    /// turns' and also those made outside a turn (subagents, the heartbeat, memory's consolidation and Dream).
    pub fn count_usage_of(&self, ledger: &nanobot_usage::UsageLedger) {
        let (metrics, prices) = (self.clone(), ledger.prices().clone());
        ledger.on_record(move |r| {
            metrics.inner.llm_requests.inc();
            metrics.count_tokens(
                &r.model,
                Tokens {
                    prompt: r.input,
                    completion: r.output,
                    cache_read: r.cached,
                    reasoning: r.reasoning,
                },
                &prices,
            );
        });
    }

    /// A turn started; the returned guard counts it as in flight until dropped.
    pub fn turn_started(&self) -> InFlight {
        self.inner.in_flight.inc();
        InFlight {
            metrics: self.clone(),
            started: Instant::now(),
        }
    }

    /// Turns running now.
    pub fn in_flight(&self) -> i64 {
        self.inner.in_flight.get()
    }

    /// Records a finished turn of `channel`.
    pub fn record_turn(&self, channel: &str, outcome: TurnOutcome, took: Duration) {
        let i = &self.inner;
        i.turns
            .get_or_create(&TurnLabels {
                channel: channel.to_owned(),
                outcome: outcome.label(),
            })
            .inc();
        i.turns_by_outcome
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
        i.turn_latency
            .get_or_create(&ChannelLabels {
                channel: channel.to_owned(),
            })
            .observe(took.as_secs_f64());
        if outcome == TurnOutcome::Error {
            self.record_error("turn");
        }
    }

    /// Records an API request by route and status.
    pub fn record_api(&self, route: &str, status: u16, took: Duration) {
        self.inner
            .api_requests
            .get_or_create(&ApiLabels {
                route: route.to_owned(),
                status,
            })
            .inc();
        self.inner.api_latency.observe(took.as_secs_f64());
    }

    /// Counts a connection or request an HTTP server refused or closed: `server` is `api`, `gateway` (or
    /// `websocket`, synced by [`Metrics::sync_refusals`]),
    /// `kind` one of `header_timeout`, `idle_timeout`, `per_client_cap`, `body_too_large`.
    pub fn record_refusal(&self, server: &str, kind: &str) {
        self.inner.refusals.get_or_create(&refusal(server, kind)).inc();
    }

    /// Brings the count of `server`'s refusals of `kind` up to `total`, for servers that keep their own
    /// counters (the `websocket` channel's listener); a lower `total` changes nothing (counters only grow).
    pub fn sync_refusals(&self, server: &str, kind: &str, total: u64) {
        let counter = self.inner.refusals.get_or_create(&refusal(server, kind));
        let now = counter.get();
        if total > now {
            counter.inc_by(total - now);
        }
    }

    /// How often `server` refused for `kind` (see [`Metrics::record_refusal`]).
    pub fn refusals(&self, server: &str, kind: &str) -> u64 {
        self.inner.refusals.get_or_create(&refusal(server, kind)).get()
    }

    /// Counts an error of `kind` (`turn`, `heartbeat`, `api`, …).
    pub fn record_error(&self, kind: &str) {
        self.inner
            .errors
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a heartbeat decision (`skip`, `run`, `empty`, `error`).
    pub fn record_heartbeat(&self, decision: &str) {
        self.inner
            .heartbeats
            .get_or_create(&DecisionLabels {
                decision: decision.to_owned(),
            })
            .inc();
    }

    /// Turns counted so far with this outcome (all channels).
    pub fn turns(&self, outcome: TurnOutcome) -> u64 {
        self.inner
            .turns_by_outcome
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .get()
    }

    /// Model calls counted so far.
    pub fn llm_requests(&self) -> u64 {
        self.inner.llm_requests.get()
    }

    /// Tool calls counted so far for `tool`.
    pub fn tool_calls(&self, tool: &str) -> u64 {
        self.inner
            .tool_calls
            .get_or_create(&ToolLabels {
                tool: tool.to_owned(),
            })
            .get()
    }

    /// The text exposition of everything, with `gauges` read by the caller: the registry of counters, then
    /// uptime, bus queues and channel health (values read now, so they live in a registry built for this call).
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut now = Registry::default();
        let uptime = Gauge::<f64, AtomicU64>::default();
        uptime.set(self.started.elapsed().as_secs_f64());
        now.register(
            "nanobot_uptime_seconds",
            "Seconds since the gateway started",
            uptime,
        );
        let queue = Family::<DirectionLabels, Gauge>::default();
        for (direction, depth) in [
            ("inbound", gauges.inbound_queue),
            ("outbound", gauges.outbound_queue),
        ] {
            queue
                .get_or_create(&DirectionLabels { direction })
                .set(i64::try_from(depth).unwrap_or(i64::MAX));
        }
        now.register("nanobot_bus_queue_depth", "Messages waiting on the bus", queue);
        let up = Family::<ChannelLabels, Gauge>::default();
        let restarts = Family::<ChannelLabels, Counter>::default();
        let sent = Family::<ChannelLabels, Counter>::default();
        let failures = Family::<ChannelLabels, Counter>::default();
        for c in &gauges.channels {
            let labels = ChannelLabels {
                channel: c.name.clone(),
            };
            up.get_or_create(&labels)
                .set(i64::from(c.state == ChannelState::Running));
            restarts.get_or_create(&labels).inc_by(u64::from(c.restarts));
            sent.get_or_create(&labels).inc_by(c.sent);
            failures.get_or_create(&labels).inc_by(c.send_failures);
        }
        now.register("nanobot_channel_up", "1 when the channel's receive loop runs", up);
        now.register("nanobot_channel_restarts", "Channel restarts", restarts);
        now.register("nanobot_channel_sent", "Messages delivered by channel", sent);
        now.register(
            "nanobot_channel_send_failures",
            "Messages given up on by channel",
            failures,
        );
        if !gauges.partitions.is_empty() {
            let waiting = Family::<PartitionLabels, Gauge>::default();
            let taken = Family::<PartitionLabels, Counter>::default();
            for p in &gauges.partitions {
                let labels = PartitionLabels {
                    partition: p.partition.to_string(),
                };
                waiting
                    .get_or_create(&labels)
                    .set(i64::try_from(p.waiting).unwrap_or(i64::MAX));
                taken.get_or_create(&labels).inc_by(p.taken);
            }
            now.register(
                "nanobot_bus_partition_waiting",
                "Messages waiting in each partition of the shared bus (all replicas), as last read from the server",
                waiting,
            );
            now.register(
                "nanobot_bus_partition_taken",
                "Messages this replica took from each partition of the shared bus",
                taken,
            );
        }
        if let Some(waits) = gauges.session_lease_waits {
            let counter = Counter::<u64>::default();
            counter.inc_by(waits);
            now.register(
                "nanobot_session_lease_waits",
                "Times a session's turn found its lease held by another replica and waited (a replica's death, or \
                 two requests of one session at once)",
                counter,
            );
        }
        let roles = lock(&self.roles);
        if !roles.is_empty() {
            let held = Family::<RoleLabels, Gauge>::default();
            for (role, flag) in roles.iter() {
                held.get_or_create(&RoleLabels { role: role.clone() })
                    .set(i64::from(flag.load(Ordering::SeqCst)));
            }
            now.register(
                "nanobot_replica_role_held",
                "1 when this replica holds the role (the scheduler, a channel) among the replicas sharing the bus",
                held,
            );
        }
        drop(roles);
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, &now);
        let _ = encode_registry(&mut out, &self.inner.registry);
        let _ = encode_eof(&mut out);
        out
    }
}

fn refusal(server: &str, kind: &str) -> RefusalLabels {
    RefusalLabels {
        server: server.to_owned(),
        kind: kind.to_owned(),
    }
}

/// Counts a turn as in flight while alive (see [`Metrics::turn_started`]).
#[derive(Debug)]
pub struct InFlight {
    metrics: Metrics,
    started: Instant,
}

impl InFlight {
    /// Time since the turn started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.inner.in_flight.dec();
    }
}

/// The agent hook feeding [`Metrics`]: one model call per iteration and every tool call, with each call's tokens
/// and cost unless they come from a usage ledger ([`Metrics::calls_hook`]).
#[derive(Debug, Clone)]
pub struct MetricsHook {
    metrics: Metrics,
    /// `None`: tokens are counted from the ledger, not here.
    prices: Option<Arc<nanobot_usage::PriceTable>>,
}

#[async_trait]
impl AgentHook for MetricsHook {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        for call in batch.calls {
            self.metrics
                .inner
                .tool_calls
                .get_or_create(&ToolLabels {
                    tool: call.name.clone(),
                })
                .inc();
        }
        Ok(Vec::new())
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        // With a ledger, a call with usage is counted as the ledger records it (once), one without here.
        if self.prices.is_some() || ctx.usage.is_none() {
            self.metrics.inner.llm_requests.inc();
        }
        if let (Some(u), Some(prices)) = (&ctx.usage, &self.prices) {
            self.metrics.count_tokens(
                ctx.model,
                Tokens {
                    prompt: u.prompt_tokens,
                    completion: u.completion_tokens,
                    cache_read: u.cache_read_tokens.unwrap_or(0),
                    reasoning: u.reasoning_tokens.unwrap_or(0),
                },
                prices,
            );
        }
        Ok(())
    }
}

/// The tokens of one model call.
struct Tokens {
    prompt: u64,
    completion: u64,
    cache_read: u64,
    reasoning: u64,
}

impl Metrics {
    /// Counts the tokens of one call of `model`, and its cost at `prices` (or its tokens as unpriced).
    fn count_tokens(&self, model: &str, t: Tokens, prices: &nanobot_usage::PriceTable) {
        let i = &self.inner;
        for (kind, n) in [
            ("prompt", t.prompt),
            ("completion", t.completion),
            ("cache_read", t.cache_read),
            ("reasoning", t.reasoning),
        ] {
            i.tokens
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(n);
            i.model_tokens
                .get_or_create(&ModelKindLabels {
                    model: model.to_owned(),
                    kind: kind.into(),
                })
                .inc_by(n);
        }
        let labels = ModelLabels {
            model: model.to_owned(),
        };
        match prices.price(model) {
            Some(price) => {
                let cost = price.cost_of(t.prompt, t.cache_read, t.completion);
                i.cost.get_or_create(&labels).inc_by(cost);
            }
            None => {
                i.unpriced_tokens
                    .get_or_create(&labels)
                    .inc_by(t.prompt + t.completion);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_channel_health() {
        let m = Metrics::new();
        m.record_turn("telegram", TurnOutcome::Ok, Duration::from_millis(30));
        m.record_turn("telegram", TurnOutcome::Error, Duration::from_secs(3));
        m.record_api("/v1/chat/completions", 200, Duration::from_millis(2));
        let g = Gauges {
            inbound_queue: 3,
            outbound_queue: 0,
            channels: Vec::new(),
            partitions: vec![nanobot_bus::PartitionStats::new(2, 5, 7)],
            session_lease_waits: Some(3),
        };
        let text = m.render(&g);
        assert!(
            text.contains("nanobot_turns_total{channel=\"telegram\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nanobot_bus_partition_waiting{partition=\"2\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("nanobot_bus_partition_taken_total{partition=\"2\"} 7"),
            "{text}"
        );
        assert!(text.contains("nanobot_turns_total{channel=\"telegram\",outcome=\"error\"} 1"));
        assert!(text.contains("nanobot_errors_total{kind=\"turn\"} 1"));
        // prometheus-client writes `le` first; label order carries no meaning in the format.
        assert!(
            text.contains("nanobot_turn_duration_seconds_bucket{le=\"0.05\",channel=\"telegram\"} 1"),
            "{text}"
        );
        assert!(text.contains("nanobot_turn_duration_seconds_bucket{le=\"+Inf\",channel=\"telegram\"} 2"));
        assert!(
            text.contains("# HELP nanobot_turns Agent turns by channel and outcome.\n"),
            "{text}"
        );
        assert!(text.contains("nanobot_bus_queue_depth{direction=\"inbound\"} 3"));
        assert!(text.contains("nanobot_session_lease_waits_total 3"), "{text}");
        assert!(text.contains("nanobot_api_request_duration_seconds_count 1"));
        assert!(text.contains("nanobot_api_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1"));
        assert_eq!(m.turns(TurnOutcome::Ok), 1);
    }

    #[test]
    fn in_flight_guard_counts_down_on_drop() {
        let m = Metrics::new();
        let a = m.turn_started();
        let b = m.turn_started();
        assert_eq!(m.in_flight(), 2);
        drop(a);
        assert_eq!(m.in_flight(), 1);
        drop(b);
        assert_eq!(m.in_flight(), 0);
    }

    #[test]
    fn exposition_parses_with_escaped_labels_and_every_family() {
        let m = Metrics::new();
        m.record_turn(
            "we\"ird\\chan\nnel",
            TurnOutcome::Cancelled,
            Duration::from_millis(3),
        );
        m.record_refusal("api", "header_timeout");
        // A server with its own counters is synced; a lower total later changes nothing.
        m.sync_refusals("websocket", "per_client_cap", 4);
        m.sync_refusals("websocket", "per_client_cap", 2);
        m.sync_refusals("websocket", "per_client_cap", 6);
        m.record_heartbeat("run");
        let health = ChannelHealth {
            name: "telegram".into(),
            state: ChannelState::Running,
            restarts: 2,
            last_error: None,
            last_progress_at: None,
            sent: 5,
            send_failures: 0,
        };
        let text = m.render(&Gauges {
            inbound_queue: 1,
            outbound_queue: 2,
            channels: vec![health],
            partitions: Vec::new(),
            session_lease_waits: None,
        });
        assert!(text.ends_with("# EOF\n"), "{text}");
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let value = |metric: &str, label: Option<(&str, &str)>| -> f64 {
            let sample = scrape
                .samples
                .iter()
                .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
                .unwrap_or_else(|| panic!("no sample {metric} {label:?} in\n{text}"));
            match &sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                other => panic!("{metric}: unexpected {other:?}"),
            }
        };
        assert_eq!(
            value(
                "nanobot_turns_total",
                Some(("channel", "we\\\"ird\\\\chan\\nnel"))
            ),
            1.0,
            "label values are escaped, not cut"
        );
        assert_eq!(
            value("nanobot_http_refused_total", Some(("kind", "header_timeout"))),
            1.0
        );
        assert_eq!(
            value("nanobot_http_refused_total", Some(("kind", "per_client_cap"))),
            6.0
        );
        assert_eq!(m.refusals("websocket", "per_client_cap"), 6);
        assert_eq!(value("nanobot_heartbeats_total", Some(("decision", "run"))), 1.0);
        assert_eq!(value("nanobot_channel_up", Some(("channel", "telegram"))), 1.0);
        assert_eq!(
            value("nanobot_channel_restarts_total", Some(("channel", "telegram"))),
            2.0
        );
        assert_eq!(
            value("nanobot_channel_sent_total", Some(("channel", "telegram"))),
            5.0
        );
        assert_eq!(
            value("nanobot_bus_queue_depth", Some(("direction", "outbound"))),
            2.0
        );
        assert_eq!(value("nanobot_llm_tokens_total", Some(("kind", "prompt"))), 0.0);
        assert_eq!(value("nanobot_turns_in_flight", None), 0.0);
        assert!(value("nanobot_uptime_seconds", None) >= 0.0);
        let hist = scrape
            .samples
            .iter()
            .find(|s| s.metric == "nanobot_turn_duration_seconds")
            .unwrap_or_else(|| panic!("no histogram in\n{text}"));
        match &hist.value {
            prometheus_parse::Value::Histogram(buckets) => {
                assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1, "{buckets:?}");
                assert_eq!(buckets[0].count, 1.0, "3 ms falls in the first bucket");
            }
            other => panic!("histogram parsed as {other:?}"),
        }
    }
}
