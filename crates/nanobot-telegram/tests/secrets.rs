//! A bot token never leaves: failing Bot API calls against local servers that fail in different ways, with the
//! token searched for in every error rendering and in everything logged at TRACE level (our code, teloxide,
//! reqwest and hyper, `log` records included).
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use nanobot_bus::{Bus, InProcessBus, OutboundMessage};
use nanobot_channels::Channel;
use nanobot_config::{Secret, TelegramConfig};
use nanobot_telegram::{TelegramChannel, TelegramSettings};
use nanobot_testkit::secrets::{LogCapture, error_text};
use tokio_util::sync::CancellationToken;

/// How the local "Bot API" fails.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// `401 Unauthorized` in Telegram's envelope.
    Unauthorized,
    /// An HTML page (not JSON) that echoes the request path (and so the token), as a broken proxy might.
    EchoingProxy,
    /// The connection is accepted and closed at once.
    Hangup,
}

async fn serve(failure: Failure) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    match failure {
        Failure::Hangup => {
            tokio::spawn(async move {
                while let Ok((sock, _)) = listener.accept().await {
                    drop(sock);
                }
            });
        }
        Failure::Unauthorized | Failure::EchoingProxy => {
            let app = Router::new().fallback(move |req: Request| async move {
                match failure {
                    Failure::Unauthorized => (
                        StatusCode::UNAUTHORIZED,
                        [("content-type", "application/json")],
                        r#"{"ok":false,"error_code":401,"description":"Unauthorized"}"#.to_owned(),
                    )
                        .into_response(),
                    _ => (
                        StatusCode::OK,
                        [("content-type", "text/html")],
                        format!("<html>bad gateway for {}</html>", req.uri()),
                    )
                        .into_response(),
                }
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
    }
    format!("http://{addr}/")
}

#[tokio::test]
async fn bad_tokens_never_reach_errors_or_logs() {
    let capture = LogCapture::install();
    // Well-formed (teloxide recognises and hides these itself), short, and malformed tokens.
    let tokens = [
        "987654321:AAHsekritSEKRITsekritSEKRITsekrit123",
        "123456:SEKRIT-short",
        "no-colon-SEKRIT-token",
    ];
    let mut errors = String::new();
    for failure in [Failure::Unauthorized, Failure::EchoingProxy, Failure::Hangup] {
        let url = serve(failure).await;
        for token in tokens {
            let config = TelegramConfig {
                token: Secret::new(token),
                base_url: Some(url.clone()),
                allow_from: vec!["*".into()],
                ..TelegramConfig::default()
            };
            let settings = TelegramSettings::from_config(&config).unwrap();
            let media = tempfile::tempdir().unwrap();
            let channel = TelegramChannel::new(settings, media.path()).unwrap();
            let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
            let run = tokio::time::timeout(
                Duration::from_secs(30),
                channel.run(bus, CancellationToken::new()),
            )
            .await
            .expect("run did not fail within 30 s");
            let err = run.expect_err("run succeeded against a failing server");
            errors.push_str(&error_text(&err));
            tracing::warn!(error = %err, ?err, "channel failed");
            let sent = channel
                .send(&OutboundMessage::reply("telegram", "42", "hello"))
                .await
                .expect_err("send succeeded against a failing server");
            errors.push_str(&error_text(&sent));
            tracing::warn!(error = %sent, ?sent, "send failed");
        }
    }
    let logs = capture.text();
    assert!(
        logs.contains("channel failed") && logs.contains("TRACE"),
        "nothing was captured: {logs}"
    );
    for token in tokens {
        let secret = token.rsplit(':').next().unwrap();
        assert!(
            !errors.contains(secret),
            "an error shows the token {token}:\n{errors}"
        );
        assert!(!logs.contains(secret), "the logs show the token {token}:\n{logs}");
    }
}
