//! A custom tool: implement `TypedTool` on an args struct (the JSON Schema the model sees is derived from it) and
//! hand it to the agent builder.
//!
//! `cargo run -p nanobot-core --example custom_tool`

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_core::Agent;
use nanobot_providers::registry::find_spec;
use nanobot_providers::{Endpoint, OpenAiCompatClient};
use nanobot_testkit::{MockLlm, MockReply};
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use serde::Deserialize;
use serde_json::json;

/// Arguments of `convert_temperature`.
#[derive(Deserialize, schemars::JsonSchema)]
struct ConvertArgs {
    /// Degrees Celsius.
    celsius: f64,
}

/// Converts Celsius to Fahrenheit.
struct ConvertTemperature;

#[async_trait]
impl TypedTool for ConvertTemperature {
    type Args = ConvertArgs;

    fn name(&self) -> &str {
        "convert_temperature"
    }

    fn description(&self) -> &str {
        "Convert a temperature from Celsius to Fahrenheit."
    }

    fn read_only(&self) -> bool {
        true // no side effects: may run in parallel with other read-only calls
    }

    async fn call(&self, args: ConvertArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.celsius < -273.15 {
            return Err(ToolError::InvalidArguments("below absolute zero".into()));
        }
        Ok(ToolOutput::text(format!(
            "{:.1} °F",
            args.celsius * 9.0 / 5.0 + 32.0
        )))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nanobot_providers::install_ring();
    let mock = MockLlm::start().await;
    // The model passes the number as a string: arguments are cast to the schema's types before the call.
    mock.push(MockReply::tool_call(
        "convert_temperature",
        json!({"celsius": "21.5"}),
    ));
    mock.push(MockReply::text("21.5 °C is 70.7 °F."));

    let spec = find_spec("openai").ok_or_else(|| anyhow::anyhow!("no openai spec"))?;
    let endpoint = Endpoint::new(
        spec.name,
        spec,
        mock.openai_base_url(),
        Some("sk-not-needed".into()),
    )?;
    let workspace = tempfile::tempdir()?;
    let agent = Agent::builder()
        .provider(Arc::new(OpenAiCompatClient::new(endpoint)))
        .workspace(workspace.path())
        .file_tools(false)
        .tool(Arc::new(ConvertTemperature))
        .model("gpt-4o-mini")
        .build()?;

    let answer = agent.run("How warm is 21.5 °C in Fahrenheit?").await?;
    println!("agent: {}", answer.content);
    let sent = mock.completion_requests();
    println!(
        "tool schema the model saw: {}",
        sent[0].tools()[0]["function"]["parameters"]
    );
    println!("tool result the model got: {}", sent[1].tool_results()[0].content);
    assert_eq!(sent[1].tool_results()[0].content, "70.7 °F");
    Ok(())
}
