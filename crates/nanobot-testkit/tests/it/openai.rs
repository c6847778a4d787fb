//! OpenAI chat-completions format: JSON and SSE.

use nanobot_testkit::{MockLlm, MockReply, ToolCallSpec};
use serde_json::{Value, json};

use crate::support::{chat_body, client, parse_sse};

async fn post(mock: &MockLlm, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn stream_chunks(mock: &MockLlm, body: &Value) -> (Vec<Value>, Vec<String>) {
    let resp = post(mock, body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let events = parse_sse(&text);
    let raw: Vec<String> = events.iter().map(|e| e.data.clone()).collect();
    let chunks = events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| e.json())
        .collect();
    (chunks, raw)
}

#[tokio::test]
async fn json_text_reply() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Hello!").with_usage(10, 5));
    let v: Value = post(&mock, &chat_body("hi", false)).await.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello!");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    );
}

#[tokio::test]
async fn json_tool_calls_have_auto_and_fixed_ids() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("read_file", json!({"path": "a.txt"})));
    mock.push(MockReply::tool_calls(vec![
        ToolCallSpec::new("a", json!({"x": 1})),
        ToolCallSpec::new("b", json!({})).with_id("fixed"),
    ]));
    let v: Value = post(&mock, &chat_body("go", false)).await.json().await.unwrap();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], Value::Null);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        msg["tool_calls"],
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}])
    );
    let v: Value = post(&mock, &chat_body("go", false)).await.json().await.unwrap();
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls[0]["id"], "call_2");
    assert_eq!(calls[1]["id"], "fixed");
    assert_eq!(calls[1]["function"]["name"], "b");
}

#[tokio::test]
async fn json_reasoning_raw_arguments_and_think_tags_verbatim() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("<think>x</think>hi")
            .with_reasoning("thinking…")
            .finish_reason("length"),
    );
    mock.push(MockReply::raw_arguments("read_file", "{\"path\": \"a.txt\""));
    let v: Value = post(&mock, &chat_body("q", false)).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "<think>x</think>hi");
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "thinking…");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let v: Value = post(&mock, &chat_body("q", false)).await.json().await.unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"path\": \"a.txt\""
    );
}

#[tokio::test]
async fn stream_text_in_several_chunks() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Hello, streaming world!"));
    let (chunks, raw) = stream_chunks(&mock, &chat_body("hi", true)).await;
    assert_eq!(raw.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(pieces.len() >= 2, "text should be split: {pieces:?}");
    assert_eq!(pieces.concat(), "Hello, streaming world!");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["choices"][0]["delta"], json!({}));
    // Without stream_options.include_usage there is no usage anywhere.
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn stream_include_usage_adds_a_usage_chunk() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("ok").with_usage(7, 3));
    let mut body = chat_body("hi", true);
    body["stream_options"] = json!({"include_usage": true});
    let (chunks, raw) = stream_chunks(&mock, &body).await;
    assert_eq!(raw.last().map(String::as_str), Some("[DONE]"));
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    );
    // Every other chunk carries "usage": null, as OpenAI does.
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()));
    assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "stop");
}

fn rebuild_tool_calls(chunks: &[Value]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push(Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.to_owned();
            }
            if let Some(name) = tc["function"]["name"].as_str() {
                calls[i].1 = name.to_owned();
            }
            calls[i]
                .2
                .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    calls
}

#[tokio::test]
async fn stream_tool_call_arguments_split_by_index() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_calls(vec![
        ToolCallSpec::new("read_file", json!({"path": "some/long/file/name.txt"})),
        ToolCallSpec::new("list_dir", json!({"path": "."})).with_id("call_x"),
    ]));
    let (chunks, _) = stream_chunks(&mock, &chat_body("go", true)).await;
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    let tool_chunks: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("tool_calls").is_some())
        .collect();
    // The first chunk of each call carries id and name; the following ones only index + arguments.
    let first = &tool_chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(first["id"], "call_1");
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "read_file");
    let second = &tool_chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert!(second.get("id").is_none());
    assert!(second["function"].get("name").is_none());
    let arg_pieces = tool_chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0)
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] != "")
        .count();
    assert!(arg_pieces >= 2, "arguments should arrive in several chunks");
    let calls = rebuild_tool_calls(&chunks);
    assert_eq!(
        calls,
        vec![
            (
                "call_1".into(),
                "read_file".into(),
                r#"{"path":"some/long/file/name.txt"}"#.into()
            ),
            ("call_x".into(), "list_dir".into(), r#"{"path":"."}"#.into()),
        ]
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn stream_repeat_ids_like_llama_cpp() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "ls -la /tmp"})).repeat_ids_in_chunks());
    let (chunks, _) = stream_chunks(&mock, &chat_body("go", true)).await;
    let tool_deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert!(tool_deltas.len() >= 3);
    for d in &tool_deltas {
        assert_eq!(d["id"], "call_1");
        assert_eq!(d["function"]["name"], "exec");
    }
    assert_eq!(rebuild_tool_calls(&chunks)[0].2, r#"{"command":"ls -la /tmp"}"#);
}

#[tokio::test]
async fn stream_reasoning_then_content() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("answer")
            .with_reasoning("let me think")
            .chunk_chars(3),
    );
    let (chunks, _) = stream_chunks(&mock, &chat_body("q", true)).await;
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "let me think");
    let n_reasoning = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("reasoning_content").is_some())
        .count();
    assert_eq!(n_reasoning, 4, "12 chars in pieces of 3");
    let first_content = chunks
        .iter()
        .position(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .unwrap();
    let last_reasoning = chunks
        .iter()
        .rposition(|c| c["choices"][0]["delta"].get("reasoning_content").is_some())
        .unwrap();
    assert!(last_reasoning < first_content);
}

#[tokio::test]
async fn empty_stream_is_only_done() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::empty_stream());
    mock.push(MockReply::empty_stream());
    let (chunks, raw) = stream_chunks(&mock, &chat_body("q", true)).await;
    assert!(chunks.is_empty());
    assert_eq!(raw, vec!["[DONE]".to_owned()]);
    let v: Value = post(&mock, &chat_body("q", false)).await.json().await.unwrap();
    assert_eq!(v["choices"], json!([]));
}

#[tokio::test]
async fn models_endpoint_consumes_nothing() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("x"));
    let v: Value = client()
        .get(format!("{}/models", mock.openai_base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "mock-model");
    assert_eq!(mock.remaining(), 1);
    assert_eq!(mock.requests()[0].method, "GET");
}
