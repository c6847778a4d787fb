//! OpenAI chat-completions wire format (JSON and SSE chunks).

use serde_json::{Map, Value, json};

use crate::render::{CREATED, EventKind, RenderCtx, Rendered, RenderedBody, SseEvent, cut_after_deltas};
use crate::reply::{MockReply, ReplyKind};

/// Renders `reply` as an answer to `POST /v1/chat/completions`.
pub(crate) fn render(reply: &MockReply, ctx: &RenderCtx<'_>) -> Rendered {
    let headers = reply.headers.clone();
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
            body: RenderedBody::Sse(vec![SseEvent::done()]),
        },
        ReplyKind::EmptyStream => Rendered {
            status: 200,
            headers,
            body: RenderedBody::Json(json!({
                "id": format!("chatcmpl-mock-{}", ctx.seq),
                "object": "chat.completion",
                "created": CREATED,
                "model": ctx.model(reply),
                "choices": [],
            })),
        },
        // The server handles DropConnection before rendering; render it as a message if it ever gets here.
        ReplyKind::Message | ReplyKind::DropConnection => {
            let body = if ctx.stream() {
                RenderedBody::Sse(stream(reply, ctx))
            } else {
                RenderedBody::Json(json_message(reply, ctx))
            };
            Rendered {
                status: 200,
                headers,
                body,
            }
        }
    }
}

/// The OpenAI error JSON for `status`.
pub(crate) fn error_body(status: u16, message: Option<&str>, code: Option<&str>) -> Value {
    let (default_message, kind, default_code) = match status {
        400 => ("Invalid request (MockLlm).", "invalid_request_error", None),
        401 => (
            "Incorrect API key provided: sk-mock***. You can find your API key at https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        403 => (
            "You are not allowed to sample from this model (MockLlm).",
            "invalid_request_error",
            Some("permission_denied"),
        ),
        404 => (
            "The model `mock-model` does not exist or you do not have access to it.",
            "invalid_request_error",
            Some("model_not_found"),
        ),
        429 => (
            "Rate limit reached for mock-model on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
            "requests",
            Some("rate_limit_exceeded"),
        ),
        503 => (
            "The engine is currently overloaded, please try again later.",
            "server_error",
            None,
        ),
        _ => (
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        ),
    };
    let code = code.or(default_code);
    let kind = if code == Some("context_length_exceeded") {
        "invalid_request_error"
    } else {
        kind
    };
    json!({
        "error": {
            "message": message.unwrap_or(default_message),
            "type": kind,
            "param": if code == Some("context_length_exceeded") { json!("messages") } else { Value::Null },
            "code": code,
        }
    })
}

fn usage_json(reply: &MockReply, ctx: &RenderCtx<'_>) -> Value {
    let (prompt, completion) = ctx.usage(reply);
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    });
    if let Some((_, read)) = reply.cache {
        usage["prompt_tokens_details"] = json!({ "cached_tokens": read });
    }
    if let Some(n) = reply.reasoning_tokens {
        usage["completion_tokens_details"] = json!({ "reasoning_tokens": n });
    }
    usage
}

fn json_message(reply: &MockReply, ctx: &RenderCtx<'_>) -> Value {
    let ids = ctx.call_ids(reply);
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        reply.content.clone().map_or(Value::Null, Value::String),
    );
    message.insert("refusal".into(), Value::Null);
    if let Some(reasoning) = &reply.reasoning {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !reply.tool_calls.is_empty() {
        let calls: Vec<Value> = reply
            .tool_calls
            .iter()
            .zip(&ids)
            .map(|(call, id)| {
                json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": call.arguments },
                })
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": format!("chatcmpl-mock-{}", ctx.seq),
        "object": "chat.completion",
        "created": CREATED,
        "model": ctx.model(reply),
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "logprobs": null,
            "finish_reason": reply.openai_finish_reason(),
        }],
        "usage": usage_json(reply, ctx),
    })
}

fn stream(reply: &MockReply, ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let ids = ctx.call_ids(reply);
    let include_usage = ctx
        .request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let id = format!("chatcmpl-mock-{}", ctx.seq);
    let model = ctx.model(reply);
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": null,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let mut events = Vec::new();
    let role_content = if reply.content.is_some() {
        json!("")
    } else {
        Value::Null
    };
    events.push(SseEvent::data(
        &chunk(
            json!({ "role": "assistant", "content": role_content }),
            Value::Null,
        ),
        EventKind::Frame,
    ));
    if let Some(reasoning) = &reply.reasoning {
        for piece in reply.split(reasoning) {
            events.push(SseEvent::data(
                &chunk(json!({ "reasoning_content": piece }), Value::Null),
                EventKind::Delta,
            ));
        }
    }
    if let Some(content) = &reply.content {
        for piece in reply.split(content) {
            events.push(SseEvent::data(
                &chunk(json!({ "content": piece }), Value::Null),
                EventKind::Delta,
            ));
        }
    }
    for (index, (call, call_id)) in reply.tool_calls.iter().zip(&ids).enumerate() {
        // First chunk: id, type, name and empty arguments, as OpenAI sends it.
        events.push(SseEvent::data(
            &chunk(
                json!({ "tool_calls": [{
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": "" },
                }]}),
                Value::Null,
            ),
            EventKind::Delta,
        ));
        for piece in reply.split(&call.arguments) {
            let delta = if reply.repeat_ids {
                json!({
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": piece },
                })
            } else {
                json!({ "index": index, "function": { "arguments": piece } })
            };
            events.push(SseEvent::data(
                &chunk(json!({ "tool_calls": [delta] }), Value::Null),
                EventKind::Delta,
            ));
        }
    }
    events.push(SseEvent::data(
        &chunk(json!({}), json!(reply.openai_finish_reason())),
        EventKind::Terminal,
    ));
    if include_usage {
        events.push(SseEvent::data(
            &json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "system_fingerprint": null,
                "choices": [],
                "usage": usage_json(reply, ctx),
            }),
            EventKind::Terminal,
        ));
    }
    events.push(SseEvent::done());
    if let Some(n) = reply.error_after {
        let mut events = cut_after_deltas(events, n);
        events.push(SseEvent::data(
            &error_body(
                500,
                Some("The server had an error while processing your request (mid-stream)."),
                None,
            ),
            EventKind::Terminal,
        ));
        return events;
    }
    events
}

/// The `GET /v1/models` answer.
pub(crate) fn models() -> Value {
    json!({
        "object": "list",
        "data": [{ "id": "mock-model", "object": "model", "created": CREATED, "owned_by": "nanobot-testkit" }],
    })
}
