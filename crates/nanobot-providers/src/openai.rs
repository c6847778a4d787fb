//! The OpenAI-compatible chat-completions client (OpenAI, OpenRouter, DeepSeek, Groq, Ollama, vLLM, …).

use async_trait::async_trait;
use futures::StreamExt;
use serde::ser::SerializeMap as _;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use std::sync::Arc;

use crate::ProviderError;
use crate::capabilities::{Capabilities, StreamWithTools, refuses_stream_with_tools};
use crate::endpoint::{Endpoint, JsonBody, event_stream, merge_extra};
use crate::registry::ProviderSpec;
use crate::registry::wire_model;
use crate::shaping::{Shaping, shape};
use crate::text_tools::TextToolCallFilter;
use crate::{
    ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, FinishReason, StreamEvent, ToolChoice,
    ToolSpec, Usage,
};
use crate::{EventStream, Provider, Timeouts, collect};

/// Placeholder for empty content, as the Python nanobot sends it.
pub const EMPTY_CONTENT: &str = "(empty)";

/// A chat-completions request body, serialised from the request by reference in the strict OpenAI shape (the keys
/// in the order a JSON value of it had).
struct WireBody<'a> {
    model: String,
    request: &'a ChatRequest,
    spec: &'static ProviderSpec,
    shaping: Shaping,
    stream: bool,
}

impl Serialize for WireBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.request;
        let caching = self.spec.supports_prompt_caching;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", &self.model)?;
        map.serialize_entry(
            "messages",
            &WireMessages {
                messages: &r.messages,
                spec: self.spec,
                caching,
            },
        )?;
        if let Some(n) = r.max_tokens {
            map.serialize_entry(self.shaping.token_field.key(), &n.max(1))?;
        }
        if let Some(t) = self.shaping.temperature {
            map.serialize_entry("temperature", &t)?;
        }
        if !r.tools.is_empty() {
            map.serialize_entry(
                "tools",
                &WireTools {
                    tools: &r.tools,
                    caching,
                },
            )?;
            match r.tool_choice.clone().unwrap_or_default() {
                ToolChoice::Auto => map.serialize_entry("tool_choice", "auto")?,
                ToolChoice::None => map.serialize_entry("tool_choice", "none")?,
                ToolChoice::Required => map.serialize_entry("tool_choice", "required")?,
                ToolChoice::Tool(name) => map.serialize_entry(
                    "tool_choice",
                    &json!({"type": "function", "function": {"name": name}}),
                )?,
            }
        }
        if let Some(effort) = &self.shaping.reasoning_effort {
            map.serialize_entry("reasoning_effort", effort)?;
        }
        for (k, v) in &self.shaping.extra {
            map.serialize_entry(k, v)?;
        }
        if self.stream {
            map.serialize_entry("stream", &true)?;
            map.serialize_entry("stream_options", &json!({"include_usage": true}))?;
        }
        map.end()
    }
}

struct WireMessages<'a> {
    messages: &'a [ChatMessage],
    spec: &'static ProviderSpec,
    caching: bool,
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.messages.iter().map(|message| WireMessage {
            message,
            spec: self.spec,
            caching: self.caching,
        }))
    }
}

/// One message in the strict OpenAI shape: only `role`, `content`, `tool_calls`, `tool_call_id`, `name` (and
/// `reasoning_content` where the provider needs it back); empty content handled like the Python nanobot.
struct WireMessage<'a> {
    message: &'a ChatMessage,
    spec: &'static ProviderSpec,
    caching: bool,
}

/// A message's content: its text, its parts (empty text parts dropped: strict providers reject them), or
/// [`EMPTY_CONTENT`]; with `cached`, a text becomes one text part marked for prompt caching.
struct WireContent<'a> {
    content: &'a Content,
    cached: bool,
}

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = match self.content {
            c if c.is_empty() => EMPTY_CONTENT,
            Content::Text(t) => t.as_str(),
            Content::Parts(parts) => {
                return serializer.collect_seq(
                    parts
                        .iter()
                        .filter(|p| !matches!(p, ContentPart::Text { text } if text.is_empty())),
                );
            }
        };
        if self.cached {
            serializer.collect_seq([CachedText(text)])
        } else {
            serializer.serialize_str(text)
        }
    }
}

/// `{"type": "text", "text": …, "cache_control": {"type": "ephemeral"}}`.
struct CachedText<'a>(&'a str);

impl Serialize for CachedText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type", "text")?;
        map.serialize_entry("text", self.0)?;
        map.serialize_entry("cache_control", &Ephemeral)?;
        map.end()
    }
}

/// `{"type": "ephemeral"}`.
struct Ephemeral;

impl Serialize for Ephemeral {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("type", "ephemeral")?;
        map.end()
    }
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let plain = |content| WireContent {
            content,
            cached: false,
        };
        match self.message {
            ChatMessage::System { content } => {
                map.serialize_entry("role", "system")?;
                // Prompt caching marks a system text (empty included: it is sent as a text), not parts.
                let cached = self.caching && (content.is_empty() || matches!(content, Content::Text(_)));
                map.serialize_entry("content", &WireContent { content, cached })?;
            }
            ChatMessage::User { content } => {
                map.serialize_entry("role", "user")?;
                map.serialize_entry("content", &plain(content))?;
            }
            ChatMessage::Tool {
                tool_call_id,
                name,
                content,
            } => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", tool_call_id)?;
                map.serialize_entry("content", &plain(content))?;
                if let Some(n) = name {
                    map.serialize_entry("name", n)?;
                }
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning_content,
                ..
            } => {
                map.serialize_entry("role", "assistant")?;
                let text = content.as_deref().unwrap_or_default();
                match (text.is_empty(), tool_calls.is_empty()) {
                    (false, _) => map.serialize_entry("content", text)?,
                    (true, false) if self.spec.empty_string_tool_content => {
                        map.serialize_entry("content", "")?;
                    }
                    (true, false) => map.serialize_entry("content", &())?,
                    (true, true) => map.serialize_entry("content", EMPTY_CONTENT)?,
                }
                if !tool_calls.is_empty() {
                    map.serialize_entry("tool_calls", tool_calls)?;
                }
                if self.spec.sends_reasoning_content
                    && let Some(r) = reasoning_content
                {
                    map.serialize_entry("reasoning_content", r)?;
                }
            }
        }
        map.end()
    }
}

/// The tools, each `{"type": "function", "function": {name, description, parameters}}` (the last marked for
/// prompt caching where the provider caches).
struct WireTools<'a> {
    tools: &'a [Arc<ToolSpec>],
    caching: bool,
}

/// One tool of [`WireTools`]; with `.1`, marked for prompt caching.
struct WireTool<'a>(&'a ToolSpec, bool);

/// A tool's `function` object.
struct WireFunction<'a>(&'a ToolSpec);

impl Serialize for WireFunction<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("name", &self.0.name)?;
        map.serialize_entry("description", &self.0.description)?;
        map.serialize_entry("parameters", &self.0.parameters)?;
        map.end()
    }
}

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "function")?;
        map.serialize_entry("function", &WireFunction(self.0))?;
        if self.1 {
            map.serialize_entry("cache_control", &Ephemeral)?;
        }
        map.end()
    }
}

impl Serialize for WireTools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let n = self.tools.len();
        serializer.collect_seq(
            self.tools
                .iter()
                .enumerate()
                .map(|(i, t)| WireTool(t, self.caching && i + 1 == n)),
        )
    }
}

/// An OpenAI-compatible provider. Clones share what was learnt about the server ([`Capabilities`]).
#[derive(Debug, Clone)]
pub struct OpenAiCompatClient {
    endpoint: Endpoint,
    caps: Arc<Capabilities>,
}

type Tx = mpsc::Sender<Result<StreamEvent, ProviderError>>;

impl OpenAiCompatClient {
    /// A client for this endpoint.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            caps: Arc::default(),
        }
    }

    /// Shares `caps` (what is known about the server) with other clients of the same endpoint.
    pub fn with_capabilities(mut self, caps: Arc<Capabilities>) -> Self {
        self.caps = caps;
        self
    }

    /// What was learnt about the server so far.
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.caps
    }

    /// One line for embedders: a client for the OpenAI-compatible server at `base_url`
    /// (`http://127.0.0.1:8080/v1`, `https://api.groq.com/openai/v1`) with an optional API key.
    ///
    /// Sets up TLS itself (installs rustls' `ring` provider as the process default, once; calling it again, or
    /// after [`crate::install_ring`], is fine), uses the registry's `custom` spec (no model-name rewriting) and
    /// the timeouts for the URL ([`Timeouts::for_base_url`]: long ones for a server on this machine or the LAN).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), nanobot_providers::ProviderError> {
    /// use nanobot_providers::{ChatMessage, ChatRequest, OpenAiCompatClient, Provider};
    /// let llm = OpenAiCompatClient::for_url("http://127.0.0.1:8080/v1", None::<String>)?;
    /// let answer = llm.chat(ChatRequest::new("qwen3", vec![ChatMessage::user("hi")])).await?;
    /// # Ok(()) }
    /// ```
    pub fn for_url(
        base_url: impl Into<String>,
        api_key: Option<impl Into<String>>,
    ) -> Result<Self, ProviderError> {
        crate::install_ring();
        let base_url = base_url.into();
        if let Err(e) = reqwest::Url::parse(&base_url) {
            // The text is not shown: a mistyped URL may carry a key in its query.
            return Err(ProviderError::Config(format!(
                "custom: the base URL is not a valid URL ({e}); expected e.g. http://127.0.0.1:8080/v1"
            )));
        }
        let spec = crate::registry::find_spec("custom")
            .ok_or_else(|| ProviderError::Config("the provider registry has no `custom` spec".into()))?;
        let timeouts = Timeouts::for_base_url(&base_url);
        let endpoint =
            Endpoint::new("custom", spec, base_url, api_key.map(Into::into))?.with_timeouts(timeouts);
        Ok(Self::new(endpoint))
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.endpoint.base_url)
    }

    fn auth(&self) -> Vec<(&'static str, String)> {
        self.endpoint
            .api_key
            .iter()
            .map(|k| ("authorization", format!("Bearer {k}")))
            .collect()
    }

    /// The JSON body sent for `request` (`stream` selects SSE), as a value (for tests and diagnostics; a
    /// request writes the wire body straight to bytes).
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut body = serde_json::to_value(self.wire_body(request, stream)).unwrap_or_default();
        merge_extra(&mut body, self.endpoint.extra_body.as_ref());
        body
    }

    /// The request's body as it is sent: written from the conversation by reference, without a JSON value in
    /// between, unless `extraBody` is configured (it is merged into a value then).
    fn json_body(&self, request: &ChatRequest, stream: bool) -> Result<JsonBody, ProviderError> {
        if self.endpoint.extra_body.as_ref().is_some_and(|e| !e.is_empty()) {
            return Ok(JsonBody::from_value(&self.request_body(request, stream)));
        }
        let wire = self.wire_body(request, stream);
        JsonBody::write(&wire, &wire.model, stream).map_err(|e| {
            ProviderError::Config(format!(
                "{}: the request cannot be written: {e}",
                self.endpoint.provider
            ))
        })
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest, stream: bool) -> WireBody<'a> {
        let spec = self.endpoint.spec;
        let model = wire_model(spec, &self.endpoint.provider, &request.model);
        let shaping = shape(
            spec,
            &model,
            request.temperature,
            request.reasoning_effort.as_deref(),
        );
        WireBody {
            model,
            request,
            spec,
            shaping,
            stream,
        }
    }

    async fn run_stream(self, request: ChatRequest, tx: Tx) {
        let mut out = Emitter::new(tx, &request);
        let with_tools = !request.tools.is_empty();
        if with_tools && self.caps.stream_with_tools(&request.model) == StreamWithTools::No {
            // Learnt earlier in this process: one plain request.
            self.finish_json(&request, out).await;
            return;
        }
        let result = async {
            let body = self.json_body(&request, true)?;
            let mut events = self.endpoint.post_sse(&self.url(), &self.auth(), &body).await?;
            let mut finished = false;
            while let Some(ev) = events.next().await {
                let ev = ev?;
                let data = ev.data.trim();
                if data.is_empty() {
                    continue;
                }
                if data == "[DONE]" {
                    finished = true;
                    break;
                }
                let chunk: Value = serde_json::from_str(data).map_err(|e| {
                    ProviderError::decode(
                        &self.endpoint.provider,
                        "stream chunk is not JSON",
                        Some(Box::new(e)),
                    )
                })?;
                if let Some(err) = chunk.get("error") {
                    return Err(stream_error(&self.endpoint.provider, err));
                }
                for e in chunk_events(&chunk) {
                    finished |= matches!(e, StreamEvent::Done(_));
                    if !out.send(e).await {
                        return Ok(true);
                    }
                }
            }
            if !finished && out.saw_content {
                return Err(ProviderError::transient(
                    &self.endpoint.provider,
                    "stream ended before the model finished",
                    None,
                ));
            }
            Ok(finished)
        }
        .await;
        let finished = matches!(result, Ok(true));
        match result {
            Err(e) if with_tools && !out.saw_content && refuses_stream_with_tools(&e) => {
                self.caps
                    .refuse_stream_with_tools(&self.endpoint.provider, &request.model, "refused");
                self.finish_json(&request, out).await;
                return;
            }
            Err(e) => {
                out.fail(e).await;
                return;
            }
            Ok(_) => {}
        }
        if !out.saw_content && finished && self.caps.gives_empty_answers(&request.model) {
            // The model finished with nothing to say, and it was seen doing so plainly too: an answer.
        } else if !out.saw_content {
            // llama.cpp and friends: `tool_choice: auto` + `stream: true` may give an empty 200 stream. Ask once
            // without streaming; when that answers, the server is remembered as one that does not stream with
            // tools. An answer that is empty both ways is the model's (empty) answer, not an outage.
            tracing::debug!(provider = %self.endpoint.provider, "empty stream; asking again without streaming");
            match self.chat_json(&request).await {
                Ok(events) => {
                    for e in events {
                        if !out.send(e).await {
                            return;
                        }
                    }
                    if with_tools && out.saw_content {
                        self.caps.refuse_stream_with_tools(
                            &self.endpoint.provider,
                            &request.model,
                            "empty stream",
                        );
                    } else if !out.saw_content {
                        self.caps.saw_empty_answer(&request.model);
                    }
                }
                Err(e) => {
                    out.fail(e).await;
                    return;
                }
            }
        } else if with_tools {
            self.caps.confirm_stream_with_tools(&request.model);
        }
        self.end(out, &request.model).await;
    }

    /// Ends `out` and records a model that writes tool calls as text.
    async fn end(&self, out: Emitter, model: &str) {
        if out.end().await {
            self.caps.saw_text_tool_calls(&self.endpoint.provider, model);
        }
    }

    /// Answers `request` with one plain (non-streaming) request through `out`.
    async fn finish_json(&self, request: &ChatRequest, mut out: Emitter) {
        match self.chat_json(request).await {
            Ok(events) => {
                for e in events {
                    if !out.send(e).await {
                        return;
                    }
                }
                self.end(out, &request.model).await;
            }
            Err(e) => out.fail(e).await,
        }
    }

    /// A non-streaming request, as events.
    async fn chat_json(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        let body = self.json_body(request, false)?;
        let resp = self.endpoint.post_json(&self.url(), &self.auth(), &body).await?;
        let v = self.endpoint.read_json(resp).await?;
        if let Some(err) = v.get("error") {
            return Err(stream_error(&self.endpoint.provider, err));
        }
        let events = response_json_events(&v);
        if !events.iter().any(|e| {
            matches!(e, StreamEvent::TextDelta(t) | StreamEvent::ReasoningDelta(t) if !t.is_empty())
                || matches!(e, StreamEvent::ToolCallDelta { .. })
        }) && v.pointer("/choices/0").is_none()
        {
            return Err(ProviderError::transient(
                &self.endpoint.provider,
                "empty response: no choices",
                None,
            ));
        }
        Ok(events)
    }
}

/// Passes events on, running the text tool-call filter and tracking what was seen.
struct Emitter {
    tx: Tx,
    filter: Option<TextToolCallFilter>,
    saw_content: bool,
    native_calls: usize,
    done: Option<FinishReason>,
}

impl Emitter {
    /// Text tool calls are read whenever tools are offered (on every OpenAI-compatible provider: local
    /// servers are often configured as `custom`).
    fn new(tx: Tx, request: &ChatRequest) -> Self {
        let tools: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        Self {
            tx,
            filter: (!tools.is_empty()).then(|| TextToolCallFilter::new(1000, tools)),
            saw_content: false,
            native_calls: 0,
            done: None,
        }
    }

    async fn send(&mut self, e: StreamEvent) -> bool {
        match e {
            StreamEvent::Done(r) => {
                self.done = Some(r);
                true
            }
            StreamEvent::TextDelta(t) if t.is_empty() => true,
            StreamEvent::TextDelta(t) => {
                self.saw_content = true;
                let events = match &mut self.filter {
                    Some(f) => f.push(&t),
                    None => vec![StreamEvent::TextDelta(t)],
                };
                self.forward(events).await
            }
            other => {
                if matches!(
                    &other,
                    StreamEvent::ToolCallDelta { .. } | StreamEvent::ReasoningDelta(_)
                ) {
                    self.saw_content = true;
                }
                if matches!(&other, StreamEvent::ToolCallDelta { .. }) {
                    self.native_calls += 1;
                }
                self.forward(vec![other]).await
            }
        }
    }

    async fn forward(&self, events: Vec<StreamEvent>) -> bool {
        for e in events {
            if self.tx.send(Ok(e)).await.is_err() {
                return false;
            }
        }
        true
    }

    async fn fail(&self, e: ProviderError) {
        let _ = self.tx.send(Err(e)).await;
    }

    /// Sends what the filter held back and the finish reason; true when tool calls were read from text.
    async fn end(mut self) -> bool {
        let mut found = false;
        if let Some(mut f) = self.filter.take() {
            let events = f.finish();
            found = f.found_calls();
            if !self.forward(events).await {
                return found;
            }
        }
        let reason = match self.done.take() {
            Some(FinishReason::Stop) | None if found => FinishReason::ToolCalls,
            Some(r) => r,
            None => FinishReason::Stop,
        };
        let _ = self.tx.send(Ok(StreamEvent::Done(reason))).await;
        found
    }
}

fn stream_error(provider: &str, err: &Value) -> ProviderError {
    let status = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(500);
    ProviderError::from_http(provider, status, None, &json!({"error": err}).to_string())
}

fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64);
    let prompt = n("/prompt_tokens").unwrap_or(0);
    let completion = n("/completion_tokens").unwrap_or(0);
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: n("/total_tokens").unwrap_or(prompt + completion),
        cache_read_tokens: n("/prompt_tokens_details/cached_tokens")
            .or_else(|| n("/prompt_cache_hit_tokens")),
        cache_write_tokens: None,
        reasoning_tokens: n("/completion_tokens_details/reasoning_tokens"),
    })
}

fn reasoning(v: &Value) -> Option<&str> {
    v.get("reasoning_content")
        .or_else(|| v.get("reasoning"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The events in one streamed chunk.
fn chunk_events(chunk: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if let Some(choice) = chunk.pointer("/choices/0") {
        if let Some(delta) = choice.get("delta") {
            if let Some(r) = reasoning(delta) {
                out.push(StreamEvent::ReasoningDelta(r.to_owned()));
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                out.push(StreamEvent::TextDelta(t.to_owned()));
            }
            for (pos, tc) in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let index = tc
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(pos, |i| i as usize);
                out.push(tool_call_delta(index, tc));
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(StreamEvent::Done(FinishReason::from_wire(r)));
        }
    }
    if let Some(u) = usage(chunk) {
        out.push(StreamEvent::Usage(u));
    }
    out
}

/// One OpenAI `tool_calls[]` entry (a stream delta or a whole call) as a [`StreamEvent::ToolCallDelta`];
/// non-string `arguments` are kept as their JSON text.
fn tool_call_delta(index: usize, tc: &Value) -> StreamEvent {
    let function = tc.get("function");
    StreamEvent::ToolCallDelta {
        index,
        id: tc.get("id").and_then(Value::as_str).map(str::to_owned),
        name: function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        arguments: match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        },
    }
}

/// The events of a non-streaming `chat.completion` body.
fn response_json_events(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if let Some(choice) = v.pointer("/choices/0") {
        let msg = choice.get("message").cloned().unwrap_or(Value::Null);
        if let Some(r) = reasoning(&msg) {
            out.push(StreamEvent::ReasoningDelta(r.to_owned()));
        }
        if let Some(t) = msg.get("content").and_then(Value::as_str) {
            out.push(StreamEvent::TextDelta(t.to_owned()));
        }
        for (index, tc) in msg
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            out.push(tool_call_delta(index, tc));
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(StreamEvent::Done(FinishReason::from_wire(r)));
        }
    }
    if let Some(u) = usage(v) {
        out.push(StreamEvent::Usage(u));
    }
    out
}

#[async_trait]
impl Provider for OpenAiCompatClient {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let this = self.clone();
        event_stream(move |tx| this.run_stream(request, tx))
    }

    /// A non-streaming request (plain JSON), collected by the shared collector.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        let this = self.clone();
        let stream = event_stream(move |tx| async move {
            let out = Emitter::new(tx, &request);
            this.finish_json(&request, out).await;
        });
        collect(stream).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_reads_cached_and_reasoning_tokens_when_reported() {
        let v = json!({"usage": {
            "prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
            "prompt_tokens_details": {"cached_tokens": 60},
            "completion_tokens_details": {"reasoning_tokens": 25}
        }});
        let u = usage(&v).unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.cache_read_tokens,
                u.reasoning_tokens
            ),
            (100, 40, Some(60), Some(25))
        );
        let plain = usage(&json!({"usage": {"prompt_tokens": 3, "completion_tokens": 1}})).unwrap();
        assert_eq!((plain.total_tokens, plain.reasoning_tokens), (4, None));
    }
}
