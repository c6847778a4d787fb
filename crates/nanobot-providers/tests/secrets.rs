//! API keys never leave: provider calls that fail (401 echoing the key, a server that hangs up, a gateway
//! answering HTML that echoes headers) with the key and a secret header searched for in every error rendering
//! and in everything logged at TRACE level (`log` records of reqwest and hyper included).
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use nanobot_providers::registry::find_spec;
use nanobot_providers::{
    AnthropicClient, ChatMessage, ChatRequest, Endpoint, OpenAiCompatClient, Provider, Timeouts,
};

const KEY: &str = "sk-SEKRIT-key-5e1f0a";
const HEADER: &str = "hdr-SEKRIT-9b3c";

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[derive(Clone, Copy)]
enum Failure {
    /// 401 whose message quotes the key and the header back.
    EchoingUnauthorized,
    /// 502 HTML listing every request header.
    EchoingGateway,
    /// Accepts and closes the connection.
    Hangup,
}

async fn serve(failure: Failure) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    if let Failure::Hangup = failure {
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                drop(sock);
            }
        });
    } else {
        let app = Router::new().fallback(move |req: Request| async move {
            let headers = format!("{:?}", req.headers());
            match failure {
                Failure::EchoingUnauthorized => (
                    StatusCode::UNAUTHORIZED,
                    [("content-type", "application/json")],
                    serde_json::json!({"error": {"message": format!("Incorrect API key provided: {headers}")}})
                        .to_string(),
                )
                    .into_response(),
                _ => (
                    StatusCode::BAD_GATEWAY,
                    [("content-type", "text/html")],
                    format!("<html>bad gateway: {headers}</html>"),
                )
                    .into_response(),
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    format!("http://{addr}/v1")
}

fn endpoint(name: &str, base: &str) -> Endpoint {
    Endpoint::new(name, find_spec(name).unwrap(), base.to_owned(), Some(KEY.into()))
        .unwrap()
        .with_header("X-Secret-Header", HEADER)
        .with_timeouts(Timeouts {
            request: Duration::from_secs(10),
            stream_idle: Duration::from_secs(10),
            connect: Duration::from_secs(5),
            total: Duration::from_secs(30),
        })
}

fn error_text(e: &dyn std::error::Error) -> String {
    let mut out = format!("{e}\n{e:?}\n");
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(&format!("{s}\n{s:?}\n"));
        src = s.source();
    }
    out
}

#[tokio::test]
async fn keys_never_reach_errors_or_logs() {
    nanobot_providers::install_ring();
    let capture = Capture::default();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .init();
    let mut errors = String::new();
    for failure in [
        Failure::EchoingUnauthorized,
        Failure::EchoingGateway,
        Failure::Hangup,
    ] {
        let base = serve(failure).await;
        let req = || ChatRequest::new("gpt-4o", vec![ChatMessage::user("x")]);
        let openai = OpenAiCompatClient::new(endpoint("openai", &base));
        let err = openai.chat(req()).await.expect_err("openai call succeeded");
        errors.push_str(&error_text(&err));
        tracing::warn!(error = %err, ?err, "openai failed");
        errors.push_str(&format!("{openai:?}\n"));
        let anthropic = AnthropicClient::new(endpoint("anthropic", &base));
        let err = anthropic.chat(req()).await.expect_err("anthropic call succeeded");
        errors.push_str(&error_text(&err));
        tracing::warn!(error = %err, ?err, "anthropic failed");
        errors.push_str(&format!("{anthropic:?}\n"));
    }
    let logs = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("openai failed") && logs.contains("TRACE"),
        "nothing was captured: {logs}"
    );
    for secret in [KEY, HEADER] {
        assert!(!errors.contains(secret), "an error shows {secret}:\n{errors}");
        assert!(!logs.contains(secret), "the logs show {secret}:\n{logs}");
    }
}
