//! Shared helpers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_providers::registry::find_spec;
use nanobot_providers::{
    AnthropicClient, Endpoint, OpenAiCompatClient, RetryPolicy, Sleeper, Timeouts, ToolSpec,
};
use nanobot_testkit::MockLlm;
use serde_json::json;

pub(crate) fn timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(20),
        stream_idle: Duration::from_secs(20),
        connect: Duration::from_secs(5),
        ..Timeouts::default()
    }
}

pub(crate) fn openai(mock: &MockLlm, spec: &str) -> OpenAiCompatClient {
    nanobot_providers::install_ring();
    let spec = find_spec(spec).unwrap();
    let ep = Endpoint::new(
        spec.name,
        spec,
        mock.openai_base_url(),
        Some("sk-test-123".into()),
    )
    .unwrap()
    .with_timeouts(timeouts());
    OpenAiCompatClient::new(ep)
}

pub(crate) fn anthropic(mock: &MockLlm) -> AnthropicClient {
    nanobot_providers::install_ring();
    let spec = find_spec("anthropic").unwrap();
    let ep = Endpoint::new(
        "anthropic",
        spec,
        mock.anthropic_base_url(),
        Some("sk-ant-test".into()),
    )
    .unwrap()
    .with_timeouts(timeouts());
    AnthropicClient::new(ep)
}

/// A sleeper that records the delays and returns at once.
pub(crate) fn recording_sleeper() -> (Sleeper, Arc<Mutex<Vec<Duration>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let sleeper: Sleeper = Arc::new(move |d| {
        l.lock().unwrap().push(d);
        Box::pin(async {})
    });
    (sleeper, log)
}

pub(crate) fn fast_policy() -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
    let (sleeper, log) = recording_sleeper();
    (
        RetryPolicy {
            sleeper,
            ..RetryPolicy::default()
        },
        log,
    )
}

pub(crate) fn read_file_tool() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}
