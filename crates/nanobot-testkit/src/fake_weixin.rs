//! A fake of personal WeChat's iLink bot API (`https://ilinkai.weixin.qq.com`) and its media CDN
//! (`https://novac2c.cdn.weixin.qq.com/c2c`) for one bot, on a random port of `127.0.0.1`, answering as the Python
//! nanobot 0.3.5's `weixin` channel (aligned with Tencent's `@tencent-weixin/openclaw-weixin` 2.4.6) expects:
//!
//! - **Everything is JSON over HTTP, answered 200** (errors too: a refusal is a JSON body, not a status). Bot
//!   endpoints are `POST <base>/ilink/bot/<name>` with a JSON object body; clients send `Content-Type:
//!   application/json`, `AuthorizationType: ilink_bot_token`, `Authorization: Bearer <bot token>`, `X-WECHAT-UIN`
//!   (base64 of a random uint32 in decimal, new for each request), `iLink-App-Id: bot`, `iLink-App-ClientVersion`
//!   (the channel version as `0x00MMNNPP` in decimal: 0.3.5 sends `2.4.6` = `132102`) and, when configured,
//!   `SKRouteTag`; the body carries `base_info: {channel_version, bot_agent}` (0.3.5: `{"channel_version":
//!   "2.4.6", "bot_agent": "nanobot/0.3.5 (python)"}`). These headers and `base_info` are recorded
//!   ([`FakeWeixin::calls`]), not enforced; only the token is checked.
//! - **A missing, unknown or revoked token** is answered `{"errcode": -14, "errmsg": "session timeout"}`
//!   ([`ERR_SESSION_TIMEOUT`]; no `ret`, as the real server answers a stale and a made-up token alike) on every
//!   bot endpoint. 0.3.5 takes `-14` in `ret` or `errcode` as "login expired": its poll loop stops with
//!   `WeixinAuthError` ("WeChat login expired. Scan again to reconnect.") and later sends are refused locally.
//! - **QR login** (no token): `POST /ilink/bot/get_bot_qrcode?bot_type=3` with `{"local_token_list": [<tokens
//!   this machine holds>]}` (0.3.5; older clients `GET` it without a body, also accepted) → `{"ret": 0, "qrcode":
//!   <id>, "qrcode_img_content": <the URL the QR encodes>}`. Then `GET
//!   /ilink/bot/get_qrcode_status?qrcode=<id>[&verify_code=<digits>]`, a long poll (held until the QR's state
//!   changes or [`FakeWeixin::set_qr_hold`], 5 s by default) → `{"status": "wait" | "scaned" |
//!   "need_verifycode" | "verify_code_blocked" | "expired" | "binded_redirect" | "scaned_but_redirect" (with
//!   `redirect_host`) | "confirmed"}`; `confirmed` carries `bot_token`, `ilink_bot_id` ([`BOT_ID`]), `baseurl`
//!   (this fake's [`FakeWeixin::base_url`]) and `ilink_user_id` (who scanned). The test plays the phone:
//!   [`FakeWeixin::scan`], [`FakeWeixin::confirm`], [`FakeWeixin::expire_qr`], [`FakeWeixin::require_verify_code`]
//!   (a scan then asks for the number: a wrong `verify_code` answers `need_verifycode` again, the
//!   [`MAX_VERIFY_ATTEMPTS`]th wrong one `verify_code_blocked`, the right one `scaned`),
//!   [`FakeWeixin::qr_answer_once`] (any answer, e.g. a redirect, for the next poll). 0.3.5 polls once a second,
//!   fetches a new QR on `expired` / `verify_code_blocked` (up to 3 times), follows `redirect_host` (`https://`
//!   prefixed unless it has a scheme), and on `confirmed` writes `<stateDir>/account.json` and the token into
//!   `config.json`.
//! - **The long poll**: `getupdates` `{"get_updates_buf": <cursor, "" at first>}` → `{"ret": 0, "msgs": [...],
//!   "get_updates_buf": <next cursor>, "longpolling_timeout_ms": <hold>}`, held until a message is pushed
//!   ([`FakeWeixin::push`]) or the hold ([`FakeWeixin::set_poll_hold`], 35 s by default, as the real server)
//!   passes. Messages are `WeixinMessage`s: `seq`, `message_id`, `from_user_id` (`…@im.wechat`), `to_user_id`
//!   (the bot), `create_time_ms`, `message_type` 1 (user; 2 = the bot's own, which 0.3.5 skips), `message_state` 2,
//!   `context_token` (new for each message: replies must quote one) and `item_list` of items `{"type": 1 text | 2
//!   image | 3 voice | 4 file | 5 video, "text_item" | "image_item" | "voice_item" | "file_item" | "video_item"}`
//!   (`ref_msg {title, message_item}` for quotes).
//! - **Sending**: `sendmessage` `{"msg": {"from_user_id": "", "to_user_id", "client_id", "message_type": 2,
//!   "message_state": 2, "context_token", "item_list": [one item], "run_id"?}}` → `{}`. The `context_token` must
//!   be one pushed to that user, with at most [`CONTEXT_QUOTA`] sends each (10, as observed); otherwise
//!   [`ERR_CONTEXT`] `-2` (0.3.5 then defers the reply until the user writes again). A text item over
//!   [`MAX_TEXT_BYTES`] or an unknown item type is [`ERR_INVALID`] `-3`. Media items must name a finished CDN
//!   upload to that user (`media.encrypt_query_param` = the upload's download param, `media.aes_key` decoding to
//!   its key, as base64 of the 16 bytes or of their 32 hex digits) whose upload media type fits the item type;
//!   [`Sent::media`] holds what was uploaded, decrypted. 0.3.5 splits text at 1800 characters (closing and
//!   reopening code fences), sends each media file as its own message before the text, and ids each part
//!   `nanobot-<20 hex>`.
//! - **Typing**: `getconfig` `{"ilink_user_id", "context_token"}` → `{"ret": 0, "typing_ticket"}` (one ticket per
//!   user; no `context_token` in the answer, as in openclaw-weixin's types: 0.3.5's "refresh a stale context token
//!   through getconfig" never gets one), `sendtyping` `{"ilink_user_id", "typing_ticket", "status": 1 typing | 2
//!   cancel}` → `{"ret": 0}` (a ticket not issued to that user, or another status: `-3`).
//! - **Lifecycle**: `msg/notifystart` and `msg/notifystop` `{}` → `{"ret": 0}` (counted).
//! - **Uploads** (AES-128-ECB, PKCS#7 padding to 16 bytes; the client picks the key): `getuploadurl` `{"filekey",
//!   "media_type": 1 image | 2 video | 3 file | 4 voice, "to_user_id", "rawsize", "rawfilemd5", "filesize" (the
//!   ciphertext size, `(rawsize / 16 + 1) * 16`), "no_need_thumb", "aeskey" (32 hex digits)}` → `{"ret": 0,
//!   "upload_param"}` (plus `upload_full_url` when [`FakeWeixin::set_full_urls`]); then `POST
//!   <cdn>/upload?encrypted_query_param=<upload_param>&filekey=<filekey>` with the ciphertext
//!   (`application/octet-stream`) → 200 with the download param in the `x-encrypted-param` header. The fake
//!   decrypts it and checks the sizes, the padding and the MD5; a refusal is 400 with `x-error-message` (0.3.5
//!   then sends `[Failed to send: <name>]` instead).
//! - **Downloads**: `GET <cdn>/download?encrypted_query_param=<param>` → the ciphertext (an unknown param: 404 with
//!   `x-error-message`). Pushed media carry `media: {encrypt_query_param, aes_key, encrypt_type: 1}` (and
//!   `full_url`, the same download URL, when [`FakeWeixin::set_full_urls`]); images' `media.aes_key` is base64 of
//!   the 16 key bytes and `image_item.aeskey` their hex (0.3.5 prefers the latter), files', voices' and videos'
//!   `media.aes_key` is base64 of the 32 hex digits. 0.3.5 saves them under `<data dir>/media/weixin/` (files
//!   with their `file_name`, others `image_<ts>_<n>.jpg`, `voice_….silk`, `video_….mp4`).
//!
//! **The fake's choices** (the real server's rules are not documented): one bot ([`BOT_ID`]); a confirmed QR login
//! revokes the bot's earlier tokens; a QR fetched with a `local_token_list` naming a token this fake never issued or
//! revoked is answered `{"ret": -3, "errcode": -3}` (0.3.5 then fetches again without the list), one naming a valid
//! token makes the confirmation `binded_redirect` (already bound here, no new token); an unknown `qrcode` is `expired`;
//! `qrcode_img_content` is `<base>/qr/<id>?bot_type=3` (a line of text there); the cursor is `base64("fakewx:<seq>")`
//! and an empty or unreadable one starts from the first message; revoking tokens ([`FakeWeixin::revoke_tokens`]) ends
//! held polls at once with `-14`; other refusals are `{"ret": <code>, "errcode": <code>, "errmsg": <why>}` (`-2` for
//! context tokens, `-3` for the rest); a body that is no JSON object is HTTP 400; `client_id`s are not de-duplicated;
//! context tokens do not expire by time ([`FakeWeixin::expire_context_tokens`] does it); groups (`…@chatroom`) are not
//! modelled.
//!
//! The Python nanobot 0.3.5's weixin channel (and its `nanobot channels login weixin`) and the PyPI iLink client
//! `weixin-ilink` run against it (see the testkit's `fake_sdks` tests). Test controls: message builders
//! ([`FakeWeixin::text`], [`FakeWeixin::image`], [`FakeWeixin::file`], [`FakeWeixin::voice`],
//! [`FakeWeixin::video`], [`with_ref`]) and [`FakeWeixin::push`] (or the `push_*` shortcuts); the phone's side
//! of a login (above) and [`FakeWeixin::issue_token`] (a token as if logged in before); [`FakeWeixin::sent`] /
//! `wait_sent`, [`FakeWeixin::typing`], [`FakeWeixin::uploads`], [`FakeWeixin::downloads`],
//! [`FakeWeixin::calls`] / `wait_calls` (every request with its answer), [`FakeWeixin::qrs`] / `wait_qrs`,
//! [`FakeWeixin::polls`]; [`FakeWeixin::revoke_tokens`], [`FakeWeixin::set_context_quota`],
//! [`FakeWeixin::answer_next`] (outages: a status or a JSON answer for the next request to a path).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use nanobot_testkit::fake_weixin::FakeWeixin;
//! let fake = FakeWeixin::start().await?;
//! let token = fake.issue_token("owner@im.wechat");
//! // point the client's baseUrl at fake.base_url() and cdnBaseUrl at fake.cdn_base_url(), token = `token`; then:
//! fake.push_text("alice@im.wechat", "hello");
//! let sent = fake.wait_sent(1, Duration::from_secs(10)).await?;
//! assert_eq!(sent[0].to_user_id, "alice@im.wechat");
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper_util::rt::TokioIo;
use nanobot_util::lock;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The bot's id (`ilink_bot_id`, every pushed message's `to_user_id`).
pub const BOT_ID: &str = "f4ke0b07c0de@im.bot";
/// The `bot_type` of this channel's QR logins.
pub const BOT_TYPE: &str = "3";
/// A stale, unknown or missing bot token (`errcode`; `errmsg` "session timeout").
pub const ERR_SESSION_TIMEOUT: i64 = -14;
/// A context token that is missing, unknown, expired or out of sends.
pub const ERR_CONTEXT: i64 = -2;
/// Any other invalid request.
pub const ERR_INVALID: i64 = -3;
/// Sends allowed per context token (weilink's observation: 10).
pub const CONTEXT_QUOTA: usize = 10;
/// The most UTF-8 bytes one text item may have (16 KiB, as observed).
pub const MAX_TEXT_BYTES: usize = 16384;
/// Wrong verification codes before a QR login is `verify_code_blocked`.
pub const MAX_VERIFY_ATTEMPTS: usize = 3;
/// How long `getupdates` is held without news by default (the real server's `longpolling_timeout_ms`).
pub const DEFAULT_POLL_HOLD: Duration = Duration::from_secs(35);
/// How long `get_qrcode_status` is held without news by default.
pub const DEFAULT_QR_HOLD: Duration = Duration::from_secs(5);
/// The most bytes a request body may have.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One request, with the fake's answer.
#[derive(Debug, Clone)]
pub struct Call {
    /// `GET` or `POST` (…).
    pub method: String,
    /// The path, e.g. `/ilink/bot/getupdates` or `/c2c/upload`.
    pub path: String,
    /// The query's pairs (decoded).
    pub query: BTreeMap<String, String>,
    /// The headers, names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`Null` when empty or not JSON; CDN uploads are not kept here).
    pub body: Value,
    /// The HTTP status answered.
    pub status: u16,
    /// The JSON answered (`Null` for CDN answers and plain errors).
    pub answer: Value,
}

impl Call {
    /// A header by its lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// An accepted `sendmessage`.
#[derive(Debug, Clone)]
pub struct Sent {
    /// `msg.to_user_id`.
    pub to_user_id: String,
    /// `msg.client_id`.
    pub client_id: String,
    /// `msg.context_token`.
    pub context_token: String,
    /// `msg.run_id`, when given.
    pub run_id: Option<String>,
    /// `msg.message_type` (2).
    pub message_type: i64,
    /// `msg.message_state`.
    pub message_state: i64,
    /// `msg.item_list`.
    pub items: Vec<Value>,
    /// The whole request body.
    pub body: Value,
    /// The uploads the media items name, in item order.
    pub media: Vec<Upload>,
}

impl Sent {
    /// The first text item's text.
    pub fn text(&self) -> Option<&str> {
        self.items.iter().find_map(|i| i["text_item"]["text"].as_str())
    }
    /// The first item's type.
    pub fn item_type(&self) -> Option<i64> {
        self.items.first().and_then(|i| i["type"].as_i64())
    }
}

/// A finished CDN upload.
#[derive(Debug, Clone)]
pub struct Upload {
    /// `filekey`.
    pub filekey: String,
    /// `media_type` (1 image, 2 video, 3 file, 4 voice).
    pub media_type: i64,
    /// `to_user_id`.
    pub to_user_id: String,
    /// `aeskey` (32 hex digits).
    pub aeskey: String,
    /// `rawfilemd5`, as given.
    pub rawfilemd5: String,
    /// The plaintext, decrypted by the fake.
    pub data: Vec<u8>,
    /// The ciphertext's length.
    pub cipher_len: usize,
    /// The `upload_param` handed out.
    pub upload_param: String,
    /// The download param answered in `x-encrypted-param`.
    pub download_param: String,
}

/// A `sendtyping` accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typing {
    /// `ilink_user_id`.
    pub user: String,
    /// `typing_ticket`.
    pub ticket: String,
    /// 1 typing, 2 cancel.
    pub status: i64,
}

/// A QR code handed out.
#[derive(Debug, Clone)]
pub struct QrCode {
    /// `qrcode` (what status polls name).
    pub qrcode: String,
    /// `qrcode_img_content` (what the QR encodes).
    pub img_content: String,
    /// The fetch's method (`POST`, or `GET` for older clients).
    pub method: String,
    /// `local_token_list` of the fetch.
    pub local_token_list: Vec<String>,
    /// The status it is in now (`wait`, `scaned`, `need_verifycode`, …).
    pub status: String,
    /// Status polls answered since its state last changed.
    pub polls: usize,
    /// `verify_code`s received, in order.
    pub verify_codes: Vec<String>,
}

/// An answer forced on the next request to a path ([`FakeWeixin::answer_next`]).
#[derive(Debug, Clone)]
pub enum Answer {
    /// That HTTP status, with a plain body (and `x-error-message` for the CDN).
    Status(u16),
    /// HTTP 200 with this JSON.
    Json(Value),
}

#[derive(Debug, Clone)]
enum QrState {
    Wait,
    Scanned { user: String },
    NeedVerify { user: String },
    Blocked,
    Confirmed { token: String, user: String },
    Bound,
    Expired,
}

impl QrState {
    fn name(&self) -> &'static str {
        match self {
            QrState::Wait => "wait",
            QrState::Scanned { .. } => "scaned",
            QrState::NeedVerify { .. } => "need_verifycode",
            QrState::Blocked => "verify_code_blocked",
            QrState::Confirmed { .. } => "confirmed",
            QrState::Bound => "binded_redirect",
            QrState::Expired => "expired",
        }
    }
}

struct Qr {
    code: QrCode,
    state: QrState,
    wrong_codes: usize,
    once: VecDeque<Value>,
    version: u64,
}

struct TokenInfo {
    valid: bool,
}

struct Ctx {
    user: String,
    sends: usize,
    valid: bool,
}

struct PendingUpload {
    filekey: String,
    media_type: i64,
    to_user_id: String,
    rawsize: u64,
    rawfilemd5: String,
    filesize: u64,
    key: [u8; 16],
    aeskey: String,
}

struct State {
    port: u16,
    tokens: Mutex<HashMap<String, TokenInfo>>,
    log: Mutex<Vec<Value>>,
    contexts: Mutex<HashMap<String, Ctx>>,
    tickets: Mutex<HashMap<String, String>>,
    qrs: Mutex<Vec<Qr>>,
    verify_code: Mutex<Option<String>>,
    media: Mutex<HashMap<String, Vec<u8>>>,
    pending_uploads: Mutex<HashMap<String, PendingUpload>>,
    uploads: Mutex<Vec<Upload>>,
    downloads: Mutex<Vec<String>>,
    sent: Mutex<Vec<Sent>>,
    typing: Mutex<Vec<Typing>>,
    calls: Mutex<Vec<Call>>,
    answers: Mutex<HashMap<String, VecDeque<Answer>>>,
    poll_hold: Mutex<Duration>,
    qr_hold: Mutex<Duration>,
    full_urls: AtomicBool,
    quota: AtomicUsize,
    polls: AtomicUsize,
    notify_start: AtomicUsize,
    notify_stop: AtomicUsize,
    ids: AtomicU64,
    changed: Notify,
}

impl State {
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::SeqCst)
    }

    /// `n` hex digits, unique in this fake.
    fn hex_id(&self, what: &str, n: usize) -> String {
        let id = self.next_id();
        let digest = Sha256::digest(format!("{what}:{}:{id}:{}", self.port, now_millis()));
        hex(&digest)[..n].to_string()
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn cdn_base_url(&self) -> String {
        format!("{}/c2c", self.base_url())
    }

    fn token_valid(&self, token: &str) -> bool {
        lock(&self.tokens).get(token).is_some_and(|t| t.valid)
    }

    fn changed(&self) {
        self.changed.notify_waiters();
    }
}

struct Inner {
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fake server; clones share it. Dropping the last clone stops it.
#[derive(Clone)]
pub struct FakeWeixin {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeWeixin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.inner.state;
        f.debug_struct("FakeWeixin")
            .field("port", &s.port)
            .field("polls", &s.polls.load(Ordering::SeqCst))
            .field("messages", &lock(&s.log).len())
            .finish_non_exhaustive()
    }
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// The ciphertext size of `n` plaintext bytes under AES-128-ECB with PKCS#7: `(n / 16 + 1) * 16`.
pub fn padded_size(n: u64) -> u64 {
    (n / 16 + 1) * 16
}

/// Decodes a `media.aes_key` as clients send and receive it: base64 of the 16 key bytes, or base64 of their 32
/// hex digits.
pub fn parse_aes_key(aes_key: &str) -> Option<[u8; 16]> {
    let decoded = STANDARD.decode(aes_key.trim()).ok()?;
    let raw = match decoded.len() {
        16 => decoded,
        32 => unhex(std::str::from_utf8(&decoded).ok()?)?,
        _ => return None,
    };
    raw.try_into().ok()
}

/// Wraps `message`'s first text item into a quote of `quoted` (an item as in `item_list`) with `title`
/// (`ref_msg`). 0.3.5 renders quoted text as `[引用: <title> | <quoted text>]\n<text>` and, when the message has no
/// media of its own, downloads quoted media.
pub fn with_ref(message: &mut Value, title: &str, quoted: Value) {
    if let Some(items) = message["item_list"].as_array_mut()
        && let Some(item) = items.iter_mut().find(|i| i["type"] == 1)
    {
        item["ref_msg"] = json!({"title": title, "message_item": quoted});
    }
}

impl FakeWeixin {
    /// Starts on a free port of 127.0.0.1, with no token issued yet (log in by QR, or [`FakeWeixin::issue_token`]).
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let state = Arc::new(State {
            port: listener.local_addr()?.port(),
            tokens: Mutex::default(),
            log: Mutex::default(),
            contexts: Mutex::default(),
            tickets: Mutex::default(),
            qrs: Mutex::default(),
            verify_code: Mutex::default(),
            media: Mutex::default(),
            pending_uploads: Mutex::default(),
            uploads: Mutex::default(),
            downloads: Mutex::default(),
            sent: Mutex::default(),
            typing: Mutex::default(),
            calls: Mutex::default(),
            answers: Mutex::default(),
            poll_hold: Mutex::new(DEFAULT_POLL_HOLD),
            qr_hold: Mutex::new(DEFAULT_QR_HOLD),
            full_urls: AtomicBool::new(false),
            quota: AtomicUsize::new(CONTEXT_QUOTA),
            polls: AtomicUsize::new(0),
            notify_start: AtomicUsize::new(0),
            notify_stop: AtomicUsize::new(0),
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
                        async move { Ok::<_, std::convert::Infallible>(handle(s, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
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

    /// The API base for `baseUrl`: `http://127.0.0.1:<port>` (also what a confirmed login's `baseurl` says).
    pub fn base_url(&self) -> String {
        self.state().base_url()
    }

    /// The CDN base for `cdnBaseUrl`: `http://127.0.0.1:<port>/c2c`.
    pub fn cdn_base_url(&self) -> String {
        self.state().cdn_base_url()
    }

    async fn wait<T>(
        &self,
        within: Duration,
        what: &str,
        mut check: impl FnMut(&State) -> Option<T>,
    ) -> Result<T> {
        crate::wait::until(&self.state().changed, within, "fake weixin", what, || {
            check(self.state())
        })
        .await
    }

    // ----- settings -----

    /// How long `getupdates` waits for a message before answering none (also its `longpolling_timeout_ms`).
    pub fn set_poll_hold(&self, hold: Duration) {
        *lock(&self.state().poll_hold) = hold;
    }

    /// How long `get_qrcode_status` waits for the QR's state to change before answering it unchanged.
    pub fn set_qr_hold(&self, hold: Duration) {
        *lock(&self.state().qr_hold) = hold;
    }

    /// Whether pushed media carry `full_url` and `getuploadurl` answers `upload_full_url` (both on this fake's
    /// CDN); off by default (clients build the URLs from `cdnBaseUrl`).
    pub fn set_full_urls(&self, on: bool) {
        self.state().full_urls.store(on, Ordering::SeqCst);
    }

    /// Sends allowed per context token ([`CONTEXT_QUOTA`] by default).
    pub fn set_context_quota(&self, n: usize) {
        self.state().quota.store(n, Ordering::SeqCst);
    }

    /// Answers the next request to `path` (e.g. `/ilink/bot/sendmessage`, `/c2c/upload`) with `answer` instead
    /// (after the token check for bot endpoints); several queue up.
    pub fn answer_next(&self, path: &str, answer: Answer) {
        lock(&self.state().answers)
            .entry(path.to_string())
            .or_default()
            .push_back(answer);
    }

    // ----- tokens and QR login -----

    /// A valid bot token, as if `owner` had logged in before (earlier tokens stay valid).
    pub fn issue_token(&self, owner: &str) -> String {
        let s = self.state();
        let token = format!("{}:{}", BOT_ID, s.hex_id(&format!("token:{owner}"), 48));
        lock(&s.tokens).insert(token.clone(), TokenInfo { valid: true });
        token
    }

    /// Whether `token` is accepted now.
    pub fn token_valid(&self, token: &str) -> bool {
        self.state().token_valid(token)
    }

    /// Revokes every token (the session expired): bot endpoints answer `-14`, held polls end at once.
    pub fn revoke_tokens(&self) {
        let s = self.state();
        for t in lock(&s.tokens).values_mut() {
            t.valid = false;
        }
        s.changed();
    }

    /// A verification number the next scans ask for (`need_verifycode`), or none.
    pub fn require_verify_code(&self, code: Option<&str>) {
        *lock(&self.state().verify_code) = code.map(str::to_string);
    }

    /// The QR codes handed out, in order.
    pub fn qrs(&self) -> Vec<QrCode> {
        lock(&self.state().qrs).iter().map(|q| q.code.clone()).collect()
    }

    /// Waits until `n` QR codes were handed out; returns them all.
    pub async fn wait_qrs(&self, n: usize, within: Duration) -> Result<Vec<QrCode>> {
        self.wait(within, &format!("{n} QR codes"), |s| {
            let qrs = lock(&s.qrs);
            (qrs.len() >= n).then(|| qrs.iter().map(|q| q.code.clone()).collect())
        })
        .await
    }

    /// Waits until the latest QR code is in `status` and was polled at least once in it; returns it.
    pub async fn wait_qr_status(&self, status: &str, within: Duration) -> Result<QrCode> {
        self.wait(within, &format!("the QR code polled in `{status}`"), |s| {
            let qrs = lock(&s.qrs);
            let q = qrs.last()?;
            (q.code.status == status && q.code.polls > 0 && q.state.name() == status).then(|| q.code.clone())
        })
        .await
    }

    fn with_latest_qr<T>(&self, f: impl FnOnce(&mut Qr) -> Result<T>) -> Result<T> {
        let s = self.state();
        let out = {
            let mut qrs = lock(&s.qrs);
            let Some(q) = qrs.last_mut() else {
                bail!("no QR code was handed out");
            };
            let out = f(q)?;
            q.code.status = q.state.name().to_string();
            q.code.polls = 0;
            q.version += 1;
            out
        };
        s.changed();
        Ok(out)
    }

    /// `user` scans the latest QR code: `scaned`, or `need_verifycode` when a number is required.
    pub fn scan(&self, user: &str) -> Result<()> {
        let verify = lock(&self.state().verify_code).clone();
        self.with_latest_qr(|q| {
            if !matches!(q.state, QrState::Wait) {
                bail!("the QR code is {}, not waiting", q.state.name());
            }
            q.state = match verify {
                Some(_) => QrState::NeedVerify {
                    user: user.to_string(),
                },
                None => QrState::Scanned {
                    user: user.to_string(),
                },
            };
            Ok(())
        })
    }

    /// `user` confirms the login on the phone (scanning first if needed): `confirmed` with a new token (the
    /// bot's earlier tokens are revoked), which is returned; or `binded_redirect` (returns `None`) when the QR was
    /// fetched with a valid token of this bot in its `local_token_list`.
    pub fn confirm(&self, user: &str) -> Result<Option<String>> {
        let s = self.state();
        let bound = {
            let qrs = lock(&s.qrs);
            qrs.last()
                .is_some_and(|q| q.code.local_token_list.iter().any(|t| s.token_valid(t)))
        };
        let new_token = format!("{}:{}", BOT_ID, s.hex_id(&format!("token:{user}"), 48));
        let token = self.with_latest_qr(|q| {
            match &q.state {
                QrState::Wait => {}
                QrState::Scanned { user: scanner } if scanner == user => {}
                QrState::Scanned { user: scanner } => {
                    bail!("the QR code was scanned by {scanner}, not {user}")
                }
                other => bail!("the QR code is {}, cannot confirm", other.name()),
            }
            if bound {
                q.state = QrState::Bound;
                return Ok(None);
            }
            q.state = QrState::Confirmed {
                token: new_token.clone(),
                user: user.to_string(),
            };
            Ok(Some(new_token.clone()))
        })?;
        if let Some(t) = &token {
            let mut tokens = lock(&s.tokens);
            for info in tokens.values_mut() {
                info.valid = false;
            }
            tokens.insert(t.clone(), TokenInfo { valid: true });
        }
        s.changed();
        Ok(token)
    }

    /// The latest QR code expires (`expired`).
    pub fn expire_qr(&self) -> Result<()> {
        self.with_latest_qr(|q| {
            q.state = QrState::Expired;
            Ok(())
        })
    }

    /// The next status poll of the latest QR code is answered `answer` (e.g. `{"status":
    /// "scaned_but_redirect", "redirect_host": "…"}`), then the QR's own state again.
    pub fn qr_answer_once(&self, answer: Value) -> Result<()> {
        self.with_latest_qr(|q| {
            q.once.push_back(answer);
            Ok(())
        })
    }

    // ----- messages -----

    fn message(&self, from: &str, items: Vec<Value>) -> Value {
        let s = self.state();
        let n = s.next_id();
        let now = now_millis();
        let ctx = format!(
            "AARz{}",
            STANDARD.encode(Sha256::digest(format!("ctx:{from}:{n}:{now}:{}", s.port)))
        );
        json!({
            "message_id": 7_400_000_000_000_000_000u64 + n,
            "from_user_id": from,
            "to_user_id": BOT_ID,
            "client_id": format!("wx-{n}"),
            "create_time_ms": now,
            "update_time_ms": now,
            "session_id": format!("{from}#{BOT_ID}"),
            "message_type": 1,
            "message_state": 2,
            "context_token": ctx,
            "item_list": items,
        })
    }

    /// A text message from `from`.
    pub fn text(&self, from: &str, text: &str) -> Value {
        self.message(from, vec![json!({"type": 1, "text_item": {"text": text}})])
    }

    /// Stores `data` encrypted on the CDN under a new param; returns `media` as items carry it, with the key's
    /// encoding `hex_key` (base64 of the 32 hex digits) or not (base64 of the 16 bytes), and the key.
    pub fn add_media(&self, data: &[u8], hex_key: bool) -> (Value, [u8; 16]) {
        let s = self.state();
        let param = STANDARD.encode(format!("fakewx-dl:{}", s.hex_id("media", 32)));
        let digest = Sha256::digest(format!("key:{param}"));
        let key: [u8; 16] = std::array::from_fn(|i| digest[i]);
        lock(&s.media).insert(param.clone(), ecb::encrypt(&key, data));
        let aes_key = if hex_key {
            STANDARD.encode(hex(&key))
        } else {
            STANDARD.encode(key)
        };
        let mut media = json!({"encrypt_query_param": param, "aes_key": aes_key, "encrypt_type": 1});
        if s.full_urls.load(Ordering::SeqCst) {
            media["full_url"] = json!(download_url(s, &param));
        }
        (media, key)
    }

    /// An image item (`image_item.aeskey` = the key's hex, `media.aes_key` = base64 of the bytes).
    pub fn image_item(&self, data: &[u8]) -> Value {
        let (media, key) = self.add_media(data, false);
        let mid_size = padded_size(data.len() as u64);
        json!({"type": 2, "image_item": {"media": media, "aeskey": hex(&key), "mid_size": mid_size,
               "thumb_width": 120, "thumb_height": 90}})
    }

    /// An image message from `from`.
    pub fn image(&self, from: &str, data: &[u8]) -> Value {
        let item = self.image_item(data);
        self.message(from, vec![item])
    }

    /// A file item.
    pub fn file_item(&self, name: &str, data: &[u8]) -> Value {
        let (media, _) = self.add_media(data, true);
        json!({"type": 4, "file_item": {"media": media, "file_name": name, "md5": hex(&md5::digest(data)),
               "len": data.len().to_string()}})
    }

    /// A file message from `from`.
    pub fn file(&self, from: &str, name: &str, data: &[u8]) -> Value {
        let item = self.file_item(name, data);
        self.message(from, vec![item])
    }

    /// A voice message (SILK, 24 kHz) from `from`, with WeChat's transcript when given (0.3.5 then uses the
    /// transcript and downloads nothing).
    pub fn voice(&self, from: &str, data: &[u8], transcript: Option<&str>) -> Value {
        let (media, _) = self.add_media(data, true);
        let mut item = json!({"media": media, "encode_type": 6, "bits_per_sample": 16, "sample_rate": 24000,
                              "playtime": 1500});
        if let Some(t) = transcript {
            item["text"] = json!(t);
        }
        self.message(from, vec![json!({"type": 3, "voice_item": item})])
    }

    /// A video message from `from`.
    pub fn video(&self, from: &str, data: &[u8]) -> Value {
        let (media, _) = self.add_media(data, true);
        let item = json!({"type": 5, "video_item": {"media": media, "video_size": padded_size(data.len() as u64),
                          "play_length": 3, "video_md5": hex(&md5::digest(data))}});
        self.message(from, vec![item])
    }

    /// Queues `message` for the long poll (a new `seq`; its `context_token` becomes usable for replies to its
    /// sender); returns it as delivered. Pushing the same message twice delivers it twice (same `message_id`).
    pub fn push(&self, message: &Value) -> Value {
        let s = self.state();
        let mut m = message.clone();
        {
            let mut log = lock(&s.log);
            m["seq"] = json!(log.len() as u64 + 1);
            log.push(m.clone());
        }
        if m["message_type"] != 2
            && let (Some(from), Some(ctx)) = (m["from_user_id"].as_str(), m["context_token"].as_str())
        {
            lock(&s.contexts).entry(ctx.to_string()).or_insert(Ctx {
                user: from.to_string(),
                sends: 0,
                valid: true,
            });
        }
        s.changed();
        m
    }

    /// Builds and pushes [`FakeWeixin::text`]; returns it.
    pub fn push_text(&self, from: &str, text: &str) -> Value {
        let m = self.text(from, text);
        self.push(&m)
    }

    /// Builds and pushes [`FakeWeixin::image`]; returns it.
    pub fn push_image(&self, from: &str, data: &[u8]) -> Value {
        let m = self.image(from, data);
        self.push(&m)
    }

    /// Builds and pushes [`FakeWeixin::file`]; returns it.
    pub fn push_file(&self, from: &str, name: &str, data: &[u8]) -> Value {
        let m = self.file(from, name, data);
        self.push(&m)
    }

    /// Every context token stops working (`-2` on sends), as after the user's long silence.
    pub fn expire_context_tokens(&self) {
        for c in lock(&self.state().contexts).values_mut() {
            c.valid = false;
        }
    }

    // ----- records -----

    /// Every accepted `sendmessage`, in order.
    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.state().sent).clone()
    }

    /// Waits until at least `n` sends were accepted; returns them all.
    pub async fn wait_sent(&self, n: usize, within: Duration) -> Result<Vec<Sent>> {
        self.wait(within, &format!("{n} sends"), |s| {
            let sent = lock(&s.sent);
            (sent.len() >= n).then(|| sent.clone())
        })
        .await
    }

    /// Every accepted `sendtyping`, in order.
    pub fn typing(&self) -> Vec<Typing> {
        lock(&self.state().typing).clone()
    }

    /// Finished CDN uploads, in order.
    pub fn uploads(&self) -> Vec<Upload> {
        lock(&self.state().uploads).clone()
    }

    /// The download params fetched from the CDN, in order.
    pub fn downloads(&self) -> Vec<String> {
        lock(&self.state().downloads).clone()
    }

    /// Every request with its answer, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.state().calls).clone()
    }

    /// Waits until at least `n` requests to `path` were answered; returns those.
    pub async fn wait_calls(&self, path: &str, n: usize, within: Duration) -> Result<Vec<Call>> {
        self.wait(within, &format!("{n} requests to {path}"), |s| {
            let found: Vec<_> = lock(&s.calls)
                .iter()
                .filter(|c| c.path == path)
                .cloned()
                .collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// `getupdates` requests accepted so far (answered or still held).
    pub fn polls(&self) -> usize {
        self.state().polls.load(Ordering::SeqCst)
    }

    /// Waits until `n` `getupdates` requests were accepted (the client is listening once one is held).
    pub async fn wait_polls(&self, n: usize, within: Duration) -> Result<()> {
        self.wait(within, &format!("{n} long polls"), |s| {
            (s.polls.load(Ordering::SeqCst) >= n).then_some(())
        })
        .await
    }

    /// `notifystart` and `notifystop` calls accepted.
    pub fn notifications(&self) -> (usize, usize) {
        let s = self.state();
        (
            s.notify_start.load(Ordering::SeqCst),
            s.notify_stop.load(Ordering::SeqCst),
        )
    }
}

fn download_url(s: &State, param: &str) -> String {
    format!(
        "{}/download?encrypted_query_param={}",
        s.cdn_base_url(),
        encode_component(param)
    )
}

/// Percent-encodes everything but `A-Z a-z 0-9 - _ . ~`.
fn encode_component(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// HTTP

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn plain(status: StatusCode, why: &str, cdn: bool) -> Response<Body> {
    let mut r = Response::new(Body::from(why.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if cdn
        && let Ok(v) = HeaderValue::from_str(&why.replace(|c: char| !c.is_ascii_graphic() && c != ' ', "?"))
    {
        r.headers_mut().insert("x-error-message", v);
    }
    r
}

fn refusal(code: i64, why: &str) -> Value {
    json!({"ret": code, "errcode": code, "errmsg": why})
}

fn session_timeout() -> Value {
    json!({"errcode": ERR_SESSION_TIMEOUT, "errmsg": "session timeout"})
}

const BOT_ENDPOINTS: [&str; 7] = [
    "getupdates",
    "sendmessage",
    "getconfig",
    "sendtyping",
    "getuploadurl",
    "msg/notifystart",
    "msg/notifystop",
];

async fn handle(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://x{}", req.uri()))
        .map(|u| u.query_pairs().into_owned().collect())
        .unwrap_or_default();
    let headers: BTreeMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let Ok(bytes) = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await else {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "body too large", false);
    };
    let mut call = Call {
        method: method.to_string(),
        path: path.clone(),
        query,
        headers,
        body: Value::Null,
        status: 200,
        answer: Value::Null,
    };
    let response = route(&s, &method, &path, &bytes, &mut call).await;
    call.status = response.status().as_u16();
    lock(&s.calls).push(call);
    s.changed();
    response
}

async fn route(s: &State, method: &Method, path: &str, bytes: &[u8], call: &mut Call) -> Response<Body> {
    let take_forced = || lock(&s.answers).get_mut(path).and_then(VecDeque::pop_front);
    let is_cdn = path.starts_with("/c2c/");
    if is_cdn {
        match take_forced() {
            Some(Answer::Status(code)) => {
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return plain(status, "forced by the test", true);
            }
            Some(Answer::Json(v)) => return json_response(StatusCode::OK, &v),
            None => {}
        }
    }
    match path {
        "/c2c/upload" => {
            if method != Method::POST {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "POST only", true);
            }
            cdn_upload(s, &call.query, bytes)
        }
        "/c2c/download" => {
            if method != Method::GET {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "GET only", true);
            }
            cdn_download(s, &call.query)
        }
        "/ilink/bot/get_bot_qrcode" => {
            if method != Method::POST && method != Method::GET {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "GET or POST", false);
            }
            let body = if bytes.is_empty() {
                json!({})
            } else {
                match serde_json::from_slice::<Value>(bytes) {
                    Ok(v) if v.is_object() => v,
                    _ => return plain(StatusCode::BAD_REQUEST, "the body is no JSON object", false),
                }
            };
            call.body = body.clone();
            let answer = match take_forced() {
                Some(Answer::Json(v)) => v,
                Some(Answer::Status(c)) => {
                    return plain(
                        StatusCode::from_u16(c).unwrap_or(StatusCode::BAD_GATEWAY),
                        "forced",
                        false,
                    );
                }
                None => fetch_qr(s, method, &call.query, &body),
            };
            call.answer = answer.clone();
            json_response(StatusCode::OK, &answer)
        }
        "/ilink/bot/get_qrcode_status" => {
            if method != Method::GET {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "GET only", false);
            }
            let answer = match take_forced() {
                Some(Answer::Json(v)) => v,
                Some(Answer::Status(c)) => {
                    return plain(
                        StatusCode::from_u16(c).unwrap_or(StatusCode::BAD_GATEWAY),
                        "forced",
                        false,
                    );
                }
                None => qr_status(s, &call.query).await,
            };
            call.answer = answer.clone();
            json_response(StatusCode::OK, &answer)
        }
        p if p.starts_with("/ilink/bot/") && BOT_ENDPOINTS.contains(&&p["/ilink/bot/".len()..]) => {
            if method != Method::POST {
                return plain(StatusCode::METHOD_NOT_ALLOWED, "POST only", false);
            }
            let body = match serde_json::from_slice::<Value>(bytes) {
                Ok(v) if v.is_object() => v,
                _ => return plain(StatusCode::BAD_REQUEST, "the body is no JSON object", false),
            };
            call.body = body.clone();
            let token = call
                .header("authorization")
                .and_then(|a| a.strip_prefix("Bearer "))
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            let answer = if !s.token_valid(&token) {
                session_timeout()
            } else {
                match take_forced() {
                    Some(Answer::Json(v)) => v,
                    Some(Answer::Status(c)) => {
                        let status = StatusCode::from_u16(c).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                        return plain(status, "forced by the test", false);
                    }
                    None => bot_call(s, &p["/ilink/bot/".len()..], &token, &body).await,
                }
            };
            call.answer = answer.clone();
            json_response(StatusCode::OK, &answer)
        }
        p if p.starts_with("/qr/") => plain(StatusCode::OK, &format!("scan with WeChat: {}", &p[4..]), false),
        _ => plain(StatusCode::NOT_FOUND, "not found", is_cdn),
    }
}

// ---------------------------------------------------------------------------------------------------------
// QR login

fn fetch_qr(s: &State, method: &Method, query: &BTreeMap<String, String>, body: &Value) -> Value {
    if query.get("bot_type").map(String::as_str) != Some(BOT_TYPE) {
        return refusal(ERR_INVALID, "bot_type must be 3");
    }
    let local: Vec<String> = body["local_token_list"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let known = |t: &String| lock(&s.tokens).contains_key(t);
    if local.iter().any(|t| !known(t) || !s.token_valid(t)) {
        return refusal(ERR_INVALID, "invalid local_token_list");
    }
    let qrcode = s.hex_id("qrcode", 32);
    let img = format!("{}/qr/{qrcode}?bot_type={BOT_TYPE}", s.base_url());
    lock(&s.qrs).push(Qr {
        code: QrCode {
            qrcode: qrcode.clone(),
            img_content: img.clone(),
            method: method.to_string(),
            local_token_list: local,
            status: "wait".into(),
            polls: 0,
            verify_codes: Vec::new(),
        },
        state: QrState::Wait,
        wrong_codes: 0,
        once: VecDeque::new(),
        version: 0,
    });
    s.changed();
    json!({"ret": 0, "qrcode": qrcode, "qrcode_img_content": img})
}

fn qr_answer(s: &State, state: &QrState) -> Value {
    match state {
        QrState::Confirmed { token, user } => json!({
            "status": "confirmed", "bot_token": token, "ilink_bot_id": BOT_ID, "baseurl": s.base_url(),
            "ilink_user_id": user,
        }),
        other => json!({"status": other.name()}),
    }
}

async fn qr_status(s: &State, query: &BTreeMap<String, String>) -> Value {
    let Some(code) = query.get("qrcode").cloned() else {
        return refusal(ERR_INVALID, "qrcode missing");
    };
    let verify = query.get("verify_code").cloned().filter(|c| !c.is_empty());
    // A verification number is checked at once; otherwise the poll is held until the state changes.
    let start_version = {
        let mut qrs = lock(&s.qrs);
        let Some(q) = qrs.iter_mut().find(|q| q.code.qrcode == code) else {
            return json!({"status": "expired"});
        };
        if let Some(answer) = q.once.pop_front() {
            q.code.polls += 1;
            return answer;
        }
        if let Some(v) = &verify {
            q.code.verify_codes.push(v.clone());
            if let QrState::NeedVerify { user } = &q.state {
                let expected = lock(&s.verify_code).clone();
                if expected.as_deref() == Some(v.as_str()) {
                    q.state = QrState::Scanned { user: user.clone() };
                } else {
                    q.wrong_codes += 1;
                    if q.wrong_codes >= MAX_VERIFY_ATTEMPTS {
                        q.state = QrState::Blocked;
                    }
                }
                q.code.status = q.state.name().to_string();
                q.code.polls += 1;
                q.version += 1;
                let answer = qr_answer(s, &q.state);
                drop(qrs);
                s.changed();
                return answer;
            }
        }
        q.version
    };
    let hold = *lock(&s.qr_hold);
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        let notified = s.changed.notified();
        {
            let mut qrs = lock(&s.qrs);
            let Some(q) = qrs.iter_mut().find(|q| q.code.qrcode == code) else {
                return json!({"status": "expired"});
            };
            if q.version != start_version || tokio::time::Instant::now() >= deadline {
                q.code.polls += 1;
                q.code.status = q.state.name().to_string();
                let answer = q.once.pop_front().unwrap_or_else(|| qr_answer(s, &q.state));
                drop(qrs);
                s.changed();
                return answer;
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            continue; // answers the unchanged state on the next turn
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Bot endpoints

async fn bot_call(s: &State, endpoint: &str, token: &str, body: &Value) -> Value {
    let result = match endpoint {
        "getupdates" => return get_updates(s, token, body).await,
        "sendmessage" => send_message(s, body).map(|()| json!({})),
        "getconfig" => get_config(s, body),
        "sendtyping" => send_typing(s, body).map(|()| json!({"ret": 0})),
        "getuploadurl" => get_upload_url(s, body),
        "msg/notifystart" => {
            s.notify_start.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"ret": 0}))
        }
        "msg/notifystop" => {
            s.notify_stop.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"ret": 0}))
        }
        other => Err((ERR_INVALID, format!("unknown endpoint {other}"))),
    };
    result.unwrap_or_else(|(code, why)| refusal(code, &why))
}

fn cursor_of(buf: &str) -> usize {
    STANDARD
        .decode(buf)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| t.strip_prefix("fakewx:").and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

async fn get_updates(s: &State, token: &str, body: &Value) -> Value {
    s.polls.fetch_add(1, Ordering::SeqCst);
    s.changed();
    let from = cursor_of(body["get_updates_buf"].as_str().unwrap_or_default());
    let hold = *lock(&s.poll_hold);
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        let notified = s.changed.notified();
        if !s.token_valid(token) {
            return session_timeout();
        }
        let (msgs, last) = {
            let log = lock(&s.log);
            (
                log.iter().skip(from).cloned().collect::<Vec<_>>(),
                log.len().max(from),
            )
        };
        if !msgs.is_empty() || tokio::time::Instant::now() >= deadline {
            return json!({
                "ret": 0,
                "msgs": msgs,
                "get_updates_buf": STANDARD.encode(format!("fakewx:{last}")),
                "longpolling_timeout_ms": hold.as_millis() as u64,
            });
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}

type Outcome<T> = std::result::Result<T, (i64, String)>;

fn invalid<T>(why: impl Into<String>) -> Outcome<T> {
    Err((ERR_INVALID, why.into()))
}

/// Which upload media type an item type needs.
fn upload_type_for(item_type: i64) -> Option<(i64, &'static str)> {
    match item_type {
        2 => Some((1, "image_item")),
        5 => Some((2, "video_item")),
        4 => Some((3, "file_item")),
        3 => Some((4, "voice_item")),
        _ => None,
    }
}

fn check_item(s: &State, to: &str, item: &Value) -> Outcome<Option<Upload>> {
    let t = item["type"].as_i64().unwrap_or(0);
    match t {
        1 => match item["text_item"]["text"].as_str() {
            Some(text) if !text.is_empty() && text.len() <= MAX_TEXT_BYTES => Ok(None),
            Some(text) if text.len() > MAX_TEXT_BYTES => invalid(format!("text over {MAX_TEXT_BYTES} bytes")),
            _ => invalid("text_item.text missing"),
        },
        11 | 12 => {
            let key = if t == 11 {
                "tool_call_start_item"
            } else {
                "tool_call_result_item"
            };
            if item[key].is_object() {
                Ok(None)
            } else {
                invalid(format!("{key} missing"))
            }
        }
        _ => {
            let Some((upload_type, key)) = upload_type_for(t) else {
                return invalid(format!("unknown item type {t}"));
            };
            let media = &item[key]["media"];
            let Some(param) = media["encrypt_query_param"].as_str() else {
                return invalid(format!("{key}.media.encrypt_query_param missing"));
            };
            let Some(upload) = lock(&s.uploads)
                .iter()
                .find(|u| u.download_param == param)
                .cloned()
            else {
                return invalid(format!("{key}: unknown encrypt_query_param"));
            };
            let key_ok = media["aes_key"]
                .as_str()
                .and_then(parse_aes_key)
                .is_some_and(|k| hex(&k) == upload.aeskey);
            if !key_ok {
                return invalid(format!("{key}.media.aes_key does not match the upload's key"));
            }
            if upload.media_type != upload_type {
                return invalid(format!(
                    "{key} names an upload of media_type {}",
                    upload.media_type
                ));
            }
            if upload.to_user_id != to {
                return invalid(format!("{key} names an upload to {}", upload.to_user_id));
            }
            Ok(Some(upload))
        }
    }
}

fn send_message(s: &State, body: &Value) -> Outcome<()> {
    let msg = &body["msg"];
    if !msg.is_object() {
        return invalid("msg missing");
    }
    let Some(to) = msg["to_user_id"].as_str().filter(|t| !t.is_empty()) else {
        return invalid("msg.to_user_id missing");
    };
    if msg["message_type"].as_i64() != Some(2) {
        return invalid("msg.message_type must be 2 (bot)");
    }
    let state = msg["message_state"].as_i64().unwrap_or(0);
    if !(0..=2).contains(&state) {
        return invalid("msg.message_state must be 0, 1 or 2");
    }
    let items = match msg["item_list"].as_array() {
        Some(items) if !items.is_empty() => items.clone(),
        _ => return invalid("msg.item_list missing"),
    };
    let Some(ctx) = msg["context_token"].as_str().filter(|c| !c.is_empty()) else {
        return Err((ERR_CONTEXT, "context_token missing".into()));
    };
    let quota = s.quota.load(Ordering::SeqCst);
    {
        let contexts = lock(&s.contexts);
        match contexts.get(ctx) {
            Some(c) if c.user == to && c.valid && c.sends < quota => {}
            Some(c) if c.user != to => {
                return Err((ERR_CONTEXT, "context_token belongs to another user".into()));
            }
            Some(c) if !c.valid => return Err((ERR_CONTEXT, "context_token expired".into())),
            Some(_) => return Err((ERR_CONTEXT, "context_token send quota exhausted".into())),
            None => return Err((ERR_CONTEXT, "unknown context_token".into())),
        }
    }
    let mut media = Vec::new();
    for item in &items {
        if let Some(u) = check_item(s, to, item)? {
            media.push(u);
        }
    }
    if let Some(c) = lock(&s.contexts).get_mut(ctx) {
        c.sends += 1;
    }
    lock(&s.sent).push(Sent {
        to_user_id: to.to_string(),
        client_id: msg["client_id"].as_str().unwrap_or_default().to_string(),
        context_token: ctx.to_string(),
        run_id: msg["run_id"].as_str().map(str::to_string),
        message_type: 2,
        message_state: state,
        items,
        body: body.clone(),
        media,
    });
    Ok(())
}

fn ticket_for(s: &State, user: &str) -> String {
    lock(&s.tickets)
        .entry(user.to_string())
        .or_insert_with(|| STANDARD.encode(&Sha256::digest(format!("ticket:{user}:{}", s.port))[..24]))
        .clone()
}

fn get_config(s: &State, body: &Value) -> Outcome<Value> {
    let Some(user) = body["ilink_user_id"].as_str().filter(|u| !u.is_empty()) else {
        return invalid("ilink_user_id missing");
    };
    Ok(json!({"ret": 0, "typing_ticket": ticket_for(s, user)}))
}

fn send_typing(s: &State, body: &Value) -> Outcome<()> {
    let Some(user) = body["ilink_user_id"].as_str().filter(|u| !u.is_empty()) else {
        return invalid("ilink_user_id missing");
    };
    let ticket = body["typing_ticket"].as_str().unwrap_or_default();
    if lock(&s.tickets).get(user).map(String::as_str) != Some(ticket) {
        return invalid("invalid typing_ticket");
    }
    let status = body["status"].as_i64().unwrap_or(0);
    if status != 1 && status != 2 {
        return invalid("status must be 1 or 2");
    }
    lock(&s.typing).push(Typing {
        user: user.to_string(),
        ticket: ticket.to_string(),
        status,
    });
    Ok(())
}

fn get_upload_url(s: &State, body: &Value) -> Outcome<Value> {
    let Some(filekey) = body["filekey"].as_str().filter(|k| !k.is_empty()) else {
        return invalid("filekey missing");
    };
    let media_type = body["media_type"].as_i64().unwrap_or(0);
    if !(1..=4).contains(&media_type) {
        return invalid("media_type must be 1 to 4");
    }
    let Some(to) = body["to_user_id"].as_str().filter(|t| !t.is_empty()) else {
        return invalid("to_user_id missing");
    };
    let Some(rawsize) = body["rawsize"].as_u64() else {
        return invalid("rawsize missing");
    };
    let md5 = body["rawfilemd5"].as_str().unwrap_or_default();
    if md5.len() != 32 || unhex(md5).is_none() {
        return invalid("rawfilemd5 must be 32 hex digits");
    }
    let filesize = body["filesize"].as_u64().unwrap_or(0);
    if filesize != padded_size(rawsize) {
        return invalid(format!(
            "filesize must be the ciphertext size {}",
            padded_size(rawsize)
        ));
    }
    let aeskey = body["aeskey"].as_str().unwrap_or_default();
    let Some(key) = unhex(aeskey).and_then(|k| <[u8; 16]>::try_from(k).ok()) else {
        return invalid("aeskey must be 32 hex digits");
    };
    let param = STANDARD.encode(format!("fakewx-ul:{}", s.hex_id("upload", 32)));
    lock(&s.pending_uploads).insert(
        param.clone(),
        PendingUpload {
            filekey: filekey.to_string(),
            media_type,
            to_user_id: to.to_string(),
            rawsize,
            rawfilemd5: md5.to_ascii_lowercase(),
            filesize,
            key,
            aeskey: aeskey.to_ascii_lowercase(),
        },
    );
    let mut answer = json!({"ret": 0, "upload_param": param});
    if s.full_urls.load(Ordering::SeqCst) {
        answer["upload_full_url"] = json!(format!(
            "{}/upload?encrypted_query_param={}&filekey={}",
            s.cdn_base_url(),
            encode_component(&param),
            encode_component(filekey)
        ));
    }
    Ok(answer)
}

// ---------------------------------------------------------------------------------------------------------
// CDN

fn cdn_upload(s: &State, query: &BTreeMap<String, String>, body: &[u8]) -> Response<Body> {
    let bad = |why: &str| plain(StatusCode::BAD_REQUEST, why, true);
    let Some(param) = query.get("encrypted_query_param") else {
        return bad("encrypted_query_param missing");
    };
    let mut pending = lock(&s.pending_uploads);
    let Some(up) = pending.get(param) else {
        return bad("unknown or used encrypted_query_param");
    };
    if query.get("filekey") != Some(&up.filekey) {
        return bad("filekey does not match getuploadurl's");
    }
    if body.len() as u64 != up.filesize {
        return bad(&format!("{} bytes, filesize said {}", body.len(), up.filesize));
    }
    let Some(plain_bytes) = ecb::decrypt(&up.key, body) else {
        return bad("not AES-128-ECB with PKCS#7 padding under aeskey");
    };
    if plain_bytes.len() as u64 != up.rawsize {
        return bad(&format!(
            "{} bytes decrypted, rawsize said {}",
            plain_bytes.len(),
            up.rawsize
        ));
    }
    if hex(&md5::digest(&plain_bytes)) != up.rawfilemd5 {
        return bad("rawfilemd5 does not match the file");
    }
    let Some(up) = pending.remove(param) else {
        return bad("upload vanished");
    };
    drop(pending);
    let download_param = STANDARD.encode(format!("fakewx-dl:{}", s.hex_id("download", 32)));
    lock(&s.media).insert(download_param.clone(), body.to_vec());
    lock(&s.uploads).push(Upload {
        filekey: up.filekey,
        media_type: up.media_type,
        to_user_id: up.to_user_id,
        aeskey: up.aeskey,
        rawfilemd5: up.rawfilemd5,
        data: plain_bytes,
        cipher_len: body.len(),
        upload_param: param.clone(),
        download_param: download_param.clone(),
    });
    let mut r = Response::new(Body::empty());
    if let Ok(v) = HeaderValue::from_str(&download_param) {
        r.headers_mut().insert("x-encrypted-param", v);
    }
    r
}

fn cdn_download(s: &State, query: &BTreeMap<String, String>) -> Response<Body> {
    let Some(param) = query.get("encrypted_query_param") else {
        return plain(StatusCode::BAD_REQUEST, "encrypted_query_param missing", true);
    };
    let Some(data) = lock(&s.media).get(param).cloned() else {
        return plain(StatusCode::NOT_FOUND, "no such file", true);
    };
    lock(&s.downloads).push(param.clone());
    let mut r = Response::new(Body::from(data));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}

/// AES-128-ECB with PKCS#7 padding to 16 bytes, as the iLink CDN stores media (RustCrypto's `aes`, one block at a
/// time: ECB has no chaining).
pub mod ecb {
    use aes::Aes128;
    use aes::cipher::generic_array::GenericArray;
    use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};

    /// `data` padded (PKCS#7, 1 to 16 bytes) and encrypted block by block.
    pub fn encrypt(key: &[u8; 16], data: &[u8]) -> Vec<u8> {
        let cipher = Aes128::new(GenericArray::from_slice(key));
        let pad = 16 - data.len() % 16;
        let mut out = data.to_vec();
        out.extend(std::iter::repeat_n(pad as u8, pad));
        for block in out.chunks_exact_mut(16) {
            cipher.encrypt_block(GenericArray::from_mut_slice(block));
        }
        out
    }

    /// `data` decrypted and unpadded; `None` when its length is no multiple of 16 or the padding is invalid.
    pub fn decrypt(key: &[u8; 16], data: &[u8]) -> Option<Vec<u8>> {
        if data.is_empty() || !data.len().is_multiple_of(16) {
            return None;
        }
        let cipher = Aes128::new(GenericArray::from_slice(key));
        let mut out = data.to_vec();
        for block in out.chunks_exact_mut(16) {
            cipher.decrypt_block(GenericArray::from_mut_slice(block));
        }
        let pad = *out.last()? as usize;
        if pad == 0 || pad > 16 || !out[out.len() - pad..].iter().all(|b| *b as usize == pad) {
            return None;
        }
        out.truncate(out.len() - pad);
        Some(out)
    }
}

/// MD5, for checking `rawfilemd5` and filling `md5` fields (RustCrypto's `md-5`).
pub mod md5 {
    use md5::Digest as _;

    /// The 16-byte digest of `data`.
    pub fn digest(data: &[u8]) -> [u8; 16] {
        ::md5::Md5::digest(data).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_rfc_1321_vectors() {
        for (input, want) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(hex(&md5::digest(input.as_bytes())), want, "{input:?}");
        }
    }

    /// FIPS-197's AES-128 example block, and the padding: 1 to 16 bytes, a full block for aligned input.
    #[test]
    fn ecb_is_aes_128_with_pkcs7() {
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let plain: Vec<u8> = (0..16u8).map(|i| i * 0x11).collect();
        let out = ecb::encrypt(&key, &plain);
        assert_eq!(out.len(), 32, "a full block of padding");
        assert_eq!(hex(&out[..16]), "69c4e0d86a7b0430d8cdb78070b4c55a");
        assert_eq!(ecb::decrypt(&key, &out).unwrap(), plain);
        assert_eq!(ecb::encrypt(&key, b"hello").len(), 16);
        assert_eq!(padded_size(5), 16);
        assert_eq!(padded_size(16), 32);
        let mut bad = ecb::encrypt(&key, b"hello");
        bad[15] ^= 1;
        assert_eq!(ecb::decrypt(&key, &bad), None);
        assert_eq!(ecb::decrypt(&key, &bad[..15]), None);
    }

    #[test]
    fn aes_keys_decode_from_raw_or_hex_base64() {
        let key: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(parse_aes_key(&STANDARD.encode(key)), Some(key));
        assert_eq!(parse_aes_key(&STANDARD.encode(hex(&key))), Some(key));
        assert_eq!(parse_aes_key(&STANDARD.encode([1u8; 20])), None);
        assert_eq!(parse_aes_key("not base64!"), None);
    }
}
