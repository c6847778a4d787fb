//! [`HostEcho`]: a plain HTTP/1.1 server on `127.0.0.1` answering every request with `hello from <Host>` and keeping
//! each request line; [`TlsEcho`]: an HTTPS server for `*.test` names (a test CA's certificate) sending each
//! request head back; and [`TestDns`]: the resolver that maps `*.test` names to them. For the tests of what may
//! leave a sandbox (egress by domain, credentials): a client shows where it got, the server shows what reached it.

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

/// An HTTPS/1.1 server on `127.0.0.1` for the names it is given, with a certificate of a CA of its own: it keeps
/// each request head it gets and answers with it as the body (threads living as long as the test process).
#[derive(Debug, Clone)]
pub struct TlsEcho {
    port: u16,
    ca: rustls::pki_types::CertificateDer<'static>,
    ca_pem: String,
    heads: Arc<Mutex<Vec<String>>>,
}

impl TlsEcho {
    /// Starts it on a free port of `127.0.0.1`, its certificate valid for `names`.
    ///
    /// # Panics
    /// No port can be bound, or a certificate made.
    pub fn start(names: &[&str]) -> Self {
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        let made = |what: &str, e: rcgen::Error| -> ! { panic!("cannot make the {what}: {e}") };
        let ca_key = rcgen::KeyPair::generate().unwrap_or_else(|e| made("CA key", e));
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| made("CA", e));
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nanobot test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap_or_else(|e| made("CA", e));
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| made("key", e));
        let params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap_or_else(|e| made("certificate", e));
        let cert = params
            .signed_by(&key, &issuer)
            .unwrap_or_else(|e| made("certificate", e));
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .and_then(|b| {
                    b.with_no_client_auth().with_single_cert(
                        vec![cert.der().clone()],
                        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                    )
                })
                .unwrap_or_else(|e| panic!("cannot set up TLS: {e}"));
        let config = Arc::new(config);
        let listener =
            TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("cannot listen on 127.0.0.1: {e}"));
        let port = match listener.local_addr() {
            Ok(a) => a.port(),
            Err(e) => panic!("no local address: {e}"),
        };
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = heads.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (config, kept) = (config.clone(), kept.clone());
                std::thread::spawn(move || echo_tls(conn, config, &kept));
            }
        });
        Self {
            port,
            ca: cert_der(&ca),
            ca_pem: ca.pem(),
            heads,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The CA its certificate is signed by.
    pub fn ca(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.ca.clone()
    }

    /// A TLS client set-up (ring) trusting its CA alone.
    ///
    /// # Panics
    /// The CA is refused (it was made here) or ring lacks the default protocol versions.
    pub fn client_config(&self) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca())
            .unwrap_or_else(|e| panic!("the test CA is refused: {e}"));
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("no TLS versions: {e}"))
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    /// The same CA as PEM (for `SSL_CERT_FILE`).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Every request head it got, in order, one after the other.
    pub fn heads(&self) -> String {
        lock(&self.heads).join("\n")
    }
}

fn cert_der(cert: &rcgen::Certificate) -> rustls::pki_types::CertificateDer<'static> {
    cert.der().clone()
}

fn echo_tls(conn: std::net::TcpStream, config: Arc<rustls::ServerConfig>, kept: &Mutex<Vec<String>>) {
    let Ok(server) = rustls::ServerConnection::new(config) else {
        return;
    };
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let _ = conn.set_nodelay(true);
    let mut tls = rustls::StreamOwned::new(server, conn);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tls.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    lock(kept).push(head.clone());
    let _ = write!(
        tls,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
        head.len()
    );
    tls.conn.send_close_notify();
    let _ = tls.flush();
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
