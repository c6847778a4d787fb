//! A fake Mattermost server (API v4) for the Mattermost channel's tests: REST and the WebSocket on one loopback
//! port, every request checked for `Authorization: Bearer <token>` (anything else is answered 401 with
//! Mattermost's `api.context.session_expired.app_error` and counted, see [`FakeMattermost::refused`]).
//!
//! REST (answers shaped like the real server's, the fields clients read plus ids and timestamps; errors are
//! Mattermost's `{"id","message","detailed_error","request_id","status_code"}`):
//! `GET /api/v4/users/me` (the bot, [`BOT_USER_ID`] / [`BOT_USERNAME`]), `GET /api/v4/users/{id}`,
//! `GET /api/v4/channels/{id}`, `POST /api/v4/posts` (201 with the created post; 400
//! `model.post.is_valid.message_length.app_error` over [`MAX_POST_CHARS`] characters; 403 for an unknown channel,
//! 400 for an unknown `root_id`), `GET /api/v4/posts/{id}`, `PUT /api/v4/posts/{id}/patch`,
//! `GET /api/v4/posts/{id}/thread` (`{"order", "posts", ...}`, newest first, the root included),
//! `POST /api/v4/files` (`multipart/form-data` with a `channel_id` field and `files` parts, parsed strictly; 201
//! `{"file_infos", "client_ids"}`), `GET /api/v4/files/{id}` (the bytes) and `/api/v4/files/{id}/info`,
//! `POST /api/v4/reactions`, `DELETE /api/v4/users/{uid}/posts/{pid}/reactions/{emoji}` (the user must be the
//! bot, the post known: 403 otherwise, as the real server's permission check answers), and
//! `GET /api/v4/system/ping` (`{"status":"OK"}`, open without a token as on the real server).
//!
//! WebSocket at `/api/v4/websocket`: with a valid Bearer header the connection is authenticated at once and gets
//! the `hello` event (`seq` 0); without a header it is upgraded unauthenticated and must send the
//! `authentication_challenge` action (`{"seq":1,"action":"authentication_challenge","data":{"token":..}}`,
//! answered `hello` then `{"status":"OK","seq_reply":1}`; a wrong token closes the socket and counts as refused),
//! as Mattermost allows. A wrong Bearer header on the upgrade is answered 401 (the real server upgrades and then
//! drops the unauthenticated socket; a plain refusal is easier to observe). Events carry a per-connection `seq`
//! counting up from the hello's 0, like the real server's. Other action frames are answered `{"status":"OK",
//! "seq_reply":n}`.
//!
//! `mattermostdriver` (Mattermost's Python client) and the Python nanobot 0.3.5's Mattermost channel run against
//! it (see the testkit's `fake_sdks` tests). Test controls: [`FakeMattermost::add_user`], `add_channel`,
//! `add_file`, `add_post`; [`FakeMattermost::post_event`] (a `posted` event as the server sends it: the post as a
//! JSON string in `data.post`, `channel_type`, `team_id` in `data` while `broadcast.team_id` is empty, as
//! Mattermost's notification code broadcasts it to the channel); [`FakeMattermost::push_event`] (a raw frame);
//! [`FakeMattermost::drop_connections`]. Nothing is queued for connections opened later.

use nanobot_util::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
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

/// The bot account's user id (the token belongs to it; `GET /api/v4/users/me`).
pub const BOT_USER_ID: &str = "nanobotbotuser000000000001";
/// The bot account's username.
pub const BOT_USERNAME: &str = "nanobot";
/// The team the fake's channels usually belong to.
pub const TEAM_ID: &str = "nanobotteam000000000000001";
/// The server version the `hello` event announces.
pub const SERVER_VERSION: &str = "10.5.0.10.5.0.fake.false";
/// The longest `message` a post may have, in characters (Mattermost's `MaxPostSize` default).
pub const MAX_POST_CHARS: usize = 16383;

/// The largest request body read.
const MAX_BODY: usize = 64 << 20;

/// One HTTP request the fake received (refused ones included, see [`FakeMattermost::refused`]).
#[derive(Debug, Clone)]
pub struct MattermostCall {
    /// HTTP method (`GET`, `POST`, …).
    pub method: String,
    /// Path, e.g. `/api/v4/posts`.
    pub path: String,
    /// The query string without `?` (empty when none).
    pub query: String,
    /// The `Authorization` header, if sent.
    pub authorization: Option<String>,
    /// The JSON body (`Null` when none or not JSON). For `POST /api/v4/files`: `{"channel_id": ..,
    /// "files": [{"name": .., "size": ..}]}`, from the parsed multipart body.
    pub body: Value,
}

enum Cmd {
    /// A frame sent as is.
    Raw(String),
    /// An event object; the connection sets its `seq`.
    Event(Value),
    Drop,
}

struct StoredFile {
    info: Value,
    bytes: Vec<u8>,
}

struct State {
    token: String,
    port: u16,
    users: Mutex<BTreeMap<String, Value>>,
    channels: Mutex<BTreeMap<String, Value>>,
    files: Mutex<HashMap<String, StoredFile>>,
    /// Known posts in creation order.
    posts: Mutex<Vec<Value>>,
    calls: Mutex<Vec<MattermostCall>>,
    conns: Mutex<Vec<mpsc::UnboundedSender<Cmd>>>,
    connections: AtomicUsize,
    refused: AtomicUsize,
    ids: AtomicU64,
    clock: AtomicI64,
    changed: Notify,
}

impl State {
    /// A fresh 26-character id (Mattermost's length) starting with `kind`.
    fn new_id(&self, kind: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let width = 26usize.saturating_sub(kind.len());
        format!("{kind}{n:0>width$}")
    }

    /// Milliseconds since the epoch, strictly increasing across calls.
    fn now_ms(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
        let mut last = self.clock.load(Ordering::SeqCst);
        loop {
            let next = wall.max(last + 1);
            match self
                .clock
                .compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    fn post(&self, id: &str) -> Option<Value> {
        lock(&self.posts).iter().find(|p| p["id"] == id).cloned()
    }

    fn user_json(id: &str, username: &str, email: &str, is_bot: bool, at: i64) -> Value {
        json!({
            "id": id, "create_at": at, "update_at": at, "delete_at": 0, "username": username,
            "auth_data": "", "auth_service": "", "email": email, "nickname": "", "first_name": "",
            "last_name": "", "position": "", "roles": "system_user", "locale": "en", "is_bot": is_bot,
            "timezone": {"automaticTimezone": "", "manualTimezone": "", "useAutomaticTimezone": "true"},
        })
    }

    /// A post object as the server stores and answers it.
    fn make_post(
        &self,
        user_id: &str,
        channel_id: &str,
        message: &str,
        root_id: &str,
        file_ids: &[String],
    ) -> Value {
        let at = self.now_ms();
        let mut post = json!({
            "id": self.new_id("post"), "create_at": at, "update_at": at, "edit_at": 0, "delete_at": 0,
            "is_pinned": false, "user_id": user_id, "channel_id": channel_id, "root_id": root_id,
            "original_id": "", "message": message, "type": "", "props": {}, "hashtags": "",
            "pending_post_id": "", "reply_count": 0, "last_reply_at": 0, "participants": null, "metadata": {},
        });
        if !file_ids.is_empty() {
            post["file_ids"] = json!(file_ids);
            let mut files = lock(&self.files);
            let mut infos = Vec::new();
            for id in file_ids {
                if let Some(f) = files.get_mut(id) {
                    f.info["post_id"] = post["id"].clone();
                    infos.push(f.info.clone());
                }
            }
            post["metadata"]["files"] = json!(infos);
        }
        post
    }

    fn file_info(&self, id: &str, name: &str, channel_id: &str, size: usize) -> Value {
        let at = self.now_ms();
        let extension = name.rsplit_once('.').map_or("", |(_, e)| e).to_ascii_lowercase();
        let mime = match extension.as_str() {
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            "gif" => "image/gif",
            "txt" => "text/plain",
            "pdf" => "application/pdf",
            "json" => "application/json",
            _ => "application/octet-stream",
        };
        json!({
            "id": id, "user_id": BOT_USER_ID, "post_id": "", "channel_id": channel_id, "create_at": at,
            "update_at": at, "delete_at": 0, "name": name, "extension": extension, "size": size,
            "mime_type": mime, "width": 0, "height": 0, "has_preview_image": false, "mini_preview": null,
            "remote_id": "", "archived": false,
        })
    }
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
pub struct FakeMattermost {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeMattermost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.inner.state;
        f.debug_struct("FakeMattermost")
            .field("port", &s.port)
            .field("connections", &s.connections.load(Ordering::SeqCst))
            .field("refused", &s.refused.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl FakeMattermost {
    /// Starts on a free port of 127.0.0.1 for a bot whose personal access token is `token`. The bot user
    /// ([`BOT_USER_ID`], [`BOT_USERNAME`], `nanobot@example.com`) is known; add the rest with
    /// [`FakeMattermost::add_user`] and [`FakeMattermost::add_channel`].
    pub async fn start(token: &str) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            token: token.to_string(),
            port: listener.local_addr()?.port(),
            users: Mutex::default(),
            channels: Mutex::default(),
            files: Mutex::default(),
            posts: Mutex::default(),
            calls: Mutex::default(),
            conns: Mutex::default(),
            connections: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            ids: AtomicU64::new(0),
            clock: AtomicI64::new(0),
            changed: Notify::new(),
        });
        let at = state.now_ms();
        lock(&state.users).insert(
            BOT_USER_ID.into(),
            State::user_json(BOT_USER_ID, BOT_USERNAME, "nanobot@example.com", true, at),
        );
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
                        async move { Ok::<_, std::convert::Infallible>(handle(s, req).await) }
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

    /// The server URL (`serverUrl`): `http://127.0.0.1:<port>`; the WebSocket is `ws://127.0.0.1:<port>/api/v4/websocket`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state().port)
    }

    /// The port (for clients configured with host and port apart, like `mattermostdriver`).
    pub fn port(&self) -> u16 {
        self.state().port
    }

    /// Adds (or replaces) a user, answered by `GET /api/v4/users/{id}`.
    pub fn add_user(&self, id: &str, username: &str, email: &str) {
        let at = self.state().now_ms();
        lock(&self.state().users).insert(id.into(), State::user_json(id, username, email, false, at));
    }

    /// Adds (or replaces) a channel of type `kind` (`"O"` public, `"P"` private, `"D"` direct, `"G"` group) in
    /// team `team_id` (`""` for `D`/`G`, as on the real server), answered by `GET /api/v4/channels/{id}`. Posts
    /// may only be created in known channels.
    pub fn add_channel(&self, id: &str, kind: &str, team_id: &str) {
        let at = self.state().now_ms();
        let channel = json!({
            "id": id, "create_at": at, "update_at": at, "delete_at": 0, "team_id": team_id, "type": kind,
            "display_name": format!("Channel {id}"), "name": format!("channel-{id}"), "header": "",
            "purpose": "", "last_post_at": 0, "total_msg_count": 0, "extra_update_at": 0, "creator_id": "",
        });
        lock(&self.state().channels).insert(id.into(), channel);
    }

    /// Adds a file uploaded earlier by someone else: `GET /api/v4/files/{id}` serves `bytes`,
    /// `GET /api/v4/files/{id}/info` its info (name, extension, size, mime type).
    pub fn add_file(&self, id: &str, name: &str, bytes: Vec<u8>) {
        let info = self.state().file_info(id, name, "", bytes.len());
        lock(&self.state().files).insert(id.into(), StoredFile { info, bytes });
    }

    /// Adds a known post (a JSON object with at least `id`; `user_id`, `channel_id`, `root_id`, `message`,
    /// `create_at` as wanted, a `create_at` is given when missing), for `GET /api/v4/posts/{id}/thread`,
    /// reactions and replies.
    pub fn add_post(&self, mut post: Value) {
        if post.get("create_at").is_none() {
            post["create_at"] = json!(self.state().now_ms());
        }
        for (key, default) in [("root_id", ""), ("message", ""), ("type", "")] {
            if post.get(key).is_none() {
                post[key] = json!(default);
            }
        }
        lock(&self.state().posts).push(post);
    }

    /// Every post the fake knows (added, sent by [`FakeMattermost::post_event`], created by clients), in order.
    pub fn posts(&self) -> Vec<Value> {
        lock(&self.state().posts).clone()
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        crate::wait::until(&self.state().changed, WAIT, "fake mattermost", what, || {
            check(self.state())
        })
        .await
    }

    /// Waits (60 s at most, an error then) until `n` WebSocket connections have been authenticated in total since
    /// start (each has had its `hello`).
    pub async fn connected(&self, n: usize) -> Result<()> {
        self.wait(&format!("connection #{n}"), |s| {
            (s.connections.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    /// How many requests were refused for a missing or wrong token (REST 401s, WebSocket upgrades answered 401,
    /// failed `authentication_challenge`s).
    pub fn refused(&self) -> usize {
        self.state().refused.load(Ordering::SeqCst)
    }

    /// Sends a `posted` event for a new post by `user_id` in `channel_id` to every open connection, as Mattermost
    /// does: `data.post` is the post as a JSON string (`id`, `create_at`, `user_id`, `channel_id`, `root_id`,
    /// `message`, `type: ""`, `file_ids` when any, …), `data.channel_type` the channel's type (`"O"` for an unknown
    /// channel), `data.team_id` its team, `data.sender_name` `@<username>`, `data.mentions` (a JSON string array)
    /// the known users `@`-mentioned (and the bot in a DM); `broadcast.channel_id` is the channel,
    /// `broadcast.team_id` empty. The post becomes known (threads, reactions, replies). Returns the post id.
    pub fn post_event(
        &self,
        user_id: &str,
        channel_id: &str,
        message: &str,
        root_id: Option<&str>,
        file_ids: &[&str],
    ) -> String {
        let s = self.state();
        let file_ids: Vec<String> = file_ids.iter().map(|f| f.to_string()).collect();
        let post = s.make_post(user_id, channel_id, message, root_id.unwrap_or(""), &file_ids);
        let id = post["id"].as_str().unwrap_or_default().to_string();
        lock(&s.posts).push(post.clone());
        let channel = lock(&s.channels).get(channel_id).cloned().unwrap_or(Value::Null);
        let kind = channel["type"].as_str().unwrap_or("O").to_string();
        let users = lock(&s.users).clone();
        let sender = users
            .get(user_id)
            .and_then(|u| u["username"].as_str())
            .unwrap_or(user_id)
            .to_string();
        let mut mentions: Vec<String> = users
            .values()
            .filter(|u| u["id"] != user_id)
            .filter_map(|u| u["username"].as_str().map(|name| (u, name)))
            .filter(|(_, name)| mentioned(message, name))
            .filter_map(|(u, _)| u["id"].as_str().map(str::to_string))
            .collect();
        if kind == "D" && user_id != BOT_USER_ID && !mentions.iter().any(|m| m == BOT_USER_ID) {
            mentions.push(BOT_USER_ID.into());
        }
        let mut data = json!({
            "channel_display_name": channel["display_name"].as_str().unwrap_or(channel_id),
            "channel_name": channel["name"].as_str().unwrap_or(channel_id),
            "channel_type": kind,
            "post": post.to_string(),
            "sender_name": format!("@{sender}"),
            "set_online": true,
            "team_id": channel["team_id"].as_str().unwrap_or(""),
        });
        if !mentions.is_empty() {
            data["mentions"] = json!(json!(mentions).to_string());
        }
        if !file_ids.is_empty() {
            data["otherFile"] = json!("true");
        }
        let event = json!({
            "event": "posted", "data": data,
            "broadcast": {"omit_users": null, "user_id": "", "channel_id": channel_id, "team_id": "",
                          "connection_id": "", "omit_connection_id": ""},
        });
        for c in lock(&s.conns).iter() {
            let _ = c.send(Cmd::Event(event.clone()));
        }
        id
    }

    /// Sends a frame (a JSON object, as given: no `seq` is added) to every open connection; nothing is kept for
    /// later ones.
    pub fn push_event(&self, event: &Value) {
        let text = event.to_string();
        for c in lock(&self.state().conns).iter() {
            let _ = c.send(Cmd::Raw(text.clone()));
        }
    }

    /// Every HTTP request so far, in order.
    pub fn calls(&self) -> Vec<MattermostCall> {
        lock(&self.state().calls).clone()
    }

    /// Waits (60 s at most, an error then) until at least `n` requests with `method` on paths starting with
    /// `path` arrived; returns them (all matching so far, in order).
    pub async fn wait_calls(&self, method: &str, path: &str, n: usize) -> Result<Vec<MattermostCall>> {
        self.wait(&format!("{n} `{method} {path}` calls"), |s| {
            let found: Vec<_> = lock(&s.calls)
                .iter()
                .filter(|c| c.method == method && c.path.starts_with(path))
                .cloned()
                .collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// Closes every open WebSocket connection without a close frame (the server restarting); later connections
    /// are accepted as before.
    pub fn drop_connections(&self) {
        for c in lock(&self.state().conns).drain(..) {
            let _ = c.send(Cmd::Drop);
        }
        self.state().changed.notify_waiters();
    }
}

/// Whether `text` has `@name` not inside a longer word (Mattermost's mention rule, roughly).
fn mentioned(text: &str, name: &str) -> bool {
    let needle = format!("@{name}");
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.';
    text.match_indices(&needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(|c| word(c) || c == '@') && !after.is_some_and(|c| word(c) && c != '.')
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

fn reply(status: StatusCode, value: &Value) -> Response<Body> {
    respond(status, "application/json", value.to_string())
}

/// Mattermost's error answer.
fn mm_error(s: &State, status: StatusCode, id: &str, message: &str, detail: &str) -> Response<Body> {
    reply(
        status,
        &json!({"id": id, "message": message, "detailed_error": detail, "request_id": s.new_id("req"),
                "status_code": status.as_u16()}),
    )
}

fn unauthorized(s: &State) -> Response<Body> {
    s.refused.fetch_add(1, Ordering::SeqCst);
    s.changed.notify_waiters();
    mm_error(
        s,
        StatusCode::UNAUTHORIZED,
        "api.context.session_expired.app_error",
        "Invalid or expired session, please login again.",
        "",
    )
}

fn forbidden(s: &State) -> Response<Body> {
    mm_error(
        s,
        StatusCode::FORBIDDEN,
        "api.context.permissions.app_error",
        "You do not have the appropriate permissions.",
        "",
    )
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

async fn handle(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade && req.uri().path() == "/api/v4/websocket" {
        return upgrade_ws(s, req);
    }
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let headers = req.headers().clone();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY)
        .await
        .unwrap_or_default();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let upload =
        (method == "POST" && path == "/api/v4/files").then(|| parse_upload(&content_type, &query, &bytes));
    let body = match &upload {
        Some(Ok(u)) => json!({"channel_id": u.channel_id,
            "files": u.files.iter().map(|(name, bytes)| json!({"name": name, "size": bytes.len()})).collect::<Vec<_>>()}),
        _ => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    lock(&s.calls).push(MattermostCall {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        authorization,
        body: body.clone(),
    });
    s.changed.notify_waiters();
    let segs: Vec<&str> = path
        .strip_prefix("/api/v4/")
        .map(|p| p.split('/').collect())
        .unwrap_or_default();
    if method == "GET" && segs == ["system", "ping"] {
        return reply(StatusCode::OK, &json!({"status": "OK"}));
    }
    if bearer(&headers) != Some(s.token.as_str()) {
        return unauthorized(&s);
    }
    match (method.as_str(), segs.as_slice()) {
        ("GET", ["users", id]) => {
            let id = if *id == "me" { BOT_USER_ID } else { id };
            match lock(&s.users).get(id) {
                Some(user) => reply(StatusCode::OK, user),
                None => mm_error(
                    &s,
                    StatusCode::NOT_FOUND,
                    "app.user.missing_account.const",
                    "Unable to find the user.",
                    "",
                ),
            }
        }
        ("GET", ["channels", id]) => match lock(&s.channels).get(*id) {
            Some(channel) => reply(StatusCode::OK, channel),
            None => mm_error(
                &s,
                StatusCode::NOT_FOUND,
                "app.channel.get.existing.app_error",
                "Unable to find the existing channel.",
                "",
            ),
        },
        ("POST", ["posts"]) => create_post(&s, &body),
        ("GET", ["posts", id]) => match s.post(id) {
            Some(post) => reply(StatusCode::OK, &post),
            None => post_missing(&s),
        },
        ("PUT", ["posts", id, "patch"]) => patch_post(&s, id, &body),
        ("GET", ["posts", id, "thread"]) => thread(&s, id),
        ("POST", ["files"]) => match upload {
            Some(Ok(u)) => upload_files(&s, u),
            Some(Err(why)) => mm_error(
                &s,
                StatusCode::BAD_REQUEST,
                "api.file.upload_file.read_request.app_error",
                "Unable to upload file(s). Error reading or parsing request data.",
                &why,
            ),
            None => forbidden(&s),
        },
        ("GET", ["files", id]) => match lock(&s.files).get(*id) {
            Some(f) => {
                let mime = f.info["mime_type"].as_str().unwrap_or("application/octet-stream");
                let mut resp = respond(StatusCode::OK, mime, f.bytes.clone());
                let name = f.info["name"].as_str().unwrap_or("file").replace('"', "");
                if let Ok(v) = format!("attachment;filename=\"{name}\"").parse() {
                    resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
                }
                resp
            }
            None => file_missing(&s),
        },
        ("GET", ["files", id, "info"]) => match lock(&s.files).get(*id) {
            Some(f) => reply(StatusCode::OK, &f.info),
            None => file_missing(&s),
        },
        ("POST", ["reactions"]) => {
            let user_ok = body["user_id"] == BOT_USER_ID;
            let post_ok = body["post_id"].as_str().is_some_and(|p| s.post(p).is_some());
            let emoji_ok = body["emoji_name"].as_str().is_some_and(|e| !e.is_empty());
            if !emoji_ok {
                return mm_error(
                    &s,
                    StatusCode::BAD_REQUEST,
                    "model.reaction.is_valid.emoji_name.app_error",
                    "Invalid emoji name.",
                    "",
                );
            }
            if !user_ok || !post_ok {
                return forbidden(&s);
            }
            let at = s.now_ms();
            let channel = s
                .post(body["post_id"].as_str().unwrap_or_default())
                .map_or(Value::Null, |p| p["channel_id"].clone());
            reply(
                StatusCode::OK,
                &json!({"user_id": body["user_id"], "post_id": body["post_id"], "emoji_name": body["emoji_name"],
                        "create_at": at, "update_at": at, "delete_at": 0, "remote_id": "", "channel_id": channel}),
            )
        }
        ("DELETE", ["users", uid, "posts", pid, "reactions", _emoji]) => {
            if *uid != BOT_USER_ID || s.post(pid).is_none() {
                return forbidden(&s);
            }
            reply(StatusCode::OK, &json!({"status": "OK"}))
        }
        _ => mm_error(
            &s,
            StatusCode::NOT_FOUND,
            "api.context.404.app_error",
            "Sorry, we could not find the page.",
            &format!("There doesn't appear to be an api call for the url='{path}'."),
        ),
    }
}

fn post_missing(s: &State) -> Response<Body> {
    mm_error(
        s,
        StatusCode::NOT_FOUND,
        "app.post.get.app_error",
        "Unable to get the post.",
        "",
    )
}

fn file_missing(s: &State) -> Response<Body> {
    mm_error(
        s,
        StatusCode::NOT_FOUND,
        "app.file_info.get.app_error",
        "Unable to get the file info.",
        "",
    )
}

fn too_long(s: &State, message: &str) -> Option<Response<Body>> {
    let length = message.chars().count();
    (length > MAX_POST_CHARS).then(|| {
        mm_error(
            s,
            StatusCode::BAD_REQUEST,
            "model.post.is_valid.message_length.app_error",
            &format!(
                "Post Message property length is {length} characters, which exceeds the {MAX_POST_CHARS} characters limit."
            ),
            "",
        )
    })
}

fn create_post(s: &State, body: &Value) -> Response<Body> {
    let Some(channel_id) = body["channel_id"].as_str().filter(|c| !c.is_empty()) else {
        return mm_error(
            s,
            StatusCode::BAD_REQUEST,
            "api.context.invalid_body_param.app_error",
            "Invalid or missing post in request body.",
            "",
        );
    };
    if !lock(&s.channels).contains_key(channel_id) {
        return forbidden(s);
    }
    let message = body["message"].as_str().unwrap_or_default();
    if let Some(resp) = too_long(s, message) {
        return resp;
    }
    let root_id = body["root_id"].as_str().unwrap_or_default();
    if !root_id.is_empty()
        && s.post(root_id)
            .is_none_or(|root| root["channel_id"] != channel_id)
    {
        return mm_error(
            s,
            StatusCode::BAD_REQUEST,
            "api.post.create_post.root_id.app_error",
            "Invalid RootId parameter.",
            "",
        );
    }
    let file_ids: Vec<String> = body["file_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    let mut post = s.make_post(BOT_USER_ID, channel_id, message, root_id, &file_ids);
    if let Some(props) = body.get("props").filter(|p| p.is_object()) {
        post["props"] = props.clone();
    }
    lock(&s.posts).push(post.clone());
    s.changed.notify_waiters();
    reply(StatusCode::CREATED, &post)
}

fn patch_post(s: &State, id: &str, body: &Value) -> Response<Body> {
    if let Some(resp) = body["message"].as_str().and_then(|m| too_long(s, m)) {
        return resp;
    }
    let at = s.now_ms();
    let mut posts = lock(&s.posts);
    let Some(post) = posts.iter_mut().find(|p| p["id"] == id) else {
        drop(posts);
        return post_missing(s);
    };
    if post["user_id"] != BOT_USER_ID {
        drop(posts);
        return forbidden(s);
    }
    for key in ["message", "is_pinned", "props", "file_ids", "has_reactions"] {
        if let Some(v) = body.get(key) {
            post[key] = v.clone();
        }
    }
    post["edit_at"] = json!(at);
    post["update_at"] = json!(at);
    reply(StatusCode::OK, post)
}

fn thread(s: &State, id: &str) -> Response<Body> {
    let Some(post) = s.post(id) else {
        return post_missing(s);
    };
    let root = match post["root_id"].as_str() {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => id.to_string(),
    };
    let mut members: Vec<Value> = lock(&s.posts)
        .iter()
        .filter(|p| p["id"] == root.as_str() || p["root_id"] == root.as_str())
        .cloned()
        .collect();
    members.sort_by_key(|p| std::cmp::Reverse(p["create_at"].as_i64().unwrap_or(0)));
    let order: Vec<Value> = members.iter().map(|p| p["id"].clone()).collect();
    let posts: serde_json::Map<String, Value> = members
        .into_iter()
        .filter_map(|p| p["id"].as_str().map(str::to_string).map(|k| (k, p)))
        .collect();
    reply(
        StatusCode::OK,
        &json!({"order": order, "posts": posts, "next_post_id": "", "prev_post_id": "", "has_next": false}),
    )
}

/// A parsed `POST /api/v4/files`.
struct Upload {
    channel_id: String,
    client_ids: Vec<String>,
    files: Vec<(String, Vec<u8>)>,
}

fn parse_upload(content_type: &str, query: &str, body: &[u8]) -> Result<Upload, String> {
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        // The raw-body form: `?channel_id=..&filename=..`.
        let channel_id = param("channel_id").ok_or("no channel_id")?;
        let name = param("filename").ok_or("no filename")?;
        return Ok(Upload {
            channel_id,
            client_ids: Vec::new(),
            files: vec![(name, body.to_vec())],
        });
    }
    let parts = parse_multipart(content_type, body)?;
    let mut channel_id = param("channel_id");
    let mut client_ids = Vec::new();
    let mut files = Vec::new();
    for part in parts {
        match (part.name.as_str(), part.file_name) {
            ("channel_id", None) => channel_id = Some(String::from_utf8_lossy(&part.body).into_owned()),
            ("client_ids", None) => client_ids.push(String::from_utf8_lossy(&part.body).into_owned()),
            ("files", Some(name)) => files.push((name, part.body)),
            (name, _) => return Err(format!("unexpected part {name:?}")),
        }
    }
    let channel_id = channel_id
        .filter(|c| !c.is_empty())
        .ok_or("no channel_id field (it must come before the files)")?;
    if files.is_empty() {
        return Err("no files part".into());
    }
    Ok(Upload {
        channel_id,
        client_ids,
        files,
    })
}

fn upload_files(s: &State, upload: Upload) -> Response<Body> {
    if !lock(&s.channels).contains_key(&upload.channel_id) {
        return forbidden(s);
    }
    let mut infos = Vec::new();
    for (name, bytes) in upload.files {
        let id = s.new_id("file");
        let info = s.file_info(&id, &name, &upload.channel_id, bytes.len());
        lock(&s.files).insert(
            id,
            StoredFile {
                info: info.clone(),
                bytes,
            },
        );
        infos.push(info);
    }
    reply(
        StatusCode::CREATED,
        &json!({"file_infos": infos, "client_ids": upload.client_ids}),
    )
}

/// One part of a `multipart/form-data` body.
struct FormPart {
    name: String,
    file_name: Option<String>,
    body: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses a `multipart/form-data` body (RFC 7578) strictly: the boundary of the content type, no preamble, CRLF
/// line ends, a `Content-Disposition: form-data` with a `name` in every part, the closing delimiter.
fn parse_multipart(content_type: &str, body: &[u8]) -> Result<Vec<FormPart>, String> {
    let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err(format!("content type {mime:?} is not multipart/form-data"));
    }
    let boundary = header_params(params)
        .remove("boundary")
        .filter(|b| !b.is_empty() && b.len() <= 70)
        .ok_or("no boundary")?;
    let delimiter = format!("--{boundary}").into_bytes();
    let mut rest = body
        .strip_prefix(delimiter.as_slice())
        .ok_or("the body does not start with the boundary")?;
    let mut next = b"\r\n".to_vec();
    next.extend_from_slice(&delimiter);
    let mut parts = Vec::new();
    loop {
        if let Some(epilogue) = rest.strip_prefix(b"--") {
            if !(epilogue.is_empty() || epilogue == b"\r\n") {
                return Err("data after the closing boundary".into());
            }
            break;
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or("no line end after the boundary")?;
        let head_end = find(rest, b"\r\n\r\n").ok_or("part headers do not end")?;
        let head = std::str::from_utf8(&rest[..head_end]).map_err(|_| "part headers are not UTF-8")?;
        rest = &rest[head_end + 4..];
        let end = find(rest, &next).ok_or("part does not end with the boundary")?;
        let content = rest[..end].to_vec();
        rest = &rest[end + next.len()..];
        let mut disposition = None;
        for line in head.split("\r\n") {
            let (key, value) = line
                .split_once(':')
                .ok_or_else(|| format!("bad part header {line:?}"))?;
            if key.trim().eq_ignore_ascii_case("content-disposition") {
                disposition = Some(value.trim().to_string());
            }
        }
        let disposition = disposition.ok_or("part without Content-Disposition")?;
        let (kind, params) = disposition.split_once(';').unwrap_or((&disposition, ""));
        if !kind.trim().eq_ignore_ascii_case("form-data") {
            return Err(format!("disposition {kind:?} is not form-data"));
        }
        let mut params = header_params(params);
        parts.push(FormPart {
            name: params.remove("name").ok_or("part without a name")?,
            file_name: params.remove("filename"),
            body: content,
        });
    }
    Ok(parts)
}

/// `; key=value; key="quoted \"value\""` parameters of a header, keys lowercase.
fn header_params(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ';' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied().filter(|c| *c != ';') {
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        out.insert(key.trim().to_ascii_lowercase(), value);
    }
}

fn upgrade_ws(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let headers = req.headers();
    let authenticated = match bearer(headers) {
        Some(token) if token == s.token => true,
        Some(_) => return unauthorized(&s),
        None => false,
    };
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
            serve_ws(s, ws, authenticated).await;
        }
    });
    resp
}

type Sink = futures::stream::SplitSink<WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>, Ws>;

/// Registers an authenticated connection and sends its `hello` (seq 0).
async fn register(s: &State, sink: &mut Sink, tx: &mpsc::UnboundedSender<Cmd>, conn_id: &str) -> bool {
    lock(&s.conns).push(tx.clone());
    let hello = json!({
        "event": "hello", "data": {"connection_id": conn_id, "server_version": SERVER_VERSION},
        "broadcast": {"omit_users": null, "user_id": BOT_USER_ID, "channel_id": "", "team_id": "",
                      "connection_id": "", "omit_connection_id": ""},
        "seq": 0,
    });
    if sink.send(Ws::Text(hello.to_string().into())).await.is_err() {
        return false;
    }
    s.connections.fetch_add(1, Ordering::SeqCst);
    s.changed.notify_waiters();
    true
}

async fn serve_ws(
    s: Arc<State>,
    ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    mut authenticated: bool,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut sink, mut stream) = ws.split();
    let conn_id = s.new_id("conn");
    let mut seq: u64 = 0;
    if authenticated && !register(&s, &mut sink, &tx, &conn_id).await {
        return;
    }
    loop {
        tokio::select! {
            cmd = rx.recv() => {
                let text = match cmd {
                    Some(Cmd::Raw(text)) => text,
                    Some(Cmd::Event(mut event)) => {
                        seq += 1;
                        event["seq"] = json!(seq);
                        event.to_string()
                    }
                    Some(Cmd::Drop) | None => break,
                };
                if sink.send(Ws::Text(text.into())).await.is_err() { break; }
            }
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
                let reply_seq = frame["seq"].clone();
                if action == "authentication_challenge" {
                    if authenticated {
                        continue;
                    }
                    if frame["data"]["token"].as_str() != Some(s.token.as_str()) {
                        // The real server closes the socket on a bad token.
                        s.refused.fetch_add(1, Ordering::SeqCst);
                        s.changed.notify_waiters();
                        let _ = sink.close().await;
                        break;
                    }
                    authenticated = true;
                    if !register(&s, &mut sink, &tx, &conn_id).await {
                        break;
                    }
                    let ok = json!({"status": "OK", "seq_reply": reply_seq});
                    if sink.send(Ws::Text(ok.to_string().into())).await.is_err() { break; }
                    continue;
                }
                let answer = if authenticated {
                    json!({"status": "OK", "seq_reply": reply_seq})
                } else {
                    json!({"status": "FAIL", "seq_reply": reply_seq, "error": {
                        "id": "api.web_socket_router.not_authenticated.app_error",
                        "message": "No authentication on websocket connection.", "status_code": 401}})
                };
                if sink.send(Ws::Text(answer.to_string().into())).await.is_err() { break; }
            }
        }
    }
    s.changed.notify_waiters();
}
