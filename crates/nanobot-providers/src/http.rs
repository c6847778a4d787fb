//! The shared HTTP client builder and the rustls crypto-provider set-up.

use std::sync::Once;
use std::time::Duration;

static RING: Once = Once::new();

/// Installs rustls' `ring` crypto provider as the process default, once. Every binary and test that builds a
/// `reqwest::Client` calls this first (reqwest is built without a provider of its own). Safe to call often.
pub fn install_ring() {
    RING.call_once(|| {
        // Err means another provider is already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A `reqwest::ClientBuilder` with nanobot's defaults (ring installed, connect timeout, user agent, no
/// whole-request timeout so long streams are not cut: stream stalls are caught by the idle timeout).
pub fn http_client_builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
    install_ring();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("nanobot-rs/", env!("CARGO_PKG_VERSION")))
}

/// A ready `reqwest::Client` with the defaults of [`http_client_builder`] (30 s connect timeout).
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    http_client_builder(Duration::from_secs(30)).build()
}
