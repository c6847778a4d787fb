//! nanobot's bounded HTTP serving: the accept loop every HTTP listener nanobot opens runs (the gateway's API and
//! ops servers, a channel's webhook receiver): a bound on every wait for a client and on what one client address
//! may hold.
//!
//! - **Header read timeout** (`limits.headerReadTimeout`): a client must send a complete request head within
//!   this time from the connection's start or from the end of its previous response (hyper's timer; it also
//!   bounds an idle kept-alive connection). Slow-header ("slowloris") connections are closed.
//! - **Idle timeout** (`limits.idleTimeout`): while the server waits for the client (a request body that
//!   stops arriving, a kept-alive connection), a connection on which no byte arrives for this long is closed.
//!   It does not run while a handler works on a request whose body was fully received (a long model turn).
//! - **Per-client cap** (`limits.maxConnectionsPerClient`): more open connections from one IP address are
//!   answered `503` and closed at once.
//! - **Body limits** per route are set on the routers (`limits.maxBodyBytes`, `limits.maxOtherBodyBytes`); a
//!   `413` answer is counted here.
//!
//! Every refusal is reported to the server's [`RefusalObserver`] (the gateway counts them in
//! `nanobot_http_refused_total{server,kind}`; [`LogRefusals`] only logs them).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Told of every connection or request a server refused or closed: `server` is the name given to [`serve`],
/// `kind` one of `per_client_cap`, `header_timeout`, `idle_timeout`, `body_too_large`.
pub trait RefusalObserver: Send + Sync + 'static {
    /// One refusal of `kind` by `server`.
    fn refused(&self, server: &'static str, kind: &'static str);
}

/// A [`RefusalObserver`] that only logs (at debug level), for servers without metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogRefusals;

impl RefusalObserver for LogRefusals {
    fn refused(&self, server: &'static str, kind: &'static str) {
        tracing::debug!(server, kind, "http: refused");
    }
}

type Observer = Arc<dyn RefusalObserver>;

/// The bounds of one HTTP server (the gateway fills them from `api.limits` / `gateway.limits`).
/// Start from [`ServerLimits::default`] and set what differs (more bounds may be added).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// See the module docs.
    pub header_read_timeout: Duration,
    /// See the module docs.
    pub idle_timeout: Duration,
    /// See the module docs.
    pub max_connections_per_client: usize,
    /// Largest request body of the main POST route.
    pub max_body_bytes: usize,
    /// Largest request body of every other route.
    pub max_other_body_bytes: usize,
}

impl Default for ServerLimits {
    /// The defaults of the `limits` config blocks: 10 s head, 60 s idle, 64 connections per address, 20 MiB for
    /// the main route's body and 64 KiB for every other route's.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections_per_client: 64,
            max_body_bytes: 20 * 1024 * 1024,
            max_other_body_bytes: 64 * 1024,
        }
    }
}

/// Open connections per client address.
#[derive(Debug, Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One counted connection; dropping it frees the slot.
struct ClientSlot {
    table: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    fn acquire(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut t = nanobot_util::lock(&self.0);
        let n = t.entry(ip).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut t = nanobot_util::lock(&self.table.0);
        if let Some(n) = t.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

/// Serves `router` on `listener` with `limits` until `stop` is cancelled, then waits for open connections to
/// finish their requests (graceful shutdown). `name` labels logs and refusals (`api`, `gateway`,
/// `telegram-webhook`).
pub fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ServerLimits,
    metrics: Observer,
    stop: CancellationToken,
    name: &'static str,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let clients = Arc::new(PerClient::default());
        let conns = TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: pause briefly rather than spin.
                    tracing::warn!(server = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(slot) = clients.acquire(peer.ip(), limits.max_connections_per_client) else {
                metrics.refused(name, "per_client_cap");
                tracing::debug!(server = name, client = %peer.ip(), "connection refused: per-client cap");
                conns.spawn(refuse(stream));
                continue;
            };
            conns.spawn(connection(
                stream,
                router.clone(),
                limits.clone(),
                metrics.clone(),
                stop.clone(),
                name,
                slot,
            ));
        }
        conns.close();
        conns.wait().await;
    })
}

/// Answers `503` and closes; bounded so that a client that does not read cannot hold the task.
async fn refuse(mut stream: TcpStream) {
    let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 42\r\n\
connection: close\r\n\r\ntoo many connections from this address\r\n\r\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

async fn connection(
    stream: TcpStream,
    router: axum::Router,
    limits: ServerLimits,
    metrics: Observer,
    stop: CancellationToken,
    name: &'static str,
    _slot: ClientSlot,
) {
    let _ = stream.set_nodelay(true);
    let busy = Arc::new(AtomicUsize::new(0));
    let io = TokioIo::new(IdleIo {
        inner: stream,
        idle: limits.idle_timeout,
        busy: busy.clone(),
        timer: Box::pin(tokio::time::sleep(limits.idle_timeout)),
        armed: false,
        metrics: metrics.clone(),
        name,
    });
    let m = metrics.clone();
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let router = router.clone();
        let state = Arc::new(RequestState {
            busy: busy.clone(),
            entered: AtomicBool::new(false),
        });
        let m = m.clone();
        async move {
            let req = req.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    state: state.clone(),
                    request_side: true,
                })
            });
            let resp = router.oneshot(req).await?;
            if resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
                m.refused(name, "body_too_large");
            }
            Ok::<_, std::convert::Infallible>(resp.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    state,
                    request_side: false,
                })
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            metrics.refused(name, "header_timeout");
            tracing::debug!(
                server = name,
                "connection closed: request head not received in time"
            );
        } else {
            tracing::debug!(server = name, error = %e, "connection ended with an error");
        }
    }
}

/// One request's share of "the server is busy with it": from the end of its body (received or dropped by the
/// handler) until its response body is done. While any request is busy, the idle timeout does not run.
struct RequestState {
    busy: Arc<AtomicUsize>,
    entered: AtomicBool,
}

impl RequestState {
    fn enter(&self) {
        if !self.entered.swap(true, Ordering::AcqRel) {
            self.busy.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for RequestState {
    fn drop(&mut self) {
        if *self.entered.get_mut() {
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A body that tells its [`RequestState`] when the request body ends (or is dropped).
struct Tracked<B> {
    inner: B,
    state: Arc<RequestState>,
    request_side: bool,
}

impl<B> HttpBody for Tracked<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if self.request_side && matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.state.enter();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        if self.request_side {
            self.state.enter();
        }
    }
}

/// A socket whose pending read fails with `TimedOut` after `idle` without a byte, unless a request is busy
/// (see [`RequestState`]). Any byte read or written resets the clock.
struct IdleIo {
    inner: TcpStream,
    idle: Duration,
    busy: Arc<AtomicUsize>,
    timer: Pin<Box<Sleep>>,
    armed: bool,
    metrics: Observer,
    name: &'static str,
}

impl AsyncRead for IdleIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                if this.busy.load(Ordering::Acquire) > 0 {
                    this.armed = false;
                    return Poll::Pending;
                }
                if !this.armed {
                    let deadline = Instant::now() + this.idle;
                    this.timer.as_mut().reset(deadline);
                    this.armed = true;
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    this.metrics.refused(this.name, "idle_timeout");
                    tracing::debug!(server = this.name, "connection closed: idle");
                    this.armed = false;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no data from the client within the idle timeout",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for IdleIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.armed = false;
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
