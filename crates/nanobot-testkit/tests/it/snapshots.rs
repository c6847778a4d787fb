//! Snapshots of the exact wire output, so a change in the formats other crates parse is a visible diff.

use nanobot_testkit::{MockLlm, MockReply, ToolCallSpec};
use serde_json::{Value, json};

use crate::support::client;

fn full_reply() -> MockReply {
    MockReply::text("Hi <b>there</b>")
        .with_reasoning("think")
        .with_tool_call(ToolCallSpec::new("read_file", json!({"path": "a.txt"})))
        .with_usage(12, 4)
        .chunk_chars(6)
}

async fn openai(mock: &MockLlm, stream: bool) -> reqwest::Response {
    let mut body =
        json!({"model": "gpt-snap", "stream": stream, "messages": [{"role": "user", "content": "x"}]});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn anthropic(mock: &MockLlm, stream: bool) -> reqwest::Response {
    let body = json!({"model": "claude-snap", "max_tokens": 10, "stream": stream,
                      "messages": [{"role": "user", "content": "x"}]});
    client()
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn openai_wire_output() {
    let mock = MockLlm::start().await;
    mock.push(full_reply());
    mock.push(full_reply());
    mock.push(MockReply::error(429));
    insta::assert_json_snapshot!(
        "openai_json",
        openai(&mock, false).await.json::<Value>().await.unwrap()
    );
    insta::assert_snapshot!("openai_sse", openai(&mock, true).await.text().await.unwrap());
    insta::assert_json_snapshot!(
        "openai_error_429",
        openai(&mock, false).await.json::<Value>().await.unwrap()
    );
}

#[tokio::test]
async fn anthropic_wire_output() {
    let mock = MockLlm::start().await;
    mock.push(full_reply());
    mock.push(full_reply());
    mock.push(MockReply::error(429));
    insta::assert_json_snapshot!(
        "anthropic_json",
        anthropic(&mock, false).await.json::<Value>().await.unwrap()
    );
    insta::assert_snapshot!(
        "anthropic_sse",
        anthropic(&mock, true).await.text().await.unwrap()
    );
    insta::assert_json_snapshot!(
        "anthropic_error_429",
        anthropic(&mock, false).await.json::<Value>().await.unwrap()
    );
}
