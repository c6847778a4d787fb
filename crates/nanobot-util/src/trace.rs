//! The spans an operator can follow (`docs/configuration.md`, "Traces"): the one `tracing` target they share, and
//! how a span's identity crosses the bus.
//!
//! A crate that makes such a span (core: a turn, a model call, a tool call; the channel manager: a send) names
//! [`TARGET`]; the logging crate exports exactly those spans when a collector is configured and keeps them out of
//! log lines. A message published to the bus during a turn carries [`current_traceparent`], and the span that
//! delivers it calls [`adopt_traceparent`], so that the send is a child of what sent it, on this process or on
//! another replica. Both are no-ops until the program installs [`TraceHooks`] (the command line does, with the
//! logging crate's functions), so libraries stay free of OpenTelemetry.

use std::sync::OnceLock;

/// The `tracing` target of every exported span.
pub const TARGET: &str = "nanobot::trace";

/// How the current span's identity is read and adopted (W3C `traceparent` text).
#[derive(Debug, Clone, Copy)]
pub struct TraceHooks {
    /// The current span's `traceparent`, or `None` when spans are not exported.
    pub current: fn() -> Option<String>,
    /// Makes a `traceparent` the parent of a span not yet entered.
    pub adopt: fn(&tracing::Span, &str),
}

static HOOKS: OnceLock<TraceHooks> = OnceLock::new();

/// Installs the hooks for this process; the first installation stays.
pub fn install(hooks: TraceHooks) {
    let _ = HOOKS.set(hooks);
}

/// The current span's `traceparent`, when spans are exported.
pub fn current_traceparent() -> Option<String> {
    HOOKS.get().and_then(|h| (h.current)())
}

/// Makes `traceparent` the parent of `span` (which must not have been entered yet), when spans are exported.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    if let Some(h) = HOOKS.get() {
        (h.adopt)(span, traceparent);
    }
}
