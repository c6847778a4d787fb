//! [`HostEcho`]: a plain HTTP/1.1 server on `127.0.0.1` answering every request with `hello from <Host>` and keeping
//! each request line, and [`TestDns`]: the resolver that maps `*.test` names to it. For the tests of what may leave
//! a sandbox (egress by domain): a client shows where it got, the server shows what reached it.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::sync::{Arc, Mutex};

use nanobot_util::lock;

/// The server (its threads live as long as the test process).
#[derive(Debug, Clone)]
pub struct HostEcho {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl HostEcho {
    /// Starts it on a free port of `127.0.0.1`.
    ///
    /// # Panics
    /// No port can be bound.
    pub fn start() -> Self {
        let listener =
            TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("cannot listen on 127.0.0.1: {e}"));
        let port = match listener.local_addr() {
            Ok(a) => a.port(),
            Err(e) => panic!("no local address: {e}"),
        };
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = lines.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || answer(conn, &log));
            }
        });
        Self { port, lines }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The request lines that reached it (`GET /guide HTTP/1.1`), in order.
    pub fn request_lines(&self) -> Vec<String> {
        lock(&self.lines).clone()
    }
}

fn answer(mut conn: std::net::TcpStream, log: &Mutex<Vec<String>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    lock(log).push(head.lines().next().unwrap_or_default().to_owned());
    let host = head
        .lines()
        .find_map(|l| l.strip_prefix("Host: "))
        .unwrap_or("?")
        .trim();
    let body = format!("hello from {host}\n");
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A resolver for the SSRF guard: `*.test` names on `127.0.0.1` (where [`HostEcho`] listens), `internal.test` on a
/// private address (`10.1.2.3`), every other name unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct TestDns;

#[async_trait::async_trait]
impl nanobot_ssrf::HostResolver for TestDns {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let ip = match host {
            "internal.test" => IpAddr::from([10, 1, 2, 3]),
            h if h.ends_with(".test") => IpAddr::from([127, 0, 0, 1]),
            _ => return Err(std::io::Error::other(format!("{host} is not a test name"))),
        };
        Ok(vec![ip])
    }
}
