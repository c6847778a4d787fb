//! The embedding API.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_core::{Agent, StopReason};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use serde::Deserialize;
use serde_json::json;

use crate::common::provider;

#[derive(Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// First number.
    a: i64,
    /// Second number.
    b: i64,
}

struct Add;

#[async_trait]
impl TypedTool for Add {
    type Args = AddArgs;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Add two numbers"
    }
    async fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    }
}

#[tokio::test]
async fn embedded_agent_runs_tools_keeps_history_and_streams() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("add", json!({"a": 2, "b": "3"})));
    mock.push(MockReply::text("2 + 3 = 5"));
    let agent = Agent::builder()
        .provider(provider(&mock))
        .workspace(home.workspace())
        .model("mock-model")
        .tool(Arc::new(Add))
        .instructions("Be brief.")
        .build()
        .unwrap();
    let r = agent.run("what is 2+3?").await.unwrap();
    assert_eq!(
        (r.content.as_str(), r.stop_reason),
        ("2 + 3 = 5", StopReason::Completed)
    );
    assert_eq!(r.tools_used, ["add"]);
    assert_eq!(mock.completion_requests()[1].tool_results()[0].content, "5");
    assert!(
        mock.completion_requests()[0]
            .system_text()
            .unwrap()
            .contains("Be brief.")
    );

    mock.push(MockReply::text("Still 5.").chunk_chars(2));
    let mut deltas = Vec::new();
    let r = agent
        .run_streaming("and again?", |d| deltas.push(d.to_owned()))
        .await
        .unwrap();
    assert_eq!(r.content, "Still 5.");
    assert!(deltas.len() > 1);
    assert_eq!(deltas.concat(), "Still 5.");
    let last = mock.last_request().unwrap();
    assert_eq!(last.messages().len(), 1 + 4 + 1, "history kept in memory");
}
