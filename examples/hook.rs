//! Hooks: observe every model call, veto tool calls, post-process the answer. Several hooks run in order; a
//! failing hook is logged and skipped, never breaking the turn.
//!
//! `cargo run -p nanobot-core --example hook`

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_core::{Agent, AgentHook, BoxError, IterationEnd, ToolBatch, UsageHook, Veto};
use nanobot_providers::registry::find_spec;
use nanobot_providers::{Endpoint, OpenAiCompatClient};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

/// Refuses writes outside `notes/` and signs every answer.
struct Guard;

#[async_trait]
impl AgentHook for Guard {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        let mut vetoes = Vec::new();
        for call in batch.calls {
            println!("[hook] tool call: {}({})", call.name, call.arguments);
            let path = call.arguments.get("path").and_then(|p| p.as_str()).unwrap_or("");
            if call.name == "write_file" && !path.starts_with("notes/") {
                vetoes.push(Veto::new(&call.id, "only files under notes/ may be written"));
            }
        }
        Ok(vetoes)
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        println!(
            "[hook] iteration {} finished ({})",
            ctx.iteration, ctx.finish_reason
        );
        Ok(())
    }

    async fn finalize_content(&self, content: String) -> Result<String, BoxError> {
        Ok(format!("{content}\n— checked by Guard"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nanobot_providers::install_ring();
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("write_file", json!({"path": "secret.txt", "content": "x"})).with_usage(50, 10),
    );
    mock.push(
        MockReply::tool_call(
            "write_file",
            json!({"path": "notes/todo.txt", "content": "buy milk"}),
        )
        .with_usage(80, 12),
    );
    mock.push(MockReply::text("Saved your note in notes/todo.txt.").with_usage(120, 9));

    let spec = find_spec("openai").ok_or_else(|| anyhow::anyhow!("no openai spec"))?;
    let endpoint = Endpoint::new(
        spec.name,
        spec,
        mock.openai_base_url(),
        Some("sk-not-needed".into()),
    )?;
    let workspace = tempfile::tempdir()?;
    let usage = UsageHook::new();
    let agent = Agent::builder()
        .provider(Arc::new(OpenAiCompatClient::new(endpoint)))
        .workspace(workspace.path())
        .hook(Arc::new(Guard))
        .hook(Arc::new(usage.clone()))
        .model("gpt-4o-mini")
        .build()?;

    let answer = agent.run("Note: buy milk").await?;
    println!("agent: {}", answer.content);
    let totals = usage.totals();
    println!(
        "usage: {} requests, {} prompt + {} completion tokens",
        totals.requests, totals.prompt_tokens, totals.completion_tokens
    );
    assert!(
        !workspace.path().join("secret.txt").exists(),
        "the vetoed write never ran"
    );
    assert!(workspace.path().join("notes/todo.txt").exists());
    Ok(())
}
