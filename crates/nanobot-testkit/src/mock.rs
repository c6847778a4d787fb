//! The `MockLlm` HTTP server.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{any, get, post};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::render::{RenderCtx, Rendered, RenderedBody, cut_after_deltas};
use crate::reply::{MockReply, ReplyKind};
use crate::request::{RecordedRequest, WireFormat};
use crate::{anthropic, openai};

/// Text of the default fallback's error body.
pub const NO_REPLY_LEFT: &str = "MockLlm: no scripted reply left";

type Matcher = Arc<dyn Fn(&RecordedRequest) -> bool + Send + Sync>;

struct Rule {
    matcher: Matcher,
    reply: MockReply,
    once: bool,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<MockReply>,
    rules: Vec<Rule>,
    fallback: Option<MockReply>,
    requests: Vec<RecordedRequest>,
    cancelled: Vec<usize>,
}

struct Inner {
    script: Mutex<Script>,
    count: watch::Sender<usize>,
    cancelled: watch::Sender<usize>,
    call_counter: AtomicU64,
    seq: AtomicU64,
}

impl Inner {
    fn script(&self) -> MutexGuard<'_, Script> {
        // A panicking test thread must not hide the recorded requests from the others.
        nanobot_util::lock(&self.script)
    }
}

/// Marks a completion request as cancelled if it is dropped before the answer was complete.
struct InFlight {
    inner: Arc<Inner>,
    index: usize,
    done: bool,
}

impl InFlight {
    fn finish(mut self) {
        self.done = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            let mut script = self.inner.script();
            script.cancelled.push(self.index);
            let n = script.cancelled.len();
            drop(script);
            self.inner.cancelled.send_replace(n);
        }
    }
}

/// Closes the connection it belongs to when notified.
#[derive(Clone)]
struct Kill(Arc<Notify>);

/// A scripted mock LLM served over real HTTP on `127.0.0.1:<random port>`.
///
/// Speaks the OpenAI chat-completions format (`POST /v1/chat/completions`, also `/chat/completions`;
/// `GET /v1/models`) and the Anthropic Messages format (`POST /v1/messages`). Each completion request takes
/// one reply: first the matching rule ([`MockLlm::when`]), else the next scripted reply ([`MockLlm::push`]),
/// else the fallback ([`MockLlm::set_fallback`]; by default an HTTP 500 whose body says
/// [`NO_REPLY_LEFT`], so a test that runs out of script fails loudly). Every request is recorded.
///
/// Dropping the `MockLlm` stops the server and closes open connections.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use nanobot_testkit::{MockLlm, MockReply};
/// let mock = MockLlm::start().await;
/// mock.push(MockReply::text("Hello!"));
/// assert!(mock.openai_base_url().ends_with("/v1"));
/// assert_eq!(mock.remaining(), 1);
/// # }
/// ```
pub struct MockLlm {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: JoinHandle<()>,
    /// The mock's own runtime when started with [`MockLlm::start_background`].
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockLlm")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(runtime) = self.runtime.take() {
            // Does not block, so dropping the mock inside an async test is fine.
            runtime.shutdown_background();
        }
    }
}

impl MockLlm {
    /// Starts the server on `127.0.0.1:0`. Panics if no port can be bound (use [`MockLlm::try_start`] to
    /// handle that). Must be called inside a tokio runtime.
    pub async fn start() -> Self {
        match Self::try_start().await {
            Ok(mock) => mock,
            Err(err) => panic!("MockLlm: cannot start: {err:#}"),
        }
    }

    /// Starts the server on `127.0.0.1:0`.
    pub async fn try_start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            script: Mutex::new(Script::default()),
            count: watch::Sender::new(0),
            cancelled: watch::Sender::new(0),
            call_counter: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(openai_handler))
            .route("/chat/completions", post(openai_handler))
            .route("/v1/models", get(models_handler))
            .route("/models", get(models_handler))
            .route("/v1/messages", post(anthropic_handler))
            .route("/messages", post(anthropic_handler))
            .fallback(any(not_found_handler))
            .with_state(inner.clone());
        let task = tokio::spawn(accept_loop(listener, router));
        Ok(Self {
            inner,
            addr,
            task,
            runtime: None,
        })
    }

    /// Starts the server on a runtime of its own (one worker thread), so it keeps answering while the test
    /// thread blocks, e.g. in `std::process::Command::output()` on a nanobot binary. Works with or without
    /// a surrounding runtime. Delays use real time there (a paused test clock does not reach it).
    ///
    /// ```
    /// use nanobot_testkit::{MockLlm, MockReply};
    /// let mock = MockLlm::start_background();
    /// mock.push(MockReply::text("hi"));
    /// assert_eq!(mock.remaining(), 1);
    /// ```
    pub fn start_background() -> Self {
        match Self::try_start_background() {
            Ok(mock) => mock,
            Err(err) => panic!("MockLlm: cannot start: {err:#}"),
        }
    }

    /// Fallible [`MockLlm::start_background`].
    pub fn try_start_background() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mock-llm")
            .enable_all()
            .build()?;
        // `block_on` may not run inside another runtime; spawning onto the new one and waiting for a
        // std channel works in both cases.
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let _ = tx.send(Self::try_start().await);
        });
        let mut mock = rx.recv()??;
        mock.runtime = Some(runtime);
        Ok(mock)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI base URL: `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Anthropic base URL: `http://127.0.0.1:PORT` (clients append `/v1/messages`).
    pub fn anthropic_base_url(&self) -> String {
        self.url()
    }

    /// A partial nanobot `config.json` (camelCase, as the Python nanobot writes it) that points the agent at
    /// this mock: OpenAI format through the `custom` provider, Anthropic format through the `anthropic`
    /// provider with `apiBase` set. Model `mock-model`, API key `sk-mock`. Add the rest (workspace, channels)
    /// and write it with [`crate::TempHome::write_config`].
    ///
    /// ```
    /// # use nanobot_testkit::{MockLlm, WireFormat};
    /// let mock = MockLlm::start_background();
    /// let config = mock.nanobot_config(WireFormat::OpenAi);
    /// assert_eq!(config["providers"]["custom"]["apiBase"], mock.openai_base_url());
    /// assert_eq!(config["agents"]["defaults"]["provider"], "custom");
    /// ```
    pub fn nanobot_config(&self, format: WireFormat) -> Value {
        let (provider, base) = match format {
            WireFormat::OpenAi => ("custom", self.openai_base_url()),
            WireFormat::Anthropic => ("anthropic", self.anthropic_base_url()),
        };
        json!({
            "agents": { "defaults": { "model": "mock-model", "provider": provider } },
            "providers": { provider: { "apiKey": "sk-mock", "apiBase": base } },
        })
    }

    /// Appends a reply to the FIFO script (one reply per completion request).
    pub fn push(&self, reply: MockReply) {
        self.inner.script().queue.push_back(reply);
    }

    /// Appends several replies, in order.
    pub fn push_all(&self, replies: impl IntoIterator<Item = MockReply>) {
        self.inner.script().queue.extend(replies);
    }

    /// Scripted replies not yet consumed (rules and the fallback not counted).
    pub fn remaining(&self) -> usize {
        self.inner.script().queue.len()
    }

    /// Drops the scripted replies that are left.
    pub fn clear_script(&self) {
        self.inner.script().queue.clear();
    }

    /// The reply used when no rule matches and the script is empty.
    pub fn set_fallback(&self, reply: MockReply) {
        self.inner.script().fallback = Some(reply);
    }

    /// Back to the default fallback (HTTP 500, [`NO_REPLY_LEFT`]).
    pub fn clear_fallback(&self) {
        self.inner.script().fallback = None;
    }

    /// A reusable rule: every completion request whose last user text contains `needle` gets `reply`
    /// (checked before the FIFO; rules are tried in the order they were added).
    ///
    /// Beware of tool loops: the follow-up request that carries a tool result still has the same last user
    /// text, so a reusable rule that answers with a tool call matches again and again. Use
    /// [`MockLlm::when_last_user_contains_once`], or [`MockLlm::when`] with
    /// `!r.ends_with_tool_result()`.
    pub fn when_last_user_contains(&self, needle: impl Into<String>, reply: MockReply) {
        let needle = needle.into();
        self.add_rule(
            Arc::new(move |r| r.last_user_text().is_some_and(|t| t.contains(&needle))),
            reply,
            false,
        );
    }

    /// Like [`MockLlm::when_last_user_contains`], but the rule is removed after its first match.
    pub fn when_last_user_contains_once(&self, needle: impl Into<String>, reply: MockReply) {
        let needle = needle.into();
        self.add_rule(
            Arc::new(move |r| r.last_user_text().is_some_and(|t| t.contains(&needle))),
            reply,
            true,
        );
    }

    /// A reusable rule with any predicate over the recorded request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # use nanobot_testkit::{MockLlm, MockReply};
    /// let mock = MockLlm::start().await;
    /// mock.when(|r| r.tool_names().is_empty(), MockReply::text("no tools offered"));
    /// # }
    /// ```
    pub fn when(&self, matcher: impl Fn(&RecordedRequest) -> bool + Send + Sync + 'static, reply: MockReply) {
        self.add_rule(Arc::new(matcher), reply, false);
    }

    /// Like [`MockLlm::when`], but the rule is removed after its first match.
    pub fn when_once(
        &self,
        matcher: impl Fn(&RecordedRequest) -> bool + Send + Sync + 'static,
        reply: MockReply,
    ) {
        self.add_rule(Arc::new(matcher), reply, true);
    }

    /// Removes every rule.
    pub fn clear_rules(&self) {
        self.inner.script().rules.clear();
    }

    fn add_rule(&self, matcher: Matcher, reply: MockReply, once: bool) {
        self.inner.script().rules.push(Rule { matcher, reply, once });
    }

    /// Every request received so far (all paths, including `GET /v1/models` and unknown paths), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.script().requests.clone()
    }

    /// The completion requests only (chat completions and messages), in order.
    pub fn completion_requests(&self) -> Vec<RecordedRequest> {
        self.inner
            .script()
            .requests
            .iter()
            .filter(|r| r.method == "POST" && r.format().is_some())
            .cloned()
            .collect()
    }

    /// The last request received, if any.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.inner.script().requests.last().cloned()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        *self.inner.count.borrow()
    }

    /// Indexes ([`RecordedRequest::index`]) of the completion requests whose client went away before the
    /// answer was complete (during a `delay`, a stalled stream, or mid-body). Use it to check that `/stop`
    /// really aborted the in-flight LLM call. Faults the mock causes itself (dropped connections) do not count.
    pub fn cancelled(&self) -> Vec<usize> {
        self.inner.script().cancelled.clone()
    }

    /// Resolves once at least `n` requests have been cancelled by their client (see [`MockLlm::cancelled`]).
    /// Never sleeps; wrap it in `tokio::time::timeout` if the test should fail rather than hang.
    pub async fn wait_for_cancelled(&self, n: usize) -> Vec<usize> {
        let mut rx = self.inner.cancelled.subscribe();
        let _ = rx.wait_for(|count| *count >= n).await;
        self.cancelled()
    }

    /// Resolves once at least `n` requests (of any path) have been received, and returns them all.
    /// A request counts as soon as its body has been read, before any `delay` and before the answer.
    /// Never sleeps; wrap it in `tokio::time::timeout` if the test should fail rather than hang.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<RecordedRequest> {
        let mut rx = self.inner.count.subscribe();
        // The sender lives in `inner`, which `self` keeps alive, so this cannot fail.
        let _ = rx.wait_for(|count| *count >= n).await;
        self.requests()
    }
}

async fn accept_loop(listener: TcpListener, router: Router) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let kill = Kill(Arc::new(Notify::new()));
        let service = TowerToHyperService::new(router.clone().layer(Extension(kill.clone())));
        connections.spawn(async move {
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                // Dropping the connection future closes the socket without an answer.
                () = kill.0.notified() => {}
            }
        });
    }
}

async fn record(inner: &Inner, req: Request) -> RecordedRequest {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let raw_body = String::from_utf8_lossy(&bytes).into_owned();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(raw_body.clone()))
    };
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut script = inner.script();
    let recorded = RecordedRequest {
        index: script.requests.len(),
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers,
        body,
        raw_body,
    };
    script.requests.push(recorded.clone());
    let count = script.requests.len();
    drop(script);
    inner.count.send_replace(count);
    recorded
}

fn next_reply(inner: &Inner, request: &RecordedRequest) -> MockReply {
    let mut script = inner.script();
    if let Some(pos) = script.rules.iter().position(|r| (r.matcher)(request)) {
        if script.rules[pos].once {
            return script.rules.remove(pos).reply;
        }
        return script.rules[pos].reply.clone();
    }
    if let Some(reply) = script.queue.pop_front() {
        return reply;
    }
    script.fallback.clone().unwrap_or_else(|| {
        MockReply::error(500)
            .error_message(NO_REPLY_LEFT)
            .header("x-mockllm", "no-scripted-reply")
    })
}

async fn openai_handler(
    State(inner): State<Arc<Inner>>,
    Extension(kill): Extension<Kill>,
    req: Request,
) -> Response {
    complete(inner, kill, req, WireFormat::OpenAi).await
}

async fn anthropic_handler(
    State(inner): State<Arc<Inner>>,
    Extension(kill): Extension<Kill>,
    req: Request,
) -> Response {
    complete(inner, kill, req, WireFormat::Anthropic).await
}

async fn models_handler(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    record(&inner, req).await;
    json_response(200, &[], &openai::models())
}

async fn not_found_handler(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let recorded = record(&inner, req).await;
    json_response(
        404,
        &[],
        &json!({ "error": {
            "message": format!("MockLlm: no route for {} {}", recorded.method, recorded.path),
            "type": "invalid_request_error", "param": null, "code": "unknown_url",
        }}),
    )
}

async fn complete(inner: Arc<Inner>, kill: Kill, req: Request, format: WireFormat) -> Response {
    let recorded = record(&inner, req).await;
    let reply = next_reply(&inner, &recorded);
    let guard = InFlight {
        inner: inner.clone(),
        index: recorded.index,
        done: false,
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    if reply.kind == ReplyKind::DropConnection {
        guard.finish();
        kill.0.notify_one();
        return std::future::pending().await;
    }
    let ctx = RenderCtx {
        request: &recorded.body,
        request_bytes: recorded.raw_body.len(),
        seq: inner.seq.fetch_add(1, Ordering::SeqCst) + 1,
        call_counter: &inner.call_counter,
    };
    let rendered = match format {
        WireFormat::OpenAi => openai::render(&reply, &ctx),
        WireFormat::Anthropic => anthropic::render(&reply, &ctx),
    };
    respond(rendered, &reply, guard)
}

fn respond(rendered: Rendered, reply: &MockReply, guard: InFlight) -> Response {
    let Rendered {
        status,
        headers,
        body,
    } = rendered;
    let cut = reply.stall_after.or(reply.drop_after);
    match body {
        RenderedBody::Json(value) if cut.is_none() => {
            guard.finish();
            json_response(status, &headers, &value)
        }
        RenderedBody::Json(_) => {
            // Headers go out, the body never does.
            let tail = tail(reply, guard);
            build(status, &headers, "application/json", Body::from_stream(tail))
        }
        RenderedBody::Sse(events) => {
            let events = match cut {
                _ if reply.stall_head => Vec::new(),
                Some(n) => cut_after_deltas(events, n),
                None => events,
            };
            let pings = reply.keepalive.map_or_else(
                || stream::empty().boxed(),
                |(every, count)| {
                    stream::iter(0..count)
                        .then(move |_| async move {
                            tokio::time::sleep(every).await;
                            Ok::<Bytes, std::io::Error>(Bytes::from_static(b": keep-alive\n\n"))
                        })
                        .boxed()
                },
            );
            let head = pings.chain(stream::iter(
                events
                    .into_iter()
                    .map(|e| Ok::<Bytes, std::io::Error>(e.to_bytes())),
            ));
            let body = if cut.is_some() {
                Body::from_stream(head.chain(tail(reply, guard)))
            } else {
                // The guard lives in the body: dropped before the end means the client went away.
                let mut guard = Some(guard);
                Body::from_stream(head.chain(stream::poll_fn(move |_| {
                    if let Some(g) = guard.take() {
                        g.finish();
                    }
                    Poll::Ready(None)
                })))
            };
            let mut response = build(status, &headers, "text/event-stream", body);
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
    }
}

/// The end of a cut body: hang forever (stall) or fail the body so the connection is aborted (drop).
fn tail(reply: &MockReply, guard: InFlight) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    if reply.stall_after.is_some() {
        // Never ends; the guard is dropped (cancelled) when the client gives up.
        stream::poll_fn(move |_| {
            let _ = &guard;
            Poll::Pending
        })
        .boxed()
    } else {
        guard.finish();
        stream::once(async {
            // Return Pending once first: hyper flushes what it has buffered (head and the chunks sent so
            // far) before it sees the error and aborts the connection.
            tokio::task::yield_now().await;
            Err(std::io::Error::other("MockLlm: connection dropped mid-body"))
        })
        .boxed()
    }
}

fn json_response(status: u16, headers: &[(String, String)], value: &Value) -> Response {
    build(status, headers, "application/json", Body::from(value.to_string()))
}

fn build(status: u16, headers: &[(String, String)], content_type: &str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let map = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        map.insert(header::CONTENT_TYPE, value);
    }
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            map.append(name, value);
        }
    }
    response
}
