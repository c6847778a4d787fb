//! Anthropic Messages wire format (JSON and streaming events).

use serde_json::{Value, json};

use crate::render::{EventKind, RenderCtx, Rendered, RenderedBody, SseEvent, cut_after_deltas};
use crate::reply::{MockReply, ReplyKind};

/// The mock signature attached to thinking blocks.
pub(crate) const SIGNATURE: &str = "mock-signature";

/// Renders `reply` as an answer to `POST /v1/messages`.
pub(crate) fn render(reply: &MockReply, ctx: &RenderCtx<'_>) -> Rendered {
    let mut headers = reply.headers.clone();
    headers.push(("request-id".into(), format!("req_mock_{}", ctx.seq)));
    match &reply.kind {
        ReplyKind::Error {
            status,
            retry_after,
            message,
            code,
            body,
        } => Rendered::error(headers, *status, retry_after.as_deref(), body.as_ref(), || {
            error_body(*status, message.as_deref(), code.as_deref())
        }),
        ReplyKind::EmptyStream if ctx.stream() => Rendered {
            status: 200,
            headers,
            body: RenderedBody::Sse(Vec::new()),
        },
        ReplyKind::EmptyStream => Rendered {
            status: 200,
            headers,
            body: RenderedBody::Json(message_json(reply, ctx, Vec::new(), Value::Null)),
        },
        ReplyKind::Message | ReplyKind::DropConnection => {
            let body = if ctx.stream() {
                RenderedBody::Sse(stream(reply, ctx))
            } else {
                let ids = ctx.call_ids(reply);
                let content = blocks(reply, &ids);
                RenderedBody::Json(message_json(
                    reply,
                    ctx,
                    content,
                    json!(reply.anthropic_stop_reason()),
                ))
            };
            Rendered {
                status: 200,
                headers,
                body,
            }
        }
    }
}

/// The Anthropic error JSON for `status`.
pub(crate) fn error_body(status: u16, message: Option<&str>, code: Option<&str>) -> Value {
    let (kind, default_message) = match status {
        400 if code == Some("context_length_exceeded") => (
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
        ),
        400 => ("invalid_request_error", "Invalid request (MockLlm)."),
        401 => ("authentication_error", "invalid x-api-key"),
        403 => (
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        404 => ("not_found_error", "The requested resource could not be found."),
        413 => (
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        ),
        429 => (
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit.",
        ),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "Internal server error"),
    };
    // The OpenAI-flavoured default message of `context_length_exceeded()` is replaced by Anthropic's wording.
    let message = match (code, message) {
        (Some("context_length_exceeded"), Some(m)) if m.starts_with("This model's maximum") => {
            default_message
        }
        (_, Some(m)) => m,
        (_, None) => default_message,
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

fn usage_json(reply: &MockReply, ctx: &RenderCtx<'_>, output: u64) -> Value {
    let (input, _) = ctx.usage(reply);
    let (creation, read) = reply.cache.unwrap_or((0, 0));
    // Anthropic's `input_tokens` is the part of the prompt neither read from nor written to the cache.
    json!({
        "input_tokens": input.saturating_sub(creation + read),
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    })
}

fn tool_input(arguments: &str) -> Value {
    // Anthropic sends `input` as an object; malformed scripted arguments are kept as a string.
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

fn blocks(reply: &MockReply, ids: &[String]) -> Vec<Value> {
    let mut content = Vec::new();
    if let Some(reasoning) = &reply.reasoning {
        content.push(json!({ "type": "thinking", "thinking": reasoning, "signature": SIGNATURE }));
    }
    if let Some(text) = &reply.content {
        content.push(json!({ "type": "text", "text": text }));
    }
    for (call, id) in reply.tool_calls.iter().zip(ids) {
        content.push(json!({
            "type": "tool_use",
            "id": id,
            "name": call.name,
            "input": tool_input(&call.arguments),
        }));
    }
    content
}

fn message_json(reply: &MockReply, ctx: &RenderCtx<'_>, content: Vec<Value>, stop_reason: Value) -> Value {
    let (_, output) = ctx.usage(reply);
    json!({
        "id": format!("msg_mock_{}", ctx.seq),
        "type": "message",
        "role": "assistant",
        "model": ctx.model(reply),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage_json(reply, ctx, output),
    })
}

fn stream(reply: &MockReply, ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let ids = ctx.call_ids(reply);
    let (_, output) = ctx.usage(reply);
    let mut events = vec![SseEvent::named(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_mock_{}", ctx.seq),
                "type": "message",
                "role": "assistant",
                "model": ctx.model(reply),
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": usage_json(reply, ctx, 1),
            },
        }),
        EventKind::Frame,
    )];
    let mut index = 0usize;
    let start = |index: usize, block: Value| {
        SseEvent::named(
            "content_block_start",
            &json!({ "type": "content_block_start", "index": index, "content_block": block }),
            EventKind::Frame,
        )
    };
    let delta = |index: usize, delta: Value| {
        SseEvent::named(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            EventKind::Delta,
        )
    };
    let stop = |index: usize| {
        SseEvent::named(
            "content_block_stop",
            &json!({ "type": "content_block_stop", "index": index }),
            EventKind::Frame,
        )
    };
    if let Some(reasoning) = &reply.reasoning {
        events.push(start(index, json!({ "type": "thinking", "thinking": "" })));
        for piece in reply.split(reasoning) {
            events.push(delta(
                index,
                json!({ "type": "thinking_delta", "thinking": piece }),
            ));
        }
        events.push(SseEvent::named(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "signature_delta", "signature": SIGNATURE } }),
            EventKind::Frame,
        ));
        events.push(stop(index));
        index += 1;
    }
    if let Some(text) = &reply.content {
        events.push(start(index, json!({ "type": "text", "text": "" })));
        for piece in reply.split(text) {
            events.push(delta(index, json!({ "type": "text_delta", "text": piece })));
        }
        events.push(stop(index));
        index += 1;
    }
    for (call, id) in reply.tool_calls.iter().zip(&ids) {
        events.push(start(
            index,
            json!({ "type": "tool_use", "id": id, "name": call.name, "input": {} }),
        ));
        // Anthropic opens every tool_use block with an empty partial_json.
        events.push(SseEvent::named(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "input_json_delta", "partial_json": "" } }),
            EventKind::Frame,
        ));
        for piece in reply.split(&call.arguments) {
            events.push(delta(
                index,
                json!({ "type": "input_json_delta", "partial_json": piece }),
            ));
        }
        events.push(stop(index));
        index += 1;
    }
    // Anthropic sends one `ping` right after the first content_block_start.
    if let Some(first) = events
        .iter()
        .position(|e| e.event.as_deref() == Some("content_block_start"))
    {
        events.insert(
            first + 1,
            SseEvent::named("ping", &json!({ "type": "ping" }), EventKind::Frame),
        );
    }
    events.push(SseEvent::named(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": { "stop_reason": reply.anthropic_stop_reason(), "stop_sequence": null },
            "usage": { "output_tokens": output },
        }),
        EventKind::Terminal,
    ));
    events.push(SseEvent::named(
        "message_stop",
        &json!({ "type": "message_stop" }),
        EventKind::Terminal,
    ));
    if let Some(n) = reply.error_after {
        let mut events = cut_after_deltas(events, n);
        events.push(SseEvent::named(
            "error",
            &error_body(529, None, None),
            EventKind::Terminal,
        ));
        return events;
    }
    events
}
