//! A mock scripted like llama.cpp's server: it refuses to stream when tools are offered, writes tool calls as
//! `functions.NAME: {…}` text with HTML-escaped JSON, and sometimes answers with nothing.

use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, OpenAiCompatClient, Provider, StreamEvent,
    StreamWithTools, collect,
};
use nanobot_testkit::{MockLlm, MockReply, RecordedRequest};
use serde_json::json;

use crate::common::{openai, read_file_tool};

const MODEL: &str = "qwen2.5-0.5b-instruct";

/// llama.cpp's answer to `stream: true` with `tools` (older builds, and builds without `--jinja`).
fn refuse_stream_with_tools(mock: &MockLlm) {
    mock.when(
        |r: &RecordedRequest| r.is_stream() && !r.tools().is_empty(),
        MockReply::error(500).error_body(json!({
            "error": {"code": 500, "message": "Cannot use tools with stream", "type": "server_error"}
        })),
    );
}

fn request(text: &str) -> ChatRequest {
    ChatRequest::new(MODEL, vec![ChatMessage::user(text)]).with_tools(vec![read_file_tool()])
}

/// The streamed answer to `req`, collected.
async fn streamed(client: &OpenAiCompatClient, req: ChatRequest) -> ChatResponse {
    collect(client.stream(req)).await.unwrap()
}

#[tokio::test]
async fn a_refused_stream_is_learnt_once_then_one_request_per_call() {
    let mock = MockLlm::start().await;
    refuse_stream_with_tools(&mock);
    mock.push(MockReply::text(
        "functions.read_file: {&quot;path&quot;: &quot;notes &amp; todo.txt&quot;}",
    ));
    mock.push(MockReply::text("The file says hello."));
    mock.push(MockReply::text("Second answer."));
    let client = openai(&mock, "custom");

    let resp = streamed(&client, request("read notes")).await;
    assert_eq!(resp.finish_reason, FinishReason::ToolCalls);
    assert_eq!(resp.tool_calls.len(), 1, "{resp:?}");
    assert_eq!(resp.tool_calls[0].name, "read_file");
    assert_eq!(resp.tool_calls[0].arguments, json!({"path": "notes & todo.txt"}));
    assert_eq!(resp.content.as_deref().unwrap_or_default(), "");
    // The refused stream, then the plain request.
    let reqs = mock.completion_requests();
    assert_eq!(
        reqs.iter().map(RecordedRequest::is_stream).collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!(
        client.capabilities().stream_with_tools(MODEL),
        StreamWithTools::No
    );
    assert!(client.capabilities().writes_tool_calls_as_text(MODEL));

    // From now on: one plain request per call, from a clone too (the memory is shared).
    let clone = client.clone();
    for (i, expected) in ["The file says hello.", "Second answer."].iter().enumerate() {
        let c = if i == 0 { &client } else { &clone };
        let resp = streamed(c, request("again")).await;
        assert_eq!(resp.content.as_deref(), Some(*expected));
        assert_eq!(mock.completion_requests().len(), 3 + i);
        assert!(!mock.last_request().unwrap().is_stream());
    }
    // Without tools the server streams as usual.
    mock.push(MockReply::text("streamed"));
    let resp = streamed(&client, ChatRequest::new(MODEL, vec![ChatMessage::user("hi")])).await;
    assert_eq!(resp.content.as_deref(), Some("streamed"));
    assert!(mock.last_request().unwrap().is_stream());
}

#[tokio::test]
async fn an_empty_stream_where_a_plain_request_answers_is_learnt() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::empty_stream());
    mock.push(MockReply::text("plain answer"));
    mock.push(MockReply::text("next"));
    let client = openai(&mock, "custom");
    let resp = streamed(&client, request("hi")).await;
    assert_eq!(resp.content.as_deref(), Some("plain answer"));
    let resp = streamed(&client, request("hi")).await;
    assert_eq!(resp.content.as_deref(), Some("next"));
    let streams: Vec<bool> = mock
        .completion_requests()
        .iter()
        .map(RecordedRequest::is_stream)
        .collect();
    assert_eq!(streams, [true, false, false]);
}

#[tokio::test]
async fn an_empty_answer_is_the_models_answer_not_an_error() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::empty_stream());
    mock.push(MockReply::text(""));
    let client = openai(&mock, "custom");
    let mut s = client.stream(request("hi"));
    let mut events = Vec::new();
    while let Some(e) = s.next().await {
        events.push(e.expect("an empty answer is not an error"));
    }
    assert_eq!(events.last(), Some(&StreamEvent::Done(FinishReason::Stop)));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::TextDelta(t) if !t.is_empty()))
    );
    assert_eq!(mock.completion_requests().len(), 2);
    // Nothing was learnt from an answer that is empty both ways.
    assert_eq!(
        client.capabilities().stream_with_tools(MODEL),
        StreamWithTools::Unknown
    );
}

#[tokio::test]
async fn text_calls_are_read_on_every_openai_compatible_provider() {
    for provider in ["custom", "openai", "openrouter", "vllm", "ollama", "lm_studio"] {
        let mock = MockLlm::start().await;
        mock.push(
            MockReply::text(
                "I will read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>",
            )
            .chunk_chars(3),
        );
        let client = openai(&mock, provider);
        let resp = streamed(&client, request("read a.txt")).await;
        assert_eq!(resp.tool_calls.len(), 1, "{provider}: {resp:?}");
        assert_eq!(
            resp.tool_calls[0].arguments,
            json!({"path": "a.txt"}),
            "{provider}"
        );
        assert_eq!(
            resp.content.as_deref().map(str::trim),
            Some("I will read it."),
            "{provider}"
        );
        assert_eq!(resp.finish_reason, FinishReason::ToolCalls, "{provider}");
        // Prose naming no offered tool stays prose.
        mock.push(MockReply::text("{\"name\": \"Ada\", \"role\": \"engineer\"}"));
        let resp = streamed(&client, request("who")).await;
        assert!(resp.tool_calls.is_empty(), "{provider}");
        assert_eq!(
            resp.content.as_deref(),
            Some("{\"name\": \"Ada\", \"role\": \"engineer\"}")
        );
    }
}
