//! What every HTTP client needs: the endpoint, key, headers, timeouts; sending with error classification; SSE
//! with an idle timeout; and a task-backed stream that is cancelled when dropped.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::error::{ProviderError, parse_retry_after};
use crate::provider::EventStream;
use crate::registry::ProviderSpec;
use crate::types::{StreamEvent, Timeouts};

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
    /// An endpoint for `spec` at `base_url` with the shared default client.
    pub fn new(
        provider: impl Into<String>,
        spec: &'static ProviderSpec,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, ProviderError> {
        let provider = provider.into();
        let http = crate::http::http_client_builder(Timeouts::default().connect)
            .build()
            .map_err(|e| ProviderError::Config(format!("{provider}: cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            provider,
            api_key,
            headers: Vec::new(),
            extra_body: None,
            query: Vec::new(),
            spec,
            timeouts: Timeouts::default(),
            http,
        })
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

    /// POSTs `body` as JSON; non-2xx answers become classified errors. Waits at most `timeouts.request` for
    /// the response head.
    pub(crate) async fn post_json(
        &self,
        url: &str,
        auth: &[(&str, String)],
        body: &Value,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut target = reqwest::Url::parse(url)
            .map_err(|e| ProviderError::Config(format!("{}: invalid URL `{url}`: {e}", self.provider)))?;
        if !self.query.is_empty() {
            target.query_pairs_mut().extend_pairs(self.query.iter());
        }
        let mut req = self.http.post(target).json(body);
        for (k, v) in auth {
            req = req.header(*k, v);
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        tracing::debug!(provider = %self.provider, url, model = ?body.get("model"), stream = ?body.get("stream"), "LLM request");
        let resp = match tokio::time::timeout(self.timeouts.request, req.send()).await {
            Err(_) => {
                return Err(ProviderError::transient(
                    &self.provider,
                    "timed out waiting for the response",
                    None,
                ));
            }
            Ok(Err(e)) => return Err(ProviderError::from_reqwest(&self.provider, e)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = parse_retry_after(resp.headers());
        let mut text = tokio::time::timeout(self.timeouts.stream_idle, resp.text())
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
        let err = ProviderError::from_http(&self.provider, status.as_u16(), retry_after, &text);
        tracing::warn!(provider = %self.provider, status = status.as_u16(), error = %err, "LLM request failed");
        Err(err)
    }

    /// Reads a whole JSON body with the request timeout.
    pub(crate) async fn read_json(&self, resp: reqwest::Response) -> Result<Value, ProviderError> {
        let bytes = match tokio::time::timeout(self.timeouts.request, resp.bytes()).await {
            Err(_) => {
                return Err(ProviderError::transient(
                    &self.provider,
                    "timed out reading the response",
                    None,
                ));
            }
            Ok(Err(e)) => return Err(ProviderError::from_reqwest(&self.provider, e)),
            Ok(Ok(b)) => b,
        };
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

/// The server-sent events of a response; each wait longer than `idle` is a transient "stalled" error.
pub(crate) fn sse(
    provider: String,
    resp: reqwest::Response,
    idle: std::time::Duration,
) -> impl Stream<Item = Result<eventsource_stream::Event, ProviderError>> + Send + Unpin {
    let mut events = resp.bytes_stream().eventsource();
    Box::pin(async_gen(move |tx| async move {
        loop {
            let next = match tokio::time::timeout(idle, events.next()).await {
                Err(_) => Err(ProviderError::transient(
                    &provider,
                    format!("stream stalled: nothing received for {idle:?}"),
                    None,
                )),
                Ok(None) => return,
                Ok(Some(Ok(ev))) => Ok(ev),
                Ok(Some(Err(e))) => Err(ProviderError::transient(
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
pub(crate) fn merge_extra(body: &mut Value, extra: Option<&Map<String, Value>>) {
    if let (Value::Object(b), Some(extra)) = (body, extra) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
}
