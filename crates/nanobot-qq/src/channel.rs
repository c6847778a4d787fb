//! [`QqChannel`]: the gateway connection (identify, heartbeat, resume), access control and passive replies.

use nanobot_util::lock;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, safe_file_name, split_message,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::api::{Api, rejected, transient};
use crate::settings::MsgFormat;
use crate::{NAME, QqSettings};

/// Metadata key: the id of the message a reply answers (QQ's passive replies need it).
pub const META_MESSAGE_ID: &str = "message_id";
/// Metadata key: the kind of chat: `c2c`, `group`, `channel` (a guild channel) or `dm` (a guild direct message).
pub const META_CHAT_TYPE: &str = "chat_type";

/// Gateway intents: group and C2C events (1<<25), guild direct messages (1<<12), guild @-messages (1<<30).
pub const INTENTS: u64 = (1 << 25) | (1 << 12) | (1 << 30);

/// Message ids remembered against redelivery.
const SEEN_CAPACITY: usize = 1000;
/// Longest piece of text in one message.
const PIECE_LIMIT: usize = 2000;
/// Bound of the WebSocket handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of the wait for Hello after connecting, and for READY / RESUMED after identifying / resuming.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Heartbeat interval used when Hello names none (QQ says 41.25 s).
const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(41_250);
/// Largest local file sent as rich media.
const MAX_UPLOAD_BYTES: u64 = 20 * 1024 * 1024;

/// What a resumed connection needs: the session and the last sequence number seen.
#[derive(Debug, Default, Clone)]
struct Resume {
    session_id: Option<String>,
    seq: u64,
}

enum Ended {
    Cancelled,
    Dropped(String),
}

/// A received message, as far as the channel needs it.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    id: String,
    sender: String,
    chat_id: String,
    chat_type: &'static str,
    mentioned: bool,
    text: String,
    /// `(url, file name, content type)` of attachments.
    files: Vec<(String, String, String)>,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or_default()
}

/// Removes `<@!id>` / `<@id>` mention tags (guild messages carry them in the text).
fn strip_mentions(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        out.push_str(&rest[..start]);
        match rest[start..].find('>') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

impl Received {
    fn from_event(kind: &str, d: &Value) -> Option<Self> {
        let (sender, chat_id, chat_type, mentioned) = match kind {
            "C2C_MESSAGE_CREATE" => {
                let user = [
                    str_at(d, &["author", "user_openid"]),
                    str_at(d, &["author", "id"]),
                ]
                .into_iter()
                .find(|x| !x.is_empty())?;
                (user, user, "c2c", true)
            }
            "GROUP_AT_MESSAGE_CREATE" | "GROUP_MESSAGE_CREATE" => (
                str_at(d, &["author", "member_openid"]),
                str_at(d, &["group_openid"]),
                "group",
                kind == "GROUP_AT_MESSAGE_CREATE",
            ),
            "DIRECT_MESSAGE_CREATE" => (str_at(d, &["author", "id"]), str_at(d, &["guild_id"]), "dm", true),
            "AT_MESSAGE_CREATE" => (
                str_at(d, &["author", "id"]),
                str_at(d, &["channel_id"]),
                "channel",
                true,
            ),
            _ => return None,
        };
        if sender.is_empty() || chat_id.is_empty() {
            return None;
        }
        let files = d["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                let url = a["url"].as_str().filter(|u| !u.is_empty())?;
                Some((
                    url.to_string(),
                    a["filename"].as_str().unwrap_or_default().to_string(),
                    a["content_type"].as_str().unwrap_or_default().to_string(),
                ))
            })
            .collect();
        Some(Self {
            id: str_at(d, &["id"]).to_string(),
            sender: sender.to_string(),
            chat_id: chat_id.to_string(),
            chat_type,
            mentioned,
            text: strip_mentions(str_at(d, &["content"])),
            files,
        })
    }

    fn is_group(&self) -> bool {
        matches!(self.chat_type, "group" | "channel")
    }
}

/// The QQ channel. See the [crate docs](crate).
pub struct QqChannel {
    settings: QqSettings,
    access: AccessControl,
    media_dir: PathBuf,
    api: Api,
    /// Fetches the files users send, behind the SSRF guard.
    remote: nanobot_channels::download::RemoteMedia,
    seen: nanobot_channels::RecentIds,
    chat_types: Mutex<HashMap<String, &'static str>>,
    msg_seq: AtomicU64,
    handled: watch::Sender<u64>,
    connections: watch::Sender<u64>,
    /// The session a new connection resumes (kept across the manager's restarts of `run`).
    resume: Mutex<Resume>,
}

impl std::fmt::Debug for QqChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QqChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

impl QqChannel {
    /// A channel with these settings that stores received files in `mediaDir`, else `<media_root>/qq/`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: QqSettings, media_root: impl AsRef<Path>) -> Result<Self, ChannelError> {
        let api = Api::new(
            settings.api_url.clone(),
            settings.token_url.clone(),
            settings.app_id.clone(),
            settings.secret.clone(),
        )?;
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Mention,
            None,
        );
        let media_dir = settings
            .media_dir
            .clone()
            .unwrap_or_else(|| media_root.as_ref().join(NAME));
        let remote =
            nanobot_channels::download::RemoteMedia::new(nanobot_channels::download::SsrfGuard::default())
                .with_max_bytes(settings.download_max_bytes);
        Ok(Self {
            settings,
            access,
            media_dir,
            api,
            remote,
            seen: nanobot_channels::RecentIds::new(SEEN_CAPACITY),
            chat_types: Mutex::default(),
            msg_seq: AtomicU64::new(1),
            handled: watch::Sender::new(0),
            connections: watch::Sender::new(0),
            resume: Mutex::default(),
        })
    }

    /// Checks the files users send (attachment URLs, chosen by the sender's side) with `guard`, the one every
    /// adapter shares (the gateway passes one with `tools.ssrfWhitelist`): only `http(s)`, never an internal
    /// address, every resolved address checked where the connection is made, no redirects. Without it, internal
    /// addresses are refused.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: nanobot_channels::download::SsrfGuard) -> Self {
        self.remote = nanobot_channels::download::RemoteMedia::new(guard)
            .with_max_bytes(self.settings.download_max_bytes);
        self
    }

    /// Issues pairing codes to denied direct-message senders through `store`.
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            AllowList::new(&self.settings.allow_from),
            GroupPolicy::Mention,
            Some(store),
        );
        self
    }

    /// Counts the dispatch events the receive loop has finished with (handled, ignored or duplicate).
    pub fn handled_events(&self) -> watch::Receiver<u64> {
        self.handled.subscribe()
    }

    /// Counts the gateway sessions made ready so far (READY or RESUMED).
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    /// Where received files are stored.
    pub fn media_dir(&self) -> &Path {
        &self.media_dir
    }

    fn first_sighting(&self, id: &str) -> bool {
        self.seen.first_sighting(id)
    }

    async fn session(
        &self,
        bus: &Arc<dyn Bus>,
        cancel: &CancellationToken,
        resume: &mut Resume,
    ) -> Result<Ended, ChannelError> {
        let url = self.api.gateway_url().await?;
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url.as_str()));
        let (mut ws, _) = tokio::select! {
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
            r = connect => r
                .map_err(|_| transient("gateway: WebSocket handshake timed out"))?
                .map_err(|e| transient(format!("gateway: {e}")))?,
        };
        // Hello, then identify or resume.
        let hello = tokio::select! {
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, next_json(&mut ws)) => match r {
                Err(_) => return Ok(Ended::Dropped("no Hello from the gateway within 30 s".into())),
                Ok(None) => return Ok(Ended::Dropped("the gateway closed before Hello".into())),
                Ok(Some(v)) => v,
            },
        };
        if hello["op"].as_u64() != Some(10) {
            return Ok(Ended::Dropped(format!(
                "expected Hello (op 10), got op {}",
                hello["op"]
            )));
        }
        let heartbeat = hello["d"]["heartbeat_interval"]
            .as_u64()
            .filter(|ms| *ms > 0)
            .map_or(DEFAULT_HEARTBEAT, Duration::from_millis);
        let token = format!("QQBot {}", self.api.token().await?);
        let first = match &resume.session_id {
            Some(id) => json!({"op": 6, "d": {"token": token, "session_id": id, "seq": resume.seq}}),
            None => json!({"op": 2, "d": {"token": token, "intents": INTENTS, "shard": [0, 1],
                "properties": {"$os": std::env::consts::OS, "$browser": "nanobot-rs", "$device": "nanobot-rs"}}}),
        };
        if let Err(e) = ws.send(Ws::Text(first.to_string().into())).await {
            return Ok(Ended::Dropped(format!("identify failed: {e}")));
        }
        let mut ready = false;
        let ready_by = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        let mut acked = true;
        loop {
            let frame = tokio::select! {
                () = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return Ok(Ended::Cancelled);
                }
                () = tokio::time::sleep_until(ready_by), if !ready => {
                    return Ok(Ended::Dropped("no READY / RESUMED within 30 s of identifying".into()));
                }
                _ = beat.tick() => {
                    if !acked {
                        return Ok(Ended::Dropped("heartbeat not acknowledged within one interval".into()));
                    }
                    let d = if resume.seq > 0 { json!(resume.seq) } else { Value::Null };
                    if let Err(e) = ws.send(Ws::Text(json!({"op": 1, "d": d}).to_string().into())).await {
                        return Ok(Ended::Dropped(format!("heartbeat failed: {e}")));
                    }
                    acked = false;
                    continue;
                }
                msg = ws.next() => match msg {
                    None => return Ok(Ended::Dropped("closed by the gateway".into())),
                    Some(Ok(Ws::Close(frame))) => {
                        let code = frame.as_ref().map_or(0, |f| u16::from(f.code));
                        return self.closed(code, resume);
                    }
                    Some(Err(e)) => return Ok(Ended::Dropped(e.to_string())),
                    Some(Ok(Ws::Text(t))) => match serde_json::from_str::<Value>(&t) {
                        Ok(v) => v,
                        Err(_) => { tracing::warn!("qq: gateway frame is not JSON; ignored"); continue; }
                    },
                    Some(Ok(_)) => continue,
                },
            };
            match frame["op"].as_u64() {
                Some(11) => acked = true,
                Some(1) => {
                    let d = if resume.seq > 0 {
                        json!(resume.seq)
                    } else {
                        Value::Null
                    };
                    let _ = ws
                        .send(Ws::Text(json!({"op": 1, "d": d}).to_string().into()))
                        .await;
                }
                Some(7) => {
                    let _ = ws.close(None).await;
                    return Ok(Ended::Dropped("the gateway asked to reconnect".into()));
                }
                Some(9) => {
                    *resume = Resume::default();
                    let _ = ws.close(None).await;
                    return Ok(Ended::Dropped("invalid session; identifying afresh".into()));
                }
                Some(0) => {
                    if let Some(s) = frame["s"].as_u64().filter(|s| *s > 0) {
                        resume.seq = resume.seq.max(s);
                    }
                    let kind = frame["t"].as_str().unwrap_or_default();
                    match kind {
                        "READY" => {
                            resume.session_id = frame["d"]["session_id"].as_str().map(str::to_string);
                            ready = true;
                            self.connections.send_modify(|n| *n += 1);
                            tracing::info!("qq: gateway ready");
                        }
                        "RESUMED" => {
                            ready = true;
                            self.connections.send_modify(|n| *n += 1);
                            tracing::info!(seq = resume.seq, "qq: gateway session resumed");
                        }
                        _ => {
                            if let Err(e) = self.dispatch(bus, kind, &frame["d"]).await {
                                if matches!(e, ChannelError::Bus(_)) {
                                    return Err(e);
                                }
                                tracing::warn!(error = %e, event = %kind, "qq: could not handle an event");
                            }
                            self.handled.send_modify(|n| *n += 1);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The gateway closed with `code`: decide whether the session can be resumed.
    fn closed(&self, code: u16, resume: &mut Resume) -> Result<Ended, ChannelError> {
        match code {
            4004 => Err(ChannelError::Auth {
                channel: NAME.into(),
                source: "gateway: authentication failed (close code 4004)".into(),
            }),
            4914 | 4915 => Err(ChannelError::Auth {
                channel: NAME.into(),
                source: format!("gateway: the bot is offline or banned (close code {code})").into(),
            }),
            4006 | 4007 | 4009 | 9001 | 9005 => {
                *resume = Resume::default();
                Ok(Ended::Dropped(format!(
                    "session ended (close code {code}); identifying afresh"
                )))
            }
            _ => Ok(Ended::Dropped(format!("closed by the gateway (code {code})"))),
        }
    }

    async fn dispatch(&self, bus: &Arc<dyn Bus>, kind: &str, d: &Value) -> Result<(), ChannelError> {
        let Some(msg) = Received::from_event(kind, d) else {
            tracing::debug!(event = %kind, "qq: event ignored");
            return Ok(());
        };
        if !self.first_sighting(&msg.id) {
            tracing::debug!(message = %msg.id, "qq: duplicate delivery ignored");
            return Ok(());
        }
        lock(&self.chat_types).insert(msg.chat_id.clone(), msg.chat_type);
        let decision = self.access.check(&InboundContext {
            sender_id: &msg.sender,
            chat_id: &msg.chat_id,
            is_group: msg.is_group(),
            mentioned: msg.mentioned,
            text: &msg.text,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                let text = AccessControl::pairing_message(&request);
                return self
                    .send_text(&msg.chat_id, msg.chat_type, Some(&msg.id), &text)
                    .await;
            }
            AccessDecision::Handled { reply } => {
                return self
                    .send_text(&msg.chat_id, msg.chat_type, Some(&msg.id), &reply)
                    .await;
            }
            _ => return Ok(()),
        }
        let mut content = msg.text.clone();
        let mut media = Vec::new();
        let mut lines = Vec::new();
        let mut meta = Vec::new();
        for (i, (url, name, ctype)) in msg.files.iter().enumerate() {
            let saved = self.receive(&msg.id, i, url, name, ctype).await;
            let shown = if name.is_empty() {
                url.as_str()
            } else {
                name.as_str()
            };
            match &saved {
                Some(path) => {
                    lines.push(format!("- {shown}\n  saved: {path}"));
                    media.push(path.clone());
                }
                None => lines.push(format!("- {shown}\n  saved: [download failed]")),
            }
            meta.push(json!({"url": url, "filename": name, "content_type": ctype, "saved_path": saved}));
        }
        if !lines.is_empty() {
            let block = format!("Received files:\n{}", lines.join("\n"));
            content = if content.is_empty() {
                let image = msg
                    .files
                    .iter()
                    .any(|(_, n, t)| t.starts_with("image/") || is_image_name(n));
                format!("{}\n{block}", if image { "[Image]" } else { "[File]" })
            } else {
                format!("{content}\n\n{block}")
            };
        }
        if content.is_empty() {
            tracing::debug!("qq: empty message ignored");
            return Ok(());
        }
        if !self.settings.ack_message.trim().is_empty()
            && let Err(e) = self
                .send_text(
                    &msg.chat_id,
                    msg.chat_type,
                    Some(&msg.id),
                    &self.settings.ack_message,
                )
                .await
        {
            tracing::debug!(error = %e, "qq: acknowledgement message not sent");
        }
        let mut inbound = InboundMessage::new(NAME, msg.sender.clone(), msg.chat_id.clone(), content)
            .with_metadata(META_MESSAGE_ID, msg.id.clone())
            .with_metadata(META_CHAT_TYPE, msg.chat_type)
            .with_metadata(nanobot_bus::META_IS_GROUP, msg.is_group())
            .with_metadata("attachments", Value::Array(meta));
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Downloads one attachment into the media directory; `None` (logged) when refused or failed.
    async fn receive(
        &self,
        msg_id: &str,
        index: usize,
        url: &str,
        name: &str,
        ctype: &str,
    ) -> Option<String> {
        let url = if url.starts_with("//") {
            format!("https:{url}")
        } else {
            url.to_string()
        };
        let result = async {
            let parsed = url::Url::parse(&url).map_err(|e| rejected(format!("attachment URL: {e}")))?;
            let mut file = safe_file_name(name);
            if file.is_empty() || file == "file" {
                file = format!("qq_file{}", extension(&parsed, ctype));
            } else if Path::new(&file).extension().is_none() {
                file.push_str(extension(&parsed, ctype));
            }
            let unique: String = msg_id
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(16)
                .collect();
            let dest = self.media_dir.join(format!("{unique}_{index}_{file}"));
            tokio::fs::create_dir_all(&self.media_dir)
                .await
                .map_err(|source| ChannelError::Io {
                    path: self.media_dir.display().to_string(),
                    source,
                })?;
            self.remote.save(NAME, parsed.as_str(), &dest).await?;
            Ok::<_, ChannelError>(dest.display().to_string())
        }
        .await;
        match result {
            Ok(path) => Some(path),
            Err(e) => {
                tracing::warn!(error = %e, "qq: attachment not downloaded");
                None
            }
        }
    }

    fn next_seq(&self) -> u64 {
        self.msg_seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// One text message to `chat_id`, as a passive reply to `msg_id` when given.
    async fn send_text(
        &self,
        chat_id: &str,
        chat_type: &str,
        msg_id: Option<&str>,
        text: &str,
    ) -> Result<(), ChannelError> {
        let markdown = self.settings.msg_format == MsgFormat::Markdown;
        let (path, body) = match chat_type {
            "group" | "c2c" => {
                let mut body = if markdown {
                    json!({"msg_type": 2, "markdown": {"content": text}})
                } else {
                    json!({"msg_type": 0, "content": text})
                };
                body["msg_seq"] = json!(self.next_seq());
                if let Some(id) = msg_id {
                    body["msg_id"] = json!(id);
                }
                let path = if chat_type == "group" {
                    format!("/v2/groups/{chat_id}/messages")
                } else {
                    format!("/v2/users/{chat_id}/messages")
                };
                (path, body)
            }
            // Guild messages: `content` is rendered as is; markdown needs a template there, so text goes plain.
            kind => {
                let mut body = json!({"content": text});
                if let Some(id) = msg_id {
                    body["msg_id"] = json!(id);
                }
                let path = if kind == "dm" {
                    format!("/dms/{chat_id}/messages")
                } else {
                    format!("/channels/{chat_id}/messages")
                };
                (path, body)
            }
        };
        self.api
            .call(reqwest::Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }
}

impl QqChannel {
    /// Uploads a local file as rich media (base64; images as type 1, anything else as a file, type 4) and sends
    /// it as a media message (`msg_type` 7) replying to `msg_id`.
    async fn send_file(
        &self,
        chat_id: &str,
        chat_type: &str,
        msg_id: Option<&str>,
        path: &str,
    ) -> Result<(), ChannelError> {
        use base64::Engine as _;
        let local = path.strip_prefix("file://").unwrap_or(path);
        let data = nanobot_channels::read_attachment(std::path::Path::new(local), MAX_UPLOAD_BYTES)
            .await
            .map_err(|e| rejected(e.to_string()))?;
        let name = file_label(local);
        let image = is_image_name(&name);
        let mut body = json!({"file_type": if image { 1 } else { 4 }, "srv_send_msg": false,
            "file_data": base64::engine::general_purpose::STANDARD.encode(&data)});
        if !image {
            // A name makes QQ show an image as a file attachment, so only files carry one.
            body["file_name"] = json!(name);
        }
        let base = if chat_type == "group" {
            format!("/v2/groups/{chat_id}")
        } else {
            format!("/v2/users/{chat_id}")
        };
        let uploaded = self
            .api
            .call(reqwest::Method::POST, &format!("{base}/files"), Some(&body))
            .await?;
        let info = uploaded["file_info"]
            .as_str()
            .filter(|i| !i.is_empty())
            .ok_or_else(|| rejected(format!("{base}/files: no file_info in the answer")))?;
        let mut message = json!({"msg_type": 7, "media": {"file_info": info}, "msg_seq": self.next_seq()});
        if let Some(id) = msg_id {
            message["msg_id"] = json!(id);
        }
        self.api
            .call(reqwest::Method::POST, &format!("{base}/messages"), Some(&message))
            .await
            .map(drop)
    }
}

fn is_image_name(name: &str) -> bool {
    let ext = Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    matches!(
        ext.as_str(),
        "png" | "jpg" | "jpeg" | "gif" | "bmp" | "webp" | "tif" | "tiff" | "ico" | "svg"
    )
}

/// The extension to give a received file that has none: from the URL, else the content type.
fn extension(url: &url::Url, ctype: &str) -> &'static str {
    let path = url.path().to_ascii_lowercase();
    for ext in [".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf"] {
        if path.ends_with(ext) {
            return ext;
        }
    }
    match ctype.to_ascii_lowercase() {
        t if t.contains("png") => ".png",
        t if t.contains("jpeg") || t.contains("jpg") => ".jpg",
        t if t.contains("gif") => ".gif",
        t if t.contains("webp") => ".webp",
        t if t.contains("pdf") => ".pdf",
        _ => ".bin",
    }
}

async fn next_json<S>(ws: &mut S) -> Option<Value>
where
    S: futures::Stream<Item = Result<Ws, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Ws::Text(t)) => {
                if let Ok(v) = serde_json::from_str(&t) {
                    return Some(v);
                }
            }
            Ok(Ws::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    None
}

fn file_label(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned())
}

#[async_trait]
impl Channel for QqChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One gateway connection until it ends: a dropped connection is reported (`Transient`) and the manager
    /// connects again with its backoff, resuming the session (its id and the last sequence number are kept here);
    /// refused credentials stop the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let mut resume = lock(&self.resume).clone();
        let ended = self.session(&bus, &cancel, &mut resume).await;
        *lock(&self.resume) = resume;
        match ended? {
            Ended::Cancelled => Ok(()),
            Ended::Dropped(why) => Err(ChannelError::transient(
                NAME,
                format!("gateway connection ended: {why}"),
            )),
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        if chat.is_empty()
            || !chat
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let chat_type = msg
            .metadata
            .get(META_CHAT_TYPE)
            .and_then(Value::as_str)
            .and_then(|t| ["c2c", "group", "channel", "dm"].into_iter().find(|k| *k == t))
            .or_else(|| lock(&self.chat_types).get(chat).copied())
            .unwrap_or("c2c");
        let msg_id = msg
            .metadata
            .get(META_MESSAGE_ID)
            .and_then(Value::as_str)
            .or(msg.reply_to.as_deref())
            .filter(|id| !id.is_empty());
        for path in &msg.media {
            let result = match chat_type {
                "c2c" | "group" => self.send_file(chat, chat_type, msg_id, path).await,
                _ => Err(rejected("files are sent to single chats and groups only".into())),
            };
            if let Err(e) = result {
                if matches!(
                    e,
                    ChannelError::Transient { .. } | ChannelError::RateLimited { .. }
                ) {
                    return Err(e);
                }
                tracing::warn!(error = %e, path = %path, "qq: file not sent");
                self.send_text(
                    chat,
                    chat_type,
                    msg_id,
                    &format!("[Attachment send failed: {}]", file_label(path)),
                )
                .await?;
            }
        }
        let text = msg.content.trim();
        if !text.is_empty() {
            for piece in split_message(text, PIECE_LIMIT) {
                self.send_text(chat, chat_type, msg_id, &piece).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_message_events() {
        let c2c = json!({"id": "m1", "author": {"user_openid": "U1"}, "content": " hi ",
            "attachments": [{"url": "https://x/a.png", "filename": "a.png", "content_type": "image/png"}]});
        let r = Received::from_event("C2C_MESSAGE_CREATE", &c2c).unwrap();
        assert_eq!(
            (r.sender.as_str(), r.chat_id.as_str(), r.chat_type),
            ("U1", "U1", "c2c")
        );
        assert_eq!(r.text, "hi");
        assert_eq!(r.files.len(), 1);
        let group =
            json!({"id": "m2", "author": {"member_openid": "M1"}, "group_openid": "G1", "content": "yo"});
        let r = Received::from_event("GROUP_AT_MESSAGE_CREATE", &group).unwrap();
        assert!(r.is_group() && r.mentioned);
        let r = Received::from_event("GROUP_MESSAGE_CREATE", &group).unwrap();
        assert!(r.is_group() && !r.mentioned);
        let guild = json!({"id": "m3", "author": {"id": "A1"}, "channel_id": "C1", "guild_id": "GU",
            "content": "<@!999> what time is it"});
        let r = Received::from_event("AT_MESSAGE_CREATE", &guild).unwrap();
        assert_eq!((r.chat_id.as_str(), r.text.as_str()), ("C1", "what time is it"));
        let r = Received::from_event("DIRECT_MESSAGE_CREATE", &guild).unwrap();
        assert_eq!((r.chat_id.as_str(), r.chat_type), ("GU", "dm"));
        assert!(Received::from_event("C2C_MESSAGE_CREATE", &json!({"id": "x"})).is_none());
        assert!(Received::from_event("GUILD_CREATE", &guild).is_none());
    }

    #[test]
    fn mention_tags_are_removed() {
        assert_eq!(strip_mentions("<@!1> a <@2>b"), "a b");
        assert_eq!(strip_mentions("x <@oops"), "x <@oops");
    }
}
