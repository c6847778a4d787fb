//! A fake OneBot v11 implementation (what NapCat is) for the NapCat channel's tests: a forward WebSocket on
//! loopback that greets every connection with a `meta_event` `lifecycle`/`connect` frame, answers action frames
//! (`{"action", "params", "echo"}`) the way NapCat does (`get_login_info`, `send_msg`, `send_private_msg`,
//! `send_group_msg`, `get_group_member_info`, `get_status`, `get_version_info`; anything else fails with retcode
//! 1404) and records every action. The access token is checked on the upgrade (`Authorization: Bearer <token>`
//! or `?access_token=<token>`, as OneBot v11 allows; otherwise HTTP 401). The same port serves plain HTTP:
//! `GET /files/<name>` answers `content of <name>` (`image/png` for `.png`), `/files/big-<n>` answers `n` bytes.
//!
//! A OneBot client library (nonebot2's OneBot adapter) and the Python nanobot 0.3.5's NapCat channel connect to
//! it (see the testkit's `fake_sdks` tests). Test controls: [`FakeOneBot::push_event`] (to every open
//! connection; nothing is queued), [`FakeOneBot::drop_connections`]; event builders [`private_message`],
//! [`group_message`], [`member_joined`].

use nanobot_util::lock;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode, header};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

const WAIT: Duration = Duration::from_secs(60);

/// The bot's own QQ number (`get_login_info`, every event's `self_id`).
pub const SELF_ID: i64 = 10001;

/// The first `message_id` the send actions hand out (then increasing by one).
const FIRST_MESSAGE_ID: i64 = 5000;

/// One action frame a client sent.
#[derive(Debug, Clone)]
pub struct OneBotAction {
    /// The action's name (`send_msg`, …).
    pub action: String,
    /// Its `params` (`Null` when absent).
    pub params: Value,
    /// Its `echo` (`Null` when absent).
    pub echo: Value,
}

enum Cmd {
    Send(String),
    Drop,
}

struct State {
    token: Option<String>,
    port: u16,
    actions: Mutex<Vec<OneBotAction>>,
    conns: Mutex<Vec<mpsc::UnboundedSender<Cmd>>>,
    connections: AtomicUsize,
    refused: AtomicUsize,
    message_ids: AtomicI64,
    changed: Notify,
}

struct Inner {
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
        for c in lock(&self.state.conns).drain(..) {
            let _ = c.send(Cmd::Drop);
        }
    }
}

/// The fake server; clones share it. Dropping the last clone stops it and closes its connections.
#[derive(Clone)]
pub struct FakeOneBot {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeOneBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.inner.state;
        f.debug_struct("FakeOneBot")
            .field("port", &s.port)
            .field("token", &s.token.is_some())
            .field("connections", &s.connections.load(Ordering::SeqCst))
            .field("refused", &s.refused.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl FakeOneBot {
    /// Starts on a free port of 127.0.0.1. `access_token`: when `Some`, a WebSocket upgrade must carry
    /// `Authorization: Bearer <token>` (or `?access_token=<token>` in the URL, as OneBot v11 allows); otherwise
    /// it is answered 401 (and counted, see [`FakeOneBot::refused`]).
    pub async fn start(access_token: Option<&str>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            token: access_token.map(str::to_string),
            port: listener.local_addr()?.port(),
            actions: Mutex::default(),
            conns: Mutex::default(),
            connections: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            message_ids: AtomicI64::new(FIRST_MESSAGE_ID),
            changed: Notify::new(),
        });
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(s, req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(Self {
            inner: Arc::new(Inner { state, task }),
        })
    }

    fn state(&self) -> &State {
        &self.inner.state
    }

    /// The forward WebSocket URL: `ws://127.0.0.1:<port>/`.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.state().port)
    }

    /// The HTTP base URL `http://127.0.0.1:<port>`: `GET /files/<name>` answers `content of <name>` (`image/png`
    /// for `.png`), `/files/big-<n>` answers `n` bytes.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state().port)
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        crate::wait::until(&self.state().changed, WAIT, "fake onebot", what, || {
            check(self.state())
        })
        .await
    }

    /// Waits (60 s at most, an error then) until `n` WebSocket connections have been accepted in total since
    /// start (each has had its `lifecycle`/`connect` frame).
    pub async fn connected(&self, n: usize) -> Result<()> {
        self.wait(&format!("connection #{n}"), |s| {
            (s.connections.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    /// How many upgrades were refused for a missing or wrong token.
    pub fn refused(&self) -> usize {
        self.state().refused.load(Ordering::SeqCst)
    }

    /// Sends an event frame (a JSON object) to every open connection; nothing is kept for later ones.
    pub fn push_event(&self, event: &Value) {
        let text = event.to_string();
        for c in lock(&self.state().conns).iter() {
            let _ = c.send(Cmd::Send(text.clone()));
        }
    }

    /// Every action frame received, in order.
    pub fn actions(&self) -> Vec<OneBotAction> {
        lock(&self.state().actions).clone()
    }

    /// Waits (60 s at most, an error then) until at least `n` actions named `action` arrived; returns them (all
    /// of that name so far, in order).
    pub async fn wait_actions(&self, action: &str, n: usize) -> Result<Vec<OneBotAction>> {
        self.wait(&format!("{n} `{action}` actions"), |s| {
            let found: Vec<_> = lock(&s.actions)
                .iter()
                .filter(|a| a.action == action)
                .cloned()
                .collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// Closes every open connection without a close frame (the peer restarting); later connections are accepted
    /// as before.
    pub fn drop_connections(&self) {
        for c in lock(&self.state().conns).drain(..) {
            let _ = c.send(Cmd::Drop);
        }
        self.state().changed.notify_waiters();
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

/// Escapes text for a CQ-code string (`&`, `[`, `]`, and `,` inside a parameter).
fn cq_escape(text: &str, param: bool) -> String {
    let mut out = text
        .replace('&', "&amp;")
        .replace('[', "&#91;")
        .replace(']', "&#93;");
    if param {
        out = out.replace(',', "&#44;");
    }
    out
}

/// The CQ-code string form (`raw_message`) of array-form segments.
fn raw_message(segments: &Value) -> String {
    let mut out = String::new();
    for seg in segments.as_array().into_iter().flatten() {
        let kind = seg["type"].as_str().unwrap_or_default();
        let data = seg["data"].as_object();
        if kind == "text" {
            out.push_str(&cq_escape(
                seg["data"]["text"].as_str().unwrap_or_default(),
                false,
            ));
            continue;
        }
        out.push_str("[CQ:");
        out.push_str(kind);
        for (k, v) in data.into_iter().flatten() {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.push_str(&format!(",{k}={}", cq_escape(&v, true)));
        }
        out.push(']');
    }
    out
}

/// A private message event (`post_type: message`, `message_type: private`, `sub_type: friend`), `message` in
/// array form `[{"type":"text","data":{"text":..}}]`, `raw_message`, `sender: {user_id, nickname: "user-<id>"}`,
/// `self_id: SELF_ID`, `time`.
pub fn private_message(message_id: i64, user_id: i64, text: &str) -> Value {
    let message = json!([{"type": "text", "data": {"text": text}}]);
    json!({
        "time": now(), "self_id": SELF_ID, "post_type": "message", "message_type": "private", "sub_type": "friend",
        "message_id": message_id, "user_id": user_id, "message": message, "raw_message": raw_message(&message),
        "font": 14, "message_format": "array",
        "sender": {"user_id": user_id, "nickname": format!("user-{user_id}"), "card": ""},
    })
}

/// A group message event (`sub_type: normal`) with the given array `segments` (e.g.
/// `[{"type":"at","data":{"qq":"10001"}},{"type":"text","data":{"text":" hi"}}]`), `raw_message` in CQ-code
/// form, `sender: {user_id, nickname, card: "", role: "member"}`, `group_id`.
pub fn group_message(message_id: i64, group_id: i64, user_id: i64, nickname: &str, segments: Value) -> Value {
    json!({
        "time": now(), "self_id": SELF_ID, "post_type": "message", "message_type": "group", "sub_type": "normal",
        "message_id": message_id, "group_id": group_id, "user_id": user_id, "anonymous": null,
        "raw_message": raw_message(&segments), "message": segments, "font": 14, "message_format": "array",
        "sender": {"user_id": user_id, "nickname": nickname, "card": "", "role": "member"},
    })
}

/// A `notice` event `group_increase` (`sub_type: approve`) for `user_id` joining `group_id`.
pub fn member_joined(group_id: i64, user_id: i64) -> Value {
    json!({
        "time": now(), "self_id": SELF_ID, "post_type": "notice", "notice_type": "group_increase",
        "sub_type": "approve", "group_id": group_id, "user_id": user_id, "operator_id": user_id,
    })
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response<Body> {
    let mut resp = Response::new(body.into());
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn token_ok(s: &State, headers: &HeaderMap, query: Option<&str>) -> bool {
    let Some(want) = s.token.as_deref() else {
        return true;
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let in_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("access_token="));
    bearer == Some(want) || in_query == Some(want)
}

fn handle(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let headers = req.headers();
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        let path = req.uri().path();
        if let Some(name) = path.strip_prefix("/files/") {
            if let Some(size) = name.strip_prefix("big-").and_then(|n| n.parse::<usize>().ok()) {
                return respond(StatusCode::OK, "application/octet-stream", vec![b'x'; size]);
            }
            let kind = if name.ends_with(".png") {
                "image/png"
            } else {
                "application/octet-stream"
            };
            return respond(StatusCode::OK, kind, format!("content of {name}"));
        }
        return respond(StatusCode::NOT_FOUND, "text/plain", "not found");
    }
    if !token_ok(&s, headers, req.uri().query()) {
        s.refused.fetch_add(1, Ordering::SeqCst);
        s.changed.notify_waiters();
        return respond(
            StatusCode::UNAUTHORIZED,
            "application/json",
            json!({"status": "failed", "retcode": 1403, "message": "token verify failed"}).to_string(),
        );
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "missing Sec-WebSocket-Key");
    };
    let accept = derive_accept_key(key.as_bytes());
    let mut resp = respond(StatusCode::SWITCHING_PROTOCOLS, "text/plain", Body::empty());
    resp.headers_mut().remove(header::CONTENT_TYPE);
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, header::HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, header::HeaderValue::from_static("websocket"));
    if let Ok(v) = accept.parse() {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            serve_ws(s, ws).await;
        }
    });
    resp
}

/// The answer to one action frame.
fn answer(s: &State, action: &str, params: &Value) -> Value {
    let ok = |data: Value| json!({"status": "ok", "retcode": 0, "data": data, "message": "", "wording": ""});
    let bad = |retcode: i64, message: &str| json!({"status": "failed", "retcode": retcode, "data": null, "message": message, "wording": message});
    let has = |key: &str| !params[key].is_null();
    match action {
        "get_login_info" => ok(json!({"user_id": SELF_ID, "nickname": "nanobot-test"})),
        "send_msg" | "send_private_msg" | "send_group_msg" => {
            let target_ok = match action {
                "send_private_msg" => has("user_id"),
                "send_group_msg" => has("group_id"),
                _ => match params["message_type"].as_str() {
                    Some("private") => has("user_id"),
                    Some("group") => has("group_id"),
                    _ => has("user_id") || has("group_id"),
                },
            };
            if !target_ok || params["message"].is_null() {
                return bad(1400, "missing target or message");
            }
            ok(json!({"message_id": s.message_ids.fetch_add(1, Ordering::SeqCst)}))
        }
        "get_group_member_info" => {
            let user_id = &params["user_id"];
            let id = user_id
                .as_str()
                .map_or_else(|| user_id.to_string(), str::to_string);
            ok(
                json!({"group_id": params["group_id"], "user_id": user_id, "nickname": format!("member-{id}"),
                      "card": ""}),
            )
        }
        "get_status" => ok(json!({"online": true, "good": true})),
        "get_version_info" => {
            ok(json!({"app_name": "NapCat.Onebot", "app_version": "4.0.0", "protocol_version": "v11"}))
        }
        _ => bad(1404, "unsupported action"),
    }
}

async fn serve_ws(s: Arc<State>, ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut sink, mut stream) = ws.split();
    let hello = json!({"time": now(), "self_id": SELF_ID, "post_type": "meta_event",
                       "meta_event_type": "lifecycle", "sub_type": "connect"});
    if sink.send(Ws::Text(hello.to_string().into())).await.is_err() {
        return;
    }
    lock(&s.conns).push(tx);
    s.connections.fetch_add(1, Ordering::SeqCst);
    s.changed.notify_waiters();
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Send(text)) => { if sink.send(Ws::Text(text.into())).await.is_err() { break; } }
                Some(Cmd::Drop) | None => break,
            },
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else { break };
                let text = match msg {
                    Ws::Text(t) => t.to_string(),
                    Ws::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                    Ws::Close(_) => break,
                    _ => continue,
                };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else { continue };
                let Some(action) = frame["action"].as_str() else { continue };
                let params = frame.get("params").cloned().unwrap_or(Value::Null);
                let echo = frame.get("echo").cloned();
                let mut reply = answer(&s, action, &params);
                if let Some(echo) = &echo {
                    reply["echo"] = echo.clone();
                }
                lock(&s.actions).push(OneBotAction {
                    action: action.to_string(),
                    params,
                    echo: echo.unwrap_or(Value::Null),
                });
                s.changed.notify_waiters();
                if sink.send(Ws::Text(reply.to_string().into())).await.is_err() {
                    break;
                }
            }
        }
    }
    s.changed.notify_waiters();
}
