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
    ChatOwner, SessionSummary, WebSocketChannel, WebSocketConfig, WebSocketError, WebSocketSettings,
    WebUiStore,
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
    store: Arc<FakeStore>,
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

#[derive(Default)]
struct FakeStore {
    /// Keys deleted so far.
    deleted: tokio::sync::watch::Sender<Vec<String>>,
    /// Sessions created (forks).
    created: std::sync::Mutex<Vec<(String, Vec<Value>)>>,
    /// Recorded chat owners, by session key (`websocket:abc` exists with none recorded).
    owners: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

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
            json!({"role": "assistant", "content": "hi"}),
            json!({"role": "user", "content": "second"}),
            json!({"role": "assistant", "content": "ok"}),
        ])
    }
    async fn delete(&self, key: &str) -> Result<bool, WebSocketError> {
        self.deleted.send_modify(|d| d.push(key.to_string()));
        Ok(key == "websocket:abc")
    }
    async fn settings(&self) -> Result<Value, WebSocketError> {
        Ok(json!({"agent": {"model": "mock-model", "has_api_key": true}, "providers": []}))
    }
    async fn create(&self, key: &str, messages: Vec<Value>) -> Result<(), WebSocketError> {
        self.created.lock().unwrap().push((key.to_string(), messages));
        Ok(())
    }
    async fn memory(&self) -> Result<String, WebSocketError> {
        Ok("# Memory\n- likes tea".into())
    }
    async fn chat_owner(&self, key: &str) -> Result<ChatOwner, WebSocketError> {
        Ok(match self.owners.lock().unwrap().get(key) {
            Some(c) => ChatOwner::Client(c.clone()),
            None if key == "websocket:legacy" => ChatOwner::Unrecorded,
            None => ChatOwner::Nobody,
        })
    }
    async fn set_chat_owner(&self, key: &str, client: &str) -> Result<(), WebSocketError> {
        self.owners
            .lock()
            .unwrap()
            .insert(key.to_owned(), client.to_owned());
        Ok(())
    }
    async fn history(&self, _limit: usize) -> Result<Vec<Value>, WebSocketError> {
        Ok(vec![json!({"summary": "talked about tea"})])
    }
    async fn cron_jobs(&self) -> Result<Vec<Value>, WebSocketError> {
        Ok(vec![json!({"id": "j1", "name": "daily"})])
    }
}

/// Returns once the channel has no connection left (a closed one is gone), within the guard.
async fn no_connections(r: &Running) {
    tokio::time::timeout(GUARD, async {
        while r.channel.connections() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the closed connection is gone");
}

async fn start(block: Value) -> Running {
    let mut block = block;
    block["port"] = json!(0);
    let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    start_with(settings).await
}

async fn start_with(settings: WebSocketSettings) -> Running {
    let media = tempfile::tempdir().unwrap();
    let store = Arc::new(FakeStore::default());
    let channel = WebSocketChannel::new(settings, media.path()).with_store(store.clone());
    let bus = Arc::new(InProcessBus::new(64));
    let cancel = CancellationToken::new();
    let (c, b, k) = (channel.clone(), bus.clone(), cancel.clone());
    tokio::spawn(async move { c.run(b, k).await });
    let addr = channel.wait_bound(GUARD).await.expect("listener bound");
    Running {
        channel,
        store,
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
    issue(r, secret, "").await
}

/// A token from the issue route (`query` appended to it, e.g. `?client_id=alice`).
async fn issue(r: &Running, secret: &str, query: &str) -> String {
    let v: Value = http()
        .get(format!("http://{}/auth/token{query}", r.addr))
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

    // B cannot attach A's chat; a second tab of A's can, and receives its events too.
    send(&mut b, json!({"type": "attach", "chat_id": chat_a})).await;
    assert_eq!(
        next_event(&mut b).await,
        json!({"event": "error", "detail": "access_denied", "chat_id": chat_a})
    );
    let mut a2 = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut a2).await;
    send(&mut a2, json!({"type": "attach", "chat_id": chat_a})).await;
    assert_eq!(
        next_event(&mut a2).await,
        json!({"event": "attached", "chat_id": chat_a})
    );
    r.channel
        .send(&OutboundMessage::reply("websocket", &chat_a, "to both"))
        .await
        .unwrap();
    assert_eq!(next_event(&mut a).await["text"], "to both");
    assert_eq!(next_event(&mut a2).await["text"], "to both");
}

/// Issue 42: a client between two connections (or reconnecting to the replica that took the channel over) gets
/// the answers that came meanwhile when it attaches the chat again, once; breadcrumbs and stream pieces are not
/// kept. Every message carries an id of its own, so a durable bus delivering it twice has it answered once.
#[tokio::test]
async fn answers_for_a_chat_with_no_connection_wait_for_its_next_one() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut a = connect(r.addr, "client_id=a", &[]).await.unwrap();
    let chat = next_event(&mut a).await["chat_id"].as_str().unwrap().to_owned();
    for text in ["one", "two"] {
        send(
            &mut a,
            json!({"type": "message", "chat_id": chat, "content": text}),
        )
        .await;
    }
    let (first, second) = (inbound(&r.bus).await, inbound(&r.bus).await);
    let id = |m: &InboundMessage| m.delivery_id().expect("a message id");
    assert!(id(&first).starts_with(&format!("websocket:{chat}:")));
    assert_ne!(id(&first), id(&second));

    a.close(None).await.unwrap();
    no_connections(&r).await;
    let mut progress = OutboundMessage::reply("websocket", &chat, "thinking");
    progress.kind = OutboundKind::Progress;
    let mut delta = OutboundMessage::reply("websocket", &chat, "ans");
    delta.kind = OutboundKind::StreamDelta {
        stream_id: "s1".into(),
    };
    let mut end = OutboundMessage::reply("websocket", &chat, "answer two");
    end.kind = OutboundKind::StreamEnd {
        stream_id: "s1".into(),
    };
    for m in [
        progress,
        OutboundMessage::reply("websocket", &chat, "answer one"),
        delta,
        end,
    ] {
        r.channel.send(&m).await.unwrap();
    }

    // Another client cannot collect them.
    let mut b = connect(r.addr, "client_id=b", &[]).await.unwrap();
    next_event(&mut b).await;
    send(&mut b, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(next_event(&mut b).await["detail"], "access_denied");

    // The client, reconnected: told it is attached, then the answers in order, then what comes next.
    let mut a2 = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut a2).await;
    send(&mut a2, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(
        next_event(&mut a2).await,
        json!({"event": "attached", "chat_id": chat})
    );
    assert_eq!(
        next_event(&mut a2).await,
        json!({"event": "message", "chat_id": chat, "text": "answer one"})
    );
    let ev = next_event(&mut a2).await;
    assert_eq!(
        (ev["event"].as_str(), ev["text"].as_str()),
        (Some("stream_end"), Some("answer two"))
    );
    r.channel
        .send(&OutboundMessage::reply("websocket", &chat, "live"))
        .await
        .unwrap();
    assert_eq!(next_event(&mut a2).await["text"], "live");

    // Handed over once: a second tab attaching later gets only what comes after.
    let mut a3 = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut a3).await;
    send(&mut a3, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(next_event(&mut a3).await["event"], "attached");
    r.channel
        .send(&OutboundMessage::reply("websocket", &chat, "after"))
        .await
        .unwrap();
    assert_eq!(next_event(&mut a3).await["text"], "after");
}

/// A durable bus's receipt that reports what became of it: `<name> settled` or `<name> dropped` (handed back).
struct Recorded {
    name: &'static str,
    log: tokio::sync::watch::Sender<Vec<String>>,
    settled: bool,
}

#[async_trait]
impl nanobot_bus::Receipt for Recorded {
    async fn settle(mut self: Box<Self>, _how: nanobot_bus::Settlement) {
        self.settled = true;
        let line = format!("{} settled", self.name);
        self.log.send_modify(|l| l.push(line));
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if !self.settled {
            let line = format!("{} dropped", self.name);
            self.log.send_modify(|l| l.push(line));
        }
    }
}

/// Issue 42: an answer held for a client that is away keeps its durable bus receipt until it is sent (then it is
/// settled), and goes back to the bus when the channel stops first (its receipt dropped unsettled): a replica that
/// dies holding it leaves it to the channel's next holder.
#[tokio::test]
async fn a_held_answer_is_settled_once_sent_and_handed_back_when_the_channel_stops() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let log = tokio::sync::watch::Sender::new(Vec::<String>::new());
    let receipt = |name| {
        Some(Box::new(Recorded {
            name,
            log: log.clone(),
            settled: false,
        }) as Box<dyn nanobot_bus::Receipt>)
    };
    let seen = |want: &'static str| {
        let mut rx = log.subscribe();
        async move {
            tokio::time::timeout(GUARD, rx.wait_for(|l| l.iter().any(|x| x == want)))
                .await
                .expect("in time")
                .expect("log open");
        }
    };
    let mut a = connect(r.addr, "client_id=a", &[]).await.unwrap();
    let chat = next_event(&mut a).await["chat_id"].as_str().unwrap().to_owned();
    // Attached: the answer goes out at once and the manager settles the receipt it leaves.
    let mut live = receipt("live");
    r.channel
        .send_receipted(&OutboundMessage::reply("websocket", &chat, "now"), &mut live)
        .await
        .unwrap();
    assert!(live.is_some(), "a sent answer's receipt is left to the manager");
    assert_eq!(next_event(&mut a).await["text"], "now");
    live.expect("left").settle(nanobot_bus::Settlement::Done).await;

    a.close(None).await.unwrap();
    no_connections(&r).await;
    let mut held = receipt("held");
    r.channel
        .send_receipted(&OutboundMessage::reply("websocket", &chat, "later"), &mut held)
        .await
        .unwrap();
    assert!(held.is_none(), "the channel keeps a held answer's receipt");
    assert!(
        !log.borrow().iter().any(|l| l.starts_with("held")),
        "{:?}",
        log.borrow()
    );
    let mut a2 = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut a2).await;
    send(&mut a2, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(next_event(&mut a2).await["event"], "attached");
    assert_eq!(next_event(&mut a2).await["text"], "later");
    seen("held settled").await;

    a2.close(None).await.unwrap();
    no_connections(&r).await;
    let mut orphan = receipt("orphan");
    r.channel
        .send_receipted(
            &OutboundMessage::reply("websocket", &chat, "nobody came"),
            &mut orphan,
        )
        .await
        .unwrap();
    assert!(orphan.is_none());
    r.cancel.cancel();
    seen("orphan dropped").await;
    assert_eq!(*log.borrow(), ["live settled", "held settled", "orphan dropped"]);
}

/// Issues a token bound to `client` (`?client_id=`).
async fn token_for(r: &Running, client: &str) -> String {
    issue(r, "s3cret", &format!("?client_id={client}")).await
}

/// Issue 41: a chat belongs to the client that made it, as its token proves; another client with its own valid
/// token cannot attach it, send into it, fork it or claim its name, and a token bound to one client cannot speak
/// as another. The owner's own reconnection (a new token for the same client) reaches it again.
#[tokio::test]
async fn chats_belong_to_the_client_their_token_names() {
    let r = start(json!({"tokenIssuePath": "/auth/token", "tokenIssueSecret": "s3cret"})).await;
    let mut alice = connect(r.addr, &format!("token={}", token_for(&r, "alice").await), &[])
        .await
        .unwrap();
    let ready = next_event(&mut alice).await;
    assert_eq!(ready["client_id"], "alice", "the token names the client");
    let chat = ready["chat_id"].as_str().unwrap().to_owned();
    send(
        &mut alice,
        json!({"type": "message", "chat_id": chat, "content": "canary-7"}),
    )
    .await;
    let msg = inbound(&r.bus).await;
    assert_eq!(
        (msg.sender_id.as_str(), msg.content.as_str()),
        ("alice", "canary-7")
    );
    // Alice also names a chat herself: it is hers too.
    send(
        &mut alice,
        json!({"type": "message", "chat_id": "alice-notes", "content": "mine"}),
    )
    .await;
    assert_eq!(inbound(&r.bus).await.chat_id, "alice-notes");

    // A token bound to mallory cannot declare itself alice.
    let mallory_token = token_for(&r, "mallory").await;
    assert_eq!(
        connect(r.addr, &format!("client_id=alice&token={mallory_token}"), &[])
            .await
            .err(),
        Some(403)
    );
    let mut mallory = connect(r.addr, &format!("token={}", token_for(&r, "mallory").await), &[])
        .await
        .unwrap();
    next_event(&mut mallory).await;
    let denied = |c: &str| json!({"event": "error", "detail": "access_denied", "chat_id": c});
    for target in [chat.as_str(), "alice-notes"] {
        send(&mut mallory, json!({"type": "attach", "chat_id": target})).await;
        assert_eq!(next_event(&mut mallory).await, denied(target));
        send(
            &mut mallory,
            json!({"type": "message", "chat_id": target, "content": "what was the canary?"}),
        )
        .await;
        assert_eq!(next_event(&mut mallory).await, denied(target));
        send(
            &mut mallory,
            json!({"type": "fork_chat", "source_chat_id": target, "before_user_index": 1}),
        )
        .await;
        assert_eq!(next_event(&mut mallory).await, denied(target));
    }
    // A chat from before chats had owners is the WebUI's alone.
    send(&mut mallory, json!({"type": "attach", "chat_id": "legacy"})).await;
    assert_eq!(next_event(&mut mallory).await, denied("legacy"));
    // An unbound token is a client of its own.
    let unbound = issued_token(&r, "s3cret").await;
    let mut anon = connect(r.addr, &format!("client_id=alice&token={unbound}"), &[])
        .await
        .unwrap();
    next_event(&mut anon).await;
    send(&mut anon, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(next_event(&mut anon).await, denied(&chat));
    // Control: mallory's own chat works, and nothing mallory sent reached the agent.
    send(
        &mut mallory,
        json!({"type": "message", "chat_id": "m-1", "content": "hello"}),
    )
    .await;
    let msg = inbound(&r.bus).await;
    assert_eq!(
        (msg.sender_id.as_str(), msg.chat_id.as_str(), msg.content.as_str()),
        ("mallory", "m-1", "hello")
    );

    // Alice reconnects with a new token: her chat (recorded in the store) is hers again.
    drop(alice);
    let mut again = connect(r.addr, &format!("token={}", token_for(&r, "alice").await), &[])
        .await
        .unwrap();
    next_event(&mut again).await;
    send(&mut again, json!({"type": "attach", "chat_id": chat})).await;
    assert_eq!(
        next_event(&mut again).await,
        json!({"event": "attached", "chat_id": chat})
    );
    assert_eq!(
        r.store
            .owners
            .lock()
            .unwrap()
            .get(&format!("websocket:{chat}"))
            .map(String::as_str),
        Some("alice")
    );
    // The WebUI (the machine's owner) reaches every chat.
    let boot = bootstrap_with(&r, "s3cret").await;
    let mut ui = connect(r.addr, &format!("token={}", boot["token"].as_str().unwrap()), &[])
        .await
        .unwrap();
    next_event(&mut ui).await;
    for target in [chat.as_str(), "legacy"] {
        send(&mut ui, json!({"type": "attach", "chat_id": target})).await;
        assert_eq!(
            next_event(&mut ui).await,
            json!({"event": "attached", "chat_id": target})
        );
    }
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
    // The client's turn id is the message's id (sent again after a reconnect, it is recognised); without one,
    // each message has an id of its own.
    assert_eq!(msg.metadata["message_id"], "turn-u1");
    for _ in 0..2 {
        send(
            &mut ws,
            json!({"type": "message", "chat_id": chat, "content": "no turn id"}),
        )
        .await;
    }
    let (a, b) = (inbound(&r.bus).await, inbound(&r.bus).await);
    assert_ne!(a.metadata["message_id"], b.metadata["message_id"]);
    assert!(a.metadata["message_id"].as_str().is_some_and(|id| id.len() == 32));
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
    assert_eq!(
        ask("session.delete", json!({"key": "telegram:42"})).await["error"]["status"],
        404
    );
    assert_eq!(
        ask("session.messages", json!({"key": "telegram:42"})).await["error"]["status"],
        404
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

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM files into `dir`.
fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_pem = cert.cert.pem();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, &cert_pem).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c, k, cert.cert.der().to_vec())
}

#[tokio::test]
async fn the_listener_serves_wss_with_the_configured_certificate() {
    nanobot_testkit::install_ring();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = self_signed(dir.path());
    let block = json!({"port": 0, "websocketRequiresToken": false,
        "sslCertfile": cert.to_str().unwrap(), "sslKeyfile": key.to_str().unwrap()});
    let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    let r = start_with(settings).await;

    // HTTPS: the page and the bootstrap, which names a wss:// URL.
    let pem = std::fs::read(&cert).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let port = r.addr.port();
    let boot: Value = client
        .get(format!("https://localhost:{port}/webui/bootstrap"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(boot["ws_url"], format!("wss://localhost:{port}/"));

    // A rustls client trusting only this certificate gets a WebSocket over TLS.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(der)).unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut ws, _) = tokio::time::timeout(
        GUARD,
        tokio_tungstenite::client_async(format!("wss://localhost:{port}/?client_id=t"), tls),
    )
    .await
    .unwrap()
    .unwrap();
    let ready = tokio::time::timeout(GUARD, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ready: Value = serde_json::from_str(ready.to_text().unwrap()).unwrap();
    assert_eq!(ready["event"], "ready");

    // Plain HTTP to the TLS port gets no page.
    assert!(
        http()
            .get(format!("http://{}/", r.addr))
            .timeout(GUARD)
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn tls_settings_errors_name_the_key_and_file() {
    let half = json!({"sslCertfile": "/tmp/cert.pem"});
    let err = WebSocketSettings::from_config(&WebSocketConfig::from_json(&half).unwrap()).unwrap_err();
    assert!(err.to_string().contains("sslKeyfile"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pem");
    let (cert, _, _) = self_signed(dir.path());
    let bad_key = dir.path().join("bad-key.pem");
    std::fs::write(&bad_key, "not a key, but a secret that must not be echoed").unwrap();
    for (c, k, want) in [
        (missing.clone(), bad_key.clone(), "sslCertfile"),
        (cert.clone(), bad_key.clone(), "sslKeyfile"),
    ] {
        let block = json!({"port": 0, "sslCertfile": c.to_str().unwrap(), "sslKeyfile": k.to_str().unwrap()});
        let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
        let media = tempfile::tempdir().unwrap();
        let channel = WebSocketChannel::new(settings, media.path());
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
        let err = tokio::time::timeout(GUARD, channel.run(bus, CancellationToken::new()))
            .await
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
        assert!(!err.contains("must not be echoed"), "{err}");
    }
}

/// Settings with a short ping interval and pong timeout (the config's minimum is 5 s each).
fn quick_pings() -> WebSocketSettings {
    let block = json!({"port": 0, "websocketRequiresToken": false});
    let mut settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    settings.ping_interval = Duration::from_millis(100);
    settings.ping_timeout = Duration::from_secs(1);
    settings
}

#[tokio::test]
async fn a_client_that_never_answers_pings_is_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let r = start_with(quick_pings()).await;
    // A raw client: the handshake, then it only reads (and so never sends a pong).
    let mut tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let head = format!(
        "GET /?client_id=mute HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        r.addr
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(GUARD, tcp.read_to_end(&mut got))
        .await
        .expect("the server closes a silent connection")
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(r.channel.connections(), 0);
}

#[tokio::test]
async fn a_client_that_answers_pings_stays_connected() {
    let r = start_with(quick_pings()).await;
    let mut ws = connect(r.addr, "client_id=alive", &[]).await.unwrap();
    // Reading answers each ping with a pong (tungstenite does so while reading). Thirty pings (3 s) span almost
    // three times the silence bound (1.1 s); the connection is still there.
    let mut pings = 0;
    while pings < 30 {
        match tokio::time::timeout(GUARD, ws.next()).await.unwrap() {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(_)) => {}
            other => panic!("the connection ended: {other:?}"),
        }
    }
    assert_eq!(r.channel.connections(), 1);
}

async fn bootstrap(r: &Running) -> Value {
    bootstrap_with(r, "").await
}

/// `/webui/bootstrap`'s answer, sending `secret` as the bearer token when it is not empty.
async fn bootstrap_with(r: &Running, secret: &str) -> Value {
    let mut req = http().get(format!("http://{}/webui/bootstrap", r.addr));
    if !secret.is_empty() {
        req = req.bearer_auth(secret);
    }
    req.send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn the_http_api_reads_sessions_with_the_bootstrap_api_token() {
    let r = start(json!({})).await;
    let boot = bootstrap(&r).await;
    let api = boot["api_token"].as_str().unwrap().to_string();
    let socket_token = boot["token"].as_str().unwrap().to_string();
    assert!(api.starts_with("nbwt_") && api != socket_token);
    let base = format!("http://{}", r.addr);
    let get = |path: &str, token: Option<&str>| {
        let mut req = http().get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(get("/api/sessions", None).await.unwrap().status(), 401);
    assert_eq!(
        get("/api/sessions", Some("nbwt_forged")).await.unwrap().status(),
        401
    );
    assert_eq!(
        get("/api/sessions", Some(&socket_token)).await.unwrap().status(),
        401,
        "a socket token is not an API token"
    );
    let v: Value = get("/api/sessions?query=rust", Some(&api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["sessions"][0]["key"], "websocket:abc");
    // The token works again (until it expires), and as `?token=` too.
    let v: Value = get(&format!("/api/sessions?token={api}"), None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Only this channel's chats: the store's Telegram session is neither listed nor readable nor deletable.
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["sessions"][0]["key"], "websocket:abc");
    assert_eq!(
        get("/api/sessions/telegram%3A42/webui-thread", Some(&api))
            .await
            .unwrap()
            .status(),
        404
    );
    let status = http()
        .post(format!("{base}/api/sessions/telegram%3A42/delete"))
        .bearer_auth(&api)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404);
    assert!(
        !r.store.deleted.borrow().iter().any(|k| k == "telegram:42"),
        "another channel's session reached the store's delete"
    );
    let v: Value = get("/api/sessions/websocket%3Aabc/webui-thread", Some(&api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["sessionKey"], "websocket:abc");
    assert_eq!(v["messages"][0]["content"], "hello in websocket:abc");
    let v: Value = get("/api/commands", Some(&api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["commands"].is_array());
    let v: Value = get("/api/settings", Some(&api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["agent"]["model"], "mock-model");
    assert_eq!(get("/api/settings", None).await.unwrap().status(), 401);
    assert_eq!(get("/api/nope", Some(&api)).await.unwrap().status(), 404);
    assert_eq!(
        get("/api/sessions/%00/webui-thread", Some(&api))
            .await
            .unwrap()
            .status(),
        400
    );
    // Deleting needs POST.
    assert_eq!(
        get("/api/sessions/websocket%3Aabc/delete", Some(&api))
            .await
            .unwrap()
            .status(),
        405
    );
    let v: Value = http()
        .post(format!("{base}/api/sessions/websocket%3Aabc/delete"))
        .bearer_auth(&api)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["deleted"], true);
    // Another site's page cannot read it, even holding a token.
    let evil = http()
        .get(format!("{base}/api/sessions"))
        .bearer_auth(&api)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);
    // An API token does not open the socket.
    assert_eq!(
        connect(r.addr, &format!("client_id=webui&token={api}"), &[])
            .await
            .err(),
        Some(401)
    );
}

#[tokio::test]
async fn temporary_chats_are_discarded_with_their_session() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut ws = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut ws).await;
    send(&mut ws, json!({"type": "new_temporary_chat"})).await;
    let attached = next_event(&mut ws).await;
    assert_eq!(attached["event"], "attached");
    assert_eq!(attached["temporary"], true);
    let chat = attached["chat_id"].as_str().unwrap().to_string();
    send(
        &mut ws,
        json!({"type": "message", "chat_id": chat, "content": "secret plan"}),
    )
    .await;
    assert_eq!(inbound(&r.bus).await.chat_id, chat);

    // Someone else cannot discard it.
    let mut other = connect(r.addr, "client_id=b", &[]).await.unwrap();
    next_event(&mut other).await;
    send(
        &mut other,
        json!({"type": "discard_temporary_chat", "chat_id": chat}),
    )
    .await;
    assert_eq!(
        next_event(&mut other).await["detail"],
        "temporary_chat_unavailable"
    );

    send(
        &mut ws,
        json!({"type": "discard_temporary_chat", "chat_id": chat}),
    )
    .await;
    let done = next_event(&mut ws).await;
    assert_eq!(
        (done["event"].as_str(), done["chat_id"].as_str()),
        (Some("temporary_chat_discarded"), Some(chat.as_str()))
    );
    assert!(r.store.deleted.borrow().contains(&format!("websocket:{chat}")));
    send(
        &mut ws,
        json!({"type": "discard_temporary_chat", "chat_id": chat}),
    )
    .await;
    assert_eq!(next_event(&mut ws).await["detail"], "temporary_chat_unavailable");

    // A temporary chat left open goes when its connection does.
    send(&mut ws, json!({"type": "new_temporary_chat"})).await;
    let second = next_event(&mut ws).await["chat_id"].as_str().unwrap().to_string();
    drop(ws);
    let key = format!("websocket:{second}");
    let mut deleted = r.store.deleted.subscribe();
    tokio::time::timeout(GUARD, deleted.wait_for(|d| d.contains(&key)))
        .await
        .expect("the session of a closed connection's temporary chat is deleted")
        .unwrap();
}

#[tokio::test]
async fn a_fork_copies_the_messages_before_the_chosen_user_turn() {
    let r = start(json!({"websocketRequiresToken": false})).await;
    let mut ws = connect(r.addr, "client_id=a", &[]).await.unwrap();
    next_event(&mut ws).await;
    send(
        &mut ws,
        json!({"type": "fork_chat", "source_chat_id": "abc", "before_user_index": 1}),
    )
    .await;
    let attached = next_event(&mut ws).await;
    assert_eq!(attached["event"], "attached", "{attached}");
    assert_eq!(attached["forked_from"], "abc");
    let fork = attached["chat_id"].as_str().unwrap().to_string();
    {
        let created = r.store.created.lock().unwrap();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].0, format!("websocket:{fork}"));
        let roles: Vec<&str> = created[0].1.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant"]);
    }
    // The fork is attached: messages to it reach the bus under its id.
    send(
        &mut ws,
        json!({"type": "message", "chat_id": fork, "content": "another way"}),
    )
    .await;
    assert_eq!(inbound(&r.bus).await.chat_id, fork);

    for (index, detail) in [
        (json!(3), "invalid fork source or index"),
        (json!(-1), "invalid before_user_index"),
        (json!(true), "invalid before_user_index"),
    ] {
        send(
            &mut ws,
            json!({"type": "fork_chat", "source_chat_id": "abc", "before_user_index": index}),
        )
        .await;
        assert_eq!(next_event(&mut ws).await["detail"], detail);
    }
    send(
        &mut ws,
        json!({"type": "fork_chat", "source_chat_id": "../x", "before_user_index": 0}),
    )
    .await;
    assert_eq!(next_event(&mut ws).await["detail"], "invalid source_chat_id");
    send(
        &mut ws,
        json!({"type": "fork_chat", "source_chat_id": "abc", "before_user_index": 2}),
    )
    .await;
    assert_eq!(next_event(&mut ws).await["event"], "attached");
    assert_eq!(r.store.created.lock().unwrap()[1].1.len(), 4, "the whole session");
}

#[tokio::test]
async fn slow_header_clients_are_closed_and_the_server_still_serves() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // The bound is a config key (ours: 0.3.5 has none).
    let block = json!({"port": 0, "websocketRequiresToken": false, "headerReadTimeoutS": 0.2});
    let settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    assert_eq!(settings.header_read_timeout, Duration::from_millis(200));
    let r = start_with(settings).await;
    // Twenty clients that start a request head and never finish it.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(tcp);
    }
    for mut tcp in slow {
        let mut rest = Vec::new();
        // The server ends each connection (EOF or reset) instead of waiting for the rest of the head.
        let ended = tokio::time::timeout(GUARD, tcp.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "a slow-header connection stayed open");
    }
    // Each closed connection is counted by cause (the gateway exports these on /metrics).
    let refusals = r.channel.refusals();
    assert_eq!(refusals[1], ("header_timeout", 20), "{refusals:?}");
    assert_eq!(refusals[0], ("per_client_cap", 0), "{refusals:?}");
    let page = http().get(format!("http://{}/", r.addr)).send().await.unwrap();
    assert_eq!(page.status(), 200);
}

#[test]
fn listener_bounds_are_config_keys_checked_by_name() {
    for (key, value) in [
        ("headerReadTimeoutS", json!(0)),
        ("headerReadTimeoutS", json!(601)),
        ("maxConnectionsPerClient", json!(0)),
        ("maxConnectionsPerClient", json!(5000)),
    ] {
        let mut block = json!({"port": 0});
        block[key] = value;
        let e = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("channels.websocket.{key}")), "{e}");
    }
    let block = json!({"port": 0, "maxConnectionsPerClient": 7});
    let s = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    assert_eq!(s.max_connections_per_client, 7);
}

#[tokio::test]
async fn one_address_cannot_hold_more_than_its_share_of_connections() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let block = json!({"port": 0, "websocketRequiresToken": false});
    let mut settings = WebSocketSettings::from_config(&WebSocketConfig::from_json(&block).unwrap()).unwrap();
    settings.max_connections_per_client = 3;
    settings.header_read_timeout = Duration::from_millis(300);
    let r = start_with(settings).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        held.push(tcp);
    }
    let mut fourth = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(GUARD, fourth.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(r.channel.refused_connections(), 1);
    // The held connections time out (no complete head); then the address may connect again.
    for mut tcp in held {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(GUARD, tcp.read_to_end(&mut rest))
            .await
            .unwrap();
    }
    let mut status = 0;
    for _ in 0..100 {
        status = http()
            .get(format!("http://{}/", r.addr))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(status, 200);
}
