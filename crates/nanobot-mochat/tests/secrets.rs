//! The claw token never leaves: the adapter against local servers that fail every request while echoing it back
//! (JSON errors quoting the request line, headers and body with 401, 500 and 200; an HTML page; a hang-up), with
//! the secret searched for in every error rendering and in everything logged at TRACE level.
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use nanobot_bus::{Bus, InProcessBus, OutboundMessage};
use nanobot_channels::Channel;
use nanobot_testkit::secrets::{LogCapture, assert_secrets_never_leave, error_text};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn the_secret_never_reaches_errors_or_logs() {
    let capture = LogCapture::install();
    assert_secrets_never_leave(&capture, &["SEKRITclawtokenSEKRIT0123456789", "SEKRIT-short"], |base, secret| async move {
        let media = tempfile::tempdir().unwrap();
        let channel = {
        let block = serde_json::json!({"enabled": true, "clawToken": secret, "baseUrl": base, "sessions": ["*"]});
        nanobot_mochat::MochatChannel::new(nanobot_mochat::MochatSettings::from_block(&block).unwrap(), media.path()).unwrap()
        };
        let mut errors = Vec::new();
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
        // Starting fails (or keeps retrying: then only the logs of the attempts are checked).
        if let Ok(Err(err)) = tokio::time::timeout(Duration::from_secs(3), channel.run(bus, CancellationToken::new())).await {
            tracing::warn!(error = %err, ?err, "channel failed");
            errors.push(error_text(&err));
        }
        let sent = tokio::time::timeout(
            Duration::from_secs(30),
            channel.send(&OutboundMessage::reply("mochat", "session_1", "hello")),
        )
        .await
        .expect("send did not finish within 30 s");
        if let Err(err) = sent {
            tracing::warn!(error = %err, ?err, "send failed");
            errors.push(error_text(&err));
        }
        errors
    })
    .await;
}
