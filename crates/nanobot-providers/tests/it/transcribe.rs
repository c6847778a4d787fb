//! Whisper-style multipart transcription against a local HTTP server.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use nanobot_providers::{ProviderError, Transcriber, WhisperTranscriber};

#[derive(Default)]
struct Seen {
    auth: Option<String>,
    content_type: Option<String>,
    body: Vec<u8>,
}

async fn serve(status: u16) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let app = Router::new().route(
        "/v1/audio/transcriptions",
        post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let mut g = s.lock().unwrap();
                g.auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                g.content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                g.body = body.to_vec();
                let code = axum::http::StatusCode::from_u16(status).unwrap();
                (code, r#"{"text": " hello from voice "}"#)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test]
async fn multipart_upload_and_text() {
    let (base, seen) = serve(200).await;
    let t = WhisperTranscriber::groq("gsk-secret")
        .unwrap()
        .with_base_url(base)
        .with_language(Some("en".into()));
    assert!(!format!("{t:?}").contains("gsk-secret"));
    let text = t
        .transcribe(b"OggS-fake-audio".to_vec(), "voice.ogg", "audio/ogg")
        .await
        .unwrap();
    assert_eq!(text, "hello from voice");
    let g = seen.lock().unwrap();
    assert_eq!(g.auth.as_deref(), Some("Bearer gsk-secret"));
    assert!(
        g.content_type
            .as_deref()
            .unwrap()
            .starts_with("multipart/form-data")
    );
    let body = String::from_utf8_lossy(&g.body);
    assert!(body.contains("OggS-fake-audio"));
    assert!(body.contains("filename=\"voice.ogg\""));
    assert!(body.contains("whisper-large-v3"));
    assert!(body.contains("name=\"language\""));
}

#[tokio::test]
async fn auth_failure_is_typed() {
    let (base, _) = serve(401).await;
    let t = WhisperTranscriber::openai("sk-x").unwrap().with_base_url(base);
    let err = t
        .transcribe(vec![1, 2, 3], "a.mp3", "audio/mpeg")
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
}
