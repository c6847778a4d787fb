//! A fake Feishu / Lark Open API for channel tests: endpoint discovery, tenant access tokens, the long
//! connection's protobuf frames (pings answered with pongs, events pushed, acknowledgements recorded), the IM
//! calls (messages sent, replies, messages read by id, reactions, resources, image and file uploads as real
//! `multipart/form-data`) and CardKit's streaming cards (create, element text, settings, each update checked for
//! a strictly increasing `sequence`), every REST call recorded.
//!
//! The official `lark-oapi` Python SDK connects to it and calls these APIs (see the testkit's `fake_sdks` tests),
//! which is what makes it worth testing against. Test controls: [`FakeFeishu::push_event`],
//! [`FakeFeishu::drop_connections`] (the TCP connection is cut without a close frame), [`FakeFeishu::expire_tokens`]
//! (every issued token becomes invalid and the API answers code 99991663 until a new one is fetched),
//! [`FakeFeishu::add_message`] (a message the API serves by id), [`FakeFeishu::fail_next`] (the next calls to a
//! path answer an error code) and [`FakeFeishu::end_streaming`] (a card leaves streaming mode, as Feishu does
//! after a while).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use nanobot_feishu::frame::{Frame, Header};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as Ws;

/// The bot's open_id in the fake.
pub const BOT_OPEN_ID: &str = "ou_bot0000000000";

/// The fake's answer to a malformed request (a missing or invalid field), Feishu's "field validation failed".
pub const CODE_INVALID_REQUEST: i64 = 99_992_402;
/// The fake's answer to a CardKit update whose `sequence` is not above the card's last one.
pub const CODE_BAD_SEQUENCE: i64 = 300_317;
/// The fake's answer to a text update of a card that is not in streaming mode.
pub const CODE_STREAMING_CLOSED: i64 = 300_309;
/// The fake's answer for a card, or a message, that does not exist.
pub const CODE_NOT_FOUND: i64 = 230_001;
/// The fake's answer to an upload larger than Feishu takes (10 MiB images, 30 MiB files).
pub const CODE_TOO_LARGE: i64 = 234_006;

/// How long the waiting helpers wait.
const WAIT: Duration = Duration::from_secs(60);

fn header(key: &str, value: &str) -> Header {
    Header {
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

/// One CardKit operation the fake accepted on a card.
#[derive(Debug, Clone, PartialEq)]
pub struct CardOp {
    /// Its `sequence`.
    pub sequence: u64,
    /// The element's new text (an element content update).
    pub content: Option<String>,
    /// The new `streaming_mode` (a settings update).
    pub streaming_mode: Option<bool>,
}

/// A CardKit card created on the fake.
#[derive(Debug, Clone)]
pub struct FakeCard {
    /// `card_id`.
    pub card_id: String,
    /// The card JSON it was created with.
    pub card: Value,
    /// The text of its (first) element with an `element_id`, as last written.
    pub content: String,
    /// Whether it is in streaming mode.
    pub streaming: bool,
    /// The last accepted `sequence` (0 before any update).
    pub sequence: u64,
    /// The updates accepted, in order.
    pub ops: Vec<CardOp>,
}

/// An image or file uploaded to the fake (`multipart/form-data`, parsed).
#[derive(Debug, Clone)]
pub struct FeishuUpload {
    /// `image` (`/open-apis/im/v1/images`) or `file` (`/open-apis/im/v1/files`).
    pub kind: String,
    /// The `image_key` or `file_key` the fake gave it.
    pub key: String,
    /// The text fields (`image_type`; `file_type`, `file_name`).
    pub fields: BTreeMap<String, String>,
    /// The file part's `filename`, if it had one.
    pub file_name: Option<String>,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// A stored message the API serves by id.
#[derive(Debug, Clone)]
struct StoredMessage {
    msg_type: String,
    content: String,
    chat_id: String,
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
    cards: Mutex<Vec<FakeCard>>,
    uploads: Mutex<Vec<FeishuUpload>>,
    messages: Mutex<HashMap<String, StoredMessage>>,
    /// Injected failures: (path fragment, calls left, code).
    failures: Mutex<Vec<(String, usize, i64)>>,
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
            cards: Mutex::default(),
            uploads: Mutex::default(),
            messages: Mutex::default(),
            failures: Mutex::default(),
        });
        let s = state.clone();
        let app = axum::Router::new()
            .fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move {
                    let answer = rest(&s, method, uri, headers, body);
                    // Waiters look again once the call's effects (cards, uploads) are in place.
                    s.changed.notify_waiters();
                    answer
                }
            })
            // Uploads up to Feishu's own limit (and a little over, to answer those with Feishu's code).
            .layer(axum::extract::DefaultBodyLimit::max(MAX_FILE + (1 << 20)));
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

    /// The CardKit cards created so far, in order.
    pub fn cards(&self) -> Vec<FakeCard> {
        lock(&self.state.cards).clone()
    }

    /// The images and files uploaded so far, in order.
    pub fn uploads(&self) -> Vec<FeishuUpload> {
        lock(&self.state.uploads).clone()
    }

    /// Stores a message the API serves by id (`GET /open-apis/im/v1/messages/{message_id}`): `content` is the
    /// message's JSON content string (`{"text":"…"}` for `text`).
    pub fn add_message(&self, message_id: &str, msg_type: &str, content: &str) {
        lock(&self.state.messages).insert(
            message_id.into(),
            StoredMessage {
                msg_type: msg_type.into(),
                content: content.into(),
                chat_id: "oc_fake".into(),
            },
        );
    }

    /// The next `times` calls whose path contains `path_fragment` answer `{"code": code}` (HTTP 400) instead.
    pub fn fail_next(&self, path_fragment: &str, times: usize, code: i64) {
        lock(&self.state.failures).push((path_fragment.into(), times, code));
    }

    /// Takes card `card_id` out of streaming mode, as Feishu does some minutes after the last update; text
    /// updates then fail with [`CODE_STREAMING_CLOSED`] until streaming mode is turned on again.
    pub fn end_streaming(&self, card_id: &str) {
        if let Some(card) = lock(&self.state.cards).iter_mut().find(|c| c.card_id == card_id) {
            card.streaming = false;
        }
    }

    /// Waits until `check` finds what it looks for in the fake's records (checked after every call the fake
    /// answers); `what` names it in the error.
    pub async fn until<T>(&self, what: &str, mut check: impl FnMut(&FakeFeishu) -> Option<T>) -> Result<T> {
        self.wait(what, |_| check(self)).await
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
        let frame = Frame {
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
            ..Frame::default()
        };
        let conns = lock(&self.state.conns);
        let conn = conns.last().context("no open long connection")?;
        conn.send(Cmd::Send(frame.encode_to_vec()))
            .ok()
            .context("the connection closed")?;
        Ok(id)
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut(&State) -> Option<T>) -> Result<T> {
        crate::wait::until(&self.state.changed, WAIT, "fake feishu", what, || {
            check(&self.state)
        })
        .await
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

/// Feishu's largest image upload.
const MAX_IMAGE: usize = 10 * 1024 * 1024;
/// Feishu's largest file upload.
const MAX_FILE: usize = 30 * 1024 * 1024;

fn err(code: i64, msg: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"code": code, "msg": msg}))).into_response()
}

/// One part of a `multipart/form-data` body.
#[derive(Debug)]
struct Part {
    name: String,
    file_name: Option<String>,
    data: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// The parts of a `multipart/form-data` body (RFC 7578); `None` when it is malformed.
fn multipart(content_type: &str, body: &[u8]) -> Option<Vec<Part>> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })?;
    if boundary.is_empty() {
        return None;
    }
    let delimiter = format!("--{boundary}").into_bytes();
    let next_delimiter = format!("\r\n--{boundary}").into_bytes();
    let mut at = find(body, &delimiter, 0)? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body.get(at..at + 2)? == b"--" {
            return Some(parts);
        }
        if body.get(at..at + 2)? != b"\r\n" {
            return None;
        }
        let head_end = find(body, b"\r\n\r\n", at + 2)?;
        let head = std::str::from_utf8(&body[at + 2..head_end]).ok()?;
        let data_start = head_end + 4;
        let data_end = find(body, &next_delimiter, data_start)?;
        let mut name = None;
        let mut file_name = None;
        for line in head.split("\r\n") {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            if !key.trim().eq_ignore_ascii_case("content-disposition") {
                continue;
            }
            for param in value.split(';').skip(1) {
                let Some((k, v)) = param.split_once('=') else {
                    continue;
                };
                let v = v.trim().trim_matches('"').to_owned();
                match k.trim() {
                    "name" => name = Some(v),
                    "filename" => file_name = Some(v),
                    _ => {}
                }
            }
        }
        parts.push(Part {
            name: name?,
            file_name,
            data: body[data_start..data_end].to_vec(),
        });
        at = data_end + next_delimiter.len();
    }
}

/// `POST /open-apis/im/v1/images` or `/files`: parses the form, checks it as Feishu does, records the upload.
fn upload(s: &State, kind: &str, headers: &HeaderMap, body: &[u8], n: u64) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(parts) = multipart(content_type, body) else {
        return err(CODE_INVALID_REQUEST, "request body is not multipart/form-data");
    };
    let fields: BTreeMap<String, String> = parts
        .iter()
        .filter(|p| p.file_name.is_none())
        .map(|p| (p.name.clone(), String::from_utf8_lossy(&p.data).into_owned()))
        .collect();
    let (file_field, limit) = if kind == "image" {
        ("image", MAX_IMAGE)
    } else {
        ("file", MAX_FILE)
    };
    let Some(file) = parts.iter().find(|p| p.name == file_field) else {
        return err(CODE_INVALID_REQUEST, &format!("{file_field} is required"));
    };
    if file.data.is_empty() {
        return err(CODE_INVALID_REQUEST, "the file is empty");
    }
    if file.data.len() > limit {
        return err(CODE_TOO_LARGE, "file size exceeds the limit");
    }
    let valid = if kind == "image" {
        matches!(
            fields.get("image_type").map(String::as_str),
            Some("message" | "avatar")
        )
    } else {
        matches!(
            fields.get("file_type").map(String::as_str),
            Some("opus" | "mp4" | "pdf" | "doc" | "xls" | "ppt" | "stream")
        ) && fields.get("file_name").is_some_and(|f| !f.is_empty())
    };
    if !valid {
        return err(CODE_INVALID_REQUEST, "invalid image_type, file_type or file_name");
    }
    let key = if kind == "image" {
        format!("img_v3_fake_{n}")
    } else {
        format!("file_v3_fake_{n}")
    };
    lock(&s.uploads).push(FeishuUpload {
        kind: kind.into(),
        key: key.clone(),
        fields,
        file_name: file.file_name.clone(),
        bytes: file.data.clone(),
    });
    if kind == "image" {
        ok(json!({ "image_key": key }))
    } else {
        ok(json!({ "file_key": key }))
    }
}

/// The `element_id`s of a card JSON's elements (schema 2.0 `body.elements`, or 1.0 `elements`).
fn element_ids(card: &Value) -> Vec<(String, String)> {
    card["body"]["elements"]
        .as_array()
        .or_else(|| card["elements"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["element_id"].as_str()?.to_owned(),
                e["content"].as_str().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

/// The CardKit card calls.
fn cardkit(s: &State, method: &Method, path: &str, body: &Value, n: u64) -> Response {
    let rest = path.trim_start_matches("/open-apis/cardkit/v1/cards");
    let segments: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match (method, segments.as_slice()) {
        (&Method::POST, []) => {
            let card = body["data"]
                .as_str()
                .and_then(|d| serde_json::from_str::<Value>(d).ok());
            let (true, Some(card)) = (body["type"] == "card_json", card) else {
                return err(
                    CODE_INVALID_REQUEST,
                    "type must be card_json and data a card JSON string",
                );
            };
            if !card.is_object() {
                return err(CODE_INVALID_REQUEST, "data must be a JSON object");
            }
            let card_id = format!("7{n:018}");
            let content = element_ids(&card)
                .into_iter()
                .next()
                .map(|(_, c)| c)
                .unwrap_or_default();
            lock(&s.cards).push(FakeCard {
                card_id: card_id.clone(),
                streaming: card["config"]["streaming_mode"] == true,
                card,
                content,
                sequence: 0,
                ops: Vec::new(),
            });
            ok(json!({ "card_id": card_id }))
        }
        (&Method::PUT, [card_id, "elements", element_id, "content"]) => {
            let (Some(text), Some(sequence)) = (body["content"].as_str(), body["sequence"].as_u64()) else {
                return err(CODE_INVALID_REQUEST, "content and sequence are required");
            };
            let mut cards = lock(&s.cards);
            let Some(card) = cards.iter_mut().find(|c| c.card_id == *card_id) else {
                return err(CODE_NOT_FOUND, "card not found");
            };
            if !element_ids(&card.card).iter().any(|(id, _)| id == element_id) {
                return err(CODE_NOT_FOUND, "element not found");
            }
            if sequence <= card.sequence {
                return err(CODE_BAD_SEQUENCE, "sequence number compare failed");
            }
            if !card.streaming {
                return err(CODE_STREAMING_CLOSED, "card is not in streaming mode");
            }
            card.sequence = sequence;
            text.clone_into(&mut card.content);
            card.ops.push(CardOp {
                sequence,
                content: Some(text.to_owned()),
                streaming_mode: None,
            });
            ok(json!({}))
        }
        (&Method::PATCH, [card_id, "settings"]) => {
            let settings = body["settings"]
                .as_str()
                .and_then(|d| serde_json::from_str::<Value>(d).ok());
            let (Some(settings), Some(sequence)) = (settings, body["sequence"].as_u64()) else {
                return err(
                    CODE_INVALID_REQUEST,
                    "settings (a JSON string) and sequence are required",
                );
            };
            let mut cards = lock(&s.cards);
            let Some(card) = cards.iter_mut().find(|c| c.card_id == *card_id) else {
                return err(CODE_NOT_FOUND, "card not found");
            };
            if sequence <= card.sequence {
                return err(CODE_BAD_SEQUENCE, "sequence number compare failed");
            }
            card.sequence = sequence;
            let streaming_mode = settings["config"]["streaming_mode"].as_bool();
            if let Some(on) = streaming_mode {
                card.streaming = on;
            }
            card.ops.push(CardOp {
                sequence,
                content: None,
                streaming_mode,
            });
            ok(json!({}))
        }
        _ => err(CODE_NOT_FOUND, "not found"),
    }
}

/// `GET /open-apis/im/v1/messages/{id}`, shaped as Feishu answers it.
fn get_message(s: &State, message_id: &str) -> Response {
    let Some(m) = lock(&s.messages).get(message_id).cloned() else {
        return err(CODE_NOT_FOUND, "message not found");
    };
    ok(json!({"items": [{
        "message_id": message_id, "msg_type": m.msg_type, "chat_id": m.chat_id,
        "create_time": "1700000000000", "update_time": "1700000000000", "deleted": false, "updated": false,
        "sender": {"id": "ou_fake_sender", "id_type": "open_id", "sender_type": "user", "tenant_key": "tk"},
        "body": {"content": m.content}, "mentions": []
    }]}))
}

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
            let injected = {
                let mut failures = lock(&s.failures);
                let hit = failures
                    .iter_mut()
                    .find(|(fragment, left, _)| *left > 0 && path.contains(fragment.as_str()));
                hit.map(|(_, left, code)| {
                    *left -= 1;
                    *code
                })
            };
            if let Some(code) = injected {
                return err(code, "injected failure");
            }
            if path.starts_with("/open-apis/cardkit/v1/cards") {
                return cardkit(s, &method, &path, &json_body, n);
            }
            if method == Method::POST && path == "/open-apis/im/v1/images" {
                return upload(s, "image", &headers, &body, n);
            }
            if method == Method::POST && path == "/open-apis/im/v1/files" {
                return upload(s, "file", &headers, &body, n);
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
                if method == Method::GET
                    && let Some(id) = path.strip_prefix("/open-apis/im/v1/messages/")
                    && !id.is_empty()
                    && !id.contains('/')
                {
                    return get_message(s, id);
                }
                if method == Method::POST {
                    let (Some(msg_type), Some(content)) =
                        (json_body["msg_type"].as_str(), json_body["content"].as_str())
                    else {
                        return err(CODE_INVALID_REQUEST, "msg_type and content are required");
                    };
                    // A card sent by reference must exist.
                    if msg_type == "interactive"
                        && let Ok(card) = serde_json::from_str::<Value>(content)
                        && card["type"] == "card"
                    {
                        let id = card["data"]["card_id"].as_str().unwrap_or_default();
                        if !lock(&s.cards).iter().any(|c| c.card_id == id) {
                            return err(CODE_NOT_FOUND, "card not found");
                        }
                    }
                    let message_id = format!("om_sent_{n}");
                    lock(&s.messages).insert(
                        message_id.clone(),
                        StoredMessage {
                            msg_type: msg_type.into(),
                            content: content.into(),
                            chat_id: json_body["receive_id"].as_str().unwrap_or("oc_fake").into(),
                        },
                    );
                    return ok(
                        json!({"message_id": message_id, "chat_id": json_body["receive_id"],
                                     "msg_type": msg_type, "body": {"content": content}}),
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
                let Ok(frame) = Frame::decode(bytes.as_ref()) else { continue };
                if frame.method == 0 && frame.header("type") == Some("ping") {
                    s.pings.fetch_add(1, Ordering::SeqCst);
                    let pong = Frame {
                        service: frame.service,
                        method: 0,
                        headers: vec![header("type", "pong")],
                        payload: Some(br#"{"ReconnectCount":-1,"ReconnectInterval":1,"ReconnectNonce":0,"PingInterval":120}"#.to_vec()),
                        ..Frame::default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_bodies_are_parsed_and_bad_ones_refused() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"image_type\"\r\n\r\nmessage\r\n\
--XyZ\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\
Content-Type: image/png\r\n\r\n\x89PNG\r\n--X\r\n--XyZ--\r\n";
        let parts = multipart("multipart/form-data; boundary=\"XyZ\"", body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), &parts[0].data[..]),
            ("image_type", &b"message"[..])
        );
        assert_eq!(parts[1].file_name.as_deref(), Some("a.png"));
        assert_eq!(
            &parts[1].data[..],
            b"\x89PNG\r\n--X",
            "a near-boundary inside the data is data"
        );
        assert!(multipart("application/json", body).is_none());
        assert!(multipart("multipart/form-data; boundary=Other", body).is_none());
        assert!(multipart("multipart/form-data; boundary=XyZ", &body[..40]).is_none());
        assert!(multipart("multipart/form-data; boundary=", b"").is_none());
    }

    #[test]
    fn card_elements_are_found_in_both_schemas() {
        let v2 = json!({"body": {"elements": [{"tag": "markdown", "content": "hi", "element_id": "md"}]}});
        assert_eq!(element_ids(&v2), [("md".to_owned(), "hi".to_owned())]);
        let v1 = json!({"elements": [{"tag": "markdown", "content": "x"}]});
        assert!(element_ids(&v1).is_empty());
    }
}
