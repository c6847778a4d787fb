//! Anthropic Messages format: JSON and streaming events.

use nanobot_testkit::{MockLlm, MockReply, ToolCallSpec};
use serde_json::{Value, json};

use crate::support::{anthropic_body, client, parse_sse};

async fn post(mock: &MockLlm, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn json_blocks_stop_reason_and_usage() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("Reading it.")
            .with_reasoning("plan")
            .with_tool_call(ToolCallSpec::new("read_file", json!({"path": "a.txt"})))
            .with_usage(20, 8)
            .with_cache_usage(3, 4),
    );
    let resp = post(&mock, &anthropic_body("read a.txt", false)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("request-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-test");
    assert_eq!(
        v["content"],
        json!([
            {"type": "thinking", "thinking": "plan", "signature": "mock-signature"},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.txt"}},
        ])
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 13, "output_tokens": 8,
               "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4})
    );
}

#[tokio::test]
async fn json_stop_reasons_translate() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("a"));
    mock.push(MockReply::text("b").finish_reason("length"));
    let v: Value = post(&mock, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "end_turn");
    let v: Value = post(&mock, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "max_tokens");
}

#[tokio::test]
async fn stream_event_sequence() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("Hello there")
            .with_reasoning("hmm, ok")
            .with_tool_call(ToolCallSpec::new("exec", json!({"command": "echo hi"})).with_id("toolu_9"))
            .with_usage(11, 6),
    );
    let resp = post(&mock, &anthropic_body("hi", true)).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());
    // Every event's name matches its data's type.
    for e in &events {
        assert_eq!(e.event.as_deref(), e.json()["type"].as_str(), "{e:?}");
    }
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[names.len() - 2..], &["message_delta", "message_stop"]);
    let start = events[0].json();
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["usage"]["input_tokens"], 11);

    let starts: Vec<Value> = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_start"))
        .map(|e| e.json())
        .collect();
    assert_eq!(starts.len(), 3);
    assert_eq!(starts[0]["content_block"]["type"], "thinking");
    assert_eq!(starts[1]["content_block"], json!({"type": "text", "text": ""}));
    assert_eq!(
        starts[2]["content_block"],
        json!({"type": "tool_use", "id": "toolu_9", "name": "exec", "input": {}})
    );
    let deltas = |index: u64, kind: &str, field: &str| -> Vec<String> {
        events
            .iter()
            .map(|e| e.json())
            .filter(|d| {
                d["type"] == "content_block_delta" && d["index"] == index && d["delta"]["type"] == kind
            })
            .map(|d| d["delta"][field].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(deltas(0, "thinking_delta", "thinking").concat(), "hmm, ok");
    assert_eq!(
        deltas(0, "signature_delta", "signature"),
        vec!["mock-signature".to_owned()]
    );
    let text = deltas(1, "text_delta", "text");
    assert!(text.len() >= 2);
    assert_eq!(text.concat(), "Hello there");
    let args = deltas(2, "input_json_delta", "partial_json");
    assert!(
        args.iter().filter(|a| !a.is_empty()).count() >= 2,
        "arguments split: {args:?}"
    );
    assert_eq!(args.concat(), r#"{"command":"echo hi"}"#);
    let stops = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_stop"))
        .count();
    assert_eq!(stops, 3);
    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 6);
}

#[tokio::test]
async fn stream_raw_arguments_verbatim() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::raw_arguments("read_file", "{\"path\": \"a.txt\""));
    let events = parse_sse(
        &post(&mock, &anthropic_body("x", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let args: String = events
        .iter()
        .map(|e| e.json())
        .filter(|d| d["delta"]["type"] == "input_json_delta")
        .map(|d| d["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args, "{\"path\": \"a.txt\"");
}

#[tokio::test]
async fn errors_use_the_anthropic_shape() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(429).retry_after_secs(7));
    mock.push(MockReply::error(529));
    mock.push(MockReply::context_length_exceeded());
    let resp = post(&mock, &anthropic_body("x", false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("rate limit"));
    let v: Value = post(&mock, &anthropic_body("x", true))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    let resp = post(&mock, &anthropic_body("x", false)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long")
    );
}

#[tokio::test]
async fn same_reply_renders_in_either_format() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("same"));
    let v: Value = post(&mock, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "same");
    let v: Value = client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&crate::support::chat_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "same");
}
