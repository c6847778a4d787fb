//! Protocol tests: the channel on a real loopback listener, driven by a plain WebSocket client (tokio-tungstenite)
//! and reqwest, with the in-process bus standing in for the agent.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt as _, StreamExt as _};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::Channel;
use nanobot_websocket::{
    SessionSummary, WebSocketChannel, WebSocketConfig, WebSocketError, WebSocketSettings, WebUiStore,
};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_util::sync::CancellationToken;

/// Hang guard for awaits that must complete (a failure, never a timing assertion).
const GUARD: Duration = Duration::from_secs(30);

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Running {
    channel: WebSocketChannel,
    bus: Arc<InProcessBus>,
    addr: SocketAddr,
    cancel: CancellationToken,
    _media: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

struct FakeStore;

#[async_trait]
impl WebUiStore for FakeStore {
    async fn sessions(&self) -> Result<Vec<SessionSummary>, WebSocketError> {
        Ok(vec![
            SessionSummary {
                key: "websocket:abc".into(),
                chat_id: Some("abc".into()),
                title: "Rust questions".into(),
                updated_at: "2026-11-23T10:00:00Z".into(),
            },
            SessionSummary {
                key: "telegram:42".into(),
                chat_id: None,
                title: "Groceries".into(),
                updated_at: "2026-11-22T10:00:00Z".into(),
            },
        ])
    }
    async fn messages(&self, key: &str) -> Result<Vec<Value>, WebSocketError> {
        Ok(vec![
            json!({"role": "user", "content": format!("hello in {key}")}),
        ])
    }
    async fn delete(&self, key: &str) -> Result<bool, WebSocketError> {
        Ok(key == "websocket:abc")
    }
    async fn memory(&self) -> Result<String, WebSocketError> {
        Ok("# Memory\n- likes tea".into())
    }
    async fn history(&self, _limit: usize) -> Result<Vec<Value>, WebSocketError> {
        Ok(vec![json!({"summary": "talked about tea"})])
    }
    async fn cron_jobs(&self) -> Result<Vec<Value>, WebSocketError> {
        Ok(vec![json!({"id": "j1", "name": "daily"})])
    }
}

async fn start(block: Value) -> Running {
    let mut block = block;
    block["port"] = json!(0);
    let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    let media = tempfile::tempdir().unwrap();
    let channel = WebSocketChannel::new(settings, media.path()).with_store(Arc::new(FakeStore));
    let bus = Arc::new(InProcessBus::new(64));
    let cancel = CancellationToken::new();
    let (c, b, k) = (channel.clone(), bus.clone(), cancel.clone());
    tokio::spawn(async move { c.run(b, k).await });
    let addr = channel.wait_bound(GUARD).await.expect("listener bound");
    Running {
        channel,
        bus,
        addr,
        cancel,
        _media: media,
    }
}

fn http() -> reqwest::Client {
    nanobot_testkit::install_ring();
    reqwest::Client::new()
}

async fn connect(addr: SocketAddr, query: &str, headers: &[(&str, &str)]) -> Result<Ws, u16> {
    let mut req = format!("ws://{addr}/?{query}").into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(axum_header(k), v.parse().unwrap());
    }
    match tokio::time::timeout(GUARD, tokio_tungstenite::connect_async(req))
        .await
        .unwrap()
    {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("unexpected handshake failure: {e}"),
    }
}

fn axum_header(name: &str) -> tokio_tungstenite::tungstenite::http::HeaderName {
    name.parse().unwrap()
}

async fn next_event(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(GUARD, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

async fn inbound(bus: &InProcessBus) -> InboundMessage {
    tokio::time::timeout(GUARD, bus.consume_inbound())
        .await
        .unwrap()
        .unwrap()
}

async fn issued_token(r: &Running, secret: &str) -> String {
    let v: Value = http()
        .get(format!("http://{}/auth/token", r.addr))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_upgrade_requires_a_valid_token() {
    let r = start(json!({"tokenIssuePath": "/auth/token", "tokenIssueSecret": "s3cret"})).await;
    assert_eq!(
        connect(r.addr, "client_id=a", &[]).await.err(),
        Some(401),
        "no token"
    );
    assert_eq!(
        connect(r.addr, "client_id=a&token=nbwt_forged", &[]).await.err(),
        Some(401),
        "wrong token"
    );
    // The issue route needs the secret.
    let status = http()
        .get(format!("http://{}/auth/token", r.addr))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
    let token = issued_token(&r, "s3cret").await;
    let mut ws = connect(r.addr, &format!("client_id=a&token={token}"), &[])
        .await
        .unwrap();
    let ready = next_event(&mut ws).await;
    assert_eq!(ready["event"], "ready");
    assert_eq!(ready["client_id"], "a");
    assert_eq!(
        connect(r.addr, &format!("client_id=a&token={token}"), &[])
            .await
            .err(),
        Some(401),
        "an issued token works once"
    );
}

#[tokio::test]
async fn a_static_token_and_the_allow_list_are_enforced() {
    let r = start(json!({"token": "static-tok", "allowFrom": ["alice"]})).await;
    assert_eq!(
        connect(r.addr, "client_id=alice&token=nope", &[]).await.err(),
        Some(401)
    );
    assert_eq!(
        connect(r.addr, "client_id=eve&token=static-tok", &[]).await.err(),
        Some(403)
    );
    assert_eq!(
        connect(r.addr, "token=static-tok", &[]).await.err(),
        Some(403),
        "no id, not on the list"
    );
    let mut ws = connect(r.addr, "client_id=alice&token=static-tok", &[])
        .await
        .unwrap();
    assert_eq!(next_event(&mut ws).await["event"], "ready");
}

#[tokio::test]
async fn browsers_of_other_origins_and_rebound_hosts_are_refused() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let own = format!("http://{}", r.addr);
    assert_eq!(
        connect(r.addr, "client_id=a", &[("origin", "http://evil.example")])
            .await
            .err(),
        Some(403)
    );
    assert_eq!(
        connect(r.addr, "client_id=a", &[("origin", "null")]).await.err(),
        Some(403)
    );
    assert_eq!(
        connect(
            r.addr,
            "client_id=a",
            &[("host", "evil.example"), ("origin", "http://evil.example")]
        )
        .await
        .err(),
        Some(421),
        "DNS rebinding: a foreign Host on a loopback listener"
    );
    let mut ws = connect(r.addr, "client_id=a", &[("origin", &own)]).await.unwrap();
    assert_eq!(next_event(&mut ws).await["event"], "ready");
    // The bootstrap refuses foreign origins and non-local Hosts too.
    let c = http();
    let s = c
        .get(format!("{own}/webui/bootstrap"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 403);
    let s = c
        .get(format!("{own}/webui/bootstrap"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 403, "a forwarded request is not this machine's browser");
}

#[tokio::test]
async fn two_connections_keep_their_chats_apart() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut a = connect(r.addr, "client_id=a", &[]).await.unwrap();
    let mut b = connect(r.addr, "client_id=b", &[]).await.unwrap();
    let chat_a = next_event(&mut a).await["chat_id"].as_str().unwrap().to_owned();
    let chat_b = next_event(&mut b).await["chat_id"].as_str().unwrap().to_owned();
    assert_ne!(chat_a, chat_b);

    send(
        &mut a,
        json!({"type": "message", "chat_id": chat_a, "content": "secret of A"}),
    )
    .await;
    let msg = inbound(&r.bus).await;
    assert_eq!(
        (msg.channel.as_str(), msg.chat_id.as_str()),
        ("websocket", chat_a.as_str())
    );
    assert_eq!(msg.session_key(), format!("websocket:{chat_a}"));
    assert_eq!(msg.sender_id, "a");
    assert!(msg.wants_stream);

    r.channel
        .send(&OutboundMessage::reply("websocket", &chat_a, "answer for A"))
        .await
        .unwrap();
    r.channel
        .send(&OutboundMessage::reply("websocket", &chat_b, "answer for B"))
        .await
        .unwrap();
    let ev = next_event(&mut a).await;
    assert_eq!(
        ev,
        json!({"event": "message", "chat_id": chat_a, "text": "answer for A"})
    );
    // B's first event after ready is its own answer: A's never reached it.
    let ev = next_event(&mut b).await;
    assert_eq!(ev["text"], "answer for B");
    assert_eq!(ev["chat_id"], chat_b.as_str());

    // Legacy plain-text frames go to the connection's default chat.
    b.send(Message::text("plain hello")).await.unwrap();
    let msg = inbound(&r.bus).await;
    assert_eq!(
        (msg.chat_id.as_str(), msg.content.as_str()),
        (chat_b.as_str(), "plain hello")
    );

    // A second tab attaching to A's chat receives its events too.
    send(&mut b, json!({"type": "attach", "chat_id": chat_a})).await;
    assert_eq!(
        next_event(&mut b).await,
        json!({"event": "attached", "chat_id": chat_a})
    );
    r.channel
        .send(&OutboundMessage::reply("websocket", &chat_a, "to both"))
        .await
        .unwrap();
    assert_eq!(next_event(&mut a).await["text"], "to both");
    assert_eq!(next_event(&mut b).await["text"], "to both");
}

#[tokio::test]
async fn streams_tool_hints_and_progress_are_separate_events() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut ws = connect(r.addr, "", &[]).await.unwrap();
    let ready = next_event(&mut ws).await;
    assert!(ready["client_id"].as_str().unwrap().starts_with("anon-"));
    send(&mut ws, json!({"type": "new_chat"})).await;
    let attached = next_event(&mut ws).await;
    assert_eq!(attached["event"], "attached");
    let chat = attached["chat_id"].as_str().unwrap().to_owned();
    let out = |kind: OutboundKind, text: &str| {
        let mut m = OutboundMessage::reply("websocket", &chat, text);
        m.kind = kind;
        m
    };
    let sid = || "t1-1".to_string();
    for m in [
        out(OutboundKind::Progress, "Let me look."),
        out(OutboundKind::ToolHint, "read_file(\"a.txt\")"),
        out(OutboundKind::StreamDelta { stream_id: sid() }, "Hel"),
        out(OutboundKind::StreamDelta { stream_id: sid() }, "lo"),
        out(OutboundKind::StreamEnd { stream_id: sid() }, "Hello"),
    ] {
        r.channel.send(&m).await.unwrap();
    }
    assert_eq!(
        next_event(&mut ws).await,
        json!({"event": "message", "chat_id": chat, "text": "Let me look.", "kind": "progress"})
    );
    assert_eq!(next_event(&mut ws).await["kind"], "tool_hint");
    assert_eq!(
        next_event(&mut ws).await,
        json!({"event": "delta", "chat_id": chat, "text": "Hel", "stream_id": "t1-1"})
    );
    assert_eq!(next_event(&mut ws).await["text"], "lo");
    assert_eq!(
        next_event(&mut ws).await,
        json!({"event": "stream_end", "chat_id": chat, "text": "Hello", "stream_id": "t1-1"})
    );
}

#[tokio::test]
async fn bad_envelopes_get_errors_and_attachments_reach_the_bus() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut ws = connect(r.addr, "client_id=a", &[]).await.unwrap();
    let chat = next_event(&mut ws).await["chat_id"].as_str().unwrap().to_owned();
    send(
        &mut ws,
        json!({"type": "message", "chat_id": "../etc", "content": "x"}),
    )
    .await;
    assert_eq!(next_event(&mut ws).await["detail"], "invalid chat_id");
    send(&mut ws, json!({"type": "message", "chat_id": chat})).await;
    assert_eq!(next_event(&mut ws).await["detail"], "missing content");
    send(&mut ws, json!({"type": "fly"})).await;
    assert_eq!(next_event(&mut ws).await["detail"], "unknown type: 'fly'");
    send(
        &mut ws,
        json!({"type": "message", "chat_id": chat, "content": "x", "media": [{"data_url": "data:application/x-sh;base64,AAAA"}]}),
    )
    .await;
    let e = next_event(&mut ws).await;
    assert_eq!(
        (e["detail"].as_str(), e["reason"].as_str()),
        (Some("attachment_rejected"), Some("mime"))
    );
    // An untrusted (non-WebUI) connection may not read the stores.
    send(
        &mut ws,
        json!({"type": "webui_request", "request_id": "r1", "action": "memory.read", "payload": {}}),
    )
    .await;
    let e = next_event(&mut ws).await;
    assert_eq!(e["ok"], false);
    assert_eq!(e["error"]["status"], 403);

    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    send(
        &mut ws,
        json!({"type": "message", "chat_id": chat, "content": "what is this?", "media": [{"data_url": png, "name": "dot.png"}], "webui": true, "turn_id": "u1"}),
    )
    .await;
    let msg = inbound(&r.bus).await;
    assert_eq!(msg.content, "what is this?");
    assert_eq!(msg.media.len(), 1);
    assert!(msg.media[0].ends_with(".png"));
    assert!(std::fs::read(&msg.media[0]).unwrap().starts_with(b"\x89PNG"));
    assert_eq!(msg.metadata["turn_id"], "u1");
    // A reply carries the turn id back.
    let mut out = OutboundMessage::reply("websocket", &chat, "a dot");
    out.metadata = msg.metadata.clone();
    r.channel.send(&out).await.unwrap();
    assert_eq!(next_event(&mut ws).await["turn_id"], "u1");
}

#[tokio::test]
async fn the_webui_bootstrap_token_unlocks_the_read_only_views() {
    let r = start(json!({})).await;
    let page = http().get(format!("http://{}/", r.addr)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let boot: Value = http()
        .get(format!("http://{}/webui/bootstrap", r.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = boot["token"].as_str().unwrap();
    assert_eq!(boot["ws_url"], format!("ws://{}/", r.addr));
    let mut ws = connect(r.addr, &format!("client_id=webui&token={token}"), &[])
        .await
        .unwrap();
    next_event(&mut ws).await;
    let mut ask = async |action: &str, payload: Value| {
        send(
            &mut ws,
            json!({"type": "webui_request", "request_id": "q1", "action": action, "payload": payload}),
        )
        .await;
        let v = next_event(&mut ws).await;
        assert_eq!(v["event"], "webui_response");
        assert_eq!(v["request_id"], "q1");
        v
    };
    let v = ask("sessions.list", json!({"query": "rust"})).await;
    assert_eq!(v["result"]["sessions"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["result"]["sessions"][0]["chat_id"], "abc");
    let v = ask("session.messages", json!({"chat_id": "abc"})).await;
    assert_eq!(v["result"]["messages"][0]["content"], "hello in websocket:abc");
    assert_eq!(
        ask("memory.read", json!({})).await["result"]["text"],
        "# Memory\n- likes tea"
    );
    assert_eq!(ask("cron.list", json!({})).await["result"]["jobs"][0]["id"], "j1");
    assert_eq!(
        ask("history.read", json!({"limit": 5})).await["result"]["entries"][0]["summary"],
        "talked about tea"
    );
    assert_eq!(
        ask("session.delete", json!({"key": "websocket:abc"})).await["result"]["deleted"],
        true
    );
    assert_eq!(ask("shell.run", json!({})).await["error"]["status"], 404);
}

#[tokio::test]
async fn a_bootstrap_with_a_configured_secret_needs_it() {
    let r = start(json!({"tokenIssueSecret": "boot-secret"})).await;
    let url = format!("http://{}/webui/bootstrap", r.addr);
    assert_eq!(http().get(&url).send().await.unwrap().status(), 401);
    let ok = http()
        .get(&url)
        .header("x-nanobot-auth", "boot-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let v: Value = ok.json().await.unwrap();
    assert!(v["token"].as_str().unwrap().starts_with("nbwt_"));
    assert!(
        !v.to_string().contains("boot-secret"),
        "the secret is never echoed"
    );
}

#[tokio::test]
async fn stopping_the_channel_closes_connections() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut ws = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut ws).await;
    assert_eq!(r.channel.connections(), 1);
    r.cancel.cancel();
    // The server closes: the stream ends (close frame or EOF).
    let end = tokio::time::timeout(GUARD, async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok());
}
