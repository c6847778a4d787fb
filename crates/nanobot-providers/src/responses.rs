//! The OpenAI Responses API as the OAuth providers speak it (0.3.5's `openai_responses`): the conversation as
//! `instructions` and `input` items, tools in the flat format, and the streamed events turned into
//! [`StreamEvent`]s.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::{
    ChatMessage, Content, ContentPart, FinishReason, ProviderError, StreamEvent, ToolChoice, ToolSpec, Usage,
};

/// The system prompt (`instructions`) and the other messages as `input` items. Item ids are never sent; a
/// tool-call id of 0.3.5's compound form `call_id|item_id` is sent as its `call_id`.
pub(crate) fn input(messages: &[ChatMessage]) -> (String, Vec<Value>) {
    let mut instructions = String::new();
    let mut items = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            ChatMessage::System { content } => instructions = content.text(),
            ChatMessage::User { content } => items.push(user_item(content)),
            ChatMessage::Assistant {
                content, tool_calls, ..
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                    items.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}], "status": "completed"}));
                }
                for call in tool_calls {
                    let id = call_id(&call.id);
                    items.push(json!({"type": "function_call",
                        "call_id": if id.is_empty() { format!("call_{i}") } else { id.to_owned() },
                        "name": call.name, "arguments": call.arguments_json()}));
                }
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } => items.push(
                json!({"type": "function_call_output", "call_id": call_id(tool_call_id),
                "output": tool_output(content)}),
            ),
        }
    }
    (instructions, items)
}

fn call_id(id: &str) -> &str {
    id.split_once('|').map_or(id, |(c, _)| c)
}

fn user_item(content: &Content) -> Value {
    let parts: Vec<Value> = match content {
        Content::Text(t) => vec![json!({"type": "input_text", "text": t})],
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text } => Some(json!({"type": "input_text", "text": text})),
                ContentPart::ImageUrl { url, .. } => {
                    Some(json!({"type": "input_image", "image_url": url, "detail": "auto"}))
                }
                ContentPart::Other(_) => None,
            })
            .collect(),
    };
    let parts = if parts.is_empty() {
        vec![json!({"type": "input_text", "text": ""})]
    } else {
        parts
    };
    json!({"role": "user", "content": parts})
}

fn tool_output(content: &Content) -> Value {
    match content {
        Content::Text(t) => Value::String(t.clone()),
        Content::Parts(parts) => {
            let converted: Option<Vec<Value>> = parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => Some(json!({"type": "input_text", "text": text})),
                    ContentPart::ImageUrl { url, detail } => Some(json!({"type": "input_image",
                        "image_url": url, "detail": detail.as_deref().unwrap_or("auto")})),
                    ContentPart::Other(_) => None,
                })
                .collect();
            match converted {
                Some(v) if !v.is_empty() => Value::Array(v),
                _ => Value::String(serde_json::to_string(content).unwrap_or_default()),
            }
        }
    }
}

/// Tools in the Responses API's flat format.
pub(crate) fn tools(tools: &[Arc<ToolSpec>]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            let params = if t.parameters.is_object() {
                t.parameters.clone()
            } else {
                json!({})
            };
            json!({"type": "function", "name": t.name, "description": t.description, "parameters": params})
        })
        .collect()
}

/// `tool_choice` in the Responses API's form.
pub(crate) fn tool_choice(choice: Option<&ToolChoice>) -> Value {
    match choice {
        None | Some(ToolChoice::Auto) => json!("auto"),
        Some(ToolChoice::None) => json!("none"),
        Some(ToolChoice::Required) => json!("required"),
        Some(ToolChoice::Tool(name)) => json!({"type": "function", "name": name}),
    }
}

/// One call being streamed: its position, and whether argument text was passed on already.
#[derive(Debug, Default)]
struct Call {
    index: usize,
    arguments: String,
}

/// Turns the events of one streamed response into [`StreamEvent`]s.
#[derive(Debug)]
pub(crate) struct Parser {
    provider: String,
    calls: HashMap<String, Call>,
    /// Item id → call id (argument deltas may name either).
    items: HashMap<String, String>,
    finished: bool,
}

impl Parser {
    /// A parser for `provider`'s stream (the name goes into errors).
    pub(crate) fn new(provider: &str) -> Self {
        Self {
            provider: provider.to_owned(),
            calls: HashMap::new(),
            items: HashMap::new(),
            finished: false,
        }
    }

    /// Whether a terminal event (`response.completed`/`incomplete`) was seen.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    fn call(&mut self, call_id: &str, item_id: Option<&str>) -> (usize, bool) {
        if let Some(item) = item_id.filter(|i| !i.is_empty()) {
            self.items.insert(item.to_owned(), call_id.to_owned());
        }
        let next = self.calls.len();
        let mut new = false;
        let c = self.calls.entry(call_id.to_owned()).or_insert_with(|| {
            new = true;
            Call {
                index: next,
                arguments: String::new(),
            }
        });
        (c.index, new)
    }

    fn call_for_delta(&self, event: &Value) -> Option<String> {
        let text = |k: &str| event.get(k).and_then(Value::as_str);
        if let Some(c) = text("call_id").filter(|c| self.calls.contains_key(*c)) {
            return Some(c.to_owned());
        }
        text("item_id").and_then(|i| self.items.get(i)).cloned()
    }

    /// The stream events of one SSE event's JSON `data`.
    pub(crate) fn event(&mut self, data: &Value) -> Result<Vec<StreamEvent>, ProviderError> {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        let text = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut out = Vec::new();
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let d = text("delta");
                if !d.is_empty() {
                    out.push(StreamEvent::TextDelta(d));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let d = text("delta");
                if !d.is_empty() {
                    out.push(StreamEvent::ReasoningDelta(d));
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                let item = data.get("item").cloned().unwrap_or_default();
                if item.get("type").and_then(Value::as_str) != Some("function_call") {
                    return Ok(out);
                }
                let Some(call_id) = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                else {
                    return Ok(out);
                };
                let (index, new) = self.call(call_id, item.get("id").and_then(Value::as_str));
                let name = item.get("name").and_then(Value::as_str).map(str::to_owned);
                if new {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        id: Some(call_id.to_owned()),
                        name,
                        arguments: String::new(),
                    });
                }
                let full = item.get("arguments").and_then(Value::as_str).unwrap_or_default();
                out.extend(self.complete_arguments(call_id, full));
            }
            "response.function_call_arguments.delta" => {
                if let Some(call_id) = self.call_for_delta(data) {
                    let d = text("delta");
                    if let Some(c) = self.calls.get_mut(&call_id)
                        && !d.is_empty()
                    {
                        c.arguments.push_str(&d);
                        out.push(StreamEvent::ToolCallDelta {
                            index: c.index,
                            id: None,
                            name: None,
                            arguments: d,
                        });
                    }
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(call_id) = self.call_for_delta(data) {
                    let full = text("arguments");
                    out.extend(self.complete_arguments(&call_id, &full));
                }
            }
            "response.completed" | "response.incomplete" => {
                self.finished = true;
                let resp = data.get("response").cloned().unwrap_or_default();
                if let Some(u) = usage(&resp) {
                    out.push(StreamEvent::Usage(u));
                }
                let status = resp
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or(kind.trim_start_matches("response."));
                let reason = resp
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push(StreamEvent::Done(match (status, reason) {
                    (_, "content_filter") => FinishReason::ContentFilter,
                    ("incomplete", _) => FinishReason::Length,
                    _ if !self.calls.is_empty() => FinishReason::ToolCalls,
                    _ => FinishReason::Stop,
                }));
            }
            "error" | "response.failed" => return Err(self.failure(data)),
            _ => {}
        }
        Ok(out)
    }

    /// The part of `full` not passed on yet for `call_id` (all of it when nothing was; nothing when the
    /// streamed text does not start it).
    fn complete_arguments(&mut self, call_id: &str, full: &str) -> Vec<StreamEvent> {
        let Some(c) = self.calls.get_mut(call_id) else {
            return Vec::new();
        };
        let Some(rest) = full.strip_prefix(c.arguments.as_str()).filter(|r| !r.is_empty()) else {
            return Vec::new();
        };
        let rest = rest.to_owned();
        c.arguments.push_str(&rest);
        vec![StreamEvent::ToolCallDelta {
            index: c.index,
            id: None,
            name: None,
            arguments: rest,
        }]
    }

    fn failure(&self, data: &Value) -> ProviderError {
        let err = data
            .pointer("/response/error")
            .or_else(|| data.get("error"))
            .cloned()
            .unwrap_or_else(|| data.clone());
        let code = err.get("code").and_then(Value::as_str).unwrap_or_default();
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| err.to_string(), str::to_owned);
        let message: String = format!("response failed: {message}").chars().take(500).collect();
        let provider = self.provider.clone();
        if code.contains("context_length") {
            return ProviderError::ContextLengthExceeded { provider, message };
        }
        if code.contains("rate_limit") {
            return ProviderError::RateLimited {
                provider,
                retry_after: None,
                message,
            };
        }
        if code.contains("insufficient_quota") || code.contains("usage_limit") {
            return ProviderError::QuotaExceeded { provider, message };
        }
        ProviderError::transient(&provider, message, None)
    }
}

fn usage(resp: &Value) -> Option<Usage> {
    let u = resp.get("usage")?.as_object()?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = n("input_tokens").unwrap_or(0);
    let output = n("output_tokens").unwrap_or(0);
    Some(Usage {
        prompt_tokens: input,
        completion_tokens: output,
        total_tokens: n("total_tokens").unwrap_or(input + output),
        cache_read_tokens: resp
            .pointer("/usage/input_tokens_details/cached_tokens")
            .and_then(Value::as_u64),
        cache_write_tokens: None,
        reasoning_tokens: resp
            .pointer("/usage/output_tokens_details/reasoning_tokens")
            .and_then(Value::as_u64),
    })
}

/// Parses a Responses API event stream into `tx`; a stream without a terminal event is a transient error.
pub(crate) async fn forward(
    mut events: impl futures::Stream<Item = Result<eventsource_stream::Event, ProviderError>> + Unpin,
    provider: &str,
    tx: tokio::sync::mpsc::Sender<Result<StreamEvent, ProviderError>>,
) {
    let mut parser = Parser::new(provider);
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let data = ev.data.trim();
        if data.is_empty() || data == "[DONE]" {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            let _ = tx
                .send(Err(ProviderError::decode(
                    provider,
                    "a stream event is not JSON",
                    None,
                )))
                .await;
            return;
        };
        match parser.event(&value) {
            Ok(out) => {
                for e in out {
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
        if parser.finished() {
            return;
        }
    }
    let _ = tx
        .send(Err(ProviderError::transient(
            provider,
            "the stream ended before the response was complete",
            None,
        )))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;

    #[test]
    fn usage_reads_cached_and_reasoning_tokens() {
        let resp = json!({"usage": {
            "input_tokens": 50, "output_tokens": 20, "total_tokens": 70,
            "input_tokens_details": {"cached_tokens": 10},
            "output_tokens_details": {"reasoning_tokens": 12}
        }});
        let u = usage(&resp).unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.cache_read_tokens,
                u.reasoning_tokens
            ),
            (50, 20, Some(10), Some(12))
        );
    }

    #[test]
    fn messages_become_instructions_and_items() {
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("read a.txt"),
            ChatMessage::assistant_tool_calls(
                Some("Reading.".into()),
                vec![ToolCall::new(
                    "call_1|fc_9",
                    "read_file",
                    json!({"path": "a.txt"}),
                )],
            ),
            ChatMessage::tool_result("call_1|fc_9", "read_file", "hello"),
        ];
        let (instructions, items) = input(&messages);
        assert_eq!(instructions, "be brief");
        assert_eq!(
            Value::Array(items),
            json!([
                {"role": "user", "content": [{"type": "input_text", "text": "read a.txt"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}],
                    "status": "completed"},
                {"type": "function_call", "call_id": "call_1", "name": "read_file",
                    "arguments": "{\"path\": \"a.txt\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "hello"},
            ])
        );
    }

    #[test]
    fn streamed_tool_calls_and_text_are_events() {
        let mut p = Parser::new("openai_codex");
        let mut all = Vec::new();
        for e in [
            json!({"type": "response.output_text.delta", "delta": "Hi"}),
            json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc_1",
                "call_id": "call_a", "name": "exec", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{\"cmd\":"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_1",
                "arguments": "{\"cmd\":\"ls\"}"}),
            json!({"type": "response.output_item.done", "item": {"type": "function_call", "id": "fc_1",
                "call_id": "call_a", "name": "exec", "arguments": "{\"cmd\":\"ls\"}"}}),
            json!({"type": "response.completed", "response": {"status": "completed",
                "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}}),
        ] {
            all.extend(p.event(&e).unwrap());
        }
        assert!(p.finished());
        let mut acc = crate::ResponseAccumulator::default();
        for e in all {
            acc.push(e);
        }
        let r = acc.finish();
        assert_eq!(r.content.as_deref(), Some("Hi"));
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "call_a");
        assert_eq!(r.tool_calls[0].arguments, json!({"cmd": "ls"}));
        assert_eq!(r.usage.map(|u| u.total_tokens), Some(7));
    }

    #[test]
    fn failures_are_classified() {
        let mut p = Parser::new("openai_codex");
        let err = p
            .event(
                &json!({"type": "response.failed", "response": {"error": {"code": "context_length_exceeded",
                "message": "too long"}}}),
            )
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::ContextLengthExceeded { .. }),
            "{err:?}"
        );
    }
}
