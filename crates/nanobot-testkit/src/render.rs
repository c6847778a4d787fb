//! Format-independent pieces shared by the OpenAI and Anthropic renderers.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::reply::MockReply;

/// One server-sent event.
#[derive(Debug, Clone)]
pub(crate) struct SseEvent {
    /// `event:` line (Anthropic), or none (OpenAI).
    pub(crate) event: Option<String>,
    /// `data:` payload.
    pub(crate) data: String,
    /// What role the event plays (for `stall_after_chunks`/`drop_after_chunks`).
    pub(crate) kind: EventKind,
}

/// The role of an SSE event in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Opening or structural events (role chunk, message_start, block start/stop, ping).
    Frame,
    /// A content piece: text, reasoning or tool-argument delta.
    Delta,
    /// Ends the answer: finish chunk, usage chunk, `[DONE]`, message_delta, message_stop.
    Terminal,
}

impl SseEvent {
    pub(crate) fn data(value: &Value, kind: EventKind) -> Self {
        Self {
            event: None,
            data: value.to_string(),
            kind,
        }
    }

    pub(crate) fn named(event: &str, value: &Value, kind: EventKind) -> Self {
        Self {
            event: Some(event.to_owned()),
            data: value.to_string(),
            kind,
        }
    }

    pub(crate) fn done() -> Self {
        Self {
            event: None,
            data: "[DONE]".into(),
            kind: EventKind::Terminal,
        }
    }

    /// The wire bytes of this event, blank line included.
    pub(crate) fn to_bytes(&self) -> bytes::Bytes {
        let mut s = String::new();
        if let Some(event) = &self.event {
            s.push_str("event: ");
            s.push_str(event);
            s.push('\n');
        }
        s.push_str("data: ");
        s.push_str(&self.data);
        s.push_str("\n\n");
        bytes::Bytes::from(s)
    }
}

/// The body of a rendered answer.
#[derive(Debug, Clone)]
pub(crate) enum RenderedBody {
    Json(Value),
    Sse(Vec<SseEvent>),
}

/// A rendered answer before the fault behaviour (stall, drop, delay) is applied.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: RenderedBody,
}

impl Rendered {
    /// A scripted error answer: `status`, a `retry-after` header when one is set, and the scripted
    /// `body` or else the wire format's own error body.
    pub(crate) fn error(
        mut headers: Vec<(String, String)>,
        status: u16,
        retry_after: Option<&str>,
        body: Option<&Value>,
        default_body: impl FnOnce() -> Value,
    ) -> Self {
        if let Some(value) = retry_after {
            headers.push(("retry-after".into(), value.to_owned()));
        }
        Self {
            status,
            headers,
            body: RenderedBody::Json(body.cloned().unwrap_or_else(default_body)),
        }
    }
}

/// Per-request facts the renderers need.
pub(crate) struct RenderCtx<'a> {
    /// The request body.
    pub(crate) request: &'a Value,
    /// Size of the raw request body (for the usage estimate).
    pub(crate) request_bytes: usize,
    /// 1-based number of this answer (for response ids).
    pub(crate) seq: u64,
    /// The mock-wide counter for automatic tool-call ids.
    pub(crate) call_counter: &'a AtomicU64,
}

impl RenderCtx<'_> {
    /// Whether the client asked for a stream.
    pub(crate) fn stream(&self) -> bool {
        self.request.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The model name to echo.
    pub(crate) fn model(&self, reply: &MockReply) -> String {
        reply
            .model
            .clone()
            .or_else(|| {
                self.request
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "mock-model".into())
    }

    /// Tool-call ids for the reply, in order (fixed ones kept, others `call_N`).
    pub(crate) fn call_ids(&self, reply: &MockReply) -> Vec<String> {
        reply
            .tool_calls
            .iter()
            .map(|c| match &c.id {
                Some(id) => id.clone(),
                None => format!("call_{}", self.call_counter.fetch_add(1, Ordering::SeqCst) + 1),
            })
            .collect()
    }

    /// `(prompt, completion)` tokens: the scripted figures or an estimate.
    pub(crate) fn usage(&self, reply: &MockReply) -> (u64, u64) {
        reply.usage.unwrap_or_else(|| {
            let out: usize = reply.content.as_deref().map_or(0, str::len)
                + reply.reasoning.as_deref().map_or(0, str::len)
                + reply
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>();
            ((self.request_bytes as u64 / 4).max(1), (out as u64 / 4).max(1))
        })
    }
}

/// Fixed `created` timestamp so snapshots are stable.
pub(crate) const CREATED: u64 = 1_700_000_000;

/// The events up to and including the `n`-th delta (all of the opening frames when `n == 0`), without any of
/// the events that would end the answer.
pub(crate) fn cut_after_deltas(events: Vec<SseEvent>, n: usize) -> Vec<SseEvent> {
    let mut out = Vec::new();
    let mut deltas = 0;
    for event in events {
        match event.kind {
            EventKind::Delta if deltas == n => break,
            EventKind::Delta => deltas += 1,
            EventKind::Terminal => continue,
            EventKind::Frame => {}
        }
        out.push(event);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cut_keeps_frames_and_n_deltas_but_no_terminal_events() {
        let ev = |k| SseEvent::data(&json!(1), k);
        let events = vec![
            ev(EventKind::Frame),
            ev(EventKind::Delta),
            ev(EventKind::Frame),
            ev(EventKind::Delta),
            ev(EventKind::Terminal),
        ];
        let kinds = |v: Vec<SseEvent>| v.into_iter().map(|e| e.kind).collect::<Vec<_>>();
        assert_eq!(kinds(cut_after_deltas(events.clone(), 0)), vec![EventKind::Frame]);
        assert_eq!(
            kinds(cut_after_deltas(events.clone(), 1)),
            vec![EventKind::Frame, EventKind::Delta, EventKind::Frame]
        );
        assert_eq!(kinds(cut_after_deltas(events, 9)).len(), 4);
    }
}
