//! Issue 18: an exec session left running by a turn ends with `/stop` and with the agent's shutdown.

use nanobot_bus::InboundMessage;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{Running, agent};

#[tokio::test]
async fn stop_and_shutdown_end_the_exec_sessions_a_conversation_left_running() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.workspace()).unwrap();
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock));
    mock.push(MockReply::tool_call(
        "exec",
        json!({"command": "sleep 300", "yield_time_ms": 0, "timeout": 600}),
    ));
    mock.push(MockReply::tool_call("list_exec_sessions", json!({})));
    mock.push(MockReply::text("It is running."));
    run.send(InboundMessage::new("telegram", "5", "5", "start a server"))
        .await;
    assert_eq!(run.next_reply().await.content, "It is running.");
    let listed = mock.last_request().unwrap().tool_results().pop().unwrap().content;
    assert!(listed.contains("| running |"), "{listed}");

    // No turn runs now: /stop still ends the session the conversation left behind.
    run.send(InboundMessage::new("telegram", "5", "5", "/stop")).await;
    assert_eq!(run.next_reply().await.content, "⏹ Stopped 1 task(s).");
    mock.push(MockReply::tool_call("list_exec_sessions", json!({})));
    mock.push(MockReply::text("checked"));
    run.send(InboundMessage::new("telegram", "5", "5", "is it still there?"))
        .await;
    assert_eq!(run.next_reply().await.content, "checked");
    let listed = mock.last_request().unwrap().tool_results().pop().unwrap().content;
    assert_eq!(listed, "No active exec sessions.");

    // Shutdown ends the rest.
    mock.push(MockReply::tool_call(
        "exec",
        json!({"command": "sleep 300", "yield_time_ms": 0, "timeout": 600}),
    ));
    mock.push(MockReply::text("again"));
    run.send(InboundMessage::new("telegram", "5", "5", "once more"))
        .await;
    assert_eq!(run.next_reply().await.content, "again");
    run.agent.shutdown().await;
    let ctx = nanobot_tools::ToolContext::new(home.workspace()).with_session("telegram:5");
    let after = run
        .agent
        .tools()
        .execute("list_exec_sessions", json!({}), &ctx)
        .await;
    assert_eq!(after.text, "No active exec sessions.");
}
