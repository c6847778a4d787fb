//! [`FeishuChannel`]: the long connection, access control, reactions and sending (messages, files, streaming
//! cards).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::{RemoteMedia, SsrfGuard};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, InboundContext, PairingStore,
    safe_file_name, split_message,
};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::api::{Api, enc};
use crate::files::Upload;
use crate::format::{self, Format};
use crate::frame::{Frame, METHOD_CONTROL, METHOD_DATA};
use crate::inbound::{Received, quote_line};
use crate::stream::{self, Card, Stream, Streams};
use crate::{FeishuSettings, NAME};

/// Metadata key: the received message's id (replies and reactions use it).
pub const META_MESSAGE_ID: &str = "message_id";
/// Metadata key: `p2p` or `group`.
pub const META_CHAT_TYPE: &str = "chat_type";
/// Metadata key: the topic (thread) the message belongs to, if any.
pub const META_THREAD_ID: &str = "thread_id";

/// Message and event ids remembered against redelivery.
const SEEN_CAPACITY: usize = 1000;
/// Longest piece of text in one message or card.
const PIECE_LIMIT: usize = 4000;
/// Bound of the WebSocket handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Ping interval until the server says otherwise.
const DEFAULT_PING: Duration = Duration::from_secs(120);
/// Parts of a split event are dropped if the rest does not arrive within this time.
const PARTS_TTL: Duration = Duration::from_secs(10);

/// Parts of split events by frame id: when the first arrived, and the parts so far.
type Parts = HashMap<String, (Instant, Vec<Option<Vec<u8>>>)>;

use nanobot_util::lock;

/// The Feishu / Lark channel. See the [crate docs](crate).
pub struct FeishuChannel {
    settings: FeishuSettings,
    access: AccessControl,
    media_dir: PathBuf,
    api: Api,
    bot_open_id: Mutex<Option<String>>,
    seen: nanobot_channels::RecentIds,
    reactions: Mutex<HashMap<String, String>>,
    /// Streamed answers in the making, by stream id (held across the card calls; sends are sequential anyway).
    streams: tokio::sync::Mutex<Streams>,
    handled: watch::Sender<u64>,
    connections: watch::Sender<u64>,
    transcriber: Option<Arc<dyn nanobot_channels::Transcribe>>,
    /// Fetches `http(s)` entries of `media` before uploading them.
    remote: RemoteMedia,
}

impl std::fmt::Debug for FeishuChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .field("transcriber", &self.transcriber.is_some())
            .finish_non_exhaustive()
    }
}

/// How one connection ended.
enum Ended {
    Cancelled,
    Dropped(String),
}

impl FeishuChannel {
    /// A channel with these settings that stores downloaded files under `<media_dir>/feishu/`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: FeishuSettings, media_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let api = Api::new(
            settings.api_url.clone(),
            settings.app_id.clone(),
            settings.app_secret.clone(),
        )?;
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            settings.group_policy,
            None,
        );
        Ok(Self {
            settings,
            access,
            media_dir: media_dir.into(),
            api,
            bot_open_id: Mutex::new(None),
            seen: nanobot_channels::RecentIds::new(SEEN_CAPACITY),
            reactions: Mutex::new(HashMap::new()),
            streams: tokio::sync::Mutex::new(Streams::default()),
            handled: watch::Sender::new(0),
            connections: watch::Sender::new(0),
            transcriber: None,
            remote: RemoteMedia::new(SsrfGuard::default()),
        })
    }

    /// Transcribes voice messages (`audio`) with `transcriber`; the agent then reads
    /// `[transcription: …]` instead of the file's path.
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn nanobot_channels::Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// Checks remote files the agent sends (`http(s)` entries of `media`) with `guard` (the gateway passes one
    /// with `tools.ssrfWhitelist`). Without it, internal addresses are refused. Redirects are not followed.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.remote = RemoteMedia::new(guard);
        self
    }

    /// Issues pairing codes to denied direct-message senders through `store`.
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            AllowList::new(&self.settings.allow_from),
            self.settings.group_policy,
            Some(store),
        );
        self
    }

    /// Counts the events the receive loop has finished with (handled, ignored or duplicate).
    pub fn handled_events(&self) -> watch::Receiver<u64> {
        self.handled.subscribe()
    }

    /// Counts the long connections opened so far.
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    /// The bot's open_id, once learned from `/open-apis/bot/v3/info`.
    pub fn bot_open_id(&self) -> Option<String> {
        lock(&self.bot_open_id).clone()
    }

    async fn learn_bot(&self) {
        match self.api.call(Method::GET, "/open-apis/bot/v3/info", None).await {
            Ok(v) => {
                let id = v["bot"]["open_id"]
                    .as_str()
                    .or_else(|| v["data"]["bot"]["open_id"].as_str())
                    .filter(|s| !s.is_empty());
                *lock(&self.bot_open_id) = id.map(str::to_string);
            }
            Err(e) => {
                tracing::warn!(error = %e, "feishu: could not learn the bot's open_id; guessing mentions")
            }
        }
    }

    /// True the first time `id` is seen (ids are remembered up to [`SEEN_CAPACITY`]).
    fn first_sighting(&self, id: &str) -> bool {
        self.seen.first_sighting(id)
    }

    /// One long connection: discovery, handshake, then frames until it drops or `cancel` fires.
    async fn session(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<Ended, ChannelError> {
        let endpoint = self.api.endpoint().await?;
        let url = endpoint.url.clone();
        let service: i32 = url::Url::parse(&url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "service_id")
                    .and_then(|(_, v)| v.parse().ok())
            })
            .unwrap_or(0);
        // Through reqwest's upgrade: the access key and ticket in the URL are never logged (tungstenite's
        // handshake logs them).
        let client = nanobot_channels::ws::upgrade_client(NAME, CONNECT_TIMEOUT, false)?;
        let target = nanobot_channels::ws::Upgrade {
            url: url.as_str(),
            bearer: None,
            timeout: CONNECT_TIMEOUT,
            url_key: "the long-connection endpoint",
            credential_key: None,
        };
        let mut ws = tokio::select! {
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
            r = nanobot_channels::ws::connect(NAME, &client, &target) => r?,
        };
        self.connections.send_modify(|n| *n += 1);
        tracing::info!("feishu: long connection open");
        let mut ping_every = endpoint
            .ping_interval
            .filter(|s| *s > 0)
            .map_or(DEFAULT_PING, Duration::from_secs);
        let mut ping = tokio::time::interval(ping_every);
        ping.tick().await;
        let mut last_rx = Instant::now();
        let mut parts = Parts::new();
        loop {
            tokio::select! {
                () = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return Ok(Ended::Cancelled);
                }
                _ = ping.tick() => {
                    if last_rx.elapsed() > ping_every * 3 {
                        return Ok(Ended::Dropped("no frame from the server for three ping intervals".into()));
                    }
                    if let Err(e) = ws.send(Ws::Binary(Frame::ping(service).to_bytes().into())).await {
                        return Ok(Ended::Dropped(format!("ping failed: {e}")));
                    }
                }
                msg = ws.next() => {
                    let frame = match msg {
                        None => return Ok(Ended::Dropped("closed by the server".into())),
                        Some(Err(e)) => return Ok(Ended::Dropped(e.to_string())),
                        Some(Ok(Ws::Binary(bytes))) => bytes,
                        Some(Ok(Ws::Close(_))) => return Ok(Ended::Dropped("closed by the server".into())),
                        Some(Ok(_)) => { last_rx = Instant::now(); continue; }
                    };
                    last_rx = Instant::now();
                    let Ok(frame) = Frame::from_bytes(&frame) else {
                        tracing::warn!("feishu: undecodable frame ignored");
                        continue;
                    };
                    match frame.method {
                        METHOD_CONTROL => {
                            if frame.header("type") == Some("pong")
                                && let Some(secs) = frame
                                    .payload
                                    .as_deref()
                                    .and_then(|p| serde_json::from_slice::<Value>(p).ok())
                                    .and_then(|c| c["PingInterval"].as_u64())
                                    .filter(|s| *s > 0)
                                && Duration::from_secs(secs) != ping_every
                            {
                                ping_every = Duration::from_secs(secs);
                                ping = tokio::time::interval(ping_every);
                                ping.tick().await;
                            }
                        }
                        METHOD_DATA => {
                            let started = Instant::now();
                            let Some(payload) = assemble(&mut parts, &frame) else { continue };
                            let ack = frame.ack(200, started.elapsed().as_millis());
                            if let Err(e) = ws.send(Ws::Binary(ack.to_bytes().into())).await {
                                return Ok(Ended::Dropped(format!("acknowledgement failed: {e}")));
                            }
                            if frame.header("type") == Some("event") {
                                let result = match serde_json::from_slice::<Value>(&payload) {
                                    Ok(event) => self.handle_event(bus, &event).await,
                                    Err(e) => { tracing::warn!(error = %e, "feishu: event is not JSON"); Ok(()) }
                                };
                                if let Err(e) = result {
                                    if matches!(e, ChannelError::Bus(_)) {
                                        return Err(e);
                                    }
                                    tracing::warn!(error = %e, "feishu: could not handle an event");
                                }
                            }
                            self.handled.send_modify(|n| *n += 1);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    async fn handle_event(&self, bus: &Arc<dyn Bus>, event: &Value) -> Result<(), ChannelError> {
        let Some(msg) = Received::from_event(event) else {
            return Ok(());
        };
        if msg.from_bot {
            return Ok(());
        }
        let bot = self.bot_open_id();
        let mentioned = msg.mentions_bot(bot.as_deref());
        if msg.group && self.settings.group_policy == nanobot_channels::GroupPolicy::Mention && !mentioned {
            return Ok(());
        }
        if !self.first_sighting(&msg.event_id) | !self.first_sighting(&msg.message_id) {
            tracing::debug!(message = %msg.message_id, "feishu: duplicate delivery ignored");
            return Ok(());
        }
        let text = msg.text(bot.as_deref());
        let reply_to = if msg.group {
            msg.chat_id.clone()
        } else {
            msg.sender.clone()
        };
        let decision = self.access.check(&InboundContext {
            sender_id: &msg.sender,
            chat_id: &reply_to,
            is_group: msg.group,
            mentioned,
            text: &text,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                return self
                    .send_text_to(&reply_to, &AccessControl::pairing_message(&request))
                    .await;
            }
            AccessDecision::Handled { reply } => return self.send_text_to(&reply_to, &reply).await,
            _ => return Ok(()),
        }
        if !self.settings.react_emoji.is_empty()
            && let Some(id) = self.react(&msg.message_id, &self.settings.react_emoji).await
        {
            lock(&self.reactions).insert(msg.message_id.clone(), id);
        }
        let mut lines = Vec::new();
        let mut media = Vec::new();
        match msg.msg_type.as_str() {
            "text" | "post" => {
                if !text.is_empty() {
                    lines.push(text);
                }
                for key in msg.post_images() {
                    lines.push(
                        self.receive(&msg.message_id, "image", &key, "png", &mut media)
                            .await,
                    );
                }
            }
            "image" => {
                let key = msg.content["image_key"].as_str().unwrap_or_default().to_string();
                lines.push(
                    self.receive(&msg.message_id, "image", &key, "png", &mut media)
                        .await,
                );
            }
            "file" | "audio" | "media" => {
                let key = msg.content["file_key"].as_str().unwrap_or_default().to_string();
                let name = msg.content["file_name"]
                    .as_str()
                    .unwrap_or(match msg.msg_type.as_str() {
                        "audio" => "audio.opus",
                        "media" => "video.mp4",
                        _ => "file",
                    });
                let name = name.to_string();
                let before = media.len();
                let mut line = self
                    .receive(&msg.message_id, "file", &key, &name, &mut media)
                    .await;
                // A voice message that was downloaded is read as its transcription (the file stays attached).
                if msg.msg_type == "audio"
                    && media.len() > before
                    && let Some(path) = media.last()
                    && let Some(text) = self.transcribe(Path::new(path)).await
                {
                    line = format!("[transcription: {text}]");
                }
                lines.push(line);
            }
            other => lines.push(format!("[{other}]")),
        }
        if lines.iter().all(|l| l.trim().is_empty()) && media.is_empty() {
            return Ok(());
        }
        // A reply to another message shows what it answers (0.3.5: `[Reply to: …]` first).
        if let Some(parent) = &msg.parent_id
            && let Some(quote) = self.quoted(parent).await
        {
            lines.insert(0, quote);
        }
        let content = lines.join("\n");
        let mut inbound = InboundMessage::new(NAME, msg.sender.clone(), reply_to, content)
            .with_streaming(self.settings.streaming)
            .with_metadata(META_MESSAGE_ID, msg.message_id.clone())
            .with_metadata(META_CHAT_TYPE, if msg.group { "group" } else { "p2p" })
            .with_metadata("msg_type", msg.msg_type.clone())
            .with_metadata("is_group", msg.group);
        for (key, value) in [
            ("parent_id", &msg.parent_id),
            ("root_id", &msg.root_id),
            (META_THREAD_ID, &msg.thread_id),
        ] {
            if let Some(v) = value {
                inbound = inbound.with_metadata(key, v.clone());
            }
        }
        if msg.group {
            let key = if self.settings.topic_isolation {
                format!(
                    "{NAME}:{}:{}",
                    msg.chat_id,
                    msg.root_id.as_deref().unwrap_or(&msg.message_id)
                )
            } else {
                format!("{NAME}:{}", msg.chat_id)
            };
            inbound = inbound.with_session_key(key);
        }
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// The `[Reply to: …]` line for the message `parent_id` (`GET /open-apis/im/v1/messages/{id}`); `None` when it
    /// cannot be read or has no text.
    async fn quoted(&self, parent_id: &str) -> Option<String> {
        let path = format!("/open-apis/im/v1/messages/{}", enc(parent_id));
        match self.api.call(Method::GET, &path, None).await {
            Ok(answer) => {
                let item = &answer["data"]["items"][0];
                quote_line(
                    item["msg_type"].as_str().unwrap_or_default(),
                    item["body"]["content"].as_str().unwrap_or_default(),
                )
            }
            Err(e) => {
                tracing::debug!(error = %e, "feishu: could not read the quoted message");
                None
            }
        }
    }

    /// Downloads a message resource into `<media>/feishu/`; returns the line the agent sees for it.
    async fn receive(
        &self,
        message_id: &str,
        kind: &str,
        key: &str,
        name: &str,
        media: &mut Vec<String>,
    ) -> String {
        let label = if kind == "image" { "image" } else { "file" };
        if key.is_empty() {
            return format!("[{label}]");
        }
        let dir = self.media_dir.join(NAME);
        let path = dir.join(format!("{}_{}", safe_file_name(key), safe_file_name(name)));
        let result = self
            .api
            .save_resource(message_id, key, kind, &path, self.settings.max_file_bytes)
            .await;
        match result {
            Ok(_) => {
                let shown = path.display().to_string();
                media.push(shown.clone());
                format!("[{label}: {shown}]")
            }
            Err(e) => {
                tracing::warn!(error = %e, "feishu: download failed");
                format!("[{label}: download failed]")
            }
        }
    }

    /// The text spoken in the voice message at `path`, when a transcriber is set and it hears something.
    async fn transcribe(&self, path: &Path) -> Option<String> {
        let transcriber = self.transcriber.as_ref()?;
        match transcriber.transcribe(path).await {
            Ok(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "feishu: transcription failed");
                None
            }
        }
    }

    /// Adds a reaction; returns its id.
    async fn react(&self, message_id: &str, emoji: &str) -> Option<String> {
        let path = format!("/open-apis/im/v1/messages/{}/reactions", enc(message_id));
        let body = json!({"reaction_type": {"emoji_type": emoji}});
        match self.api.call(Method::POST, &path, Some(&body)).await {
            Ok(v) => v["data"]["reaction_id"].as_str().map(str::to_string),
            Err(e) => {
                tracing::debug!(error = %e, "feishu: reaction failed");
                None
            }
        }
    }

    async fn unreact(&self, message_id: &str, reaction_id: &str) {
        let path = format!(
            "/open-apis/im/v1/messages/{}/reactions/{}",
            enc(message_id),
            enc(reaction_id)
        );
        if let Err(e) = self.api.call(Method::DELETE, &path, None).await {
            tracing::debug!(error = %e, "feishu: removing a reaction failed");
        }
    }

    async fn send_text_to(&self, chat_id: &str, text: &str) -> Result<(), ChannelError> {
        let content = json!({"text": text}).to_string();
        self.create(chat_id, "text", &content).await
    }

    /// `POST /open-apis/im/v1/messages` to a chat (`oc_…`) or a user (open_id).
    async fn create(&self, chat_id: &str, msg_type: &str, content: &str) -> Result<(), ChannelError> {
        let id_type = if chat_id.starts_with("oc_") {
            "chat_id"
        } else {
            "open_id"
        };
        let path = format!("/open-apis/im/v1/messages?receive_id_type={id_type}");
        let body = json!({"receive_id": chat_id, "msg_type": msg_type, "content": content});
        self.api.call(Method::POST, &path, Some(&body)).await.map(drop)
    }

    /// `POST /open-apis/im/v1/messages/{id}/reply`.
    async fn reply(
        &self,
        message_id: &str,
        msg_type: &str,
        content: &str,
        in_thread: bool,
    ) -> Result<(), ChannelError> {
        let path = format!("/open-apis/im/v1/messages/{}/reply", enc(message_id));
        let body = json!({"msg_type": msg_type, "content": content, "reply_in_thread": in_thread});
        self.api.call(Method::POST, &path, Some(&body)).await.map(drop)
    }
}

/// Where the pieces of one outbound message go: quoting `reply_to` with the first piece (every piece inside a
/// topic, which replies keep the answer in).
struct Target<'a> {
    chat: &'a str,
    reply_to: Option<&'a str>,
    thread: bool,
}

/// A string entry of the message's metadata, when non-empty.
fn meta_str<'a>(msg: &'a OutboundMessage, key: &str) -> Option<&'a str> {
    msg.metadata
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

impl FeishuChannel {
    /// The target of `msg`'s pieces: replies to the received message inside a topic, and for the first piece
    /// when `replyToMessage` is on and `quote` (final answers, not progress).
    fn target<'a>(&self, msg: &'a OutboundMessage, quote: bool) -> Target<'a> {
        let message_id = meta_str(msg, META_MESSAGE_ID);
        let thread = meta_str(msg, META_THREAD_ID).is_some();
        let reply_to = match (message_id, thread) {
            (Some(id), true) => Some(id),
            (Some(id), false) if self.settings.reply_to_message && quote => Some(id),
            _ => None,
        };
        Target {
            chat: msg.chat_id.trim(),
            reply_to,
            thread,
        }
    }

    /// Sends one message (`kind` and its JSON `content`) to the target.
    async fn put(&self, target: &mut Target<'_>, kind: &str, content: &str) -> Result<(), ChannelError> {
        match target.reply_to {
            Some(id) => {
                self.reply(id, kind, content, target.thread).await?;
                if !target.thread {
                    target.reply_to = None;
                }
                Ok(())
            }
            None => self.create(target.chat, kind, content).await,
        }
    }

    /// Sends `text`: plain text as text messages, Markdown as cards, split at [`PIECE_LIMIT`].
    async fn put_text(&self, target: &mut Target<'_>, text: &str) -> Result<(), ChannelError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        let format = format::detect(text);
        for piece in split_message(text, PIECE_LIMIT) {
            let (kind, content) = match format {
                Format::Card => {
                    let card = json!({"config": {"wide_screen_mode": true},
                                      "elements": [{"tag": "markdown", "content": piece}]});
                    ("interactive", card.to_string())
                }
                Format::Post => ("post", format::post_content(&piece)),
                Format::Text => ("text", json!({"text": piece}).to_string()),
            };
            self.put(target, kind, &content).await?;
        }
        Ok(())
    }

    async fn put_note(&self, target: &mut Target<'_>, note: &str) -> Result<(), ChannelError> {
        self.put(target, "text", &json!({"text": note}).to_string()).await
    }

    /// The regular way out: the files first (as 0.3.5 sends them), then `text`.
    async fn deliver(&self, msg: &OutboundMessage, text: &str, quote: bool) -> Result<(), ChannelError> {
        let mut target = self.target(msg, quote);
        for path in &msg.media {
            self.send_file(&mut target, path).await?;
        }
        self.put_text(&mut target, text).await
    }

    /// Uploads and sends one file of `media` (a local path, or an `http(s)` URL fetched behind the SSRF guard); a
    /// file that cannot go out leaves a note in the chat instead.
    async fn send_file(&self, target: &mut Target<'_>, path: &str) -> Result<(), ChannelError> {
        let remote = path.starts_with("http://") || path.starts_with("https://");
        let result = if remote {
            self.upload_remote(path).await
        } else {
            self.upload_local(Path::new(path)).await
        };
        match result {
            Ok((kind, content)) => self.put(target, kind, &content).await,
            Err(why) => {
                let shown = if remote {
                    link_label(path)
                } else {
                    file_label(path)
                };
                tracing::warn!(file = %shown, reason = %why, "feishu: file not sent");
                self.put_note(target, &format!("[file not sent: {shown}]")).await
            }
        }
    }

    /// Uploads a local file within Feishu's limits.
    async fn upload_local(&self, path: &Path) -> Result<(&'static str, String), String> {
        let kind = Upload::of(path);
        let bytes = nanobot_channels::read_attachment(path, kind.limit())
            .await
            .map_err(|e| e.to_string())?;
        self.upload(kind, &file_label(&path.to_string_lossy()), &bytes.into())
            .await
    }

    /// Fetches a remote file (SSRF guard, redirect rules, Feishu's limit for its kind) and uploads it.
    async fn upload_remote(&self, url: &str) -> Result<(&'static str, String), String> {
        let name = url::Url::parse(url)
            .ok()
            .and_then(|u| {
                u.path_segments()
                    .and_then(|mut s| s.next_back().map(str::to_owned))
            })
            .unwrap_or_default();
        let kind = Upload::of(Path::new(&name));
        let fetched = self
            .remote
            .clone()
            .with_max_bytes(kind.limit())
            .fetch(NAME, url)
            .await
            .map_err(|e| nanobot_util::ErrorChain(&e).to_string())?;
        if fetched.bytes.is_empty() {
            return Err("empty file".into());
        }
        self.upload(kind, &fetched.file_name, &bytes::Bytes::from(fetched.bytes))
            .await
    }

    /// Uploads a file's bytes (images to the images API, the rest to the files API); the message type and content
    /// that show it.
    async fn upload(
        &self,
        kind: Upload,
        name: &str,
        bytes: &bytes::Bytes,
    ) -> Result<(&'static str, String), String> {
        let key_of = |answer: &Value, key: &str| {
            answer["data"][key]
                .as_str()
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("no {key} in the answer"))
        };
        match kind {
            Upload::Image => {
                let answer = self
                    .api
                    .upload(
                        "/open-apis/im/v1/images",
                        &[("image_type", "message")],
                        "image",
                        name,
                        bytes,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let key = key_of(&answer, "image_key")?;
                Ok(("image", json!({ "image_key": key }).to_string()))
            }
            Upload::File { file_type, msg_type } => {
                let answer = self
                    .api
                    .upload(
                        "/open-apis/im/v1/files",
                        &[("file_type", file_type), ("file_name", name)],
                        "file",
                        name,
                        bytes,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let key = key_of(&answer, "file_key")?;
                Ok((msg_type, json!({ "file_key": key }).to_string()))
            }
        }
    }

    /// Extends a streamed answer. Failures are logged, never returned: a retried delta would duplicate text, and
    /// the stream's end writes the whole answer anyway.
    async fn stream_delta(&self, msg: &OutboundMessage, stream_id: &str) {
        let mut streams = self.streams.lock().await;
        let stream = streams.entry(stream_id, msg.chat_id.trim(), meta_str(msg, META_MESSAGE_ID));
        stream.push(&msg.content);
        self.refresh(msg, stream).await;
    }

    /// Brings a stream's card up to date: created and shown with the first visible text, then updated at most
    /// every `stream_edit_interval`.
    async fn refresh(&self, msg: &OutboundMessage, stream: &mut Stream) {
        let text = stream.render();
        let preview = stream::preview(&text);
        if preview.is_empty() || preview == stream.shown {
            return;
        }
        let wait = stream.stalled() || stream.too_soon(self.settings.stream_edit_interval);
        match &mut stream.card {
            Card::Failed => {}
            Card::Pending => match self.open_card(msg, preview).await {
                Ok(card_id) => {
                    stream.card = Card::Open { card_id, sequence: 0 };
                    preview.clone_into(&mut stream.shown);
                    stream.last_write = Some(Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "feishu: could not start a streaming card; the answer will come as a message");
                    stream.card = Card::Failed;
                }
            },
            Card::Open { card_id, sequence } => {
                if wait {
                    return;
                }
                match stream::write_reopening(&self.api, card_id, preview, sequence).await {
                    Ok(()) => {
                        preview.clone_into(&mut stream.shown);
                        stream.last_write = Some(Instant::now());
                        stream.failed_updates = 0;
                    }
                    Err(e) => {
                        stream.failed_updates += 1;
                        tracing::warn!(error = %e, "feishu: could not update a streaming card");
                    }
                }
            }
        }
    }

    /// Creates a streaming card showing `text` and sends it to the chat; its id.
    async fn open_card(&self, msg: &OutboundMessage, text: &str) -> Result<String, ChannelError> {
        let card_id = stream::create_card(&self.api, text).await?;
        let content = json!({"type": "card", "data": {"card_id": card_id}}).to_string();
        self.put(&mut self.target(msg, true), "interactive", &content)
            .await?;
        Ok(card_id)
    }

    /// Ends a streamed answer: its card gets the final text and leaves streaming mode (a longer answer goes on in
    /// messages). Without a card, or when the final update fails, the answer goes out the regular way.
    async fn stream_end(&self, msg: &OutboundMessage, stream_id: &str) -> Result<(), ChannelError> {
        let mut streams = self.streams.lock().await;
        let Some(mut stream) = streams.remove(stream_id) else {
            drop(streams);
            return self.deliver(msg, &msg.content, true).await;
        };
        drop(streams);
        stream.finish(&msg.content);
        let text = stream.render();
        if let Card::Open {
            card_id,
            mut sequence,
        } = stream.card
        {
            let pieces = split_message(&text, stream::CARD_TEXT_LIMIT);
            let mut pieces = pieces.iter();
            let head = pieces.next().map_or("", String::as_str);
            match stream::write_reopening(&self.api, &card_id, head, &mut sequence).await {
                Ok(()) => {
                    stream::close(&self.api, &card_id, &mut sequence).await;
                    let mut target = self.target(msg, false);
                    for piece in pieces {
                        self.put_text(&mut target, piece).await?;
                    }
                    for path in &msg.media {
                        self.send_file(&mut target, path).await?;
                    }
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "feishu: the streaming card could not take the final text; sending it as a message");
                    stream::close(&self.api, &card_id, &mut sequence).await;
                }
            }
        }
        let text = if msg.content.trim().is_empty() {
            text
        } else {
            msg.content.clone()
        };
        self.deliver(msg, &text, true).await
    }

    /// Shows a tool hint inside the chat's streaming card, if one is open; false when there is none.
    async fn hint_into_card(&self, msg: &OutboundMessage) -> bool {
        let hint = stream::hint_text(&self.settings.tool_hint_prefix, &msg.content);
        if hint.is_empty() {
            return false;
        }
        let mut streams = self.streams.lock().await;
        let Some(stream) = streams.open_in(msg.chat_id.trim(), meta_str(msg, META_MESSAGE_ID)) else {
            return false;
        };
        stream.add_hint(hint);
        self.refresh(msg, stream).await;
        true
    }

    /// Swaps the "working on it" reaction on the received message for `doneEmoji` (if set).
    async fn mark_done(&self, msg: &OutboundMessage) {
        if let Some(id) = meta_str(msg, META_MESSAGE_ID)
            && let Some(done) = &self.settings.done_emoji
        {
            let old = lock(&self.reactions).remove(id);
            if let Some(old) = old {
                self.unreact(id, &old).await;
            }
            self.react(id, done).await;
        }
    }
}

/// A link as shown in notes and logs: without its query, which may hold credentials.
fn link_label(url: &str) -> String {
    url::Url::parse(url).map_or_else(
        |_| "a link".to_owned(),
        |u| {
            format!(
                "{}://{}{}",
                u.scheme(),
                u.host_str().unwrap_or_default(),
                u.path()
            )
        },
    )
}

/// Joins the parts of a split data frame (`sum` > 1); `None` while parts are missing.
fn assemble(parts: &mut Parts, frame: &Frame) -> Option<Vec<u8>> {
    let sum: usize = frame.header("sum").and_then(|s| s.parse().ok()).unwrap_or(1);
    let payload = frame.payload.clone().unwrap_or_default();
    if sum <= 1 {
        return Some(payload);
    }
    let seq: usize = frame.header("seq").and_then(|s| s.parse().ok()).unwrap_or(0);
    let id = frame.header("message_id").unwrap_or_default().to_string();
    parts.retain(|_, (t, _)| t.elapsed() < PARTS_TTL);
    if seq >= sum || sum > 64 {
        return None;
    }
    let entry = parts
        .entry(id.clone())
        .or_insert_with(|| (Instant::now(), vec![None; sum]));
    if let Some(slot) = entry.1.get_mut(seq) {
        *slot = Some(payload);
    }
    if entry.1.iter().all(Option::is_some) {
        let (_, done) = parts.remove(&id)?;
        return Some(done.into_iter().flatten().flatten().collect());
    }
    None
}

fn file_label(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned())
}

#[async_trait]
impl Channel for FeishuChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One long connection until it ends: a lost connection is reported (`Transient`) and the manager connects
    /// again with its backoff; refused credentials stop the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = self.learn_bot() => {}
        }
        match self.session(&bus, &cancel).await? {
            Ended::Cancelled => Ok(()),
            Ended::Dropped(why) => Err(ChannelError::transient(
                NAME,
                format!("long connection lost: {why}"),
            )),
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        if chat.is_empty() || chat.contains(char::is_whitespace) || chat.contains('/') {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        // A stream end marked resuming closes one piece of a turn that goes on with tool calls (so does a reply
        // made of it for a channel that does not stream): the "working on it" reaction stays.
        let resuming = msg
            .metadata
            .get(nanobot_bus::META_STREAM_RESUMING)
            .and_then(Value::as_bool)
            .unwrap_or(false);
        match &msg.kind {
            OutboundKind::StreamDelta { stream_id } => {
                if self.settings.streaming {
                    self.stream_delta(msg, stream_id).await;
                }
                return Ok(());
            }
            OutboundKind::StreamEnd { stream_id } if self.settings.streaming => {
                self.stream_end(msg, stream_id).await?;
            }
            OutboundKind::Reply | OutboundKind::StreamEnd { .. } => {
                self.deliver(msg, &msg.content, true).await?;
            }
            OutboundKind::ToolHint if self.settings.streaming && self.hint_into_card(msg).await => {}
            _ => self.deliver(msg, &msg.content, false).await?,
        }
        if matches!(msg.kind, OutboundKind::Reply | OutboundKind::StreamEnd { .. }) && !resuming {
            self.mark_done(msg).await;
        }
        Ok(())
    }

    fn supports_streaming(&self) -> bool {
        self.settings.streaming
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Header;

    #[test]
    fn split_events_are_joined() {
        let part = |seq: usize, data: &str| Frame {
            method: METHOD_DATA,
            headers: vec![
                Header {
                    key: "message_id".into(),
                    value: "m".into(),
                },
                Header {
                    key: "sum".into(),
                    value: "2".into(),
                },
                Header {
                    key: "seq".into(),
                    value: seq.to_string(),
                },
            ],
            payload: Some(data.as_bytes().to_vec()),
            ..Frame::default()
        };
        let mut parts = HashMap::new();
        assert_eq!(assemble(&mut parts, &part(1, "world")), None);
        assert_eq!(
            assemble(&mut parts, &part(0, "hello ")),
            Some(b"hello world".to_vec())
        );
        assert!(parts.is_empty());
        assert_eq!(
            assemble(&mut parts, &part(5, "x")),
            None,
            "a seq beyond sum is dropped"
        );
    }
}
