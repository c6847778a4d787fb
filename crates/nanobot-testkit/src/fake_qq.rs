//! A fake QQ Bot API for channel tests: the app access token endpoint, `GET /users/@me`, `GET /gateway/bot`, the
//! WebSocket gateway (Hello, Identify → READY, heartbeats acknowledged, Resume → replay of missed events then
//! RESUMED) and the message endpoints (C2C, group, guild channel, guild DM), every REST call and every frame the
//! client sent recorded. rich-media uploads (`POST .../files`, answering a `file_info`); `GET /files/<name>` serves attachment bytes (`/files/big-<n>` serves `n` bytes).
//!
//! The official `qq-botpy` Python SDK connects to it and receives events (see the testkit's `fake_sdks` tests).
//! Test controls: [`FakeQq::push_event`] (queued for replay while no connection is open),
//! [`FakeQq::drop_connections`], [`FakeQq::expire_tokens`].

use nanobot_util::lock;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;

const WAIT: Duration = Duration::from_secs(60);

/// The session id READY hands out.
pub const SESSION_ID: &str = "fake-session-1";

/// One REST call the fake answered.
#[derive(Debug, Clone)]
pub struct QqCall {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// `Authorization` header, if sent.
    pub authorization: Option<String>,
    /// JSON body (`Null` when none).
    pub body: Value,
}

enum Cmd {
    Send(String),
    Drop,
}

struct State {
    app_id: String,
    secret: String,
    ws_url: String,
    base: String,
    heartbeat_ms: u64,
    calls: Mutex<Vec<QqCall>>,
    frames: Mutex<Vec<Value>>,
    /// Dispatched message events: (seq, frame text).
    events: Mutex<Vec<(u64, String)>>,
    conns: Mutex<Vec<mpsc::UnboundedSender<Cmd>>>,
    connections: AtomicU64,
    tokens: Mutex<HashSet<String>>,
    issued: AtomicU64,
    seq: AtomicU64,
    ids: AtomicU64,
    changed: Notify,
}

/// The fake server. Dropping it stops it.
pub struct FakeQq {
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeQq {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeQq {
    /// Starts the fake for a bot with these credentials on two loopback ports (HTTP and WebSocket); Hello asks
    /// for a heartbeat every `heartbeat_ms` milliseconds.
    pub async fn start(app_id: &str, secret: &str, heartbeat_ms: u64) -> Result<Self> {
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            app_id: app_id.into(),
            secret: secret.into(),
            ws_url: format!("ws://{}/websocket", ws.local_addr()?),
            base: format!("http://{}", http.local_addr()?),
            heartbeat_ms,
            calls: Mutex::default(),
            frames: Mutex::default(),
            events: Mutex::default(),
            conns: Mutex::default(),
            connections: AtomicU64::new(0),
            tokens: Mutex::default(),
            issued: AtomicU64::new(0),
            seq: AtomicU64::new(1),
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
                    if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
                        serve_ws(s, ws).await;
                    }
                });
            }
        }));
        Ok(Self { state, tasks })
    }

    /// The API base URL (also serves `/app/getAppAccessToken`).
    pub fn base_url(&self) -> &str {
        &self.state.base
    }

    /// Every REST call so far.
    pub fn calls(&self) -> Vec<QqCall> {
        lock(&self.state.calls).clone()
    }

    /// Messages sent (POSTs to a `.../messages` path), in order.
    pub fn sent_messages(&self) -> Vec<QqCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "POST" && c.path.ends_with("/messages"))
            .collect()
    }

    /// Every gateway frame clients sent, in order.
    pub fn frames(&self) -> Vec<Value> {
        lock(&self.state.frames).clone()
    }

    /// How many access tokens were issued.
    pub fn tokens_issued(&self) -> u64 {
        self.state.issued.load(Ordering::SeqCst)
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
        self.state.changed.notify_waiters();
    }

    /// Dispatches event `kind` with data `d` to the newest connection (or keeps it for a resume when none is
    /// open); returns its sequence number.
    pub fn push_event(&self, kind: &str, d: &Value) -> u64 {
        let seq = self.state.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let n = self.state.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let frame = json!({"op": 0, "s": seq, "t": kind, "id": format!("{kind}:ev-{n}"), "d": d}).to_string();
        lock(&self.state.events).push((seq, frame.clone()));
        if let Some(conn) = lock(&self.state.conns).last() {
            let _ = conn.send(Cmd::Send(frame));
        }
        seq
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        crate::wait::until(&self.state.changed, WAIT, "fake qq", what, || check(&self.state)).await
    }

    /// Waits until `n` gateway sessions were made ready (READY or RESUMED sent) in total.
    pub async fn ready(&self, n: u64) -> Result<()> {
        self.wait(&format!("ready session #{n}"), |s| {
            (s.connections.load(Ordering::SeqCst) >= n && !lock(&s.conns).is_empty()).then_some(())
        })
        .await
    }

    /// Waits for a client frame with this op code after the first `skip` frames; returns it.
    pub async fn frame(&self, op: u64, skip: usize) -> Result<Value> {
        self.wait(&format!("a frame with op {op}"), |s| {
            lock(&s.frames)
                .iter()
                .skip(skip)
                .find(|f| f["op"].as_u64() == Some(op))
                .cloned()
        })
        .await
    }

    /// Waits until at least `n` messages were sent; returns them.
    pub async fn sent(&self, n: usize) -> Result<Vec<QqCall>> {
        self.wait(&format!("{n} sent messages"), |_| {
            let sent = self.sent_messages();
            (sent.len() >= n).then_some(sent)
        })
        .await
    }
}

/// The `d` of a `C2C_MESSAGE_CREATE` event from user `openid`.
pub fn c2c_message(id: &str, openid: &str, content: &str) -> Value {
    json!({"id": id, "content": content, "timestamp": "2026-11-23T20:00:00+08:00",
           "author": {"id": openid, "user_openid": openid}, "attachments": []})
}

/// The `d` of a `GROUP_AT_MESSAGE_CREATE` (or, with the other kind, `GROUP_MESSAGE_CREATE`) event.
pub fn group_message(id: &str, group_openid: &str, member_openid: &str, content: &str) -> Value {
    json!({"id": id, "content": content, "timestamp": "2026-11-23T20:00:00+08:00", "group_id": group_openid,
           "group_openid": group_openid, "author": {"id": member_openid, "member_openid": member_openid},
           "attachments": []})
}

fn rest(s: &State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let path = uri.path().to_string();
    let json_body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    lock(&s.calls).push(QqCall {
        method: method.to_string(),
        path: path.clone(),
        authorization: authorization.clone(),
        body: json_body.clone(),
    });
    s.changed.notify_waiters();
    let n = s.ids.fetch_add(1, Ordering::SeqCst) + 1;
    if path == "/app/getAppAccessToken" {
        if json_body["appId"] != s.app_id.as_str() || json_body["clientSecret"] != s.secret.as_str() {
            // QQ answers bad credentials with a code and no token.
            return Json(json!({"code": 100016, "message": "invalid appid or secret"})).into_response();
        }
        let t = format!("qqtoken-{}", s.issued.fetch_add(1, Ordering::SeqCst) + 1);
        lock(&s.tokens).insert(t.clone());
        return Json(json!({"access_token": t, "expires_in": "7200"})).into_response();
    }
    if let Some(name) = path.strip_prefix("/files/") {
        if let Some(size) = name.strip_prefix("big-").and_then(|n| n.parse::<usize>().ok()) {
            return (StatusCode::OK, vec![b'x'; size]).into_response();
        }
        return (StatusCode::OK, format!("content of {name}")).into_response();
    }
    let valid = authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("QQBot "))
        .is_some_and(|t| lock(&s.tokens).contains(t));
    if !valid {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"code": 11244, "message": "token not exist or expire"})),
        )
            .into_response();
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/users/@me") => {
            Json(json!({"id": "9001", "username": "fake-bot", "avatar": "", "union_openid": "", "union_user_account": ""}))
                .into_response()
        }
        ("GET", "/gateway/bot") => Json(json!({"url": s.ws_url, "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 86_400_000, "max_concurrency": 1}}))
        .into_response(),
        ("GET", "/gateway") => Json(json!({"url": s.ws_url})).into_response(),
        ("POST", p) if p.ends_with("/files") => {
            if json_body["file_data"].as_str().is_none_or(str::is_empty) {
                return (StatusCode::BAD_REQUEST, Json(json!({"code": 40034, "message": "file_data missing"})))
                    .into_response();
            }
            Json(json!({"file_uuid": format!("uuid-{n}"), "file_info": format!("fileinfo-{n}"), "ttl": 3600}))
                .into_response()
        }
        ("POST", p) if p.ends_with("/messages") => {
            Json(json!({"id": format!("sent-{n}"), "timestamp": "2026-11-23T20:00:01+08:00"})).into_response()
        }
        _ => (StatusCode::NOT_FOUND, Json(json!({"code": 404, "message": path}))).into_response(),
    }
}

fn token_ok(s: &State, token: &Value) -> bool {
    token
        .as_str()
        .and_then(|t| t.strip_prefix("QQBot "))
        .is_some_and(|t| lock(&s.tokens).contains(t))
}

async fn serve_ws(s: Arc<State>, ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut sink, mut stream) = ws.split();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": s.heartbeat_ms}});
    if sink.send(Ws::Text(hello.to_string().into())).await.is_err() {
        return;
    }
    let mut registered = false;
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
                lock(&s.frames).push(frame.clone());
                s.changed.notify_waiters();
                let mut out = Vec::new();
                match frame["op"].as_u64() {
                    Some(1) => out.push(json!({"op": 11, "d": frame["d"]}).to_string()),
                    Some(2) => {
                        if !token_ok(&s, &frame["d"]["token"]) {
                            let _ = sink.send(Ws::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                                code: 4004.into(), reason: "invalid token".into() }))).await;
                            break;
                        }
                        let seq = s.seq.fetch_add(1, Ordering::SeqCst) + 1;
                        out.push(json!({"op": 0, "s": seq, "t": "READY", "d": {"version": 1, "session_id": SESSION_ID,
                            "user": {"id": "9001", "username": "fake-bot", "bot": true, "status": 1}, "shard": [0, 1]}}).to_string());
                    }
                    Some(6) => {
                        if !token_ok(&s, &frame["d"]["token"]) || frame["d"]["session_id"] != SESSION_ID {
                            out.push(json!({"op": 9, "d": false}).to_string());
                        } else {
                            let from = frame["d"]["seq"].as_u64().unwrap_or(0);
                            out.extend(lock(&s.events).iter().filter(|(q, _)| *q > from).map(|(_, f)| f.clone()));
                            let seq = s.seq.fetch_add(1, Ordering::SeqCst) + 1;
                            out.push(json!({"op": 0, "s": seq, "t": "RESUMED", "d": ""}).to_string());
                        }
                    }
                    _ => {}
                }
                for text in out {
                    let ready = text.contains("\"READY\"") || text.contains("\"RESUMED\"");
                    if sink.send(Ws::Text(text.into())).await.is_err() { break; }
                    if ready && !registered {
                        registered = true;
                        lock(&s.conns).push(tx.clone());
                        s.connections.fetch_add(1, Ordering::SeqCst);
                        s.changed.notify_waiters();
                    }
                }
            }
        }
    }
    s.changed.notify_waiters();
}
