//! A fake Feishu / Lark Open API for channel tests: endpoint discovery, tenant access tokens, the long
//! connection's protobuf frames (pings answered with pongs, events pushed, acknowledgements recorded) and the IM
//! calls (messages, replies, reactions, resources), every REST call recorded.
//!
//! The official `lark-oapi` Python SDK connects to it (see the testkit's `real_sdk` tests), which is what makes it
//! worth testing against. Test controls: [`FakeFeishu::push_event`], [`FakeFeishu::drop_connections`] (the TCP
//! connection is cut without a close frame), [`FakeFeishu::expire_tokens`] (every issued token becomes invalid and
//! the API answers code 99991663 until a new one is fetched).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;

/// The bot's open_id in the fake.
pub const BOT_OPEN_ID: &str = "ou_bot0000000000";

/// How long the waiting helpers wait.
const WAIT: Duration = Duration::from_secs(60);

/// The frame of the long connection, declared independently of the channel crate (`pbbp2.Frame`, proto2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFrame {
    /// `SeqID`.
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    /// `LogID`.
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    /// `service`.
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    /// `method`: 0 control, 1 data.
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    /// `headers`.
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<PbHeader>,
    /// `payload_encoding`.
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    /// `payload_type`.
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    /// `payload`.
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    /// `LogIDNew`.
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

/// A frame header.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbHeader {
    /// Name.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, required, tag = "2")]
    pub value: String,
}

impl PbFrame {
    /// The value of header `key`.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }
}

fn header(key: &str, value: &str) -> PbHeader {
    PbHeader {
        key: key.into(),
        value: value.into(),
    }
}

/// One REST call the fake answered.
#[derive(Debug, Clone)]
pub struct FeishuCall {
    /// HTTP method.
    pub method: String,
    /// Path (without the query).
    pub path: String,
    /// Query string.
    pub query: String,
    /// Bearer token sent, if any.
    pub token: Option<String>,
    /// JSON body (`Null` when none).
    pub body: Value,
}

/// An acknowledgement the client sent for a data frame.
#[derive(Debug, Clone)]
pub struct FeishuAck {
    /// The frame's `message_id` header.
    pub message_id: String,
    /// Whether the client added the `biz_rt` header (the SDKs do).
    pub has_biz_rt: bool,
    /// The response payload (`{"code": 200, …}`).
    pub payload: Value,
}

enum Cmd {
    Send(Vec<u8>),
    Drop,
}

struct State {
    app_id: String,
    app_secret: String,
    ws_url: String,
    calls: Mutex<Vec<FeishuCall>>,
    acks: Mutex<Vec<FeishuAck>>,
    conns: Mutex<Vec<mpsc::UnboundedSender<Cmd>>>,
    connections: AtomicU64,
    pings: AtomicU64,
    tokens: Mutex<HashSet<String>>,
    issued: AtomicU64,
    ids: AtomicU64,
    changed: Notify,
}

/// The fake server. Dropping it stops it.
pub struct FakeFeishu {
    base: String,
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeFeishu {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeFeishu {
    /// Starts the fake for an app with these credentials, on two loopback ports (HTTP and WebSocket).
    pub async fn start(app_id: &str, app_secret: &str) -> Result<Self> {
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", http.local_addr()?);
        let ws_url = format!(
            "ws://{}/ws?device_id=dev1&service_id=7&access_key=k&ticket=t",
            ws.local_addr()?
        );
        let state = Arc::new(State {
            app_id: app_id.into(),
            app_secret: app_secret.into(),
            ws_url,
            calls: Mutex::default(),
            acks: Mutex::default(),
            conns: Mutex::default(),
            connections: AtomicU64::new(0),
            pings: AtomicU64::new(0),
            tokens: Mutex::default(),
            issued: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            changed: Notify::new(),
        });
        let s = state.clone();
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move { rest(&s, method, uri, headers, body) }
            });
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(http, app).await;
        })];
        let s = state.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok((tcp, _)) = ws.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
                        serve_ws(s, ws).await;
                    }
                });
            }
        }));
        Ok(Self { base, state, tasks })
    }

    /// The Open API base URL (`domain` for the SDKs, `baseUrl` for the channel).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Every REST call so far.
    pub fn calls(&self) -> Vec<FeishuCall> {
        lock(&self.state.calls).clone()
    }

    /// Messages sent (created or replies), in order.
    pub fn sent_messages(&self) -> Vec<FeishuCall> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.method == "POST" && (c.path == "/open-apis/im/v1/messages" || c.path.ends_with("/reply"))
            })
            .collect()
    }

    /// How many tenant access tokens were issued.
    pub fn tokens_issued(&self) -> u64 {
        self.state.issued.load(Ordering::SeqCst)
    }

    /// How many pings the clients sent.
    pub fn pings(&self) -> u64 {
        self.state.pings.load(Ordering::SeqCst)
    }

    /// Every acknowledgement so far.
    pub fn acks(&self) -> Vec<FeishuAck> {
        lock(&self.state.acks).clone()
    }

    /// Makes every issued token invalid.
    pub fn expire_tokens(&self) {
        lock(&self.state.tokens).clear();
    }

    /// Cuts every open long connection (no close frame).
    pub fn drop_connections(&self) {
        for c in lock(&self.state.conns).drain(..) {
            let _ = c.send(Cmd::Drop);
        }
    }

    /// Pushes an event payload as a data frame on the newest connection; returns the frame's `message_id`.
    pub fn push_event(&self, event: &Value) -> Result<String> {
        let n = self.state.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("frame-{n}");
        let frame = PbFrame {
            seq_id: n,
            log_id: n,
            service: 7,
            method: 1,
            headers: vec![
                header("type", "event"),
                header("message_id", &id),
                header("sum", "1"),
                header("seq", "0"),
                header("trace_id", &format!("trace-{n}")),
            ],
            payload: Some(event.to_string().into_bytes()),
            ..PbFrame::default()
        };
        let conns = lock(&self.state.conns);
        let conn = conns.last().context("no open long connection")?;
        conn.send(Cmd::Send(frame.encode_to_vec()))
            .ok()
            .context("the connection closed")?;
        Ok(id)
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.state.changed.notified();
            if let Some(v) = check(&self.state) {
                return Ok(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                bail!("fake feishu: {what} did not happen within {WAIT:?}");
            }
        }
    }

    /// Waits until `n` long connections were opened in total.
    pub async fn connected(&self, n: u64) -> Result<()> {
        self.wait(&format!("connection #{n}"), |s| {
            (s.connections.load(Ordering::SeqCst) >= n && lock(&s.conns).len() as u64 >= 1).then_some(())
        })
        .await
    }

    /// Waits until the clients sent at least one ping.
    pub async fn pinged(&self) -> Result<()> {
        self.wait("a ping", |s| (s.pings.load(Ordering::SeqCst) >= 1).then_some(()))
            .await
    }

    /// Waits for the acknowledgement of frame `message_id`.
    pub async fn acked(&self, message_id: &str) -> Result<FeishuAck> {
        self.wait(&format!("ack of {message_id}"), |s| {
            lock(&s.acks).iter().find(|a| a.message_id == message_id).cloned()
        })
        .await
    }

    /// Waits until at least `n` messages were sent; returns them.
    pub async fn sent(&self, n: usize) -> Result<Vec<FeishuCall>> {
        self.wait(&format!("{n} sent messages"), |_| {
            let sent = self.sent_messages();
            (sent.len() >= n).then_some(sent)
        })
        .await
    }

    /// Waits for a REST call matching `pred`.
    pub async fn call_where(&self, what: &str, pred: impl Fn(&FeishuCall) -> bool) -> Result<FeishuCall> {
        self.wait(what, |s| lock(&s.calls).iter().find(|c| pred(c)).cloned())
            .await
    }
}

/// An `im.message.receive_v1` event payload.
pub fn message_event(
    event_id: &str,
    message_id: &str,
    sender_open_id: &str,
    chat_id: &str,
    chat_type: &str,
    text: &str,
    mentions: &[(&str, &str, &str)],
) -> Value {
    let mentions: Vec<Value> = mentions
        .iter()
        .map(|(key, open_id, name)| {
            json!({"key": key, "id": {"open_id": open_id, "union_id": "on_x", "user_id": ""}, "name": name, "tenant_key": "tk"})
        })
        .collect();
    json!({
        "schema": "2.0",
        "header": {"event_id": event_id, "event_type": "im.message.receive_v1", "create_time": "1700000000000",
                   "token": "", "app_id": "cli_test", "tenant_key": "tk"},
        "event": {
            "sender": {"sender_id": {"open_id": sender_open_id, "union_id": "on_s", "user_id": "u_s"},
                       "sender_type": "user", "tenant_key": "tk"},
            "message": {"message_id": message_id, "create_time": "1700000000000", "chat_id": chat_id,
                        "chat_type": chat_type, "message_type": "text",
                        "content": json!({"text": text}).to_string(), "mentions": mentions}
        }
    })
}

use nanobot_util::lock;

fn ok(data: Value) -> Response {
    Json(json!({"code": 0, "msg": "success", "data": data})).into_response()
}

use axum::Json;

fn rest(s: &State, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let path = uri.path().to_string();
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&s.calls).push(FeishuCall {
        method: method.to_string(),
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_string(),
        token: token.clone(),
        body: json_body.clone(),
    });
    s.changed.notify_waiters();
    let n = s.ids.fetch_add(1, Ordering::SeqCst) + 1;
    match path.as_str() {
        "/callback/ws/endpoint" => {
            if json_body["AppID"] != s.app_id.as_str() || json_body["AppSecret"] != s.app_secret.as_str() {
                return Json(json!({"code": 1000040344, "msg": "invalid app credentials"})).into_response();
            }
            Json(
                json!({"code": 0, "msg": "ok", "data": {"URL": s.ws_url, "ClientConfig": {
                "ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}}}),
            )
            .into_response()
        }
        "/open-apis/auth/v3/tenant_access_token/internal" => {
            if json_body["app_id"] != s.app_id.as_str() || json_body["app_secret"] != s.app_secret.as_str() {
                return Json(json!({"code": 10014, "msg": "app secret invalid"})).into_response();
            }
            let t = format!("t-{}", s.issued.fetch_add(1, Ordering::SeqCst) + 1);
            lock(&s.tokens).insert(t.clone());
            Json(json!({"code": 0, "msg": "ok", "tenant_access_token": t, "expire": 7200})).into_response()
        }
        _ => {
            if !token.is_some_and(|t| lock(&s.tokens).contains(&t)) {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"code": 99991663, "msg": "Invalid access token for authorization."})),
                )
                    .into_response();
            }
            if path == "/open-apis/bot/v3/info" {
                return Json(
                    json!({"code": 0, "msg": "ok", "bot": {"open_id": BOT_OPEN_ID, "app_name": "nanobot"}}),
                )
                .into_response();
            }
            if path.starts_with("/open-apis/im/v1/messages") {
                if path.contains("/resources/") {
                    return (StatusCode::OK, format!("resource of {path}")).into_response();
                }
                if path.contains("/reactions") {
                    return if method == Method::DELETE {
                        ok(json!({}))
                    } else {
                        ok(json!({"reaction_id": format!("r_{n}")}))
                    };
                }
                if method == Method::POST {
                    return ok(
                        json!({"message_id": format!("om_sent_{n}"), "chat_id": json_body["receive_id"],
                                     "msg_type": json_body["msg_type"], "body": {"content": json_body["content"]}}),
                    );
                }
            }
            (
                StatusCode::NOT_FOUND,
                Json(json!({"code": 404, "msg": "not found"})),
            )
                .into_response()
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
                Some(Cmd::Send(bytes)) => { if sink.send(Ws::Binary(bytes.into())).await.is_err() { break; } }
                Some(Cmd::Drop) | None => break,
            },
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else { break };
                let Ws::Binary(bytes) = msg else { continue };
                let Ok(frame) = PbFrame::decode(bytes.as_ref()) else { continue };
                if frame.method == 0 && frame.header("type") == Some("ping") {
                    s.pings.fetch_add(1, Ordering::SeqCst);
                    let pong = PbFrame {
                        service: frame.service,
                        method: 0,
                        headers: vec![header("type", "pong")],
                        payload: Some(br#"{"ReconnectCount":-1,"ReconnectInterval":1,"ReconnectNonce":0,"PingInterval":120}"#.to_vec()),
                        ..PbFrame::default()
                    };
                    if sink.send(Ws::Binary(pong.encode_to_vec().into())).await.is_err() { break; }
                } else if frame.method == 1 {
                    let payload = frame.payload.as_deref().and_then(|p| serde_json::from_slice(p).ok()).unwrap_or(Value::Null);
                    lock(&s.acks).push(FeishuAck {
                        message_id: frame.header("message_id").unwrap_or_default().to_string(),
                        has_biz_rt: frame.header("biz_rt").is_some(),
                        payload,
                    });
                }
                s.changed.notify_waiters();
            }
        }
    }
    s.changed.notify_waiters();
}
