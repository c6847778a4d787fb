//! Credentials used, never seen (`tools.secrets`, docs/security.md): a confined program is given a placeholder in
//! place of each granted credential, and the egress proxy puts the real value into the requests it carries to the
//! credential's own domains.
//!
//! For a host that some credential is granted to, the proxy opens the `CONNECT` tunnel itself: it answers the
//! program's TLS with a certificate for that host signed by a certificate authority of its own (made on first
//! use, its key never leaving this process; the sandbox trusts it through `SSL_CERT_FILE` and the like), connects
//! to the real server verifying its certificate against the system's store, and forwards one request per
//! connection with the placeholders in its request line and headers replaced by the values. A placeholder on its
//! way anywhere else (another host through the same tunnel, or plain `http://`) is refused, naming the credential
//! and its domains. The value, if the server sends it back, reaches the program masked (`*` of the same length;
//! the request asks for an unencoded answer so that it can be found), and every tool result is scrubbed of it
//! ([`Credentials::scrub`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use nanobot_util::lock;
use nanobot_util::secret::Secret;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{DomainList, HEAD_TIMEOUT, Refusal, RefusalReason};

/// The configuration key credentials are granted under.
pub const SECRETS_KEY: &str = "tools.secrets";
/// Hosts whose certificates one proxy keeps made (more: made again when asked).
const MAX_LEAVES: usize = 256;
/// The environment variables that point programs at a CA bundle (OpenSSL and what reads its variable, curl,
/// Python's requests, Node, git, pip).
const CA_BUNDLE_VARS: [&str; 6] = [
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// One credential granted to domains.
#[derive(Clone)]
pub struct Grant {
    name: String,
    value: Secret,
    domains: DomainList,
    placeholder: String,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field("domains", &self.domains)
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// The credential `name` (the environment variable a program reads it from) with `value`, for `domains`.
    pub fn new(name: &str, value: Secret, domains: DomainList) -> Self {
        Self {
            placeholder: format!("nanobot_credential_{name}_{}", uuid::Uuid::new_v4().simple()),
            name: name.to_owned(),
            value,
            domains,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The domains it is sent to.
    pub fn domains(&self) -> &DomainList {
        &self.domains
    }

    /// What a confined program sees in its place (random, made when the grant is).
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }
}

/// Where the roots a confined program trusts besides the proxy's own CA come from (the system's store, read
/// when a first program is given credentials).
pub type TrustedRoots = Arc<dyn Fn() -> Result<Arc<Vec<CertificateDer<'static>>>, String> + Send + Sync>;

/// The credentials granted (`tools.secrets`) and what the proxy needs to use them: its CA and the TLS set-up for
/// the real servers.
pub struct Credentials {
    grants: Vec<Grant>,
    /// Verifies the real servers (the system's store).
    upstream: Arc<rustls::ClientConfig>,
    /// The roots the bundle given to programs holds besides the CA.
    roots: TrustedRoots,
    ca: OnceLock<Result<Ca, String>>,
    bundle: OnceLock<Result<Arc<Vec<u8>>, String>>,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

/// The proxy's certificate authority: its certificate, and the key that signs a host's certificate.
struct Ca {
    cert: CertificateDer<'static>,
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Credentials {
    /// `grants`, used on requests to real servers verified by `upstream` (its ALPN is set to HTTP/1.1 here);
    /// programs trust the proxy's CA and `roots`.
    pub fn new(grants: Vec<Grant>, upstream: &rustls::ClientConfig, roots: TrustedRoots) -> Self {
        let mut upstream = upstream.clone();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            grants,
            upstream: Arc::new(upstream),
            roots,
            ca: OnceLock::new(),
            bundle: OnceLock::new(),
            leaves: Mutex::default(),
        }
    }

    /// The grants.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// Whether a credential is granted to `host` (then the proxy opens its tunnels).
    pub fn intercepts(&self, host: &str) -> bool {
        self.grants.iter().any(|g| g.domains.allows(host))
    }

    /// `text` with every granted value replaced by `[credential NAME]`: what any tool result goes through.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        // The longest first: a value inside another goes with it.
        let mut grants: Vec<&Grant> = self.grants.iter().collect();
        grants.sort_by_key(|g| std::cmp::Reverse(g.value.expose().len()));
        for g in grants {
            let value = g.value.expose();
            if !value.is_empty() && out.contains(value) {
                out = Cow::Owned(out.replace(value, &format!("[credential {}]", g.name)));
            }
        }
        out
    }

    /// Whether `text` holds a granted value.
    pub fn reveals(&self, text: &str) -> bool {
        self.grants
            .iter()
            .any(|g| !g.value.expose().is_empty() && text.contains(g.value.expose()))
    }

    /// The environment a confined program is given for them, the CA bundle at `bundle` (as it sees the path):
    /// each credential's placeholder under its name, and the bundle under the variables programs read.
    pub fn env(&self, bundle: &std::path::Path) -> Vec<(String, String)> {
        let bundle = bundle.display().to_string();
        self.grants
            .iter()
            .map(|g| (g.name.clone(), g.placeholder.clone()))
            .chain(CA_BUNDLE_VARS.iter().map(|k| ((*k).to_owned(), bundle.clone())))
            .collect()
    }

    /// The CA bundle programs trust: the system's roots, then the proxy's CA (PEM). Made once.
    ///
    /// # Errors
    /// The CA cannot be made, or the system's roots cannot be read.
    pub fn bundle(&self) -> Result<Arc<Vec<u8>>, String> {
        self.bundle
            .get_or_init(|| {
                let ca = self.ca()?;
                let roots = (self.roots)()?;
                let mut out = Vec::with_capacity(roots.len() * 2048 + ca.pem.len());
                for root in roots.iter() {
                    out.extend_from_slice(pem("CERTIFICATE", root).as_bytes());
                }
                out.extend_from_slice(ca.pem.as_bytes());
                Ok(Arc::new(out))
            })
            .clone()
    }

    fn ca(&self) -> Result<&Ca, String> {
        self.ca
            .get_or_init(|| make_ca().map_err(|e| format!("cannot make the egress proxy's CA: {e}")))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The TLS set-up that answers a program's tunnel to `host`: a certificate for it signed by the CA.
    fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        if let Some(c) = lock(&self.leaves).get(host) {
            return Ok(c.clone());
        }
        let ca = self.ca()?;
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = rcgen::CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, host);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, 7);
        let cert = params.signed_by(&key, &ca.issuer).map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut leaves = lock(&self.leaves);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_owned(), config.clone());
        Ok(config)
    }

    /// `head` (a request head, its end included) to send to `host` (`authority`: with its port unless 443): the
    /// placeholders of credentials granted to it replaced by their values; the checked name as its `Host` (the
    /// program's own is dropped: on a shared front it could name another site, which would get the value); the
    /// connection closed after the answer, which is asked for unencoded when a value went in (so that the value
    /// can be masked in it). Also which values went in. `Err`: a placeholder of a credential not granted to
    /// `host`.
    fn rewrite(
        &self,
        head: &[u8],
        host: &str,
        authority: &str,
    ) -> Result<(Vec<u8>, Vec<Vec<u8>>), RefusalReason> {
        let mut out = head.to_vec();
        let mut injected = Vec::new();
        for g in &self.grants {
            if !contains(&out, g.placeholder.as_bytes()) {
                continue;
            }
            if !g.domains.allows(host) {
                return Err(self.not_granted(g));
            }
            out = replace(&out, g.placeholder.as_bytes(), g.value.expose().as_bytes());
            injected.push(g.value.expose().as_bytes().to_vec());
        }
        let mut lines = out
            .split(|b| *b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty());
        let mut rewritten = lines.next().unwrap_or_default().to_vec();
        rewritten.extend_from_slice(format!("\r\nHost: {authority}\r\n").as_bytes());
        for line in lines {
            let name = line.split(|b| *b == b':').next().unwrap_or_default();
            let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
            let dropped = [
                "host",
                "connection",
                "keep-alive",
                "proxy-connection",
                "proxy-authorization",
            ];
            if dropped.contains(&name.as_str()) || (!injected.is_empty() && name == "accept-encoding") {
                continue;
            }
            rewritten.extend_from_slice(line);
            rewritten.extend_from_slice(b"\r\n");
        }
        if !injected.is_empty() {
            rewritten.extend_from_slice(b"Accept-Encoding: identity\r\n");
        }
        rewritten.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok((rewritten, injected))
    }

    fn not_granted(&self, g: &Grant) -> RefusalReason {
        RefusalReason::CredentialNotGranted {
            name: g.name.clone(),
            domains: g.domains.domains().join(", "),
        }
    }

    /// The credential whose placeholder `bytes` holds, as a refusal of plain `http://`.
    pub(super) fn over_plain_http(&self, bytes: &[u8]) -> Option<RefusalReason> {
        self.grants
            .iter()
            .find(|g| contains(bytes, g.placeholder.as_bytes()))
            .map(|g| RefusalReason::CredentialOverHttp { name: g.name.clone() })
    }

    /// Serves a program's tunnel to `host` (already answered `200`): TLS with the program as `host`, TLS with
    /// `upstream` as the program, one request with the credentials put in, its answer masked.
    pub(super) async fn intercept<C, U>(
        &self,
        client: C,
        upstream: U,
        host: &str,
        port: u16,
        refused: &(dyn Fn(Refusal) + Sync),
    ) -> std::io::Result<()>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        U: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self.server_config(host).map_err(std::io::Error::other)?;
        let accept = tokio_rustls::TlsAcceptor::from(config).accept(client);
        let mut client = tokio::time::timeout(HEAD_TIMEOUT, accept)
            .await
            .map_err(|_| std::io::Error::other("no TLS handshake in time"))??;
        let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, super::read_head(&mut client)).await {
            Ok(Ok(Some(read))) => read,
            Ok(Ok(None)) => {
                return super::answer(&mut client, 400, "the request head is too long or incomplete").await;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return super::answer(&mut client, 408, "no request head in time").await,
        };
        // Origin form only (`GET /path`): an absolute URL inside the tunnel would name the site the server serves,
        // whatever the tunnel was opened for.
        let target = head.split(|b| *b == b' ').nth(1).unwrap_or_default();
        if !(target.starts_with(b"/") || target == b"*") {
            return super::answer(
                &mut client,
                400,
                "a request through this tunnel names its path only (GET /path), not a URL",
            )
            .await;
        }
        let authority = if port == 443 {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        let (head, injected) = match self.rewrite(&head, host, &authority) {
            Ok(r) => r,
            Err(reason) => {
                let refusal = Refusal {
                    host: host.to_owned(),
                    reason,
                };
                let text = refusal.to_string();
                tracing::info!(host, "egress refused: {text}");
                refused(refusal);
                return super::answer(&mut client, 403, &text).await;
            }
        };
        let name = ServerName::try_from(host.to_owned()).map_err(std::io::Error::other)?;
        let connect = tokio_rustls::TlsConnector::from(self.upstream.clone()).connect(name, upstream);
        let mut upstream = match tokio::time::timeout(HEAD_TIMEOUT, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return super::answer(&mut client, 502, &format!("cannot open TLS to {host}: {e}")).await;
            }
            Err(_) => {
                return super::answer(&mut client, 504, &format!("{host} did not answer in time")).await;
            }
        };
        let mut first = head;
        first.extend_from_slice(&rest);
        upstream.write_all(&first).await?;
        let (mut client_r, mut client_w) = tokio::io::split(client);
        let (mut upstream_r, mut upstream_w) = tokio::io::split(upstream);
        // The request's body goes on as it comes; the exchange ends with the answer (the server closes: the
        // request said so). The program's side is never half-closed towards the server: over TLS that reads as
        // the end of the connection to many servers.
        let up = async {
            let _ = tokio::io::copy(&mut client_r, &mut upstream_w).await;
            std::future::pending::<()>().await;
        };
        let down = async {
            let mut masker = Masker::new(injected);
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = upstream_r.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                let out = masker.feed(&buf[..n]);
                client_w.write_all(&out).await?;
            }
            client_w.write_all(&masker.finish()).await?;
            client_w.shutdown().await
        };
        tokio::select! {
            r = down => r,
            () = up => Ok(()),
        }
    }
}

/// Replaces every occurrence of some values in a stream by `*` of the same length (lengths in the answer's
/// framing stay true), holding back the few bytes a value could continue into. Values are found in the stream as
/// it came (one inside another is masked whole).
#[derive(Debug)]
pub(crate) struct Masker {
    values: Vec<Vec<u8>>,
    /// What was held back, as it came.
    carry: Vec<u8>,
    /// How many bytes at the start of `carry` belong to a value found before it.
    pending: usize,
    keep: usize,
}

impl Masker {
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Self {
        let values: Vec<Vec<u8>> = values.into_iter().filter(|v| !v.is_empty()).collect();
        let keep = values.iter().map(Vec::len).max().unwrap_or(1) - 1;
        Self {
            values,
            carry: Vec::new(),
            pending: 0,
            keep,
        }
    }

    /// What of `chunk` (after what was held back) can be sent.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(chunk);
        // A value not yet complete starts within the last `keep` bytes.
        let send = data.len().saturating_sub(self.keep);
        self.mask(&mut data, send);
        self.carry = data.split_off(send);
        data
    }

    /// What was held back, at the end of the stream.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut data = std::mem::take(&mut self.carry);
        let all = data.len();
        self.mask(&mut data, all);
        data
    }

    /// Masks what of `data[..send]` belongs to a value (one starting there may end after it: `pending`).
    fn mask(&mut self, data: &mut [u8], send: usize) {
        let mut end_of_masked = self.pending.min(data.len());
        let mut ranges = vec![(0, end_of_masked)];
        for v in &self.values {
            let mut at = 0;
            while let Some(i) = find(&data[at..], v) {
                let start = at + i;
                if start >= send {
                    break;
                }
                ranges.push((start, start + v.len()));
                end_of_masked = end_of_masked.max(start + v.len());
                at = start + 1;
            }
        }
        for (start, end) in ranges {
            data[start..end.min(send)].fill(b'*');
        }
        self.pending = end_of_masked.saturating_sub(send);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = find(rest, needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(with);
        rest = &rest[i + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Valid from a day ago to `days` from now.
fn set_validity(params: &mut rcgen::CertificateParams, days: i64) {
    use chrono::Datelike as _;
    let ymd = |t: chrono::DateTime<chrono::Utc>| {
        rcgen::date_time_ymd(
            t.year(),
            u8::try_from(t.month()).unwrap_or(1),
            u8::try_from(t.day()).unwrap_or(1),
        )
    };
    let now = chrono::Utc::now();
    params.not_before = ymd(now - chrono::Duration::days(1));
    params.not_after = ymd(now + chrono::Duration::days(days));
}

fn make_ca() -> Result<Ca, rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("nanobot egress proxy {}", std::process::id()),
    );
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, 3650);
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        cert: cert.der().clone(),
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(params, key),
    })
}

/// `der` as a PEM block labelled `label`.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        let roots: TrustedRoots = Arc::new(|| Ok(Arc::new(Vec::new())));
        let upstream =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
        Credentials::new(
            vec![
                Grant::new(
                    "GITHUB_TOKEN",
                    Secret::new("ghp_realvalue123"),
                    DomainList::new(&["api.github.com"]),
                ),
                Grant::new(
                    "OTHER",
                    Secret::new("other-value-456"),
                    DomainList::new(&["other.example"]),
                ),
            ],
            &upstream,
            roots,
        )
    }

    #[test]
    fn a_masker_finds_values_split_across_chunks() {
        let text = b"before SECRETVALUE middle SECRETVALUE after SECRET";
        for split in 1..text.len() {
            let mut m = Masker::new(vec![b"SECRETVALUE".to_vec(), b"VAL".to_vec()]);
            let mut out = Vec::new();
            for piece in text.chunks(split) {
                out.extend(m.feed(piece));
            }
            out.extend(m.finish());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "before *********** middle *********** after SECRET",
                "chunks of {split}"
            );
        }
        let mut none = Masker::new(Vec::new());
        assert_eq!(none.feed(b"as it is"), b"as it is");
        assert!(none.finish().is_empty());
    }

    #[test]
    fn a_request_gets_the_values_of_its_host_only() {
        let c = credentials();
        let (gh, other) = (
            c.grants()[0].placeholder().to_owned(),
            c.grants()[1].placeholder().to_owned(),
        );
        let head = format!(
            "GET /user?t={gh} HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer {gh}\r\n\
             Accept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n"
        );
        let (sent, injected) = c
            .rewrite(head.as_bytes(), "api.github.com", "api.github.com")
            .unwrap();
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            "GET /user?t=ghp_realvalue123 HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer \
             ghp_realvalue123\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
        );
        // The program's own Host never reaches the server (on a shared front it would pick the site).
        let fronted = format!("GET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {gh}\r\n\r\n");
        let (sent, _) = c
            .rewrite(fronted.as_bytes(), "api.github.com", "api.github.com:8443")
            .unwrap();
        let sent = String::from_utf8(sent).unwrap();
        assert!(
            sent.starts_with("GET / HTTP/1.1\r\nHost: api.github.com:8443\r\n"),
            "{sent}"
        );
        assert!(!sent.contains("evil.example"), "{sent}");
        assert_eq!(injected, vec![b"ghp_realvalue123".to_vec()]);

        // Another credential's placeholder to this host: refused, naming it and where it goes.
        let head = format!("GET / HTTP/1.1\r\nHost: api.github.com\r\nX-Key: {other}\r\n\r\n");
        let refused = c
            .rewrite(head.as_bytes(), "api.github.com", "api.github.com")
            .unwrap_err();
        let text = Refusal {
            host: "api.github.com".into(),
            reason: refused,
        }
        .to_string();
        assert!(text.contains("OTHER") && text.contains("other.example"), "{text}");
        assert!(!text.contains("other-value-456"), "{text}");

        // Nothing to put in: the head as it was, closed after the answer, its encoding left alone.
        let (sent, injected) = c
            .rewrite(
                b"GET / HTTP/1.1\r\nHost: api.github.com\r\nAccept-Encoding: gzip\r\n\r\n",
                "api.github.com",
                "api.github.com",
            )
            .unwrap();
        assert!(injected.is_empty());
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            "GET / HTTP/1.1\r\nHost: api.github.com\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
        );
        assert!(c.over_plain_http(gh.as_bytes()).is_some());
        assert!(c.over_plain_http(b"GET / HTTP/1.1").is_none());
    }

    #[test]
    fn values_are_scrubbed_and_never_printed() {
        let c = credentials();
        assert_eq!(
            c.scrub("token=ghp_realvalue123; other-value-456"),
            "token=[credential GITHUB_TOKEN]; [credential OTHER]"
        );
        assert!(matches!(c.scrub("nothing here"), Cow::Borrowed(_)));
        assert!(c.reveals("x ghp_realvalue123") && !c.reveals("x"));
        let debug = format!("{c:?}");
        assert!(
            debug.contains("GITHUB_TOKEN") && !debug.contains("ghp_realvalue123"),
            "{debug}"
        );
        assert!(
            c.grants()[0]
                .placeholder()
                .starts_with("nanobot_credential_GITHUB_TOKEN_")
        );
        let env = c.env(std::path::Path::new("/tmp/ca.pem"));
        assert!(env.contains(&("SSL_CERT_FILE".to_owned(), "/tmp/ca.pem".to_owned())));
        assert!(env.iter().all(|(_, v)| !c.reveals(v)), "{env:?}");
        // The bundle: the roots (none here), then the CA.
        let bundle = String::from_utf8(c.bundle().unwrap().to_vec()).unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 1, "{bundle}");
        assert!(c.server_config("api.github.com").is_ok());
    }
}
