//! Against `@copilotkit/aimock` (a scripted OpenAI-compatible server nobody here wrote): a tool-call turn, a
//! streamed answer and a 429. Skipped (or failing under CI) when the peer is not installed.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nanobot_providers::registry::find_spec;
use nanobot_providers::{
    ChatMessage, ChatRequest, Endpoint, OpenAiCompatClient, Provider, ProviderError, RetryPolicy,
    RetryingProvider, StreamEvent, ToolCall, ToolSpec,
};
use nanobot_testkit::peers;
use serde_json::json;

const FIXTURES: &str = r#"{"fixtures":[
 {"match":{"userMessage":"weather in Paris","hasToolResult":false},
  "response":{"toolCalls":[{"id":"call_weather_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}]}},
 {"match":{"userMessage":"weather in Paris","hasToolResult":true},"response":{"content":"It is sunny and 21C in Paris."}},
 {"match":{"userMessage":"rate limit me"},"response":{"error":{"message":"Rate limit exceeded","type":"rate_limit_error","code":"rate_limit_exceeded"},"status":429}},
 {"match":{"userMessage":"llama weather"},"response":{"content":"functions.get_weather: {&quot;city&quot;: &quot;Paris&quot;}"}},
 {"match":{"userMessage":"llama again"},"response":{"content":"Still sunny."}},
 {"match":{"userMessage":"hello"},"response":{"content":"Hi there! I am a scripted mock."}}]}"#;

struct Aimock {
    child: peers::ChildGuard,
    _dir: tempfile::TempDir,
    base: String,
}

impl Aimock {
    /// What went wrong, with aimock's state (running, or how it ended and its last words).
    fn failed(&mut self, what: &str, err: impl std::fmt::Debug) -> ! {
        panic!("{what}: {err:?}; {}", self.child.report())
    }
}

async fn start() -> Option<Aimock> {
    let pkg = peers::require_node_package("@copilotkit/aimock")?;
    let node = peers::require("node", peers::node())?;
    let dir = tempfile::tempdir().unwrap();
    let fixtures = dir.path().join("nanobot.json");
    std::fs::write(&fixtures, FIXTURES).unwrap();
    let (child, port) = peers::spawn_listening("aimock", Duration::from_secs(20), |port| {
        let mut cmd = Command::new(&node);
        cmd.arg(pkg.join("dist/cli.js"))
            .args(["--port", &port.to_string(), "--host", "127.0.0.1", "--fixtures"])
            .arg(&fixtures)
            .args(["--log-level", "warn"])
            .stdout(Stdio::null());
        cmd
    })
    .await
    .unwrap();
    Some(Aimock {
        child,
        _dir: dir,
        base: format!("http://127.0.0.1:{port}/v1"),
    })
}

fn client(base: &str) -> OpenAiCompatClient {
    nanobot_providers::install_ring();
    let spec = find_spec("custom").unwrap();
    OpenAiCompatClient::new(Endpoint::new("custom", spec, base, Some("sk-aimock".into())).unwrap())
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }
}

#[tokio::test]
async fn aimock_tool_call_turn_streamed_answer_and_429() {
    let Some(mock) = start().await else { return };
    let c = client(&mock.base);

    // A tool-call turn, streamed, then the answer after the tool result (non-streaming).
    let mut msgs = vec![ChatMessage::user("weather in Paris")];
    let first = nanobot_providers::collect(
        c.stream(ChatRequest::new("gpt-4o", msgs.clone()).with_tools(vec![weather_tool()])),
    )
    .await
    .unwrap();
    assert_eq!(
        first.tool_calls,
        vec![ToolCall::new(
            "call_weather_1",
            "get_weather",
            json!({"city": "Paris"})
        )]
    );
    msgs.push(first.to_message());
    msgs.push(ChatMessage::tool_result(
        "call_weather_1",
        "get_weather",
        "sunny, 21C",
    ));
    let second = c
        .chat(ChatRequest::new("gpt-4o", msgs).with_tools(vec![weather_tool()]))
        .await
        .unwrap();
    assert_eq!(second.content.as_deref(), Some("It is sunny and 21C in Paris."));

    // A streamed answer.
    let mut s = c.stream(ChatRequest::new("gpt-4o", vec![ChatMessage::user("hello")]));
    let mut text = String::new();
    let mut usage = None;
    while let Some(e) = s.next().await {
        match e.unwrap() {
            StreamEvent::TextDelta(t) => text.push_str(&t),
            StreamEvent::Usage(u) => usage = Some(u),
            _ => {}
        }
    }
    assert_eq!(text, "Hi there! I am a scripted mock.");
    assert!(usage.is_some(), "stream_options.include_usage honoured");

    // A 429 with Retry-After, retried (delays recorded, not waited) and finally reported typed.
    let (sleeper, delays) = crate::common::recording_sleeper();
    let p = RetryingProvider::new(
        Arc::new(c),
        RetryPolicy {
            max_retries: 1,
            sleeper,
            ..RetryPolicy::default()
        },
    );
    let err = p
        .chat(ChatRequest::new(
            "gpt-4o",
            vec![ChatMessage::user("rate limit me")],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::RateLimited { .. }), "{err:?}");
    assert_eq!(*delays.lock().unwrap(), vec![Duration::from_secs(1)]);
}

/// The journal's entries (what aimock received).
async fn journal(mock: &mut Aimock, http: &reqwest::Client, control: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = match http.get(format!("{control}/journal")).send().await {
        Ok(resp) => resp.json().await.unwrap(),
        Err(err) => mock.failed("reading aimock's journal", err),
    };
    v.as_array()
        .or_else(|| v["entries"].as_array())
        .cloned()
        .unwrap_or_else(|| panic!("unexpected journal shape: {v}"))
}

#[tokio::test]
async fn aimock_as_llama_cpp_refused_stream_text_calls_then_one_request_per_call() {
    let Some(mut mock) = start().await else { return };
    // This test's own client to aimock's control API needs the TLS provider too, whichever test runs first.
    nanobot_providers::install_ring();
    let http = reqwest::Client::new();
    let control = mock.base.replace("/v1", "/__aimock");
    // llama.cpp's refusal of `stream: true` with tools, injected for the next request.
    let injected = http
        .post(format!("{control}/error"))
        .json(&json!({"status": 500, "body": {"message": "Cannot use tools with stream", "type": "server_error"}}))
        .send()
        .await;
    if let Err(err) = injected.and_then(reqwest::Response::error_for_status) {
        mock.failed("injecting the refusal", err);
    }
    let c = client(&mock.base);
    let req = |text: &str| {
        ChatRequest::new("local", vec![ChatMessage::user(text)]).with_tools(vec![weather_tool()])
    };
    let first = match nanobot_providers::collect(c.stream(req("llama weather"))).await {
        Ok(first) => first,
        Err(err) => mock.failed("the first call", err),
    };
    assert_eq!(first.tool_calls.len(), 1, "{first:?}");
    assert_eq!(first.tool_calls[0].name, "get_weather");
    assert_eq!(first.tool_calls[0].arguments, json!({"city": "Paris"}));
    let before = journal(&mut mock, &http, &control).await.len();
    let second = match nanobot_providers::collect(c.stream(req("llama again"))).await {
        Ok(second) => second,
        Err(err) => mock.failed("the second call", err),
    };
    assert_eq!(second.content.as_deref(), Some("Still sunny."));
    let entries = journal(&mut mock, &http, &control).await;
    assert_eq!(entries.len(), before + 1, "one request for the second call");
    let last = entries.last().unwrap();
    assert_ne!(last["body"]["stream"], json!(true), "{last}");
}
