//! The mock's OpenAI wire format, checked by the official OpenAI Python SDK (a real peer).

use nanobot_testkit::{MockLlm, MockReply, ToolCallSpec, peers};
use serde_json::{Value, json};

#[tokio::test]
async fn openai_python_sdk_parses_every_reply_kind() {
    let Some(python) = peers::require("python venv (openai SDK)", peers::python()) else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.push_all([
        MockReply::text("Hello!").with_usage(10, 5),
        MockReply::tool_calls(vec![
            ToolCallSpec::new("read_file", json!({"path": "a.txt"})),
            ToolCallSpec::new("list_dir", json!({"path": "."})).with_id("fixed"),
        ]),
        MockReply::text("streamed answer")
            .with_reasoning("pondering")
            .with_usage(7, 3),
        MockReply::tool_calls(vec![
            ToolCallSpec::new("exec", json!({"command": "ls -la"})),
            ToolCallSpec::new("read_file", json!({"path": "b.txt"})),
        ]),
        MockReply::error(429).retry_after_secs(2),
        MockReply::error(500),
        MockReply::context_length_exceeded(),
        MockReply::drop_connection(),
    ]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/openai_sdk_probe.py");
    let output = tokio::process::Command::new(python)
        .arg(script)
        .arg(mock.openai_base_url())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("OPENAI_BASE_URL")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(out["text"], json!(["Hello!", "stop", 15, "gpt-test"]));
    assert_eq!(
        out["tools"],
        json!([["call_1", "read_file", {"path": "a.txt"}], ["fixed", "list_dir", {"path": "."}]])
    );
    assert_eq!(
        out["stream_text"],
        json!(["streamed answer", "stop", 10, "pondering"])
    );
    assert_eq!(
        out["stream_tools"],
        json!([["call_2", "exec", {"command": "ls -la"}], ["call_3", "read_file", {"path": "b.txt"}], "tool_calls"])
    );
    assert_eq!(
        out["rate_limit"],
        json!([429, "2", "rate_limit_exceeded", "requests"])
    );
    assert_eq!(out["server_error"][0], 500);
    assert_eq!(out["context"], json!([400, "context_length_exceeded"]));
    assert_eq!(out["dropped"], "APIConnectionError");
    assert_eq!(out["models"], json!(["mock-model"]));
    assert_eq!(mock.remaining(), 0);
    // The SDK's requests were recorded like any other.
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 8);
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-mock"));
    assert!(reqs[2].is_stream());
    assert_eq!(reqs[2].body["stream_options"], json!({"include_usage": true}));
}
