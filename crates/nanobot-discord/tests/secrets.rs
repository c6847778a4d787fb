//! A bot token never leaves: the Discord adapter against local servers that fail in different ways (401, a
//! proxy echoing the request with its headers, a hang-up), with the token searched for in every error rendering
//! and in everything logged at TRACE level (our code, serenity, reqwest and hyper).
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
use nanobot_config::{DiscordConfig, Secret};
use nanobot_discord::{DiscordChannel, DiscordSettings};
use nanobot_testkit::secrets::{LogCapture, error_text};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug)]
enum Failure {
    /// Discord's `401: Unauthorized`.
    Unauthorized,
    /// An HTML page echoing the request line and every header (the token included), as a broken proxy might.
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
                        r#"{"message": "401: Unauthorized", "code": 0}"#.to_owned(),
                    )
                        .into_response(),
                    _ => (
                        StatusCode::BAD_GATEWAY,
                        [("content-type", "text/html")],
                        format!("<html>bad gateway for {} {:?}</html>", req.uri(), req.headers()),
                    )
                        .into_response(),
                }
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
    }
    format!("http://{addr}")
}

#[tokio::test]
async fn bad_tokens_never_reach_errors_or_logs() {
    let capture = LogCapture::install();
    let tokens = [
        "MTIzNDU2Nzg5MDEyMzQ1Njc4.GSEKRIT.sekritSEKRITsekritSEKRITsekrit",
        "SEKRIT-short",
    ];
    let mut errors = String::new();
    for failure in [Failure::Unauthorized, Failure::EchoingProxy, Failure::Hangup] {
        let url = serve(failure).await;
        for token in tokens {
            let config = DiscordConfig {
                token: Secret::new(token),
                base_url: Some(url.clone()),
                allow_from: vec!["*".into()],
                ..DiscordConfig::default()
            };
            let media = tempfile::tempdir().unwrap();
            let channel =
                DiscordChannel::new(DiscordSettings::from_config(&config).unwrap(), media.path()).unwrap();
            let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
            // Logging in fails (or keeps retrying: then only the logs of the attempts are checked).
            if let Ok(Err(err)) = tokio::time::timeout(
                Duration::from_secs(10),
                channel.run(bus, CancellationToken::new()),
            )
            .await
            {
                errors.push_str(&error_text(&err));
                tracing::warn!(error = %err, ?err, "channel failed");
            }
            let sent = tokio::time::timeout(
                Duration::from_secs(30),
                channel.send(&OutboundMessage::reply("discord", "42", "hello")),
            )
            .await
            .expect("send did not finish within 30 s")
            .expect_err("send succeeded against a failing server");
            errors.push_str(&error_text(&sent));
            tracing::warn!(error = %sent, ?sent, "send failed");
        }
    }
    let logs = capture.text();
    assert!(
        logs.contains("send failed") && logs.contains("TRACE"),
        "nothing was captured: {logs}"
    );
    assert!(
        errors.contains("401") && errors.contains("502"),
        "every failure was seen: {errors}"
    );
    for token in tokens {
        assert!(
            !errors.contains("SEKRIT"),
            "an error shows the token {token}:\n{errors}"
        );
        assert!(
            !logs.contains("SEKRIT"),
            "the logs show the token {token}:\n{logs}"
        );
    }
}
