//! Embedding nanobot-core: an agent with a workspace and the built-in file tools, no config file and no bus.
//!
//! Runs without credentials: the "model" is the scripted `nanobot_testkit::MockLlm` on 127.0.0.1.
//! `cargo run -p nanobot-core --example embed`

use std::sync::Arc;

use nanobot_core::Agent;
use nanobot_providers::registry::find_spec;
use nanobot_providers::{Endpoint, OpenAiCompatClient, Provider};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nanobot_providers::install_ring();
    // A scripted model: first it writes a file, then it answers.
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "write_file",
        json!({"path": "hello.txt", "content": "Hello from nanobot!\n"}),
    ));
    mock.push(MockReply::text("I wrote hello.txt for you."));
    mock.push(MockReply::text("It contains a friendly greeting.").chunk_chars(5));

    // Any `Arc<dyn Provider>` works; here the OpenAI-compatible client pointed at the mock.
    let spec = find_spec("openai").ok_or_else(|| anyhow::anyhow!("no openai spec"))?;
    let endpoint = Endpoint::new(
        spec.name,
        spec,
        mock.openai_base_url(),
        Some("sk-not-needed".into()),
    )?;
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompatClient::new(endpoint));

    let workspace = tempfile::tempdir()?;
    let agent = Agent::builder()
        .provider(provider)
        .workspace(workspace.path())
        .model("gpt-4o-mini")
        .build()?;

    let answer = agent.run("Please create hello.txt with a greeting.").await?;
    println!("agent: {} (tools used: {:?})", answer.content, answer.tools_used);
    println!(
        "file:  {}",
        std::fs::read_to_string(workspace.path().join("hello.txt"))?.trim_end()
    );

    // The streaming variant: text arrives piece by piece.
    print!("agent (streamed): ");
    let streamed = agent
        .run_streaming("What is in it?", |delta| {
            print!("{delta}");
        })
        .await?;
    println!();
    assert_eq!(streamed.content, "It contains a friendly greeting.");
    Ok(())
}
