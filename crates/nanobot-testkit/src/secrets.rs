//! Looking for secrets where they must not be: everything logged at TRACE level (our code and every library,
//! `log` records included) and every rendering of an error and its sources.

use nanobot_util::lock;
use std::sync::{Arc, Mutex};

/// Everything a tracing subscriber writes. Install it with [`LogCapture::install`] in a test binary of its own,
/// so that it is the process-wide subscriber.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// A capture installed as the global subscriber at TRACE level, without colours.
    ///
    /// # Panics
    /// When a global subscriber is already installed (a test binary gets one).
    #[allow(
        clippy::expect_used,
        reason = "test helper: a second install is a broken test binary"
    )]
    pub fn install() -> Self {
        let capture = Self::default();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(capture.clone())
            .with_ansi(false)
            .try_init()
            .expect("LogCapture::install: a global subscriber is already set");
        capture
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// `e` and each of its sources, with `Display` and `Debug`, one per line.
pub fn error_text(e: &dyn std::error::Error) -> String {
    let mut out = format!("{e}\n{e:?}\n");
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(&format!("{s}\n{s:?}\n"));
        src = s.source();
    }
    out
}

/// How an [`EchoServer`] fails every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Echo {
    /// HTTP `status` with a JSON error whose usual message fields (`msg`, `message`, `errmsg`, `error`,
    /// `description`) all hold the whole request: its line, every header and its body (a broken or hostile
    /// proxy, or a service that quotes what it was sent).
    Json(u16),
    /// HTTP 502 with an HTML page echoing the whole request.
    Html,
    /// The connection is accepted and closed at once.
    Hangup,
}

/// A local HTTP server that fails every request in the way [`Echo`] says, echoing what it was sent (tokens in
/// headers, secrets in request bodies) back to the client, so that a test can check the client never lets them
/// into an error or a log line. Runs until the test's runtime ends.
#[derive(Debug)]
pub struct EchoServer {
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
}

impl EchoServer {
    /// Starts one on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    #[allow(clippy::expect_used, reason = "test helper")]
    pub async fn start(echo: Echo) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("local address"));
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                if echo == Echo::Hangup {
                    drop(sock);
                    continue;
                }
                tokio::spawn(async move {
                    // Read the head and as much of the body as arrives within a short bound.
                    let mut request = Vec::new();
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        match tokio::time::timeout(std::time::Duration::from_millis(200), sock.read(&mut buf))
                            .await
                        {
                            Ok(Ok(n)) if n > 0 && request.len() < 1 << 20 => {
                                request.extend_from_slice(&buf[..n])
                            }
                            _ => break,
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let (status, kind, body) = match echo {
                        Echo::Json(status) => (
                            status,
                            "application/json",
                            serde_json::json!({
                                "code": 99_991_663, "errcode": 40_001, "ok": false,
                                "msg": text, "message": text, "errmsg": text, "error": text, "description": text,
                            })
                            .to_string(),
                        ),
                        _ => (502, "text/html", format!("<html><pre>bad gateway for\n{text}</pre></html>")),
                    };
                    let head = format!(
                        "HTTP/1.1 {status} Echo\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(body.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Self { base }
    }
}

/// Runs `attempt` against an [`EchoServer`] of every [`Echo`] kind (with the server's base URL and each secret in
/// `secrets`), then checks that none of `secrets` appears in the error texts `attempt` returned nor in anything
/// `capture` recorded. `attempt` should log each error it returns (so the log check sees its rendering too).
///
/// # Panics
/// When a secret leaked, or when nothing was captured at all (a broken capture would hide leaks).
pub async fn assert_secrets_never_leave<F, Fut>(capture: &LogCapture, secrets: &[&str], attempt: F)
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let mut errors = String::new();
    for echo in [
        Echo::Json(401),
        Echo::Json(500),
        Echo::Json(200),
        Echo::Html,
        Echo::Hangup,
    ] {
        let server = EchoServer::start(echo).await;
        for secret in secrets {
            for e in attempt(server.base.clone(), (*secret).to_owned()).await {
                errors.push_str(&e);
                errors.push('\n');
            }
        }
    }
    let logs = capture.text();
    assert!(
        !errors.trim().is_empty(),
        "no error was returned against failing servers"
    );
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG") || logs.contains("WARN"),
        "nothing was captured: {logs}"
    );
    for secret in secrets {
        assert!(
            !errors.contains(secret),
            "an error shows the secret {secret:?}:\n{errors}"
        );
        assert!(
            !logs.contains(secret),
            "the logs show the secret {secret:?}:\n{logs}"
        );
    }
}

/// A test that a channel adapter's secret never leaves: for every [`Echo`] kind and each secret given, the channel
/// built by `$make` (with `$base`, the failing server's URL, `$secret`, and `$media`, a temporary folder, in scope)
/// is started (bounded to 3 s: it fails, or keeps retrying) and asked to send to `$chat`; every error is logged and
/// collected, and [`assert_secrets_never_leave`] checks errors and TRACE logs. Expands to
/// `#[tokio::test] async fn the_secret_never_reaches_errors_or_logs()`; the calling crate needs `nanobot-bus`,
/// `nanobot-channels`, `tokio-util`, `tracing` and (dev) `tempfile`.
///
/// A channel its platform calls (a webhook) never fails on its own: `send_only` before the arguments skips `run`
/// (its secrets travel when it sends).
#[macro_export]
macro_rules! channel_secrets_test {
    (send_only, $name:literal, $chat:literal, [$($secret:literal),+ $(,)?], |$base:ident, $secret_var:ident, $media:ident| $make:expr) => {
        $crate::channel_secrets_test!(@test false, $name, $chat, [$($secret),+], |$base, $secret_var, $media| $make);
    };
    ($name:literal, $chat:literal, [$($secret:literal),+ $(,)?], |$base:ident, $secret_var:ident, $media:ident| $make:expr) => {
        $crate::channel_secrets_test!(@test true, $name, $chat, [$($secret),+], |$base, $secret_var, $media| $make);
    };
    (@test $run:literal, $name:literal, $chat:literal, [$($secret:literal),+], |$base:ident, $secret_var:ident, $media:ident| $make:expr) => {
        #[tokio::test]
        async fn the_secret_never_reaches_errors_or_logs() {
            use ::nanobot_channels::Channel as _;
            let capture = $crate::secrets::LogCapture::install();
            $crate::secrets::assert_secrets_never_leave(&capture, &[$($secret),+], |$base: String, $secret_var: String| async move {
                let $media = ::tempfile::tempdir().unwrap();
                let channel = $make;
                let mut errors = Vec::new();
                if $run {
                    let bus: ::std::sync::Arc<dyn ::nanobot_bus::Bus> =
                        ::std::sync::Arc::new(::nanobot_bus::InProcessBus::new(8));
                    let run = channel.run(bus, ::tokio_util::sync::CancellationToken::new());
                    if let Ok(Err(err)) = ::tokio::time::timeout(::std::time::Duration::from_secs(3), run).await {
                        ::tracing::warn!(error = %err, ?err, "channel failed");
                        errors.push($crate::secrets::error_text(&err));
                    }
                }
                let reply = ::nanobot_bus::OutboundMessage::reply($name, $chat, "hello");
                let sent = ::tokio::time::timeout(::std::time::Duration::from_secs(30), channel.send(&reply))
                    .await
                    .expect("send did not finish within 30 s");
                if let Err(err) = sent {
                    ::tracing::warn!(error = %err, ?err, "send failed");
                    errors.push($crate::secrets::error_text(&err));
                }
                errors
            })
            .await;
        }
    };
}
