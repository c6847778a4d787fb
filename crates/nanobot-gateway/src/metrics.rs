//! [`Metrics`]: counters and histograms of the running gateway, fed by the agent through [`MetricsHook`] (model
//! calls, tokens, tool calls) and by the gateway itself (turns, latency, API requests), rendered in the
//! Prometheus text format by [`Metrics::render`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nanobot_channels::{ChannelHealth, ChannelState};
use nanobot_core::{AgentHook, BoxError, IterationEnd, StopReason, ToolBatch, Veto};

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

#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}",
                self.buckets[i]
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    turns: Mutex<BTreeMap<(String, TurnOutcome), u64>>,
    turn_latency: Mutex<BTreeMap<String, Histogram>>,
    api_requests: Mutex<BTreeMap<(String, u16), u64>>,
    api_latency: Mutex<Histogram>,
    tool_calls: Mutex<BTreeMap<String, u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
    llm_requests: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    in_flight: AtomicI64,
    heartbeats: Mutex<BTreeMap<String, u64>>,
    refusals: Mutex<BTreeMap<(String, String), u64>>,
}

/// The gateway's metrics. Cheap to clone; clones share the counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
    started: Instant,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

use nanobot_util::lock;

/// Escapes a label value for the Prometheus text format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
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
}

impl Metrics {
    /// Empty metrics; uptime counts from now.
    pub fn new() -> Self {
        Self {
            inner: Arc::default(),
            started: Instant::now(),
        }
    }

    /// The agent hook that feeds model calls, tokens and tool calls into these metrics.
    pub fn hook(&self) -> Arc<MetricsHook> {
        Arc::new(MetricsHook {
            metrics: self.clone(),
        })
    }

    /// A turn started; the returned guard counts it as in flight until dropped.
    pub fn turn_started(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            metrics: self.clone(),
            started: Instant::now(),
        }
    }

    /// Turns running now.
    pub fn in_flight(&self) -> i64 {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Records a finished turn of `channel`.
    pub fn record_turn(&self, channel: &str, outcome: TurnOutcome, took: Duration) {
        *lock(&self.inner.turns)
            .entry((channel.to_owned(), outcome))
            .or_default() += 1;
        lock(&self.inner.turn_latency)
            .entry(channel.to_owned())
            .or_default()
            .observe(took.as_secs_f64());
        if outcome == TurnOutcome::Error {
            self.record_error("turn");
        }
    }

    /// Records an API request by route and status.
    pub fn record_api(&self, route: &str, status: u16, took: Duration) {
        *lock(&self.inner.api_requests)
            .entry((route.to_owned(), status))
            .or_default() += 1;
        lock(&self.inner.api_latency).observe(took.as_secs_f64());
    }

    /// Counts a connection or request an HTTP server refused or closed: `server` is `api` or `gateway`,
    /// `kind` one of `header_timeout`, `idle_timeout`, `per_client_cap`, `body_too_large`.
    pub fn record_refusal(&self, server: &str, kind: &str) {
        *lock(&self.inner.refusals)
            .entry((server.to_owned(), kind.to_owned()))
            .or_default() += 1;
    }

    /// How often `server` refused for `kind` (see [`Metrics::record_refusal`]).
    pub fn refusals(&self, server: &str, kind: &str) -> u64 {
        lock(&self.inner.refusals)
            .get(&(server.to_owned(), kind.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Counts an error of `kind` (`turn`, `heartbeat`, `api`, …).
    pub fn record_error(&self, kind: &str) {
        *lock(&self.inner.errors).entry(kind.to_owned()).or_default() += 1;
    }

    /// Counts a heartbeat decision (`skip`, `run`, `empty`, `error`).
    pub fn record_heartbeat(&self, decision: &str) {
        *lock(&self.inner.heartbeats)
            .entry(decision.to_owned())
            .or_default() += 1;
    }

    /// Turns counted so far with this outcome (all channels).
    pub fn turns(&self, outcome: TurnOutcome) -> u64 {
        lock(&self.inner.turns)
            .iter()
            .filter(|((_, o), _)| *o == outcome)
            .map(|(_, n)| n)
            .sum()
    }

    /// Model calls counted so far.
    pub fn llm_requests(&self) -> u64 {
        self.inner.llm_requests.load(Ordering::Relaxed)
    }

    /// Tool calls counted so far for `tool`.
    pub fn tool_calls(&self, tool: &str) -> u64 {
        lock(&self.inner.tool_calls).get(tool).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition of everything, with `gauges` read by the caller.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut o = String::with_capacity(4096);
        let i = &self.inner;
        let h = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        h(
            &mut o,
            "nanobot_uptime_seconds",
            "gauge",
            "Seconds since the gateway started.",
        );
        let _ = writeln!(
            o,
            "nanobot_uptime_seconds {}",
            self.started.elapsed().as_secs_f64()
        );

        h(
            &mut o,
            "nanobot_turns_total",
            "counter",
            "Agent turns by channel and outcome.",
        );
        for ((ch, outcome), n) in lock(&i.turns).iter() {
            let _ = writeln!(
                o,
                "nanobot_turns_total{{channel=\"{}\",outcome=\"{}\"}} {n}",
                esc(ch),
                outcome.label()
            );
        }
        h(
            &mut o,
            "nanobot_turns_in_flight",
            "gauge",
            "Agent turns running now.",
        );
        let _ = writeln!(o, "nanobot_turns_in_flight {}", self.in_flight());
        h(
            &mut o,
            "nanobot_turn_duration_seconds",
            "histogram",
            "Latency of agent turns by channel.",
        );
        for (ch, hist) in lock(&i.turn_latency).iter() {
            hist.render(
                &mut o,
                "nanobot_turn_duration_seconds",
                &format!("channel=\"{}\"", esc(ch)),
            );
        }

        h(&mut o, "nanobot_llm_requests_total", "counter", "Model calls.");
        let _ = writeln!(
            o,
            "nanobot_llm_requests_total {}",
            i.llm_requests.load(Ordering::Relaxed)
        );
        h(
            &mut o,
            "nanobot_llm_tokens_total",
            "counter",
            "Tokens reported by the provider.",
        );
        for (kind, v) in [
            ("prompt", &i.prompt_tokens),
            ("completion", &i.completion_tokens),
            ("cache_read", &i.cached_tokens),
        ] {
            let _ = writeln!(
                o,
                "nanobot_llm_tokens_total{{kind=\"{kind}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        h(
            &mut o,
            "nanobot_tool_calls_total",
            "counter",
            "Tool calls by tool.",
        );
        for (tool, n) in lock(&i.tool_calls).iter() {
            let _ = writeln!(o, "nanobot_tool_calls_total{{tool=\"{}\"}} {n}", esc(tool));
        }
        h(
            &mut o,
            "nanobot_http_refused_total",
            "counter",
            "Connections and requests the HTTP servers refused or closed, by server and kind.",
        );
        for ((server, kind), n) in lock(&i.refusals).iter() {
            let _ = writeln!(
                o,
                "nanobot_http_refused_total{{server=\"{}\",kind=\"{}\"}} {n}",
                esc(server),
                esc(kind)
            );
        }
        h(&mut o, "nanobot_errors_total", "counter", "Errors by kind.");
        for (kind, n) in lock(&i.errors).iter() {
            let _ = writeln!(o, "nanobot_errors_total{{kind=\"{}\"}} {n}", esc(kind));
        }
        h(
            &mut o,
            "nanobot_heartbeats_total",
            "counter",
            "Heartbeat decisions.",
        );
        for (d, n) in lock(&i.heartbeats).iter() {
            let _ = writeln!(o, "nanobot_heartbeats_total{{decision=\"{}\"}} {n}", esc(d));
        }

        h(
            &mut o,
            "nanobot_api_requests_total",
            "counter",
            "OpenAI-compatible API requests by route and status.",
        );
        for ((route, status), n) in lock(&i.api_requests).iter() {
            let _ = writeln!(
                o,
                "nanobot_api_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                esc(route)
            );
        }
        h(
            &mut o,
            "nanobot_api_request_duration_seconds",
            "histogram",
            "Latency of API requests.",
        );
        lock(&i.api_latency).render(&mut o, "nanobot_api_request_duration_seconds", "");

        h(
            &mut o,
            "nanobot_bus_queue_depth",
            "gauge",
            "Messages waiting on the bus.",
        );
        let _ = writeln!(
            o,
            "nanobot_bus_queue_depth{{direction=\"inbound\"}} {}",
            gauges.inbound_queue
        );
        let _ = writeln!(
            o,
            "nanobot_bus_queue_depth{{direction=\"outbound\"}} {}",
            gauges.outbound_queue
        );

        h(
            &mut o,
            "nanobot_channel_up",
            "gauge",
            "1 when the channel's receive loop runs.",
        );
        for c in &gauges.channels {
            let up = u8::from(c.state == ChannelState::Running);
            let _ = writeln!(o, "nanobot_channel_up{{channel=\"{}\"}} {up}", esc(&c.name));
        }
        h(
            &mut o,
            "nanobot_channel_restarts_total",
            "counter",
            "Channel restarts.",
        );
        for c in &gauges.channels {
            let _ = writeln!(
                o,
                "nanobot_channel_restarts_total{{channel=\"{}\"}} {}",
                esc(&c.name),
                c.restarts
            );
        }
        h(
            &mut o,
            "nanobot_channel_sent_total",
            "counter",
            "Messages delivered by channel.",
        );
        for c in &gauges.channels {
            let _ = writeln!(
                o,
                "nanobot_channel_sent_total{{channel=\"{}\"}} {}",
                esc(&c.name),
                c.sent
            );
        }
        h(
            &mut o,
            "nanobot_channel_send_failures_total",
            "counter",
            "Messages given up on by channel.",
        );
        for c in &gauges.channels {
            let _ = writeln!(
                o,
                "nanobot_channel_send_failures_total{{channel=\"{}\"}} {}",
                esc(&c.name),
                c.send_failures
            );
        }
        o
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
        self.metrics.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The agent hook feeding [`Metrics`]: one model call per iteration (with its usage) and every tool call.
#[derive(Debug, Clone)]
pub struct MetricsHook {
    metrics: Metrics,
}

#[async_trait]
impl AgentHook for MetricsHook {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        let mut map = lock(&self.metrics.inner.tool_calls);
        for call in batch.calls {
            *map.entry(call.name.clone()).or_default() += 1;
        }
        Ok(Vec::new())
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        let i = &self.metrics.inner;
        i.llm_requests.fetch_add(1, Ordering::Relaxed);
        if let Some(u) = &ctx.usage {
            i.prompt_tokens.fetch_add(u.prompt_tokens, Ordering::Relaxed);
            i.completion_tokens
                .fetch_add(u.completion_tokens, Ordering::Relaxed);
            i.cached_tokens
                .fetch_add(u.cache_read_tokens.unwrap_or(0), Ordering::Relaxed);
        }
        Ok(())
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
        };
        let text = m.render(&g);
        assert!(
            text.contains("nanobot_turns_total{channel=\"telegram\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(text.contains("nanobot_turns_total{channel=\"telegram\",outcome=\"error\"} 1"));
        assert!(text.contains("nanobot_errors_total{kind=\"turn\"} 1"));
        assert!(text.contains("nanobot_turn_duration_seconds_bucket{channel=\"telegram\",le=\"0.05\"} 1"));
        assert!(text.contains("nanobot_turn_duration_seconds_bucket{channel=\"telegram\",le=\"+Inf\"} 2"));
        assert!(text.contains("nanobot_bus_queue_depth{direction=\"inbound\"} 3"));
        assert!(text.contains("nanobot_api_request_duration_seconds_count 1"));
        assert!(text.contains("nanobot_api_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1"));
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
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
