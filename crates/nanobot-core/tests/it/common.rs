//! Shared helpers.

use std::sync::Arc;
use std::time::Duration;

use nanobot_bus::{Bus, InProcessBus, OutboundMessage};
use nanobot_core::{AgentLoop, AgentSettings};
use nanobot_providers::registry::find_spec;
use nanobot_providers::{Endpoint, OpenAiCompatClient, Provider, Timeouts};
use nanobot_testkit::{MockLlm, TempHome};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Hang guard for awaits that must complete (a failure, never a timing assertion).
pub(crate) const GUARD: Duration = Duration::from_secs(60);

pub(crate) fn provider(mock: &MockLlm) -> Arc<dyn Provider> {
    nanobot_providers::install_ring();
    let spec = find_spec("openai").unwrap();
    let ep = Endpoint::new(spec.name, spec, mock.openai_base_url(), Some("sk-test".into()))
        .unwrap()
        .with_timeouts(Timeouts {
            request: Duration::from_secs(3600),
            stream_idle: Duration::from_secs(3600),
            connect: Duration::from_secs(10),
            total: Duration::from_secs(3600),
        });
    Arc::new(OpenAiCompatClient::new(ep))
}

pub(crate) fn settings(home: &TempHome) -> AgentSettings {
    let mut s = AgentSettings::new(home.workspace(), home.nanobot_dir(), "mock-model");
    s.max_tool_iterations = 10;
    s
}

/// An agent whose approval gate asks under `policy`, waiting `timeout` for an answer.
pub(crate) fn gated(
    home: &TempHome,
    mock: &MockLlm,
    policy: nanobot_core::ApprovalPolicy,
    timeout: std::time::Duration,
) -> AgentLoop {
    let mut s = settings(home);
    s.approval = nanobot_core::ApprovalSettings::new(policy, timeout);
    AgentLoop::new(provider(mock), s).unwrap()
}

pub(crate) fn agent(home: &TempHome, mock: &MockLlm) -> AgentLoop {
    AgentLoop::new(provider(mock), settings(home)).unwrap()
}

/// A loop running on an in-process bus; cancelled on drop.
pub(crate) struct Running {
    pub(crate) bus: Arc<InProcessBus>,
    pub(crate) agent: AgentLoop,
    cancel: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Running {
    pub(crate) fn start(agent: AgentLoop) -> Self {
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let (a, b, c) = (agent.clone(), bus.clone(), cancel.clone());
        agent.set_bus(bus.clone());
        // The simplest dispatcher an embedder writes: every message to `submit`, which decides who answers.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = c.cancelled() => break,
                    m = b.consume_inbound() => match m {
                        Some(m) => drop(a.submit(m)),
                        None => break,
                    },
                }
            }
            a.shutdown().await;
        });
        Self { bus, agent, cancel }
    }

    pub(crate) async fn send(&self, msg: nanobot_bus::InboundMessage) {
        self.bus.publish_inbound(msg).await.unwrap();
    }

    /// The next outbound message.
    pub(crate) async fn next(&self) -> OutboundMessage {
        tokio::time::timeout(GUARD, self.bus.consume_outbound())
            .await
            .expect("no outbound message")
            .unwrap()
    }

    /// The next outbound reply (skipping progress and tool hints).
    pub(crate) async fn next_reply(&self) -> OutboundMessage {
        loop {
            let m = self.next().await;
            if !m.is_progress() {
                return m;
            }
        }
    }
}

/// The stored session lines: the first metadata line, then the messages (later metadata records skipped).
pub(crate) fn session_lines(agent: &AgentLoop, key: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(agent.sessions().path_for(key)).unwrap();
    let all: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        all[0]["_type"], "metadata",
        "the first line is the metadata record"
    );
    let mut out = vec![all[0].clone()];
    out.extend(all[1..].iter().filter(|l| l["_type"] != "metadata").cloned());
    out
}
