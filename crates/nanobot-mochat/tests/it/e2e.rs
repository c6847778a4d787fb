//! End to end over real Socket.IO and HTTP on loopback.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, ManagerSettings};
use nanobot_mochat::{MochatChannel, MochatSettings};
use nanobot_testkit::peers::{self, ChildGuard};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "claw-token-1";
const GUARD: Duration = Duration::from_secs(30);

struct Server {
    _child: ChildGuard,
    base: String,
    http: reqwest::Client,
}

impl Server {
    /// Starts the scripted server (`websocket` or `polling` only); `None` when the venv is missing (not on CI).
    async fn start(mode: &str) -> Result<Option<Self>> {
        let Some(python) = peers::require("python venv (python-socketio)", peers::python()) else {
            return Ok(None);
        };
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mochat_server.py");
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg(script).args([TOKEN, mode]).stdout(Stdio::piped());
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
                    return Ok::<_, anyhow::Error>(port.trim().to_string());
                }
            }
            bail!("the server ended before READY")
        })
        .await
        .context("the server did not start within 30 s")??;
        nanobot_testkit::install_ring();
        Ok(Some(Self {
            _child: child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        }))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<()> {
        self.http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn state(&self) -> Result<Value> {
        Ok(self
            .http
            .get(format!("{}/test/state", self.base))
            .send()
            .await?
            .json()
            .await?)
    }

    async fn emit(&self, event: &str, data: Value) -> Result<()> {
        self.post("/test/emit", &json!({"event": event, "data": data}))
            .await
    }

    /// Waits until `check` holds of the server's record (each request long-polls for the next change; bounded).
    async fn until(&self, what: &str, check: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut state = self.state().await?;
        loop {
            if check(&state) {
                return Ok(state);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{what} did not happen within 30 s: {state}");
            }
            let after = state["version"].as_i64().unwrap_or(-1);
            state = self
                .http
                .get(format!("{}/test/state?after={after}", self.base))
                .send()
                .await?
                .json()
                .await?;
        }
    }
}

struct Harness {
    channel: Arc<MochatChannel>,
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
    data: tempfile::TempDir,
}

impl Harness {
    fn start(server: &Server, extra: Value) -> Result<Self> {
        let mut block = json!({"enabled": true, "clawToken": TOKEN, "baseUrl": server.base,
            "agentUserId": "agent_1", "sessions": ["session_1"], "panels": ["panel_1"], "allowFrom": ["alice"],
            "socketReconnectDelayMs": 100, "socketMaxReconnectDelayMs": 400, "watchTimeoutMs": 2000});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let data = tempfile::tempdir()?;
        let channel = Arc::new(MochatChannel::new(
            MochatSettings::from_block(&block)?,
            data.path(),
        )?);
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(channel.clone());
        let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
        Ok(Self {
            channel,
            bus,
            cancel,
            manager,
            data,
        })
    }

    async fn joined(&self, n: u64) -> Result<()> {
        let mut rx = self.channel.socket_joins();
        tokio::time::timeout(GUARD, rx.wait_for(|j| *j >= n))
            .await
            .with_context(|| format!("socket join #{n} within 30 s"))??;
        Ok(())
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(GUARD, self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    async fn handled(&self, n: u64) -> Result<()> {
        let mut rx = self.channel.handled_events();
        tokio::time::timeout(GUARD, rx.wait_for(|h| *h >= n))
            .await
            .context("events not handled within 30 s")??;
        Ok(())
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(GUARD, self.manager).await;
    }
}

fn session_event(seq: u64, id: &str, author: &str, content: &str) -> Value {
    json!({"sessionId": "session_1", "cursor": seq, "events": [{"seq": seq, "type": "message.add",
        "payload": {"messageId": id, "author": author, "content": content}}]})
}

fn panel_message(id: &str, author: &str, content: &str) -> Value {
    json!({"_id": id, "author": author, "groupId": "g1", "converseId": "panel_1", "content": content,
        "authorInfo": {"nickname": format!("{author}-nick")}})
}

#[tokio::test]
async fn session_messages_over_the_socket_are_answered() -> Result<()> {
    let Some(server) = Server::start("websocket").await? else {
        return Ok(());
    };
    let h = Harness::start(&server, json!({}))?;
    h.joined(1).await?;
    let state = server.state().await?;
    assert_eq!(state["subscribe_sessions"][0]["sessionIds"], json!(["session_1"]));
    assert_eq!(state["subscribe_panels"][0]["panelIds"], json!(["panel_1"]));
    // A stranger, the agent itself, then alice: only alice is handed over (and not the history of the new
    // session that came with the subscription).
    server
        .emit(
            "claw.session.events",
            session_event(2, "m-2", "mallory", "let me in"),
        )
        .await?;
    server
        .emit(
            "claw.session.events",
            session_event(3, "m-3", "agent_1", "my own words"),
        )
        .await?;
    server
        .emit(
            "claw.session.events",
            session_event(4, "m-4", "alice", "hello agent"),
        )
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.chat_id.as_str()),
        ("alice", "session_1")
    );
    assert_eq!(inbound.content, "hello agent");
    assert_eq!(inbound.metadata["message_id"], "m-4");
    // Redelivered: handled once.
    server
        .emit(
            "claw.session.events",
            session_event(4, "m-4", "alice", "hello agent"),
        )
        .await?;
    h.handled(4).await?;
    assert_eq!(h.bus.inbound_len(), 0);

    let mut reply = OutboundMessage::reply("mochat", "session_1", "hi alice");
    reply.reply_to = Some("m-4".into());
    h.bus.publish_outbound(reply).await?;
    let state = server
        .until("the reply", |s| {
            s["sent"].as_array().is_some_and(|a| !a.is_empty())
        })
        .await?;
    assert_eq!(
        state["sent"][0],
        json!({"sessionId": "session_1", "content": "hi alice", "replyTo": "m-4", "path": "/api/claw/sessions/send"})
    );
    let cursors: Value = serde_json::from_str(&std::fs::read_to_string(
        h.data.path().join("mochat/session_cursors.json"),
    )?)?;
    assert_eq!(cursors["cursors"]["session_1"], 4);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn panels_follow_the_mention_rules_and_the_reply_delay() -> Result<()> {
    let Some(server) = Server::start("websocket").await? else {
        return Ok(());
    };
    // Mentions required, no delay: a message without a mention is dropped.
    let h = Harness::start(
        &server,
        json!({"mention": {"requireInGroups": true}, "replyDelayMode": "off"}),
    )?;
    h.joined(1).await?;
    server
        .emit(
            "notify:chat.message.add",
            panel_message("p-1", "alice", "just chatting"),
        )
        .await?;
    server
        .emit(
            "notify:chat.message.add",
            panel_message("p-2", "alice", "hey @agent_1 help"),
        )
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "hey @agent_1 help");
    assert_eq!(inbound.chat_id, "panel_1");
    assert_eq!(inbound.metadata["group_id"], "g1");
    assert_eq!(inbound.metadata["was_mentioned"], true);
    let mut reply = OutboundMessage::reply("mochat", "panel_1", "on it");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let state = server
        .until("the reply", |s| {
            s["sent"].as_array().is_some_and(|a| !a.is_empty())
        })
        .await?;
    assert_eq!(
        state["sent"][0],
        json!({"panelId": "panel_1", "content": "on it", "groupId": "g1", "path": "/api/claw/groups/panels/send"})
    );
    h.stop().await;

    // "non-mention" delay: messages without a mention wait and go together with the next mention.
    let h = Harness::start(
        &server,
        json!({"mention": {"requireInGroups": true}, "replyDelayMode": "non-mention"}),
    )?;
    h.joined(1).await?;
    server
        .emit("notify:chat.message.add", panel_message("d-1", "alice", "first"))
        .await?;
    server
        .emit("notify:chat.message.add", panel_message("d-2", "alice", "second"))
        .await?;
    h.handled(2).await?;
    assert_eq!(h.bus.inbound_len(), 0, "buffered, not handed over yet");
    server
        .emit(
            "notify:chat.message.add",
            panel_message("d-3", "alice", "<@agent_1> so?"),
        )
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        inbound.content,
        "alice-nick: first\nalice-nick: second\nalice-nick: <@agent_1> so?"
    );
    assert_eq!(inbound.metadata["buffered_count"], 3);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_socket_reconnects_after_the_server_drops_it() -> Result<()> {
    let Some(server) = Server::start("websocket").await? else {
        return Ok(());
    };
    let h = Harness::start(&server, json!({}))?;
    h.joined(1).await?;
    server
        .emit("claw.session.events", session_event(2, "r-1", "alice", "before"))
        .await?;
    assert_eq!(h.inbound().await?.content, "before");
    server.post("/test/drop", &json!({})).await?;
    h.joined(2).await?;
    let state = server.state().await?;
    assert_eq!(state["connects"], 2);
    // Re-subscribed with the cursor it reached: no history replayed as new.
    assert_eq!(state["subscribe_sessions"][1]["cursors"]["session_1"], 2);
    server
        .emit("claw.session.events", session_event(3, "r-2", "alice", "after"))
        .await?;
    assert_eq!(h.inbound().await?.content, "after");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_the_websocket_it_polls_over_http() -> Result<()> {
    let Some(server) = Server::start("polling").await? else {
        return Ok(());
    };
    let h = Harness::start(&server, json!({}))?;
    let mut polling = h.channel.polling();
    tokio::time::timeout(GUARD, polling.wait_for(|p| *p)).await??;
    // The first watch answer (history of a session without a cursor) is skipped; then a queued message arrives.
    server
        .until("two watch calls", |s| s["watch"].as_u64() >= Some(2))
        .await?;
    server
        .post(
            "/test/queue",
            &json!({"sessionId": "session_1", "event": {"seq": 2, "type": "message.add",
            "payload": {"messageId": "w-1", "author": "alice", "content": "via http"}}}),
        )
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "via http");
    assert_eq!(*h.channel.socket_joins().borrow(), 0, "the socket never joined");
    assert_eq!(server.state().await?["connects"], 0);
    h.stop().await;
    Ok(())
}
