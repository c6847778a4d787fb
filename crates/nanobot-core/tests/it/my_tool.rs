//! Issue 18: the `my` tool: a view of the agent's own settings, read-only unless `tools.my.allowSet`, with no
//! way to secrets or security settings, and notes kept per conversation.

use nanobot_bus::InboundMessage;
use nanobot_core::AgentLoop;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{Running, provider, settings};

fn agent(home: &TempHome, mock: &MockLlm, allow_set: bool) -> AgentLoop {
    let mut s = settings(home);
    s.my_allow_set = allow_set;
    AgentLoop::builder(provider(mock), s).build().unwrap()
}

/// Runs one turn from `sender` in telegram chat `chat` that calls `my` with each of `calls`; returns the results.
async fn calls(
    run: &Running,
    mock: &MockLlm,
    chat: &str,
    sender: &str,
    calls: Vec<serde_json::Value>,
) -> Vec<String> {
    let n = calls.len();
    for c in calls {
        mock.push(MockReply::tool_call("my", c));
    }
    mock.push(MockReply::text("ok"));
    run.send(InboundMessage::new("telegram", sender, chat, "look at yourself"))
        .await;
    assert_eq!(run.next_reply().await.content, "ok");
    let results = mock.last_request().unwrap().tool_results();
    results[results.len() - n..]
        .iter()
        .map(|r| r.content.clone())
        .collect()
}

#[tokio::test]
async fn my_shows_the_settings_and_refuses_secrets_and_changes_by_default() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, false));
    let r = calls(
        &run,
        &mock,
        "7",
        "7|alice",
        vec![
            json!({"action": "check"}),
            json!({"action": "check", "key": "request.sender_id"}),
            json!({"action": "check", "key": "providers.openai.api_key"}),
            json!({"action": "set", "key": "favorite", "value": "blue"}),
        ],
    )
    .await;
    assert!(
        r[0].contains("model: \"mock-model\"") && r[0].contains("max_iterations: 10"),
        "{}",
        r[0]
    );
    assert!(r[0].contains("restrict_to_workspace: true"), "{}", r[0]);
    assert_eq!(r[1], "request.sender_id: \"7|alice\"");
    assert!(r[2].contains("not accessible"), "{}", r[2]);
    assert!(r[3].contains("allowSet is false"), "{}", r[3]);
}

#[tokio::test]
async fn with_allow_set_notes_are_kept_per_conversation_and_settings_stay_read_only() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, true));
    let r = calls(
        &run,
        &mock,
        "7",
        "7",
        vec![
            json!({"action": "set", "key": "favorite", "value": "blue"}),
            json!({"action": "check", "key": "favorite"}),
            json!({"action": "set", "key": "max_iterations", "value": 1000}),
            json!({"action": "set", "key": "restrict_to_workspace", "value": false}),
            json!({"action": "set", "key": "model_preset", "value": "turbo"}),
            json!({"action": "set", "key": "big", "value": "x".repeat(5000)}),
        ],
    )
    .await;
    assert_eq!(r[0], "Set scratchpad.favorite = \"blue\"");
    assert_eq!(r[1], "favorite: \"blue\"");
    assert!(r[2].contains("read-only") && r[3].contains("read-only"), "{r:?}");
    assert!(r[4].contains("Could not switch model preset"), "{}", r[4]);
    assert!(r[5].contains("at most 4000 characters"), "{}", r[5]);
    // Another conversation does not see the note.
    let other = calls(
        &run,
        &mock,
        "8",
        "8",
        vec![json!({"action": "check", "key": "favorite"})],
    )
    .await;
    assert!(other[0].contains("not found"), "{}", other[0]);
}
