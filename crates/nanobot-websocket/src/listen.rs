//! The listener's accept side: optional TLS (`sslCertfile`/`sslKeyfile`) and a bound on every wait for a client
//! before the WebSocket upgrade.
//!
//! - TLS handshake: at most the settings' `header_read_timeout` (default [`TLS_HANDSHAKE_TIMEOUT`]).
//! - Request head: at most `header_read_timeout` (default [`HEADER_READ_TIMEOUT`]) from the connection's start or the end of the previous
//!   response (hyper's header-read timer; it also closes idle kept-alive connections), so slow-header clients
//!   cannot pile up.
//! - Per client address: at most `max_connections_per_client` (default [`MAX_CONNECTIONS_PER_CLIENT`])
//!   connections still in their HTTP phase (before an upgrade, or serving the page); more are answered `503` and
//!   closed at once, and counted ([`crate::WebSocketChannel::refused_connections`]).
//! - After the upgrade the WebSocket connection has its own bounds (ping/pong, send timeout; see
//!   `channel::serve_connection`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use nanobot_channels::ChannelError;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::NAME;

/// Bound on a client's TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on receiving a request head (see the module docs).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap on one client address's connections in their HTTP phase.
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 64;
/// Connections the listener refused or closed before their upgrade, by cause (a metric for each refusal).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    per_client_cap: AtomicU64,
    header_timeout: AtomicU64,
    tls_handshake: AtomicU64,
}

impl Refusals {
    pub(crate) fn per_client_cap(&self) {
        self.per_client_cap.fetch_add(1, Ordering::Relaxed);
    }

    /// `(kind, count)` for each cause: `per_client_cap`, `header_timeout`, `tls_handshake`.
    pub(crate) fn snapshot(&self) -> [(&'static str, u64); 3] {
        [
            ("per_client_cap", self.per_client_cap.load(Ordering::Relaxed)),
            ("header_timeout", self.header_timeout.load(Ordering::Relaxed)),
            ("tls_handshake", self.tls_handshake.load(Ordering::Relaxed)),
        ]
    }
}

/// Bound on finishing open HTTP exchanges at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn tls_error(what: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.into(),
        message: what,
    }
}

/// The TLS acceptor for a PEM certificate chain and private key; errors name the key and the file.
pub(crate) fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ChannelError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect)
        .map_err(|e| {
            tls_error(format!(
                "channels.websocket.sslCertfile {}: cannot read a PEM certificate chain: {e}",
                cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(tls_error(format!(
            "channels.websocket.sslCertfile {}: no certificate in the file",
            cert.display()
        )));
    }
    // The error of a key file never quotes its content.
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        tls_error(format!(
            "channels.websocket.sslKeyfile {}: cannot read a PEM private key: {e}",
            key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| tls_error(format!("channels.websocket: TLS setup failed: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            tls_error(format!(
                "channels.websocket.sslCertfile/sslKeyfile ({}, {}): the key does not fit the certificate: {e}",
                cert.display(),
                key.display()
            ))
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves one accepted connection: TLS first when configured, then HTTP/1.1 with upgrades.
pub(crate) async fn serve_stream<S>(
    stream: S,
    remote: Option<SocketAddr>,
    router: axum::Router,
    tls: Option<TlsAcceptor>,
    limit: Duration,
    refusals: Arc<Refusals>,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(acceptor) = tls else {
        serve_http(stream, remote, router, limit, &refusals, stop).await;
        return;
    };
    let accepted = tokio::select! {
        () = stop.cancelled() => return,
        r = tokio::time::timeout(limit, acceptor.accept(stream)) => r,
    };
    match accepted {
        Ok(Ok(tls)) => serve_http(tls, remote, router, limit, &refusals, stop).await,
        Ok(Err(e)) => tracing::debug!(?remote, error = %e, "websocket: TLS handshake failed"),
        Err(_) => {
            refusals.tls_handshake.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?remote, "websocket: TLS handshake timed out");
        }
    }
}

async fn serve_http<S>(
    stream: S,
    remote: Option<SocketAddr>,
    router: axum::Router,
    limit: Duration,
    refusals: &Refusals,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let router = router.clone();
        let mut req = req.map(Body::new);
        if let Some(addr) = remote {
            req.extensions_mut().insert(ConnectInfo(addr));
        }
        router.oneshot(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limit)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            refusals.header_timeout.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                ?remote,
                "websocket: connection closed, request head not received in time"
            );
        } else {
            tracing::debug!(?remote, error = %e, "websocket: connection ended with an error");
        }
    }
}

/// Open HTTP-phase connections per client address.
#[derive(Debug, Default)]
pub(crate) struct PerClient(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One counted connection; releases its count when dropped.
pub(crate) struct ClientSlot {
    table: Arc<PerClient>,
    ip: std::net::IpAddr,
}

impl PerClient {
    /// A slot for `ip`, or `None` when it already holds `cap` connections.
    pub(crate) fn enter(self: &Arc<Self>, ip: std::net::IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut table = nanobot_util::lock(&self.0);
        let n = table.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut table = nanobot_util::lock(&self.table.0);
        if let Some(n) = table.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.remove(&self.ip);
            }
        }
    }
}

/// Answers `503` and closes; bounded, so a client that does not read cannot hold the task.
pub(crate) async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 40\r\n\
connection: close\r\n\r\ntoo many connections from this address\r\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
    })
    .await;
}
