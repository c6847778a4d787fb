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

/// Whether the peers' venv has the `anthropic` package.
fn anthropic_sdk() -> Option<std::path::PathBuf> {
    let python = peers::python()?;
    let lib = peers::peers_dir()?.join("venv").join("lib");
    let has_pkg = std::fs::read_dir(lib)
        .ok()?
        .filter_map(Result::ok)
        .any(|d| d.path().join("site-packages").join("anthropic").is_dir());
    has_pkg.then_some(python)
}

#[tokio::test]
async fn anthropic_python_sdk_parses_every_reply_kind() {
    let Some(python) = peers::require("anthropic (PyPI, in the peers venv)", anthropic_sdk()) else {
        return;
    };
    let mock = MockLlm::start().await;
    let reply = MockReply::text("Let me look.")
        .with_reasoning("plan")
        .with_tool_call(ToolCallSpec::new(
            "read_file",
            json!({"path": "a.txt", "limit": 10}),
        ))
        .with_usage(20, 8)
        .with_cache_usage(1, 2);
    mock.push_all([
        reply.clone(),
        reply.with_id("toolu_fixed"),
        MockReply::error(429).retry_after_secs(3),
        MockReply::error(529),
        MockReply::context_length_exceeded(),
        MockReply::drop_connection(),
    ]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/anthropic_sdk_probe.py");
    let output = tokio::process::Command::new(python)
        .arg(script)
        .arg(mock.anthropic_base_url())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("ANTHROPIC_BASE_URL")
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
    let blocks = |id: &str| {
        json!([
            ["thinking", "plan", "mock-signature"],
            ["text", "Let me look."],
            ["tool_use", id, "read_file", {"path": "a.txt", "limit": 10}],
        ])
    };
    assert_eq!(
        out["json"],
        json!([blocks("call_1"), "tool_use", [17, 8, 1, 2], "claude-test"])
    );
    assert_eq!(
        out["stream"],
        json!([blocks("toolu_fixed"), "tool_use", [17, 8, 1, 2], "Let me look."])
    );
    assert_eq!(out["rate_limit"], json!([429, "3", "rate_limit_error"]));
    assert_eq!(out["overloaded"], json!([529, "overloaded_error"]));
    assert_eq!(out["context"][0], 400);
    assert!(
        out["context"][1]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long")
    );
    assert_eq!(out["dropped"], "APIConnectionError");
    let reqs = mock.completion_requests();
    // SDK 2.x sends the key as a bearer token; older ones used x-api-key.
    let key = reqs[0].header("x-api-key").or(reqs[0].header("authorization"));
    assert!(
        key.is_some_and(|k| k.ends_with("sk-ant-mock")),
        "{:?}",
        reqs[0].headers
    );
    assert!(reqs[0].header("anthropic-version").is_some());
    assert!(reqs[1].is_stream());
}
