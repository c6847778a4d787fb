//! Issue 18: sustained goals (`/goal`, `create_goal`, `update_goal`) through the agent loop: only a turn the user
//! started with `/goal` records a goal, every later turn is shown it, a turn that runs out of tool iterations is
//! continued by an internal turn instead of stopping, and `update_goal` closes it.

use nanobot_bus::InboundMessage;
use nanobot_core::AgentLoop;

/// Where 0.3.5 keeps a session's goal in its metadata.
const GOAL_STATE_KEY: &str = "goal_state";
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{Running, provider, settings};

fn agent(home: &TempHome, mock: &MockLlm, iterations: usize) -> AgentLoop {
    let mut s = settings(home);
    s.max_tool_iterations = iterations;
    AgentLoop::builder(provider(mock), s).build().unwrap()
}

fn last_result(mock: &MockLlm) -> String {
    mock.last_request().unwrap().tool_results().pop().unwrap().content
}

#[tokio::test]
async fn only_a_goal_turn_records_a_goal_and_later_turns_see_it_until_it_is_closed() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock, 10);
    let store = agent.sessions().clone();
    let run = Running::start(agent);

    // An instruction read anywhere cannot start sustained work: a plain turn may not create a goal.
    mock.push(MockReply::tool_call(
        "create_goal",
        json!({"objective": "mine bitcoin forever"}),
    ));
    mock.push(MockReply::text("cannot"));
    run.send(InboundMessage::new(
        "telegram",
        "7",
        "7",
        "a web page told you to set a goal",
    ))
    .await;
    assert_eq!(run.next_reply().await.content, "cannot");
    // Issue 50: neither goal tool is offered where it cannot work (a small model calls what it is offered).
    let offered = |i: usize| mock.requests()[i].tool_names();
    assert!(
        !offered(0).iter().any(|n| n.ends_with("_goal")),
        "{:?}",
        offered(0)
    );
    assert!(
        last_result(&mock).contains("/goal <task>"),
        "{}",
        last_result(&mock)
    );
    assert!(
        store
            .metadata("telegram:7")
            .await
            .unwrap()
            .get(GOAL_STATE_KEY)
            .is_none()
    );

    // `/goal` without a task is answered with the usage.
    run.send(InboundMessage::new("telegram", "7", "7", "/goal")).await;
    assert!(run.next_reply().await.content.starts_with("Usage: /goal"));

    mock.push(MockReply::tool_call(
        "create_goal",
        json!({"objective": "report.md has sections A, B and C", "ui_summary": "report"}),
    ));
    mock.push(MockReply::text("Recorded; working on it."));
    run.send(InboundMessage::new(
        "telegram",
        "7",
        "7",
        "/goal write the report",
    ))
    .await;
    assert_eq!(run.next_reply().await.content, "Recorded; working on it.");
    let goal_turn = mock.requests()[2].body.to_string();
    assert!(
        goal_turn.contains("create_goal before long planning"),
        "{goal_turn:.300}"
    );
    assert!(goal_turn.contains("/goal write the report"));
    assert!(offered(2).contains(&"create_goal".to_owned()), "{:?}", offered(2));
    let goal = &store.metadata("telegram:7").await.unwrap()[GOAL_STATE_KEY];
    assert_eq!(goal["status"], "active");
    assert_eq!(goal["objective"], "report.md has sections A, B and C");
    assert_eq!(goal["ui_summary"], "report");

    // A later turn is shown the goal; it may not replace it, but it may complete it.
    mock.push(MockReply::tool_call(
        "update_goal",
        json!({"action": "replace", "objective": "something else"}),
    ));
    mock.push(MockReply::tool_call(
        "update_goal",
        json!({"action": "complete", "recap": "All three sections written."}),
    ));
    mock.push(MockReply::text("Done."));
    run.send(InboundMessage::new("telegram", "7", "7", "how is it going?"))
        .await;
    assert_eq!(run.next_reply().await.content, "Done.");
    let reqs = mock.requests();
    let later = reqs[reqs.len() - 3].body.to_string();
    let later_tools = reqs[reqs.len() - 3].tool_names();
    assert!(
        later_tools.contains(&"update_goal".to_owned()) && !later_tools.contains(&"create_goal".to_owned()),
        "with a goal active: update_goal, not create_goal: {later_tools:?}"
    );
    assert!(
        later.contains("Goal (active):") && later.contains("report.md has sections A, B and C"),
        "{later:.600}"
    );
    let results = mock.last_request().unwrap().tool_results();
    let [.., replace, complete] = results.as_slice() else {
        panic!("{results:?}")
    };
    assert!(replace.content.contains("/goal <task>"), "{}", replace.content);
    assert!(
        complete.content.starts_with("Goal marked complete"),
        "{}",
        complete.content
    );
    let goal = &store.metadata("telegram:7").await.unwrap()[GOAL_STATE_KEY];
    assert_eq!(goal["status"], "completed");
    assert_eq!(goal["recap"], "All three sections written.");

    // Closed: the next turn is not shown it, and update_goal has nothing to update.
    mock.push(MockReply::tool_call("update_goal", json!({"action": "cancel"})));
    mock.push(MockReply::text("ok"));
    run.send(InboundMessage::new("telegram", "7", "7", "thanks"))
        .await;
    assert_eq!(run.next_reply().await.content, "ok");
    assert_eq!(last_result(&mock), "No active goal to update.");
    let reqs = mock.requests();
    assert!(!reqs[reqs.len() - 2].body.to_string().contains("Goal (active)"));
    assert!(
        !reqs[reqs.len() - 2]
            .tool_names()
            .iter()
            .any(|n| n.ends_with("_goal"))
    );
}

#[tokio::test]
async fn an_active_goal_continues_past_the_iteration_cap_in_an_internal_turn() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.workspace()).unwrap();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock, 2);
    let store = agent.sessions().clone();
    let run = Running::start(agent);

    // The goal turn records the goal, then keeps working until the cap (2 model calls with tools) and the
    // closing call without tools.
    mock.push(MockReply::tool_call(
        "create_goal",
        json!({"objective": "list the workspace twice"}),
    ));
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})));
    mock.push(MockReply::text("I ran out of steps."));
    // The internal continuation finishes the goal.
    mock.push(MockReply::tool_call(
        "update_goal",
        json!({"action": "complete", "recap": "listed"}),
    ));
    mock.push(MockReply::text("Finished: the workspace is listed."));
    run.send(InboundMessage::new(
        "telegram",
        "8",
        "8",
        "/goal list the workspace",
    ))
    .await;

    // The cap's note is not sent: the first reply the chat gets is the continuation's answer.
    let reply = run.next_reply().await;
    assert_eq!(reply.content, "Finished: the workspace is listed.");
    assert_eq!(
        (reply.channel.as_str(), reply.chat_id.as_str()),
        ("telegram", "8")
    );
    let reqs = mock.completion_requests();
    let continuation = reqs[3].last_user_text().unwrap();
    assert!(
        continuation.contains("Continue the active goal")
            && continuation.contains("list the workspace twice"),
        "{continuation}"
    );
    let metadata = store.metadata("telegram:8").await.unwrap();
    assert_eq!(metadata[GOAL_STATE_KEY]["status"], "completed");
    assert_eq!(metadata["_sustained_goal_continuation_rounds"], 1);
    // Stored: the continuation's message is marked internal, the cap's note is not kept.
    let history = store.history("telegram:8", 50).await.unwrap();
    assert!(
        history
            .iter()
            .all(|m| m.content_text().as_deref() != Some("I ran out of steps."))
    );
    assert!(history.iter().any(|m| m.get("_internal_continuation").is_some()));
}
