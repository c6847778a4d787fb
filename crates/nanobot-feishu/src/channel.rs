//! [`FeishuChannel`]: the long connection, access control, reactions and sending.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, InboundContext, PairingStore,
    safe_file_name, split_message,
};
use nanobot_util::Backoff;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::api::{Api, enc};
use crate::frame::{Frame, METHOD_CONTROL, METHOD_DATA};
use crate::inbound::Received;
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
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
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
    handled: watch::Sender<u64>,
    connections: watch::Sender<u64>,
    transcriber: Option<Arc<dyn nanobot_channels::Transcribe>>,
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
            handled: watch::Sender::new(0),
            connections: watch::Sender::new(0),
            transcriber: None,
        })
    }

    /// Transcribes voice messages (`audio`) with `transcriber`; the agent then reads
    /// `[transcription: …]` instead of the file's path.
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn nanobot_channels::Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
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
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url.as_str()));
        let (mut ws, _) = tokio::select! {
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
            r = connect => r
                .map_err(|_| ChannelError::Transient { channel: NAME.into(), source: "WebSocket handshake timed out".into() })?
                .map_err(|e| ChannelError::Transient { channel: NAME.into(), source: Box::new(e) })?,
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
        let content = lines.join("\n");
        if content.trim().is_empty() && media.is_empty() {
            return Ok(());
        }
        let mut inbound = InboundMessage::new(NAME, msg.sender.clone(), reply_to, content)
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
        let result = async {
            let bytes = self
                .api
                .resource(message_id, key, kind, self.settings.max_file_bytes)
                .await?;
            let io = |source| ChannelError::Io {
                path: path.display().to_string(),
                source,
            };
            tokio::fs::create_dir_all(&dir).await.map_err(io)?;
            tokio::fs::write(&path, &bytes).await.map_err(io)
        }
        .await;
        match result {
            Ok(()) => {
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

/// Whether the text needs a card (Markdown that plain text messages would show raw, or long text).
fn needs_card(text: &str) -> bool {
    let t = text.trim();
    t.len() > 2000
        || t.contains("```")
        || t.contains("**")
        || t.contains("~~")
        || t.contains("](")
        || t.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with('#')
                || l.starts_with("- ")
                || l.starts_with("* ")
                || l.starts_with('|')
                || l.split_once(". ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
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

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = self.learn_bot() => {}
        }
        let mut schedule = Backoff::exponential(Duration::from_secs(1), MAX_BACKOFF);
        loop {
            let failure = match self.session(&bus, &cancel).await {
                Ok(Ended::Cancelled) => return Ok(()),
                Ok(Ended::Dropped(why)) => {
                    tracing::warn!(reason = %why, "feishu: long connection lost; reconnecting");
                    schedule.reset();
                    None
                }
                Err(e @ (ChannelError::Auth { .. } | ChannelError::Config { .. } | ChannelError::Bus(_))) => {
                    return Err(e);
                }
                Err(e) => Some(e),
            };
            let backoff = schedule.next_delay();
            if let Some(e) = failure {
                tracing::warn!(error = %e, retry_in = ?backoff, "feishu: could not connect");
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
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
        let final_reply = match msg.kind {
            OutboundKind::StreamDelta { .. } => return Ok(()),
            OutboundKind::Reply | OutboundKind::StreamEnd { .. } => true,
            _ => false,
        };
        let meta = |key: &str| {
            msg.metadata
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let message_id = meta(META_MESSAGE_ID);
        let thread = meta(META_THREAD_ID);
        // Quote the user's message when configured (final replies only), and always stay inside a topic.
        let mut reply_target = match (message_id, thread) {
            (Some(id), Some(_)) => Some(id),
            (Some(id), None) if self.settings.reply_to_message && final_reply => Some(id),
            _ => None,
        };
        let mut pieces: Vec<(&str, String)> = Vec::new();
        let text = msg.content.trim();
        if !text.is_empty() {
            let card = needs_card(text);
            for piece in split_message(text, PIECE_LIMIT) {
                if card {
                    let card = json!({"config": {"wide_screen_mode": true},
                                      "elements": [{"tag": "markdown", "content": piece}]});
                    pieces.push(("interactive", card.to_string()));
                } else {
                    pieces.push(("text", json!({"text": piece}).to_string()));
                }
            }
        }
        for path in &msg.media {
            // Outbound files are not supported by this version: the chat gets a note instead of the file.
            tracing::warn!(path = %path, "feishu: sending files is not supported; file not sent");
            let note = format!("[file not sent: {}]", file_label(path));
            pieces.push(("text", json!({"text": note}).to_string()));
        }
        for (kind, content) in &pieces {
            match reply_target {
                Some(id) => {
                    self.reply(id, kind, content, thread.is_some()).await?;
                    if thread.is_none() {
                        reply_target = None;
                    }
                }
                None => self.create(chat, kind, content).await?,
            }
        }
        if final_reply
            && let Some(id) = message_id
            && let Some(done) = &self.settings.done_emoji
        {
            let old = lock(&self.reactions).remove(id);
            if let Some(old) = old {
                self.unreact(id, &old).await;
            }
            self.react(id, done).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Header;

    #[test]
    fn cards_for_markdown_only() {
        assert!(!needs_card("hello there"));
        assert!(needs_card("**bold**"));
        assert!(needs_card("1. one\n2. two"));
        assert!(needs_card("see [x](https://x)"));
        assert!(!needs_card("see chapter 2. then stop"));
    }

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
