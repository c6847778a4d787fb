//! rustls client set-up: the system trust store (loaded once) plus extra CA files.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use crate::EmailError;

static SYSTEM_ROOTS: OnceLock<Arc<Vec<CertificateDer<'static>>>> = OnceLock::new();

/// The system's CA certificates (rustls-native-certs, which honours `SSL_CERT_FILE` and `SSL_CERT_DIR`), read
/// once per process, on first use.
fn system_roots() -> Arc<Vec<CertificateDer<'static>>> {
    SYSTEM_ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "email: some system CA certificates could not be read");
            }
            Arc::new(found.certs)
        })
        .clone()
}

/// Every trusted root as DER: the system store (when `system`) and the certificates in `extra` PEM files.
pub(crate) fn trusted_roots(
    extra: &[PathBuf],
    system: bool,
) -> Result<Vec<CertificateDer<'static>>, EmailError> {
    let mut roots = if system {
        system_roots().as_ref().clone()
    } else {
        Vec::new()
    };
    for path in extra {
        let certs: Vec<_> = CertificateDer::pem_file_iter(path)
            .map_err(|e| EmailError::Tls(format!("{}: {e}", path.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| EmailError::Tls(format!("{}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(EmailError::Tls(format!(
                "{}: no PEM certificate in the file",
                path.display()
            )));
        }
        roots.extend(certs);
    }
    Ok(roots)
}

/// A rustls client configuration (ring provider) trusting [`trusted_roots`].
pub(crate) fn client_config(extra: &[PathBuf], system: bool) -> Result<Arc<ClientConfig>, EmailError> {
    let mut store = RootCertStore::empty();
    let (_, ignored) = store.add_parsable_certificates(trusted_roots(extra, system)?);
    if ignored > 0 {
        tracing::debug!(ignored, "email: unusable CA certificates skipped");
    }
    if store.is_empty() {
        return Err(EmailError::Tls(
            "no trusted CA certificate found (install ca-certificates or set SSL_CERT_FILE)".into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EmailError::Tls(e.to_string()))?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
