//! Shared helpers: a reqwest client and an SSE reader.

use serde_json::Value;

pub(crate) fn client() -> reqwest::Client {
    nanobot_testkit::install_ring();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// One parsed SSE event.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

impl Event {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Parses a complete SSE body.
pub(crate) fn parse_sse(text: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push(v);
            }
        }
        out.push(Event {
            event,
            data: data.join("\n"),
        });
    }
    out
}

/// Reads chunks until the body holds `n` complete events; returns them and the response for further reads.
pub(crate) async fn read_events(resp: &mut reqwest::Response, n: usize) -> Vec<Event> {
    let mut buf = String::new();
    loop {
        let events = parse_sse(&buf);
        if buf.ends_with("\n\n") && events.len() >= n {
            return events;
        }
        let chunk = resp.chunk().await.unwrap().expect("stream ended early");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
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
