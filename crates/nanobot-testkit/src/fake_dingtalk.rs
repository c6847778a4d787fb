//! A fake DingTalk Open API for channel tests: Stream mode (`connections/open` with a one-time ticket checked at
//! the WebSocket handshake, JSON frames, acknowledgements recorded), access tokens, robot message sends and file
//! downloads, every REST call recorded.
//!
//! The official `dingtalk-stream` Python SDK connects to it (see the testkit's `fake_sdks` tests). Test controls:
//! [`FakeDingTalk::push_message`], [`FakeDingTalk::push_system`] (`ping`, `disconnect`),
//! [`FakeDingTalk::drop_connections`], [`FakeDingTalk::expire_tokens`] (the API answers 401 until a new token is
//! fetched).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response as WsResponse};

/// The callback topic of robot messages.
pub const BOT_TOPIC: &str = "/v1.0/im/bot/messages/get";

const WAIT: Duration = Duration::from_secs(60);

/// One REST call the fake answered.
#[derive(Debug, Clone)]
pub struct DingTalkCall {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// `x-acs-dingtalk-access-token` header, if sent.
    pub token: Option<String>,
    /// JSON body (`Null` when none).
    pub body: Value,
}

/// An acknowledgement frame the client sent.
#[derive(Debug, Clone)]
pub struct DingTalkAck {
    /// `headers.messageId`.
    pub message_id: String,
    /// The whole frame.
    pub frame: Value,
}

enum Cmd {
    Send(String),
    Drop,
}

struct State {
    client_id: String,
    client_secret: String,
    ws_base: String,
    base: String,
    calls: Mutex<Vec<DingTalkCall>>,
    acks: Mutex<Vec<DingTalkAck>>,
    conns: Mutex<Vec<mpsc::UnboundedSender<Cmd>>>,
    connections: AtomicU64,
    tickets: Mutex<HashSet<String>>,
    tokens: Mutex<HashSet<String>>,
    issued: AtomicU64,
    ids: AtomicU64,
    changed: Notify,
}

/// The fake server. Dropping it stops it.
pub struct FakeDingTalk {
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeDingTalk {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

use nanobot_util::lock;

impl FakeDingTalk {
    /// Starts the fake for an app with these credentials, on two loopback ports (HTTP and WebSocket).
    pub async fn start(client_id: &str, client_secret: &str) -> Result<Self> {
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            ws_base: format!("ws://{}/connect", ws.local_addr()?),
            base: format!("http://{}", http.local_addr()?),
            calls: Mutex::default(),
            acks: Mutex::default(),
            conns: Mutex::default(),
            connections: AtomicU64::new(0),
            tickets: Mutex::default(),
            tokens: Mutex::default(),
            issued: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            changed: Notify::new(),
        });
        let s = state.clone();
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move { rest(&s, &method, &uri, &headers, &body) }
            });
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(http, app).await;
        })];
        let s = state.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok((tcp, _)) = ws.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    #[expect(clippy::result_large_err, reason = "the callback's type is tungstenite's")]
                    let check = |req: &Request, resp: WsResponse| -> Result<WsResponse, ErrorResponse> {
                        let ticket = req
                            .uri()
                            .query()
                            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("ticket=")))
                            .map(str::to_string);
                        // A ticket is good for one connection.
                        if ticket.is_some_and(|t| lock(&s.tickets).remove(&t)) {
                            Ok(resp)
                        } else {
                            let mut err = ErrorResponse::new(Some("invalid ticket".into()));
                            *err.status_mut() = StatusCode::UNAUTHORIZED;
                            Err(err)
                        }
                    };
                    if let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, check).await {
                        serve_ws(s, ws).await;
                    }
                });
            }
        }));
        Ok(Self { state, tasks })
    }

    /// The Open API base URL (`DINGTALK_OPENAPI_ENDPOINT` for the SDK, `baseUrl` for the channel).
    pub fn base_url(&self) -> &str {
        &self.state.base
    }

    /// Every REST call so far.
    pub fn calls(&self) -> Vec<DingTalkCall> {
        lock(&self.state.calls).clone()
    }

    /// Robot messages sent (`oToMessages/batchSend`, `groupMessages/send`), in order.
    pub fn sent_messages(&self) -> Vec<DingTalkCall> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.path == "/v1.0/robot/oToMessages/batchSend" || c.path == "/v1.0/robot/groupMessages/send"
            })
            .collect()
    }

    /// How many access tokens were issued.
    pub fn tokens_issued(&self) -> u64 {
        self.state.issued.load(Ordering::SeqCst)
    }

    /// Every acknowledgement so far.
    pub fn acks(&self) -> Vec<DingTalkAck> {
        lock(&self.state.acks).clone()
    }

    /// Makes every issued token invalid.
    pub fn expire_tokens(&self) {
        lock(&self.state.tokens).clear();
    }

    /// Cuts every open connection (no close frame).
    pub fn drop_connections(&self) {
        for c in lock(&self.state.conns).drain(..) {
            let _ = c.send(Cmd::Drop);
        }
    }

    fn push(&self, kind: &str, topic: &str, data: &Value) -> Result<String> {
        let n = self.state.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("frame-{n}");
        let frame = json!({
            "specVersion": "1.0",
            "type": kind,
            "headers": {"appId": "app1", "connectionId": "conn1", "contentType": "application/json",
                        "messageId": id, "time": "1700000000000", "topic": topic},
            "data": data.to_string(),
        });
        let conns = lock(&self.state.conns);
        let conn = conns.last().context("no open stream connection")?;
        conn.send(Cmd::Send(frame.to_string()))
            .ok()
            .context("the connection closed")?;
        Ok(id)
    }

    /// Pushes a robot message callback (its `data` object); returns the frame's `messageId`.
    pub fn push_message(&self, data: &Value) -> Result<String> {
        self.push("CALLBACK", BOT_TOPIC, data)
    }

    /// Pushes a system frame (`ping` with some data, or `disconnect`); returns its `messageId`.
    pub fn push_system(&self, topic: &str, data: &Value) -> Result<String> {
        self.push("SYSTEM", topic, data)
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.state.changed.notified();
            if let Some(v) = check(&self.state) {
                return Ok(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                bail!("fake dingtalk: {what} did not happen within {WAIT:?}");
            }
        }
    }

    /// Waits until `n` connections were opened in total.
    pub async fn connected(&self, n: u64) -> Result<()> {
        self.wait(&format!("connection #{n}"), |s| {
            (s.connections.load(Ordering::SeqCst) >= n && !lock(&s.conns).is_empty()).then_some(())
        })
        .await
    }

    /// Waits for the acknowledgement of frame `message_id`.
    pub async fn acked(&self, message_id: &str) -> Result<DingTalkAck> {
        self.wait(&format!("ack of {message_id}"), |s| {
            lock(&s.acks).iter().find(|a| a.message_id == message_id).cloned()
        })
        .await
    }

    /// Waits until at least `n` robot messages were sent; returns them.
    pub async fn sent(&self, n: usize) -> Result<Vec<DingTalkCall>> {
        self.wait(&format!("{n} sent messages"), |_| {
            let sent = self.sent_messages();
            (sent.len() >= n).then_some(sent)
        })
        .await
    }
}

/// The `data` of a text robot message: `conversation_type` `"1"` (private) or `"2"` (group).
pub fn text_message(
    msg_id: &str,
    staff_id: &str,
    conversation_type: &str,
    conversation_id: &str,
    text: &str,
    at_bot: bool,
) -> Value {
    json!({
        "conversationId": conversation_id, "conversationType": conversation_type, "msgId": msg_id,
        "senderNick": format!("nick-{staff_id}"), "senderStaffId": staff_id, "senderId": format!("$:LWCP_v1:{staff_id}"),
        "isAdmin": false, "isInAtList": at_bot, "chatbotUserId": "$:bot", "robotCode": "ding_test",
        "sessionWebhook": "http://127.0.0.1:9/robot/sendBySession?session=x", "sessionWebhookExpiredTime": 1_900_000_000_000_i64,
        "createAt": 1_700_000_000_000_i64, "msgtype": "text", "text": {"content": text}, "atUsers": []
    })
}

fn rest(s: &State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Response {
    let token = headers
        .get("x-acs-dingtalk-access-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let path = uri.path().to_string();
    let json_body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    lock(&s.calls).push(DingTalkCall {
        method: method.to_string(),
        path: path.clone(),
        token: token.clone(),
        body: json_body.clone(),
    });
    s.changed.notify_waiters();
    let n = s.ids.fetch_add(1, Ordering::SeqCst) + 1;
    let unauthorized = |msg: &str| {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"code": "InvalidAuthentication", "message": msg})),
        )
            .into_response()
    };
    match path.as_str() {
        "/v1.0/gateway/connections/open" => {
            if json_body["clientId"] != s.client_id.as_str()
                || json_body["clientSecret"] != s.client_secret.as_str()
            {
                return unauthorized("invalid client credentials");
            }
            let ticket = format!("ticket-{n}");
            lock(&s.tickets).insert(ticket.clone());
            Json(json!({"endpoint": s.ws_base, "ticket": ticket})).into_response()
        }
        "/v1.0/oauth2/accessToken" => {
            if json_body["appKey"] != s.client_id.as_str()
                || json_body["appSecret"] != s.client_secret.as_str()
            {
                return unauthorized("invalid app credentials");
            }
            let t = format!("at-{}", s.issued.fetch_add(1, Ordering::SeqCst) + 1);
            lock(&s.tokens).insert(t.clone());
            Json(json!({"accessToken": t, "expireIn": 7200})).into_response()
        }
        p if p.starts_with("/files/") => (StatusCode::OK, format!("content of {p}")).into_response(),
        _ => {
            if !token.is_some_and(|t| lock(&s.tokens).contains(&t)) {
                return unauthorized("access token invalid or expired");
            }
            match path.as_str() {
                "/v1.0/robot/oToMessages/batchSend" => {
                    Json(json!({"processQueryKey": format!("q{n}"), "invalidStaffIdList": [], "flowControlledStaffIdList": []}))
                        .into_response()
                }
                "/v1.0/robot/groupMessages/send" => Json(json!({"processQueryKey": format!("q{n}")})).into_response(),
                "/v1.0/robot/messageFiles/download" => {
                    let code = json_body["downloadCode"].as_str().unwrap_or_default();
                    Json(json!({"downloadUrl": format!("{}/files/{code}", s.base)})).into_response()
                }
                _ => (StatusCode::NOT_FOUND, Json(json!({"code": "NotFound", "message": path}))).into_response(),
            }
        }
    }
}

async fn serve_ws(s: Arc<State>, ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    lock(&s.conns).push(tx);
    s.connections.fetch_add(1, Ordering::SeqCst);
    s.changed.notify_waiters();
    let (mut sink, mut stream) = ws.split();
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Send(text)) => { if sink.send(Ws::Text(text.into())).await.is_err() { break; } }
                Some(Cmd::Drop) | None => break,
            },
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else { break };
                let Ws::Text(text) = msg else { continue };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else { continue };
                lock(&s.acks).push(DingTalkAck {
                    message_id: frame["headers"]["messageId"].as_str().unwrap_or_default().to_string(),
                    frame,
                });
                s.changed.notify_waiters();
            }
        }
    }
    s.changed.notify_waiters();
}
