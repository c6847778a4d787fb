//! The shared HTTP client builder and the TLS set-up: rustls with the `ring` provider, trusting the system's CA
//! store, which is read once per process and only when the first `https://` server certificate is checked (a
//! client talking to an `http://` endpoint on this machine never reads a certificate).

use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

static RING: Once = Once::new();

/// Installs rustls' `ring` crypto provider as the process default, once. Every binary and test that builds a
/// `reqwest::Client` calls this first (reqwest is built without a provider of its own). Safe to call often.
pub fn install_ring() {
    RING.call_once(|| {
        // Err means another provider is already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The `ring` provider every client here uses (not the process default, which a dependency may have changed).
fn ring() -> &'static Arc<CryptoProvider> {
    static RING_PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    RING_PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The system's CA certificates, read on first use (rustls-native-certs: `SSL_CERT_FILE` and `SSL_CERT_DIR` are
/// honoured, else the distribution's store). A failure is kept and reported on every use.
static SYSTEM_ROOTS: OnceLock<Result<Arc<Vec<CertificateDer<'static>>>, String>> = OnceLock::new();

/// The system's CA certificates as a verifier, built on first use from [`system_roots`].
static SYSTEM_VERIFIER: OnceLock<Result<Arc<WebPkiServerVerifier>, String>> = OnceLock::new();

/// Whether this process has read the system CA store yet (it does so on the first `https://` connection made
/// through a client of this module, never for `http://`, or when [`system_roots`] is first asked).
pub fn system_roots_loaded() -> bool {
    SYSTEM_ROOTS.get().is_some()
}

/// The system's CA certificates (those rustls can use), read once per process on first use: what every client
/// here trusts, and what a confined program given credentials trusts besides nanobot's egress proxy.
///
/// # Errors
/// No usable certificate was found (the message says where to point `SSL_CERT_FILE`).
pub fn system_roots() -> Result<Arc<Vec<CertificateDer<'static>>>, String> {
    SYSTEM_ROOTS.get_or_init(load_system_roots).clone()
}

fn load_system_roots() -> Result<Arc<Vec<CertificateDer<'static>>>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let mut usable = Vec::with_capacity(found.certs.len());
    for cert in found.certs {
        if roots.add(cert.clone()).is_ok() {
            usable.push(cert);
        }
    }
    tracing::debug!(certificates = usable.len(), "system CA store loaded");
    if usable.is_empty() {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "no usable CA certificate found in the system store (install ca-certificates, or point \
             SSL_CERT_FILE / SSL_CERT_DIR at your CA bundle){}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join("; "))
            }
        ));
    }
    Ok(Arc::new(usable))
}

fn system_verifier() -> Result<Arc<WebPkiServerVerifier>, rustls::Error> {
    SYSTEM_VERIFIER
        .get_or_init(load_system_verifier)
        .clone()
        .map_err(rustls::Error::General)
}

fn load_system_verifier() -> Result<Arc<WebPkiServerVerifier>, String> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(system_roots()?.iter().cloned());
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), ring().clone())
        .build()
        .map_err(|e| format!("cannot use the system CA store: {e}"))
}

/// Checks server certificates against the system store, reading it on the first check.
#[derive(Debug)]
struct LazySystemVerifier;

impl ServerCertVerifier for LazySystemVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        system_verifier()?.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &ring().signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &ring().signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        ring().signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls client configuration every HTTP client here shares: `ring`, TLS 1.2 and 1.3, ALPN `h2` then
/// `http/1.1`, and the system CA store read lazily (see [`system_roots_loaded`]). Building it reads no file.
pub fn tls_config() -> Result<Arc<ClientConfig>, rustls::Error> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, rustls::Error>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut config = ClientConfig::builder_with_provider(ring().clone())
                .with_safe_default_protocol_versions()?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(LazySystemVerifier))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// A `reqwest::ClientBuilder` with nanobot's defaults (ring, the lazily read system CA store, connect timeout,
/// user agent, no whole-request timeout so long streams are not cut: stream stalls are caught by the idle
/// timeout).
pub fn http_client_builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
    install_ring();
    let builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("nanobot-rs/", env!("CARGO_PKG_VERSION")));
    match tls_config() {
        Ok(config) => builder.tls_backend_preconfigured(ClientConfig::clone(&config)),
        // Not expected with `ring`'s safe defaults; reqwest's own set-up (which reads the store eagerly) still
        // trusts the same roots.
        Err(e) => {
            tracing::warn!(error = %e, "cannot build the shared TLS configuration; using reqwest's");
            builder
        }
    }
}

/// A ready `reqwest::Client` with the defaults of [`http_client_builder`] (30 s connect timeout).
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    http_client_builder(Duration::from_secs(30)).build()
}

/// The process-wide client with the defaults of [`http_client`], built once and shared (a clone is a handle to
/// the same connection pool).
pub fn shared_http_client() -> Result<reqwest::Client, String> {
    static SHARED: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| http_client().map_err(|e| format!("cannot build the HTTP client: {e}")))
        .clone()
}
