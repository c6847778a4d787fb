//! Kill-and-restart: a turn killed mid-tool is restored from its checkpoint; completed results are kept and the
//! pending call is closed as interrupted, never re-run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use nanobot_core::{AgentLoop, TURN_INTERRUPTED_NOTE};
use nanobot_sessions::INTERRUPTED_TOOL_RESULT;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use nanobot_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::{GUARD, provider, session_lines, settings};

/// A tool that never returns (the process gets killed while it runs).
struct Hang {
    started: Arc<Notify>,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    fn description(&self) -> &str {
        "never returns"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn execute(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_turn_is_recovered_from_its_checkpoint() {
    let home = TempHome::new();
    home.write_workspace_file("notes.txt", "important notes");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("read_file", json!({"path": "notes.txt"})));
    mock.push(MockReply::tool_call("hang", json!({})));
    let started = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let hang = || {
        Arc::new(Hang {
            started: started.clone(),
            runs: runs.clone(),
        })
    };

    // "Process" A runs on its own runtime, which is torn down mid-turn (like a kill -9: no cleanup runs).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let agent_a = AgentLoop::builder(provider(&mock), settings(&home))
        .tool(hang())
        .build()
        .unwrap();
    rt.spawn(async move {
        let _ = agent_a.process_direct("summarise my notes", "cli:r").await;
    });
    tokio::time::timeout(GUARD, started.notified())
        .await
        .expect("the hang tool never started");
    rt.shutdown_background();

    // "Process" B starts on the same files.
    let agent_b = AgentLoop::builder(provider(&mock), settings(&home))
        .tool(hang())
        .build()
        .unwrap();
    assert!(
        agent_b.sessions().holds_checkpoint("cli:r"),
        "the killed turn left a checkpoint"
    );
    mock.push(MockReply::text("I was interrupted; here is what I had."));
    let answer = agent_b.process_direct("what happened?", "cli:r").await.unwrap();
    assert_eq!(answer, "I was interrupted; here is what I had.");

    let req = mock.last_request().unwrap();
    let results = req.tool_results();
    assert_eq!(results.len(), 2);
    assert!(
        results[0].content.contains("important notes"),
        "completed result restored"
    );
    assert_eq!(
        results[1].content, INTERRUPTED_TOOL_RESULT,
        "pending call closed as interrupted"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the interrupted call was never re-run"
    );

    let lines = session_lines(&agent_b, "cli:r");
    let roles: Vec<&str> = lines[1..].iter().map(|l| l["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "user",
            "assistant"
        ]
    );
    assert_eq!(lines[1]["content"], "summarise my notes");
    assert!(!agent_b.sessions().holds_checkpoint("cli:r"));
}

/// The (role, text) pairs of the conversation a request carried, system prompt left out.
fn dialogue(req: &nanobot_testkit::RecordedRequest) -> Vec<(String, String)> {
    req.messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["role"].as_str().unwrap_or_default().to_owned(), text)
        })
        .collect()
}

/// True when `dialogue` holds `question` from the user directly followed by the interruption note.
fn question_then_note(dialogue: &[(String, String)], question: &str) -> bool {
    dialogue.windows(2).any(|w| {
        w[0].0 == "user"
            && w[0].1.contains(question)
            && w[1] == ("assistant".to_owned(), TURN_INTERRUPTED_NOTE.to_owned())
    })
}

#[tokio::test]
async fn a_stopped_turn_keeps_the_question_with_a_note() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains_once(
        "what is the capital of Peru",
        MockReply::text("never sent").stall_after_chunks(0),
    );
    let agent = AgentLoop::new(provider(&mock), settings(&home)).unwrap();
    let a = agent.clone();
    let turn = tokio::spawn(async move { a.process_direct("what is the capital of Peru?", "cli:s").await });
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    assert_eq!(agent.stop_session("cli:s"), 1);
    let stopped = tokio::time::timeout(GUARD, turn).await.unwrap().unwrap().unwrap();
    assert_eq!(stopped, "", "a stopped turn has no answer");

    mock.push(MockReply::text("Lima."));
    let answer = agent.process_direct("and now?", "cli:s").await.unwrap();
    assert_eq!(answer, "Lima.");
    let sent = dialogue(&mock.last_request().unwrap());
    assert!(
        question_then_note(&sent, "capital of Peru"),
        "the next request carries the question and the note: {sent:?}"
    );
    let last = sent.last().unwrap();
    assert!(last.0 == "user" && last.1.ends_with("and now?"), "{last:?}");

    let lines = session_lines(&agent, "cli:s");
    assert_eq!(lines[1]["content"], "what is the capital of Peru?");
    assert_eq!(lines[2]["content"], TURN_INTERRUPTED_NOTE);
    assert_eq!(lines[2]["_recovery_interrupted"], true);
    assert!(!lines.iter().any(|l| l["content"] == "never sent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_killed_while_the_model_stalls_keeps_the_question() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains_once("summarise the log", MockReply::text("x").stall_after_chunks(0));

    // "Process" A is torn down while the model has not answered (no cleanup runs, like SIGKILL).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let agent_a = AgentLoop::new(provider(&mock), settings(&home)).unwrap();
    rt.spawn(async move {
        let _ = agent_a.process_direct("summarise the log please", "cli:k").await;
    });
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    rt.shutdown_background();

    let agent_b = AgentLoop::new(provider(&mock), settings(&home)).unwrap();
    mock.push(MockReply::text("Sorry, where were we?"));
    agent_b.process_direct("hello?", "cli:k").await.unwrap();
    let sent = dialogue(&mock.last_request().unwrap());
    assert!(question_then_note(&sent, "summarise the log"), "{sent:?}");
    let lines = session_lines(&agent_b, "cli:k");
    let roles: Vec<&str> = lines[1..].iter().map(|l| l["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert!(!agent_b.sessions().holds_checkpoint("cli:k"));
}

#[tokio::test]
async fn a_finished_turn_leaves_no_note_and_no_checkpoint() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("fine"));
    let agent = AgentLoop::new(provider(&mock), settings(&home)).unwrap();
    assert_eq!(agent.process_direct("all good?", "cli:f").await.unwrap(), "fine");
    assert!(!agent.sessions().holds_checkpoint("cli:f"));
    let lines = session_lines(&agent, "cli:f");
    assert!(!lines.iter().any(|l| l["content"] == TURN_INTERRUPTED_NOTE));
    assert_eq!(lines.len(), 3);
}

fn telegram(text: &str, message_id: i64) -> nanobot_bus::InboundMessage {
    let mut m = nanobot_bus::InboundMessage::new("telegram", "5", "5", text);
    m.metadata.insert("message_id".into(), json!(message_id));
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_delivered_twice_is_answered_once_and_a_killed_one_runs_again_without_a_second_copy() {
    use nanobot_core::TurnOptions;
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let started = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let hang = || {
        Arc::new(Hang {
            started: started.clone(),
            runs: runs.clone(),
        })
    };

    // Answered, then delivered again (a channel repeating an update, a bus redelivering): no second answer.
    let agent = AgentLoop::builder(provider(&mock), settings(&home))
        .tool(hang())
        .build()
        .unwrap();
    mock.push(MockReply::text("first answer"));
    let first = agent
        .process_message(telegram("hello", 9), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(first.content, "first answer");
    let again = agent
        .process_message(telegram("hello", 9), TurnOptions::default())
        .await
        .unwrap();
    // No second turn: the earlier answer, marked as such (never sent to the chat again; the API returns it).
    assert!(again.replayed);
    assert_eq!(again.content, "first answer");
    assert_eq!(mock.request_count(), 1, "no second model call");

    // A turn killed mid-tool ("process" A torn down), its message delivered again to "process" B.
    mock.push(MockReply::tool_call("hang", json!({})));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let agent_a = AgentLoop::builder(provider(&mock), settings(&home))
        .tool(hang())
        .build()
        .unwrap();
    rt.spawn(async move {
        let _ = agent_a
            .process_message(telegram("plan my week", 10), TurnOptions::default())
            .await;
    });
    tokio::time::timeout(GUARD, started.notified())
        .await
        .expect("the hang tool never started");
    rt.shutdown_background();
    let agent_b = AgentLoop::builder(provider(&mock), settings(&home))
        .tool(hang())
        .build()
        .unwrap();
    mock.push(MockReply::text("here is your week"));
    let answer = agent_b
        .process_message(telegram("plan my week", 10), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(answer.content, "here is your week");
    // The model sees what the killed attempt did (its call closed as interrupted), so it need not do it again.
    let req = mock.last_request().unwrap();
    assert!(
        req.tool_results()
            .iter()
            .any(|r| r.content == INTERRUPTED_TOOL_RESULT),
        "{:?}",
        dialogue(&req)
    );
    let lines = session_lines(&agent_b, "telegram:5");
    let stored = lines[1..]
        .iter()
        .filter(|l| l["role"] == "user" && l["content"] == "plan my week")
        .count();
    assert_eq!(stored, 1, "the question is stored once: {lines:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the killed call is not run again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_answered_message_sends_nothing_to_the_chat() {
    use nanobot_bus::{Bus, InProcessBus};
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("only once"));
    mock.set_fallback(MockReply::text("A SECOND ANSWER"));
    let agent = AgentLoop::builder(provider(&mock), settings(&home))
        .build()
        .unwrap();
    let bus = Arc::new(InProcessBus::new(16));
    agent.set_bus(bus.clone());
    let first = agent.submit(telegram("say it once", 11)).await.unwrap();
    assert_eq!(first.content, "only once");
    let again = agent.submit(telegram("say it once", 11)).await.unwrap();
    assert!(again.replayed);
    let mut sent = Vec::new();
    while bus.outbound_len() > 0 {
        sent.push(bus.consume_outbound().await.unwrap().content);
    }
    assert_eq!(sent, ["only once"], "one reply in the chat");
    assert_eq!(mock.request_count(), 1);
}

/// Issue 42: a command that changes the session, delivered again (a durable bus redelivering it after a replica
/// died, a channel repeating an update), is not run again: a repeated `/new` does not wipe what came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_delivered_twice_runs_once() {
    use nanobot_core::TurnOptions;
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = AgentLoop::new(provider(&mock), settings(&home)).unwrap();
    mock.push(MockReply::text("noted"));
    agent
        .process_message(telegram("remember the milk", 20), TurnOptions::default())
        .await
        .unwrap();
    let new = agent
        .process_message(telegram("/new", 21), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(new.content, "New session started.");
    assert!(!new.replayed);
    mock.push(MockReply::text("hello again"));
    agent
        .process_message(telegram("and eggs", 22), TurnOptions::default())
        .await
        .unwrap();
    let again = agent
        .process_message(telegram("/new", 21), TurnOptions::default())
        .await
        .unwrap();
    assert!(again.replayed, "not run a second time");
    let session = std::fs::read_to_string(agent.sessions().path_for("telegram:5")).unwrap();
    assert!(
        session.contains("and eggs"),
        "what came after the first /new is kept:\n{session}"
    );
    // A new `/new` (another message) still starts a new session.
    let fresh = agent
        .process_message(telegram("/new", 23), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(fresh.content, "New session started.");
}
