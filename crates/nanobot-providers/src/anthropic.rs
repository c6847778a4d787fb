//! The Anthropic Messages API client: system prompt, `tool_use` / `tool_result` blocks, streaming events,
//! prompt caching and thinking blocks.

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::ProviderError;
use crate::endpoint::{Endpoint, event_stream, merge_extra};
use crate::registry::wire_model;
use crate::{
    ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, FinishReason, StreamEvent, ToolChoice,
    Usage,
};
use crate::{EventStream, Provider, collect};

/// The `anthropic-version` header sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API; this is used when the request has none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

type Tx = mpsc::Sender<Result<StreamEvent, ProviderError>>;

/// An Anthropic Messages API provider.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    endpoint: Endpoint,
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "low" | "minimal" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16000),
        _ => None,
    }
}

impl AnthropicClient {
    /// A client for this endpoint (base URL `https://api.anthropic.com`, `/v1/messages` is appended).
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }

    fn url(&self) -> String {
        let base = &self.endpoint.base_url;
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    fn auth(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
        if let Some(k) = &self.endpoint.api_key {
            h.push(("x-api-key", k.clone()));
        }
        h
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        let spec = self.endpoint.spec;
        let caching = spec.supports_prompt_caching;
        let mut body = Map::new();
        body.insert(
            "model".into(),
            json!(wire_model(spec, &self.endpoint.provider, &request.model)),
        );
        let max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).max(1);
        body.insert("max_tokens".into(), json!(max_tokens));

        let system: Vec<String> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::System { content } => Some(content.text()),
                _ => None,
            })
            .filter(|t| !t.is_empty())
            .collect();
        if !system.is_empty() {
            let mut block = json!({"type": "text", "text": system.join("\n\n")});
            if caching {
                block["cache_control"] = ephemeral();
            }
            body.insert("system".into(), json!([block]));
        }

        let mut messages = convert_messages(&request.messages);
        if caching
            && let Some(last) = messages
                .last_mut()
                .and_then(|m| m["content"].as_array_mut())
                .and_then(|c| c.last_mut())
        {
            last["cache_control"] = ephemeral();
        }
        body.insert("messages".into(), Value::Array(messages));

        if !request.tools.is_empty() {
            let n = request.tools.len();
            let tools: Vec<Value> = request
                .tools
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut v =
                        json!({"name": t.name, "description": t.description, "input_schema": t.parameters});
                    if caching && i + 1 == n {
                        v["cache_control"] = ephemeral();
                    }
                    v
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            let choice = match request.tool_choice.clone().unwrap_or_default() {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            };
            body.insert("tool_choice".into(), choice);
        }
        let budget = request
            .reasoning_effort
            .as_deref()
            .and_then(thinking_budget)
            .filter(|b| *b < max_tokens);
        if let Some(b) = budget {
            // Thinking requires temperature 1 (or unset).
            body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": b}));
        } else if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        let mut body = Value::Object(body);
        merge_extra(&mut body, self.endpoint.extra_body.as_ref());
        body
    }

    async fn run(self, request: ChatRequest, stream: bool, tx: Tx) {
        let body = self.request_body(&request, stream);
        let result = if stream {
            self.stream_events(&body, &tx).await
        } else {
            self.json_events(&body, &tx).await
        };
        if let Err(e) = result {
            let _ = tx.send(Err(e)).await;
        }
    }

    async fn json_events(&self, body: &Value, tx: &Tx) -> Result<(), ProviderError> {
        let resp = self
            .endpoint
            .post_json(
                &self.url(),
                &self.auth(),
                &crate::endpoint::JsonBody::from_value(body),
            )
            .await?;
        let v = self.endpoint.read_json(resp).await?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            return Err(event_error(&self.endpoint.provider, &v));
        }
        let mut events = Vec::new();
        for (index, block) in v
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    events.push(StreamEvent::TextDelta(
                        block["text"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
                Some("tool_use") => events.push(StreamEvent::ToolCallDelta {
                    index,
                    id: block["id"].as_str().map(str::to_owned),
                    name: block["name"].as_str().map(str::to_owned),
                    arguments: block
                        .get("input")
                        .map_or_else(|| "{}".to_owned(), Value::to_string),
                }),
                Some("thinking") => {
                    events.push(StreamEvent::ReasoningDelta(
                        block["thinking"].as_str().unwrap_or_default().to_owned(),
                    ));
                    events.push(StreamEvent::ThinkingBlock(block.clone()));
                }
                Some("redacted_thinking") => events.push(StreamEvent::ThinkingBlock(block.clone())),
                _ => {}
            }
        }
        if let Some(u) = v.get("usage") {
            events.push(StreamEvent::Usage(usage_from(u, None)));
        }
        let reason = v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map_or(FinishReason::Stop, FinishReason::from_wire);
        events.push(StreamEvent::Done(reason));
        for e in events {
            if tx.send(Ok(e)).await.is_err() {
                return Ok(());
            }
        }
        Ok(())
    }

    async fn stream_events(&self, body: &Value, tx: &Tx) -> Result<(), ProviderError> {
        let provider = &self.endpoint.provider;
        let mut events = self
            .endpoint
            .post_sse(
                &self.url(),
                &self.auth(),
                &crate::endpoint::JsonBody::from_value(body),
            )
            .await?;
        let mut thinking: Option<(usize, String, String)> = None;
        let mut input_usage = Usage::default();
        let mut finish: Option<FinishReason> = None;
        let mut saw_anything = false;
        let mut stopped = false;
        while let Some(ev) = events.next().await {
            let ev = ev?;
            if ev.data.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&ev.data).map_err(|e| {
                ProviderError::decode(provider, "stream event is not JSON", Some(Box::new(e)))
            })?;
            let kind = v
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(ev.event.as_str())
                .to_owned();
            let index = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            let mut out = Vec::new();
            match kind.as_str() {
                "message_start" => {
                    if let Some(u) = v.pointer("/message/usage") {
                        input_usage = usage_from(u, None);
                    }
                }
                "content_block_start" => {
                    let block = &v["content_block"];
                    match block.get("type").and_then(Value::as_str) {
                        Some("tool_use") => out.push(StreamEvent::ToolCallDelta {
                            index,
                            id: block["id"].as_str().map(str::to_owned),
                            name: block["name"].as_str().map(str::to_owned),
                            arguments: String::new(),
                        }),
                        Some("thinking") => thinking = Some((index, String::new(), String::new())),
                        Some("redacted_thinking") => out.push(StreamEvent::ThinkingBlock(block.clone())),
                        Some("text") => {
                            if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                                out.push(StreamEvent::TextDelta(t.to_owned()));
                            }
                        }
                        _ => {}
                    }
                }
                "content_block_delta" => {
                    let d = &v["delta"];
                    match d.get("type").and_then(Value::as_str) {
                        Some("text_delta") => out.push(StreamEvent::TextDelta(
                            d["text"].as_str().unwrap_or_default().to_owned(),
                        )),
                        Some("input_json_delta") => out.push(StreamEvent::ToolCallDelta {
                            index,
                            id: None,
                            name: None,
                            arguments: d["partial_json"].as_str().unwrap_or_default().to_owned(),
                        }),
                        Some("thinking_delta") => {
                            let t = d["thinking"].as_str().unwrap_or_default().to_owned();
                            if let Some((_, text, _)) = &mut thinking {
                                text.push_str(&t);
                            }
                            out.push(StreamEvent::ReasoningDelta(t));
                        }
                        Some("signature_delta") => {
                            if let Some((_, _, sig)) = &mut thinking {
                                sig.push_str(d["signature"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                "content_block_stop" => {
                    if let Some((i, text, sig)) = thinking.take() {
                        if i == index {
                            out.push(StreamEvent::ThinkingBlock(
                                json!({"type": "thinking", "thinking": text, "signature": sig}),
                            ));
                        } else {
                            thinking = Some((i, text, sig));
                        }
                    }
                }
                "message_delta" => {
                    if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                        finish = Some(FinishReason::from_wire(r));
                    }
                    if let Some(u) = v.get("usage") {
                        out.push(StreamEvent::Usage(usage_from(u, Some(input_usage))));
                    }
                }
                "message_stop" => {
                    stopped = true;
                    break;
                }
                "error" => return Err(event_error(provider, &v)),
                _ => {}
            }
            for e in out {
                saw_anything |= !matches!(e, StreamEvent::Usage(_));
                if tx.send(Ok(e)).await.is_err() {
                    return Ok(());
                }
            }
        }
        if !saw_anything && finish.is_none() {
            return Err(ProviderError::transient(
                provider,
                "empty stream: no content and no stop reason",
                None,
            ));
        }
        if !stopped && finish.is_none() {
            return Err(ProviderError::transient(
                provider,
                "stream ended before the model finished",
                None,
            ));
        }
        let _ = tx.send(Ok(StreamEvent::Done(finish.unwrap_or_default()))).await;
        Ok(())
    }
}

fn event_error(provider: &str, v: &Value) -> ProviderError {
    let kind = v
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = match kind {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "authentication_error" => 401,
        "permission_error" => 403,
        "invalid_request_error" => 400,
        "request_too_large" => 413,
        _ => 500,
    };
    ProviderError::from_http(provider, status, None, &v.to_string())
}

fn usage_from(u: &Value, input: Option<Usage>) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let base = input.unwrap_or_default();
    let cache_read = n("cache_read_input_tokens").or(base.cache_read_tokens);
    let cache_write = n("cache_creation_input_tokens").or(base.cache_write_tokens);
    // Anthropic's `input_tokens` leaves out what was read from or written to the prompt cache; the prompt is
    // all three (as 0.3.5 counts it), so cached tokens are a part of it as with every other provider.
    let prompt = n("input_tokens").map_or(base.prompt_tokens, |uncached| {
        uncached + cache_read.unwrap_or(0) + cache_write.unwrap_or(0)
    });
    let completion = n("output_tokens").unwrap_or(0);
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        // Anthropic counts thinking within `output_tokens` and does not report it apart.
        reasoning_tokens: None,
    }
}

fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
    {
        let media_type = meta.trim_end_matches(";base64");
        return json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}});
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

fn blocks(content: &Content) -> Vec<Value> {
    match content {
        Content::Text(t) if t.is_empty() => vec![json!({"type": "text", "text": "(empty)"})],
        Content::Text(t) => vec![json!({"type": "text", "text": t})],
        Content::Parts(parts) => {
            let v: Vec<Value> = parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } if text.is_empty() => None,
                    ContentPart::Text { text } => Some(json!({"type": "text", "text": text})),
                    ContentPart::ImageUrl { url, .. } => Some(image_block(url)),
                    ContentPart::Other(o) => Some(o.clone()),
                })
                .collect();
            if v.is_empty() {
                vec![json!({"type": "text", "text": "(empty)"})]
            } else {
                v
            }
        }
    }
}

/// OpenAI-shaped messages → Anthropic messages: system messages leave (they go to `system`), tool results
/// become `tool_result` blocks in a user turn, consecutive turns of one role merge.
fn convert_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut push = |role: &str, mut content: Vec<Value>| {
        if let Some(last) = out.last_mut()
            && last["role"] == role
            && let Some(arr) = last["content"].as_array_mut()
        {
            arr.append(&mut content);
            return;
        }
        out.push(json!({"role": role, "content": content}));
    };
    for m in messages {
        match m {
            ChatMessage::System { .. } => {}
            ChatMessage::User { content } => push("user", blocks(content)),
            ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let inner = match content {
                    Content::Text(t) => json!(if t.is_empty() { "(empty)" } else { t.as_str() }),
                    Content::Parts(_) => json!(blocks(content)),
                };
                push(
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": inner})],
                );
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                thinking_blocks,
                ..
            } => {
                let mut v: Vec<Value> = thinking_blocks.clone().unwrap_or_default();
                if let Some(t) = content.as_deref().filter(|t| !t.trim().is_empty()) {
                    v.push(json!({"type": "text", "text": t}));
                }
                for c in tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    v.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                }
                if v.is_empty() {
                    v.push(json!({"type": "text", "text": "(empty)"}));
                }
                push("assistant", v);
            }
        }
    }
    out
}

#[async_trait]
impl Provider for AnthropicClient {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let this = self.clone();
        event_stream(move |tx| this.run(request, true, tx))
    }

    /// A non-streaming request, collected by the shared collector.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        let this = self.clone();
        collect(event_stream(move |tx| this.run(request, false, tx))).await
    }
}
