//! Model-aware request shaping over real HTTP: what each model family is sent, as the mock LLM received it.

use nanobot_providers::{ChatMessage, ChatRequest, Provider};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::Value;

use crate::common::openai;

/// Sends one non-streaming request for `model` (configured temperature 0.1, 512 output tokens and an
/// optional reasoning effort) through `provider` and returns the body the mock received.
async fn body_for(provider: &str, model: &str, effort: Option<&str>) -> Value {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("ok"));
    let client = openai(&mock, provider);
    let mut req = ChatRequest::new(model, vec![ChatMessage::user("hi")])
        .with_max_tokens(512)
        .with_temperature(0.1);
    req.reasoning_effort = effort.map(str::to_owned);
    let resp = client.chat(req).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some("ok"));
    mock.requests().remove(0).body
}

/// Only the fields that shaping decides, so one snapshot shows a whole table.
fn shaped(body: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for k in [
        "model",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "reasoning_effort",
        "thinking",
        "enable_thinking",
        "reasoning",
    ] {
        if let Some(v) = body.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    Value::Object(out)
}

#[tokio::test]
async fn reasoning_models_through_openai_compatible_providers() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("custom", "gpt-5", None),
        ("custom", "openai/gpt-5-mini", None),
        ("custom", "o1", None),
        ("custom", "o3-mini", Some("high")),
        ("custom", "openai/o3-mini", None),
        ("custom", "o4-mini", Some("none")),
        ("custom", "gpt-4o", None),
        ("custom", "gpt-4o", Some("low")),
        ("openrouter", "openai/o3", Some("medium")),
        ("openrouter", "openai/gpt-4.1", None),
        ("vllm", "o3-mini", None),
        ("deepseek", "deepseek-reasoner", Some("high")),
        ("dashscope", "qwen3.5-plus", Some("minimal")),
        ("moonshot", "kimi-k2.6", Some("high")),
        ("moonshot", "kimi-k3", Some("low")),
        ("mistral", "mistral-medium-3-5", Some("medium")),
        ("mistral", "magistral-medium", Some("high")),
    ];
    let mut table = Vec::new();
    for &(provider, model, effort) in cases {
        let body = body_for(provider, model, effort).await;
        // Whatever the shape, the conversation is intact.
        assert_eq!(body["messages"][0]["content"], "hi", "{provider} {model}");
        table.push(serde_json::json!({
            "provider": provider,
            "configured": {"model": model, "reasoning_effort": effort},
            "sent": shaped(&body),
        }));
    }
    insta::assert_json_snapshot!("shaping_table", table);
}

#[tokio::test]
async fn o3_mini_full_streamed_body() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("ok"));
    let client = openai(&mock, "custom");
    let mut req = ChatRequest::new(
        "openai/o3-mini",
        vec![ChatMessage::system("sys"), ChatMessage::user("hi")],
    )
    .with_max_tokens(2048)
    .with_temperature(0.7);
    req.reasoning_effort = Some("high".into());
    let events = nanobot_providers::collect(client.stream(req)).await.unwrap();
    assert_eq!(events.content.as_deref(), Some("ok"));
    let body = mock.requests().remove(0).body;
    assert!(body.get("max_tokens").is_none() && body.get("temperature").is_none());
    insta::assert_json_snapshot!("shaping_o3_mini_stream", body);
}
