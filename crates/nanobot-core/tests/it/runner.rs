//! The runner: parallel read-only calls vs exclusive ones, hooks (vetoes), budget trimming.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_core::{AgentHook, AgentRunner, BoxError, ContextBudget, RunSpec, StopReason, ToolBatch, Veto};
use nanobot_providers::ChatMessage;
use nanobot_testkit::{MockLlm, MockReply, TempHome, ToolCallSpec};
use nanobot_tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{GUARD, provider};

/// Records start/end events; read-only probes meet at a barrier (they deadlock unless run together).
struct Probe {
    name: &'static str,
    exclusive: bool,
    barrier: Option<Arc<Barrier>>,
    log: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<AtomicUsize>,
    max_seen_by_exclusive: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "probe"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn read_only(&self) -> bool {
        !self.exclusive
    }
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    async fn execute(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        if self.exclusive {
            self.max_seen_by_exclusive.fetch_max(now, Ordering::SeqCst);
        }
        self.log.lock().unwrap().push(format!("start {}", self.name));
        if let Some(b) = &self.barrier {
            b.wait().await;
        }
        tokio::task::yield_now().await;
        self.log.lock().unwrap().push(format!("end {}", self.name));
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!("{} ok", self.name)))
    }
}

#[tokio::test]
async fn read_only_calls_run_together_exclusive_ones_alone_and_in_order() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_calls(vec![
        ToolCallSpec::new("ro_a", json!({})),
        ToolCallSpec::new("ro_b", json!({})),
        ToolCallSpec::new("excl", json!({})),
        ToolCallSpec::new("ro_c", json!({})),
    ]));
    mock.push(MockReply::text("all done"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(2));
    let reg = Arc::new(ToolRegistry::default());
    for (name, exclusive, barrier) in [
        ("ro_a", false, Some(barrier.clone())),
        ("ro_b", false, Some(barrier.clone())),
        ("excl", true, None),
        ("ro_c", false, None),
    ] {
        reg.register(Arc::new(Probe {
            name,
            exclusive,
            barrier,
            log: log.clone(),
            in_flight: in_flight.clone(),
            max_seen_by_exclusive: max_seen.clone(),
        }));
    }
    let runner = AgentRunner::new(provider(&mock), reg);
    let spec = RunSpec::new(
        vec![ChatMessage::user("go")],
        "m",
        ToolContext::new(home.workspace()),
    );
    // If ro_a and ro_b ran one after the other, the barrier would never open: the guard turns that into a failure.
    let result = tokio::time::timeout(GUARD, runner.run(spec))
        .await
        .expect("read-only calls did not run together");
    assert_eq!(result.stop_reason, StopReason::Completed);
    assert_eq!(result.content, "all done");
    let log = log.lock().unwrap().clone();
    let pos = |e: &str| log.iter().position(|x| x == e).unwrap();
    assert!(
        pos("start ro_b") < pos("end ro_a") && pos("start ro_a") < pos("end ro_b"),
        "{log:?}"
    );
    assert!(
        pos("end ro_a") < pos("start excl") && pos("end ro_b") < pos("start excl"),
        "{log:?}"
    );
    assert!(pos("end excl") < pos("start ro_c"), "{log:?}");
    assert_eq!(max_seen.load(Ordering::SeqCst), 1, "the exclusive call ran alone");
    // Results in call order.
    let ids: Vec<String> = mock.completion_requests()[1]
        .tool_results()
        .into_iter()
        .map(|r| r.content)
        .collect();
    assert_eq!(ids, ["ro_a ok", "ro_b ok", "excl ok", "ro_c ok"]);
}

struct VetoExec;

#[async_trait]
impl AgentHook for VetoExec {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        Ok(batch
            .calls
            .iter()
            .filter(|c| c.name == "exec")
            .map(|c| Veto::new(&c.id, "exec is disabled here"))
            .collect())
    }
    async fn finalize_content(&self, content: String) -> Result<String, BoxError> {
        Ok(format!("{content} [checked]"))
    }
}

#[tokio::test]
async fn hooks_can_veto_calls_and_finalize_content() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "echo hi"})));
    mock.push(MockReply::text("ok"));
    let reg = Arc::new(ToolRegistry::default());
    let ran = Arc::new(AtomicUsize::new(0));
    reg.register(Arc::new(Probe {
        name: "exec",
        exclusive: true,
        barrier: None,
        log: Arc::default(),
        in_flight: ran.clone(),
        max_seen_by_exclusive: Arc::default(),
    }));
    let runner = AgentRunner::new(provider(&mock), reg).with_hook(Arc::new(VetoExec));
    let r = runner
        .run(RunSpec::new(
            vec![ChatMessage::user("hi")],
            "m",
            ToolContext::new(home.workspace()),
        ))
        .await;
    assert_eq!(r.content, "ok [checked]");
    let sent = mock.completion_requests()[1].tool_results();
    assert!(sent[0].content.contains("refused: exec is disabled here"));
    assert_eq!(r.tools_used, ["exec"]);
}

#[tokio::test]
async fn budget_trimming_never_orphans_a_tool_result() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("fine"));
    let mut messages = vec![ChatMessage::system("system prompt")];
    for i in 0..12 {
        messages.push(ChatMessage::user(format!("question {i}")));
        messages.push(ChatMessage::assistant_tool_calls(
            None,
            vec![nanobot_providers::ToolCall::new(
                format!("c{i}"),
                "exec",
                json!({"command": "ls"}),
            )],
        ));
        let big: String = (0..600).map(|k| format!("w{k} ")).collect();
        messages.push(ChatMessage::tool_result(format!("c{i}"), "exec", big));
        messages.push(ChatMessage::assistant(format!("answer {i}")));
    }
    messages.push(ChatMessage::user("the current question"));
    let runner = AgentRunner::new(provider(&mock), Arc::new(ToolRegistry::default()));
    let mut spec = RunSpec::new(messages.clone(), "m", ToolContext::new(home.workspace()));
    spec.budget = Some(ContextBudget {
        context_window_tokens: 4000,
        max_output_tokens: 500,
        safety_margin: 200,
    });
    runner.run(spec).await;
    let req = mock.last_request().unwrap();
    let sent = req.messages();
    assert!(sent.len() < messages.len(), "history was trimmed");
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent[1]["role"], "user", "the tail starts at a user message");
    assert_eq!(sent.last().unwrap()["content"], "the current question");
    let mut open: Vec<String> = Vec::new();
    for m in sent {
        match m["role"].as_str().unwrap() {
            "assistant" => {
                open = m["tool_calls"]
                    .as_array()
                    .map(|calls| {
                        calls
                            .iter()
                            .map(|c| c["id"].as_str().unwrap().to_owned())
                            .collect()
                    })
                    .unwrap_or_default();
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap();
                assert!(open.iter().any(|o| o == id), "orphan tool result {id}");
                open.retain(|o| o != id);
            }
            _ => open.clear(),
        }
    }
}
