//! Shared helpers: a reqwest client and an SSE reader.

use serde_json::Value;

pub(crate) fn client() -> reqwest::Client {
    nanobot_testkit::install_ring();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub(crate) use nanobot_testkit::sse::parse as parse_sse;

/// Reads until `n` complete events have arrived.
pub(crate) async fn read_events(
    resp: &mut reqwest::Response,
    n: usize,
) -> Vec<nanobot_testkit::sse::SseFrame> {
    nanobot_testkit::sse::read_frames(resp, n).await.unwrap()
}

pub(crate) fn chat_body(user: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": "gpt-test",
        "stream": stream,
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": user}],
    })
}

pub(crate) fn anthropic_body(user: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": user}],
    })
}
