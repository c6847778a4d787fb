//! An agent turn calling a tool of the real MCP `server-everything` (stdio) through nanobot-mcp.

use nanobot_core::AgentLoop;
use nanobot_mcp::{McpManager, McpOptions, RawServer, ServerSpec};
use nanobot_testkit::{MockLlm, MockReply, TempHome, peers};
use serde_json::json;

use crate::common::{provider, settings};

#[tokio::test]
async fn agent_calls_mcp_everything_echo() {
    let Some(pkg) = peers::require_node_package("@modelcontextprotocol/server-everything") else {
        return;
    };
    let Some(node) = peers::require("node", peers::node()) else {
        return;
    };
    let spec = ServerSpec::resolve(
        "everything",
        RawServer {
            command: Some(node.display().to_string()),
            args: vec![pkg.join("dist/index.js").display().to_string(), "stdio".into()],
            enabled_tools: Some(vec!["echo".into()]),
            ..RawServer::default()
        },
    )
    .unwrap();
    let parent_env: nanobot_util::EnvMap = std::env::var("PATH")
        .map(|p| ("PATH".to_owned(), p))
        .into_iter()
        .collect();
    let manager = McpManager::new(
        vec![spec],
        McpOptions {
            parent_env,
            ..McpOptions::default()
        },
    );

    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "mcp_everything_echo",
        json!({"message": "hello from nanobot"}),
    ));
    mock.push(MockReply::text("The server echoed it."));
    let agent = AgentLoop::builder(provider(&mock), settings(&home))
        .mcp(manager.clone())
        .build()
        .unwrap();
    let answer = agent
        .process_direct("echo something via MCP", "cli:mcp")
        .await
        .unwrap();
    assert_eq!(answer, "The server echoed it.");

    let reqs = mock.completion_requests();
    assert!(
        reqs[0].tool_names().contains(&"mcp_everything_echo".to_owned()),
        "{:?}",
        reqs[0].tool_names()
    );
    let result = reqs[1].tool_results().pop().unwrap();
    assert_eq!(result.content, "Echo: hello from nanobot");
    manager.shutdown().await;
}
