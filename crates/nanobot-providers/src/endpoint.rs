//! What every HTTP client needs: the endpoint, key, headers, timeouts; sending with error classification; SSE
//! with an idle timeout; and a task-backed stream that is cancelled when dropped.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::EventStream;
use crate::registry::ProviderSpec;
use crate::{ProviderError, WaitKind, parse_retry_after};
use crate::{StreamEvent, Timeouts, display_endpoint};

/// Where and how to reach one provider. `Debug` never shows the key or header values.
#[derive(Clone)]
pub struct Endpoint {
    /// Provider name (for errors and logs).
    pub provider: String,
    /// Base URL without a trailing slash (`https://api.openai.com/v1`, `https://api.anthropic.com`).
    pub base_url: String,
    /// The API key, if any.
    pub api_key: Option<String>,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Extra JSON merged into every request body.
    pub extra_body: Option<Map<String, Value>>,
    /// Extra URL query parameters (config `extraQuery`; Azure's `api-version`).
    pub query: Vec<(String, String)>,
    /// The registry spec (quirks and flags).
    pub spec: &'static ProviderSpec,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// The shared HTTP client.
    pub http: reqwest::Client,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(k, _)| (k.as_str(), "[REDACTED]"))
                    .collect::<Vec<_>>(),
            )
            .field("spec", &self.spec.name)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint for `spec` at `base_url` with the process-wide shared client
    /// ([`crate::shared_http_client`]).
    pub fn new(
        provider: impl Into<String>,
        spec: &'static ProviderSpec,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, ProviderError> {
        let provider = provider.into();
        let http = crate::http::shared_http_client()
            .map_err(|e| ProviderError::Config(format!("{provider}: {e}")))?;
        Ok(Self::with_client(provider, spec, base_url, api_key, http))
    }

    /// An endpoint for `spec` at `base_url` using `http` (builds no client of its own).
    pub fn with_client(
        provider: impl Into<String>,
        spec: &'static ProviderSpec,
        base_url: impl Into<String>,
        api_key: Option<String>,
        http: reqwest::Client,
    ) -> Self {
        let provider = provider.into();
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            provider,
            api_key,
            headers: Vec::new(),
            extra_body: None,
            query: Vec::new(),
            spec,
            timeouts: Timeouts::default(),
            http,
        }
    }

    /// Replaces the timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Adds an extra header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Uses this HTTP client.
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// The base URL as messages show it (no user, password or query).
    pub fn display_url(&self) -> String {
        display_endpoint(&self.base_url)
    }

    /// The [`ProviderError::TimedOut`] for this endpoint.
    pub(crate) fn timed_out(&self, what: WaitKind, after: Duration) -> ProviderError {
        let err = ProviderError::TimedOut {
            provider: self.provider.clone(),
            endpoint: self.display_url(),
            what,
            after,
        };
        tracing::warn!(provider = %self.provider, error = %err, "LLM call timed out");
        err
    }

    /// The deadline of a call that starts now (`timeouts.total`).
    fn deadline(&self) -> Instant {
        Instant::now() + self.timeouts.total
    }

    /// The next wait's limit: `now + bound`, or the call's deadline when that comes first.
    fn limit(&self, bound: Duration, what: WaitKind, deadline: Instant) -> (Instant, WaitKind, Duration) {
        let now = Instant::now();
        if now + bound < deadline {
            (now + bound, what, bound)
        } else {
            (deadline, WaitKind::Deadline, self.timeouts.total)
        }
    }

    /// POSTs `body` as JSON; non-2xx answers become classified errors. Waits at most `timeouts.request` for
    /// the response head, and never past `timeouts.total` from now.
    pub(crate) async fn post_json(
        &self,
        url: &str,
        auth: &[(&str, String)],
        body: &JsonBody,
    ) -> Result<reqwest::Response, ProviderError> {
        self.post_json_until(url, auth, body, self.deadline()).await
    }

    async fn post_json_until(
        &self,
        url: &str,
        auth: &[(&str, String)],
        body: &JsonBody,
        deadline: Instant,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut target = reqwest::Url::parse(url)
            .map_err(|e| ProviderError::Config(format!("{}: invalid URL `{url}`: {e}", self.provider)))?;
        if !self.query.is_empty() {
            target.query_pairs_mut().extend_pairs(self.query.iter());
        }
        let mut req = self
            .http
            .post(target)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.bytes.clone());
        for (k, v) in auth {
            req = req.header(*k, v);
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        tracing::debug!(provider = %self.provider, url, model = ?body.model, stream = body.stream, "LLM request");
        let (limit, what, after) = self.limit(self.timeouts.request, WaitKind::Head, deadline);
        let resp = match tokio::time::timeout_at(limit, req.send()).await {
            Err(_) => return Err(self.timed_out(what, after)),
            Ok(Err(e)) if e.is_connect() && e.is_timeout() => {
                return Err(self.timed_out(WaitKind::Connect, self.timeouts.connect));
            }
            Ok(Err(e)) => return Err(crate::diagnose::transport_error(self, e)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = parse_retry_after(resp.headers());
        let (limit, _, _) = self.limit(self.timeouts.stream_idle, WaitKind::Idle, deadline);
        let mut text = tokio::time::timeout_at(limit, resp.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        // Some servers echo the key back in their error text: it never goes further than here.
        for secret in self.api_key.iter().chain(self.headers.iter().map(|(_, v)| v)) {
            if secret.len() >= 4 {
                text = text.replace(secret.as_str(), "[REDACTED]");
            }
        }
        let err = crate::diagnose::explain_http(
            self,
            body.model.as_deref(),
            ProviderError::from_http(&self.provider, status.as_u16(), retry_after, &text),
        );
        tracing::warn!(provider = %self.provider, status = status.as_u16(), error = %err, "LLM request failed");
        Err(err)
    }

    /// POSTs `body` and returns the server-sent events of the answer. Every wait is bounded: the head by
    /// `timeouts.request`, each gap in the body by `timeouts.stream_idle` (any byte, keep-alive comments
    /// included, resets it), and the whole call by `timeouts.total`.
    pub(crate) async fn post_sse(
        &self,
        url: &str,
        auth: &[(&str, String)],
        body: &JsonBody,
    ) -> Result<
        impl Stream<Item = Result<eventsource_stream::Event, ProviderError>> + Send + Unpin + use<>,
        ProviderError,
    > {
        let deadline = self.deadline();
        let resp = self.post_json_until(url, auth, body, deadline).await?;
        let whole = BodyBound {
            at: deadline,
            after: self.timeouts.total,
        };
        Ok(sse(self.clone(), resp, whole))
    }

    /// Reads a whole JSON body: at most `timeouts.stream_idle` between two pieces and `timeouts.request` in
    /// all (the bound 0.3.5's `NANOBOT_OPENAI_COMPAT_TIMEOUT_S` sets). A server that sends its head and then
    /// nothing ends the read with [`WaitKind::Idle`] at the smaller of the two.
    pub(crate) async fn read_json(&self, resp: reqwest::Response) -> Result<Value, ProviderError> {
        let whole = BodyBound {
            at: Instant::now() + self.timeouts.request,
            after: self.timeouts.request,
        };
        let mut body = timed_body(self.clone(), resp, whole);
        let mut bytes = Vec::new();
        while let Some(piece) = body.next().await {
            match piece {
                Ok(b) => bytes.extend_from_slice(&b),
                Err(BodyError::Read(e)) => return Err(crate::diagnose::body_error(self, e)),
                Err(BodyError::Wait(e)) => return Err(e),
            }
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ProviderError::transient(
                &self.provider,
                "empty response body",
                None,
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| ProviderError::decode(&self.provider, "response is not JSON", Some(Box::new(e))))
    }
}

/// Why a body could not be read further.
#[derive(Debug)]
enum BodyError {
    /// A bound passed.
    Wait(ProviderError),
    /// The connection failed.
    Read(reqwest::Error),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Wait(e) => e.fmt(f),
            Self::Read(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BodyError {}

/// The bound of a whole body: when it passes, and how long it was (for the message).
#[derive(Debug, Clone, Copy)]
struct BodyBound {
    at: Instant,
    after: Duration,
}

/// The body's pieces as they arrive; a gap longer than `timeouts.stream_idle`, or reaching `whole`, ends it
/// with [`BodyError::Wait`]. Works below any parsing, so SSE comments and pings count as activity.
///
/// A body that never sent a byte when a bound passed is a server that stopped sending after its head:
/// [`WaitKind::Idle`], for as long as it was silent. One that did send and then passed `whole` is too slow:
/// [`WaitKind::Deadline`] with `whole.after`.
fn timed_body(
    ep: Endpoint,
    resp: reqwest::Response,
    whole: BodyBound,
) -> impl Stream<Item = Result<bytes::Bytes, BodyError>> + Send + Unpin + use<> {
    let body = Box::pin(resp.bytes_stream());
    let head_at = Instant::now();
    Box::pin(futures::stream::unfold(
        Some((ep, body, false)),
        move |state| async move {
            let (ep, mut body, received) = state?;
            let idle = ep.timeouts.stream_idle;
            let now = Instant::now();
            let (limit, what, after) = if now + idle < whole.at {
                (now + idle, WaitKind::Idle, idle)
            } else if received {
                (whole.at, WaitKind::Deadline, whole.after)
            } else {
                (
                    whole.at,
                    WaitKind::Idle,
                    whole.at.saturating_duration_since(head_at),
                )
            };
            match tokio::time::timeout_at(limit, body.next()).await {
                Err(_) => Some((Err(BodyError::Wait(ep.timed_out(what, after))), None)),
                Ok(None) => None,
                Ok(Some(Ok(b))) => {
                    let received = received || !b.is_empty();
                    Some((Ok(b), Some((ep, body, received))))
                }
                Ok(Some(Err(e))) => Some((Err(BodyError::Read(e)), None)),
            }
        },
    ))
}

/// The server-sent events of a response; every wait is bounded as in [`Endpoint::post_sse`].
fn sse(
    ep: Endpoint,
    resp: reqwest::Response,
    whole: BodyBound,
) -> impl Stream<Item = Result<eventsource_stream::Event, ProviderError>> + Send + Unpin + use<> {
    let provider = ep.provider.clone();
    let at = ep.clone();
    let mut events = timed_body(ep, resp, whole).eventsource();
    Box::pin(async_gen(move |tx| async move {
        loop {
            let next = match events.next().await {
                None => return,
                Some(Ok(ev)) => Ok(ev),
                Some(Err(EventStreamError::Transport(BodyError::Wait(e)))) => Err(e),
                Some(Err(EventStreamError::Transport(BodyError::Read(e)))) => {
                    Err(crate::diagnose::body_error(&at, e))
                }
                Some(Err(e)) => Err(ProviderError::transient(
                    &provider,
                    "stream interrupted",
                    Some(Box::new(std::io::Error::other(e.to_string()))),
                )),
            };
            let stop = next.is_err();
            if tx.send(next).await.is_err() || stop {
                return;
            }
        }
    }))
}

/// A stream fed by a spawned task; dropping the stream aborts the task (and with it the HTTP request).
pub(crate) struct TaskStream<T> {
    rx: mpsc::Receiver<T>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Stream for TaskStream<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.rx.poll_recv(cx)
    }
}

impl<T> Drop for TaskStream<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `f` (which sends items into the channel) lazily: the task starts on the first poll.
pub(crate) fn async_gen<T, F, Fut>(f: F) -> impl Stream<Item = T> + Send
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    futures::stream::once(async move {
        let (tx, rx) = mpsc::channel(32);
        let task = tokio::spawn(f(tx));
        TaskStream { rx, task }
    })
    .flatten()
}

/// [`async_gen`] for provider events.
pub(crate) fn event_stream<F, Fut>(f: F) -> EventStream
where
    F: FnOnce(mpsc::Sender<Result<StreamEvent, ProviderError>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    Box::pin(async_gen(f))
}

/// Merges `extra` into the top level of `body` (config `extraBody`).
/// A request's JSON, written once: its bytes (cheap to send again), and the model and stream switch it names, for
/// logs and error messages.
#[derive(Debug, Clone)]
pub(crate) struct JsonBody {
    pub(crate) bytes: bytes::Bytes,
    pub(crate) model: Option<String>,
    pub(crate) stream: bool,
}

impl JsonBody {
    /// A body built as a JSON value.
    pub(crate) fn from_value(body: &Value) -> Self {
        Self {
            bytes: serde_json::to_vec(body).unwrap_or_default().into(),
            model: body.get("model").and_then(Value::as_str).map(str::to_owned),
            stream: body.get("stream") == Some(&Value::Bool(true)),
        }
    }

    /// A body written straight from `body` (no JSON value in between).
    pub(crate) fn write(
        body: &impl serde::Serialize,
        model: &str,
        stream: bool,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            bytes: serde_json::to_vec(body)?.into(),
            model: Some(model.to_owned()),
            stream,
        })
    }
}

pub(crate) fn merge_extra(body: &mut Value, extra: Option<&Map<String, Value>>) {
    if let (Value::Object(b), Some(extra)) = (body, extra) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
}
