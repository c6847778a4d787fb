//! A fake of WeCom's (Enterprise WeChat) AI-bot long-connection server (`wss://openws.work.weixin.qq.com`) for one
//! bot, on a random port of `127.0.0.1`, speaking the protocol of `wecom-aibot-sdk-python` 0.1.7 (what the Python
//! nanobot 0.3.5's WeCom channel uses):
//!
//! - A WebSocket on any path (point the SDK's `ws_url` option at [`FakeWecom::url`]); JSON text frames
//!   `{"cmd", "headers": {"req_id"}, "body"}`. Every client frame with a `req_id` is answered with an ack
//!   `{"headers": {"req_id"}, "errcode", "errmsg"}` (`0`/`"ok"`, plus a `body` for the upload steps); frames
//!   that are no JSON object are ignored.
//! - `aibot_subscribe` `{"bot_id", "secret"}`: the right pair is acked `0`; any other gets errcode
//!   [`ERR_INVALID_CREDENTIALS`] (`853000`, `"invalid bot_id or secret"`, as the real server answers) and the
//!   connection is then closed (the fake's choice: what the real server does next is not documented). One bot keeps
//!   one connection: a new subscription kicks the older one with an `aibot_event_callback` whose event is
//!   `disconnected_event`, then closes it (as WeCom documents; the SDK then does not reconnect).
//! - `ping` (the SDK's heartbeat, after the subscription): acked `0` ([`FakeWecom::answer_pings`] to stop, a
//!   half-dead server; the SDK reconnects after two unanswered pings).
//! - The server pushes `aibot_msg_callback` (a user's message: `msgid`, `aibotid`, `chattype` `single`/`group`,
//!   `chatid` in groups only, `from: {userid}`, `msgtype` `text`/`image`/`mixed`/`voice`/`file` with its part) and
//!   `aibot_event_callback` (`msgtype: event`, `event: {eventtype}`, `create_time`; `enter_chat` carries no
//!   `chatid`, as observed on the real server). Groups only deliver messages that @-mention the bot, so
//!   [`FakeWecom::group_text`]'s content starts with `@` + [`BOT_NAME`].
//! - Replies to a callback reuse its `req_id`: `aibot_respond_msg` (`msgtype` `stream` with `stream: {id,
//!   content, finish}`, `markdown`, `template_card`, `stream_text_with_card`, or media `image`/`file`/`voice`/`video`
//!   with a `media_id` this server issued), `aibot_respond_welcome_msg` (`text` or `template_card`, only to an
//!   `enter_chat` event, once), `aibot_respond_update_msg` (only to a `template_card_event`). Proactive
//!   `aibot_send_msg` (any `req_id`) needs `chatid` and `markdown`, `template_card` or media. Anything else, a
//!   `req_id` this server never pushed, a stream continued after its `finish: true`, stream content over 20480
//!   bytes, an unknown `cmd` or a frame before the subscription gets errcode [`ERR_INVALID_PARAMETER`] (`40058`,
//!   WeCom's "invalid parameter"; the fake's choice of code) with an `errmsg` saying why.
//! - Uploads in three steps: `aibot_upload_media_init` (`filename`, `type`, `total_size`, `total_chunks` ≤ 100,
//!   `md5`) → ack body `{upload_id}`; `aibot_upload_media_chunk` (`upload_id`, `chunk_index`, `base64_data`, at most
//!   512 KiB decoded) → ack; `aibot_upload_media_finish` (`upload_id`) → ack body `{media_id}` once every chunk
//!   arrived and the sizes add up (the `md5` is recorded, not checked: whether WeCom checks it is not
//!   documented; tests compare it).
//! - Media of incoming messages: `image.url` / `file.url` point at `GET /media/<id>` on the same port, which
//!   answers the file encrypted as WeCom does (AES-256-CBC, the key is the message's `aeskey`, base64 without
//!   padding, its first 16 bytes the IV, PKCS#7 padding to a 32-byte boundary) with `Content-Disposition:
//!   attachment; filename="…"; filename*=UTF-8''…` when the file has a name. The cipher is written out below (no
//!   cipher crate here); the SDK's `download_file` decrypts it.
//!
//! `wecom-aibot-sdk-python`'s `WSClient` and the Python nanobot 0.3.5's WeCom channel run against it (see the
//! testkit's `fake_sdks` tests). Test controls: frame builders ([`FakeWecom::text`], [`FakeWecom::group_text`],
//! [`FakeWecom::image`], [`FakeWecom::file`], [`FakeWecom::voice`], [`FakeWecom::mixed`],
//! [`FakeWecom::enter_chat`]) returning frames tests may change, [`FakeWecom::deliver`] and the `deliver_*`
//! shortcuts; [`FakeWecom::sent`] / `wait_sent` (accepted replies and sends), [`FakeWecom::frames`] (every client
//! frame with its answer), [`FakeWecom::uploads`], [`FakeWecom::downloads`]; [`FakeWecom::connections`],
//! [`FakeWecom::subscribed`], [`FakeWecom::refused`], [`FakeWecom::pings`] (and their waits);
//! [`FakeWecom::drop_connections`] (the server going away), [`FakeWecom::kick_connections`].
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use nanobot_testkit::fake_wecom::FakeWecom;
//! let fake = FakeWecom::start("bot-1", "s3cret").await?;
//! // point the client's ws_url at fake.url(), then:
//! fake.wait_subscribed(1, Duration::from_secs(10)).await?;
//! fake.deliver_text("alice", "hello");
//! let sent = fake.wait_sent(1, Duration::from_secs(10)).await?;
//! assert_eq!(sent[0].cmd, "aibot_respond_msg");
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use nanobot_util::lock;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

/// The errcode of a refused `aibot_subscribe` (wrong bot id or secret), as the real server answers.
pub const ERR_INVALID_CREDENTIALS: i64 = 853000;
/// The errcode of every other refusal (WeCom's general "invalid parameter"; which codes the real server uses
/// for each case is not documented). The `errmsg` says why.
pub const ERR_INVALID_PARAMETER: i64 = 40058;
/// The bot's display name, @-mentioned at the start of group messages.
pub const BOT_NAME: &str = "nanobot";
/// The corp id in events' `from`.
pub const CORP_ID: &str = "wwfakecorp0001";
/// The most bytes one `stream.content` may have.
pub const MAX_STREAM_CONTENT: usize = 20480;
/// The most bytes one upload chunk may decode to.
pub const MAX_CHUNK: usize = 512 * 1024;
/// The most chunks one upload may have.
pub const MAX_CHUNKS: u64 = 100;

/// One frame a client sent, with the fake's answer (`errcode` `-1` when it was not answered: no `req_id`).
#[derive(Debug, Clone)]
pub struct ClientFrame {
    /// Which connection (1-based, in accept order) sent it.
    pub connection: usize,
    /// `cmd` (empty when absent).
    pub cmd: String,
    /// `headers.req_id` (empty when absent).
    pub req_id: String,
    /// `body` (`Null` when absent).
    pub body: Value,
    /// The ack's errcode.
    pub errcode: i64,
    /// The ack's errmsg.
    pub errmsg: String,
}

/// An accepted reply or proactive send (`aibot_respond_msg`, `aibot_respond_welcome_msg`,
/// `aibot_respond_update_msg`, `aibot_send_msg`).
#[derive(Debug, Clone)]
pub struct Sent {
    /// Which connection sent it.
    pub connection: usize,
    /// The command.
    pub cmd: String,
    /// The `req_id` (a callback's for replies).
    pub req_id: String,
    /// The body as sent.
    pub body: Value,
}

impl Sent {
    /// `body.msgtype`.
    pub fn msgtype(&self) -> Option<&str> {
        self.body["msgtype"].as_str()
    }
    /// `body.stream.id` (or `stream_text.stream_id`).
    pub fn stream_id(&self) -> Option<&str> {
        self.body["stream"]["id"]
            .as_str()
            .or_else(|| self.body["stream_text"]["stream_id"].as_str())
    }
    /// `body.stream.finish` (or `stream_text.finish`).
    pub fn finish(&self) -> Option<bool> {
        self.body["stream"]["finish"]
            .as_bool()
            .or_else(|| self.body["stream_text"]["finish"].as_bool())
    }
    /// The text: `stream.content`, `stream_text.content`, `markdown.content` or `text.content`.
    pub fn content(&self) -> Option<&str> {
        ["stream", "stream_text", "markdown", "text"]
            .iter()
            .find_map(|k| self.body[*k]["content"].as_str())
    }
    /// `body.chatid` (proactive sends).
    pub fn chatid(&self) -> Option<&str> {
        self.body["chatid"].as_str()
    }
}

/// A finished upload.
#[derive(Debug, Clone)]
pub struct Upload {
    /// `filename` of the init step.
    pub filename: String,
    /// `type` of the init step (`file`, `image`, `voice`, `video`).
    pub media_type: String,
    /// `md5` of the init step, as given.
    pub md5: String,
    /// The bytes, chunks joined.
    pub data: Vec<u8>,
    /// The `media_id` handed out.
    pub media_id: String,
}

/// One part of a [`FakeWecom::mixed`] message.
#[derive(Debug, Clone, Copy)]
pub enum MixedPart<'a> {
    /// A text item.
    Text(&'a str),
    /// An image item (served encrypted like [`FakeWecom::image`]).
    Image(&'a [u8]),
}

/// A file served at `GET /media/<id>`, encrypted.
struct Media {
    encrypted: Vec<u8>,
    name: Option<String>,
    content_type: &'static str,
}

struct PendingUpload {
    filename: String,
    media_type: String,
    md5: String,
    total_size: u64,
    total_chunks: u64,
    chunks: BTreeMap<u64, Vec<u8>>,
}

/// What a pushed `req_id` may be answered with.
#[derive(Clone)]
struct Callback {
    /// `None` for a message, the event type for an event.
    event: Option<String>,
    welcomed: bool,
}

enum Cmd {
    Send(String),
    /// Send the frame, then close with a close frame.
    SendAndClose(String),
    Drop,
}

struct Conn {
    id: usize,
    tx: mpsc::UnboundedSender<Cmd>,
    subscribed: bool,
}

struct State {
    bot_id: String,
    secret: String,
    port: u16,
    conns: Mutex<Vec<Conn>>,
    frames: Mutex<Vec<ClientFrame>>,
    sent: Mutex<Vec<Sent>>,
    callbacks: Mutex<HashMap<String, Callback>>,
    finished_streams: Mutex<HashMap<String, bool>>,
    pending_uploads: Mutex<HashMap<String, PendingUpload>>,
    uploads: Mutex<Vec<Upload>>,
    media: Mutex<HashMap<String, Media>>,
    downloads: Mutex<Vec<String>>,
    connections: AtomicUsize,
    subscribed: AtomicUsize,
    refused: AtomicUsize,
    pings: AtomicUsize,
    answer_pings: AtomicBool,
    ids: AtomicU64,
    changed: Notify,
}

impl State {
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::SeqCst)
    }

    /// A 32-hex id (the real `msgid`s look so), unique in this fake.
    fn hex_id(&self, what: &str) -> String {
        let n = self.next_id();
        let digest = Sha256::digest(format!("{what}:{}:{n}:{}", self.port, now_millis()));
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
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
            let _ = c.tx.send(Cmd::Drop);
        }
    }
}

/// The fake server; clones share it. Dropping the last clone stops it and closes its connections.
#[derive(Clone)]
pub struct FakeWecom {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeWecom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.inner.state;
        f.debug_struct("FakeWecom")
            .field("port", &s.port)
            .field("bot_id", &s.bot_id)
            .field("connections", &s.connections.load(Ordering::SeqCst))
            .field("subscribed", &s.subscribed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl FakeWecom {
    /// Starts on a free port of 127.0.0.1, accepting `aibot_subscribe` with exactly this bot id and secret.
    pub async fn start(bot_id: &str, secret: &str) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            bot_id: bot_id.to_string(),
            secret: secret.to_string(),
            port: listener.local_addr()?.port(),
            conns: Mutex::default(),
            frames: Mutex::default(),
            sent: Mutex::default(),
            callbacks: Mutex::default(),
            finished_streams: Mutex::default(),
            pending_uploads: Mutex::default(),
            uploads: Mutex::default(),
            media: Mutex::default(),
            downloads: Mutex::default(),
            connections: AtomicUsize::new(0),
            subscribed: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            pings: AtomicUsize::new(0),
            answer_pings: AtomicBool::new(true),
            ids: AtomicU64::new(1),
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
                        async move { Ok::<_, std::convert::Infallible>(handle_http(s, req)) }
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

    /// The WebSocket URL for the SDK's `ws_url`: `ws://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.state().port)
    }

    /// `http://127.0.0.1:<port>`, where `GET /media/<id>` serves incoming messages' files.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state().port)
    }

    /// The bot id it accepts (every callback's `aibotid`).
    pub fn bot_id(&self) -> &str {
        &self.state().bot_id
    }

    async fn wait<T>(
        &self,
        within: Duration,
        what: &str,
        mut check: impl FnMut(&State) -> Option<T>,
    ) -> Result<T> {
        crate::wait::until(&self.state().changed, within, "fake wecom", what, || {
            check(self.state())
        })
        .await
    }

    // ----- frame builders -----

    fn message_frame(&self, chat: Option<&str>, from: &str, msgtype: &str, part: Value) -> Value {
        let s = self.state();
        let mut body = json!({
            "msgid": s.hex_id("msg"),
            "aibotid": s.bot_id,
            "chattype": if chat.is_some() { "group" } else { "single" },
            "from": {"userid": from},
            "msgtype": msgtype,
        });
        if let Some(chat) = chat {
            body["chatid"] = json!(chat);
        }
        body[msgtype] = part;
        json!({"cmd": "aibot_msg_callback", "headers": {"req_id": s.hex_id("req")}, "body": body})
    }

    /// A single-chat text message from `from`.
    pub fn text(&self, from: &str, text: &str) -> Value {
        self.message_frame(None, from, "text", json!({"content": text}))
    }

    /// A group text message in `chat_id` from `from` that @-mentions the bot: content `@<BOT_NAME> <text>`.
    pub fn group_text(&self, chat_id: &str, from: &str, text: &str) -> Value {
        self.message_frame(
            Some(chat_id),
            from,
            "text",
            json!({"content": format!("@{BOT_NAME} {text}")}),
        )
    }

    /// Stores a file to serve encrypted; returns `{"url", "aeskey"}` as message parts carry them.
    pub fn add_media(&self, name: Option<&str>, data: &[u8]) -> Value {
        let s = self.state();
        let id = s.hex_id("media");
        let key_bytes: [u8; 32] = Sha256::digest(format!("key:{id}")).into();
        let content_type = match name
            .and_then(|n| n.rsplit_once('.'))
            .map(|(_, e)| e.to_ascii_lowercase())
        {
            Some(e) if e == "png" => "image/png",
            Some(e) if e == "jpg" || e == "jpeg" => "image/jpeg",
            Some(e) if e == "txt" => "text/plain",
            None if data.starts_with(b"\x89PNG") => "image/png",
            _ => "application/octet-stream",
        };
        lock(&s.media).insert(
            id.clone(),
            Media {
                encrypted: aes::encrypt_cbc(&key_bytes, data),
                name: name.map(str::to_string),
                content_type,
            },
        );
        json!({"url": format!("{}/media/{id}", self.base_url()), "aeskey": STANDARD_NO_PAD.encode(key_bytes)})
    }

    /// A single-chat image message (images come in single chats only); the file has no name.
    pub fn image(&self, from: &str, data: &[u8]) -> Value {
        let part = self.add_media(None, data);
        self.message_frame(None, from, "image", part)
    }

    /// A single-chat file message; `name` comes with the download (`Content-Disposition`), not in the frame.
    pub fn file(&self, from: &str, name: &str, data: &[u8]) -> Value {
        let part = self.add_media(Some(name), data);
        self.message_frame(None, from, "file", part)
    }

    /// A single-chat voice message, already transcribed by WeCom.
    pub fn voice(&self, from: &str, transcript: &str) -> Value {
        self.message_frame(None, from, "voice", json!({"content": transcript}))
    }

    /// A mixed (text and images) message, in a group when `chat_id` is given (its first text item then starts
    /// with the @-mention of the bot).
    pub fn mixed(&self, chat_id: Option<&str>, from: &str, parts: &[MixedPart<'_>]) -> Value {
        let mut mentioned = chat_id.is_none();
        let items: Vec<Value> = parts
            .iter()
            .map(|p| match p {
                MixedPart::Text(t) => {
                    let content = if mentioned {
                        (*t).to_string()
                    } else {
                        mentioned = true;
                        format!("@{BOT_NAME} {t}")
                    };
                    json!({"msgtype": "text", "text": {"content": content}})
                }
                MixedPart::Image(data) => json!({"msgtype": "image", "image": self.add_media(None, data)}),
            })
            .collect();
        self.message_frame(chat_id, from, "mixed", json!({"msg_item": items}))
    }

    /// An event callback of `eventtype` from `from` in a single chat (no `chatid`, as the real server sends).
    pub fn event(&self, from: &str, eventtype: &str) -> Value {
        let s = self.state();
        json!({"cmd": "aibot_event_callback", "headers": {"req_id": s.hex_id("req")}, "body": {
            "msgid": s.hex_id("msg"), "create_time": now_secs(), "aibotid": s.bot_id, "chattype": "single",
            "from": {"corpid": CORP_ID, "userid": from}, "msgtype": "event", "event": {"eventtype": eventtype},
        }})
    }

    /// `enter_chat`: `from` opened the bot's single chat (the first time that day); answer with a welcome.
    pub fn enter_chat(&self, from: &str) -> Value {
        self.event(from, "enter_chat")
    }

    // ----- pushing -----

    /// Pushes a frame to the bot's subscribed connection (at most one); returns whether one got it. Callback
    /// frames' `req_id`s become answerable (replies; a welcome for `enter_chat`).
    pub fn deliver(&self, frame: &Value) -> bool {
        let s = self.state();
        if let Some(req_id) = frame["headers"]["req_id"].as_str() {
            let event = match frame["cmd"].as_str() {
                Some("aibot_event_callback") => Some(
                    frame["body"]["event"]["eventtype"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
                _ => None,
            };
            lock(&s.callbacks).insert(
                req_id.to_string(),
                Callback {
                    event,
                    welcomed: false,
                },
            );
        }
        let text = frame.to_string();
        lock(&s.conns)
            .iter()
            .filter(|c| c.subscribed)
            .any(|c| c.tx.send(Cmd::Send(text.clone())).is_ok())
    }

    /// Builds and delivers [`FakeWecom::text`]; returns the frame.
    pub fn deliver_text(&self, from: &str, text: &str) -> Value {
        let f = self.text(from, text);
        self.deliver(&f);
        f
    }

    /// Builds and delivers [`FakeWecom::group_text`]; returns the frame.
    pub fn deliver_group_text(&self, chat_id: &str, from: &str, text: &str) -> Value {
        let f = self.group_text(chat_id, from, text);
        self.deliver(&f);
        f
    }

    /// Builds and delivers [`FakeWecom::image`]; returns the frame.
    pub fn deliver_image(&self, from: &str, data: &[u8]) -> Value {
        let f = self.image(from, data);
        self.deliver(&f);
        f
    }

    /// Builds and delivers [`FakeWecom::file`]; returns the frame.
    pub fn deliver_file(&self, from: &str, name: &str, data: &[u8]) -> Value {
        let f = self.file(from, name, data);
        self.deliver(&f);
        f
    }

    /// Builds and delivers [`FakeWecom::enter_chat`]; returns the frame.
    pub fn deliver_enter_chat(&self, from: &str) -> Value {
        let f = self.enter_chat(from);
        self.deliver(&f);
        f
    }

    // ----- records -----

    /// Every accepted reply and proactive send, in order.
    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.state().sent).clone()
    }

    /// Waits until at least `n` replies or sends were accepted; returns them all.
    pub async fn wait_sent(&self, n: usize, within: Duration) -> Result<Vec<Sent>> {
        self.wait(within, &format!("{n} replies or sends"), |s| {
            let sent = lock(&s.sent);
            (sent.len() >= n).then(|| sent.clone())
        })
        .await
    }

    /// Every frame the clients sent (subscriptions, pings, replies, uploads, refused ones), with the answers.
    pub fn frames(&self) -> Vec<ClientFrame> {
        lock(&self.state().frames).clone()
    }

    /// Waits until at least `n` frames with `cmd` arrived (answered or not); returns those.
    pub async fn wait_frames(&self, cmd: &str, n: usize, within: Duration) -> Result<Vec<ClientFrame>> {
        self.wait(within, &format!("{n} `{cmd}` frames"), |s| {
            let found: Vec<_> = lock(&s.frames).iter().filter(|f| f.cmd == cmd).cloned().collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// Finished uploads, in order.
    pub fn uploads(&self) -> Vec<Upload> {
        lock(&self.state().uploads).clone()
    }

    /// The media ids (the last path segment of their URLs) downloaded so far, in order.
    pub fn downloads(&self) -> Vec<String> {
        lock(&self.state().downloads).clone()
    }

    /// WebSocket connections accepted since start.
    pub fn connections(&self) -> usize {
        self.state().connections.load(Ordering::SeqCst)
    }

    /// Successful subscriptions since start.
    pub fn subscribed(&self) -> usize {
        self.state().subscribed.load(Ordering::SeqCst)
    }

    /// Refused subscriptions since start.
    pub fn refused(&self) -> usize {
        self.state().refused.load(Ordering::SeqCst)
    }

    /// Pings received since start.
    pub fn pings(&self) -> usize {
        self.state().pings.load(Ordering::SeqCst)
    }

    /// Connections open now (subscribed or not).
    pub fn open_connections(&self) -> usize {
        lock(&self.state().conns).len()
    }

    /// Waits until `n` subscriptions succeeded in total.
    pub async fn wait_subscribed(&self, n: usize, within: Duration) -> Result<()> {
        self.wait(within, &format!("subscription #{n}"), |s| {
            (s.subscribed.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    /// Waits until `n` subscriptions were refused in total.
    pub async fn wait_refused(&self, n: usize, within: Duration) -> Result<()> {
        self.wait(within, &format!("refusal #{n}"), |s| {
            (s.refused.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    /// Waits until `n` pings arrived in total.
    pub async fn wait_pings(&self, n: usize, within: Duration) -> Result<()> {
        self.wait(within, &format!("ping #{n}"), |s| {
            (s.pings.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    // ----- faults -----

    /// Whether pings are acked (default yes). Unanswered, the SDK counts missed pongs and reconnects.
    pub fn answer_pings(&self, yes: bool) {
        self.state().answer_pings.store(yes, Ordering::SeqCst);
    }

    /// Closes every open connection without a close frame (the server going away); later ones are accepted.
    pub fn drop_connections(&self) {
        for c in lock(&self.state().conns).drain(..) {
            let _ = c.tx.send(Cmd::Drop);
        }
        self.state().changed.notify_waiters();
    }

    /// Sends every subscribed connection the `disconnected_event` and closes it, as when another connection
    /// of the bot subscribes (the SDK then stays disconnected).
    pub fn kick_connections(&self) {
        let s = self.state();
        let mut conns = lock(&s.conns);
        for c in conns.iter().filter(|c| c.subscribed) {
            let _ = c.tx.send(Cmd::SendAndClose(disconnected_event(s).to_string()));
        }
        conns.retain(|c| !c.subscribed);
        s.changed.notify_waiters();
    }
}

fn disconnected_event(s: &State) -> Value {
    json!({"cmd": "aibot_event_callback", "headers": {"req_id": s.hex_id("req")}, "body": {
        "msgid": s.hex_id("msg"), "create_time": now_secs(), "aibotid": s.bot_id, "msgtype": "event",
        "event": {"eventtype": "disconnected_event"},
    }})
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response<Body> {
    let mut resp = Response::new(body.into());
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// RFC 3986 percent-encoding of everything but unreserved characters (for `filename*=UTF-8''…`).
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn handle_http(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let headers = req.headers();
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        let Some(id) = req.uri().path().strip_prefix("/media/") else {
            return respond(StatusCode::NOT_FOUND, "text/plain", "not found");
        };
        let media = lock(&s.media);
        let Some(m) = media.get(id) else {
            return respond(StatusCode::NOT_FOUND, "text/plain", "no such media");
        };
        let mut resp = respond(StatusCode::OK, m.content_type, m.encrypted.clone());
        if let Some(name) = &m.name {
            let ascii: String = name
                .chars()
                .map(|c| if c.is_ascii_graphic() && c != '"' { c } else { '_' })
                .collect();
            let v = format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{}", pct(name));
            if let Ok(v) = v.parse() {
                resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
            }
        }
        drop(media);
        lock(&s.downloads).push(id.to_string());
        s.changed.notify_waiters();
        return resp;
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "missing Sec-WebSocket-Key");
    };
    let accept = derive_accept_key(key.as_bytes());
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
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

/// What the connection does after answering a frame.
enum After {
    Stay,
    Close,
}

async fn serve_ws(s: Arc<State>, ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut sink, mut stream) = ws.split();
    let id = s.connections.fetch_add(1, Ordering::SeqCst) + 1;
    lock(&s.conns).push(Conn {
        id,
        tx: tx.clone(),
        subscribed: false,
    });
    s.changed.notify_waiters();
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Send(text)) => { if sink.send(Ws::Text(text.into())).await.is_err() { break; } }
                Some(Cmd::SendAndClose(text)) => {
                    let _ = sink.send(Ws::Text(text.into())).await;
                    let _ = sink.send(Ws::Close(None)).await;
                    break;
                }
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
                let (answer, after) = on_frame(&s, id, &tx, &text);
                if let Some(answer) = answer
                    && sink.send(Ws::Text(answer.to_string().into())).await.is_err()
                {
                    break;
                }
                if let After::Close = after {
                    let _ = sink.send(Ws::Close(None)).await;
                    break;
                }
            }
        }
    }
    lock(&s.conns).retain(|c| c.id != id);
    s.changed.notify_waiters();
}

type Outcome = Result<Option<Value>, String>;

/// Handles one client frame: its ack (if it has a `req_id`) and what the connection does next.
fn on_frame(s: &State, conn: usize, tx: &mpsc::UnboundedSender<Cmd>, text: &str) -> (Option<Value>, After) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        return (None, After::Stay);
    };
    if !frame.is_object() {
        return (None, After::Stay);
    }
    let cmd = frame["cmd"].as_str().unwrap_or_default().to_string();
    let req_id = frame["headers"]["req_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let body = frame.get("body").cloned().unwrap_or(Value::Null);
    let subscribed = lock(&s.conns).iter().any(|c| c.id == conn && c.subscribed);
    let mut after = After::Stay;
    let mut errcode = 0;
    let outcome: Outcome = match cmd.as_str() {
        "aibot_subscribe" => {
            let ok = body["bot_id"].as_str() == Some(s.bot_id.as_str())
                && body["secret"].as_str() == Some(s.secret.as_str());
            if ok {
                subscribe(s, conn, tx);
                Ok(None)
            } else {
                s.refused.fetch_add(1, Ordering::SeqCst);
                errcode = ERR_INVALID_CREDENTIALS;
                after = After::Close;
                Err("invalid bot_id or secret".into())
            }
        }
        _ if !subscribed => Err("not subscribed: send aibot_subscribe first".into()),
        "ping" => {
            s.pings.fetch_add(1, Ordering::SeqCst);
            if !s.answer_pings.load(Ordering::SeqCst) {
                record(s, conn, &cmd, &req_id, &body, -1, "");
                return (None, After::Stay);
            }
            Ok(None)
        }
        "aibot_respond_msg" | "aibot_respond_welcome_msg" | "aibot_respond_update_msg" => {
            check_reply(s, &cmd, &req_id, &body).map(|()| None)
        }
        "aibot_send_msg" => check_send(s, &body).map(|()| None),
        "aibot_upload_media_init" => upload_init(s, &body).map(Some),
        "aibot_upload_media_chunk" => upload_chunk(s, &body).map(|()| None),
        "aibot_upload_media_finish" => upload_finish(s, &body).map(Some),
        "" => Err("missing cmd".into()),
        other => Err(format!("unknown cmd {other}")),
    };
    let (errmsg, ack_body) = match outcome {
        Ok(b) => ("ok".to_string(), b),
        Err(why) => {
            if errcode == 0 {
                errcode = ERR_INVALID_PARAMETER;
            }
            (why, None)
        }
    };
    if errcode == 0 && cmd.starts_with("aibot_") && (cmd.contains("respond") || cmd == "aibot_send_msg") {
        lock(&s.sent).push(Sent {
            connection: conn,
            cmd: cmd.clone(),
            req_id: req_id.clone(),
            body: body.clone(),
        });
    }
    let answered = if req_id.is_empty() { -1 } else { errcode };
    record(s, conn, &cmd, &req_id, &body, answered, &errmsg);
    if req_id.is_empty() {
        return (None, after);
    }
    let mut ack = json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": errmsg});
    if let Some(b) = ack_body {
        ack["body"] = b;
    }
    (Some(ack), after)
}

fn record(s: &State, conn: usize, cmd: &str, req_id: &str, body: &Value, errcode: i64, errmsg: &str) {
    lock(&s.frames).push(ClientFrame {
        connection: conn,
        cmd: cmd.to_string(),
        req_id: req_id.to_string(),
        body: body.clone(),
        errcode,
        errmsg: errmsg.to_string(),
    });
    s.changed.notify_waiters();
}

/// Marks `conn` subscribed and kicks the bot's other subscribed connections.
fn subscribe(s: &State, conn: usize, tx: &mpsc::UnboundedSender<Cmd>) {
    let mut conns = lock(&s.conns);
    for c in conns.iter().filter(|c| c.subscribed && c.id != conn) {
        let _ = c.tx.send(Cmd::SendAndClose(disconnected_event(s).to_string()));
    }
    conns.retain(|c| c.id == conn || !c.subscribed);
    match conns.iter_mut().find(|c| c.id == conn) {
        Some(c) => c.subscribed = true,
        None => conns.push(Conn {
            id: conn,
            tx: tx.clone(),
            subscribed: true,
        }),
    }
    s.subscribed.fetch_add(1, Ordering::SeqCst);
}

const MEDIA_TYPES: [&str; 4] = ["image", "file", "voice", "video"];

fn check_media(s: &State, body: &Value, msgtype: &str) -> Result<(), String> {
    let Some(id) = body[msgtype]["media_id"].as_str() else {
        return Err(format!("{msgtype}.media_id missing"));
    };
    if lock(&s.uploads).iter().any(|u| u.media_id == id) {
        Ok(())
    } else {
        Err(format!("unknown media_id {id}"))
    }
}

fn check_stream(s: &State, stream: &Value, id_key: &str) -> Result<(), String> {
    let Some(id) = stream[id_key].as_str().filter(|i| !i.is_empty()) else {
        return Err(format!("stream {id_key} missing"));
    };
    let content = stream["content"].as_str().unwrap_or_default();
    if content.len() > MAX_STREAM_CONTENT {
        return Err(format!("stream content over {MAX_STREAM_CONTENT} bytes"));
    }
    if !stream["finish"].is_null() && !stream["finish"].is_boolean() {
        return Err("stream finish must be a boolean".into());
    }
    let mut finished = lock(&s.finished_streams);
    if finished.get(id).copied().unwrap_or(false) {
        return Err(format!("stream {id} already finished"));
    }
    finished.insert(id.to_string(), stream["finish"].as_bool().unwrap_or(false));
    Ok(())
}

fn check_reply(s: &State, cmd: &str, req_id: &str, body: &Value) -> Result<(), String> {
    let mut callbacks = lock(&s.callbacks);
    let Some(cb) = callbacks.get_mut(req_id) else {
        return Err(format!("unknown req_id {req_id}: not a callback of this bot"));
    };
    let msgtype = body["msgtype"].as_str().unwrap_or_default();
    match cmd {
        "aibot_respond_welcome_msg" => {
            if cb.event.as_deref() != Some("enter_chat") {
                return Err("a welcome answers an enter_chat event only".into());
            }
            if cb.welcomed {
                return Err("welcome already sent".into());
            }
            let ok = match msgtype {
                "text" => body["text"]["content"].as_str().is_some_and(|c| !c.is_empty()),
                "template_card" => body["template_card"].is_object(),
                _ => false,
            };
            if !ok {
                return Err(format!("invalid welcome msgtype {msgtype:?}"));
            }
            cb.welcomed = true;
            Ok(())
        }
        "aibot_respond_update_msg" => {
            if cb.event.as_deref() != Some("template_card_event") {
                return Err("an update answers a template_card_event only".into());
            }
            if !body["template_card"].is_object() {
                return Err("template_card missing".into());
            }
            Ok(())
        }
        _ => {
            drop(callbacks);
            match msgtype {
                "stream" => check_stream(s, &body["stream"], "id"),
                "stream_text_with_card" => check_stream(s, &body["stream_text"], "stream_id"),
                "markdown" => match body["markdown"]["content"].as_str() {
                    Some(c) if !c.is_empty() => Ok(()),
                    _ => Err("markdown.content missing".into()),
                },
                "template_card" => match body["template_card"].is_object() {
                    true => Ok(()),
                    false => Err("template_card missing".into()),
                },
                m if MEDIA_TYPES.contains(&m) => check_media(s, body, m),
                m => Err(format!("invalid msgtype {m:?}")),
            }
        }
    }
}

fn check_send(s: &State, body: &Value) -> Result<(), String> {
    if body["chatid"].as_str().is_none_or(str::is_empty) {
        return Err("chatid missing".into());
    }
    match body["msgtype"].as_str().unwrap_or_default() {
        "markdown" => match body["markdown"]["content"].as_str() {
            Some(c) if !c.is_empty() => Ok(()),
            _ => Err("markdown.content missing".into()),
        },
        "template_card" if body["template_card"].is_object() => Ok(()),
        m if MEDIA_TYPES.contains(&m) => check_media(s, body, m),
        m => Err(format!("invalid msgtype {m:?} for aibot_send_msg")),
    }
}

fn upload_init(s: &State, body: &Value) -> Result<Value, String> {
    let filename = body["filename"].as_str().unwrap_or_default();
    let media_type = body["type"].as_str().unwrap_or_default();
    let total_size = body["total_size"].as_u64().unwrap_or(0);
    let total_chunks = body["total_chunks"].as_u64().unwrap_or(0);
    if filename.is_empty() || !MEDIA_TYPES.contains(&media_type) {
        return Err("filename or type invalid".into());
    }
    if total_size == 0 || total_chunks == 0 || total_chunks > MAX_CHUNKS {
        return Err("total_size or total_chunks invalid".into());
    }
    let upload_id = format!("upload-{}", s.hex_id("upload"));
    lock(&s.pending_uploads).insert(
        upload_id.clone(),
        PendingUpload {
            filename: filename.to_string(),
            media_type: media_type.to_string(),
            md5: body["md5"].as_str().unwrap_or_default().to_string(),
            total_size,
            total_chunks,
            chunks: BTreeMap::new(),
        },
    );
    Ok(json!({"upload_id": upload_id}))
}

fn upload_chunk(s: &State, body: &Value) -> Result<(), String> {
    let upload_id = body["upload_id"].as_str().unwrap_or_default();
    let mut pending = lock(&s.pending_uploads);
    let Some(up) = pending.get_mut(upload_id) else {
        return Err(format!("unknown upload_id {upload_id}"));
    };
    let Some(index) = body["chunk_index"].as_u64().filter(|i| *i < up.total_chunks) else {
        return Err("chunk_index invalid".into());
    };
    let Ok(data) = STANDARD.decode(body["base64_data"].as_str().unwrap_or_default()) else {
        return Err("base64_data invalid".into());
    };
    if data.is_empty() || data.len() > MAX_CHUNK {
        return Err(format!("chunk must have 1 to {MAX_CHUNK} bytes"));
    }
    up.chunks.insert(index, data);
    Ok(())
}

fn upload_finish(s: &State, body: &Value) -> Result<Value, String> {
    let upload_id = body["upload_id"].as_str().unwrap_or_default();
    let mut pending = lock(&s.pending_uploads);
    let Some(up) = pending.get(upload_id) else {
        return Err(format!("unknown upload_id {upload_id}"));
    };
    if up.chunks.len() as u64 != up.total_chunks {
        return Err(format!(
            "{} of {} chunks received",
            up.chunks.len(),
            up.total_chunks
        ));
    }
    let data: Vec<u8> = up.chunks.values().flatten().copied().collect();
    if data.len() as u64 != up.total_size {
        return Err(format!(
            "{} bytes received, total_size {}",
            data.len(),
            up.total_size
        ));
    }
    let Some(up) = pending.remove(upload_id) else {
        return Err("upload vanished".into());
    };
    let media_id = format!("media-{}", s.hex_id("media_id"));
    lock(&s.uploads).push(Upload {
        filename: up.filename,
        media_type: up.media_type,
        md5: up.md5,
        data,
        media_id: media_id.clone(),
    });
    Ok(json!({"media_id": media_id}))
}

/// AES-256-CBC as WeCom encrypts media (RustCrypto's `aes` and `cbc`): IV = the key's first 16 bytes, PKCS#7
/// padding to a multiple of 32 bytes (not the cipher's block size, so the padding is added here).
mod aes {
    use ::aes::cipher::block_padding::NoPadding;
    use ::aes::cipher::{BlockEncryptMut, KeyIvInit};

    /// `data` encrypted with `key`, CBC, IV = `key[..16]`, PKCS#7 padded to a multiple of 32 bytes.
    pub(super) fn encrypt_cbc(key: &[u8; 32], data: &[u8]) -> Vec<u8> {
        let pad = 32 - data.len() % 32;
        let mut plain = data.to_vec();
        plain.extend(std::iter::repeat_n(pad as u8, pad));
        let len = plain.len();
        let iv: [u8; 16] = std::array::from_fn(|i| key[i]);
        let encryptor = cbc::Encryptor::<::aes::Aes256>::new(key.into(), &iv.into());
        // A multiple of the block size with no padding asked for: this cannot fail.
        encryptor
            .encrypt_padded_mut::<NoPadding>(&mut plain, len)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    #[cfg(test)]
    mod tests {
        use ::aes::cipher::block_padding::NoPadding;
        use ::aes::cipher::{BlockDecryptMut, KeyIvInit};

        /// Padded to 32 bytes with PKCS#7 and chained from the key's first 16 bytes, as the SDK decrypts it (the
        /// SDK itself decrypts the fake's media in the `fake_sdks` tests).
        #[test]
        fn the_padding_is_to_32_bytes_and_the_iv_is_the_key_s_start() {
            let key: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
            let mut out = super::encrypt_cbc(&key, b"hello");
            assert_eq!(out.len(), 32);
            assert_eq!(
                super::encrypt_cbc(&key, &[0u8; 32]).len(),
                64,
                "a full block of padding"
            );
            let iv: [u8; 16] = std::array::from_fn(|i| key[i]);
            let plain = cbc::Decryptor::<::aes::Aes256>::new(&key.into(), &iv.into())
                .decrypt_padded_mut::<NoPadding>(&mut out)
                .unwrap();
            assert_eq!(&plain[..5], b"hello");
            assert!(plain[5..].iter().all(|b| *b == 27), "{plain:?}");
        }
    }
}
