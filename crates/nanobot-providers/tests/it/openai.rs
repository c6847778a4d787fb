//! The OpenAI-compatible client over real HTTP.

use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, FinishReason, Provider, ProviderError, StreamEvent, ToolCall,
};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

use crate::common::{openai, read_file_tool};

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are nanobot."),
        ChatMessage::user("read a.txt"),
        ChatMessage::assistant_tool_calls(
            None,
            vec![ToolCall::new("call_0", "read_file", json!({"path": "a.txt"}))],
        ),
        ChatMessage::tool_result("call_0", "read_file", "hello"),
        ChatMessage::Assistant {
            content: Some(String::new()),
            tool_calls: vec![],
            reasoning_content: Some("thought".into()),
            thinking_blocks: None,
        },
        ChatMessage::user("thanks"),
    ]
}

#[tokio::test]
async fn streamed_text_with_usage_and_request_shape() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Hello from the mock.").with_usage(12, 5));
    let client = openai(&mock, "openai");
    let req = ChatRequest::new("openai/gpt-4o", conversation())
        .with_tools(vec![read_file_tool()])
        .with_max_tokens(1000)
        .with_temperature(0.1);
    let mut deltas = Vec::new();
    let mut s = client.stream(req);
    while let Some(e) = s.next().await {
        if let StreamEvent::TextDelta(t) = e.unwrap() {
            deltas.push(t);
        }
    }
    assert!(deltas.len() > 1, "text arrives in several deltas: {deltas:?}");
    assert_eq!(deltas.concat(), "Hello from the mock.");
    let r = mock.requests().remove(0);
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(r.path, "/v1/chat/completions");
    insta::assert_json_snapshot!("openai_stream_with_tools", r.body);
}

#[tokio::test]
async fn non_streaming_chat_without_tools() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Plain answer.").with_usage(3, 2));
    let client = openai(&mock, "deepseek");
    let resp = client
        .chat(ChatRequest::new("deepseek/deepseek-chat", conversation()).with_max_tokens(50))
        .await
        .unwrap();
    assert_eq!(resp.content.as_deref(), Some("Plain answer."));
    assert_eq!(resp.finish_reason, FinishReason::Stop);
    let usage = resp.usage.unwrap();
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        (3, 2, 5)
    );
    let r = mock.requests().remove(0);
    assert!(!r.is_stream());
    // DeepSeek gets reasoning_content back and its own prefix stripped.
    insta::assert_json_snapshot!("openai_deepseek_json_no_tools", r.body);
}

#[tokio::test]
async fn streamed_tool_calls_split_mid_argument_are_reassembled() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("read_file", json!({"path": "notes/today.md", "limit": 20}))
            .with_text("Let me read it.")
            .chunk_chars(3),
    );
    let client = openai(&mock, "openai");
    let resp = client
        .chat_stream_collect(ChatRequest::new("gpt-4o", vec![ChatMessage::user("go")]))
        .await;
    assert_eq!(resp.content.as_deref(), Some("Let me read it."));
    assert_eq!(resp.finish_reason, FinishReason::ToolCalls);
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].name, "read_file");
    assert_eq!(
        resp.tool_calls[0].arguments,
        json!({"path": "notes/today.md", "limit": 20})
    );
    assert!(resp.tool_calls[0].arguments_error.is_none());
}

#[tokio::test]
async fn llama_cpp_repeated_ids_and_names_are_not_concatenated() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("exec", json!({"command": "ls -la"}))
            .repeat_ids_in_chunks()
            .chunk_chars(2),
    );
    let client = openai(&mock, "ollama");
    let resp = client
        .chat_stream_collect(ChatRequest::new("ollama/llama3.2", vec![ChatMessage::user("go")]))
        .await;
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].name, "exec");
    assert_eq!(resp.tool_calls[0].arguments, json!({"command": "ls -la"}));
    let body = mock.requests().remove(0).body;
    assert_eq!(body["model"], "llama3.2");
}

#[tokio::test]
async fn malformed_arguments_are_repaired_or_marked() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::raw_arguments("read_file", "{'path': 'a.txt',}"));
    mock.push(MockReply::raw_arguments("read_file", "path is a.txt"));
    let client = openai(&mock, "openai");
    let fixed = client
        .chat_stream_collect(ChatRequest::new("gpt-4o", vec![ChatMessage::user("a")]))
        .await;
    assert_eq!(fixed.tool_calls[0].arguments, json!({"path": "a.txt"}));
    assert!(fixed.tool_calls[0].arguments_error.is_none());
    let broken = client
        .chat(ChatRequest::new("gpt-4o", vec![ChatMessage::user("b")]))
        .await
        .unwrap();
    let call = &broken.tool_calls[0];
    assert!(call.arguments_error.is_some(), "{call:?}");
    assert_eq!(call.arguments_json(), "path is a.txt");
}

#[tokio::test]
async fn empty_stream_falls_back_to_a_non_streaming_request() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::empty_stream());
    mock.push(MockReply::tool_call("read_file", json!({"path": "x"})));
    let client = openai(&mock, "lm_studio");
    let msgs = vec![
        ChatMessage::user("a"),
        ChatMessage::assistant_tool_calls(None, vec![ToolCall::new("c1", "read_file", json!({"path": "y"}))]),
        ChatMessage::tool_result("c1", "read_file", ""),
    ];
    let resp = client
        .chat_stream_collect(ChatRequest::new("qwen3", msgs).with_tools(vec![read_file_tool()]))
        .await;
    assert_eq!(resp.tool_calls[0].arguments, json!({"path": "x"}));
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].is_stream());
    assert!(!reqs[1].is_stream());
    // Local servers get "" (not null) for tool-call-only assistant messages, "(empty)" for empty results.
    assert_eq!(reqs[1].body["messages"][1]["content"], "");
    assert_eq!(reqs[1].body["messages"][2]["content"], "(empty)");
    assert_eq!(reqs[1].body["tool_choice"], "auto");
}

#[tokio::test]
async fn reasoning_is_collected() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("42").with_reasoning("6 times 7"));
    let client = openai(&mock, "deepseek");
    let resp = client
        .chat_stream_collect(ChatRequest::new(
            "deepseek-reasoner",
            vec![ChatMessage::user("q")],
        ))
        .await;
    assert_eq!(resp.reasoning_content.as_deref(), Some("6 times 7"));
    assert_eq!(resp.content.as_deref(), Some("42"));
    let msg = serde_json::to_value(resp.to_message()).unwrap();
    assert_eq!(msg["reasoning_content"], "6 times 7");
}

#[tokio::test]
async fn errors_are_classified() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(401).error_message("Incorrect API key provided: sk-test-123"));
    mock.push(MockReply::context_length_exceeded());
    mock.push(MockReply::error(400));
    let client = openai(&mock, "openai");
    let req = || ChatRequest::new("gpt-4o", vec![ChatMessage::user("x")]);
    assert!(matches!(
        client.chat(req()).await,
        Err(ProviderError::Auth { status: 401, .. })
    ));
    let ctx = client.chat(req()).await.unwrap_err();
    assert!(
        matches!(ctx, ProviderError::ContextLengthExceeded { .. }),
        "{ctx:?}"
    );
    assert!(!ctx.is_retryable());
    let bad = client.chat(req()).await.unwrap_err();
    assert!(
        matches!(bad, ProviderError::InvalidRequest { status: 400, .. }),
        "{bad:?}"
    );
    // No key ever reaches an error message.
    assert!(!format!("{bad} {bad:?} {client:?}").contains("sk-test-123"));
}

#[tokio::test]
async fn text_tool_calls_from_local_models() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text(
            "Checking. <tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call>",
        )
        .chunk_chars(5),
    );
    let client = openai(&mock, "vllm");
    let resp = client
        .chat_stream_collect(
            ChatRequest::new("vllm/qwen", vec![ChatMessage::user("x")]).with_tools(vec![read_file_tool()]),
        )
        .await;
    assert_eq!(resp.content.as_deref(), Some("Checking. "));
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].arguments, json!({"path": "a"}));
    assert_eq!(resp.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_request() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("one two three four five six")
            .chunk_chars(4)
            .stall_after_chunks(1),
    );
    let client = openai(&mock, "openai");
    let mut s = client.stream(ChatRequest::new("gpt-4o", vec![ChatMessage::user("x")]));
    let first = s.next().await.unwrap().unwrap();
    assert!(matches!(first, StreamEvent::TextDelta(_)));
    drop(s);
    // The provider is still usable and the mock saw exactly one request.
    mock.push(MockReply::text("after"));
    let r = client
        .chat(ChatRequest::new("gpt-4o", vec![ChatMessage::user("y")]))
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("after"));
    assert_eq!(mock.request_count(), 2);
}

/// Collects `stream()` (not `chat()`), so the SSE path is what is tested.
trait StreamCollect {
    async fn chat_stream_collect(&self, req: ChatRequest) -> nanobot_providers::ChatResponse;
}

impl<P: Provider> StreamCollect for P {
    async fn chat_stream_collect(&self, req: ChatRequest) -> nanobot_providers::ChatResponse {
        nanobot_providers::collect(self.stream(req)).await.unwrap()
    }
}

fn client_for(spec: &str) -> nanobot_providers::OpenAiCompatClient {
    nanobot_providers::install_ring();
    let spec = nanobot_providers::registry::find_spec(spec).unwrap();
    let ep = nanobot_providers::Endpoint::new(spec.name, spec, "http://127.0.0.1:9/v1", None).unwrap();
    nanobot_providers::OpenAiCompatClient::new(ep)
}

#[test]
fn spec_quirks_in_request_bodies() {
    let msgs = vec![
        ChatMessage::system("sys"),
        ChatMessage::user("q"),
        ChatMessage::Assistant {
            content: Some("a".into()),
            tool_calls: vec![],
            reasoning_content: Some("r".into()),
            thinking_blocks: None,
        },
    ];
    let req = ChatRequest::new("moonshot/kimi-k2.5", msgs.clone())
        .with_temperature(0.1)
        .with_max_tokens(0)
        .with_tools(vec![read_file_tool()]);

    // Kimi K2.5: the server picks the temperature (none sent); reasoning_content sent back; max_tokens at
    // least 1. Kimi K2.7: temperature forced to 1.0.
    let kimi = client_for("moonshot").request_body(&req, false);
    assert_eq!(kimi["model"], "kimi-k2.5");
    assert!(kimi.get("temperature").is_none());
    let k27 = ChatRequest {
        model: "moonshot/kimi-k2.7".into(),
        ..req.clone()
    };
    assert_eq!(
        client_for("moonshot").request_body(&k27, false)["temperature"],
        1.0
    );
    assert_eq!(kimi["max_tokens"], 1);
    assert_eq!(kimi["messages"][2]["reasoning_content"], "r");
    assert!(kimi.get("stream").is_none());

    // OpenRouter: cache_control on the system prompt and the last tool; reasoning_content stripped.
    let or = client_for("openrouter").request_body(
        &ChatRequest {
            model: "anthropic/claude-3".into(),
            ..req.clone()
        },
        true,
    );
    assert_eq!(or["model"], "anthropic/claude-3");
    assert_eq!(
        or["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(or["tools"][0]["cache_control"]["type"], "ephemeral");
    assert!(or["messages"][2].get("reasoning_content").is_none());
    assert_eq!(or["stream_options"]["include_usage"], true);

    // OpenAI: max_completion_tokens; reasoning models get no temperature.
    let o = client_for("openai").request_body(
        &ChatRequest {
            model: "o3-mini".into(),
            ..req
        },
        false,
    );
    assert_eq!(o["max_completion_tokens"], 1);
    assert!(o.get("max_tokens").is_none() && o.get("temperature").is_none());
}

#[tokio::test]
async fn empty_stream_and_empty_fallback_is_a_retryable_error() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::empty_stream());
    mock.push(MockReply::empty_stream());
    let client = openai(&mock, "ollama");
    let err =
        nanobot_providers::collect(client.stream(ChatRequest::new("llama3", vec![ChatMessage::user("x")])))
            .await
            .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(mock.request_count(), 2);
}

/// A model that finishes with nothing to say (a valid empty answer with a finish reason) is asked once more
/// without streaming (the llama.cpp empty-stream quirk looks alike); once the plain answer was empty too, its
/// empty streamed answers are taken as answers, not asked again every time.
#[tokio::test]
async fn a_valid_empty_answer_is_asked_again_once_then_taken() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text(""));
    let client = openai(&mock, "ollama");
    let ask = || client.chat_stream_collect(ChatRequest::new("small", vec![ChatMessage::user("x")]));
    let first = ask().await;
    assert_eq!(first.content.as_deref().unwrap_or_default(), "");
    assert_eq!(mock.request_count(), 2, "streamed, then plain");
    assert!(!mock.requests()[1].is_stream());
    for n in 0..3 {
        let again = ask().await;
        assert_eq!(again.content.as_deref().unwrap_or_default(), "");
        assert_eq!(mock.request_count(), 3 + n, "one streamed request each");
    }
}

/// The body is written from the conversation as the strict OpenAI shape wants it, on the wire (what the server got,
/// not a value made for the test): empty contents, empty text parts, an assistant's tool calls without text, prompt
/// caching of an empty system prompt and of the last tool, and the keys in their order.
#[tokio::test]
async fn the_wire_body_is_the_strict_shape_for_every_kind_of_message() {
    let messages = vec![
        ChatMessage::system(""),
        ChatMessage::User {
            content: nanobot_providers::Content::Parts(vec![
                nanobot_providers::ContentPart::text(""),
                nanobot_providers::ContentPart::text("hi"),
            ]),
        },
        ChatMessage::assistant_tool_calls(None, vec![ToolCall::new("c1", "read_file", json!({"path": "a"}))]),
        ChatMessage::tool_result("c1", "read_file", ""),
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![],
            reasoning_content: None,
            thinking_blocks: None,
        },
    ];
    let expected_messages = |null_content: serde_json::Value, system: serde_json::Value| {
        json!([
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": null_content, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "(empty)", "name": "read_file"},
            {"role": "assistant", "content": "(empty)"},
        ])
    };
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("ok"));
    mock.push(MockReply::text("ok"));
    let plain = openai(&mock, "openai");
    plain
        .chat(ChatRequest::new("gpt-4o", messages.clone()))
        .await
        .unwrap();
    let caching = openai(&mock, "openrouter");
    caching
        .chat(ChatRequest::new("anthropic/claude-3", messages).with_tools(vec![read_file_tool()]))
        .await
        .unwrap();
    let sent = mock.requests();
    assert_eq!(
        sent[0].body["messages"],
        expected_messages(json!(null), json!("(empty)"))
    );
    assert_eq!(
        sent[1].body["messages"],
        expected_messages(
            sent[1].body["messages"][2]["content"].clone(),
            json!([{"type": "text", "text": "(empty)", "cache_control": {"type": "ephemeral"}}])
        )
    );
    assert_eq!(
        sent[1].body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(sent[1].body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(
        sent[1].body.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["model", "messages", "tools", "tool_choice"],
        "the keys in their order"
    );
}
