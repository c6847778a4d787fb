//! Kill-and-restart: a turn killed mid-tool is restored from its checkpoint; completed results are kept and the
//! pending call is closed as interrupted, never re-run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use nanobot_core::AgentLoop;
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
        agent_b.sessions().checkpoint_path("cli:r").exists(),
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
    assert!(!agent_b.sessions().checkpoint_path("cli:r").exists());
}
