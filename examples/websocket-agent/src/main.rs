//! An agent behind the websocket channel (and its WebUI), composed by hand from the nanobot crates.
//!
//! ```text
//! LLM_URL=http://127.0.0.1:8080/v1 LLM_MODEL=qwen3 \
//!   cargo run --manifest-path examples/websocket-agent/Cargo.toml -- /tmp/agent-workspace
//! ```
//!
//! then open <http://127.0.0.1:8765/> (the WebUI) or connect a websocket client to `ws://127.0.0.1:8765/`.
//! `LLM_URL` is any OpenAI-compatible endpoint (llama.cpp, vLLM, Ollama, a hosted one with `LLM_API_KEY`).
//!
//! What it shows: the agent (`nanobot_core::AgentLoop`) and the channels never see each other. The channel
//! manager publishes what users send onto the bus; one loop here takes each inbound message off the bus and
//! submits it to the agent, which publishes its answer back onto the bus for the manager to deliver.

use std::sync::Arc;

use anyhow::Context;
use nanobot_bus::{Bus, InProcessBus};
use nanobot_channels::{ChannelManager, ManagerSettings};
use nanobot_core::{AgentLoop, AgentSettings};
use nanobot_providers::{OpenAiCompatClient, Provider};
use nanobot_websocket::{WebSocketChannel, WebSocketConfig, WebSocketSettings};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A program reads its environment; the libraries are handed what they need.
    let workspace = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .context("usage: websocket-agent <workspace directory>")?;
    let url = std::env::var("LLM_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/v1".into());
    let model = std::env::var("LLM_MODEL").unwrap_or_else(|_| "default".into());
    let key = std::env::var("LLM_API_KEY").ok();

    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create the workspace {}", workspace.display()))?;
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompatClient::for_url(url, key)?);

    // The bus both sides meet on.
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(256));

    // The agent: files, sessions and memory under the workspace; no MCP (default features off).
    let settings = AgentSettings::new(&workspace, workspace.join(".nanobot"), model);
    let agent = AgentLoop::builder(provider, settings).bus(bus.clone()).build()?;

    // The channel: the same JSON block as `channels.websocket` in config.json (loopback, port 8765).
    let block = serde_json::json!({"host": "127.0.0.1", "port": 8765, "streaming": true});
    let ws_settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block)?)?;
    let mut channels = ChannelManager::new(ManagerSettings::new(true, true, 3));
    channels.add(Arc::new(WebSocketChannel::new(ws_settings, workspace.join(".nanobot/media"))));

    let cancel = CancellationToken::new();
    let manager = tokio::spawn(channels.run(bus.clone(), cancel.clone()));

    // The dispatcher: every inbound message becomes a turn; the agent answers on the bus.
    let dispatcher = {
        let (agent, bus, cancel) = (agent.clone(), bus.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    () = cancel.cancelled() => break,
                    m = bus.consume_inbound() => match m { Some(m) => m, None => break },
                };
                let turn = agent.submit(msg);
                tokio::spawn(async move {
                    if let Err(e) = turn.await {
                        eprintln!("turn failed: {e}");
                    }
                });
            }
        })
    };

    println!("listening on ws://127.0.0.1:8765/ (WebUI at http://127.0.0.1:8765/); Ctrl-C stops");
    tokio::signal::ctrl_c().await?;
    cancel.cancel();
    agent.shutdown().await;
    bus.close();
    let _ = tokio::join!(dispatcher, manager);
    Ok(())
}
