//! Bounded downloads, shared by every channel that fetches files: the platform's own attachments (received media)
//! and remote media the agent asks a channel to send.
//!
//! - [`read_body`], [`read_json`] and [`save_body`] take a response body with a byte limit: a `Content-Length` over the limit is
//!   refused before a byte is read, and the running count is checked on every chunk, so a server that lies about
//!   (or omits) the length is cut off at the limit. [`save_body`] writes through `<dest>.part` and renames it when
//!   the body is complete, so a cut-off download never leaves a partial file under the real name.
//! - [`RemoteMedia`] fetches an `http(s)` URL the agent gave as an attachment. The URL, every address its host
//!   resolves to, and every redirect hop pass the SSRF guard (`nanobot-ssrf`, with `tools.ssrfWhitelist`);
//!   the connection goes to the addresses that were checked. Redirects are followed only when the channel's config
//!   allows them (0.3.5's `allowRemoteMediaRedirects`), at most [`MAX_REDIRECTS`], and only to the same host or one
//!   of `remoteMediaRedirectAllowedHosts`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The SSRF guard [`RemoteMedia`] checks with (`nanobot-ssrf`), re-exported for the adapters.
pub use nanobot_ssrf::SsrfGuard;
use tokio::io::AsyncWriteExt;
use url::Url;

use crate::{ChannelError, safe_file_name};

/// Largest JSON answer of a platform API [`read_json`] reads.
pub const MAX_ANSWER_BYTES: u64 = 2 * 1024 * 1024;
/// Most redirects [`RemoteMedia`] follows for one URL (0.3.5 follows three).
pub const MAX_REDIRECTS: usize = 3;
/// The default bound of a remote media fetch (0.3.5's 20 MiB).
pub const DEFAULT_REMOTE_MEDIA_BYTES: u64 = 20 * 1024 * 1024;
/// Bound of one remote media request, headers and body.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(60);

fn too_large(channel: &str, what: &str, max: u64) -> ChannelError {
    ChannelError::too_large(channel, what, max)
}

/// A body error, without the URL (it may carry a token in its query).
fn body_error(channel: &str, what: &str, e: reqwest::Error) -> ChannelError {
    ChannelError::transient(channel, format!("{what}: {}", e.without_url()))
}

/// Reads the whole body of `resp`, refusing more than `max` bytes. `what` names the download in errors.
pub async fn read_body(
    channel: &str,
    what: &str,
    mut resp: reqwest::Response,
    max: u64,
) -> Result<Vec<u8>, ChannelError> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(too_large(channel, what, max));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| body_error(channel, what, e))? {
        if (out.len() + chunk.len()) as u64 > max {
            return Err(too_large(channel, what, max));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The JSON body of a platform API's answer, read up to [`MAX_ANSWER_BYTES`]; `Null` when it is longer, cut off or
/// not JSON (callers treat `Null` as a failed call).
pub async fn read_json(resp: reqwest::Response) -> serde_json::Value {
    read_body("", "the answer", resp, MAX_ANSWER_BYTES)
        .await
        .ok()
        .and_then(|body| serde_json::from_slice(&body).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Streams the body of `resp` into `dest` (creating its directory), refusing more than `max` bytes; returns the
/// number of bytes written. The body goes to `<dest>.part` first and is renamed when complete; on any failure the
/// part file is removed and `dest` is untouched.
pub async fn save_body(
    channel: &str,
    what: &str,
    mut resp: reqwest::Response,
    dest: &Path,
    max: u64,
) -> Result<u64, ChannelError> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(too_large(channel, what, max));
    }
    let mut part = dest.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ChannelError::Io { path, source }
    };
    if let Some(dir) = dest.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
    }
    let result = async {
        let mut file = tokio::fs::File::create(&part).await.map_err(io(&part))?;
        let mut total = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| body_error(channel, what, e))? {
            total += chunk.len() as u64;
            if total > max {
                return Err(too_large(channel, what, max));
            }
            file.write_all(&chunk).await.map_err(io(&part))?;
        }
        file.flush().await.map_err(io(&part))?;
        drop(file);
        tokio::fs::rename(&part, dest).await.map_err(io(dest))?;
        Ok(total)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&part).await;
    }
    result
}

/// A remote file fetched by [`RemoteMedia::fetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetched {
    /// The body.
    pub bytes: Vec<u8>,
    /// A file name for it: the last segment of the URL's path, made safe ([`safe_file_name`]); `file` when the
    /// path has none.
    pub file_name: String,
    /// The `Content-Type` the server gave, without parameters.
    pub content_type: Option<String>,
    /// The file name the server gave in `Content-Disposition` (`filename*=UTF-8''…` percent-decoded, else
    /// `filename`), its last path component made safe ([`safe_file_name`]); `None` when it gave none.
    pub served_name: Option<String>,
}

/// Fetches remote media behind the SSRF guard, with 0.3.5's redirect rules and a size bound. Cheap to clone (clones
/// share one HTTP client, built on the first fetch: a channel that never sends a remote file never builds it).
#[derive(Debug, Clone)]
pub struct RemoteMedia {
    client: Arc<OnceLock<reqwest::Client>>,
    guard: SsrfGuard,
    follow_redirects: bool,
    redirect_hosts: Vec<String>,
    max_bytes: u64,
    timeout: Duration,
}

/// An HTTP client for a channel's own API: rustls with the ring provider, the system's roots, and `configure`
/// applied (timeouts, redirects); a client that cannot be built is the channel's configuration error.
pub fn api_client(
    channel: &str,
    configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> Result<reqwest::Client, ChannelError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    configure(reqwest::Client::builder())
        .build()
        .map_err(|e| ChannelError::Config {
            channel: channel.to_owned(),
            message: format!("cannot build the HTTP client: {e}"),
        })
}

impl RemoteMedia {
    /// A fetcher that checks every URL and address with `guard`, follows no redirects and reads at most
    /// [`DEFAULT_REMOTE_MEDIA_BYTES`].
    pub fn new(guard: SsrfGuard) -> Self {
        Self {
            client: Arc::new(OnceLock::new()),
            guard,
            follow_redirects: false,
            redirect_hosts: Vec::new(),
            max_bytes: DEFAULT_REMOTE_MEDIA_BYTES,
            timeout: REMOTE_TIMEOUT,
        }
    }

    /// The HTTP client, built on first use: it resolves names through the guard and follows no redirects.
    fn client(&self, channel: &str) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let built = self
            .guard
            .client_builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| ChannelError::Config {
                channel: channel.to_owned(),
                message: format!("cannot build the HTTP client of remote media: {e}"),
            })?;
        Ok(self.client.get_or_init(|| built))
    }

    /// Follows redirects (`allowRemoteMediaRedirects`) to the same host or one of `hosts`
    /// (`remoteMediaRedirectAllowedHosts`, compared without case).
    #[must_use]
    pub fn with_redirects(mut self, follow: bool, hosts: &[String]) -> Self {
        self.follow_redirects = follow;
        self.redirect_hosts = hosts
            .iter()
            .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        self
    }

    /// Reads at most `max` bytes.
    #[must_use]
    pub fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }

    /// Gives one request, headers and body, `timeout` instead of 60 s (large files). The fetcher gets an HTTP
    /// client of its own (clones made before share the old one).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.client = Arc::new(OnceLock::new());
        self
    }

    /// Where a redirect from `current` to `location` may go, or why not.
    fn next_hop(&self, current: &Url, location: Option<&str>) -> Result<Url, String> {
        if !self.follow_redirects {
            return Err("the server redirects and allowRemoteMediaRedirects is off".into());
        }
        let location = location.ok_or("a redirect without a Location header")?;
        let next = current
            .join(location)
            .map_err(|e| format!("a redirect to an invalid URL: {e}"))?;
        let host = |u: &Url| u.host_str().map(|h| h.trim_end_matches('.').to_ascii_lowercase());
        match host(&next) {
            Some(h) if Some(&h) == host(current).as_ref() || self.redirect_hosts.contains(&h) => Ok(next),
            Some(h) => Err(format!(
                "a redirect to another host ({h}) not in remoteMediaRedirectAllowedHosts"
            )),
            None => Err("a redirect to a URL without a host".into()),
        }
    }

    /// Fetches `url` for `channel`. Refused (with the reason) when the URL or a redirect hop fails the SSRF guard
    /// or the redirect rules, when the server answers an error, or when the body is larger than the bound.
    pub async fn fetch(&self, channel: &str, url: &str) -> Result<Fetched, ChannelError> {
        let (current, resp) = self.get(channel, url).await?;
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty());
        let served_name = resp
            .headers()
            .get(reqwest::header::CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .and_then(disposition_file_name);
        let file_name = safe_file_name(
            current
                .path_segments()
                .and_then(|mut s| s.next_back())
                .unwrap_or_default(),
        );
        let bytes = read_body(channel, &format!("remote media {url}"), resp, self.max_bytes).await?;
        Ok(Fetched {
            bytes,
            file_name,
            content_type,
            served_name,
        })
    }

    /// Streams `url` into `dest` for `channel` under the same checks as [`RemoteMedia::fetch`] (through
    /// [`save_body`]: nothing is left at `dest` unless the whole body, within the bound, arrived); returns the
    /// number of bytes written. For files a platform's users send, which may be larger than what is kept in memory.
    pub async fn save(&self, channel: &str, url: &str, dest: &Path) -> Result<u64, ChannelError> {
        let (_, resp) = self.get(channel, url).await?;
        save_body(
            channel,
            &format!("remote media {url}"),
            resp,
            dest,
            self.max_bytes,
        )
        .await
    }

    /// The successful answer to `url` (and the URL it came from, after the redirects followed), every hop checked.
    async fn get(&self, channel: &str, url: &str) -> Result<(Url, reqwest::Response), ChannelError> {
        let refused = |why: String| ChannelError::rejected(channel, format!("remote media {url}: {why}"));
        let (mut current, _) = self
            .guard
            .check_str(url)
            .await
            .map_err(|e| refused(e.to_string()))?;
        let client = self.client(channel)?;
        for _ in 0..=MAX_REDIRECTS {
            let resp = client
                .get(current.clone())
                .send()
                .await
                .map_err(|e| ChannelError::transient(channel, format!("remote media {url}: {e}")))?;
            let status = resp.status();
            if status.is_redirection() {
                let location = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok());
                let next = self.next_hop(&current, location).map_err(refused)?;
                self.guard
                    .check_url(&next)
                    .await
                    .map_err(|e| refused(e.to_string()))?;
                current = next;
                continue;
            }
            if !status.is_success() {
                return Err(refused(format!("HTTP {status}")));
            }
            return Ok((current, resp));
        }
        Err(refused(format!("more than {MAX_REDIRECTS} redirects")))
    }
}

/// The file name in a `Content-Disposition` header: `filename*=<charset>''…` (percent-decoded) first, else
/// `filename="…"` or `filename=…`; its last path component, made safe; `None` when it names none.
fn disposition_file_name(header: &str) -> Option<String> {
    let mut plain = None;
    for param in header.split(';') {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let extended = match key.trim().to_ascii_lowercase().as_str() {
            "filename*" => true,
            "filename" if plain.is_none() => false,
            _ => continue,
        };
        let value = value.trim();
        let value = match value.split_once("''") {
            Some((_charset, encoded)) if extended => encoded,
            _ => value,
        };
        let decoded = percent_decoded(value.trim_matches('"'));
        let last = decoded.rsplit(['/', '\\']).next().unwrap_or_default().trim();
        if last.is_empty() || last.chars().all(|c| c == '.') {
            continue;
        }
        if extended {
            return Some(safe_file_name(last));
        }
        plain = Some(safe_file_name(last));
    }
    plain
}

/// `s` with its `%XX` escapes decoded (invalid UTF-8 replaced); a `%` not followed by two hex digits stays.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_from_content_disposition() {
        let name = |h: &str| disposition_file_name(h);
        assert_eq!(
            name("attachment; filename=\"plain.txt\"; filename*=UTF-8''notes%201.txt").as_deref(),
            Some("notes_1.txt"),
            "filename* first, made safe"
        );
        assert_eq!(
            name("attachment; filename*=UTF-8''%E6%8A%A5%E5%91%8A.docx; filename=\"x.docx\"").as_deref(),
            Some("报告.docx")
        );
        assert_eq!(
            name("attachment; filename=\"a b.pdf\"").as_deref(),
            Some("a_b.pdf")
        );
        assert_eq!(
            name("attachment; FILENAME=report.pdf").as_deref(),
            Some("report.pdf")
        );
        assert_eq!(
            name("attachment; filename=\"../../etc/passwd\"").as_deref(),
            Some("passwd"),
            "the last path component"
        );
        assert_eq!(
            name("attachment; filename=\"C:\\dir\\x.txt\"").as_deref(),
            Some("x.txt")
        );
        assert_eq!(name("attachment; filename=\"..\""), None);
        assert_eq!(name("attachment; filename=\"\""), None);
        assert_eq!(name("inline"), None);
        assert_eq!(percent_decoded("100%25 %zz %4"), "100% %zz %4");
    }

    fn fetcher(follow: bool, hosts: &[&str]) -> RemoteMedia {
        let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_string()).collect();
        RemoteMedia::new(SsrfGuard::default()).with_redirects(follow, &hosts)
    }

    #[test]
    fn redirect_rules() {
        let from = Url::parse("https://cdn.example.com/a/b.png").unwrap();
        let off = fetcher(false, &[]);
        assert!(off.client.get().is_none(), "no HTTP client until the first fetch");
        assert!(
            off.next_hop(&from, Some("/c.png")).is_err(),
            "redirects are off by default"
        );
        let on = fetcher(true, &["Media.Example.NET."]);
        assert_eq!(
            on.next_hop(&from, Some("/c.png")).unwrap().as_str(),
            "https://cdn.example.com/c.png",
            "same host"
        );
        assert!(
            on.next_hop(&from, Some("https://media.example.net/x")).is_ok(),
            "listed host"
        );
        let err = on
            .next_hop(&from, Some("https://evil.example.org/x"))
            .unwrap_err();
        assert!(err.contains("evil.example.org"), "{err}");
        assert!(on.next_hop(&from, None).is_err(), "no Location");
    }
}
