//! Egress by domain (`tools.network.allowedDomains`, docs/security.md): a confined program whose network namespace
//! is empty reaches the outside only through an HTTP proxy nanobot runs, which lets through the domains the user
//! allowed and refuses everything else, saying which domain and how to allow it.
//!
//! - [`DomainList`]: the allow-list (a domain covers its subdomains; IP addresses are never on it).
//! - [`EgressProxy`]: the proxy, on a Unix socket (a file, so it reaches into a network namespace where no TCP
//!   address of nanobot's does): `CONNECT host:port` tunnels (HTTPS) and absolute-form `http://` requests, each
//!   host checked against the list, resolved by nanobot (the program has no DNS) and its addresses checked by the
//!   SSRF guard. What it refused is kept for the call's answer.
//! - The bridge ([`run_bridge_if_asked`]): the first program inside the sandbox. It listens on
//!   `127.0.0.1:<port>` in the sandbox's own network namespace, forwards each connection to the proxy's socket, and
//!   runs the command with `HTTP_PROXY`/`HTTPS_PROXY` pointing at it. The program that embeds this crate provides it
//!   by calling [`run_bridge_if_asked`] first thing in `main` (the `nanobot` programs do).
//!
//! - [`Credentials`] (`tools.secrets`): credentials a program uses without seeing them; the proxy puts them into
//!   requests to their own domains ([`credentials`]).
//!
//! Raw sockets, UDP, DNS and direct connections have nowhere to go in an empty network namespace: refused by
//! construction, not by a list.

pub mod credentials;
pub use credentials::{Credentials, Grant, SECRETS_KEY, TrustedRoots};

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_util::lock;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::ssrf::SsrfGuard;

/// Egress by domain for confined programs (`tools.network`): what they may reach, and how.
#[derive(Debug, Clone)]
pub struct EgressSettings {
    /// The domains they may reach through the proxy.
    pub allowed: DomainList,
    /// Resolves and checks the addresses the proxy connects to (`tools.ssrfWhitelist`; [`HostsResolver`] for
    /// `tools.network.hosts`).
    pub guard: SsrfGuard,
    /// The program started as the bridge inside a sandbox; `None`: this program, when it provides the bridge
    /// ([`bridge_program`]).
    pub bridge: Option<PathBuf>,
    /// The credentials granted to domains (`tools.secrets`), which the proxy puts into their requests.
    pub credentials: Option<Arc<Credentials>>,
}

impl EgressSettings {
    /// Settings for `allowed` domains, resolved and checked by `guard`, bridged by this program.
    pub fn new(allowed: DomainList, guard: SsrfGuard) -> Self {
        Self {
            allowed,
            guard,
            bridge: None,
            credentials: None,
        }
    }

    /// The bridge program: the one set, else this program when it provides it.
    pub fn bridge_program(&self) -> Option<PathBuf> {
        self.bridge.clone().or_else(bridge_program)
    }
}

/// The way out of one confined start under the allow-list: its proxy, and the bridge that runs first inside.
#[derive(Debug)]
pub struct Route {
    proxy: EgressProxy,
    bridge: PathBuf,
    /// The proxy's socket as the sandbox sees it.
    inside: PathBuf,
    /// The credentials' placeholders and the CA bundle, as the sandbox sees it.
    credentials: Option<(Arc<Credentials>, PathBuf)>,
}

/// The name of the CA bundle a start with credentials is given, beside its proxy's socket.
const BUNDLE_FILE: &str = "nanobot-egress-ca.pem";

impl EgressSettings {
    /// Confines `view` for one start under `backend`: its own network is cut; with bubblewrap and a bridge program,
    /// a proxy is started at `socket` (`inside`: the same socket as the sandbox sees it) and the bridge program is
    /// made visible; with credentials, the CA bundle the start trusts is written beside the socket. `None`: no
    /// way out at all (Landlock alone, no bridge, or no sandbox: `doctor` says which).
    ///
    /// # Errors
    /// The proxy's socket cannot be made, or the bundle written.
    pub fn route(
        &self,
        backend: &crate::confine::Backend,
        view: &mut crate::confine::FsView,
        socket: &Path,
        inside: &Path,
    ) -> std::io::Result<Option<Route>> {
        view.network = false;
        let (crate::confine::Backend::Bwrap(_), Some(bridge)) = (backend, self.bridge_program()) else {
            return Ok(None);
        };
        let credentials = match &self.credentials {
            Some(c) => {
                let bundle = c.bundle().map_err(std::io::Error::other)?;
                std::fs::write(socket.with_file_name(BUNDLE_FILE), &*bundle)?;
                Some((c.clone(), inside.with_file_name(BUNDLE_FILE)))
            }
            None => None,
        };
        let proxy = EgressProxy::start_with(
            socket,
            self.allowed.clone(),
            self.guard.clone(),
            self.credentials.clone(),
        )?;
        view.read_only.push(bridge.clone());
        Ok(Some(Route {
            proxy,
            bridge,
            inside: inside.to_path_buf(),
            credentials,
        }))
    }
}

impl EgressSettings {
    /// What the allow-list gives a start under `backend` here, for `doctor`: `Ok` where programs may connect,
    /// `Err` why they have no way out (or why the list is not enforced).
    pub fn describe(&self, backend: &crate::confine::Backend) -> Result<String, String> {
        use crate::confine::Backend;
        match backend {
            Backend::Bwrap(_) if self.bridge_program().is_some() => Ok(format!(
                "only {} through nanobot's proxy",
                if self.allowed.domains().is_empty() {
                    "nowhere".to_owned()
                } else {
                    self.allowed.domains().join(", ")
                }
            )),
            Backend::Bwrap(_) => Err(format!(
                "{ALLOW_KEY} is set but this program cannot run the egress bridge: no network at all"
            )),
            Backend::Landlock => Err(format!(
                "{ALLOW_KEY} needs bubblewrap: under Landlock alone no TCP at all (UDP still allowed)"
            )),
            Backend::None => Err(format!(
                "{ALLOW_KEY} is NOT enforced: without a sandbox any host is reached"
            )),
        }
    }
}

impl Route {
    /// The bridge's arguments, to put after bubblewrap's `--` and before the command.
    pub fn argv(&self) -> Vec<OsString> {
        bridge_argv(&self.bridge, &self.inside)
    }

    /// The environment the start is given: the proxy ([`proxy_env`]), and with credentials their placeholders and
    /// the CA bundle.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = proxy_env().into_iter().collect();
        if let Some((c, bundle)) = &self.credentials {
            env.extend(c.env(bundle));
        }
        env
    }

    /// Whether `value` holds a granted credential's value (an environment variable that does is never passed on).
    pub fn reveals(&self, value: &str) -> bool {
        self.credentials.as_ref().is_some_and(|(c, _)| c.reveals(value))
    }

    /// The proxy, which must live as long as the start.
    pub fn into_proxy(self) -> EgressProxy {
        self.proxy
    }
}

/// The proxy's resolver: the names given (`tools.network.hosts`) to their addresses, everything else through the
/// system's.
#[derive(Debug, Clone, Default)]
pub struct HostsResolver {
    hosts: HashMap<String, IpAddr>,
}

impl HostsResolver {
    /// A resolver answering `hosts` (names compared without case and a trailing dot) itself.
    pub fn new(hosts: impl IntoIterator<Item = (String, IpAddr)>) -> Self {
        Self {
            hosts: hosts
                .into_iter()
                .map(|(name, ip)| (name.trim_end_matches('.').to_ascii_lowercase(), ip))
                .collect(),
        }
    }
}

#[async_trait::async_trait]
impl crate::ssrf::HostResolver for HostsResolver {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        match self.hosts.get(&host.trim_end_matches('.').to_ascii_lowercase()) {
            Some(ip) => Ok(vec![*ip]),
            None => crate::ssrf::SystemResolver.lookup(host).await,
        }
    }
}

/// Whether [`run_bridge_if_asked`] was called in this process: then this program is a bridge.
static PROVIDES_BRIDGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This program, when it provides the bridge (it called [`run_bridge_if_asked`] at start).
pub fn bridge_program() -> Option<PathBuf> {
    if !PROVIDES_BRIDGE.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    std::env::current_exe().ok()
}

/// The configuration key a refusal names.
pub const ALLOW_KEY: &str = "tools.network.allowedDomains";
/// The first argument that makes a program the egress bridge: `<program> __nanobot-egress-bridge <socket> <port> --
/// <command>…`.
pub const BRIDGE_ARG: &str = "__nanobot-egress-bridge";
/// The port the bridge listens on inside the sandbox (its own network namespace: nothing else is there).
pub const BRIDGE_PORT: u16 = 3128;
/// Longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// Connections one proxy serves at once (each holds a file descriptor of nanobot's, two for a tunnel); more wait.
const MAX_CONNECTIONS: usize = 64;
/// Distinct hosts one proxy remembers having refused.
const MAX_REFUSALS: usize = 64;
/// How long a client may take to send its request head, and the proxy to connect.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Domains a confined program may reach: each entry and its subdomains (`example.com` covers `api.example.com`; a
/// leading `*.` or `.` means the same). Case-insensitive, a trailing dot ignored, Unicode entries compared as URLs
/// carry them (punycode). An address matches only an entry equal to it (the web tools take that); the proxy
/// refuses addresses before it asks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DomainList {
    domains: Vec<String>,
}

impl DomainList {
    /// The list of `entries` (blank ones ignored).
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Self {
        let domains = entries
            .iter()
            .map(|e| {
                let d = e
                    .as_ref()
                    .trim()
                    .trim_start_matches("*.")
                    .trim_start_matches('.')
                    .trim_end_matches('.')
                    .to_lowercase();
                match url::Host::parse(&d) {
                    Ok(url::Host::Domain(ascii)) => ascii,
                    _ => d,
                }
            })
            .filter(|d| !d.is_empty())
            .collect();
        Self { domains }
    }

    /// The entries, normalised.
    pub fn domains(&self) -> &[String] {
        &self.domains
    }

    /// Whether `host` is an entry or a subdomain of one (an address: equal to an entry).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let address = host.parse::<IpAddr>().is_ok() || host.starts_with('[');
        self.domains
            .iter()
            .any(|d| host == *d || (!address && host.ends_with(&format!(".{d}"))))
    }
}

/// Why the proxy refused a connection, as the program (and the model reading its output) is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host asked for.
    pub host: String,
    /// What is wrong with it.
    pub reason: RefusalReason,
}

/// What a [`Refusal`] is for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The domain is not on the allow-list.
    NotAllowed,
    /// An IP address: only domains can be allowed.
    Address,
    /// The domain resolves to an internal address (the SSRF guard's verdict), or does not resolve.
    Unreachable(String),
    /// A credential's placeholder on its way to a domain the credential is not granted to.
    CredentialNotGranted {
        /// The credential.
        name: String,
        /// The domains it is granted to, joined.
        domains: String,
    },
    /// A credential's placeholder in a plain `http://` request (credentials go only over TLS).
    CredentialOverHttp {
        /// The credential.
        name: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            RefusalReason::NotAllowed => write!(
                f,
                "nanobot refused the connection to {}: it is not in {ALLOW_KEY} (add it there to allow it)",
                self.host
            ),
            RefusalReason::Address => write!(
                f,
                "nanobot refused the connection to {}: an IP address is never allowed, only the domains in \
                 {ALLOW_KEY}",
                self.host
            ),
            RefusalReason::Unreachable(why) => {
                write!(f, "nanobot refused the connection to {}: {why}", self.host)
            }
            RefusalReason::CredentialNotGranted { name, domains } => write!(
                f,
                "nanobot refused to send the credential {name} to {}: it is granted only to {domains} \
                 ({SECRETS_KEY}.{name}.domains)",
                self.host
            ),
            RefusalReason::CredentialOverHttp { name } => write!(
                f,
                "nanobot refused to send the credential {name} to {} over plain http://: credentials go only \
                 over https://",
                self.host
            ),
        }
    }
}

/// The egress proxy of one confined program, listening on a Unix socket until dropped.
#[derive(Debug)]
pub struct EgressProxy {
    socket: PathBuf,
    refused: Arc<Mutex<Vec<Refusal>>>,
    /// How many of `refused` [`EgressProxy::notes`] has handed out.
    told: Mutex<usize>,
    /// Ends the accept loop and every connection when the proxy is dropped.
    stop: tokio_util::sync::CancellationToken,
}

impl EgressProxy {
    /// Starts a proxy at `socket` letting through `allowed`, resolving and checking addresses with `guard`. A socket
    /// left at that path (by a process that was killed) is replaced; any other file there is an error. Needs a tokio
    /// runtime.
    ///
    /// # Errors
    /// The socket cannot be made.
    pub fn start(socket: &Path, allowed: DomainList, guard: SsrfGuard) -> std::io::Result<Self> {
        Self::start_with(socket, allowed, guard, None)
    }

    /// [`EgressProxy::start`], putting `credentials` into the requests to their domains.
    ///
    /// # Errors
    /// The socket cannot be made.
    pub fn start_with(
        socket: &Path,
        allowed: DomainList,
        guard: SsrfGuard,
        credentials: Option<Arc<Credentials>>,
    ) -> std::io::Result<Self> {
        use std::os::unix::fs::FileTypeExt as _;
        if std::fs::symlink_metadata(socket).is_ok_and(|m| m.file_type().is_socket()) {
            std::fs::remove_file(socket)?;
        }
        let listener = tokio::net::UnixListener::bind(socket)?;
        let refused: Arc<Mutex<Vec<Refusal>>> = Arc::default();
        let policy = Arc::new(Policy {
            allowed,
            guard,
            refused: refused.clone(),
            credentials,
        });
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        tokio::spawn(async move {
            loop {
                // At most MAX_CONNECTIONS at once: a program opening connections without end waits, and cannot
                // use up nanobot's file descriptors.
                let permit = tokio::select! {
                    p = permits.clone().acquire_owned() => p,
                    () = stopped.cancelled() => return,
                };
                let Ok(permit) = permit else { return };
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    () = stopped.cancelled() => return,
                };
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::debug!(error = %e, "egress proxy: accept failed");
                        // Not a hot loop on a lasting error (no descriptor left, say).
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (policy, stopped) = (policy.clone(), stopped.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    tokio::select! {
                        r = serve(stream, &policy) => if let Err(e) = r {
                            tracing::debug!(error = %e, "egress proxy connection ended");
                        },
                        () = stopped.cancelled() => {}
                    }
                });
            }
        });
        Ok(Self {
            socket: socket.to_path_buf(),
            refused,
            told: Mutex::new(0),
            stop,
        })
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// What it refused so far, each host once, in order (the first 64 hosts).
    pub fn refused(&self) -> Vec<Refusal> {
        lock(&self.refused).clone()
    }

    /// `Network: …` lines, one per host refused since the last call: what a program's answer ends with, so the
    /// model reads which domain was refused and how to allow it, whatever the program printed.
    pub fn notes(&self) -> Vec<String> {
        let refused = lock(&self.refused);
        let mut told = lock(&self.told);
        let new = refused
            .iter()
            .skip(*told)
            .map(|r| format!("Network: {r}"))
            .collect();
        *told = refused.len();
        new
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// What one proxy lets through, and what it refused.
struct Policy {
    allowed: DomainList,
    guard: SsrfGuard,
    refused: Arc<Mutex<Vec<Refusal>>>,
    credentials: Option<Arc<Credentials>>,
}

impl Policy {
    /// Keeps `refusal` for the call's answer (each host and reason once, the first [`MAX_REFUSALS`]).
    fn record(&self, refusal: Refusal) {
        let mut kept = lock(&self.refused);
        if kept.len() < MAX_REFUSALS && !kept.contains(&refusal) {
            kept.push(refusal);
        }
    }
}

/// The request a client sent: where to, and what to send there first.
struct Target {
    host: String,
    port: u16,
    /// `None` for `CONNECT` (answer 200, then tunnel); else the request to forward, in origin form.
    forward: Option<Vec<u8>>,
}

async fn serve(mut client: tokio::net::UnixStream, policy: &Policy) -> std::io::Result<()> {
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) => return answer(&mut client, 400, "the request head is too long or incomplete").await,
        Ok(Err(e)) => return Err(e),
        Err(_) => return answer(&mut client, 408, "no request head in time").await,
    };
    let target = match parse(&String::from_utf8_lossy(&head)) {
        Ok(t) => t,
        Err(why) => return answer(&mut client, 400, why).await,
    };
    let refuse = |reason| Refusal {
        host: target.host.clone(),
        reason,
    };
    let verdict = if target.host.parse::<IpAddr>().is_ok() || target.host.starts_with('[') {
        Err(refuse(RefusalReason::Address))
    } else if !policy.allowed.allows(&target.host) {
        Err(refuse(RefusalReason::NotAllowed))
    } else if let Some(reason) = target
        .forward
        .as_deref()
        .zip(policy.credentials.as_deref())
        .and_then(|(request, c)| c.over_plain_http(request))
    {
        Err(refuse(reason))
    } else {
        match policy.guard.resolve_checked(&target.host).await {
            Ok(ips) => Ok(ips),
            Err(e) => Err(refuse(RefusalReason::Unreachable(e.to_string()))),
        }
    };
    let ips = match verdict {
        Ok(ips) => ips,
        Err(refusal) => {
            tracing::info!(host = %refusal.host, "egress refused: {refusal}");
            let text = refusal.to_string();
            policy.record(refusal);
            return answer(&mut client, 403, &text).await;
        }
    };
    let addrs: Vec<SocketAddr> = ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, target.port))
        .collect();
    let mut upstream =
        match tokio::time::timeout(HEAD_TIMEOUT, tokio::net::TcpStream::connect(&addrs[..])).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return answer(
                    &mut client,
                    502,
                    &format!("cannot connect to {}: {e}", target.host),
                )
                .await;
            }
            Err(_) => {
                return answer(
                    &mut client,
                    504,
                    &format!("{} did not answer in time", target.host),
                )
                .await;
            }
        };
    // What the program writes goes on as it comes (it has its own buffering); no wait for an ACK.
    let _ = upstream.set_nodelay(true);
    match target.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await?;
            if let Some(c) = policy
                .credentials
                .as_deref()
                .filter(|c| c.intercepts(&target.host))
            {
                let client = Rewound::new(rest, client);
                return c
                    .intercept(client, upstream, &target.host, target.port, &|r| policy.record(r))
                    .await;
            }
        }
        Some(request) => upstream.write_all(&request).await?,
    }
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Reads up to the end of the request head; returns it (its end included) and what came after it. `None`: too
/// long, or the client stopped first.
async fn read_head<R: AsyncRead + Unpin>(client: &mut R) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The target of a proxy request: `CONNECT host:port`, or an absolute `http://` URL (sent on in origin form, with
/// the proxy's own headers left out and the connection closed after the answer).
fn parse(head: &str) -> Result<Target, &'static str> {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(uri), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("not an HTTP request");
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(uri, 443).ok_or("CONNECT needs host:port")?;
        return Ok(Target {
            host,
            port,
            forward: None,
        });
    }
    let url = url::Url::parse(uri).map_err(|_| "a proxy request needs an absolute http:// URL")?;
    if url.scheme() != "http" {
        return Err("only http:// requests and CONNECT tunnels go through this proxy");
    }
    let host = url.host_str().ok_or("the URL has no host")?.to_owned();
    let port = url.port().unwrap_or(80);
    let mut path = url.path().to_owned();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // The Host sent is the one checked: a client's own `Host` could name another site served at the same address
    // (domain fronting).
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    let mut request = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        if ["host", "proxy-connection", "proxy-authorization", "connection"]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    Ok(Target {
        host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
        port,
        forward: Some(request.into_bytes()),
    })
}

/// `host:port` (or `[v6]:port`, or `host` with `default`).
fn split_authority(authority: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default,
        };
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default)),
    }
}

async fn answer<W: AsyncWrite + Unpin>(client: &mut W, status: u16, text: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        502 => "Bad Gateway",
        _ => "Gateway Timeout",
    };
    let body = format!("{text}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Nanobot-Egress: refused\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

/// A stream that first gives back bytes already read from it.
struct Rewound<S> {
    read: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewound<S> {
    fn new(read: Vec<u8>, inner: S) -> Self {
        Self { read, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.read.len() {
            let n = buf.remaining().min(this.read.len() - this.at);
            buf.put_slice(&this.read[this.at..this.at + n]);
            this.at += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The environment that points a program at the bridge (both spellings: curl reads the lower-case one for
/// `http://`, most tools either).
pub fn proxy_env() -> HashMap<String, String> {
    let url = format!("http://127.0.0.1:{BRIDGE_PORT}");
    [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k.to_owned(), url.clone()))
    .chain([
        ("NO_PROXY".to_owned(), String::new()),
        ("no_proxy".to_owned(), String::new()),
        // Node's own `fetch` follows the variables above only when asked (Node 24 and later).
        ("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned()),
    ])
    .collect()
}

/// The arguments that start `bridge` (a program that calls [`run_bridge_if_asked`]) as the first program inside
/// the sandbox, forwarding to `socket`; the command follows them.
pub fn bridge_argv(bridge: &Path, socket: &Path) -> Vec<OsString> {
    vec![
        bridge.as_os_str().to_owned(),
        BRIDGE_ARG.into(),
        socket.as_os_str().to_owned(),
        BRIDGE_PORT.to_string().into(),
        "--".into(),
    ]
}

/// When this program was started as the egress bridge (`<program> __nanobot-egress-bridge <socket> <port> --
/// <command>…`), runs it and exits with the command's status; otherwise returns at once. Call it first thing in
/// `main`, before any runtime starts.
pub fn run_bridge_if_asked() {
    PROVIDES_BRIDGE.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() != Some(std::ffi::OsStr::new(BRIDGE_ARG)) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    std::process::exit(match bridge(&rest) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nanobot egress bridge: {e}");
            126
        }
    });
}

/// The bridge: listens on `127.0.0.1:<port>`, forwards each connection to `<socket>`, runs the command and returns
/// its exit code (128 + the signal that ended it).
fn bridge(args: &[OsString]) -> Result<i32, String> {
    let [socket, port, dashes, command @ ..] = args else {
        return Err(format!("usage: {BRIDGE_ARG} <socket> <port> -- <command>…"));
    };
    if dashes != "--" || command.is_empty() {
        return Err(format!("usage: {BRIDGE_ARG} <socket> <port> -- <command>…"));
    }
    let port: u16 = port
        .to_str()
        .and_then(|p| p.parse().ok())
        .ok_or("the port is not a number")?;
    let socket = PathBuf::from(socket);
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            // Loopback inside the sandbox: small writes (a TLS handshake's) go at once, not after an ACK.
            let _ = conn.set_nodelay(true);
            let socket = socket.clone();
            std::thread::spawn(move || {
                let Ok(upstream) = std::os::unix::net::UnixStream::connect(&socket) else {
                    return;
                };
                pipe(conn, upstream);
            });
        }
    });
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
        .map_err(|e| format!("cannot run {}: {e}", command[0].to_string_lossy()))?;
    use std::os::unix::process::ExitStatusExt as _;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Copies both ways between a TCP client and the proxy's socket until both sides are done.
fn pipe(client: std::net::TcpStream, upstream: std::os::unix::net::UnixStream) {
    let (Ok(mut client_r), Ok(mut upstream_w)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let (mut client_w, mut upstream_r) = (client, upstream);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_r, &mut upstream_w);
        let _ = upstream_w.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream_r, &mut client_w);
    let _ = client_w.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_covers_subdomains_never_addresses() {
        let l = DomainList::new(&["Example.com", "*.pypi.org", ".npmjs.org.", " ", "bücher.example"]);
        assert_eq!(
            l.domains(),
            ["example.com", "pypi.org", "npmjs.org", "xn--bcher-kva.example"]
        );
        for ok in [
            "example.com",
            "api.example.com",
            "API.Example.com.",
            "files.pypi.org",
            "xn--bcher-kva.example",
        ] {
            assert!(l.allows(ok), "{ok}");
        }
        for no in [
            "evil.com",
            "example.com.evil.com",
            "notexample.com",
            "127.0.0.1",
            "[::1]",
            "::1",
            "",
        ] {
            assert!(!l.allows(no), "{no}");
        }
        let addresses = DomainList::new(&["127.0.0.1", "0.0.1"]);
        assert!(addresses.allows("127.0.0.1"), "an address equal to an entry");
        assert!(!addresses.allows("10.0.0.1"), "never as a 'subdomain'");
    }

    #[test]
    fn requests_parse_to_their_target() {
        let t = parse("CONNECT api.example.com:8443 HTTP/1.1\r\nHost: api.example.com:8443").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.forward.is_none()),
            ("api.example.com", 8443, true)
        );
        let t = parse(
            "GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\n\
             Connection: keep-alive\r\nAccept: */*",
        )
        .unwrap();
        assert_eq!((t.host.as_str(), t.port), ("example.com", 80));
        let sent = String::from_utf8(t.forward.unwrap()).unwrap();
        assert_eq!(
            sent,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        // The client's own Host is replaced by the checked one.
        let t = parse("GET http://allowed.test:8080/ HTTP/1.1\r\nHost: evil.test\r\nX-A: 1").unwrap();
        assert_eq!(
            String::from_utf8(t.forward.unwrap()).unwrap(),
            "GET / HTTP/1.1\r\nHost: allowed.test:8080\r\nX-A: 1\r\nConnection: close\r\n\r\n"
        );
        let t = parse("CONNECT [2001:db8::1]:443 HTTP/1.1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("2001:db8::1", 443));
        assert!(parse("GET /relative HTTP/1.1").is_err());
        assert!(parse("GET ftp://example.com/ HTTP/1.1").is_err());
        assert!(parse("garbage").is_err());
    }
}
