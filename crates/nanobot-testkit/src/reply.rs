//! Scripted replies: what the mock answers to one request, independent of the wire format.

use std::time::Duration;

use serde_json::Value;

/// One tool call the mock model makes.
///
/// `arguments` is sent as-is: [`ToolCallSpec::new`] serialises a JSON value, [`ToolCallSpec::raw`] keeps a
/// possibly malformed string verbatim. Without [`ToolCallSpec::with_id`], the mock numbers calls `call_1`,
/// `call_2`, … in the order it sends them (one counter per [`crate::MockLlm`], shared by both formats).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallSpec {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

impl ToolCallSpec {
    /// A call of `name` with `arguments` serialised as compact JSON.
    ///
    /// ```
    /// # use nanobot_testkit::ToolCallSpec;
    /// let call = ToolCallSpec::new("read_file", serde_json::json!({"path": "a.txt"}));
    /// assert_eq!(call.arguments(), r#"{"path":"a.txt"}"#);
    /// ```
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments: arguments.to_string(),
        }
    }

    /// A call whose `arguments` string is sent verbatim (use it for malformed or truncated JSON).
    pub fn raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// Uses a fixed call id instead of the automatic `call_N`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments string exactly as it goes on the wire.
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The fixed id, if one was set.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

/// What kind of answer a [`MockReply`] produces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReplyKind {
    /// A normal assistant message (text and/or tool calls).
    Message,
    /// An HTTP error with a provider-shaped JSON body.
    Error {
        status: u16,
        retry_after: Option<String>,
        message: Option<String>,
        code: Option<String>,
        body: Option<Value>,
    },
    /// Accept the request, then close the socket without any response.
    DropConnection,
    /// A 200 answer without content: an SSE stream with no chunks (OpenAI: only `data: [DONE]`).
    EmptyStream,
}

/// A scripted answer to one request. The same reply renders in the OpenAI or Anthropic format, whichever the
/// request asked for (by path).
///
/// Build it with a constructor ([`MockReply::text`], [`MockReply::tool_call`], [`MockReply::error`], …) and
/// refine it with the chainable modifiers.
///
/// ```
/// # use nanobot_testkit::MockReply;
/// # use std::time::Duration;
/// let reply = MockReply::text("<think>plan</think>Done.")
///     .with_reasoning("thinking…")
///     .with_usage(10, 5)
///     .finish_reason("length")
///     .delay(Duration::from_millis(10));
/// # let _ = reply;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MockReply {
    pub(crate) kind: ReplyKind,
    pub(crate) content: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) tool_calls: Vec<ToolCallSpec>,
    pub(crate) usage: Option<(u64, u64)>,
    pub(crate) cache: Option<(u64, u64)>,
    pub(crate) reasoning_tokens: Option<u64>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) stall_after: Option<usize>,
    pub(crate) drop_after: Option<usize>,
    pub(crate) error_after: Option<usize>,
    pub(crate) delay: Option<Duration>,
    pub(crate) repeat_ids: bool,
    pub(crate) chunk_chars: Option<usize>,
    pub(crate) model: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) stall_head: bool,
    pub(crate) keepalive: Option<(Duration, usize)>,
}

impl MockReply {
    fn message() -> Self {
        Self {
            kind: ReplyKind::Message,
            content: None,
            reasoning: None,
            tool_calls: Vec::new(),
            usage: None,
            cache: None,
            reasoning_tokens: None,
            finish_reason: None,
            stall_after: None,
            drop_after: None,
            error_after: None,
            delay: None,
            repeat_ids: false,
            chunk_chars: None,
            model: None,
            headers: Vec::new(),
            stall_head: false,
            keepalive: None,
        }
    }

    /// A plain assistant text. The content is sent verbatim (`<think>` tags included).
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            ..Self::message()
        }
    }

    /// One tool call with JSON arguments (id `call_N` unless [`MockReply::with_id`] is used).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls(vec![ToolCallSpec::new(name, arguments)])
    }

    /// Several tool calls in one assistant message.
    pub fn tool_calls(calls: Vec<ToolCallSpec>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::message()
        }
    }

    /// One tool call whose arguments string is sent as-is (e.g. malformed or truncated JSON).
    pub fn raw_arguments(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self::tool_calls(vec![ToolCallSpec::raw(name, arguments)])
    }

    /// An HTTP error `status` with a realistic error JSON body in the requested format
    /// (OpenAI `{"error":{"message","type","param","code"}}`, Anthropic `{"type":"error","error":{"type","message"}}`).
    pub fn error(status: u16) -> Self {
        Self {
            kind: ReplyKind::Error {
                status,
                retry_after: None,
                message: None,
                code: None,
                body: None,
            },
            ..Self::message()
        }
    }

    /// A 400 error shaped like the provider's "context length exceeded" answer
    /// (OpenAI code `context_length_exceeded`; Anthropic `invalid_request_error` "prompt is too long").
    pub fn context_length_exceeded() -> Self {
        Self::error(400)
            .error_code("context_length_exceeded")
            .error_message(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in \
                 130000 tokens. Please reduce the length of the messages.",
            )
    }

    /// Accepts the request and closes the socket without sending any response.
    pub fn drop_connection() -> Self {
        Self {
            kind: ReplyKind::DropConnection,
            ..Self::message()
        }
    }

    /// A 200 answer without content. Streaming: OpenAI sends only `data: [DONE]`, Anthropic sends no events
    /// (the llama.cpp quirk). Non-streaming: OpenAI `"choices": []`, Anthropic `"content": []`.
    pub fn empty_stream() -> Self {
        Self {
            kind: ReplyKind::EmptyStream,
            ..Self::message()
        }
    }

    /// Sets (or replaces) the text content; combine with tool calls for "text + tool call" answers.
    #[must_use]
    pub fn with_text(mut self, content: impl Into<String>) -> Self {
        self.content = Some(content.into());
        self
    }

    /// Adds one more tool call.
    #[must_use]
    pub fn with_tool_call(mut self, call: ToolCallSpec) -> Self {
        self.tool_calls.push(call);
        self
    }

    /// Sets the id of the last added tool call (instead of the automatic `call_N`).
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        if let Some(last) = self.tool_calls.last_mut() {
            last.id = Some(id.into());
        }
        self
    }

    /// Reasoning text: OpenAI `reasoning_content`, Anthropic a `thinking` block (with a mock signature).
    #[must_use]
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Token usage (prompt/input, completion/output). Without it the mock sends an estimate
    /// (request body bytes / 4, output chars / 4, at least 1).
    #[must_use]
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Output tokens spent on reasoning, reported as OpenAI's `completion_tokens_details.reasoning_tokens`
    /// (Anthropic does not report them apart).
    #[must_use]
    pub fn with_reasoning_tokens(mut self, n: u64) -> Self {
        self.reasoning_tokens = Some(n);
        self
    }

    /// Prompt-cache figures: Anthropic `cache_creation_input_tokens` / `cache_read_input_tokens` (its
    /// `input_tokens` is then the prompt's tokens less these two, as Anthropic reports it), OpenAI
    /// `prompt_tokens_details.cached_tokens` (= `read`).
    #[must_use]
    pub fn with_cache_usage(mut self, creation: u64, read: u64) -> Self {
        self.cache = Some((creation, read));
        self
    }

    /// The finish reason. Either vocabulary works and is translated for the other format:
    /// `stop`↔`end_turn`, `tool_calls`↔`tool_use`, `length`↔`max_tokens`; anything else is sent verbatim.
    /// Default: `tool_calls` when the reply has tool calls, else `stop`.
    #[must_use]
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Streaming: sends the preamble and the first `n` delta chunks (text, reasoning or argument pieces), then
    /// keeps the connection open without sending anything more. Non-streaming: sends the status line and
    /// headers, then never the body.
    #[must_use]
    pub fn stall_after_chunks(mut self, n: usize) -> Self {
        self.stall_after = Some(n);
        self
    }

    /// Sends the status line and headers, then nothing at all (no preamble, no comment) while keeping the
    /// connection open: a server that accepted the request and went silent.
    #[must_use]
    pub fn stall_after_headers(mut self) -> Self {
        self.stall_head = true;
        self.stall_after = Some(0);
        self
    }

    /// Streaming: before the first event, sends the SSE comment `: keep-alive` `count` times, one every
    /// `every` (tokio time: honours paused test clocks), as slow local servers do while they read the prompt.
    /// The answer follows as usual.
    #[must_use]
    pub fn keepalive_before_first(mut self, every: Duration, count: usize) -> Self {
        self.keepalive = Some((every, count));
        self
    }

    /// Streaming: sends the preamble and the first `n` delta chunks, then aborts the connection mid-body.
    /// Non-streaming: aborts right after the headers.
    #[must_use]
    pub fn drop_after_chunks(mut self, n: usize) -> Self {
        self.drop_after = Some(n);
        self
    }

    /// Streaming: sends the preamble and the first `n` delta chunks, then an in-stream error event and ends
    /// the body cleanly (no finish chunk, no `[DONE]`). OpenAI: `data: {"error":{…}}` (as OpenAI and
    /// OpenRouter do mid-stream); Anthropic: `event: error` with an `overloaded_error`. Ignored when the
    /// request is not streaming.
    #[must_use]
    pub fn error_event_after_chunks(mut self, n: usize) -> Self {
        self.error_after = Some(n);
        self
    }

    /// Waits this long before answering (tokio time: honours `start_paused` test clocks).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// OpenAI streaming: repeat `id`, `type` and `function.name` in every tool-call chunk, as llama.cpp does.
    #[must_use]
    pub fn repeat_ids_in_chunks(mut self) -> Self {
        self.repeat_ids = true;
        self
    }

    /// Streaming: split text and arguments into pieces of `n` characters (default: up to 4 roughly equal
    /// pieces, so even short strings arrive in several chunks).
    #[must_use]
    pub fn chunk_chars(mut self, n: usize) -> Self {
        self.chunk_chars = Some(n.max(1));
        self
    }

    /// The `model` field of the answer (default: the request's `model`, or `mock-model`).
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// An extra response header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Errors: adds a `Retry-After: <secs>` header (and Anthropic's `retry-after` is the same header).
    #[must_use]
    pub fn retry_after_secs(mut self, secs: u64) -> Self {
        if let ReplyKind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(secs.to_string());
        }
        self
    }

    /// Errors: a `Retry-After` header with any value (e.g. an HTTP date, or garbage to test parsing).
    #[must_use]
    pub fn retry_after_raw(mut self, value: impl Into<String>) -> Self {
        if let ReplyKind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(value.into());
        }
        self
    }

    /// Errors: replaces the default message in the error body.
    #[must_use]
    pub fn error_message(mut self, text: impl Into<String>) -> Self {
        if let ReplyKind::Error { message, .. } = &mut self.kind {
            *message = Some(text.into());
        }
        self
    }

    /// Errors: replaces the OpenAI `error.code` (Anthropic ignores it except `context_length_exceeded`).
    #[must_use]
    pub fn error_code(mut self, value: impl Into<String>) -> Self {
        if let ReplyKind::Error { code, .. } = &mut self.kind {
            *code = Some(value.into());
        }
        self
    }

    /// Errors: sends this exact JSON body instead of the generated one.
    #[must_use]
    pub fn error_body(mut self, value: Value) -> Self {
        if let ReplyKind::Error { body, .. } = &mut self.kind {
            *body = Some(value);
        }
        self
    }

    /// The text content, if any.
    pub fn content(&self) -> Option<&str> {
        self.content.as_deref()
    }

    /// The scripted tool calls.
    pub fn calls(&self) -> &[ToolCallSpec] {
        &self.tool_calls
    }

    /// OpenAI finish reason to send.
    pub(crate) fn openai_finish_reason(&self) -> String {
        match self.finish_reason.as_deref() {
            None if !self.tool_calls.is_empty() => "tool_calls".into(),
            None => "stop".into(),
            Some("end_turn") => "stop".into(),
            Some("tool_use") => "tool_calls".into(),
            Some("max_tokens") => "length".into(),
            Some(other) => other.into(),
        }
    }

    /// Anthropic stop reason to send.
    pub(crate) fn anthropic_stop_reason(&self) -> String {
        match self.finish_reason.as_deref() {
            None if !self.tool_calls.is_empty() => "tool_use".into(),
            None => "end_turn".into(),
            Some("stop") => "end_turn".into(),
            Some("tool_calls") => "tool_use".into(),
            Some("length") => "max_tokens".into(),
            Some(other) => other.into(),
        }
    }

    /// Splits `text` into streaming pieces on char boundaries.
    pub(crate) fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        split_chunks(text, self.chunk_chars)
    }
}

/// Splits on char boundaries: `chunk` chars each, or by default into up to 4 roughly equal pieces.
pub(crate) fn split_chunks(text: &str, chunk: Option<usize>) -> Vec<&str> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let size = chunk.unwrap_or_else(|| chars.div_ceil(4)).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (i, _) in text.char_indices() {
        if count == size {
            out.push(&text[start..i]);
            start = i;
            count = 0;
        }
        count += 1;
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_defaults_to_several_pieces() {
        assert_eq!(split_chunks("Hello!", None), vec!["He", "ll", "o!"]);
        assert_eq!(split_chunks("a", None), vec!["a"]);
        assert!(split_chunks("", None).is_empty());
        assert_eq!(split_chunks("héllo wörld", Some(4)), vec!["héll", "o wö", "rld"]);
    }

    #[test]
    fn finish_reasons_translate_both_ways() {
        let r = MockReply::text("x").finish_reason("length");
        assert_eq!(r.openai_finish_reason(), "length");
        assert_eq!(r.anthropic_stop_reason(), "max_tokens");
        let t = MockReply::tool_call("a", serde_json::json!({}));
        assert_eq!(t.openai_finish_reason(), "tool_calls");
        assert_eq!(t.anthropic_stop_reason(), "tool_use");
        let e = MockReply::text("x").finish_reason("end_turn");
        assert_eq!(e.openai_finish_reason(), "stop");
    }

    #[test]
    fn with_id_targets_last_call() {
        let r = MockReply::tool_call("a", serde_json::json!({}))
            .with_tool_call(ToolCallSpec::new("b", serde_json::json!({})))
            .with_id("x");
        assert_eq!(r.calls()[0].id(), None);
        assert_eq!(r.calls()[1].id(), Some("x"));
    }
}
