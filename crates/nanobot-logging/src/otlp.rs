//! Spans exported over OTLP/HTTP (feature `otlp`): the OpenTelemetry SDK's batch processor on its own thread, the
//! `tracing` bridge limited to [`TRACE_TARGET`], and the W3C trace context of a span as text so that a span on
//! the other side of the bus (a channel's send, perhaps on another replica) can name its parent.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

use crate::{LoggingError, TRACE_TARGET, TracePlan};

/// How long one export may take before it is given up (the batch is dropped, the turn never waits for it).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The W3C header that carries a span's identity.
const TRACEPARENT: &str = "traceparent";

/// The tracer provider, shut down (flushing what is queued) when logging's guard is dropped.
pub(crate) struct Exporting(SdkTracerProvider);

impl std::fmt::Debug for Exporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporting")
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("nanobot: the last spans could not be exported: {e}");
        }
    }
}

/// The layer sending [`TRACE_TARGET`] spans to `plan`'s collector, and the provider that owns the exporter.
pub(crate) fn layer<S>(plan: &TracePlan) -> Result<(impl Layer<S> + use<S>, Exporting), LoggingError>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let error = |message: String| LoggingError::Traces {
        endpoint: plan.endpoint.clone(),
        message,
    };
    // The blocking client starts its own runtime thread; made off any async runtime, on a thread of its own.
    let tls = plan.tls.clone();
    let client = std::thread::spawn(move || {
        let builder = reqwest::blocking::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .connect_timeout(EXPORT_TIMEOUT);
        match tls {
            Some(tls) => builder.tls_backend_preconfigured((*tls).clone()),
            None => builder,
        }
        .build()
    })
    .join()
    .map_err(|_| error("the HTTP client could not be made".into()))?
    .map_err(|e| error(format!("the HTTP client could not be made: {e}")))?;
    let headers: HashMap<String, String> = plan.headers.iter().cloned().collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(&plan.endpoint)
        .with_headers(headers)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| error(e.to_string()))?;
    let resource = Resource::builder_empty()
        .with_service_name(plan.service_name.clone())
        .with_attributes([opentelemetry::KeyValue::new(
            "service.version",
            plan.service_version.clone(),
        )])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("nanobot");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(TRACE_TARGET, LevelFilter::TRACE));
    Ok((layer, Exporting(provider)))
}

/// The W3C `traceparent` of the current span, when it is exported.
pub(crate) fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `traceparent` the parent of `span` (not yet entered); a malformed value is ignored.
pub(crate) fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}
