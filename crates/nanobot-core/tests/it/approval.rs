//! `tools.approval.mode`: risky calls wait for the user's yes in the same chat, a refusal or silence is the call's
//! result for the model, unattended turns refuse and park the call for `/approve ID`.

use std::time::Duration;

use nanobot_bus::InboundMessage;
use nanobot_core::{AgentLoop, ApprovalPolicy, ApprovalSettings, TurnOptions};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{Running, gated, provider, settings};

/// Waits for the question on the bus and returns its id.
async fn question(run: &Running) -> String {
    loop {
        let m = run.next().await;
        if let Some(a) = m.metadata.get("_approval") {
            assert!(m.content.contains("rm victim.txt"), "{}", m.content);
            assert!(
                m.content.contains("deletes"),
                "the reason is shown: {}",
                m.content
            );
            assert_eq!((m.channel.as_str(), m.chat_id.as_str()), ("telegram", "1"));
            return a["id"].as_str().unwrap().to_owned();
        }
    }
}

fn tool_result_seen(mock: &MockLlm, needle: &str) -> bool {
    mock.completion_requests()
        .iter()
        .any(|r| r.raw_body.contains(needle))
}

#[tokio::test]
async fn a_no_in_the_chat_keeps_the_command_from_running_and_tells_the_model() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "keep me");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Understood, I left it."));
    let run = Running::start(gated(
        &home,
        &mock,
        ApprovalPolicy::Risky,
        Duration::from_secs(600),
    ));
    run.send(InboundMessage::new("telegram", "alice", "1", "clean up"))
        .await;
    let id = question(&run).await;
    // Another person in the chat cannot answer for alice (their message is queued as an ordinary turn).
    mock.push(MockReply::text("Hi bob."));
    run.send(InboundMessage::new("telegram", "bob", "1", "yes")).await;
    run.send(InboundMessage::new("telegram", "alice", "1", "no"))
        .await;
    let mut saw_ack = false;
    loop {
        let m = run.next_reply().await;
        if m.content.contains("Refused") {
            assert!(m.content.contains(&id));
            saw_ack = true;
        } else if m.content == "Understood, I left it." {
            break;
        }
    }
    assert!(saw_ack, "the answer is acknowledged in the chat");
    assert_eq!(
        std::fs::read_to_string(home.workspace().join("victim.txt")).unwrap(),
        "keep me"
    );
    assert!(tool_result_seen(&mock, "the user refused this call"));
}

#[tokio::test]
async fn a_yes_in_the_chat_runs_the_command_once() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "delete me");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Deleted."));
    let run = Running::start(gated(
        &home,
        &mock,
        ApprovalPolicy::Risky,
        Duration::from_secs(600),
    ));
    run.send(InboundMessage::new("telegram", "alice", "1", "clean up"))
        .await;
    let id = question(&run).await;
    // The buttons' form of the answer.
    run.send(InboundMessage::new(
        "telegram",
        "alice",
        "1",
        format!("/approve {id}"),
    ))
    .await;
    loop {
        if run.next_reply().await.content == "Deleted." {
            break;
        }
    }
    assert!(
        !home.workspace().join("victim.txt").exists(),
        "the approved command ran"
    );
}

#[tokio::test]
async fn no_answer_within_the_bound_is_a_refusal_that_can_still_be_approved() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "keep me");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Nobody answered."));
    let run = Running::start(gated(&home, &mock, ApprovalPolicy::Risky, Duration::from_secs(1)));
    run.send(InboundMessage::new("telegram", "alice", "1", "clean up"))
        .await;
    let id = question(&run).await;
    loop {
        if run.next_reply().await.content == "Nobody answered." {
            break;
        }
    }
    assert!(home.workspace().join("victim.txt").exists());
    assert!(tool_result_seen(
        &mock,
        "did not answer the approval request within 1 s"
    ));
    assert!(tool_result_seen(&mock, &format!("/approve {id}")));
}

#[tokio::test]
async fn unattended_turns_refuse_and_approve_once_allows_exactly_that_call() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "x");
    home.write_workspace_file("other.txt", "x");
    let mock = MockLlm::start().await;
    let agent = gated(&home, &mock, ApprovalPolicy::Risky, Duration::from_secs(600));
    let key = "api:client-1";
    // No bus, no approver: the API's way (and cron's, heartbeat's).
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("I need your approval."));
    assert_eq!(
        agent.process_direct("clean up", key).await.unwrap(),
        "I need your approval."
    );
    assert!(home.workspace().join("victim.txt").exists());
    let refused = mock.completion_requests().last().unwrap().raw_body.clone();
    let id: String = refused
        .split("/approve ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    assert_eq!(id.len(), 6, "{refused}");

    // Another session cannot approve it.
    let elsewhere = agent
        .process_direct(&format!("/approve {id}"), "api:client-2")
        .await
        .unwrap();
    assert!(elsewhere.starts_with("No approval request"), "{elsewhere}");
    let ok = agent
        .process_direct(&format!("/approve {id}"), key)
        .await
        .unwrap();
    assert!(ok.starts_with("✓ Approved once"), "{ok}");

    // A different command is not covered by the approval; the identical one runs, once.
    mock.push(MockReply::tool_call("exec", json!({"command": "rm other.txt"})));
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Done."));
    agent.process_direct("go on", key).await.unwrap();
    assert!(home.workspace().join("other.txt").exists(), "not approved");
    assert!(
        !home.workspace().join("victim.txt").exists(),
        "approved once and run"
    );
    let bodies: Vec<String> = mock
        .completion_requests()
        .iter()
        .map(|r| r.raw_body.clone())
        .collect();
    let last = bodies.last().unwrap();
    assert_eq!(
        last.matches("nobody can be asked in this turn").count(),
        3,
        "other.txt, then the repeat"
    );
}

#[tokio::test]
async fn file_writes_outside_an_unrestricted_workspace_are_asked_about_too() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let mut s = settings(&home);
    s.restrict_to_workspace = false;
    s.approval = ApprovalSettings::new(ApprovalPolicy::Risky, Duration::from_secs(600));
    let agent = AgentLoop::new(provider(&mock), s).unwrap();
    let outside = home.workspace().parent().unwrap().join("planted.txt");
    mock.push(MockReply::tool_call(
        "write_file",
        json!({"path": "../planted.txt", "content": "x"}),
    ));
    mock.push(MockReply::tool_call(
        "write_file",
        json!({"path": "inside.txt", "content": "x"}),
    ));
    mock.push(MockReply::text("Done."));
    let opts = TurnOptions::default();
    let msg = InboundMessage::new("cli", "user", "direct", "write");
    agent.process_message(msg, opts).await.unwrap();
    assert!(!outside.exists(), "the write outside was held back");
    assert!(
        home.workspace().join("inside.txt").exists(),
        "a write inside is not asked about"
    );
}

#[tokio::test]
async fn off_asks_nothing() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "x");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Deleted."));
    let agent = gated(&home, &mock, ApprovalPolicy::Off, Duration::from_secs(1));
    assert_eq!(
        agent.process_direct("clean up", "api:x").await.unwrap(),
        "Deleted."
    );
    assert!(!home.workspace().join("victim.txt").exists());
}
