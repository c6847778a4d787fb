//! A fake DingTalk Open API for channel tests: Stream mode (`connections/open` with a one-time ticket checked at
//! the WebSocket handshake, JSON frames, acknowledgements recorded), access tokens, robot message sends (any
//! `msgKey`: `sampleMarkdown`, `sampleImageMsg`, `sampleFile`, …), file downloads, and the legacy API's media
//! upload (`POST /media/upload`, served on the same port: point both API hosts at [`FakeDingTalk::base_url`]);
//! every REST call recorded.
//!
//! The official `dingtalk-stream` Python SDK connects to it (see the testkit's `fake_sdks` tests). That SDK has no
//! media upload call, so the upload endpoint is not proven against it; it follows DingTalk's documentation instead,
//! strictly: the `access_token` and `type` query parameters are required and the token must be a live one (else
//! errcode 40014 with HTTP 200, as the legacy API answers), and the `multipart/form-data` body is really parsed
//! (boundary, part headers, quoted file names) and must hold a `media` part with a file name. Test controls:
//! [`FakeDingTalk::push_message`], [`FakeDingTalk::push_system`] (`ping`, `disconnect`),
//! [`FakeDingTalk::drop_connections`], [`FakeDingTalk::expire_tokens`] (the API answers 401 until a new token is
//! fetched), [`FakeDingTalk::fail_uploads`] (the next uploads are refused or answered "token expired"),
//! [`FakeDingTalk::refuse_messages`] (the next robot messages of a `msgKey` are refused).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
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
    /// `x-acs-dingtalk-access-token` header, if sent (else the legacy API's `access_token` query parameter).
    pub token: Option<String>,
    /// JSON body (`Null` when none).
    pub body: Value,
}

/// A file the client uploaded (`POST /media/upload`) and the fake accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DingTalkUpload {
    /// The `type` query parameter: `image`, `voice`, `video` or `file`.
    pub media_type: String,
    /// The file name of the `media` part.
    pub file_name: String,
    /// The `Content-Type` of the `media` part, if given.
    pub content_type: Option<String>,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// The `media_id` the fake answered with.
    pub media_id: String,
    /// The access token it was made with.
    pub token: String,
}

/// How [`FakeDingTalk::fail_uploads`] makes an upload fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UploadFault {
    /// HTTP 200 with errcode 40035 (invalid parameter) and an `errmsg` that quotes the request URL, access token
    /// included (as a careless server or proxy would), so tests can check the client does not repeat it.
    Refuse,
    /// HTTP 200 with errcode 42001 (access token expired), whatever the token.
    ExpiredToken,
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
    uploads: Mutex<Vec<DingTalkUpload>>,
    upload_faults: Mutex<VecDeque<UploadFault>>,
    refused_keys: Mutex<HashMap<String, usize>>,
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
            uploads: Mutex::default(),
            upload_faults: Mutex::default(),
            refused_keys: Mutex::default(),
            issued: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            changed: Notify::new(),
        });
        let s = state.clone();
        let app = axum::Router::new()
            .fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move { rest(&s, &method, &uri, &headers, &body) }
            })
            // Uploads go up to DingTalk's 20 MB limit (axum's default limit is 2 MB).
            .layer(axum::extract::DefaultBodyLimit::max(32 << 20));
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

    /// The Open API base URL (`DINGTALK_OPENAPI_ENDPOINT` for the SDK, `baseUrl` for the channel); the legacy
    /// API (`/media/upload`) answers on it too.
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

    /// Files uploaded and accepted so far, in order.
    pub fn uploads(&self) -> Vec<DingTalkUpload> {
        lock(&self.state.uploads).clone()
    }

    /// Makes the next uploads fail, one per entry of `faults`, in order (after those queued before).
    pub fn fail_uploads(&self, faults: impl IntoIterator<Item = UploadFault>) {
        lock(&self.state.upload_faults).extend(faults);
    }

    /// Refuses the next `n` robot messages whose `msgKey` is `msg_key` (HTTP 400, `invalidParameter`); the
    /// refused calls are still recorded.
    pub fn refuse_messages(&self, msg_key: &str, n: usize) {
        *lock(&self.state.refused_keys)
            .entry(msg_key.to_string())
            .or_default() += n;
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
        crate::wait::until(&self.state.changed, WAIT, "fake dingtalk", what, || {
            check(&self.state)
        })
        .await
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

    /// Waits until at least `n` files were uploaded and accepted; returns them.
    pub async fn uploaded(&self, n: usize) -> Result<Vec<DingTalkUpload>> {
        self.wait(&format!("{n} uploads"), |s| {
            let uploads = lock(&s.uploads);
            (uploads.len() >= n).then(|| uploads.clone())
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
    let query = query_pairs(uri.query().unwrap_or_default());
    let token = headers
        .get("x-acs-dingtalk-access-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| query.get("access_token").cloned());
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
        "/media/upload" => Json(upload(s, n, uri, &query, headers, body)).into_response(),
        _ => {
            if !token.is_some_and(|t| lock(&s.tokens).contains(&t)) {
                return unauthorized("access token invalid or expired");
            }
            let refused = json_body["msgKey"].as_str().is_some_and(|key| {
                let mut refused = lock(&s.refused_keys);
                match refused.get_mut(key) {
                    Some(left) if *left > 0 => {
                        *left -= 1;
                        true
                    }
                    _ => false,
                }
            });
            if refused && path.starts_with("/v1.0/robot/") {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"code": "invalidParameter", "message": "msgParam refused by the test"})),
                )
                    .into_response();
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

/// Decodes a query string (`+` and `%XX`).
fn query_pairs(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The legacy API's `POST /media/upload?access_token=…&type=…`: always HTTP 200, errors as `errcode`/`errmsg`.
fn upload(
    s: &State,
    n: u64,
    uri: &Uri,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Value {
    let error = |code: u32, msg: &str| json!({"errcode": code, "errmsg": msg});
    let Some(token) = query.get("access_token").filter(|t| !t.is_empty()) else {
        return error(40014, "missing access_token");
    };
    if !lock(&s.tokens).contains(token) {
        return error(40014, "invalid access_token");
    }
    let Some(media_type) = query.get("type") else {
        return error(40035, "missing type");
    };
    if !["image", "voice", "video", "file"].contains(&media_type.as_str()) {
        return error(40004, "invalid media type");
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let parts = match parse_multipart(content_type, body) {
        Ok(parts) => parts,
        Err(why) => return error(43008, &format!("bad multipart body: {why}")),
    };
    let Some(media) = parts.into_iter().find(|p| p.name == "media") else {
        return error(41005, "missing media part");
    };
    let Some(file_name) = media.file_name.filter(|f| !f.is_empty()) else {
        return error(41005, "media part without a file name");
    };
    match lock(&s.upload_faults).pop_front() {
        Some(UploadFault::Refuse) => return error(40035, &format!("invalid parameter in {uri}")),
        Some(UploadFault::ExpiredToken) => return error(42001, "access_token expired"),
        None => {}
    }
    let media_id = format!("@lADPfake{n:08}");
    lock(&s.uploads).push(DingTalkUpload {
        media_type: media_type.clone(),
        file_name,
        content_type: media.content_type,
        bytes: media.body,
        media_id: media_id.clone(),
        token: token.clone(),
    });
    s.changed.notify_waiters();
    json!({"errcode": 0, "errmsg": "ok", "media_id": media_id, "type": media_type, "created_at": 1_700_000_000_000_i64 + n as i64})
}

/// One part of a `multipart/form-data` body.
struct FormPart {
    name: String,
    file_name: Option<String>,
    content_type: Option<String>,
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
        let mut part_type = None;
        for line in head.split("\r\n") {
            let (key, value) = line
                .split_once(':')
                .ok_or_else(|| format!("bad part header {line:?}"))?;
            match key.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => disposition = Some(value.trim().to_string()),
                "content-type" => part_type = Some(value.trim().to_string()),
                _ => {}
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
            content_type: part_type,
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
