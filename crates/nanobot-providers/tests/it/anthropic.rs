//! The Anthropic Messages client over real HTTP.

use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, ContentPart, FinishReason, Provider, ProviderError, StreamEvent, ToolCall,
};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

use crate::common::{anthropic, read_file_tool};

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are nanobot."),
        ChatMessage::user_parts(vec![
            ContentPart::text("what is in this picture and in a.txt?"),
            ContentPart::image_url("data:image/png;base64,iVBORw0KGgo="),
        ]),
        ChatMessage::assistant_tool_calls(
            Some("Reading.".into()),
            vec![ToolCall::new("toolu_1", "read_file", json!({"path": "a.txt"}))],
        ),
        ChatMessage::tool_result("toolu_1", "read_file", "hello"),
        ChatMessage::user("and?"),
    ]
}

#[tokio::test]
async fn streamed_tool_use_with_thinking() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("read_file", json!({"path": "b.txt"}))
            .with_text("Let me look.")
            .with_reasoning("I should read b.txt")
            .with_usage(100, 20)
            .with_cache_usage(10, 60)
            .chunk_chars(3),
    );
    let client = anthropic(&mock);
    let req = ChatRequest::new("anthropic/claude-opus-4-5", conversation())
        .with_tools(vec![read_file_tool()])
        .with_max_tokens(2048)
        .with_temperature(0.2);
    let mut s = client.stream(req);
    let mut acc = nanobot_providers::ResponseAccumulator::default();
    let mut text_deltas = 0;
    while let Some(e) = s.next().await {
        let e = e.unwrap();
        if matches!(e, StreamEvent::TextDelta(_)) {
            text_deltas += 1;
        }
        acc.push(e);
    }
    let resp = acc.finish();
    assert!(text_deltas > 1);
    assert_eq!(resp.content.as_deref(), Some("Let me look."));
    assert_eq!(resp.reasoning_content.as_deref(), Some("I should read b.txt"));
    assert_eq!(resp.finish_reason, FinishReason::ToolCalls);
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].arguments, json!({"path": "b.txt"}));
    let blocks = resp.thinking_blocks.clone().unwrap();
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(blocks[0]["thinking"], "I should read b.txt");
    assert!(blocks[0]["signature"].as_str().is_some_and(|s| !s.is_empty()));
    let usage = resp.usage.unwrap();
    // The prompt counts what the cache served and stored (Anthropic's input_tokens leaves both out).
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        (100, 20, 120)
    );
    assert_eq!(
        (usage.cache_read_tokens, usage.cache_write_tokens),
        (Some(60), Some(10))
    );

    let r = mock.requests().remove(0);
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    insta::assert_json_snapshot!("anthropic_stream_with_tools", r.body);
}

#[tokio::test]
async fn non_streaming_without_tools_and_thinking_blocks_go_back() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("Fine.")
            .with_reasoning("hm")
            .with_usage(50, 5)
            .with_cache_usage(0, 45),
    );
    let client = anthropic(&mock);
    let first = client
        .chat(ChatRequest::new("claude-sonnet-4-5", conversation()))
        .await
        .unwrap();
    assert_eq!(first.content.as_deref(), Some("Fine."));
    assert_eq!(first.reasoning_content.as_deref(), Some("hm"));
    let usage = first.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.cache_read_tokens), (50, Some(45)));
    let r = mock.requests().remove(0);
    assert!(!r.is_stream());
    insta::assert_json_snapshot!("anthropic_json_no_tools", r.body);

    // The thinking block (with its signature) is sent back verbatim in the next request.
    mock.push(MockReply::text("ok"));
    let mut msgs = conversation();
    msgs.push(first.to_message());
    msgs.push(ChatMessage::user("more"));
    client
        .chat(ChatRequest::new("claude-sonnet-4-5", msgs))
        .await
        .unwrap();
    let body = mock.requests().remove(1).body;
    let assistant = &body["messages"][3];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], first.thinking_blocks.unwrap()[0]);
}

#[tokio::test]
async fn rate_limit_and_overload_are_classified() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(429).retry_after_secs(7));
    mock.push(MockReply::error(529));
    let client = anthropic(&mock);
    let req = || ChatRequest::new("claude-x", vec![ChatMessage::user("x")]);
    let e = client.chat(req()).await.unwrap_err();
    assert!(matches!(e, ProviderError::RateLimited { .. }), "{e:?}");
    assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(7)));
    let e = nanobot_providers::collect(client.stream(req()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProviderError::Transient {
                status: Some(529),
                ..
            }
        ),
        "{e:?}"
    );
}
