//! A small SSE reader for asserting on streamed answers (the mock's, or nanobot's own streaming API).

use serde_json::Value;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` name, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseFrame {
    /// The data parsed as JSON. Panics with the offending text if it is not JSON (e.g. `[DONE]`).
    pub fn json(&self) -> Value {
        match serde_json::from_str(&self.data) {
            Ok(value) => value,
            Err(err) => panic!("SSE data is not JSON ({err}): {:?}", self.data),
        }
    }

    /// Whether this is OpenAI's `data: [DONE]` terminator.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }
}

/// Parses a complete SSE body (`\n\n`-separated blocks; comments and `id:`/`retry:` lines ignored; blocks
/// without `data:` skipped; an unterminated last block is parsed too).
///
/// ```
/// let frames = nanobot_testkit::sse::parse("event: ping\ndata: {\"type\":\"ping\"}\n\ndata: [DONE]\n\n");
/// assert_eq!(frames[0].event.as_deref(), Some("ping"));
/// assert_eq!(frames[0].json()["type"], "ping");
/// assert!(frames[1].is_done());
/// ```
pub fn parse(text: &str) -> Vec<SseFrame> {
    let text = text.replace("\r\n", "\n");
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                event = Some(v.trim_start().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if !data.is_empty() {
            out.push(SseFrame {
                event,
                data: data.join("\n"),
            });
        }
    }
    out
}

/// Reads `response` until it holds at least `n` complete events and returns all complete events so far;
/// the response stays usable for further reads. Errors if the body fails or ends first.
pub async fn read_frames(response: &mut reqwest::Response, n: usize) -> anyhow::Result<Vec<SseFrame>> {
    let mut buf = String::new();
    loop {
        let complete = buf.rfind("\n\n").map_or("", |end| &buf[..end + 2]);
        let frames = parse(complete);
        if frames.len() >= n {
            return Ok(frames);
        }
        match response.chunk().await? {
            Some(chunk) => buf.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
            None => anyhow::bail!("stream ended after {} of {n} events: {buf:?}", frames.len()),
        }
    }
}
