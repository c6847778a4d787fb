//! The Mochat channel through the whole gateway: the scripted python-socketio server of nanobot-mochat's tests
//! (a real Socket.IO server playing Mochat's events and claw HTTP API) hands a session message to the gateway
//! built from `channels.mochat`, the agent answers through the mock LLM, and the answer is posted back to the
//! session; a stranger in the same session never reaches the agent.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use nanobot_gateway::Gateway;
use nanobot_testkit::peers::{self, ChildGuard};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::options;

const TOKEN: &str = "claw-token-gw";
const GUARD: Duration = Duration::from_secs(30);

/// The server's record once `check` holds of it (each request long-polls for the next change; bounded).
async fn until(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + 3 * GUARD;
    let mut after = -1_i64;
    loop {
        let state: Value = http
            .get(format!("{base}/test/state?after={after}"))
            .send()
            .await?
            .json()
            .await?;
        if check(&state) {
            return Ok(state);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what} did not happen in time: {state}");
        }
        after = state["version"].as_i64().unwrap_or(-1);
    }
}

fn session_event(seq: u64, id: &str, author: &str, content: &str) -> Value {
    json!({"sessionId": "session_1", "cursor": seq, "events": [{"seq": seq, "type": "message.add",
        "payload": {"messageId": id, "author": author, "content": content}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mochat_session_message_is_answered_from_the_gateway_config() -> anyhow::Result<()> {
    let Some(python) = peers::require("python venv (python-socketio)", peers::python()) else {
        return Ok(());
    };
    nanobot_testkit::install_ring();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nanobot-mochat/tests/it/mochat_server.py");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(script).args([TOKEN, "websocket"]).stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("mochat server", &mut cmd)?;
    let stdout = child
        .tokio_child_mut()
        .context("child")?
        .stdout
        .take()
        .context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let port = tokio::time::timeout(GUARD, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(port) = line.strip_prefix("READY ") {
                return Ok::<_, anyhow::Error>(port.trim().to_owned());
            }
        }
        bail!("the server ended before READY")
    })
    .await
    .context("the mochat server did not start within 30 s")??;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();

    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from mochat", MockReply::text("pong from the agent"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let patch = json!({"channels": {"mochat": {"enabled": true, "clawToken": TOKEN, "baseUrl": base,
        "agentUserId": "agent_1", "sessions": ["session_1"], "allowFrom": ["alice"],
        "socketReconnectDelayMs": 100, "socketMaxReconnectDelayMs": 400, "watchTimeoutMs": 2000}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;

    until(&http, &base, "the session subscription", |s| {
        s["subscribe_sessions"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await?;
    for ev in [
        session_event(2, "m-2", "mallory", "ping from mochat, mallory here"),
        session_event(3, "m-3", "alice", "ping from mochat"),
    ] {
        http.post(format!("{base}/test/emit"))
            .json(&json!({"event": "claw.session.events", "data": ev}))
            .send()
            .await?
            .error_for_status()?;
    }
    let state = until(&http, &base, "the agent's answer", |s| {
        s["sent"]
            .as_array()
            .is_some_and(|a| a.iter().any(|m| m["content"] == "pong from the agent"))
    })
    .await?;
    let sent = state["sent"].as_array().cloned().unwrap_or_default();
    let answers: Vec<_> = sent
        .iter()
        .filter(|m| m["content"] == "pong from the agent")
        .collect();
    assert_eq!(answers.len(), 1, "{sent:?}");
    assert_eq!(answers[0]["sessionId"], "session_1");
    assert!(!sent.iter().any(|m| m["content"] == "UNEXPECTED"), "{sent:?}");
    // Only alice's message reached the model: mallory is not on allowFrom.
    let asked: Vec<String> = mock
        .requests()
        .iter()
        .flat_map(|r| r.messages().to_vec())
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(!asked.iter().any(|c| c.contains("mallory")), "{asked:?}");
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}
