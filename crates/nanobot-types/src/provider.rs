//! The [`Provider`] trait and the one collector that turns a stream of [`StreamEvent`]s into a
//! [`ChatResponse`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::error::ProviderError;
use crate::message::{ChatRequest, ChatResponse, FinishReason, StreamEvent, ToolCall, Usage};

/// A stream of events of one model answer. Dropping it cancels the request.
pub type EventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A language model behind some wire format.
///
/// One required method, [`Provider::stream`]; [`Provider::chat`] collects it (implementations may send a
/// non-streaming request instead, as long as they translate it into the same events). Both are lazy and
/// cancellable: dropping the stream or the future stops the HTTP request.
#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The provider's registry name (`openai`, `anthropic`, `openrouter`, `custom`, …).
    fn name(&self) -> &str;

    /// Starts a streamed model call. Nothing is sent until the stream is polled.
    fn stream(&self, request: ChatRequest) -> EventStream;

    /// A whole answer at once.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        collect(self.stream(request)).await
    }
}

/// Collects a stream into a response (the one shared collector).
pub async fn collect(mut stream: EventStream) -> Result<ChatResponse, ProviderError> {
    let mut acc = ResponseAccumulator::default();
    while let Some(event) = stream.next().await {
        acc.push(event?);
    }
    Ok(acc.finish())
}

#[derive(Debug, Default)]
struct PendingCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Accumulates [`StreamEvent`]s into a [`ChatResponse`]. Tool-call pieces are grouped by `index`; ids and
/// names are set, never concatenated (llama.cpp repeats them in every chunk); argument pieces are appended.
#[derive(Debug, Default)]
pub struct ResponseAccumulator {
    text: String,
    reasoning: String,
    calls: BTreeMap<usize, PendingCall>,
    thinking_blocks: Vec<serde_json::Value>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    saw_anything: bool,
}

impl ResponseAccumulator {
    /// Adds one event.
    pub fn push(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::TextDelta(t) => {
                self.saw_anything |= !t.is_empty();
                self.text.push_str(&t);
            }
            StreamEvent::ReasoningDelta(t) => {
                self.saw_anything |= !t.is_empty();
                self.reasoning.push_str(&t);
            }
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                self.saw_anything = true;
                let call = self.calls.entry(index).or_default();
                if let Some(id) = id.filter(|s| !s.is_empty()) {
                    call.id = Some(id);
                }
                if let Some(name) = name.filter(|s| !s.is_empty()) {
                    call.name = Some(name);
                }
                call.arguments.push_str(&arguments);
            }
            StreamEvent::ThinkingBlock(b) => {
                self.saw_anything = true;
                self.thinking_blocks.push(b);
            }
            StreamEvent::Usage(u) => self.usage = Some(u),
            StreamEvent::Done(reason) => self.finish = Some(reason),
        }
    }

    /// True once any text, reasoning or tool call arrived.
    pub fn has_content(&self) -> bool {
        self.saw_anything
    }

    /// True once a finish reason arrived.
    pub fn is_done(&self) -> bool {
        self.finish.is_some()
    }

    /// The collected response. Calls without an id get a generated one (`call_<n>`); calls without a name
    /// are dropped.
    pub fn finish(self) -> ChatResponse {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .filter_map(|(index, c)| {
                let name = c.name?;
                let id = c.id.unwrap_or_else(|| format!("call_{index}"));
                Some(ToolCall::from_raw(id, name, &c.arguments))
            })
            .collect();
        let finish_reason = match self.finish {
            Some(FinishReason::Stop) | None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            Some(r) => r,
            None => FinishReason::Stop,
        };
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls,
            finish_reason,
            usage: self.usage,
            reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
            thinking_blocks: (!self.thinking_blocks.is_empty()).then_some(self.thinking_blocks),
        }
    }
}

/// Turns a complete response into the events that would have produced it (used by non-streaming requests so
/// that every answer goes through the same collector).
pub fn response_events(response: ChatResponse) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    if let Some(r) = response.reasoning_content {
        events.push(StreamEvent::ReasoningDelta(r));
    }
    for b in response.thinking_blocks.unwrap_or_default() {
        events.push(StreamEvent::ThinkingBlock(b));
    }
    if let Some(t) = response.content {
        events.push(StreamEvent::TextDelta(t));
    }
    for (index, c) in response.tool_calls.into_iter().enumerate() {
        let arguments = c.arguments_json();
        events.push(StreamEvent::ToolCallDelta {
            index,
            id: Some(c.id),
            name: Some(c.name),
            arguments,
        });
    }
    if let Some(u) = response.usage {
        events.push(StreamEvent::Usage(u));
    }
    events.push(StreamEvent::Done(response.finish_reason));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> StreamEvent {
        StreamEvent::ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: args.to_owned(),
        }
    }

    #[test]
    fn repeated_ids_and_names_are_not_concatenated() {
        let mut acc = ResponseAccumulator::default();
        for e in [
            delta(0, Some("call_1"), Some("read_file"), "{\"pa"),
            delta(0, Some("call_1"), Some("read_file"), "th\": \"a"),
            delta(1, Some("call_2"), Some("exec"), ""),
            delta(0, Some("call_1"), Some("read_file"), ".txt\"}"),
            delta(1, None, None, "{\"command\":\"ls\"}"),
            StreamEvent::Done(FinishReason::ToolCalls),
        ] {
            acc.push(e);
        }
        let r = acc.finish();
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(
            r.tool_calls[0],
            ToolCall::new("call_1", "read_file", json!({"path": "a.txt"}))
        );
        assert_eq!(r.tool_calls[1].name, "exec");
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(r.content, None);
    }

    #[test]
    fn events_round_trip_through_the_collector() {
        let resp = ChatResponse {
            content: Some("hi".into()),
            tool_calls: vec![ToolCall::new("c1", "t", json!({"x": "é"}))],
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
                ..Usage::default()
            }),
            reasoning_content: Some("hmm".into()),
            thinking_blocks: None,
        };
        let mut acc = ResponseAccumulator::default();
        for e in response_events(resp.clone()) {
            acc.push(e);
        }
        assert_eq!(acc.finish(), resp);
    }
}
