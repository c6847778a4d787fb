//! [`WecomChannel`]: the subscription and heartbeat, callbacks in (access control, media), answers out (streams on
//! the chat's callback, proactive markdown, uploads).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use md5::{Digest, Md5};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, RecentIds, read_attachment, safe_file_name, server_text, split_message,
};
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::link::{self, Ack, Ended, Link, NoAck};
use crate::{NAME, WecomSettings, media};

/// Metadata key of the `msgid` an inbound message came from.
pub const META_MESSAGE_ID: &str = "message_id";
/// Metadata key of its WeCom message type (`text`, `image`, `file`, `voice`, `mixed`).
pub const META_MSG_TYPE: &str = "msg_type";
/// Metadata key of its chat type (`single` or `group`).
pub const META_CHAT_TYPE: &str = "chat_type";

/// The most bytes of one stream (or markdown) message: longer answers are split, each piece its own message.
pub const MAX_STREAM_BYTES: usize = 20480;
/// The largest file received (0.3.5's bound).
pub const MAX_MEDIA_BYTES: u64 = 200 * 1024 * 1024;
/// One upload chunk, before base64 (the protocol's size).
pub const UPLOAD_CHUNK_BYTES: usize = 512 * 1024;
/// The most chunks one upload may have (the protocol's bound).
pub const MAX_UPLOAD_CHUNKS: usize = 100;
/// The largest file sent: [`MAX_UPLOAD_CHUNKS`] chunks of [`UPLOAD_CHUNK_BYTES`].
pub const MAX_UPLOAD_BYTES: u64 = (MAX_UPLOAD_CHUNKS * UPLOAD_CHUNK_BYTES) as u64;
/// How often a heartbeat (`ping`) goes out (the SDK's and 0.3.5's 30 s).
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long after a message its callback is answered on; later answers are sent on their own (WeCom takes
/// stream replies for about six minutes).
pub const CALLBACK_TTL: Duration = Duration::from_secs(5 * 60);

/// Unanswered pings in a row that end the connection (the SDK's two).
const MAX_MISSED_PINGS: u32 = 2;
/// Bound of the connection and the WebSocket upgrade.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of the wait for one acknowledgement (the subscription's, a reply's, an upload step's).
const ACK_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound of one media download, headers and body.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the close frame may take when the connection ends.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// `msgid`s remembered against redelivery (0.3.5's 1,000).
const SEEN_CAPACITY: usize = 1000;
/// Chats whose last callback is remembered, at most.
const REMEMBERED_CHATS: usize = 4096;

/// The subscription's errcode for a wrong bot id or secret.
const ERR_INVALID_CREDENTIALS: i64 = 853000;
/// A reply's errcode for a callback `req_id` WeCom no longer takes.
const ERR_INVALID_REQ_ID: i64 = 846605;
/// A reply's errcode for a stream that can no longer be updated.
const ERR_STREAM_EXPIRED: i64 = 846608;

const SUBSCRIBE: &str = "aibot_subscribe";
const RESPOND: &str = "aibot_respond_msg";
const RESPOND_WELCOME: &str = "aibot_respond_welcome_msg";
const SEND: &str = "aibot_send_msg";
const UPLOAD_INIT: &str = "aibot_upload_media_init";
const UPLOAD_CHUNK: &str = "aibot_upload_media_chunk";
const UPLOAD_FINISH: &str = "aibot_upload_media_finish";

/// A chat's last callback: answers reuse its `req_id`.
#[derive(Debug, Clone)]
struct Callback {
    req_id: String,
    at: Instant,
}

/// What goes to a chat in one message.
#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    /// Text: a stream on the callback (finished unless progress), else markdown.
    Text { content: &'a str, finish: bool },
    /// An uploaded file.
    Media { kind: &'a str, media_id: &'a str },
}

/// The WeCom channel. See the [crate docs](crate).
pub struct WecomChannel {
    settings: WecomSettings,
    access: AccessControl,
    media_dir: PathBuf,
    guard: SsrfGuard,
    /// The HTTP client of media downloads (through the guard), built on the first download.
    media_client: OnceLock<reqwest::Client>,
    seen: RecentIds,
    ping_every: Duration,
    /// The subscribed connection, while there is one.
    link: Mutex<Option<Arc<Link>>>,
    /// Each chat's last callback.
    callbacks: Mutex<HashMap<String, Callback>>,
    connections: watch::Sender<u64>,
}

impl std::fmt::Debug for WecomChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WecomChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

fn rejected(message: impl Into<String>) -> ChannelError {
    ChannelError::rejected(NAME, message.into())
}

/// A new `req_id` (or stream id): `<prefix>_<32 hex digits>`.
fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// `text` in pieces of at most [`MAX_STREAM_BYTES`] bytes, cut by the shared splitter (never inside a
/// character; a piece still too long is cut again by its widest character).
fn pieces(text: &str) -> Vec<String> {
    split_message(text, MAX_STREAM_BYTES)
        .into_iter()
        .flat_map(|piece| {
            if piece.len() <= MAX_STREAM_BYTES {
                return vec![piece];
            }
            let widest = piece.chars().map(char::len_utf8).max().unwrap_or(1);
            split_message(&piece, MAX_STREAM_BYTES / widest)
        })
        .collect()
}

/// `str` at `path` of `v`, or `""`.
fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or_default()
}

/// The last component of `path`, for notes.
fn file_label(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
}

impl WecomChannel {
    /// A channel with these settings that stores received files in `<media_root>/wecom/`. Without
    /// [`with_pairing`](Self::with_pairing), strangers' single-chat messages are ignored (as 0.3.5 does); without
    /// [`with_ssrf_guard`](Self::with_ssrf_guard), media on internal addresses are refused.
    pub fn new(settings: WecomSettings, media_root: impl AsRef<Path>) -> Self {
        Self {
            access: Self::access(&settings, None),
            media_dir: media_root.as_ref().join(NAME),
            guard: SsrfGuard::default(),
            media_client: OnceLock::new(),
            seen: RecentIds::new(SEEN_CAPACITY),
            ping_every: DEFAULT_PING_INTERVAL,
            link: Mutex::default(),
            callbacks: Mutex::default(),
            connections: watch::Sender::new(0),
            settings,
        }
    }

    fn access(settings: &WecomSettings, pairing: Option<Arc<PairingStore>>) -> AccessControl {
        // WeCom delivers only group messages that mention the bot: every one the sender may write is taken.
        AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Open,
            pairing,
        )
    }

    /// Issues pairing codes to strangers writing in a single chat through `store`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = Self::access(&self.settings, Some(store));
        self
    }

    /// Downloads the files users send (their encrypted media URLs) behind `guard`, the one every adapter shares
    /// (the gateway passes one with `tools.ssrfWhitelist`): only `http(s)`, never an internal address, every
    /// resolved address checked where the connection is made, no redirects.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.guard = guard;
        self.media_client = OnceLock::new();
        self
    }

    /// Sends a heartbeat every `every` instead of every [`DEFAULT_PING_INTERVAL`] (tests; unusual networks).
    /// Two unanswered in a row end the connection.
    #[must_use]
    pub fn with_ping_interval(mut self, every: Duration) -> Self {
        self.ping_every = every.max(Duration::from_millis(10));
        self
    }

    /// Counts the successful subscriptions: a test waits for it.
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    /// Where received files are stored.
    pub fn media_dir(&self) -> &Path {
        &self.media_dir
    }

    fn current_link(&self) -> Option<Arc<Link>> {
        lock(&self.link).clone()
    }

    /// Sends stop using `link` (it ended): they wait for the next connection instead.
    fn forget_link(&self, link: &Arc<Link>) {
        let mut current = lock(&self.link);
        if current.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            *current = None;
        }
    }

    /// The chat's callback `req_id`, while it may still be answered on.
    fn callback(&self, chat_id: &str) -> Option<String> {
        let callbacks = lock(&self.callbacks);
        let cb = callbacks.get(chat_id)?;
        (cb.at.elapsed() < CALLBACK_TTL).then(|| cb.req_id.clone())
    }

    fn remember_callback(&self, chat_id: &str, req_id: &str) {
        let mut callbacks = lock(&self.callbacks);
        if callbacks.len() >= REMEMBERED_CHATS && !callbacks.contains_key(chat_id) {
            callbacks.retain(|_, cb| cb.at.elapsed() < CALLBACK_TTL);
            if callbacks.len() >= REMEMBERED_CHATS {
                callbacks.clear();
            }
        }
        callbacks.insert(
            chat_id.to_owned(),
            Callback {
                req_id: req_id.to_owned(),
                at: Instant::now(),
            },
        );
    }

    fn forget_callback(&self, chat_id: &str, req_id: &str) {
        let mut callbacks = lock(&self.callbacks);
        if callbacks.get(chat_id).is_some_and(|cb| cb.req_id == req_id) {
            callbacks.remove(chat_id);
        }
    }

    /// `what` got no acknowledgement, as the error the manager acts on (retrying later may work).
    fn no_ack(what: &str, why: NoAck) -> ChannelError {
        match why {
            NoAck::Gone => transient(format!(
                "{what}: the connection to WeCom ended before it was acknowledged"
            )),
            NoAck::Timeout(t) => transient(format!(
                "{what}: WeCom did not acknowledge it within {} s",
                t.as_secs()
            )),
            NoAck::Busy => transient(format!("{what}: another request with its req_id is waiting")),
        }
    }

    /// What WeCom said refusing `what`: its errcode and message (cleaned of the secret).
    fn refusal(&self, what: &str, ack: &Ack) -> String {
        format!(
            "WeCom refused {what}: errcode {} {}",
            ack.errcode,
            server_text(&ack.errmsg, &[self.settings.secret.expose()])
        )
    }

    /// A refused request (retrying will not help).
    fn refused(&self, what: &str, ack: &Ack) -> ChannelError {
        rejected(self.refusal(what, ack))
    }

    /// `request` acknowledged with errcode 0, else the error naming `what`.
    async fn ok(&self, link: &Link, what: &str, req_id: &str, body: Value) -> Result<Ack, ChannelError> {
        let ack = link
            .request(what, req_id, body)
            .await
            .map_err(|e| Self::no_ack(what, e))?;
        if ack.errcode == 0 {
            Ok(ack)
        } else {
            Err(self.refused(what, &ack))
        }
    }

    /// Why the link ended, as the error the manager acts on.
    fn ended_error(&self, link: &Link) -> ChannelError {
        match link.ended() {
            Some(Ended::Kicked) => ChannelError::auth(
                NAME,
                format!(
                    "another connection subscribed with channels.{NAME}.botId {} and took over the bot (WeCom \
                     keeps one connection per bot and said so with a disconnected_event); not reconnecting, so as \
                     not to take it back: stop the other program or gateway using this bot, then restart this one",
                    self.settings.bot_id
                ),
            ),
            Some(Ended::Lost(why)) => transient(format!("the connection to WeCom was lost: {why}")),
            Some(Ended::Closed | Ended::Local) | None => transient("the WeCom server closed the connection"),
        }
    }

    /// Subscribes on `link`, then keeps it alive and handles its callbacks until it ends or `cancel` fires.
    async fn session(
        &self,
        bus: &Arc<dyn Bus>,
        cancel: &CancellationToken,
        link: &Arc<Link>,
        events: mpsc::UnboundedReceiver<Value>,
    ) -> Result<(), ChannelError> {
        let body = json!({"bot_id": self.settings.bot_id, "secret": self.settings.secret.expose()});
        let req_id = new_id(SUBSCRIBE);
        let ack = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(()),
            r = link.request(SUBSCRIBE, &req_id, body) => match r {
                Ok(ack) => ack,
                Err(NoAck::Gone) => return Err(self.ended_error(link)),
                Err(e) => return Err(Self::no_ack(SUBSCRIBE, e)),
            },
        };
        match ack.errcode {
            0 => {}
            ERR_INVALID_CREDENTIALS => {
                return Err(ChannelError::auth(
                    NAME,
                    format!(
                        "WeCom refused botId/secret (errcode {ERR_INVALID_CREDENTIALS}): check channels.{NAME}.botId \
                         ({}) and channels.{NAME}.secret (the AI bot's long-connection credentials in the WeCom \
                         admin console)",
                        self.settings.bot_id
                    ),
                ));
            }
            _ => return Err(transient(self.refusal("the subscription", &ack))),
        }
        tracing::info!(bot = %self.settings.bot_id, "wecom: subscribed to the AI bot's long connection");
        *lock(&self.link) = Some(link.clone());
        self.connections.send_modify(|n| *n += 1);

        let handler = self.handle_callbacks(bus, link, events);
        let drive = self.keep_alive(link, cancel);
        tokio::pin!(handler, drive);
        let mut handler_done = false;
        let result = loop {
            tokio::select! {
                r = &mut drive => break r,
                r = &mut handler, if !handler_done => {
                    handler_done = true;
                    if let Err(e) = r {
                        break Err(e);
                    }
                }
            }
        };
        self.forget_link(link);
        link.end(Ended::Local);
        if result.is_err() && !handler_done && !cancel.is_cancelled() {
            // The callbacks already received are handled still (their turns go on; their own replies fail).
            tokio::select! {
                _ = &mut handler => {}
                () = cancel.cancelled() => {}
            }
        }
        result
    }

    /// Pings every `ping_every` until the link ends (its error) or `cancel` fires (`Ok`).
    async fn keep_alive(&self, link: &Link, cancel: &CancellationToken) -> Result<(), ChannelError> {
        let mut tick = tokio::time::interval_at(Instant::now() + self.ping_every, self.ping_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Ok(()),
                () = link.gone().cancelled() => return Err(self.ended_error(link)),
                _ = tick.tick() => {
                    let missed = link.missed_pings();
                    if missed >= MAX_MISSED_PINGS {
                        return Err(transient(format!(
                            "WeCom answered none of the last {missed} pings (one every {:?}): the connection is \
                             half dead",
                            self.ping_every
                        )));
                    }
                    link.ping(&new_id("hb"));
                }
            }
        }
    }

    /// Handles callbacks one at a time, in the order they came, until the link's queue closes; only a closed bus
    /// ends it early.
    async fn handle_callbacks(
        &self,
        bus: &Arc<dyn Bus>,
        link: &Link,
        mut events: mpsc::UnboundedReceiver<Value>,
    ) -> Result<(), ChannelError> {
        while let Some(frame) = events.recv().await {
            let result = match frame["cmd"].as_str() {
                Some("aibot_msg_callback") => self.on_message(bus, link, &frame).await,
                Some("aibot_event_callback") => self.on_event(link, &frame).await,
                _ => Ok(()),
            };
            if let Err(e) = result {
                if matches!(e, ChannelError::Bus(_)) {
                    return Err(e);
                }
                tracing::warn!(error = %nanobot_util::error_chain(&e), "wecom: a callback was not handled");
            }
        }
        Ok(())
    }

    /// An event: `enter_chat` gets the welcome (addressed by `from.userid`: the real event has no `chatid`).
    async fn on_event(&self, link: &Link, frame: &Value) -> Result<(), ChannelError> {
        let body = &frame["body"];
        let event = &body["event"];
        let kind = event["eventtype"]
            .as_str()
            .or_else(|| event["event_type"].as_str())
            .unwrap_or_default();
        if kind != "enter_chat" || self.settings.welcome_message.is_empty() {
            tracing::debug!(event = kind, "wecom: event");
            return Ok(());
        }
        let user = str_at(body, &["from", "userid"]);
        let req_id = str_at(frame, &["headers", "req_id"]);
        if user.is_empty() || req_id.is_empty() || !self.access.is_allowed(user) {
            return Ok(());
        }
        let welcome = json!({"msgtype": "text", "text": {"content": self.settings.welcome_message}});
        let ack = link
            .reply(RESPOND_WELCOME, req_id, welcome)
            .await
            .map_err(|e| Self::no_ack(RESPOND_WELCOME, e))?;
        if ack.errcode != 0 {
            return Err(self.refused("the welcome", &ack));
        }
        Ok(())
    }

    /// A user's message: deduplicated, checked, its media downloaded, published.
    async fn on_message(&self, bus: &Arc<dyn Bus>, link: &Link, frame: &Value) -> Result<(), ChannelError> {
        let body = &frame["body"];
        let req_id = str_at(frame, &["headers", "req_id"]);
        let msgid = str_at(body, &["msgid"]);
        let sender = str_at(body, &["from", "userid"]);
        if sender.is_empty() || req_id.is_empty() {
            tracing::debug!("wecom: a message without a sender or req_id was ignored");
            return Ok(());
        }
        if !self.seen.first_sighting(msgid) {
            tracing::debug!(msgid, "wecom: a repeated message was ignored");
            return Ok(());
        }
        let chat_type = body["chattype"].as_str().unwrap_or("single");
        let is_group = chat_type == "group";
        let chat_id = body["chatid"]
            .as_str()
            .filter(|c| !c.is_empty())
            .unwrap_or(sender);
        let msg_type = str_at(body, &["msgtype"]);
        if !matches!(msg_type, "text" | "image" | "file" | "voice" | "mixed") {
            tracing::debug!(msg_type, "wecom: a message of another type was ignored");
            return Ok(());
        }
        let first_text = match msg_type {
            "text" => str_at(body, &["text", "content"]),
            "mixed" => body["mixed"]["msg_item"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["msgtype"] == "text")
                .map_or("", |i| str_at(i, &["text", "content"])),
            _ => "",
        };
        match self.access.check(&InboundContext {
            sender_id: sender,
            chat_id,
            is_group,
            mentioned: true,
            text: first_text,
        })? {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                return self
                    .reply_text(link, req_id, &AccessControl::pairing_message(&request))
                    .await;
            }
            AccessDecision::Handled { reply } => return self.reply_text(link, req_id, &reply).await,
            _ => return Ok(()),
        }
        let mut lines = Vec::new();
        let mut media = Vec::new();
        match msg_type {
            "text" => lines.push(first_text.to_owned()),
            "voice" => {
                let said = str_at(body, &["voice", "content"]).trim();
                lines.push(if said.is_empty() {
                    "[voice]".to_owned()
                } else {
                    format!("[voice] {said}")
                });
            }
            "image" | "file" => {
                lines.push(
                    self.receive(msg_type, &body[msg_type], msgid, 0, &mut media)
                        .await,
                );
            }
            _ => {
                let items = body["mixed"]["msg_item"].as_array().cloned().unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    match item["msgtype"].as_str().unwrap_or_default() {
                        "text" => lines.push(str_at(item, &["text", "content"]).to_owned()),
                        "image" => {
                            lines.push(self.receive("image", &item["image"], msgid, i, &mut media).await)
                        }
                        other => lines.push(format!("[{other}]")),
                    }
                }
            }
        }
        let content = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        if content.is_empty() {
            return Ok(());
        }
        self.remember_callback(chat_id, req_id);
        let mut inbound = InboundMessage::new(NAME, sender, chat_id, content)
            .with_metadata(META_MESSAGE_ID, msgid)
            .with_metadata(META_MSG_TYPE, msg_type)
            .with_metadata(META_CHAT_TYPE, chat_type)
            .with_metadata(nanobot_bus::META_IS_GROUP, is_group);
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// A text answer on a callback (a pairing code, an owner's command): one finished stream.
    async fn reply_text(&self, link: &Link, req_id: &str, text: &str) -> Result<(), ChannelError> {
        let body =
            json!({"msgtype": "stream", "stream": {"id": new_id("stream"), "content": text, "finish": true}});
        let ack = link
            .reply(RESPOND, req_id, body)
            .await
            .map_err(|e| Self::no_ack(RESPOND, e))?;
        if ack.errcode != 0 {
            return Err(self.refused(RESPOND, &ack));
        }
        Ok(())
    }

    /// Downloads one image or file of a message into the media directory; the line the agent sees for it.
    async fn receive(
        &self,
        kind: &str,
        part: &Value,
        msgid: &str,
        index: usize,
        media: &mut Vec<String>,
    ) -> String {
        let url = str_at(part, &["url"]);
        let aeskey = str_at(part, &["aeskey"]);
        let name = part["name"].as_str().filter(|n| !n.trim().is_empty());
        let failed = || match (kind, name) {
            ("file", Some(n)) => format!("[file: {n}: download failed]"),
            _ => format!("[{kind}: download failed]"),
        };
        if url.is_empty() || aeskey.is_empty() {
            return failed();
        }
        match self.download(kind, url, aeskey, name, msgid, index).await {
            Ok(path) => {
                media.push(path.clone());
                format!("[{kind}: {path}]")
            }
            Err(e) => {
                tracing::warn!(error = %nanobot_util::error_chain(&e), "wecom: {kind} not downloaded");
                failed()
            }
        }
    }

    fn media_client(&self) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.media_client.get() {
            return Ok(c);
        }
        let built = nanobot_channels::api_client(NAME, |_| {
            self.guard
                .client_builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(DOWNLOAD_TIMEOUT)
        })?;
        Ok(self.media_client.get_or_init(|| built))
    }

    /// GETs `url` behind the SSRF guard (within [`MAX_MEDIA_BYTES`]), decrypts it with `aeskey` and saves it as
    /// `<media>/wecom/<msgid>_<name>`; its path. The URL is never shown (it may carry a token).
    async fn download(
        &self,
        kind: &str,
        url: &str,
        aeskey: &str,
        name: Option<&str>,
        msgid: &str,
        index: usize,
    ) -> Result<String, ChannelError> {
        let (checked, _) = self
            .guard
            .check_str(url)
            .await
            .map_err(|e| rejected(format!("{kind} URL refused: {e}")))?;
        let resp = self
            .media_client()?
            .get(checked)
            .send()
            .await
            .map_err(|e| transient(format!("{kind} download: {}", e.without_url())))?;
        let status = resp.status();
        if !status.is_success() {
            let e = format!("{kind} download: HTTP {}", status.as_u16());
            return Err(if status.is_server_error() {
                transient(e)
            } else {
                rejected(e)
            });
        }
        let header = |h: reqwest::header::HeaderName| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let served_name =
            header(reqwest::header::CONTENT_DISPOSITION).and_then(|d| media::disposition_name(&d));
        let content_type = header(reqwest::header::CONTENT_TYPE)
            .map(|t| t.split(';').next().unwrap_or_default().trim().to_owned());
        let sealed = nanobot_channels::download::read_body(NAME, kind, resp, MAX_MEDIA_BYTES).await?;
        let key = aeskey.to_owned();
        let plain = tokio::task::spawn_blocking(move || media::decrypt(sealed, &key))
            .await
            .map_err(|e| transient(format!("{kind} decryption did not finish: {e}")))?
            .map_err(|e| rejected(format!("{kind}: {e}")))?;
        let given = name
            .map(str::to_owned)
            .or(served_name)
            .and_then(|n| {
                Path::new(&n)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .filter(|n| !n.trim().is_empty());
        let file_name = match given {
            Some(n) => safe_file_name(&n),
            None if kind == "image" => {
                format!("image{}", media::image_extension(&plain, content_type.as_deref()))
            }
            None => "file".to_owned(),
        };
        let mut unique: String = msgid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(16)
            .collect();
        if unique.is_empty() {
            unique = new_id("m").replace('_', "");
        }
        let stem = if index == 0 {
            format!("{unique}_{file_name}")
        } else {
            format!("{unique}_{index}_{file_name}")
        };
        let dest = self.media_dir.join(safe_file_name(&stem));
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| ChannelError::Io { path, source }
        };
        tokio::fs::create_dir_all(&self.media_dir)
            .await
            .map_err(io(&self.media_dir))?;
        tokio::fs::write(&dest, &plain).await.map_err(io(&dest))?;
        Ok(dest.display().to_string())
    }

    /// One message to `chat_id`: on its callback while there is one (a stream, or the media), else sent on its
    /// own (`aibot_send_msg`: markdown, or the media). A callback WeCom no longer takes is forgotten and the
    /// message sent on its own.
    async fn deliver(&self, link: &Link, chat_id: &str, part: Part<'_>) -> Result<(), ChannelError> {
        if let Some(req_id) = self.callback(chat_id) {
            let body = match part {
                Part::Text { content, finish } => {
                    json!({"msgtype": "stream", "stream": {"id": new_id("stream"), "content": content, "finish": finish}})
                }
                Part::Media { kind, media_id } => json!({"msgtype": kind, kind: {"media_id": media_id}}),
            };
            let ack = link
                .reply(RESPOND, &req_id, body)
                .await
                .map_err(|e| Self::no_ack(RESPOND, e))?;
            match ack.errcode {
                0 => return Ok(()),
                ERR_INVALID_REQ_ID | ERR_STREAM_EXPIRED => {
                    tracing::info!(
                        errcode = ack.errcode,
                        "wecom: the chat's callback is no longer answered on; sending on its own"
                    );
                    self.forget_callback(chat_id, &req_id);
                }
                _ => return Err(self.refused(RESPOND, &ack)),
            }
        }
        let mut body = match part {
            Part::Text { content, .. } => json!({"msgtype": "markdown", "markdown": {"content": content}}),
            Part::Media { kind, media_id } => json!({"msgtype": kind, kind: {"media_id": media_id}}),
        };
        body["chatid"] = json!(chat_id);
        self.ok(link, SEND, &new_id(SEND), body).await.map(drop)
    }

    /// Uploads a local file in WeCom's three steps (init with its md5, 512 KiB base64 chunks, finish); its media
    /// type and `media_id`.
    async fn upload(&self, link: &Link, path: &str) -> Result<(&'static str, String), ChannelError> {
        use base64::Engine as _;
        let local = Path::new(path.strip_prefix("file://").unwrap_or(path));
        let data = read_attachment(local, MAX_UPLOAD_BYTES)
            .await
            .map_err(|e| rejected(e.to_string()))?;
        let name = safe_file_name(&file_label(&local.display().to_string()));
        let kind = media::upload_type(&name);
        let (data, md5) = tokio::task::spawn_blocking(move || {
            let digest = format!("{:x}", Md5::digest(&data));
            (data, digest)
        })
        .await
        .map_err(|e| transient(format!("md5 of {name} did not finish: {e}")))?;
        let total_chunks = data.len().div_ceil(UPLOAD_CHUNK_BYTES);
        let init = json!({"filename": name, "type": kind, "total_size": data.len(),
            "total_chunks": total_chunks, "md5": md5});
        let ack = self.ok(link, UPLOAD_INIT, &new_id(UPLOAD_INIT), init).await?;
        let upload_id = ack.body["upload_id"]
            .as_str()
            .filter(|i| !i.is_empty())
            .ok_or_else(|| rejected(format!("{UPLOAD_INIT}: WeCom gave no upload_id")))?
            .to_owned();
        for (index, chunk) in data.chunks(UPLOAD_CHUNK_BYTES).enumerate() {
            let body = json!({"upload_id": upload_id, "chunk_index": index, "total_chunks": total_chunks,
                "base64_data": base64::engine::general_purpose::STANDARD.encode(chunk)});
            self.ok(link, UPLOAD_CHUNK, &new_id(UPLOAD_CHUNK), body).await?;
        }
        let finish = json!({"upload_id": upload_id, "filename": name, "media_type": kind});
        let ack = self
            .ok(link, UPLOAD_FINISH, &new_id(UPLOAD_FINISH), finish)
            .await?;
        let media_id = ack.body["media_id"]
            .as_str()
            .filter(|i| !i.is_empty())
            .ok_or_else(|| rejected(format!("{UPLOAD_FINISH}: WeCom gave no media_id")))?;
        Ok((kind, media_id.to_owned()))
    }
}

#[async_trait]
impl Channel for WecomChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One long connection until it ends: subscribed, kept alive with pings, its callbacks handled. A lost
    /// connection (closed, failed, or two pings unanswered) is reported (`Transient`) and the manager connects
    /// again with its backoff; a refused bot id or secret, or another connection taking the bot over, is an
    /// authentication error, which stops the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let client = nanobot_channels::ws::upgrade_client(NAME, CONNECT_TIMEOUT, true)?;
        let url_key = format!("channels.{NAME}.wsUrl");
        let target = nanobot_channels::ws::Upgrade {
            url: &self.settings.ws_url,
            bearer: None,
            timeout: CONNECT_TIMEOUT,
            url_key: &url_key,
            credential_key: None,
        };
        let socket = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            s = nanobot_channels::ws::connect(NAME, &client, &target) => s?,
        };
        let (link, events, tasks) = link::start(socket, ACK_TIMEOUT);
        let result = self.session(&bus, &cancel, &link, events).await;
        self.forget_link(&link);
        link.end(Ended::Local);
        tasks.finish(CLOSE_GRACE).await;
        result
    }

    /// Files first (uploaded, then sent as media), then the text: on the chat's last callback as a stream
    /// (`finish: false` for progress, as 0.3.5), split at [`MAX_STREAM_BYTES`]; without a callback as markdown
    /// (`aibot_send_msg`). Not connected, or no acknowledgement: a transient error (the manager retries).
    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        if chat.is_empty() || chat.len() > 256 || chat.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let link = self
            .current_link()
            .ok_or_else(|| transient("not connected to WeCom (the long connection is being set up)"))?;
        let mut notes = Vec::new();
        for path in &msg.media {
            let uploaded = self.upload(&link, path).await;
            let sent = match &uploaded {
                Ok((kind, media_id)) => {
                    self.deliver(
                        &link,
                        chat,
                        Part::Media {
                            kind,
                            media_id: media_id.as_str(),
                        },
                    )
                    .await
                }
                Err(_) => Ok(()),
            };
            match uploaded.and(sent) {
                Ok(()) => {}
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %nanobot_util::error_chain(&e), "wecom: a file was not sent");
                    notes.push(format!("[file upload failed: {}]", file_label(path)));
                }
            }
        }
        let mut text = msg.content.trim().to_owned();
        if !notes.is_empty() {
            text = format!("{text}\n{}", notes.join("\n")).trim().to_owned();
        }
        let finish = !msg.is_progress();
        for piece in pieces(&text) {
            self.deliver(
                &link,
                chat,
                Part::Text {
                    content: &piece,
                    finish,
                },
            )
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_stay_within_the_stream_limit_in_bytes() {
        assert_eq!(pieces("short"), ["short"]);
        assert!(pieces("  ").is_empty());
        let ascii = "word ".repeat(10_000);
        let cut = pieces(&ascii);
        assert_eq!(cut.len(), 3);
        assert!(cut.iter().all(|p| p.len() <= MAX_STREAM_BYTES));
        assert_eq!(cut.join(" ").split_whitespace().count(), 10_000);
        // Three bytes a character: cut again by bytes, never inside a character.
        let han = "字".repeat(20_000);
        let cut = pieces(&han);
        assert!(
            cut.iter().all(|p| p.len() <= MAX_STREAM_BYTES),
            "{:?}",
            cut.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(cut.concat(), han);
        let mixed = format!("{} {}", "a".repeat(20_479), "é".repeat(10));
        assert!(pieces(&mixed).iter().all(|p| p.len() <= MAX_STREAM_BYTES));
    }

    #[tokio::test(start_paused = true)]
    async fn a_callback_is_answered_on_until_it_expires() {
        let settings = WecomSettings::from_block(&json!({"botId": "b", "secret": "s"})).unwrap();
        let channel = WecomChannel::new(settings, std::env::temp_dir());
        assert_eq!(channel.callback("alice"), None);
        channel.remember_callback("alice", "req-1");
        assert_eq!(channel.callback("alice").as_deref(), Some("req-1"));
        channel.remember_callback("alice", "req-2");
        channel.forget_callback("alice", "req-1");
        assert_eq!(
            channel.callback("alice").as_deref(),
            Some("req-2"),
            "only the same req_id is forgotten"
        );
        tokio::time::advance(CALLBACK_TTL + Duration::from_secs(1)).await;
        assert_eq!(channel.callback("alice"), None, "expired");
        channel.forget_callback("alice", "req-2");
        assert!(lock(&channel.callbacks).is_empty());
    }

    #[test]
    fn ids_are_unique_and_prefixed() {
        let a = new_id("stream");
        assert!(a.starts_with("stream_") && a.len() == "stream_".len() + 32, "{a}");
        assert_ne!(a, new_id("stream"));
    }
}
