//! Sessions written by the Python nanobot are replayed to the model and continued compatibly.

use nanobot_testkit::{MockLlm, MockReply, TempHome};

use crate::common::{agent, session_lines};

/// A copy of `shared/fixtures/python-nanobot/sessions/Y2xpOnRvb2x0ZXN0.jsonl` (written by nanobot-ai 0.3.5).
const FIXTURE: &str = include_str!("../fixtures/python-session-cli-tooltest.jsonl");

#[tokio::test]
async fn a_python_session_is_replayed_and_continued() {
    let original = FIXTURE;
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Welcome back."));
    let agent = agent(&home, &mock);
    let path = agent.sessions().path_for("cli:tooltest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, original).unwrap();

    assert_eq!(
        agent.process_direct("hello again", "cli:tooltest").await.unwrap(),
        "Welcome back."
    );
    let req = mock.last_request().unwrap();
    let sent = req.messages();
    assert_eq!(sent[1]["role"], "user");
    assert_eq!(sent[1]["content"], "do tools");
    // Every replayed tool call keeps its id and its result follows it; arguments stay a JSON string.
    let calls: Vec<&serde_json::Value> = sent.iter().filter(|m| m["tool_calls"].is_array()).collect();
    assert_eq!(calls.len(), 5);
    assert!(calls[0]["tool_calls"][0]["function"]["arguments"].is_string());
    assert_eq!(req.tool_results().len(), 6);
    assert!(
        sent.iter()
            .all(|m| m.get("timestamp").is_none() && m.get("latency_ms").is_none()),
        "no file-only keys on the wire"
    );

    // The file is appended to, not rewritten: the Python lines are untouched.
    let now = std::fs::read_to_string(&path).unwrap();
    assert!(now.starts_with(original));
    let lines = session_lines(&agent, "cli:tooltest");
    assert_eq!(lines.last().unwrap()["content"], "Welcome back.");
}

#[tokio::test]
async fn the_archived_context_summary_is_in_the_system_prompt() {
    // A session 0.3.5 compacted: `_last_summary` in its metadata, replay resuming at its hidden marker.
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Carrying on."));
    let agent = agent(&home, &mock);
    agent
        .sessions()
        .append(
            "cli:py",
            vec![nanobot_sessions::SessionMessage::new("user", "old question")],
        )
        .await
        .unwrap();
    agent
        .sessions()
        .update_header("cli:py", |h| {
            h.metadata.insert(
                nanobot_sessions::LAST_SUMMARY_KEY.to_owned(),
                serde_json::json!({"text": "- [ephemeral] Migrating the blog to Zola.",
                                   "last_active": "2026-01-02T10:00:00"}),
            );
        })
        .await
        .unwrap();
    agent.process_direct("what next?", "cli:py").await.unwrap();
    let system = mock.last_request().unwrap().system_text().unwrap();
    assert!(
        system.contains("[Archived Context Summary]")
            && system.contains("Migrating the blog to Zola.")
            && system.contains("2026-01-02T10:00:00"),
        "{system}"
    );
}
