//! [`OtlpReceiver`]: an OpenTelemetry collector's OTLP/HTTP traces endpoint on `127.0.0.1` (`POST /v1/traces`,
//! protobuf), decoding each export with the OpenTelemetry protobuf definitions (`opentelemetry-proto`) and keeping
//! the spans and the raw bodies, for the tests that follow a turn's spans.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use nanobot_util::lock;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;

/// One span as the collector received it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Trace id, lowercase hex.
    pub trace_id: String,
    /// Span id, lowercase hex.
    pub span_id: String,
    /// The parent's span id, lowercase hex; empty for a root.
    pub parent_span_id: String,
    /// `SpanKind` as its protobuf number (1 internal, 2 server, 3 client, 4 producer).
    pub kind: i32,
    /// `Status.code` (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// Attributes, values as text (numbers and booleans written out).
    pub attributes: BTreeMap<String, String>,
    /// `service.name` of the resource it came with.
    pub service_name: String,
}

impl ReceivedSpan {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    bodies: Vec<Vec<u8>>,
    headers: Vec<BTreeMap<String, String>>,
    refused: Vec<String>,
}

type Shared = Arc<(Mutex<Received>, Condvar)>;

/// An OTLP/HTTP traces receiver on a background runtime of its own (usable from plain and async tests).
pub struct OtlpReceiver {
    base: String,
    received: Shared,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        // Dropped from async tests too: never block on the server's runtime.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for OtlpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpReceiver").field("base", &self.base).finish()
    }
}

impl OtlpReceiver {
    /// Starts the receiver.
    ///
    /// # Panics
    /// When no runtime or port can be had.
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-receiver")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("OtlpReceiver: no runtime: {e}"));
        let received: Shared = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = received.clone();
        runtime.spawn(async move {
            let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = tx.send(listener.local_addr().map_err(|e| e.to_string()));
            let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let shared = shared.clone();
                async move { receive(&shared, &uri, &headers, &body) }
            });
            let _ = axum::serve(listener, app).await;
        });
        let addr = match rx.recv() {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => panic!("OtlpReceiver: cannot listen: {e}"),
            Err(e) => panic!("OtlpReceiver: the server task ended: {e}"),
        };
        Self {
            base: format!("http://{addr}"),
            received,
            runtime: Some(runtime),
        }
    }

    /// The collector's base address (`http://127.0.0.1:PORT`): exporters add `/v1/traces`.
    pub fn endpoint(&self) -> &str {
        &self.base
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        lock(&self.received.0).spans.clone()
    }

    /// Every export's body as it arrived (protobuf), to look for what must not be there.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        lock(&self.received.0).bodies.clone()
    }

    /// Each export's request headers (lowercase names).
    pub fn headers(&self) -> Vec<BTreeMap<String, String>> {
        lock(&self.received.0).headers.clone()
    }

    /// Requests that were not a decodable traces export, described.
    pub fn refused(&self) -> Vec<String> {
        lock(&self.received.0).refused.clone()
    }

    /// Waits (at most `within`) until `done` holds for the spans received; returns them either way.
    pub fn wait_for(&self, within: Duration, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + within;
        let (m, cv) = &*self.received;
        let mut r = lock(m);
        loop {
            if done(&r.spans) {
                return r.spans.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return r.spans.clone();
            }
            r = match cv.wait_timeout(r, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

fn receive(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> (StatusCode, Vec<u8>) {
    let (m, cv) = &**shared;
    let mut r = lock(m);
    if uri.path() != "/v1/traces" {
        r.refused.push(format!("path {}", uri.path()));
        return (StatusCode::NOT_FOUND, Vec::new());
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(req) => req,
        Err(e) => {
            r.refused.push(format!("not a traces export: {e}"));
            return (StatusCode::BAD_REQUEST, Vec::new());
        }
    };
    r.bodies.push(body.to_vec());
    r.headers.push(
        headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    );
    for rs in request.resource_spans {
        let service_name = rs
            .resource
            .iter()
            .flat_map(|res| &res.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            r.spans.push(ReceivedSpan {
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                kind: span.kind,
                status_code: span.status.map_or(0, |s| s.code),
                attributes: attributes(&span.attributes),
                service_name: service_name.clone(),
            });
        }
    }
    cv.notify_all();
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|v| text(Some(v))).collect();
            items.join(",")
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
