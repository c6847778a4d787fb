//! A fake of one account's signal-cli daemon in HTTP mode (`signal-cli -a <number> daemon --http host:port`,
//! signal-cli 0.14.6) on a random port of `127.0.0.1`, answering as the daemon's `HttpServerHandler` does:
//!
//! - `GET /api/v1/check`: 200 with no body.
//! - `GET /api/v1/events`: `Content-Type: text/event-stream`, chunked, headers flushed at once; each incoming
//!   message is one event `event:receive\ndata:<json>\n\n` (no space after the colons; the JSON on one line) whose
//!   data is `{"envelope": {..}, "account": "<number>"}`: the bare object, **not** a JSON-RPC notification (that
//!   wrapping is the stdio/socket mode's). A keep-alive comment `:\n` every 15 s. Several clients may listen, each
//!   gets every event; nothing is queued for streams opened later ([`FakeSignal::deliver`] says how many got
//!   it). [`FakeSignal::restart_events`] ends every stream cleanly (the daemon stopping).
//! - `POST /api/v1/rpc`: JSON-RPC 2.0, one request or a batch. A result or an error answers 200 with
//!   `application/json`; requests without `id` (notifications) get nothing, so a body of only notifications is
//!   answered 201 with no body. Errors are `{"jsonrpc":"2.0","error":{"code","message","data"},"id"}` (`data` is
//!   `null`, or `{"response": <the command's output>}` when a send reached Signal but failed). Codes: -32700 a
//!   JSON parse error (`id` null; the message is serde's, not Jackson's), -32600 an invalid request (`"method field
//!   must be set"`, `"only jsonrpc version 2.0 is supported"`, `"invalid request"` for an empty batch, `"unexpected
//!   type: NUMBER"` / `"MISSING"` for a body that is no object or array, an unknown member such as `result` in a
//!   request, `params` that is no object), -32601 `"Method not implemented"` (an unknown method, and
//!   `subscribeReceive`, which the HTTP endpoint lacks), -1 a user error (`"No recipients given"`, `"Invalid
//!   phone number '…': …"`, `"Invalid group id: Failed to decode groupId (must be base64) \"…\": …"`, `"Group not
//!   found: <id>"`, `"Invalid style: …"`, `"Quote author parameter is missing"`, `"Sending empty message is not
//!   allowed, …"`, `"Failed to send message"` when no recipient got it, e.g. an unregistered one), -4 and -5
//!   (untrusted identities, rate limiting), -32603 an unexpected error (an unreadable attachment: `"Failed to send
//!   message: <path>: <path> (No such file or directory) (AttachmentInvalidException) (UnexpectedErrorException)"`;
//!   a parameter of the wrong JSON type: Java's `ClassCastException` text; the texts of Jackson's mapping errors
//!   and of Java's `NullPointerException`s are close, not exact). Parameters follow the daemon's rules:
//!   camelCase or dashed names, a list parameter given as one value or as an array, or under its plural name
//!   (`recipient`/`recipients`, `groupId`/`groupIds`, `attachment`/`attachments`, `mention`/`mentions`,
//!   `textStyle`/`textStyles`); `account` is ignored (single-account mode). Wrong `Host` headers (not
//!   `127.0.0.1`, `localhost` or `::1` with this port) are answered 421 on `rpc` and `events`; a wrong method 405,
//!   a `Content-Type` not starting with `application/json` 415, unknown paths 404.
//!
//! Methods: `send` (to numbers, UUIDs, `u:`usernames, `groupId`s, `noteToSelf`; `message`, `attachments` as file
//! paths or RFC 2397 data URIs with an optional `filename` parameter, `mentions` `start:length:recipient`,
//! `textStyle` `start:length:STYLE`, `quoteTimestamp`/`quoteAuthor`/`quoteMessage`, `editTimestamp`, `viewOnce`,
//! …; answers `{"timestamp", "results": [{"recipientAddress": {"uuid","number","username"}, "type":
//! "SUCCESS"}]}`, group results carrying `groupId`, one per member but the account), `sendTyping` (`recipient`,
//! `groupId`, `stop`), `sendReceipt` (`recipient`, `targetTimestamp`, `type` `read`/`viewed`), `sendReaction`,
//! `listGroups`, `getUserStatus`, `getAttachment`, `updateConfiguration`, `updateProfile`, `sendSyncRequest`,
//! `version` (`{"version": "0.14.6"}`); stickers are checked for syntax only, not against installed packs. Who is
//! registered with Signal: the account, [`FakeSignal::add_contact`]'s
//! users and group members; anyone else is `UNREGISTERED_FAILURE`. Timestamps are epoch milliseconds, strictly
//! increasing across the fake (envelopes and sends).
//!
//! Incoming attachments are files under `<data dir>/attachments/<id>` as signal-cli stores them (`id` = the
//! attachment's CDN key plus the extension of its file name or content type), and the envelope's attachment
//! names that `id` with `contentType`, `filename`, `size`. Run with [`FakeSignal::start_with_data_dir`] pointing
//! at `$HOME/.local/share/signal-cli` to have them where signal-cli puts them on Linux. Outgoing attachments inside
//! the data directory are refused, as signal-cli 0.14.4+ does.
//!
//! `pysignalclijsonrpc` (a JSON-RPC client for this HTTP endpoint) and the Python nanobot 0.3.5's Signal channel
//! run against it (see the testkit's `fake_sdks` tests). Test controls: [`FakeSignal::add_contact`],
//! [`FakeSignal::add_group`]; envelope builders ([`FakeSignal::direct_message`], `group_message`,
//! `typing_message`, `receipt_message`, `sync_sent_message`, [`FakeSignal::attach`], [`with_quote`]) and
//! [`FakeSignal::deliver`] (or the `deliver_*` shortcuts); [`FakeSignal::sent`] / `wait_sent` (accepted `send`s,
//! attachments read), [`FakeSignal::calls`] / `wait_calls` (every request), [`FakeSignal::fail_rpc`] (outages).
//!
//! # Example
//!
//! ```no_run
//! use nanobot_testkit::fake_signal::{FakeSignal, SignalUser};
//! # async fn demo() -> anyhow::Result<()> {
//! let fake = FakeSignal::start("+15550000001").await?;
//! let alice = SignalUser::new("Alice", "+15550000002");
//! fake.add_contact(&alice);
//! // … a client configured with fake.host() / fake.port() connects its event stream …
//! fake.wait_listeners(1).await?;
//! fake.deliver_direct(&alice, "hi");
//! let sent = fake.wait_sent(1, std::time::Duration::from_secs(10)).await?;
//! assert_eq!(sent[0].recipients, ["+15550000002"]);
//! # Ok(()) }
//! ```

use nanobot_util::lock;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// The signal-cli version the fake plays (`version`'s answer).
pub const SIGNAL_CLI_VERSION: &str = "0.14.6";
/// The placeholder Signal puts in a message body where a mention is (U+FFFC OBJECT REPLACEMENT CHARACTER); a
/// mention's `start`/`length` (UTF-16 units) cover it.
pub const MENTION_PLACEHOLDER: &str = "\u{FFFC}";
/// How often the daemon writes its keep-alive comment (`:\n`) on an event stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// JSON-RPC error codes of signal-cli.
pub mod codes {
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is no valid request (or a parameter could not be mapped).
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid params (multi-account mode's account errors; not used in single-account mode).
    pub const INVALID_PARAMS: i64 = -32602;
    /// An unexpected error in a command (`… (SomeException)`).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// A user error (`UserErrorException`): bad input, or a send no recipient got.
    pub const USER_ERROR: i64 = -1;
    /// An I/O error talking to Signal (`IOErrorException`).
    pub const IO_ERROR: i64 = -3;
    /// Every recipient's identity is untrusted.
    pub const UNTRUSTED_KEY_ERROR: i64 = -4;
    /// Every recipient was rate limited.
    pub const RATELIMIT_ERROR: i64 = -5;
}

const WAIT: Duration = Duration::from_secs(60);
/// The largest request body read (data-URI attachments make bodies big).
const MAX_BODY: usize = 64 << 20;
/// What the JDK HTTP server answers for a path outside every context.
const NO_CONTEXT: &str = "<h1>404 Not Found</h1>No context found for request";

/// A Signal user: the account, a contact, a group member or a stranger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalUser {
    /// The phone number (E.164), `None` for a user whose number is hidden (phone number privacy).
    pub number: Option<String>,
    /// The ACI (a UUID, lower case).
    pub uuid: String,
    /// The contact or profile name (`sourceName`).
    pub name: String,
}

impl SignalUser {
    /// A user with `number`; the UUID is derived from the name (the same name gives the same UUID).
    pub fn new(name: &str, number: &str) -> Self {
        Self {
            number: Some(number.to_string()),
            uuid: uuid_from(&format!("aci:{name}")),
            name: name.to_string(),
        }
    }

    /// A user whose number Signal does not reveal: envelopes carry only the UUID.
    pub fn hidden_number(name: &str) -> Self {
        Self {
            number: None,
            uuid: uuid_from(&format!("aci:{name}")),
            name: name.to_string(),
        }
    }

    /// signal-cli's "legacy identifier" (`source`, a mention's `name`): the number, else the UUID.
    pub fn id(&self) -> &str {
        self.number.as_deref().unwrap_or(&self.uuid)
    }

    fn address(&self) -> Value {
        json!({"uuid": self.uuid, "number": self.number, "username": null})
    }
}

/// A UUID-looking string (version 4 bits) derived from `seed`.
fn uuid_from(seed: &str) -> String {
    let d = Sha256::digest(seed);
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The id [`FakeSignal::add_group`] gives a group named `name`: 32 bytes (a v2 group), base64 (44 characters,
/// ending in `=`), derived from the name.
pub fn group_id_for(name: &str) -> String {
    STANDARD.encode(Sha256::digest(format!("group:{name}")))
}

/// An attachment a client sent, read as signal-cli reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentAttachment {
    /// What the client gave: a file path or a data URI.
    pub source: String,
    /// The file name (a path's last component, a data URI's `filename` parameter).
    pub filename: Option<String>,
    /// The content type (a data URI's, or guessed from a file's extension and first bytes).
    pub content_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// One `send` the fake accepted (at least one recipient got it, or it had none left to fail).
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// The `timestamp` answered (the message's id in Signal).
    pub timestamp: i64,
    /// The single recipients, as signal-cli understood them: E.164 numbers, lower-case UUIDs, `u:<username>`,
    /// the account's number for `noteToSelf`.
    pub recipients: Vec<String>,
    /// The groups (base64 ids).
    pub group_ids: Vec<String>,
    /// The text (`""` when none).
    pub message: String,
    /// The attachments, read.
    pub attachments: Vec<SentAttachment>,
    /// `start:length:recipient` mentions.
    pub mentions: Vec<String>,
    /// `start:length:STYLE` text styles.
    pub text_styles: Vec<String>,
    /// `quoteTimestamp`.
    pub quote_timestamp: Option<i64>,
    /// `quoteAuthor`.
    pub quote_author: Option<String>,
    /// `editTimestamp`.
    pub edit_timestamp: Option<i64>,
    /// The request's `params` as sent (`Null` when none).
    pub params: Value,
}

/// One JSON-RPC request the fake received (valid ones: an object with `jsonrpc` 2.0 and a `method`).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcCall {
    /// The method.
    pub method: String,
    /// The `params` (`Null` when none).
    pub params: Value,
    /// The `id`, `None` for a notification.
    pub id: Option<Value>,
    /// The JSON-RPC response answered for it (`None` for a notification, or when [`FakeSignal::fail_rpc`] answered
    /// an HTTP error instead).
    pub response: Option<Value>,
    /// The HTTP status of the answer that carried it.
    pub status: u16,
}

impl RpcCall {
    /// The error code answered, if an error was.
    pub fn error_code(&self) -> Option<i64> {
        self.response.as_ref()?.get("error")?.get("code")?.as_i64()
    }

    /// The `result` answered, if one was.
    pub fn result(&self) -> Option<&Value> {
        self.response.as_ref()?.get("result")
    }
}

/// An outage, see [`FakeSignal::fail_rpc`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcFailure {
    /// Every `POST /api/v1/rpc` is answered with this HTTP status and no body (e.g. 500, or 502/503 from a proxy
    /// in front of the daemon).
    Http(u16),
    /// Every request is answered as the daemon answers a request that throws: HTTP 200,
    /// `{"jsonrpc":"2.0","error":{"code":-32603,"message":"An internal server error has occurred.","data":null},"id":null}`.
    Internal,
    /// Signal's servers are unreachable: sends, typing, receipts and reactions reach nobody (`NETWORK_FAILURE`
    /// results, error -1 `Failed to send message`); other methods answer as usual.
    Network,
    /// Signal rate-limits the account: sends reach nobody (`RATE_LIMIT_FAILURE` results with `retryAfterSeconds`,
    /// error -5 `Failed to send message due to rate limiting`).
    RateLimit {
        /// The `retryAfterSeconds` of each result.
        retry_after_secs: u64,
    },
}

/// What a receipt confirms, see [`FakeSignal::receipt_message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    /// Delivered to the device.
    Delivery,
    /// Read.
    Read,
    /// Viewed (media).
    Viewed,
}

struct Group {
    id: String,
    name: String,
    members: Vec<SignalUser>,
}

enum Push {
    Frame(Bytes),
    Close,
}

struct State {
    me: SignalUser,
    port: u16,
    data_dir: PathBuf,
    users: Mutex<Vec<SignalUser>>,
    groups: Mutex<Vec<Group>>,
    listeners: Mutex<Vec<mpsc::UnboundedSender<Push>>>,
    opened: AtomicUsize,
    checks: AtomicUsize,
    calls: Mutex<Vec<RpcCall>>,
    sent: Mutex<Vec<SentMessage>>,
    failure: Mutex<Option<RpcFailure>>,
    clock: AtomicI64,
    ids: AtomicU64,
    changed: Notify,
}

impl State {
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

    fn attachments_dir(&self) -> PathBuf {
        self.data_dir.join("attachments")
    }

    /// A known (registered) user by number or UUID, the account included.
    fn find_user(&self, rcpt: &Rcpt) -> Option<SignalUser> {
        let matches = |u: &SignalUser| match rcpt {
            Rcpt::Number(n) => u.number.as_deref() == Some(n.as_str()),
            Rcpt::Uuid(id) => u.uuid == *id,
            Rcpt::Pni(_) | Rcpt::Username(_) => false,
        };
        if matches(&self.me) {
            return Some(self.me.clone());
        }
        lock(&self.users).iter().find(|u| matches(u)).cloned()
    }

    fn push(&self, frame: &[u8]) -> usize {
        let mut n = 0;
        lock(&self.listeners).retain(|tx| {
            let ok = tx.send(Push::Frame(Bytes::copy_from_slice(frame))).is_ok();
            n += usize::from(ok);
            ok
        });
        n
    }
}

struct Inner {
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
        for tx in lock(&self.state.listeners).drain(..) {
            let _ = tx.send(Push::Close);
        }
    }
}

/// The fake daemon; clones share it. Dropping the last clone stops it and ends its event streams.
#[derive(Clone)]
pub struct FakeSignal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("FakeSignal")
            .field("account", &s.me.number)
            .field("port", &s.port)
            .field("data_dir", &s.data_dir)
            .finish_non_exhaustive()
    }
}

impl FakeSignal {
    /// Starts on a free port of 127.0.0.1 as the daemon of `account` (an E.164 number, e.g. `+15550000001`),
    /// with a data directory of its own (a temporary directory, removed with the fake).
    pub async fn start(account: &str) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().to_path_buf();
        Self::launch(account, path, Some(dir)).await
    }

    /// Like [`FakeSignal::start`], with `data_dir` as signal-cli's data directory (created if missing, left in
    /// place): `$HOME/.local/share/signal-cli` is where signal-cli keeps it on Linux, so its `attachments/` is
    /// where clients look for incoming attachments by default.
    pub async fn start_with_data_dir(account: &str, data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        Self::launch(account, data_dir.to_path_buf(), None).await
    }

    async fn launch(account: &str, data_dir: PathBuf, dir: Option<tempfile::TempDir>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let data_dir = std::fs::canonicalize(&data_dir).unwrap_or(data_dir);
        let state = Arc::new(State {
            me: SignalUser::new("Nanobot", account),
            port: listener.local_addr()?.port(),
            data_dir,
            users: Mutex::default(),
            groups: Mutex::default(),
            listeners: Mutex::default(),
            opened: AtomicUsize::new(0),
            checks: AtomicUsize::new(0),
            calls: Mutex::default(),
            sent: Mutex::default(),
            failure: Mutex::default(),
            clock: AtomicI64::new(0),
            ids: AtomicU64::new(0),
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
            inner: Arc::new(Inner {
                state,
                task,
                _dir: dir,
            }),
        })
    }

    fn state(&self) -> &State {
        &self.inner.state
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state().port)
    }

    /// The JSON-RPC endpoint, `http://127.0.0.1:<port>/api/v1/rpc`.
    pub fn rpc_url(&self) -> String {
        format!("{}/api/v1/rpc", self.url())
    }

    /// The event stream, `http://127.0.0.1:<port>/api/v1/events`.
    pub fn events_url(&self) -> String {
        format!("{}/api/v1/events", self.url())
    }

    /// The host to configure (`127.0.0.1`).
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.state().port
    }

    /// The account (number, UUID, profile name `Nanobot`).
    pub fn me(&self) -> SignalUser {
        self.state().me.clone()
    }

    /// signal-cli's data directory (canonical path).
    pub fn data_dir(&self) -> PathBuf {
        self.state().data_dir.clone()
    }

    /// Where incoming attachments are stored: `<data dir>/attachments`.
    pub fn attachments_dir(&self) -> PathBuf {
        self.state().attachments_dir()
    }

    /// Makes `user` a registered Signal user the account knows (sends to it succeed, `getUserStatus` finds it).
    pub fn add_contact(&self, user: &SignalUser) {
        let mut users = lock(&self.state().users);
        users.retain(|u| u.uuid != user.uuid);
        users.push(user.clone());
    }

    /// Adds a group the account is a member (and admin) of, with `members` besides it (who become known users);
    /// returns its id ([`group_id_for`] the name).
    pub fn add_group(&self, name: &str, members: &[&SignalUser]) -> String {
        let id = group_id_for(name);
        for m in members {
            self.add_contact(m);
        }
        let mut groups = lock(&self.state().groups);
        groups.retain(|g| g.id != id);
        groups.push(Group {
            id: id.clone(),
            name: name.to_string(),
            members: members.iter().map(|m| (*m).clone()).collect(),
        });
        id
    }

    /// An envelope as signal-cli writes it, from `from` on its device `device`, without content.
    fn envelope(&self, from: &SignalUser, device: i64) -> (Value, i64) {
        let s = self.state();
        let t = s.now_ms();
        let received = s.now_ms();
        let delivered = s.now_ms();
        (
            json!({"source": from.id(), "sourceNumber": from.number, "sourceUuid": from.uuid,
                   "sourceName": from.name, "sourceDevice": device, "timestamp": t,
                   "serverReceivedTimestamp": received, "serverDeliveredTimestamp": delivered}),
            t,
        )
    }

    fn data_message(t: i64, text: &str) -> Value {
        json!({"timestamp": t, "message": (!text.is_empty()).then_some(text), "expiresInSeconds": 0,
               "isExpirationUpdate": false, "viewOnce": false})
    }

    /// A direct message from `from` (an envelope with a `dataMessage`; an empty `text` is a `null` body).
    pub fn direct_message(&self, from: &SignalUser, text: &str) -> Value {
        let (mut env, t) = self.envelope(from, 1);
        env["dataMessage"] = Self::data_message(t, text);
        env
    }

    /// A message from `from` in group `group_id`: `dataMessage.groupInfo` is `{"groupId", "groupName",
    /// "revision", "type": "DELIVER"}`; `mentions` are `(who, start, length)` in UTF-16 units (Signal puts
    /// [`MENTION_PLACEHOLDER`] in the text for each, length 1), written as `{"name", "number", "uuid", "start",
    /// "length"}`.
    pub fn group_message(
        &self,
        from: &SignalUser,
        group_id: &str,
        text: &str,
        mentions: &[(&SignalUser, usize, usize)],
    ) -> Value {
        let name = lock(&self.state().groups)
            .iter()
            .find(|g| g.id == group_id)
            .map(|g| g.name.clone());
        let (mut env, t) = self.envelope(from, 1);
        let mut data = Self::data_message(t, text);
        if !mentions.is_empty() {
            data["mentions"] = mentions
                .iter()
                .map(|(who, start, length)| {
                    json!({"name": who.id(), "number": who.number, "uuid": who.uuid, "start": start,
                           "length": length})
                })
                .collect();
        }
        data["groupInfo"] = json!({"groupId": group_id, "groupName": name, "revision": 2, "type": "DELIVER"});
        env["dataMessage"] = data;
        env
    }

    /// A typing indicator from `from` (`typingMessage`: `action` `STARTED` or `STOPPED`, `timestamp`, and
    /// `groupId` when in a group).
    pub fn typing_message(&self, from: &SignalUser, started: bool, group_id: Option<&str>) -> Value {
        let (mut env, t) = self.envelope(from, 1);
        let mut typing = json!({"action": if started { "STARTED" } else { "STOPPED" }, "timestamp": t});
        if let Some(g) = group_id {
            typing["groupId"] = json!(g);
        }
        env["typingMessage"] = typing;
        env
    }

    /// A receipt from `from` for the messages sent at `timestamps` (`receiptMessage`: `when`, `isDelivery`,
    /// `isRead`, `isViewed`, `timestamps`).
    pub fn receipt_message(&self, from: &SignalUser, kind: Receipt, timestamps: &[i64]) -> Value {
        let (mut env, t) = self.envelope(from, 1);
        env["receiptMessage"] = json!({"when": t, "isDelivery": kind == Receipt::Delivery,
            "isRead": kind == Receipt::Read, "isViewed": kind == Receipt::Viewed, "timestamps": timestamps});
        env
    }

    /// A sync message: the account's own linked device (device 2) sent `text` to `to` (`syncMessage.sentMessage`
    /// with `destination`, `destinationNumber`, `destinationUuid` and the data message's fields).
    pub fn sync_sent_message(&self, to: &SignalUser, text: &str) -> Value {
        let me = self.me();
        let (mut env, t) = self.envelope(&me, 2);
        let mut sent = json!({"destination": to.id(), "destinationNumber": to.number,
                              "destinationUuid": to.uuid});
        if let (Some(obj), Value::Object(data)) = (sent.as_object_mut(), Self::data_message(t, text)) {
            obj.extend(data);
        }
        env["syncMessage"] = json!({"sentMessage": sent});
        env
    }

    /// Stores `bytes` as a received attachment (the file `<attachments dir>/<id>`) and adds it to the envelope's
    /// data message (`{"contentType", "filename", "id", "size", "width", "height", "caption",
    /// "uploadTimestamp"}`); returns the id.
    pub fn attach(
        &self,
        envelope: &mut Value,
        filename: Option<&str>,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<String> {
        let s = self.state();
        let n = s.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let key: String = URL_SAFE_NO_PAD
            .encode(Sha256::digest(format!("cdn:{}:{n}", s.port)))
            .chars()
            .take(20)
            .collect();
        let extension = filename
            .filter(|f| f.contains('.'))
            .and_then(|f| f.rsplit('.').next())
            .map(str::to_string)
            .or_else(|| extension_for(content_type).map(str::to_string));
        let id = match extension {
            Some(e) => format!("{key}.{e}"),
            None => key,
        };
        let dir = s.attachments_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join(&id), bytes)?;
        let entry = json!({"contentType": content_type, "filename": filename, "id": id, "size": bytes.len(),
                           "width": null, "height": null, "caption": null, "uploadTimestamp": s.now_ms()});
        let data = envelope
            .get_mut("dataMessage")
            .and_then(Value::as_object_mut)
            .context("the envelope has no dataMessage")?;
        match data.get_mut("attachments").and_then(Value::as_array_mut) {
            Some(list) => list.push(entry),
            None => {
                data.insert("attachments".into(), json!([entry]));
            }
        }
        Ok(id)
    }

    /// Sends `envelope` to every open event stream as the daemon does (`event:receive`, data `{"envelope",
    /// "account"}`); returns how many streams got it.
    pub fn deliver(&self, envelope: &Value) -> usize {
        let s = self.state();
        self.deliver_raw(&json!({"envelope": envelope, "account": s.me.number}))
    }

    /// Sends `data` as the data of one `receive` event, as is (e.g. `{"account", "exception": {"message",
    /// "type"}, "envelope"}` as signal-cli writes for a message it could not decrypt).
    pub fn deliver_raw(&self, data: &Value) -> usize {
        self.state()
            .push(format!("event:receive\ndata:{data}\n\n").as_bytes())
    }

    /// Writes the keep-alive comment (`:\n`) on every open stream now; returns how many got it.
    pub fn keep_alive(&self) -> usize {
        self.state().push(b":\n")
    }

    /// Delivers a direct message from `from`; returns its envelope.
    pub fn deliver_direct(&self, from: &SignalUser, text: &str) -> Value {
        let env = self.direct_message(from, text);
        self.deliver(&env);
        env
    }

    /// Delivers a group message (see [`FakeSignal::group_message`]); returns its envelope.
    pub fn deliver_group(
        &self,
        from: &SignalUser,
        group_id: &str,
        text: &str,
        mentions: &[(&SignalUser, usize, usize)],
    ) -> Value {
        let env = self.group_message(from, group_id, text, mentions);
        self.deliver(&env);
        env
    }

    /// Delivers a direct message from `from` with one attachment (stored, see [`FakeSignal::attach`]); returns its
    /// envelope.
    pub fn deliver_with_attachment(
        &self,
        from: &SignalUser,
        text: &str,
        filename: Option<&str>,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value> {
        let mut env = self.direct_message(from, text);
        self.attach(&mut env, filename, content_type, bytes)?;
        self.deliver(&env);
        Ok(env)
    }

    /// How many event streams are open now.
    pub fn listeners(&self) -> usize {
        lock(&self.state().listeners)
            .iter()
            .filter(|tx| !tx.is_closed())
            .count()
    }

    /// How many event streams were opened since start.
    pub fn streams_opened(&self) -> usize {
        self.state().opened.load(Ordering::SeqCst)
    }

    /// How many `GET /api/v1/check` requests arrived.
    pub fn checks(&self) -> usize {
        self.state().checks.load(Ordering::SeqCst)
    }

    async fn wait<T>(
        &self,
        within: Duration,
        what: &str,
        mut check: impl FnMut(&Self) -> Option<T>,
    ) -> Result<T> {
        crate::wait::until(&self.state().changed, within, "fake signal-cli", what, || {
            check(self)
        })
        .await
    }

    /// Waits (60 s at most, an error then) until `n` streams have been opened since start and at least one is
    /// open (use it after [`FakeSignal::restart_events`] with the count so far plus one).
    pub async fn wait_listeners(&self, n: usize) -> Result<()> {
        self.wait(WAIT, &format!("event stream #{n}"), |f| {
            (f.streams_opened() >= n && f.listeners() > 0).then_some(())
        })
        .await
    }

    /// Ends every open event stream cleanly (the daemon restarting); later requests are served as before.
    pub fn restart_events(&self) {
        for tx in lock(&self.state().listeners).drain(..) {
            let _ = tx.send(Push::Close);
        }
        self.state().changed.notify_waiters();
    }

    /// Every `send` accepted so far, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        lock(&self.state().sent).clone()
    }

    /// Waits (at most `within`, an error then) until `n` sends were accepted; returns all so far.
    pub async fn wait_sent(&self, n: usize, within: Duration) -> Result<Vec<SentMessage>> {
        self.wait(within, &format!("{n} accepted sends"), |f| {
            let sent = f.sent();
            (sent.len() >= n).then_some(sent)
        })
        .await
    }

    /// Every valid JSON-RPC request so far (batch members one by one), in order, with what was answered.
    pub fn calls(&self) -> Vec<RpcCall> {
        lock(&self.state().calls).clone()
    }

    /// Waits (at most `within`, an error then) until `n` requests for `method` arrived; returns them.
    pub async fn wait_calls(&self, method: &str, n: usize, within: Duration) -> Result<Vec<RpcCall>> {
        self.wait(within, &format!("{n} `{method}` requests"), |f| {
            let found: Vec<_> = f.calls().into_iter().filter(|c| c.method == method).collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// Starts (`Some`) or ends (`None`) an outage of the JSON-RPC endpoint; `check` and `events` stay up.
    pub fn fail_rpc(&self, failure: Option<RpcFailure>) {
        *lock(&self.state().failure) = failure;
    }
}

// ---------------------------------------------------------------------------------------------------------
// HTTP

fn respond(status: StatusCode, content_type: Option<&str>, body: impl Into<Body>) -> Response<Body> {
    let mut resp = Response::new(body.into());
    *resp.status_mut() = status;
    if let Some(v) = content_type.and_then(|c| c.parse().ok()) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn empty(status: StatusCode) -> Response<Body> {
    respond(status, None, Body::empty())
}

/// The daemon's Host rule (it listens on 127.0.0.1 here): the host must be 127.0.0.1, localhost or ::1 and a
/// port, if given, this one.
fn host_allowed(headers: &HeaderMap, port: u16) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    if host.is_empty() {
        return false;
    }
    let (name, port_part) = if let Some(rest) = host.strip_prefix('[') {
        let Some((name, after)) = rest.split_once(']') else {
            return false;
        };
        (name, after.strip_prefix(':'))
    } else {
        match host.rsplit_once(':') {
            Some((name, p)) if p.bytes().all(|b| b.is_ascii_digit()) => (name, Some(p)),
            _ => (host, None),
        }
    };
    let name = name.to_ascii_lowercase();
    if !["127.0.0.1", "localhost", "::1"].contains(&name.as_str()) {
        return false;
    }
    port_part.is_none_or(|p| p.parse::<u16>().ok() == Some(port))
}

async fn handle(s: Arc<State>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let host_ok = host_allowed(req.headers(), s.port);
    match path.as_str() {
        "/api/v1/check" => {
            if method != Method::GET {
                return empty(StatusCode::METHOD_NOT_ALLOWED);
            }
            s.checks.fetch_add(1, Ordering::SeqCst);
            s.changed.notify_waiters();
            empty(StatusCode::OK)
        }
        "/api/v1/events" => {
            if !host_ok {
                return empty(StatusCode::MISDIRECTED_REQUEST);
            }
            if method != Method::GET {
                return empty(StatusCode::METHOD_NOT_ALLOWED);
            }
            events(&s)
        }
        "/api/v1/rpc" => {
            if !host_ok {
                return empty(StatusCode::MISDIRECTED_REQUEST);
            }
            if method != Method::POST {
                return empty(StatusCode::METHOD_NOT_ALLOWED);
            }
            let json_body = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/json"));
            if !json_body {
                return empty(StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            let Ok(bytes) = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await else {
                return empty(StatusCode::PAYLOAD_TOO_LARGE);
            };
            rpc(&s, &bytes)
        }
        p if ["/api/v1/check", "/api/v1/events", "/api/v1/rpc"]
            .iter()
            .any(|c| p.starts_with(c)) =>
        {
            // Inside a context, but not its exact path.
            if !host_ok && !p.starts_with("/api/v1/check") {
                return empty(StatusCode::MISDIRECTED_REQUEST);
            }
            empty(StatusCode::NOT_FOUND)
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            Some("text/html; charset=utf-8"),
            NO_CONTEXT,
        ),
    }
}

fn events(s: &Arc<State>) -> Response<Body> {
    let (tx, rx) = mpsc::unbounded_channel();
    lock(&s.listeners).push(tx);
    s.opened.fetch_add(1, Ordering::SeqCst);
    s.changed.notify_waiters();
    let start = tokio::time::Instant::now() + KEEP_ALIVE;
    let ticks = tokio::time::interval_at(start, KEEP_ALIVE);
    let stream = futures::stream::unfold((rx, ticks), |(mut rx, mut ticks)| async move {
        let bytes = tokio::select! {
            push = rx.recv() => match push {
                Some(Push::Frame(b)) => b,
                Some(Push::Close) | None => return None,
            },
            _ = ticks.tick() => Bytes::from_static(b":\n"),
        };
        Some((Ok::<_, std::convert::Infallible>(bytes), (rx, ticks)))
    });
    respond(
        StatusCode::OK,
        Some("text/event-stream"),
        Body::from_stream(stream),
    )
}

// ---------------------------------------------------------------------------------------------------------
// JSON-RPC framing

/// An error a command answers.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    data: Value,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: Value::Null,
        }
    }

    fn user(message: impl Into<String>) -> Self {
        Self::new(codes::USER_ERROR, message)
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, message)
    }

    /// An exception caught by the command runner: `<message> (<ExceptionClass>)`.
    fn unexpected(message: &str, class: &str) -> Self {
        Self::new(codes::INTERNAL_ERROR, format!("{message} ({class})"))
    }

    fn null_pointer(what: &str) -> Self {
        Self::unexpected(
            &format!("Cannot invoke a method on \"{what}\" because it is null"),
            "NullPointerException",
        )
    }
}

fn error_response(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "error": {"code": e.code, "message": e.message, "data": e.data}, "id": id})
}

/// Jackson's node type name, as in the daemon's `unexpected type: …`.
fn node_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Bool(_) => "BOOLEAN",
        Value::Number(_) => "NUMBER",
        Value::String(_) => "STRING",
        Value::Array(_) => "ARRAY",
        Value::Object(_) => "OBJECT",
    }
}

/// The Java class Jackson maps a JSON value to in an untyped map.
fn java_class(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "java.lang.Boolean",
        Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => "java.lang.Integer",
        Value::Number(n) if n.is_i64() => "java.lang.Long",
        Value::Number(n) if n.is_u64() => "java.math.BigInteger",
        Value::Number(_) => "java.lang.Double",
        Value::String(_) => "java.lang.String",
        Value::Array(_) => "java.util.ArrayList",
        Value::Object(_) => "java.util.LinkedHashMap",
    }
}

fn class_cast(v: &Value, target: &str) -> RpcError {
    let from = java_class(v);
    RpcError::unexpected(
        &format!(
            "class {from} cannot be cast to class {target} ({from} and {target} are in module java.base of loader 'bootstrap')"
        ),
        "ClassCastException",
    )
}

/// A valid request.
struct Req {
    method: String,
    params: Option<Value>,
    id: Option<Value>,
}

/// The daemon's `parseJsonRpcRequest`: Jackson maps the object onto `JsonRpcRequest` (`jsonrpc`, `method`,
/// `params`, `id`; scalars coerced to strings), then the version and the method are checked.
fn parse_request(node: &Value) -> Result<Req, RpcError> {
    let Value::Object(obj) = node else {
        return Err(RpcError::invalid(format!(
            "Cannot construct instance of `org.asamk.signal.jsonrpc.JsonRpcRequest` (although at least one Creator exists): no {}-argument constructor/factory method to deserialize from {} value ({node})",
            node_type(node).to_ascii_lowercase(),
            node_type(node).to_ascii_lowercase()
        )));
    };
    if let Some(key) = obj
        .keys()
        .find(|k| !["jsonrpc", "method", "params", "id"].contains(&k.as_str()))
    {
        return Err(RpcError::invalid(format!(
            "Unrecognized field \"{key}\" (class org.asamk.signal.jsonrpc.JsonRpcRequest), not marked as ignorable (4 known properties: \"jsonrpc\", \"method\", \"params\", \"id\"])"
        )));
    }
    let text = |key: &str| -> Result<Option<String>, RpcError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(v) => Err(RpcError::invalid(format!(
                "Cannot deserialize value of type `java.lang.String` from {} value (token `JsonToken.START_{}`)",
                if v.is_array() { "Array" } else { "Object" },
                node_type(v)
            ))),
        }
    };
    let jsonrpc = text("jsonrpc")?;
    let method = text("method")?;
    let params = match obj.get("params") {
        None | Some(Value::Null) => None,
        Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p.clone()),
        Some(p) => {
            return Err(RpcError::invalid(format!(
                "Cannot deserialize value of type `com.fasterxml.jackson.databind.node.ContainerNode<?>` from {} value",
                node_type(p)
            )));
        }
    };
    let id = match obj.get("id") {
        None => None,
        Some(v @ (Value::Object(_) | Value::Array(_))) => {
            return Err(RpcError::invalid(format!(
                "Cannot deserialize value of type `com.fasterxml.jackson.databind.node.ValueNode` from {} value",
                node_type(v)
            )));
        }
        Some(v) => Some(v.clone()),
    };
    if jsonrpc.as_deref() != Some("2.0") {
        return Err(RpcError::invalid("only jsonrpc version 2.0 is supported"));
    }
    let Some(method) = method else {
        return Err(RpcError::invalid("method field must be set"));
    };
    Ok(Req { method, params, id })
}

/// The id of an invalid request, if it has a usable one (a scalar).
fn request_id(node: &Value) -> Value {
    match node.get("id") {
        Some(v) if !v.is_object() && !v.is_array() => v.clone(),
        _ => Value::Null,
    }
}

fn rpc(s: &State, body: &[u8]) -> Response<Body> {
    let failure = lock(&s.failure).clone();
    let reply = |status: StatusCode, value: Option<Value>| match value {
        Some(v) => respond(status, Some("application/json"), v.to_string()),
        None => empty(status),
    };
    let parsed = serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .next();
    if let Some(RpcFailure::Http(code)) = failure {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let nodes = match parsed {
            Some(Ok(Value::Array(items))) => items,
            Some(Ok(other)) => vec![other],
            _ => Vec::new(),
        };
        for n in &nodes {
            if let Ok(req) = parse_request(n) {
                record(s, &req, None, status.as_u16());
            }
        }
        return empty(status);
    }
    let node = match parsed {
        None => {
            let e = RpcError::invalid("unexpected type: MISSING");
            return reply(StatusCode::OK, Some(error_response(&Value::Null, &e)));
        }
        Some(Err(err)) => {
            let e = RpcError::new(codes::PARSE_ERROR, err.to_string());
            return reply(StatusCode::OK, Some(error_response(&Value::Null, &e)));
        }
        Some(Ok(node)) => node,
    };
    if failure == Some(RpcFailure::Internal) {
        let e = RpcError::new(codes::INTERNAL_ERROR, "An internal server error has occurred.");
        let answer = error_response(&Value::Null, &e);
        let nodes = match &node {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        };
        for n in &nodes {
            if let Ok(req) = parse_request(n) {
                record(s, &req, Some(answer.clone()), 200);
            }
        }
        return reply(StatusCode::OK, Some(answer));
    }
    match &node {
        Value::Array(items) if items.is_empty() => {
            let e = RpcError::invalid("invalid request");
            reply(StatusCode::OK, Some(error_response(&Value::Null, &e)))
        }
        Value::Array(items) => {
            let answers: Vec<Value> = items
                .iter()
                .filter_map(|item| match parse_request(item) {
                    Err(e) => Some(error_response(&request_id(item), &e)),
                    Ok(req) => run(s, &req),
                })
                .collect();
            if answers.is_empty() {
                reply(StatusCode::CREATED, None)
            } else {
                reply(StatusCode::OK, Some(Value::Array(answers)))
            }
        }
        Value::Object(obj) if obj.contains_key("result") || obj.contains_key("error") => {
            // A JSON-RPC response from the client: logged and dropped by the daemon.
            reply(StatusCode::CREATED, None)
        }
        Value::Object(_) => match parse_request(&node) {
            Err(e) => reply(StatusCode::OK, Some(error_response(&request_id(&node), &e))),
            Ok(req) => match run(s, &req) {
                Some(answer) => reply(StatusCode::OK, Some(answer)),
                None => reply(StatusCode::CREATED, None),
            },
        },
        other => {
            let e = RpcError::invalid(format!("unexpected type: {}", node_type(other)));
            reply(StatusCode::OK, Some(error_response(&Value::Null, &e)))
        }
    }
}

fn record(s: &State, req: &Req, response: Option<Value>, status: u16) {
    lock(&s.calls).push(RpcCall {
        method: req.method.clone(),
        params: req.params.clone().unwrap_or(Value::Null),
        id: req.id.clone(),
        response,
        status,
    });
    s.changed.notify_waiters();
}

/// Runs one request; the JSON-RPC response, `None` for a notification.
fn run(s: &State, req: &Req) -> Option<Value> {
    let outcome = dispatch(s, req);
    let response = req.id.as_ref().map(|id| match &outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result, "id": id}),
        Err(e) => error_response(id, e),
    });
    record(s, req, response.clone(), 200);
    response
}

fn dispatch(s: &State, req: &Req) -> Result<Value, RpcError> {
    const METHODS: &[&str] = &[
        "send",
        "sendTyping",
        "sendReceipt",
        "sendReaction",
        "listGroups",
        "getUserStatus",
        "getAttachment",
        "updateConfiguration",
        "updateProfile",
        "sendSyncRequest",
        "version",
    ];
    if !METHODS.contains(&req.method.as_str()) {
        return Err(RpcError::new(codes::METHOD_NOT_FOUND, "Method not implemented"));
    }
    let map = match &req.params {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => {
            return Err(RpcError::invalid(
                "Cannot deserialize value of type `java.util.LinkedHashMap<java.lang.String,java.lang.Object>` from Array value (token `JsonToken.START_ARRAY`)",
            ));
        }
    };
    let ns = Ns { map };
    match req.method.as_str() {
        "send" => send(s, &ns),
        "sendTyping" => send_typing(s, &ns),
        "sendReceipt" => send_receipt(s, &ns),
        "sendReaction" => send_reaction(s, &ns),
        "listGroups" => list_groups(s, &ns),
        "getUserStatus" => user_status(s, &ns),
        "getAttachment" => get_attachment(s, &ns),
        "updateConfiguration" => {
            for key in [
                "read-receipts",
                "unidentified-delivery-indicators",
                "typing-indicators",
                "link-previews",
            ] {
                ns.boolean(key)?;
            }
            Ok(json!({}))
        }
        "updateProfile" | "sendSyncRequest" => Ok(json!({})),
        _ => Ok(json!({"version": SIGNAL_CLI_VERSION})),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Parameters: signal-cli's JsonRpcNamespace over Jackson's untyped map

/// `group-id` → `groupId`.
fn camel(dashed: &str) -> String {
    let mut out = String::with_capacity(dashed.len());
    let mut upper = false;
    for c in dashed.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Java's `toString` of what Jackson made of `v`.
fn java_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(java_string).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{k}={}", java_string(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

struct Ns<'a> {
    map: Option<&'a Map<String, Value>>,
}

impl Ns<'_> {
    /// The value under the dashed name or its camelCase form (`null` counts as absent).
    fn raw(&self, dest: &str) -> Option<&Value> {
        let map = self.map?;
        map.get(dest)
            .filter(|v| !v.is_null())
            .or_else(|| map.get(&camel(dest)).filter(|v| !v.is_null()))
    }

    fn string(&self, dest: &str) -> Option<String> {
        self.raw(dest).map(java_string)
    }

    fn boolean(&self, dest: &str) -> Result<Option<bool>, RpcError> {
        match self.raw(dest) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(class_cast(v, "java.lang.Boolean")),
        }
    }

    fn flag(&self, dest: &str) -> Result<bool, RpcError> {
        Ok(self.boolean(dest)? == Some(true))
    }

    /// `(Long) get(dest)`: Jackson gives an `Integer` for numbers that fit one, which is no `Long`.
    fn long(&self, dest: &str) -> Result<Option<i64>, RpcError> {
        match self.raw(dest) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => match n.as_i64() {
                Some(i) if i32::try_from(i).is_err() => Ok(Some(i)),
                _ => Err(class_cast(v, "java.lang.Long")),
            },
            Some(v) => Err(class_cast(v, "java.lang.Long")),
        }
    }

    /// `getList(dest)`: an array, one value as a list of one, else the plural name's array.
    fn list(&self, dest: &str) -> Result<Option<Vec<Value>>, RpcError> {
        match self.raw(dest) {
            Some(Value::Array(items)) => Ok(Some(items.clone())),
            Some(v) => Ok(Some(vec![v.clone()])),
            None => match self.raw(&format!("{dest}s")) {
                None => Ok(None),
                Some(Value::Array(items)) => Ok(Some(items.clone())),
                Some(v) => Err(class_cast(v, "java.util.List")),
            },
        }
    }

    /// A list whose elements are used as strings.
    fn strings(&self, dest: &str) -> Result<Option<Vec<String>>, RpcError> {
        let Some(items) = self.list(dest)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(class_cast(other, "java.lang.String")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Recipients

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rcpt {
    Number(String),
    Uuid(String),
    Pni(String),
    Username(String),
}

impl Rcpt {
    fn identifier(&self) -> String {
        match self {
            Rcpt::Number(n) => n.clone(),
            Rcpt::Uuid(u) => u.clone(),
            Rcpt::Pni(p) => format!("PNI:{p}"),
            Rcpt::Username(u) => format!("u:{u}"),
        }
    }

    /// The partial address signal-cli reports for an unregistered recipient.
    fn partial_address(&self) -> Value {
        match self {
            Rcpt::Number(n) => json!({"uuid": null, "number": n, "username": null}),
            Rcpt::Uuid(u) => json!({"uuid": u, "number": null, "username": null}),
            Rcpt::Pni(_) => json!({"uuid": null, "number": null, "username": null}),
            Rcpt::Username(u) => json!({"uuid": null, "number": null, "username": u}),
        }
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// signal-cli's `PhoneNumberFormatter.formatNumber`, with its imprecise fallback instead of libphonenumber.
fn format_number(raw: &str, local: &str) -> Result<String, String> {
    if raw.contains('@') {
        return Err("Possible attempt to use email address.".into());
    }
    let number: String = raw.chars().filter(|c| c.is_ascii_digit() || *c == '+').collect();
    if number.is_empty() {
        return Err("No valid characters found.".into());
    }
    if number.starts_with('+') {
        return Ok(number);
    }
    let local = local.strip_prefix('+').unwrap_or(local);
    if number.len() >= local.len() {
        return Ok(format!("+{number}"));
    }
    let prefix = local.get(..local.len() - number.len()).unwrap_or_default();
    Ok(format!("+{prefix}{number}"))
}

fn parse_single(s: &State, raw: &str) -> Result<Rcpt, RpcError> {
    if is_uuid(raw) {
        return Ok(Rcpt::Uuid(raw.to_ascii_lowercase()));
    }
    if let Some(pni) = raw.strip_prefix("PNI:") {
        if !is_uuid(pni) {
            return Err(RpcError::user(format!(
                "Invalid phone number '{raw}': Invalid PNI"
            )));
        }
        return Ok(Rcpt::Pni(pni.to_ascii_lowercase()));
    }
    if let Some(name) = raw.strip_prefix("u:") {
        return Ok(Rcpt::Username(name.to_string()));
    }
    let local = s.me.number.as_deref().unwrap_or_default();
    format_number(raw, local)
        .map(Rcpt::Number)
        .map_err(|why| RpcError::user(format!("Invalid phone number '{raw}': {why}")))
}

/// `GroupId.fromBase64`: standard base64 (padding optional) of 16 (v1) or 32 (v2) bytes.
fn parse_group_id(raw: &str) -> Result<String, RpcError> {
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let why = match engine.decode(raw) {
        Ok(bytes) if bytes.len() == 16 || bytes.len() == 32 => return Ok(STANDARD.encode(bytes)),
        Ok(bytes) => format!("Invalid group id of size {}", bytes.len()),
        Err(base64::DecodeError::InvalidByte(_, b)) => format!("Illegal base64 character {b:x}"),
        Err(err) => err.to_string(),
    };
    Err(RpcError::user(format!(
        "Invalid group id: Failed to decode groupId (must be base64) \"{raw}\": {why}"
    )))
}

enum Target {
    Single(Rcpt),
    Group(String),
    NoteToSelf,
}

/// `CommandUtil.getRecipientIdentifiers` (duplicates dropped, order kept).
fn targets(s: &State, ns: &Ns<'_>, note_to_self: bool, usernames: bool) -> Result<Vec<Target>, RpcError> {
    let mut out = Vec::new();
    if note_to_self {
        out.push(Target::NoteToSelf);
    }
    let mut seen = Vec::new();
    for raw in ns.strings("recipient")?.unwrap_or_default() {
        let r = parse_single(s, &raw)?;
        if !seen.contains(&r.identifier()) {
            seen.push(r.identifier());
            out.push(Target::Single(r));
        }
    }
    for raw in ns.strings("group-id")?.unwrap_or_default() {
        let g = parse_group_id(&raw)?;
        if !seen.contains(&g) {
            seen.push(g.clone());
            out.push(Target::Group(g));
        }
    }
    if usernames {
        for raw in ns.strings("username")?.unwrap_or_default() {
            out.push(Target::Single(Rcpt::Username(raw)));
        }
    }
    if out.is_empty() {
        return Err(RpcError::user("No recipients given"));
    }
    Ok(out)
}

/// The results of delivering to `targets` (`None` for a group: `Group not found`).
fn deliver_to(s: &State, targets: &[Target], group_error: &str) -> Result<Vec<Value>, RpcError> {
    let failure = lock(&s.failure).clone();
    let outcome = |address: Value, group: Option<&str>| {
        let mut r = json!({"recipientAddress": address});
        if let Some(g) = group {
            r["groupId"] = json!(g);
        }
        match &failure {
            Some(RpcFailure::Network) => r["type"] = json!("NETWORK_FAILURE"),
            Some(RpcFailure::RateLimit { retry_after_secs }) => {
                r["type"] = json!("RATE_LIMIT_FAILURE");
                r["retryAfterSeconds"] = json!(retry_after_secs);
            }
            _ => r["type"] = json!("SUCCESS"),
        }
        r
    };
    // Groups are looked up before anything goes out.
    let groups = lock(&s.groups);
    for t in targets {
        if let Target::Group(id) = t
            && !groups.iter().any(|g| g.id == *id)
        {
            return Err(RpcError::user(format!("{group_error}Group not found: {id}")));
        }
    }
    let mut results = Vec::new();
    for t in targets {
        match t {
            Target::NoteToSelf => results.push(outcome(s.me.address(), None)),
            Target::Single(r) => match s.find_user(r) {
                Some(u) => results.push(outcome(u.address(), None)),
                None => results.push(json!({"recipientAddress": r.partial_address(),
                                            "type": "UNREGISTERED_FAILURE"})),
            },
            Target::Group(id) => {
                if let Some(g) = groups.iter().find(|g| g.id == *id) {
                    for m in g.members.iter().filter(|m| m.uuid != s.me.uuid) {
                        results.push(outcome(m.address(), Some(id)));
                    }
                }
            }
        }
    }
    Ok(results)
}

/// `SendMessageResultUtils.outputResult`: the result, or the error when no recipient got it.
fn output(timestamp: i64, results: Vec<Value>) -> Result<Value, RpcError> {
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r["type"].as_str().unwrap_or_default())
        .collect();
    let answer = json!({"timestamp": timestamp, "results": results});
    if kinds.is_empty() || kinds.contains(&"SUCCESS") {
        return Ok(answer);
    }
    let mut e = if kinds.iter().all(|k| *k == "IDENTITY_FAILURE") {
        RpcError::new(
            codes::UNTRUSTED_KEY_ERROR,
            "Failed to send message due to untrusted identities",
        )
    } else if kinds.iter().all(|k| *k == "RATE_LIMIT_FAILURE") {
        RpcError::new(
            codes::RATELIMIT_ERROR,
            "Failed to send message due to rate limiting",
        )
    } else {
        RpcError::user("Failed to send message")
    };
    e.data = json!({"response": answer});
    Err(e)
}

// ---------------------------------------------------------------------------------------------------------
// Commands

/// `start:length:rest` as signal-cli's `(\d+):(\d+):(.+)`.
fn ranged(text: &str) -> Option<(u32, u32, &str)> {
    let (start, rest) = text.split_once(':')?;
    let (length, tail) = rest.split_once(':')?;
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(start) || !digits(length) || tail.is_empty() || tail.contains('\n') {
        return None;
    }
    Some((start.parse().ok()?, length.parse().ok()?, tail))
}

const STYLES: &[&str] = &["NONE", "BOLD", "ITALIC", "SPOILER", "STRIKETHROUGH", "MONOSPACE"];

fn send(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    ns.flag("notify-self")?;
    let note_to_self = ns.flag("note-to-self")?;
    ns.flag("no-urgent")?;
    let targets = targets(s, ns, note_to_self, true)?;
    if ns.flag("end-session")? {
        if !targets.iter().any(|t| matches!(t, Target::Single(_))) {
            return Err(RpcError::user("No recipients given"));
        }
        return Ok(json!({}));
    }
    let sticker = ns.string("sticker");
    if let Some(st) = &sticker {
        let ok = st.split_once(':').is_some_and(|(pack, id)| {
            !pack.is_empty()
                && pack.len() % 2 == 0
                && pack
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
        });
        if !ok {
            return Err(RpcError::user(format!(
                "Invalid sticker syntax ({st}) expected 'stickerPackId:stickerId'"
            )));
        }
    }
    let message = ns.string("message").unwrap_or_default();
    let attachments = ns.strings("attachment")?.unwrap_or_default();
    ns.flag("view-once")?;
    ns.flag("voice-note")?;
    let mentions = ns.strings("mention")?.unwrap_or_default();
    let mut mention_users = Vec::new();
    for m in &mentions {
        let Some((_, _, who)) = ranged(m) else {
            return Err(RpcError::user(format!(
                "Invalid mention syntax ({m}) expected 'start:length:recipientNumber'"
            )));
        };
        mention_users.push(parse_single(s, who)?);
    }
    let text_styles = ns.strings("text-style")?.unwrap_or_default();
    for t in &text_styles {
        let Some((_, _, style)) = ranged(t) else {
            return Err(RpcError::user(format!(
                "Invalid textStyle syntax ({t}) expected 'start:length:STYLE'"
            )));
        };
        if !STYLES.contains(&style) {
            return Err(RpcError::user(format!("Invalid style: {style}")));
        }
    }
    let quote_timestamp = ns.long("quote-timestamp")?;
    let mut quote_author = None;
    if quote_timestamp.is_some() {
        let Some(author) = ns.string("quote-author") else {
            return Err(RpcError::user("Quote author parameter is missing"));
        };
        parse_single(s, &author)?;
        quote_author = Some(author);
    }
    if ns.long("story-timestamp")?.is_some() {
        let Some(author) = ns.string("story-author") else {
            return Err(RpcError::null_pointer("storyAuthor"));
        };
        parse_single(s, &author)?;
    }
    if message.is_empty() && attachments.is_empty() && sticker.is_none() && quote_timestamp.is_none() {
        return Err(RpcError::user(
            "Sending empty message is not allowed, either a message, attachment or sticker must be given.",
        ));
    }
    let edit_timestamp = ns.long("edit-timestamp")?;
    let read = attachments
        .iter()
        .map(|a| read_attachment(s, a))
        .collect::<Result<Vec<_>, _>>()?;
    for u in &mention_users {
        if matches!(u, Rcpt::Number(_)) && s.find_user(u).is_none() {
            return Err(RpcError::user(format!(
                "The user {} is not registered.",
                u.identifier()
            )));
        }
    }
    let results = deliver_to(s, &targets, "")?;
    let timestamp = s.now_ms();
    let answer = output(timestamp, results)?;
    let mut recipients = Vec::new();
    let mut group_ids = Vec::new();
    for t in &targets {
        match t {
            Target::NoteToSelf => recipients.push(s.me.id().to_string()),
            Target::Single(r) => recipients.push(r.identifier()),
            Target::Group(g) => group_ids.push(g.clone()),
        }
    }
    lock(&s.sent).push(SentMessage {
        timestamp,
        recipients,
        group_ids,
        message,
        attachments: read,
        mentions,
        text_styles,
        quote_timestamp,
        quote_author,
        edit_timestamp,
        params: ns.map.map_or(Value::Null, |m| Value::Object(m.clone())),
    });
    s.changed.notify_waiters();
    Ok(answer)
}

fn send_typing(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let mut targets = Vec::new();
    for raw in ns.strings("recipient")?.unwrap_or_default() {
        targets.push(Target::Single(parse_single(s, &raw)?));
    }
    for raw in ns.strings("group-id")?.unwrap_or_default() {
        targets.push(Target::Group(parse_group_id(&raw)?));
    }
    ns.flag("stop")?;
    if targets.is_empty() {
        return Err(RpcError::user("No recipients given"));
    }
    let results = deliver_to(s, &targets, "Failed to send to group: ")?;
    output(s.now_ms(), results)
}

fn send_receipt(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let Some(raw) = ns.string("recipient") else {
        return Err(RpcError::null_pointer("recipient"));
    };
    let rcpt = parse_single(s, &raw)?;
    let Some(stamps) = ns.list("target-timestamp")? else {
        return Err(RpcError::null_pointer("targetTimestamp"));
    };
    if let Some(bad) = stamps.iter().find(|v| !v.is_i64()) {
        return Err(class_cast(bad, "java.lang.Long"));
    }
    match ns.string("type").as_deref() {
        None | Some("read" | "viewed") => {}
        Some(other) => return Err(RpcError::user(format!("Unknown receipt type: {other}"))),
    }
    let results = deliver_to(s, &[Target::Single(rcpt)], "")?;
    output(s.now_ms(), results)
}

fn send_reaction(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let note_to_self = ns.flag("note-to-self")?;
    ns.flag("notify-self")?;
    let targets = targets(s, ns, note_to_self, true)?;
    let emoji = ns.string("emoji");
    ns.flag("remove")?;
    let author = ns.string("target-author");
    let timestamp = ns.long("target-timestamp")?;
    ns.flag("story")?;
    match (&author, targets.as_slice()) {
        (None, [Target::Single(_)]) => {}
        (None, _) => return Err(RpcError::null_pointer("targetAuthor")),
        (Some(a), _) => {
            parse_single(s, a)?;
        }
    }
    if emoji.is_none() {
        return Err(RpcError::null_pointer("emoji"));
    }
    if timestamp.is_none() {
        return Err(RpcError::null_pointer("targetTimestamp"));
    }
    let results = deliver_to(s, &targets, "")?;
    output(s.now_ms(), results)
}

fn list_groups(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let wanted = ns
        .strings("group-id")?
        .unwrap_or_default()
        .iter()
        .map(|g| parse_group_id(g))
        .collect::<Result<Vec<_>, _>>()?;
    let groups = lock(&s.groups);
    let address = |u: &SignalUser| json!({"number": u.number, "uuid": u.uuid});
    Ok(groups
        .iter()
        .filter(|g| wanted.is_empty() || wanted.contains(&g.id))
        .map(|g| {
            let mut members = vec![json!({"number": s.me.number, "uuid": s.me.uuid, "isAdmin": true})];
            members.extend(
                g.members
                    .iter()
                    .filter(|m| m.uuid != s.me.uuid)
                    .map(|m| json!({"number": m.number, "uuid": m.uuid, "isAdmin": false})),
            );
            json!({"id": g.id, "name": g.name, "description": "", "isMember": true, "isBlocked": false,
                   "messageExpirationTime": 0, "members": members, "pendingMembers": [],
                   "requestingMembers": [], "admins": [address(&s.me)], "banned": [],
                   "permissionAddMember": "EVERY_MEMBER", "permissionEditDetails": "EVERY_MEMBER",
                   "permissionSendMessage": "EVERY_MEMBER", "groupInviteLink": null})
        })
        .collect())
}

fn user_status(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let local = s.me.number.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    for raw in ns.strings("recipient")?.unwrap_or_default() {
        let number = format_number(&raw, local).ok();
        let user = number
            .as_ref()
            .and_then(|n| s.find_user(&Rcpt::Number(n.clone())));
        let mut status = json!({"recipient": raw});
        if let Some(n) = &number {
            status["number"] = json!(n);
        }
        status["uuid"] = json!(user.as_ref().map(|u| u.uuid.clone()));
        status["isRegistered"] = json!(user.is_some());
        out.push(status);
    }
    for raw in ns.strings("username")?.unwrap_or_default() {
        out.push(json!({"recipient": raw, "username": raw, "uuid": null, "isRegistered": false}));
    }
    Ok(Value::Array(out))
}

fn get_attachment(s: &State, ns: &Ns<'_>) -> Result<Value, RpcError> {
    let Some(id) = ns.string("id") else {
        return Err(RpcError::user("Missing attachment id parameter"));
    };
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match std::fs::read(s.attachments_dir().join(safe)) {
        Ok(bytes) => Ok(json!({"data": STANDARD.encode(bytes)})),
        Err(_) => Err(RpcError::user(format!("Could not find attachment with ID: {id}"))),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Attachments

fn extension_for(content_type: &str) -> Option<&'static str> {
    Some(match content_type {
        "application/vnd.android.package-archive" => "apk",
        "application/json" => "json",
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/heic" => "heic",
        "image/heif" => "heif",
        "image/webp" => "webp",
        "image/gif" => "gif",
        "audio/aac" => "aac",
        "video/mp4" => "mp4",
        "text/x-vcard" => "vcf",
        "text/plain" | "text/x-signal-plain" => "txt",
        "application/octet-stream" => "bin",
        _ => return None,
    })
}

/// What `Files.probeContentType` (by extension) and then the first bytes say a file is.
fn file_content_type(path: &Path, bytes: &[u8]) -> String {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let by_ext = match ext.as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        "txt" | "text" => Some("text/plain"),
        "md" => Some("text/markdown"),
        "html" | "htm" => Some("text/html"),
        "json" => Some("application/json"),
        "pdf" => Some("application/pdf"),
        "mp4" => Some("video/mp4"),
        "mp3" => Some("audio/mpeg"),
        "aac" => Some("audio/aac"),
        "ogg" | "oga" => Some("audio/ogg"),
        "vcf" => Some("text/x-vcard"),
        "zip" => Some("application/zip"),
        _ => None,
    };
    let sniffed = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF8") {
        Some("image/gif")
    } else {
        None
    };
    by_ext
        .or(sniffed)
        .unwrap_or("application/octet-stream")
        .to_string()
}

/// signal-cli's `DataURI.of`: `data:[<type/subtype>][;<key>=<value>][;base64],<data>`.
fn parse_data_uri(text: &str) -> Option<(String, Option<String>, Vec<u8>)> {
    let head = text.get(..5)?;
    if !head.eq_ignore_ascii_case("data:") || text.contains('\n') {
        return None;
    }
    let (header, data) = text.get(5..)?.split_once(',')?;
    if data.is_empty() {
        return None;
    }
    let lower = header.to_ascii_lowercase();
    let (header, base64) = if lower.ends_with(";base64") {
        (header.get(..header.len() - 7)?, true)
    } else {
        (header, false)
    };
    let (media, params) = match header.find(';') {
        Some(at) => (header.get(..at)?, Some(header.get(at + 1..)?)),
        None => (header, None),
    };
    if !media.is_empty() && !media.contains('/') {
        return None;
    }
    // Signal-cli's parameter pattern is greedy: one key (up to the last `=`) and one value.
    let filename = params.and_then(|p| {
        let (key, value) = p.rsplit_once('=')?;
        (key == "filename").then(|| percent_decode(value))
    });
    let bytes = if base64 {
        GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        )
        .decode(data)
        .ok()?
    } else {
        percent_decode(data).into_bytes()
    };
    let media = if media.is_empty() { "text/plain" } else { media };
    Some((media.to_string(), filename, bytes))
}

/// `URLDecoder.decode(…, UTF-8)`: `+` is a space, `%XX` a byte.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one attachment as `AttachmentHelper.getAttachmentStream` does (a data URI, else a file path; files in
/// the data directory refused); errors as `SendCommand` reports them.
fn read_attachment(s: &State, source: &str) -> Result<SentAttachment, RpcError> {
    let invalid = |why: String| {
        RpcError::unexpected(
            &format!("Failed to send message: {source}: {why} (AttachmentInvalidException)"),
            "UnexpectedErrorException",
        )
    };
    if !source.starts_with("data:") {
        let canonical = std::fs::canonicalize(source).unwrap_or_else(|_| PathBuf::from(source));
        if canonical.starts_with(&s.data_dir) {
            return Err(invalid(
                "Attaching files from the signal-cli data directory is not allowed".into(),
            ));
        }
    }
    if let Some((content_type, filename, bytes)) = parse_data_uri(source) {
        return Ok(SentAttachment {
            source: source.to_string(),
            filename,
            content_type,
            bytes,
        });
    }
    let path = Path::new(source);
    match std::fs::read(path) {
        Ok(bytes) => Ok(SentAttachment {
            source: source.to_string(),
            filename: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            content_type: file_content_type(path, &bytes),
            bytes,
        }),
        Err(err) => {
            let why = match err.kind() {
                std::io::ErrorKind::NotFound => "No such file or directory".to_string(),
                std::io::ErrorKind::PermissionDenied => "Permission denied".to_string(),
                std::io::ErrorKind::IsADirectory => "Is a directory".to_string(),
                _ => err.to_string(),
            };
            Err(invalid(format!("{source} ({why})")))
        }
    }
}

/// Adds a quote of an earlier message to `envelope`'s data message, as signal-cli writes it: `{"id": the quoted
/// message's timestamp, "author", "authorNumber", "authorUuid", "text", "attachments": []}`.
pub fn with_quote(envelope: &mut Value, quoted_timestamp: i64, author: &SignalUser, text: &str) {
    if let Some(data) = envelope.get_mut("dataMessage").and_then(Value::as_object_mut) {
        data.insert(
            "quote".into(),
            json!({"id": quoted_timestamp, "author": author.id(), "authorNumber": author.number,
                   "authorUuid": author.uuid, "text": text, "attachments": []}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_daemons_namespace() {
        let params =
            json!({"recipient": "+1555", "groupIds": ["a"], "textStyles": "0:1:BOLD", "quoteTimestamp": 5});
        let ns = Ns {
            map: params.as_object(),
        };
        assert_eq!(ns.list("recipient").ok().flatten(), Some(vec![json!("+1555")]));
        assert_eq!(ns.list("group-id").ok().flatten(), Some(vec![json!("a")]));
        assert_eq!(
            ns.list("text-style").err().map(|e| e.code),
            Some(codes::INTERNAL_ERROR),
            "a plural name must hold an array"
        );
        let e = ns.long("quote-timestamp").err();
        assert!(e.is_some_and(|e| {
            e.message
                .starts_with("class java.lang.Integer cannot be cast to class java.lang.Long")
        }),);
    }

    #[test]
    fn data_uris_and_numbers_parse_like_signal_cli() {
        let (ct, name, bytes) =
            parse_data_uri("data:image/png;filename=a%20b.png;base64,aGk=").unwrap_or_default();
        assert_eq!(
            (ct.as_str(), name.as_deref(), bytes.as_slice()),
            ("image/png", Some("a b.png"), &b"hi"[..])
        );
        let (ct, _, bytes) = parse_data_uri("data:,hello%21").unwrap_or_default();
        assert_eq!((ct.as_str(), bytes.as_slice()), ("text/plain", &b"hello!"[..]));
        assert!(parse_data_uri("data:image/png;base64,").is_none());
        assert_eq!(
            format_number("+1 (555) 000-0002", "+15550000001").ok().as_deref(),
            Some("+15550000002")
        );
        assert_eq!(
            format_number("0000002", "+15550000001").ok().as_deref(),
            Some("+15550000002")
        );
        assert!(format_number("abc", "+1").is_err());
        assert!(parse_group_id(&group_id_for("x")).is_ok());
        assert!(parse_group_id("AAAA").is_err());
        assert_eq!(
            camel("unidentified-delivery-indicators"),
            "unidentifiedDeliveryIndicators"
        );
    }
}
