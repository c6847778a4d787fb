//! Retries with exponential backoff (honouring `Retry-After`) and fallback models.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use nanobot_util::Backoff;
use tokio::time::Instant;

use crate::endpoint::event_stream;
use crate::{ChatRequest, ChatResponse, StreamEvent};
use crate::{EventStream, Provider};
use crate::{ProviderError, WaitKind};

/// How to wait between attempts. The default is `tokio::time::sleep`; tests inject one that records.
pub type Sleeper = Arc<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>;

/// The default sleeper.
pub fn tokio_sleeper() -> Sleeper {
    Arc::new(|d| Box::pin(tokio::time::sleep(d)))
}

/// When and how often to retry.
#[derive(Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (default 3: waits of 1 s, 2 s, 4 s).
    pub max_retries: u32,
    /// Of those, how many may follow a stall: a server that sent no response head within
    /// [`crate::Timeouts::request`], or stopped sending its body for [`crate::Timeouts::stream_idle`]
    /// ([`ProviderError::TimedOut`] with [`WaitKind::Head`] or [`WaitKind::Idle`]). Default 1: a stall may be a
    /// dead pooled connection, which a new attempt cures, but a server that stalls twice is wedged, and each
    /// stall costs a whole bound (300 s of silence on a local server), so a silent server ends the call after
    /// two bounds instead of `1 + max_retries`.
    pub max_stall_retries: u32,
    /// First delay; doubled each retry.
    pub base_delay: Duration,
    /// Upper bound of a computed delay and of an honoured `Retry-After`.
    pub max_delay: Duration,
    /// Retry even after text or tool calls were streamed to the caller (they would see it again).
    pub retry_after_output: bool,
    /// How to wait.
    pub sleeper: Sleeper,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("max_stall_retries", &self.max_stall_retries)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("retry_after_output", &self.retry_after_output)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            max_stall_retries: 1,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            retry_after_output: false,
            sleeper: tokio_sleeper(),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// Whether a failure may be tried again, `retries` retries (`stalls` of them after a stall) into the
    /// call: retryable, retries left, and for a stall, stall retries left.
    fn allows(&self, err: &ProviderError, retries: u32, stalls: u32) -> bool {
        err.is_retryable()
            && retries < self.max_retries
            && (!is_stall(err) || stalls < self.max_stall_retries)
    }

    /// The wait before retry number `retry` (0-based): `Retry-After` when given, else `base * 2^retry`; both
    /// capped at `max_delay`.
    pub fn delay(&self, retry: u32, err: &ProviderError) -> Duration {
        let computed = Backoff::exponential(self.base_delay, self.max_delay).nth_delay(retry);
        err.retry_after().unwrap_or(computed).min(self.max_delay)
    }
}

/// Wraps a provider with retries. A failure is retried when it is retryable, retries are left (for a stall:
/// [`RetryPolicy::max_stall_retries`]), nothing was streamed to the caller yet (unless
/// [`RetryPolicy::retry_after_output`]), and the call's deadline (when one is set with
/// [`RetryingProvider::with_deadline`]) leaves room for the wait: attempts, stalls and waits together never
/// outlast it.
#[derive(Debug, Clone)]
pub struct RetryingProvider {
    inner: Arc<dyn Provider>,
    policy: RetryPolicy,
    deadline: Option<CallDeadline>,
}

/// The bound of a whole call, retries included, and the endpoint its message names.
#[derive(Debug, Clone)]
struct CallDeadline {
    total: Duration,
    endpoint: String,
}

impl CallDeadline {
    fn error(&self, provider: &str) -> ProviderError {
        let err = ProviderError::TimedOut {
            provider: provider.to_owned(),
            endpoint: self.endpoint.clone(),
            what: WaitKind::Deadline,
            after: self.total,
        };
        tracing::warn!(provider, error = %err, "LLM call deadline passed");
        err
    }
}

impl RetryingProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, policy: RetryPolicy) -> Self {
        Self {
            inner,
            policy,
            deadline: None,
        }
    }

    /// Bounds each call, all attempts and waits together, by `total`; the error names `endpoint` (a base URL
    /// as [`crate::display_endpoint`] shows it).
    pub fn with_deadline(mut self, total: Duration, endpoint: impl Into<String>) -> Self {
        self.deadline = Some(CallDeadline {
            total,
            endpoint: endpoint.into(),
        });
        self
    }
}

/// Whether `err` says the server stopped answering: no response head, or a body that stopped arriving.
fn is_stall(err: &ProviderError) -> bool {
    matches!(
        err,
        ProviderError::TimedOut {
            what: WaitKind::Head | WaitKind::Idle,
            ..
        }
    )
}

/// Logs why a retryable failure ends the call: the stall rule of [`RetryPolicy::max_stall_retries`].
fn note_given_up(provider: &str, err: &ProviderError, policy: &RetryPolicy, retries: u32, stalls: u32) {
    if err.is_retryable()
        && retries < policy.max_retries
        && is_stall(err)
        && stalls >= policy.max_stall_retries
    {
        tracing::warn!(provider, stalls = stalls + 1, error = %err, "the server stalled again; not retrying");
    }
}

/// Whether a wait of `delay` still ends before `deadline`.
fn room_for(deadline: Option<Instant>, delay: Duration) -> bool {
    deadline.is_none_or(|d| Instant::now() + delay < d)
}

fn is_output(e: &StreamEvent) -> bool {
    match e {
        StreamEvent::TextDelta(t) | StreamEvent::ReasoningDelta(t) => !t.is_empty(),
        StreamEvent::ToolCallDelta { .. } | StreamEvent::ThinkingBlock(_) => true,
        StreamEvent::Usage(_) | StreamEvent::Done(_) => false,
        // A kind of event added later: count it as output, so a retry never repeats what was passed on.
        _ => true,
    }
}

/// Passes `s`'s events on to `tx` until the stream ends or fails. `None` when there is nothing left
/// to do (the stream finished, or the receiver is gone); otherwise the error and whether any
/// output (see [`is_output`]) was already forwarded.
async fn forward(
    mut s: EventStream,
    tx: &tokio::sync::mpsc::Sender<Result<StreamEvent, ProviderError>>,
) -> Option<(ProviderError, bool)> {
    let mut emitted = false;
    while let Some(item) = s.next().await {
        match item {
            Ok(e) => {
                emitted |= is_output(&e);
                tx.send(Ok(e)).await.ok()?;
            }
            Err(e) => return Some((e, emitted)),
        }
    }
    None
}

#[async_trait]
impl Provider for RetryingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let inner = self.inner.clone();
        let policy = self.policy.clone();
        let bound = self.deadline.clone();
        event_stream(move |tx| async move {
            let deadline = bound.as_ref().map(|b| Instant::now() + b.total);
            let (mut retry, mut stalls, mut dropped) = (0, 0, false);
            loop {
                let attempt = forward(inner.stream(request.clone()), &tx);
                let outcome = match (deadline, &bound) {
                    (Some(d), Some(b)) => match tokio::time::timeout_at(d, attempt).await {
                        Ok(o) => o,
                        Err(_) => Some((b.error(inner.name()), false)),
                    },
                    _ => attempt.await,
                };
                let Some((err, emitted)) = outcome else {
                    return;
                };
                let may_retry = policy.allows(&err, retry, stalls)
                    && (!emitted || policy.retry_after_output)
                    && room_for(deadline, policy.delay(retry, &err));
                if !may_retry {
                    note_given_up(inner.name(), &err, &policy, retry, stalls);
                    let _ = tx.send(Err(crate::diagnose::after_drop(err, dropped))).await;
                    return;
                }
                let delay = policy.delay(retry, &err);
                tracing::warn!(provider = %inner.name(), attempt = retry + 1, ?delay, error = %err, "retrying LLM request");
                (policy.sleeper)(delay).await;
                retry += 1;
                stalls += u32::from(is_stall(&err));
                dropped |= crate::diagnose::was_dropped(&err);
            }
        })
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        let deadline = self.deadline.as_ref().map(|b| Instant::now() + b.total);
        let (mut retry, mut stalls, mut dropped) = (0, 0, false);
        loop {
            let attempt = self.inner.chat(request.clone());
            let outcome = match (deadline, &self.deadline) {
                (Some(d), Some(b)) => tokio::time::timeout_at(d, attempt)
                    .await
                    .unwrap_or_else(|_| Err(b.error(self.inner.name()))),
                _ => attempt.await,
            };
            match outcome {
                Ok(r) => return Ok(r),
                Err(err)
                    if self.policy.allows(&err, retry, stalls)
                        && room_for(deadline, self.policy.delay(retry, &err)) =>
                {
                    let delay = self.policy.delay(retry, &err);
                    tracing::warn!(provider = %self.inner.name(), attempt = retry + 1, ?delay, error = %err, "retrying LLM request");
                    (self.policy.sleeper)(delay).await;
                    retry += 1;
                    stalls += u32::from(is_stall(&err));
                    dropped |= crate::diagnose::was_dropped(&err);
                }
                Err(err) => {
                    note_given_up(self.inner.name(), &err, &self.policy, retry, stalls);
                    return Err(crate::diagnose::after_drop(err, dropped));
                }
            }
        }
    }
}

/// Tries the primary model, then each fallback model (each with its own provider), when one fails with a
/// non-retryable error or runs out of retries before producing output.
#[derive(Debug, Clone)]
pub struct FallbackProvider {
    chain: Vec<(Arc<dyn Provider>, String)>,
}

impl FallbackProvider {
    /// `chain`: `(provider, model)` pairs, primary first. The request's model is replaced by each pair's.
    pub fn new(chain: Vec<(Arc<dyn Provider>, String)>) -> Self {
        Self { chain }
    }
}

#[async_trait]
impl Provider for FallbackProvider {
    fn name(&self) -> &str {
        self.chain.first().map_or("fallback", |(p, _)| p.name())
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let chain = self.chain.clone();
        event_stream(move |tx| async move {
            let mut last_err = None;
            for (i, (provider, model)) in chain.iter().enumerate() {
                let mut req = request.clone();
                if i > 0 || req.model.is_empty() {
                    req.model = model.clone();
                }
                let Some((err, emitted)) = forward(provider.stream(req), &tx).await else {
                    return;
                };
                if emitted || i + 1 == chain.len() {
                    let _ = tx.send(Err(err)).await;
                    return;
                }
                tracing::warn!(provider = %provider.name(), model, error = %err, "model failed; trying the next fallback model");
                last_err = Some(err);
            }
            if let Some(e) = last_err {
                let _ = tx.send(Err(e)).await;
            }
        })
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut last = ProviderError::Config("no models configured".into());
        for (i, (provider, model)) in self.chain.iter().enumerate() {
            let mut req = request.clone();
            if i > 0 || req.model.is_empty() {
                req.model = model.clone();
            }
            match provider.chat(req).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::warn!(provider = %provider.name(), model, error = %e, "model failed; trying the next fallback model");
                    last = e;
                }
            }
        }
        Err(last)
    }
}
