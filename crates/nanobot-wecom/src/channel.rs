//! [`WecomChannel`]: the subscription and heartbeat, callbacks in (access control, media), answers out (streams on
//! the chat's callback, proactive markdown, uploads).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use md5::{Digest, Md5};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::{RemoteMedia, SsrfGuard};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, RecentIds, read_attachment, safe_file_name, server_text, split_message,
};
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::link::{self, Ack, Ended, Inbox, Link, NoAck, Received};
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
/// How long after a message was received its callback is answered on; later answers are sent on their own (WeCom
/// takes stream replies for about six minutes).
pub const CALLBACK_TTL: Duration = Duration::from_secs(5 * 60);

/// Unanswered pings in a row that end the connection (the SDK's two).
const MAX_MISSED_PINGS: u32 = 2;
/// Bound of the connection and the WebSocket upgrade.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of the wait for one acknowledgement (the subscription's, a reply's, an upload step's).
const ACK_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound of one media download, headers and body.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Messages taken in at once (their media downloading, or waiting for the chat's earlier messages); more wait in
/// the link's queue.
const MESSAGES_AT_ONCE: usize = 16;
/// Media downloads at once (each held in memory, up to [`MAX_MEDIA_BYTES`]).
const DOWNLOADS_AT_ONCE: usize = 4;
/// Events answered at once (a welcome waits for its acknowledgement).
const EVENTS_AT_ONCE: usize = 16;
/// Chats whose last message being taken in is tracked before the finished ones are cleared out.
const TRACKED_CHATS: usize = 64;
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
    /// When the message was received (read from the connection).
    at: Instant,
}

/// A user's message that passed the checks made as it was read, still to be taken in.
#[derive(Debug)]
struct Admitted {
    body: Value,
    req_id: String,
    msgid: String,
    sender: String,
    chat_id: String,
    chat_type: String,
    msg_type: String,
    received: Instant,
}

/// What a message callback still needs, once checked (in the order messages were read).
#[derive(Debug)]
enum Work {
    /// An answer on its callback (a pairing code, an owner's command's reply).
    Answer { req_id: String, text: String },
    /// A message for the agent: its media fetched, then published once `after` (the chat's previous message being
    /// taken in) is done; `done` is dropped when this one is.
    Publish {
        message: Box<Admitted>,
        after: Option<oneshot::Receiver<()>>,
        done: oneshot::Sender<()>,
    },
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
    /// Fetches received media behind the SSRF guard.
    remote: RemoteMedia,
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
            remote: Self::remote(SsrfGuard::default()),
            seen: RecentIds::new(SEEN_CAPACITY),
            ping_every: DEFAULT_PING_INTERVAL,
            link: Mutex::default(),
            callbacks: Mutex::default(),
            connections: watch::Sender::new(0),
            settings,
        }
    }

    fn remote(guard: SsrfGuard) -> RemoteMedia {
        RemoteMedia::new(guard)
            .with_max_bytes(MAX_MEDIA_BYTES)
            .with_timeout(DOWNLOAD_TIMEOUT)
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
        self.remote = Self::remote(guard);
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

    /// Answers to `chat_id` go on `req_id`, the callback of a message received `at`, for [`CALLBACK_TTL`] from
    /// then (a callback received later stays).
    fn remember_callback(&self, chat_id: &str, req_id: &str, at: Instant) {
        let mut callbacks = lock(&self.callbacks);
        if callbacks.get(chat_id).is_some_and(|cb| cb.at > at) {
            return;
        }
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
                at,
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
            NoAck::Abandoned => rejected(format!(
                "{what}: not sent, an earlier frame with its req_id went unacknowledged (the req_id is retired)"
            )),
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
        inbox: Inbox,
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

        let handler = self.handle_callbacks(bus, link, inbox);
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

    /// Handles callbacks until the link's queues close and everything taken from them is done; only a closed bus
    /// ends it early. Events are answered as they come, never behind a message. Messages are checked one by one in
    /// the order they were read, then taken in side by side (a slow download holds up no other chat), each chat's
    /// published in the order they were read.
    async fn handle_callbacks(
        &self,
        bus: &Arc<dyn Bus>,
        link: &Link,
        mut inbox: Inbox,
    ) -> Result<(), ChannelError> {
        let downloads = Semaphore::new(DOWNLOADS_AT_ONCE);
        // Each chat's last message being taken in: the next one publishes after it.
        let mut chats: HashMap<String, oneshot::Receiver<()>> = HashMap::new();
        let mut events = FuturesUnordered::new();
        let mut messages = FuturesUnordered::new();
        let (mut events_open, mut messages_open) = (true, true);
        loop {
            tokio::select! {
                biased;
                received = inbox.events.recv(), if events_open && events.len() < EVENTS_AT_ONCE => match received {
                    Some(received) => events.push(self.on_event(link, received)),
                    None => events_open = false,
                },
                Some(result) = events.next(), if !events.is_empty() => Self::handled(result)?,
                Some(result) = messages.next(), if !messages.is_empty() => Self::handled(result)?,
                received = inbox.messages.recv(), if messages_open && messages.len() < MESSAGES_AT_ONCE => {
                    match received {
                        Some(received) => match self.admit(received, &mut chats) {
                            Ok(Some(work)) => messages.push(self.take_in(bus, link, work, &downloads)),
                            Ok(None) => {}
                            Err(e) => Self::handled(Err(e))?,
                        },
                        None => messages_open = false,
                    }
                }
                else => return Ok(()),
            }
        }
    }

    /// How handling one callback ended: a closed bus ends the handling, anything else is logged.
    fn handled(result: Result<(), ChannelError>) -> Result<(), ChannelError> {
        match result {
            Err(e @ ChannelError::Bus(_)) => Err(e),
            Err(e) => {
                tracing::warn!(error = %nanobot_util::error_chain(&e), "wecom: a callback was not handled");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// An event: `enter_chat` gets the welcome (addressed by `from.userid`: the real event has no `chatid`).
    async fn on_event(&self, link: &Link, received: Received) -> Result<(), ChannelError> {
        let frame = &received.frame;
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

    /// A user's message, as it is read: deduplicated and checked; what is left to do for it (nothing for a
    /// repeated, foreign or empty one). A message for the agent joins its chat's line (`chats`).
    fn admit(
        &self,
        received: Received,
        chats: &mut HashMap<String, oneshot::Receiver<()>>,
    ) -> Result<Option<Work>, ChannelError> {
        let Received { mut frame, at } = received;
        let body = frame["body"].take();
        let req_id = str_at(&frame, &["headers", "req_id"]);
        let msgid = str_at(&body, &["msgid"]);
        let sender = str_at(&body, &["from", "userid"]);
        if sender.is_empty() || req_id.is_empty() {
            tracing::debug!("wecom: a message without a sender or req_id was ignored");
            return Ok(None);
        }
        if !self.seen.first_sighting(msgid) {
            tracing::debug!(msgid, "wecom: a repeated message was ignored");
            return Ok(None);
        }
        let chat_type = body["chattype"].as_str().unwrap_or("single");
        let is_group = chat_type == "group";
        let chat_id = body["chatid"]
            .as_str()
            .filter(|c| !c.is_empty())
            .unwrap_or(sender);
        let msg_type = str_at(&body, &["msgtype"]);
        if !matches!(msg_type, "text" | "image" | "file" | "voice" | "mixed") {
            tracing::debug!(msg_type, "wecom: a message of another type was ignored");
            return Ok(None);
        }
        let first_text = match msg_type {
            "text" => str_at(&body, &["text", "content"]),
            "mixed" => body["mixed"]["msg_item"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["msgtype"] == "text")
                .map_or("", |i| str_at(i, &["text", "content"])),
            _ => "",
        };
        let answer = |text: String| {
            Ok(Some(Work::Answer {
                req_id: req_id.to_owned(),
                text,
            }))
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
                return answer(AccessControl::pairing_message(&request));
            }
            AccessDecision::Handled { reply } => return answer(reply),
            _ => return Ok(None),
        }
        if chats.len() >= TRACKED_CHATS {
            // Those whose last message is done (its sender dropped).
            chats.retain(|_, last| matches!(last.try_recv(), Err(TryRecvError::Empty)));
        }
        let (done, next) = oneshot::channel();
        let after = chats.insert(chat_id.to_owned(), next);
        let message = Admitted {
            req_id: req_id.to_owned(),
            msgid: msgid.to_owned(),
            sender: sender.to_owned(),
            chat_id: chat_id.to_owned(),
            chat_type: chat_type.to_owned(),
            msg_type: msg_type.to_owned(),
            received: at,
            body,
        };
        Ok(Some(Work::Publish {
            message: Box::new(message),
            after,
            done,
        }))
    }

    /// What is left of a message: the answer sent, or its media downloaded and, after the chat's earlier messages,
    /// the message published (its callback remembered from when it was received).
    async fn take_in(
        &self,
        bus: &Arc<dyn Bus>,
        link: &Link,
        work: Work,
        downloads: &Semaphore,
    ) -> Result<(), ChannelError> {
        let (message, after, _done) = match work {
            Work::Answer { req_id, text } => return self.reply_text(link, &req_id, &text).await,
            Work::Publish { message, after, done } => (message, after, done),
        };
        let Admitted {
            body,
            req_id,
            msgid,
            sender,
            chat_id,
            chat_type,
            msg_type,
            received,
        } = *message;
        let mut lines = Vec::new();
        let mut media = Vec::new();
        match msg_type.as_str() {
            "text" => lines.push(str_at(&body, &["text", "content"]).to_owned()),
            "voice" => {
                let said = str_at(&body, &["voice", "content"]).trim();
                lines.push(if said.is_empty() {
                    "[voice]".to_owned()
                } else {
                    format!("[voice] {said}")
                });
            }
            "image" | "file" => {
                let part = &body[msg_type.as_str()];
                lines.push(
                    self.receive(&msg_type, part, &msgid, 0, downloads, &mut media)
                        .await,
                );
            }
            _ => {
                let items = body["mixed"]["msg_item"].as_array().cloned().unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    match item["msgtype"].as_str().unwrap_or_default() {
                        "text" => lines.push(str_at(item, &["text", "content"]).to_owned()),
                        "image" => lines.push(
                            self.receive("image", &item["image"], &msgid, i, downloads, &mut media)
                                .await,
                        ),
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
        if let Some(after) = after {
            // Done or dropped alike: the chat's previous message is out of the way.
            let _ = after.await;
        }
        if content.is_empty() {
            return Ok(());
        }
        self.remember_callback(&chat_id, &req_id, received);
        let is_group = chat_type == "group";
        let mut inbound = InboundMessage::new(NAME, &sender, &chat_id, content)
            .with_metadata(META_MESSAGE_ID, msgid.as_str())
            .with_metadata(META_MSG_TYPE, msg_type.as_str())
            .with_metadata(META_CHAT_TYPE, chat_type.as_str())
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

    /// Downloads one image or file of a message into the media directory (at most [`DOWNLOADS_AT_ONCE`] at a
    /// time); the line the agent sees for it.
    async fn receive(
        &self,
        kind: &str,
        part: &Value,
        msgid: &str,
        index: usize,
        downloads: &Semaphore,
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
        let saved = {
            // Never closed, so a permit always comes.
            let _permit = downloads.acquire().await.ok();
            self.download(kind, url, aeskey, name, msgid, index).await
        };
        match saved {
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

    /// Fetches `url` with the shared [`RemoteMedia`] (the SSRF guard, no redirects, within [`MAX_MEDIA_BYTES`]),
    /// decrypts it with `aeskey` and saves it as a new file `<media>/wecom/<prefix>_<name>` ([`media_prefix`]); its
    /// path. The name is the message's, else the one served with the file, else `image.<ext>` or `file`. The URL
    /// is never shown (it may carry a token).
    async fn download(
        &self,
        kind: &str,
        url: &str,
        aeskey: &str,
        name: Option<&str>,
        msgid: &str,
        index: usize,
    ) -> Result<String, ChannelError> {
        let fetched = self
            .remote
            .fetch(NAME, url)
            .await
            .map_err(|e| without_url(e, url, kind))?;
        let key = aeskey.to_owned();
        let sealed = fetched.bytes;
        let plain = tokio::task::spawn_blocking(move || media::decrypt(sealed, &key))
            .await
            .map_err(|e| transient(format!("{kind} decryption did not finish: {e}")))?
            .map_err(|e| rejected(format!("{kind}: {e}")))?;
        let given = name
            .and_then(|n| Path::new(n).file_name().map(|f| f.to_string_lossy().into_owned()))
            .filter(|n| !n.trim().is_empty())
            .or(fetched.served_name);
        let file_name = match given {
            Some(n) => safe_file_name(&n),
            None if kind == "image" => format!(
                "image{}",
                media::image_extension(&plain, fetched.content_type.as_deref())
            ),
            None => "file".to_owned(),
        };
        let stem = safe_file_name(&format!("{}_{file_name}", media_prefix(msgid, index)));
        let dest = save_new(&self.media_dir, &stem, &plain).await?;
        Ok(dest.display().to_string())
    }

    /// One message to `chat_id`: on its callback while there is one (a stream, or the media), else sent on its
    /// own (`aibot_send_msg`: markdown, or the media). A callback WeCom no longer takes is forgotten and the
    /// message sent on its own. A reply on the callback that goes unacknowledged is an error (it may or may not
    /// have arrived) and retires the callback: the chat's later messages go on their own, and so do replies that
    /// were waiting behind it (they were not sent).
    async fn deliver(&self, link: &Link, chat_id: &str, part: Part<'_>) -> Result<(), ChannelError> {
        if let Some(req_id) = self.callback(chat_id) {
            let body = match part {
                Part::Text { content, finish } => {
                    json!({"msgtype": "stream", "stream": {"id": new_id("stream"), "content": content, "finish": finish}})
                }
                Part::Media { kind, media_id } => json!({"msgtype": kind, kind: {"media_id": media_id}}),
            };
            match link.reply(RESPOND, &req_id, body).await {
                Ok(ack) if ack.errcode == 0 => return Ok(()),
                Ok(ack) if matches!(ack.errcode, ERR_INVALID_REQ_ID | ERR_STREAM_EXPIRED) => {
                    tracing::info!(
                        errcode = ack.errcode,
                        "wecom: the chat's callback is no longer answered on; sending on its own"
                    );
                    self.forget_callback(chat_id, &req_id);
                }
                Ok(ack) => return Err(self.refused(RESPOND, &ack)),
                Err(NoAck::Abandoned) => {
                    tracing::info!(
                        "wecom: the chat's callback was retired (a reply went unacknowledged); sending on its own"
                    );
                    self.forget_callback(chat_id, &req_id);
                }
                Err(e) => {
                    if matches!(e, NoAck::Timeout(_)) {
                        self.forget_callback(chat_id, &req_id);
                    }
                    return Err(Self::no_ack(RESPOND, e));
                }
            }
        }
        let mut body = match part {
            Part::Text { content, .. } => json!({"msgtype": "markdown", "markdown": {"content": content}}),
            Part::Media { kind, media_id } => json!({"msgtype": kind, kind: {"media_id": media_id}}),
        };
        body["chatid"] = json!(chat_id);
        self.ok(link, SEND, &new_id(SEND), body).await.map(drop)
    }

    /// Uploads the file at `path` and sends it to `chat_id` as media.
    async fn send_file(&self, link: &Link, chat_id: &str, path: &str) -> Result<(), ChannelError> {
        let (kind, media_id) = self.upload(link, path).await?;
        self.deliver(
            link,
            chat_id,
            Part::Media {
                kind,
                media_id: &media_id,
            },
        )
        .await
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
        let (link, inbox, tasks) = link::start(socket, ACK_TIMEOUT);
        let result = self.session(&bus, &cancel, &link, inbox).await;
        self.forget_link(&link);
        link.end(Ended::Local);
        tasks.finish(CLOSE_GRACE).await;
        result
    }

    /// Files first (uploaded, then sent as media), then the text: on the chat's last callback as a stream
    /// (`finish: false` for progress, as 0.3.5), split at [`MAX_STREAM_BYTES`]; without a callback as markdown
    /// (`aibot_send_msg`). A file that cannot be sent (unreadable, refused) is named in the text instead.
    ///
    /// Not connected, or no acknowledgement, while nothing of the message has gone out: a transient error (the
    /// manager sends the whole message again later). Once a part has gone out (a file, a piece of the text), a
    /// later part's failure is `Rejected`, naming what went out and what did not: a retry would send everything
    /// again (the files uploaded again, the text in new streams), and WeCom has no way to take back or replace
    /// what arrived, so the rest is given up rather than the user getting the beginning twice. (Resuming where the
    /// message stopped would need the manager to hand the same message back with its progress; it hands a message
    /// to `send` afresh.)
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
        let mut text = msg.content.trim().to_owned();
        // What has gone out, for the error if a later part fails.
        let mut sent = Vec::new();
        let mut notes = Vec::new();
        for (i, path) in msg.media.iter().enumerate() {
            match self.send_file(&link, chat, path).await {
                Ok(()) => sent.push(file_label(path)),
                Err(e) if e.is_retryable() => {
                    let mut unsent: Vec<String> = msg.media[i..].iter().map(|p| file_label(p)).collect();
                    if !text.is_empty() {
                        unsent.push("the text".to_owned());
                    }
                    return Err(partly_sent(&sent, &unsent, e));
                }
                Err(e) => {
                    tracing::warn!(error = %nanobot_util::error_chain(&e), "wecom: a file was not sent");
                    notes.push(format!("[file upload failed: {}]", file_label(path)));
                }
            }
        }
        if !notes.is_empty() {
            text = format!("{text}\n{}", notes.join("\n")).trim().to_owned();
        }
        let finish = !msg.is_progress();
        let pieces = pieces(&text);
        let count = pieces.len();
        let piece_name = |i: usize| match count {
            1 => "the text".to_owned(),
            _ => format!("piece {} of {count} of the text", i + 1),
        };
        for (i, piece) in pieces.iter().enumerate() {
            let delivered = self
                .deliver(
                    &link,
                    chat,
                    Part::Text {
                        content: piece,
                        finish,
                    },
                )
                .await;
            if let Err(e) = delivered {
                let unsent: Vec<String> = (i..count).map(piece_name).collect();
                return Err(partly_sent(&sent, &unsent, e));
            }
            sent.push(piece_name(i));
        }
        Ok(())
    }
}

/// The failure `e` of one part of an outbound message, as [`WecomChannel::send`] reports it: as it is while
/// nothing has gone out (`sent` empty); after that `Rejected` (never retried: that would send `sent` again),
/// naming what went out and what did not (`unsent`).
fn partly_sent(sent: &[String], unsent: &[String], e: ChannelError) -> ChannelError {
    if sent.is_empty() {
        return e;
    }
    rejected(format!(
        "the message went out in part and is not sent again (that would repeat what arrived): sent {}; not sent {}: \
         {}",
        sent.join(", "),
        unsent.join(", "),
        nanobot_util::error_chain(&e)
    ))
}

/// `e`, from fetching `url`, with the URL taken out of its text (a media URL may carry a token): the same kind of
/// error, naming the `kind` of file instead.
fn without_url(e: ChannelError, url: &str, kind: &str) -> ChannelError {
    let mut urls = vec![url.to_owned()];
    if let Ok(parsed) = reqwest::Url::parse(url) {
        urls.push(parsed.to_string());
    }
    let clean = |source: &(dyn std::error::Error + Send + Sync)| {
        let mut text = nanobot_util::error_chain(source);
        for u in &urls {
            text = text
                .replace(&format!("remote media {u}"), &format!("the {kind}"))
                .replace(u.as_str(), &format!("the {kind} URL"));
        }
        text
    };
    match e {
        ChannelError::Transient { source, .. } => transient(clean(&*source)),
        ChannelError::Rejected { source, .. } => rejected(clean(&*source)),
        other => other,
    }
}

/// The start of a received file's name, unique to its message and part: 16 hex digits of the md5 of the whole
/// `msgid` (random when there is none), then the part's index in a mixed message (none for the first).
fn media_prefix(msgid: &str, index: usize) -> String {
    let unique = if msgid.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        format!("{:x}", Md5::digest(msgid.as_bytes()))
    };
    let unique = &unique[..16];
    if index == 0 {
        unique.to_owned()
    } else {
        format!("{unique}_{index}")
    }
}

/// Writes `data` to a new file `name` in `dir` (made if missing), never over an existing one: when the name is
/// taken (the same message received again after a restart), a random prefix is put before it. Its path.
async fn save_new(dir: &Path, name: &str, data: &[u8]) -> Result<PathBuf, ChannelError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ChannelError::Io { path, source }
    };
    tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
    let mut dest = dir.join(name);
    let mut attempts = 0;
    let mut file = loop {
        attempts += 1;
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&dest)
            .await
        {
            Ok(file) => break file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 4 => {
                let random = uuid::Uuid::new_v4().simple().to_string();
                dest = dir.join(safe_file_name(&format!("{}_{name}", &random[..8])));
            }
            Err(e) => return Err(io(&dest)(e)),
        }
    };
    let written = async {
        file.write_all(data).await?;
        file.flush().await
    }
    .await;
    drop(file);
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&dest).await;
        return Err(io(&dest)(e));
    }
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio_tungstenite::tungstenite::Message as Ws;

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
        let channel = channel();
        assert_eq!(channel.callback("alice"), None);
        channel.remember_callback("alice", "req-1", Instant::now());
        assert_eq!(channel.callback("alice").as_deref(), Some("req-1"));
        channel.remember_callback("alice", "req-2", Instant::now());
        channel.forget_callback("alice", "req-1");
        assert_eq!(
            channel.callback("alice").as_deref(),
            Some("req-2"),
            "only the same req_id is forgotten"
        );
        let earlier = Instant::now() - Duration::from_secs(1);
        channel.remember_callback("alice", "req-0", earlier);
        assert_eq!(
            channel.callback("alice").as_deref(),
            Some("req-2"),
            "a message received later keeps its callback"
        );
        tokio::time::advance(CALLBACK_TTL + Duration::from_secs(1)).await;
        assert_eq!(channel.callback("alice"), None, "expired");
        channel.forget_callback("alice", "req-2");
        assert!(lock(&channel.callbacks).is_empty());
    }

    fn channel() -> WecomChannel {
        let settings =
            WecomSettings::from_block(&json!({"botId": "b", "secret": "s", "allowFrom": ["alice"]})).unwrap();
        WecomChannel::new(settings, std::env::temp_dir())
    }

    /// A channel whose connection is a detached link: what it sends comes out of the receiver.
    fn connected() -> (Arc<WecomChannel>, Arc<Link>, mpsc::Receiver<Ws>, link::Outbox) {
        let channel = channel();
        let (link, out, outbox, _inbox) = link::detached(ACK_TIMEOUT);
        *lock(&channel.link) = Some(link.clone());
        (Arc::new(channel), link, out, outbox)
    }

    async fn next_frame(out: &mut mpsc::Receiver<Ws>) -> Value {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), out.recv()).await;
        let Ok(Some(Ws::Text(text))) = next else {
            panic!("nothing sent within 30 s")
        };
        serde_json::from_str(&text).unwrap()
    }

    fn ack_of(frame: &Value, body: Value) -> Value {
        json!({"headers": {"req_id": frame["headers"]["req_id"]}, "errcode": 0, "errmsg": "ok", "body": body})
    }

    fn send_later(
        channel: &Arc<WecomChannel>,
        msg: OutboundMessage,
    ) -> tokio::task::JoinHandle<Result<(), ChannelError>> {
        let channel = channel.clone();
        tokio::spawn(async move { channel.send(&msg).await })
    }

    #[tokio::test(start_paused = true)]
    async fn the_callback_window_runs_from_when_the_message_was_read() {
        let channel = channel();
        let (link, _out, outbox, inbox) = link::detached(ACK_TIMEOUT);
        let text = |req_id: &str, msgid: &str| {
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": req_id}, "body": {"msgid": msgid,
                "chattype": "single", "from": {"userid": "alice"}, "msgtype": "text", "text": {"content": "hi"}}})
        };
        assert!(link.route(text("cb-old", "m1"), &outbox));
        // Handled only when the window is over (the handler was busy): answers go on their own.
        tokio::time::advance(CALLBACK_TTL).await;
        drop(outbox);
        let bus = Arc::new(nanobot_bus::InProcessBus::new(8));
        let dyn_bus: Arc<dyn Bus> = bus.clone();
        channel.handle_callbacks(&dyn_bus, &link, inbox).await.unwrap();
        assert_eq!(bus.consume_inbound().await.unwrap().content, "hi");
        assert_eq!(channel.callback("alice"), None, "timed from its receipt");

        let (outbox, inbox) = link::queues(8);
        assert!(link.route(text("cb-new", "m2"), &outbox));
        drop(outbox);
        channel.handle_callbacks(&dyn_bus, &link, inbox).await.unwrap();
        bus.consume_inbound().await.unwrap();
        assert_eq!(channel.callback("alice").as_deref(), Some("cb-new"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unacknowledged_reply_retires_the_callback_and_its_late_ack_goes_nowhere() {
        let (channel, link, mut out, outbox) = connected();
        channel.remember_callback("alice", "cb", Instant::now());
        let first = send_later(&channel, OutboundMessage::reply(NAME, "alice", "one"));
        let reply = next_frame(&mut out).await;
        assert_eq!(
            (reply["cmd"].as_str(), reply["headers"]["req_id"].as_str()),
            (Some(RESPOND), Some("cb"))
        );
        // Queued behind it on the same callback.
        let second = send_later(&channel, OutboundMessage::reply(NAME, "alice", "two"));
        let err = first.await.unwrap().unwrap_err();
        assert!(err.is_retryable(), "nothing had gone out: {err:?}");
        assert_eq!(channel.callback("alice"), None, "the callback is forgotten");
        // The reply that waited was not sent on the callback: it goes on its own.
        let own = next_frame(&mut out).await;
        assert_eq!(own["cmd"], SEND);
        assert_eq!(own["body"]["markdown"]["content"], "two");
        // The late ack of the first reply arrives first: it is not taken for the send's.
        assert!(link.route(ack_of(&reply, json!({"late": true})), &outbox));
        assert!(link.route(ack_of(&own, Value::Null), &outbox));
        second.await.unwrap().unwrap();
        // Later answers go on their own too.
        let third = send_later(&channel, OutboundMessage::reply(NAME, "alice", "three"));
        let own = next_frame(&mut out).await;
        assert_eq!(own["cmd"], SEND);
        assert!(link.route(ack_of(&own, Value::Null), &outbox));
        third.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn after_a_part_went_out_a_failure_is_not_retried() {
        let (channel, link, mut out, outbox) = connected();
        channel.remember_callback("alice", "cb", Instant::now());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report.txt");
        std::fs::write(&file, b"the report").unwrap();
        let mut msg = OutboundMessage::reply(NAME, "alice", "here it is");
        msg.media = vec![file.display().to_string()];
        let sending = send_later(&channel, msg.clone());
        let init = next_frame(&mut out).await;
        assert_eq!(init["cmd"], UPLOAD_INIT);
        assert!(link.route(ack_of(&init, json!({"upload_id": "u1"})), &outbox));
        let chunk = next_frame(&mut out).await;
        assert!(link.route(ack_of(&chunk, Value::Null), &outbox));
        let finish = next_frame(&mut out).await;
        assert!(link.route(ack_of(&finish, json!({"media_id": "M1"})), &outbox));
        let media = next_frame(&mut out).await;
        assert_eq!(
            media["body"],
            json!({"msgtype": "file", "file": {"media_id": "M1"}})
        );
        assert!(link.route(ack_of(&media, Value::Null), &outbox));
        // The file is out; the connection drops before the text is acknowledged.
        let text = next_frame(&mut out).await;
        assert_eq!(text["body"]["stream"]["content"], "here it is");
        link.end(Ended::Lost("reset".into()));
        let err = sending.await.unwrap().unwrap_err();
        assert!(
            matches!(err, ChannelError::Rejected { .. }),
            "a retry would send the file again: {err:?}"
        );
        let shown = nanobot_util::error_chain(&err);
        assert!(
            shown.contains("sent report.txt; not sent the text") && shown.contains("ended before"),
            "{shown}"
        );
        // Nothing gone out yet: the manager may retry.
        let err = channel.send(&msg).await.unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
    }

    #[tokio::test]
    async fn a_long_answer_cut_off_midway_names_the_pieces_not_sent() {
        let (channel, link, mut out, outbox) = connected();
        channel.remember_callback("alice", "cb", Instant::now());
        let long = "word ".repeat(10_000);
        let sending = send_later(&channel, OutboundMessage::reply(NAME, "alice", long));
        let first = next_frame(&mut out).await;
        assert!(link.route(ack_of(&first, Value::Null), &outbox));
        let _second = next_frame(&mut out).await;
        link.end(Ended::Closed);
        let err = sending.await.unwrap().unwrap_err();
        assert!(matches!(err, ChannelError::Rejected { .. }), "{err:?}");
        let shown = nanobot_util::error_chain(&err);
        assert!(
            shown.contains("sent piece 1 of 3 of the text; not sent piece 2 of 3 of the text, piece 3 of 3"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn received_files_never_overwrite_another() {
        // msgids alike in their first 16 alphanumerics still get names of their own.
        let (a, b) = ("0123456789abcdefAAAA", "0123456789abcdef-BBBB");
        assert_ne!(media_prefix(a, 0), media_prefix(b, 0));
        assert_ne!(media_prefix(a, 0), media_prefix(a, 1));
        assert_eq!(media_prefix(a, 0), media_prefix(a, 0));
        assert_eq!(media_prefix(a, 2).len(), 16 + 2);
        let dir = tempfile::tempdir().unwrap();
        let taken = dir.path().join("x_notes.txt");
        std::fs::write(&taken, b"another message's").unwrap();
        let saved = save_new(dir.path(), "x_notes.txt", b"mine").await.unwrap();
        assert_ne!(saved, taken);
        assert!(saved.to_string_lossy().ends_with("_x_notes.txt"), "{saved:?}");
        assert_eq!(std::fs::read(&saved).unwrap(), b"mine");
        assert_eq!(std::fs::read(&taken).unwrap(), b"another message's");
    }

    #[tokio::test]
    async fn a_failed_download_never_shows_its_url() {
        let fake = nanobot_testkit::fake_wecom::FakeWecom::start("b", "s")
            .await
            .unwrap();
        let channel = channel().with_ssrf_guard(SsrfGuard::from_cidrs(&["127.0.0.1/32"]).unwrap());
        let url = format!("{}/media/none?token=SEKRIT", fake.base_url());
        let err = channel
            .download("image", &url, "a2V5", None, "m1", 0)
            .await
            .unwrap_err();
        let shown = nanobot_util::error_chain(&err);
        assert!(!shown.contains("SEKRIT") && !shown.contains("/media/"), "{shown}");
        assert!(shown.contains("the image") && shown.contains("404"), "{shown}");
        let refused = without_url(
            transient(format!(
                "remote media {url}: error sending request for url ({url})"
            )),
            &url,
            "file",
        );
        assert!(refused.is_retryable());
        let shown = nanobot_util::error_chain(&refused);
        assert!(!shown.contains("SEKRIT"), "{shown}");
    }

    #[test]
    fn ids_are_unique_and_prefixed() {
        let a = new_id("stream");
        assert!(a.starts_with("stream_") && a.len() == "stream_".len() + 32, "{a}");
        assert_ne!(a, new_id("stream"));
    }
}
