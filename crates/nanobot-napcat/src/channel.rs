//! [`NapcatChannel`]: the forward WebSocket, OneBot v11 actions and events, access control and sending.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::{RemoteMedia, SsrfGuard};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, RecentIds, read_attachment, safe_file_name, server_text, split_message,
};
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::{NAME, NapcatSettings};

/// Bound of every action (a request and its answer), as 0.3.5.
const ACTION_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound of the WebSocket connection and handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Message ids remembered to skip a second delivery, and ids of the bot's own messages (replies to them count as
/// addressed to the bot), as 0.3.5.
const REMEMBERED: usize = 2000;
/// Events waiting for the handler; more are dropped (logged).
const EVENT_QUEUE: usize = 1024;
/// Longest text sent in one message: longer answers are split (QQ refuses messages of about 4,500 characters).
pub const PIECE_LIMIT: usize = 4000;
/// Largest local image sent (base64 in the frame).
pub const MAX_IMAGE_SEND_BYTES: u64 = 20 * 1024 * 1024;
/// Metadata key of the OneBot message id of an inbound message.
pub const META_MESSAGE_ID: &str = "message_id";

/// An image a message carries: where to fetch it, the name NapCat gives it, its declared size.
#[derive(Debug, Clone, PartialEq)]
struct Image {
    url: String,
    file: String,
    size: Option<u64>,
}

/// What a message's segments say.
#[derive(Debug, Default, PartialEq)]
struct Parsed {
    text: String,
    images: Vec<Image>,
    mentioned: bool,
    reply_to: Option<String>,
}

/// The NapCat (OneBot v11) channel. See the [crate docs](crate).
pub struct NapcatChannel {
    settings: NapcatSettings,
    access: AccessControl,
    media_dir: PathBuf,
    guard: SsrfGuard,
    remote: RemoteMedia,
    /// The HTTP client the WebSocket upgrade goes through, made on the first connection.
    http: Mutex<Option<reqwest::Client>>,
    /// Frames to send on the open connection (none while disconnected).
    writer: Mutex<Option<mpsc::UnboundedSender<Ws>>>,
    /// Actions waiting for their answer, by echo.
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// The bot's own QQ number (`get_login_info`, or an event's `self_id`).
    self_id: Mutex<Option<String>>,
    seen: RecentIds,
    /// Ids of the messages the bot sent, newest last.
    ours: Mutex<VecDeque<String>>,
    logins: watch::Sender<u64>,
}

impl std::fmt::Debug for NapcatChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NapcatChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

/// An id OneBot gives as a number (or, from some implementations, a string).
fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        _ => None,
    }
}

/// `private:<user>` or `group:<group>` as the kind and the number.
fn chat_target(chat_id: &str) -> Option<(&'static str, i64)> {
    let (kind, target) = chat_id.trim().split_once(':')?;
    let kind = match kind {
        "private" => "private",
        "group" => "group",
        _ => return None,
    };
    Some((kind, target.trim().parse().ok()?))
}

fn text_segment(text: &str) -> Value {
    json!({"type": "text", "data": {"text": text}})
}

impl NapcatChannel {
    /// A channel with these settings that stores received images in `<media_root>/napcat/`. Without
    /// [`with_pairing`](Self::with_pairing), denied private messages are ignored; without
    /// [`with_ssrf_guard`](Self::with_ssrf_guard), images on internal addresses are refused.
    pub fn new(settings: NapcatSettings, media_root: impl AsRef<Path>) -> Self {
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Open,
            None,
        );
        let guard = SsrfGuard::default();
        let remote = RemoteMedia::new(guard.clone()).with_max_bytes(settings.max_image_bytes);
        Self {
            access,
            media_dir: media_root.as_ref().join(NAME),
            guard,
            remote,
            http: Mutex::default(),
            writer: Mutex::default(),
            pending: Mutex::default(),
            self_id: Mutex::default(),
            seen: RecentIds::new(REMEMBERED),
            ours: Mutex::default(),
            logins: watch::Sender::new(0),
            settings,
        }
    }

    /// Issues pairing codes to denied private-message senders through `store`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            AllowList::new(&self.settings.allow_from),
            GroupPolicy::Open,
            Some(store),
        );
        self
    }

    /// Checks the images users send and the remote images the agent sends with `guard` (the one every adapter
    /// shares; the gateway passes one with `tools.ssrfWhitelist`).
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.remote = RemoteMedia::new(guard.clone()).with_max_bytes(self.settings.max_image_bytes);
        self.guard = guard;
        self
    }

    /// Counts the logins (`get_login_info` answered) since the channel was made: a test waits for it.
    pub fn logins(&self) -> watch::Receiver<u64> {
        self.logins.subscribe()
    }

    /// Sends `action` with `params` on the open connection and waits (bounded) for its answer.
    async fn call_action(&self, action: &str, params: Value) -> Result<Value, ChannelError> {
        let tx = lock(&self.writer)
            .clone()
            .ok_or_else(|| transient("not connected to NapCat"))?;
        let echo = uuid::Uuid::new_v4().simple().to_string();
        let (answer_tx, answer_rx) = oneshot::channel();
        lock(&self.pending).insert(echo.clone(), answer_tx);
        let frame = json!({"action": action, "params": params, "echo": echo}).to_string();
        if tx.send(Ws::text(frame)).is_err() {
            lock(&self.pending).remove(&echo);
            return Err(transient("the connection to NapCat closed"));
        }
        let answer = match tokio::time::timeout(ACTION_TIMEOUT, answer_rx).await {
            Ok(Ok(v)) => v,
            Ok(Err(_)) => {
                return Err(transient(format!(
                    "the connection closed before NapCat answered {action}"
                )));
            }
            Err(_) => {
                lock(&self.pending).remove(&echo);
                return Err(transient(format!(
                    "NapCat did not answer {action} within {} s",
                    ACTION_TIMEOUT.as_secs()
                )));
            }
        };
        let ok_status = answer
            .get("status")
            .and_then(Value::as_str)
            .is_none_or(|s| s == "ok");
        let ok_code = answer
            .get("retcode")
            .is_none_or(|c| c.is_null() || c.as_i64() == Some(0));
        if ok_status && ok_code {
            return Ok(answer);
        }
        let said = answer
            .get("wording")
            .or_else(|| answer.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        Err(ChannelError::rejected(
            NAME,
            format!(
                "NapCat refused {action} (retcode {}): {}",
                answer.get("retcode").unwrap_or(&Value::Null),
                server_text(said, &[self.settings.access_token.expose()])
            ),
        ))
    }

    /// Routes one frame: an action's answer to its waiter, a message or notice to the handler.
    fn route(&self, text: &str, events: &mpsc::Sender<Value>) {
        let Ok(frame) = serde_json::from_str::<Value>(text) else {
            tracing::debug!("napcat: a frame that is not JSON was dropped");
            return;
        };
        if frame.get("post_type").is_none() {
            if let Some(echo) = frame.get("echo").and_then(Value::as_str)
                && let Some(waiter) = lock(&self.pending).remove(echo)
            {
                let _ = waiter.send(frame);
            }
            return;
        }
        if let Some(id) = id_string(&frame["self_id"]) {
            let mut own = lock(&self.self_id);
            if own.is_none() {
                *own = Some(id);
            }
        }
        if matches!(frame["post_type"].as_str(), Some("message" | "notice"))
            && events.try_send(frame).is_err()
        {
            tracing::warn!("napcat: too many events waiting; one was dropped");
        }
    }

    /// What a message's segments say (array form; a plain string is one text segment, as 0.3.5 reads it).
    fn parse(&self, message: &Value) -> Parsed {
        let own = lock(&self.self_id).clone();
        let single;
        let segments: &[Value] = match message {
            Value::Array(items) => items,
            Value::String(s) if !s.is_empty() => {
                single = [text_segment(s)];
                &single
            }
            _ => &[],
        };
        let mut parts: Vec<String> = Vec::new();
        let mut out = Parsed::default();
        for seg in segments {
            let data = &seg["data"];
            match seg["type"].as_str() {
                Some("text") => {
                    if let Some(t) = data["text"].as_str() {
                        parts.push(t.to_owned());
                    }
                }
                Some("image") => match data["url"].as_str() {
                    Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                        out.images.push(Image {
                            url: url.to_owned(),
                            file: data["file"].as_str().unwrap_or_default().to_owned(),
                            size: data["file_size"]
                                .as_u64()
                                .or_else(|| data["file_size"].as_str().and_then(|s| s.trim().parse().ok())),
                        });
                    }
                    _ => tracing::warn!("napcat: an image without an http(s) url was skipped"),
                },
                Some("at") => {
                    let qq = id_string(&data["qq"]).unwrap_or_default();
                    if own.as_deref() == Some(qq.as_str()) {
                        out.mentioned = true;
                    } else {
                        parts.push(format!("@{qq}"));
                    }
                }
                Some("reply") => out.reply_to = id_string(&data["id"]),
                Some("face") => parts.push(format!("[face:{}]", id_string(&data["id"]).unwrap_or_default())),
                _ => {}
            }
        }
        out.text = parts
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        out
    }

    async fn handle_event(&self, bus: &Arc<dyn Bus>, ev: &Value) -> Result<(), ChannelError> {
        match ev["post_type"].as_str() {
            Some("message") => self.on_message(bus, ev).await,
            Some("notice") => self.on_notice(bus, ev).await,
            _ => Ok(()),
        }
    }

    async fn on_message(&self, bus: &Arc<dyn Bus>, ev: &Value) -> Result<(), ChannelError> {
        let message_id = id_string(&ev["message_id"]);
        if let Some(id) = &message_id
            && !self.seen.first_sighting(id)
        {
            tracing::debug!(message = %id, "napcat: duplicate delivery ignored");
            return Ok(());
        }
        let is_group = match ev["message_type"].as_str() {
            Some("group") => true,
            Some("private") => false,
            _ => return Ok(()),
        };
        let Some(user) = id_string(&ev["user_id"]) else {
            return Ok(());
        };
        let parsed = self.parse(&ev["message"]);
        let sender = &ev["sender"];
        let nickname = [&sender["card"], &sender["nickname"]]
            .into_iter()
            .find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty()))
            .map(str::to_owned);
        let chat_id = if is_group {
            let Some(group) = id_string(&ev["group_id"]) else {
                return Ok(());
            };
            let replying_to_bot = parsed
                .reply_to
                .as_ref()
                .is_some_and(|r| lock(&self.ours).contains(r));
            let addressed = parsed.mentioned || replying_to_bot;
            let taken = addressed
                || self
                    .settings
                    .policy_of(&group)
                    .takes_unaddressed(rand::random::<f64>());
            if !taken {
                return Ok(());
            }
            format!("group:{group}")
        } else {
            format!("private:{user}")
        };
        let decision = self.access.check(&InboundContext {
            sender_id: &user,
            chat_id: &chat_id,
            is_group,
            // Groups were filtered above by their own policy.
            mentioned: true,
            text: &parsed.text,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                return self
                    .send_text(&chat_id, &AccessControl::pairing_message(&request))
                    .await;
            }
            AccessDecision::Handled { reply } => return self.send_text(&chat_id, &reply).await,
            _ => return Ok(()),
        }
        let mut media = Vec::new();
        for image in &parsed.images {
            if let Some(path) = self.download(image).await {
                media.push(path);
            }
        }
        let mut content = if is_group {
            format!("{}: {}", nickname.as_deref().unwrap_or(&user), parsed.text)
        } else {
            parsed.text.clone()
        };
        if content.is_empty() {
            if media.is_empty() {
                return Ok(());
            }
            content = "[Image]".to_owned();
        }
        // Ids as 0.3.5 keeps them: numbers.
        let number = |id: String| id.parse::<i64>().map_or(Value::String(id), Value::from);
        let mut inbound = InboundMessage::new(NAME, user, chat_id, content)
            .with_metadata(nanobot_bus::META_IS_GROUP, is_group)
            .with_metadata("nickname", nickname.map_or(Value::Null, Value::String))
            .with_metadata("reply_to", parsed.reply_to.map_or(Value::Null, number));
        if let Some(id) = message_id {
            inbound = inbound.with_metadata(META_MESSAGE_ID, number(id));
        }
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// A member joining a group (`welcomeNewMembers`): the agent is told, as 0.3.5 does, if the member may talk to
    /// the bot.
    async fn on_notice(&self, bus: &Arc<dyn Bus>, ev: &Value) -> Result<(), ChannelError> {
        if ev["notice_type"].as_str() != Some("group_increase") || !self.settings.welcome_new_members {
            return Ok(());
        }
        let (Some(group), Some(user)) = (id_string(&ev["group_id"]), id_string(&ev["user_id"])) else {
            return Ok(());
        };
        let (Ok(group_n), Ok(user_n)) = (group.parse::<i64>(), user.parse::<i64>()) else {
            tracing::warn!("napcat: a member-joined notice with ids that are not numbers was ignored");
            return Ok(());
        };
        let chat_id = format!("group:{group}");
        let decision = self.access.check(&InboundContext {
            sender_id: &user,
            chat_id: &chat_id,
            is_group: true,
            mentioned: true,
            text: "",
        })?;
        if decision != AccessDecision::Allow {
            return Ok(());
        }
        let nickname = match self
            .call_action(
                "get_group_member_info",
                json!({"group_id": group_n, "user_id": user_n, "no_cache": true}),
            )
            .await
        {
            Ok(answer) => [&answer["data"]["card"], &answer["data"]["nickname"]]
                .into_iter()
                .find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty()))
                .map_or_else(|| user.clone(), str::to_owned),
            Err(e) => {
                tracing::warn!(error = %e, "napcat: get_group_member_info failed");
                user.clone()
            }
        };
        let inbound = InboundMessage::new(
            NAME,
            user,
            chat_id,
            format!("[group event] new member {nickname} joined group {group}"),
        )
        .with_metadata(nanobot_bus::META_IS_GROUP, true)
        .with_metadata("event", "group_increase");
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Saves an image a user sent into the media directory (its declared size and the bytes read both within
    /// `maxImageBytes`, behind the download guard); `None` when it cannot be had (logged).
    async fn download(&self, image: &Image) -> Option<String> {
        if image.size.is_some_and(|n| n > self.settings.max_image_bytes) {
            tracing::warn!(
                limit = self.settings.max_image_bytes,
                "napcat: an image larger than maxImageBytes was skipped"
            );
            return None;
        }
        let mut name = safe_file_name(&image.file);
        if name.is_empty() || name == "file" {
            name = format!("{}.jpg", uuid::Uuid::new_v4().simple());
        }
        let dest = self.media_dir.join(name);
        match self.remote.save(NAME, &image.url, &dest).await {
            Ok(_) => Some(dest.display().to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "napcat: image not downloaded");
                None
            }
        }
    }

    /// The image segment for a file the agent sends: a local path as base64 (NapCat may run elsewhere), an
    /// http(s) URL as is once the download guard lets it pass; `None` when it cannot go (logged).
    async fn image_segment(&self, reference: &str) -> Option<Value> {
        let reference = reference.trim();
        if reference.starts_with("http://") || reference.starts_with("https://") {
            return match self.guard.check_str(reference).await {
                Ok(_) => Some(json!({"type": "image", "data": {"file": reference}})),
                Err(e) => {
                    tracing::warn!(error = %e, "napcat: a remote image was refused");
                    None
                }
            };
        }
        match read_attachment(Path::new(reference), MAX_IMAGE_SEND_BYTES).await {
            Ok(bytes) => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                Some(json!({"type": "image", "data": {"file": format!("base64://{encoded}")}}))
            }
            Err(e) => {
                tracing::warn!(error = %e, "napcat: an image was not sent");
                None
            }
        }
    }

    /// One `send_msg` of `segments` to `chat_id`; the bot's message id is remembered (a reply to it is addressed
    /// to the bot).
    async fn send_segments(&self, chat_id: &str, segments: Vec<Value>) -> Result<(), ChannelError> {
        let Some((kind, target)) = chat_target(chat_id) else {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: chat_id.to_owned(),
            });
        };
        let mut params = json!({"message_type": kind, "message": segments});
        params[if kind == "group" { "group_id" } else { "user_id" }] = json!(target);
        let answer = self.call_action("send_msg", params).await?;
        if let Some(id) = id_string(&answer["data"]["message_id"]) {
            let mut ours = lock(&self.ours);
            if ours.len() >= REMEMBERED {
                ours.pop_front();
            }
            ours.push_back(id);
        }
        Ok(())
    }

    async fn send_text(&self, chat_id: &str, text: &str) -> Result<(), ChannelError> {
        for piece in split_message(text, PIECE_LIMIT) {
            self.send_segments(chat_id, vec![text_segment(&piece)]).await?;
        }
        Ok(())
    }

    /// Opens the WebSocket (through reqwest's upgrade: the token is never logged), NapCat reached directly.
    async fn open(&self) -> Result<nanobot_channels::ws::Socket, ChannelError> {
        let client = lock(&self.http).clone();
        let client = match client {
            Some(c) => c,
            None => {
                let built = nanobot_channels::ws::upgrade_client(NAME, CONNECT_TIMEOUT, true)?;
                *lock(&self.http) = Some(built.clone());
                built
            }
        };
        let target = nanobot_channels::ws::Upgrade {
            url: &self.settings.ws_url,
            bearer: Some(self.settings.access_token.expose()),
            timeout: CONNECT_TIMEOUT,
            url_key: "channels.napcat.wsUrl",
            credential_key: Some("channels.napcat.accessToken"),
        };
        nanobot_channels::ws::connect(NAME, &client, &target).await
    }

    /// One connection: connect, log in, then read frames and handle events until it ends or `cancel` fires.
    async fn connection(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        let ws = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            ws = self.open() => ws?,
        };
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Ws>();
        *lock(&self.writer) = Some(tx.clone());
        let (events_tx, mut events_rx) = mpsc::channel::<Value>(EVENT_QUEUE);
        let writer = async {
            while let Some(frame) = rx.recv().await {
                if let Err(e) = sink.send(frame).await {
                    return Err(transient(format!("sending to NapCat: {e}")));
                }
            }
            Ok(())
        };
        let reader = async {
            while let Some(frame) = stream.next().await {
                match frame {
                    Ok(Ws::Text(text)) => self.route(text.as_str(), &events_tx),
                    Ok(Ws::Binary(bytes)) => self.route(&String::from_utf8_lossy(&bytes), &events_tx),
                    Ok(Ws::Ping(payload)) => {
                        let _ = tx.send(Ws::Pong(payload));
                    }
                    Ok(Ws::Close(_)) => break,
                    Ok(_) => {}
                    Err(e) => return Err(transient(format!("the connection to NapCat was lost: {e}"))),
                }
            }
            Err(transient("NapCat closed the connection"))
        };
        let handler = async {
            while let Some(ev) = events_rx.recv().await {
                if let Err(e) = self.handle_event(bus, &ev).await {
                    if matches!(e, ChannelError::Bus(_)) {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "napcat: an event was not handled");
                }
            }
            Ok(())
        };
        let login = async {
            let info = self.call_action("get_login_info", json!({})).await?;
            if let Some(id) = id_string(&info["data"]["user_id"]) {
                *lock(&self.self_id) = Some(id);
            }
            tracing::info!(
                user_id = %info["data"]["user_id"],
                nickname = %info["data"]["nickname"],
                "napcat: logged in"
            );
            self.logins.send_modify(|n| *n += 1);
            std::future::pending::<Result<(), ChannelError>>().await
        };
        tokio::select! {
            () = cancel.cancelled() => Ok(()),
            r = reader => r,
            r = writer => r,
            r = handler => r,
            r = login => r,
        }
    }
}

#[async_trait]
impl Channel for NapcatChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One connection to NapCat until it ends: a lost connection is reported (`Transient`) and the manager
    /// connects again with its backoff; a refused token is an authentication error, which stops the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let result = self.connection(&bus, &cancel).await;
        *lock(&self.writer) = None;
        // Waiters get "closed" at once instead of their timeout.
        lock(&self.pending).clear();
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        if chat_target(&msg.chat_id).is_none() {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let mut first = Vec::new();
        for reference in &msg.media {
            match self.image_segment(reference).await {
                Some(segment) => first.push(segment),
                None => first.push(text_segment(&format!(
                    "[image not sent: {}]\n",
                    Path::new(reference)
                        .file_name()
                        .map_or_else(|| reference.clone(), |n| n.to_string_lossy().into_owned())
                ))),
            }
        }
        let text = msg.content.trim();
        let mut pieces = if text.is_empty() {
            Vec::new()
        } else {
            split_message(text, PIECE_LIMIT)
        }
        .into_iter();
        if let Some(piece) = pieces.next() {
            first.push(text_segment(&piece));
        }
        if !first.is_empty() {
            self.send_segments(&msg.chat_id, first).await?;
        }
        for piece in pieces {
            self.send_segments(&msg.chat_id, vec![text_segment(&piece)])
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> NapcatChannel {
        let c = NapcatChannel::new(NapcatSettings::default(), "/tmp");
        *lock(&c.self_id) = Some("10001".into());
        c
    }

    #[test]
    fn segments_give_text_mentions_replies_and_images() {
        let c = channel();
        let p = c.parse(&json!([
            {"type": "reply", "data": {"id": "77"}},
            {"type": "at", "data": {"qq": "10001"}},
            {"type": "text", "data": {"text": "  look "}},
            {"type": "at", "data": {"qq": 20002}},
            {"type": "face", "data": {"id": "14"}},
            {"type": "image", "data": {"url": "https://img.example/a.png", "file": "abc.png", "file_size": "123"}},
            {"type": "image", "data": {"url": "file:///etc/passwd"}},
            {"type": "unknown", "data": {}}
        ]));
        assert_eq!(p.text, "look @20002 [face:14]");
        assert!(p.mentioned);
        assert_eq!(p.reply_to.as_deref(), Some("77"));
        assert_eq!(
            p.images,
            [Image {
                url: "https://img.example/a.png".into(),
                file: "abc.png".into(),
                size: Some(123)
            }]
        );
        let p = c.parse(&json!("plain [CQ:at,qq=10001] string"));
        assert_eq!(p.text, "plain [CQ:at,qq=10001] string");
        assert!(!p.mentioned, "CQ codes are not parsed, as in 0.3.5");
        assert_eq!(c.parse(&Value::Null), Parsed::default());
    }

    #[test]
    fn chat_ids_are_0_3_5_s() {
        assert_eq!(chat_target("private:10002"), Some(("private", 10002)));
        assert_eq!(chat_target("group:555"), Some(("group", 555)));
        for bad in ["10002", "channel:1", "group:", "group:abc", ""] {
            assert_eq!(chat_target(bad), None, "{bad}");
        }
    }
}
