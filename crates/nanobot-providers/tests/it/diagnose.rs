//! Errors that name the cause, the endpoint and what to change, never the key.

use nanobot_providers::registry::find_spec;
use nanobot_providers::{ChatMessage, ChatRequest, Endpoint, OpenAiCompatClient, Provider, ProviderError};
use nanobot_testkit::{MockLlm, MockReply};

use crate::common::{openai, timeouts};

const KEY: &str = "sk-test-123";

fn client_at(base: &str) -> OpenAiCompatClient {
    nanobot_providers::install_ring();
    let spec = find_spec("custom").unwrap();
    OpenAiCompatClient::new(
        Endpoint::new("custom", spec, base, Some(KEY.into()))
            .unwrap()
            .with_timeouts(timeouts()),
    )
}

async fn fail(client: &OpenAiCompatClient) -> ProviderError {
    client
        .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err()
}

fn assert_names(err: &ProviderError, parts: &[&str]) {
    let s = err.to_string();
    for p in parts {
        assert!(s.contains(p), "`{p}` missing from: {s}");
    }
    assert!(!s.contains(KEY) && !format!("{err:?}").contains(KEY), "{s}");
}

#[tokio::test]
async fn connection_refused_names_the_address_and_the_fix_and_is_not_retried() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = fail(&client_at(&format!("http://127.0.0.1:{port}/v1"))).await;
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_names(
        &err,
        &[
            &format!("127.0.0.1:{port}"),
            "connection refused",
            "providers.custom.apiBase",
        ],
    );
}

#[tokio::test]
async fn an_unknown_host_names_the_host_and_the_setting() {
    // `.invalid` never resolves (RFC 2606).
    let err = fail(&client_at("http://nanobot-no-such-host.invalid:8080/v1")).await;
    assert_names(&err, &["nanobot-no-such-host.invalid"]);
    if let ProviderError::Unreachable { cause, .. } = &err {
        assert!(cause.contains("does not resolve"), "{err}");
        assert_names(&err, &["providers.custom.apiBase"]);
    } else {
        // Without any resolver the lookup may only time out; that message names the address too.
        assert!(matches!(err, ProviderError::TimedOut { .. }), "{err:?}");
    }
}

#[tokio::test]
async fn https_to_a_plain_http_server_is_a_tls_error_with_the_fix() {
    let mock = MockLlm::start().await;
    let base = mock.openai_base_url().replace("http://", "https://");
    let err = fail(&client_at(&base)).await;
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
    assert_names(&err, &["TLS", "http://", "providers.custom.apiBase"]);
}

#[tokio::test]
async fn http_errors_name_the_endpoint_and_what_to_change() {
    let mock = MockLlm::start().await;
    let at = mock.openai_base_url();
    let shown = at.trim_end_matches('/');
    let client = openai(&mock, "custom");

    mock.push(MockReply::error(401).error_message(format!("Incorrect API key provided: {KEY}")));
    let err = fail(&client).await;
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    assert_names(&err, &[shown, "providers.custom.apiKey"]);

    mock.push(MockReply::error(404).error_message("model 'local-model' not found"));
    let err = fail(&client).await;
    assert_names(
        &err,
        &[shown, "model `local-model`", "agents.defaults.model", "/v1"],
    );

    mock.push(MockReply::error(503).error_message("loading model"));
    let err = fail(&client).await;
    assert!(err.is_retryable());
    assert_names(&err, &[shown, "HTTP 503", "loading model"]);
}

/// Serves every request with `status` and an HTML page (a web server that is not a model server); returns its
/// base URL and the count of requests it answered.
async fn web_page_server(status: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as many body bytes as it announces.
                let head_end = loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + length {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let page = "<!DOCTYPE html><html><head><title>My NAS</title></head><body>Welcome to my NAS</body></html>";
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = sock.write_all(answer.as_bytes()).await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}/v1"), count)
}

/// A web server on the port (not a model server): the error says so and where to look, shows none of its page,
/// and the call is not retried as a temporary outage.
#[tokio::test]
async fn a_web_server_that_is_not_a_model_server_is_named_and_not_retried() {
    for status in [
        "404 Not Found",
        "405 Method Not Allowed",
        "500 Internal Server Error",
    ] {
        let (base, count) = web_page_server(status).await;
        let err = fail(&client_at(&base)).await;
        assert!(!err.is_retryable(), "{status}: {err:?}");
        assert_names(&err, &["web page", "providers.custom.apiBase", "127.0.0.1"]);
        assert!(!err.to_string().contains("Welcome to my NAS"), "{err}");
        assert_eq!(
            count.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{status}: asked once"
        );
    }
}

/// How a crashing server ends a request.
#[derive(Clone, Copy)]
enum Crash {
    /// Reads the request and closes the connection without a byte.
    BeforeAnswer,
    /// Sends its head and part of the body it announced, then closes.
    MidAnswer,
}

/// A server that crashes on the requests it takes: the first `crashes` connections end as `how` says, after
/// which it stops listening (the process is gone). Returns its base URL.
async fn crashing_server(how: Crash, crashes: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        for _ in 0..crashes {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            if let Crash::MidAnswer = how {
                let part = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hel"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    part.len() + 500
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(part.as_bytes()).await;
                let _ = sock.flush().await;
            }
            drop(sock);
        }
        drop(listener);
    });
    format!("http://127.0.0.1:{port}/v1")
}

/// A server that dies on the request says so, before its answer or in the middle of it, with the endpoint and
/// where to look, as a passing failure (a restarting server comes back); when the retry finds nothing
/// listening, the error says the server stopped after dropping the request, and is not retried further.
#[tokio::test]
async fn a_server_that_dies_on_the_request_is_named_and_a_retry_that_is_refused_says_it_stopped() {
    for (how, words) in [
        (Crash::BeforeAnswer, "without answering"),
        (Crash::MidAnswer, "in the middle of its answer"),
    ] {
        let base = crashing_server(how, usize::MAX).await;
        let err = fail(&client_at(&base)).await;
        assert!(err.is_retryable(), "{err:?}");
        assert_names(&err, &["closed the connection", words, "127.0.0.1", "log"]);

        let base = crashing_server(how, 1).await;
        let (policy, delays) = crate::common::fast_policy();
        let p = nanobot_providers::RetryingProvider::new(std::sync::Arc::new(client_at(&base)), policy);
        let err = p
            .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
            .await
            .unwrap_err();
        assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
        assert!(!err.is_retryable());
        assert_names(
            &err,
            &[
                "connection refused",
                "stopped",
                "crash",
                "providers.custom.apiBase",
            ],
        );
        assert_eq!(
            delays.lock().unwrap().len(),
            1,
            "one retry, then the refusal ends it"
        );
    }
}
