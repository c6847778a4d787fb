//! The span of one model call (`chat <model>`, OpenTelemetry's GenAI names: `docs/configuration.md`, "Traces"):
//! model, tokens, finish reason and outcome, never the messages. The runner makes one per call of a turn;
//! [`traced_chat`] wraps the calls made outside a turn (the heartbeat's, memory's consolidation and Dream).

use nanobot_providers::{ChatRequest, ChatResponse, Provider, ProviderError};
use tracing::Instrument;
use tracing::field::Empty;

/// A model call's span, not yet entered.
pub(crate) fn span(model: &str, streaming: bool) -> tracing::Span {
    tracing::info_span!(
        target: nanobot_util::trace::TARGET,
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        nanobot.streamed = streaming,
        nanobot.tool_calls = Empty,
        error.type = Empty,
    )
}

/// What an answered call reported.
pub(crate) fn record_answer(span: &tracing::Span, r: &ChatResponse) {
    if let Some(u) = &r.usage {
        span.record("gen_ai.usage.input_tokens", u.prompt_tokens);
        span.record("gen_ai.usage.output_tokens", u.completion_tokens);
        if let Some(c) = u.cache_read_tokens {
            span.record("gen_ai.usage.cache_read.input_tokens", c);
        }
        if let Some(n) = u.reasoning_tokens {
            span.record("gen_ai.usage.reasoning.output_tokens", n);
        }
    }
    span.record("gen_ai.response.finish_reasons", r.finish_reason.as_str());
    span.record("nanobot.tool_calls", r.tool_calls.len());
}

/// A call that failed, by the kind of failure (`rate_limited`, `cancelled`, …).
pub(crate) fn record_failure(span: &tracing::Span, kind: &'static str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", kind);
}

/// One model call (not streamed) in its span, for calls made outside a turn: the heartbeat's decision, memory's
/// consolidation and Dream. A turn's calls get theirs from the runner.
pub async fn traced_chat(
    provider: &dyn Provider,
    request: ChatRequest,
) -> Result<ChatResponse, ProviderError> {
    let span = span(&request.model, false);
    let result = provider.chat(request).instrument(span.clone()).await;
    match &result {
        Ok(r) => record_answer(&span, r),
        Err(e) => record_failure(&span, e.kind()),
    }
    result
}
