//! The bounds of a model call's waits, and what may be said about an endpoint.

use std::time::Duration;

/// Every wait of one model call has a bound; these are the bounds.
///
/// [`Timeouts::default`] is [`Timeouts::cloud`]; [`Timeouts::for_base_url`] picks [`Timeouts::local`] for a
/// server on a loopback or private address (a model on this machine or the LAN may take long to load and to
/// read a prompt, but is never far away).
#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    /// Longest wait for the response head (status and headers) after the request was sent.
    pub request: Duration,
    /// Longest gap between two received pieces of the body. Anything counts: SSE comments (`: keep-alive`),
    /// pings and partial lines reset it.
    pub stream_idle: Duration,
    /// TCP (and TLS) connect timeout.
    pub connect: Duration,
    /// Deadline of the whole call, retries and their waits included: no stall, however often retried, makes
    /// a call longer than this.
    pub total: Duration,
}

impl Timeouts {
    /// Defaults for a cloud API: connect 10 s, response head 120 s, 90 s between bytes, 600 s per call.
    pub fn cloud() -> Self {
        Self {
            request: Duration::from_secs(120),
            stream_idle: Duration::from_secs(90),
            connect: Duration::from_secs(10),
            total: Duration::from_secs(600),
        }
    }

    /// Defaults for a server on this machine or the LAN: connect 5 s, response head 600 s, 300 s between
    /// bytes, 1800 s per call.
    pub fn local() -> Self {
        Self {
            request: Duration::from_secs(600),
            stream_idle: Duration::from_secs(300),
            connect: Duration::from_secs(5),
            total: Duration::from_secs(1800),
        }
    }

    /// [`Timeouts::local`] when `base_url`'s host is `localhost`, a loopback, private (RFC 1918), link-local or
    /// unique-local address, or a single-label name (`ollama`, as in a compose network); else
    /// [`Timeouts::cloud`].
    pub fn for_base_url(base_url: &str) -> Self {
        if is_local_url(base_url) {
            Self::local()
        } else {
            Self::cloud()
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::cloud()
    }
}

/// Whether `base_url` points at this machine or a private network (see [`Timeouts::for_base_url`]).
pub fn is_local_url(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local(),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost") || d.ends_with(".local") || !d.contains('.')
        }
        None => false,
    }
}

/// `base_url` as it may appear in a message: scheme, host, port and path; never a user, password or query
/// (where some providers take the key).
pub fn display_endpoint(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.as_str().trim_end_matches('/').to_owned()
        }
        Err(_) => "(invalid URL)".to_owned(),
    }
}
