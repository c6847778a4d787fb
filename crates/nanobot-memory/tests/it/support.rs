//! Shared helpers.

use std::sync::Arc;
use std::time::Duration;

use nanobot_memory::{Budget, ConsolidationSettings, Consolidator, MemoryStore, SearchIndex};
use nanobot_providers::registry::find_spec;
use nanobot_providers::{Endpoint, OpenAiCompatClient, Provider, Timeouts};
use nanobot_sessions::{SessionMessage, SessionStore};
use nanobot_testkit::MockLlm;
use serde_json::{Value, json};

/// The real OpenAI-compatible client pointed at the mock.
pub(crate) fn provider(mock: &MockLlm) -> Arc<dyn Provider> {
    nanobot_providers::install_ring();
    let spec = find_spec("custom").unwrap();
    let ep = Endpoint::new("custom", spec, mock.openai_base_url(), Some("sk-test".into()))
        .unwrap()
        .with_timeouts(Timeouts {
            request: Duration::from_secs(20),
            stream_idle: Duration::from_secs(20),
            connect: Duration::from_secs(5),
            ..Timeouts::default()
        });
    Arc::new(OpenAiCompatClient::new(ep))
}

/// A workspace, a config dir, the session store and the memory store.
pub(crate) struct Env {
    pub(crate) home: tempfile::TempDir,
    pub(crate) ws: tempfile::TempDir,
    pub(crate) sessions: SessionStore,
    pub(crate) store: MemoryStore,
}

pub(crate) fn env() -> Env {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let sessions = SessionStore::new(home.path(), ws.path()).unwrap();
    let store = MemoryStore::new(ws.path());
    Env {
        home,
        ws,
        sessions,
        store,
    }
}

impl Env {
    pub(crate) fn consolidator(&self, provider: Arc<dyn Provider>, window: usize) -> Consolidator {
        let settings = ConsolidationSettings::new("test-model", Budget::Messages { window });
        Consolidator::new(self.store.clone(), self.sessions.clone(), provider, settings)
            .with_index(SearchIndex::open_in_workspace(self.ws.path()).unwrap())
    }
}

pub(crate) fn msg(v: Value) -> SessionMessage {
    SessionMessage::from_map(v.as_object().cloned().unwrap())
}

/// One user turn with a tool call: user, assistant(call), tool result, assistant answer.
pub(crate) fn turn(n: usize, fact: &str) -> Vec<SessionMessage> {
    vec![
        SessionMessage::new("user", format!("turn {n}: {fact}")),
        msg(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{n}"), "type": "function", "function": {"name": "exec", "arguments": "{\"command\": \"date\"}"}}
        ]})),
        msg(json!({"role": "tool", "tool_call_id": format!("c{n}"), "name": "exec", "content": "Mon Jan 1"})),
        SessionMessage::new("assistant", format!("noted turn {n}")),
    ]
}

pub(crate) async fn fill(env: &Env, key: &str, turns: usize) {
    for n in 0..turns {
        let fact = if n == 0 {
            "my cat is called Miso"
        } else {
            "small talk"
        };
        env.sessions.append(key, turn(n, fact)).await.unwrap();
    }
}
