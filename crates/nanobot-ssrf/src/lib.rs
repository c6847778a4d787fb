//! The SSRF guard: keeps outbound fetches (`web_fetch`, MCP HTTP transports, channels fetching remote media) away
//! from internal addresses.
//!
//! A URL passes when its scheme is `http`/`https`, it has a host, and **every** address the host
//! resolves to is public: not private, loopback, link-local, CGNAT, unspecified, multicast,
//! reserved/documentation, IPv4-mapped/-compatible IPv6, NAT64/6to4/Teredo forms of such
//! addresses, unique-local IPv6 … — unless it lies in a `tools.ssrfWhitelist` CIDR.
//!
//! It is its own crate so that every outbound fetch uses one guard (the tools' `web_fetch`, MCP over HTTP, the
//! channels that fetch remote media to send) without the lower crates (`nanobot-util`, the config, the bus) ever
//! reaching an HTTP client.
//!
//! ```
//! use nanobot_ssrf::SsrfGuard;
//!
//! let guard = SsrfGuard::from_cidrs(&["10.1.0.0/16"]).unwrap();
//! assert!(!guard.ip_allowed("127.0.0.1".parse().unwrap()));
//! assert!(guard.ip_allowed("10.1.2.3".parse().unwrap()));
//! assert!(guard.ip_allowed("93.184.216.34".parse().unwrap()));
//! ```
//!
//! Use [`SsrfGuard::client_builder`] to get a `reqwest` client whose DNS resolution runs through
//! the guard, so the connection goes to exactly the addresses that were validated (no DNS
//! rebinding between check and connect). Redirects must be followed by hand and each hop checked
//! again (see [`SsrfGuard::check_url`]); the builder disables automatic redirects.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use ipnet::IpNet;
use url::Url;

/// Why a URL or address was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SsrfError {
    /// The URL could not be parsed.
    #[error("invalid URL {url}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// The parse error.
        #[source]
        source: url::ParseError,
    },
    /// Only http and https are allowed.
    #[error("URL scheme '{0}' is not allowed (only http and https)")]
    Scheme(String),
    /// The URL has no host.
    #[error("URL {0} has no host")]
    NoHost(String),
    /// The host resolves to an internal address.
    #[error("URL host {host} resolves to a blocked address {ip} (private/internal network)")]
    Blocked {
        /// The host name or literal.
        host: String,
        /// The offending address.
        ip: IpAddr,
    },
    /// The host did not resolve.
    #[error("cannot resolve host {host}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The host resolved to no address.
    #[error("host {0} resolved to no address")]
    NoAddress(String),
    /// A `tools.ssrfWhitelist` entry is not a CIDR.
    #[error("invalid CIDR '{0}' in tools.ssrfWhitelist")]
    BadCidr(String),
}

/// Resolves host names; swap it out in tests to make a host look public.
#[async_trait]
pub trait HostResolver: Send + Sync + std::fmt::Debug {
    /// All addresses of `host`.
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

#[async_trait]
impl HostResolver for SystemResolver {
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        let addrs = tokio::net::lookup_host((host, 0)).await?;
        Ok(addrs.map(|a| a.ip()).collect())
    }
}

/// The SSRF guard (cheap to clone).
#[derive(Debug, Clone)]
pub struct SsrfGuard {
    whitelist: Arc<Vec<IpNet>>,
    resolver: Arc<dyn HostResolver>,
}

impl Default for SsrfGuard {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl SsrfGuard {
    /// A guard whose whitelist is `whitelist` (`tools.ssrfWhitelist`, already parsed).
    pub fn new(whitelist: Vec<IpNet>) -> Self {
        Self {
            whitelist: Arc::new(whitelist),
            resolver: Arc::new(SystemResolver),
        }
    }

    /// Parses `tools.ssrfWhitelist` entries (`"10.0.0.0/8"`, or a bare address for a /32 or /128).
    pub fn from_cidrs<S: AsRef<str>>(cidrs: &[S]) -> Result<Self, SsrfError> {
        let mut nets = Vec::new();
        for c in cidrs {
            let c = c.as_ref().trim();
            let net = c
                .parse::<IpNet>()
                .or_else(|_| c.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| SsrfError::BadCidr(c.to_owned()))?;
            nets.push(net);
        }
        Ok(Self::new(nets))
    }

    /// Uses `resolver` for host lookups.
    pub fn with_resolver(mut self, resolver: Arc<dyn HostResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// True when `ip` may be contacted.
    pub fn ip_allowed(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        if self
            .whitelist
            .iter()
            .any(|n| n.contains(&ip) || mapped.is_some_and(|m| n.contains(&m)))
        {
            return true;
        }
        !is_blocked_ip(ip)
    }

    /// Checks one address, naming `host` in the error.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), SsrfError> {
        if self.ip_allowed(ip) {
            Ok(())
        } else {
            Err(SsrfError::Blocked {
                host: host.to_owned(),
                ip,
            })
        }
    }

    /// Resolves `host` and checks every address; returns them all when all pass.
    pub async fn resolve_checked(&self, host: &str) -> Result<Vec<IpAddr>, SsrfError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.check_ip(host, ip)?;
            return Ok(vec![ip]);
        }
        let ips = self
            .resolver
            .lookup(bare)
            .await
            .map_err(|source| SsrfError::Resolve {
                host: host.to_owned(),
                source,
            })?;
        if ips.is_empty() {
            return Err(SsrfError::NoAddress(host.to_owned()));
        }
        for ip in &ips {
            self.check_ip(host, *ip)?;
        }
        Ok(ips)
    }

    /// Parses and checks a URL: scheme, host, every resolved address.
    pub async fn check_str(&self, url: &str) -> Result<(Url, Vec<SocketAddr>), SsrfError> {
        let parsed = Url::parse(url).map_err(|source| SsrfError::InvalidUrl {
            url: url.to_owned(),
            source,
        })?;
        let addrs = self.check_url(&parsed).await?;
        Ok((parsed, addrs))
    }

    /// Checks a parsed URL: scheme, host, every resolved address. Returns the validated
    /// socket addresses.
    pub async fn check_url(&self, url: &Url) -> Result<Vec<SocketAddr>, SsrfError> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(SsrfError::Scheme(other.to_owned())),
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(SsrfError::NoHost(url.to_string())),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let ips = self.resolve_checked(&host).await?;
        Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }

    /// A `reqwest` client builder that resolves names through this guard (refusing internal
    /// addresses at connect time, pinning connections to validated addresses), follows no
    /// redirects, and uses no proxy (no environment proxies either). Install the rustls crypto
    /// provider before `build()`.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver(self.clone())))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
    }
}

/// `reqwest` DNS resolver that only yields addresses the guard allows.
#[derive(Debug, Clone)]
struct GuardedResolver(SsrfGuard);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let ips = guard.resolve_checked(&host).await?;
            let addrs: reqwest::dns::Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// True for addresses that must never be fetched (before the whitelist is considered).
pub fn is_blocked_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_blocked_v4(v4),
        IpAddr::V6(v6) => is_blocked_v6(v6),
    }
}

fn is_blocked_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_unspecified()
        || o[0] == 0 // 0.0.0.0/8 "this network"
        || ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10 CGNAT
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24 IETF protocol assignments
        || (o[0] == 192 && o[1] == 0 && o[2] == 2) // TEST-NET-1
        || (o[0] == 198 && o[1] == 51 && o[2] == 100) // TEST-NET-2
        || (o[0] == 203 && o[1] == 0 && o[2] == 113) // TEST-NET-3
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15 benchmarking
        || (o[0] == 192 && o[1] == 88 && o[2] == 99) // 6to4 relay anycast
        || ip.is_multicast()
        || o[0] >= 240 // reserved + broadcast
}

fn is_blocked_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
        return true;
    }
    // IPv4-mapped (::ffff:0:0/96) and IPv4-compatible (::/96): refused outright.
    if ip.to_ipv4_mapped().is_some() || (s[0..6] == [0, 0, 0, 0, 0, 0]) {
        return true;
    }
    let v4_at_end = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local
        || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link-local
        || (s[0] & 0xffc0) == 0xfec0 // fec0::/10 site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo: tunnels to arbitrary IPv4
        || (s[0] == 0x0064 && s[1] == 0xff9b && is_blocked_v4(v4_at_end)) // NAT64
        || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64 64:ff9b:1::/48
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard-only 100::/64
        || (s[0] == 0x2002 && is_blocked_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            (s[1] & 0xff) as u8,
            (s[2] >> 8) as u8,
            (s[2] & 0xff) as u8,
        ))) // 6to4 wrapping an internal IPv4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let blocked = [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::1",
            "2001::1",
            "ff02::1",
            "fec0::1",
            "2001:db8::1",
        ];
        for ip in blocked {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(is_blocked_ip(ip), "{ip} should be blocked");
        }
        let allowed = [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "93.184.216.34",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
        ];
        for ip in allowed {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_blocked_ip(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn whitelist_allows_a_cidr_only() {
        let g = SsrfGuard::from_cidrs(&["100.64.0.0/10", "fd00::/8"]).unwrap();
        assert!(g.ip_allowed("100.100.1.1".parse().unwrap()));
        assert!(g.ip_allowed("fd00::5".parse().unwrap()));
        assert!(!g.ip_allowed("10.0.0.1".parse().unwrap()));
        assert!(SsrfGuard::from_cidrs(&["nope"]).is_err());
    }

    #[tokio::test]
    async fn urls() {
        let g = SsrfGuard::default();
        for bad in [
            "http://127.0.0.1/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://localhost/",
            "file:///etc/passwd",
            "ftp://example.com/",
            "http://169.254.169.254/latest/meta-data/",
        ] {
            assert!(g.check_str(bad).await.is_err(), "{bad} should be refused");
        }
    }
}
