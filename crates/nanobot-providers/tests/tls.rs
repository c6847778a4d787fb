//! TLS set-up of the provider clients: an `http://` endpoint never reads the system CA store; an `https://` one
//! reads it (once, on the first connection), honouring `SSL_CERT_FILE`, and refuses a server signed by a CA
//! that is not in it.
//!
//! Whether the store was read is process-wide state, so the `https://` cases run in a child process (this test
//! binary again, one `#[ignore]`d test selected by name, with `SSL_CERT_FILE` set in the child's environment
//! only); the parent process itself makes only `http://` calls.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns may panic"
)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use nanobot_config::Config;
use nanobot_providers::{ChatMessage, ChatRequest, OpenAiCompatClient, Provider, ProviderFactory};
use nanobot_testkit::{MockLlm, MockReply};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ANSWER: &str = "hello over tls";

#[tokio::test]
async fn http_endpoint_reads_no_certificate() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("plain"));
    mock.push(MockReply::text("plain again"));
    let cfg: Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}}
    }))
    .unwrap();
    let factory = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, HashMap::new());
    for expected in ["plain", "plain again"] {
        // Resolved anew each time, as the agent does for a main model and its fallbacks.
        let p = factory.build("local-model").unwrap();
        let r = p
            .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
            .await
            .unwrap();
        assert_eq!(r.content.as_deref(), Some(expected));
    }
    assert!(
        !nanobot_providers::system_roots_loaded(),
        "an http:// endpoint must not read the system CA store"
    );
}

/// A CA and a `localhost` certificate signed by it: (ca pem, cert pem, key pem).
fn ca_and_leaf(name: &str) -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// An HTTPS server on loopback answering every request with one OpenAI chat completion; returns its port.
async fn tls_server(cert_pem: &str, key_pem: &str) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                // Read the head and the body (Content-Length), then answer and close.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = tls.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = json!({
                    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": ANSWER}}]
                })
                .to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// Runs the child test with `SSL_CERT_FILE` = `ca_file` against the server; returns (success, output).
fn run_child(url: &str, ca_file: &Path, expect: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_https_call",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SSL_CERT_FILE", ca_file)
        .env("SSL_CERT_DIR", ca_file.with_extension("no-such-dir"))
        .env("NANOBOT_TLS_TEST_URL", url)
        .env("NANOBOT_TLS_TEST_EXPECT", expect)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("1 passed"), text)
}

#[tokio::test]
async fn https_trusts_ssl_cert_file_and_refuses_other_cas() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = ca_and_leaf("nanobot tls test CA");
    let (other_ca, _, _) = ca_and_leaf("some other CA");
    let port = tls_server(&cert, &key).await;
    let url = format!("https://localhost:{port}/v1");
    let good = dir.path().join("ca.pem");
    let other = dir.path().join("other.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&good, ca).unwrap();
    std::fs::write(&other, other_ca).unwrap();
    std::fs::write(&empty, "").unwrap();

    // An http:// endpoint works even where the CA store is unusable: it is never read.
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text(ANSWER));
    let plain = mock.openai_base_url();

    // The child processes block on their own runtimes; the servers run on this one meanwhile.
    let checks = [
        (url.clone(), good, "ok"),
        (url.clone(), other, "untrusted"),
        (url, empty.clone(), "no-roots"),
        (plain, empty, "http-no-roots"),
    ];
    for (url, file, expect) in checks {
        let (ok, text) = tokio::task::spawn_blocking(move || run_child(&url, &file, expect))
            .await
            .unwrap();
        assert!(ok, "child expecting {expect} failed:\n{text}");
    }
    assert!(!nanobot_providers::system_roots_loaded());
}

/// Run only by `https_trusts_ssl_cert_file_and_refuses_other_cas`, in a child process.
#[tokio::test]
#[ignore = "run in a child process by https_trusts_ssl_cert_file_and_refuses_other_cas"]
async fn child_https_call() {
    let url = std::env::var("NANOBOT_TLS_TEST_URL").expect("run by the parent test");
    let expect = std::env::var("NANOBOT_TLS_TEST_EXPECT").unwrap();
    let client = OpenAiCompatClient::for_url(&url, None::<String>).unwrap();
    assert!(
        !nanobot_providers::system_roots_loaded(),
        "building a client read the CA store"
    );
    let result = client
        .chat(ChatRequest::new("m", vec![ChatMessage::user("hi")]))
        .await;
    if expect == "http-no-roots" {
        assert_eq!(result.unwrap().content.as_deref(), Some(ANSWER));
        assert!(
            !nanobot_providers::system_roots_loaded(),
            "an http:// call read the CA store"
        );
        return;
    }
    assert!(
        nanobot_providers::system_roots_loaded(),
        "the https call did not read the CA store"
    );
    match expect.as_str() {
        "ok" => assert_eq!(result.unwrap().content.as_deref(), Some(ANSWER)),
        "untrusted" => {
            let err = format!("{:?}", result.unwrap_err());
            assert!(err.to_lowercase().contains("certificate"), "{err}");
        }
        "no-roots" => {
            let err = format!("{:?}", result.unwrap_err());
            assert!(
                err.contains("no usable CA certificate") && err.contains("SSL_CERT_FILE"),
                "{err}"
            );
        }
        other => panic!("unknown expectation {other}"),
    }
}
