//! [`WhatsAppChannel`]: the supervised bridge, access control, received media and sending.

use nanobot_util::lock;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, Transcribe, safe_file_name, split_message,
};
use rand::RngCore;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use crate::bridge::{Bridge, EXIT_LOGGED_OUT, Mode};
use crate::proto::{Event, Incoming, IncomingMedia, OutgoingMedia, Request};
use crate::settings::bare_user;
use crate::{NAME, WhatsAppError, WhatsAppSettings};

/// Message ids remembered against redelivery.
const SEEN_CAPACITY: usize = 1000;
/// Longest text sent as one WhatsApp message.
const TEXT_LIMIT: usize = 60_000;
/// Bound of one send (the bridge answers with an ack or an error).
const SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// First wait before restarting a bridge that ended; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between bridge restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A bridge that ran this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Audio types WhatsApp plays as audio messages (Ogg is left out: only mono Opus is accepted, which a file
/// extension cannot prove).
const DIRECT_AUDIO: &[&str] = &["audio/aac", "audio/amr", "audio/mp4", "audio/mpeg"];

/// Where the connection is, for status reports and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkState {
    /// The bridge is starting or reconnecting.
    Connecting,
    /// Connected to WhatsApp as this JID.
    Connected(String),
    /// WhatsApp logged the device out; the channel stopped.
    LoggedOut,
    /// No device is linked; the channel stopped.
    NotLinked,
    /// The channel is not running.
    Stopped,
}

/// Sends waiting for the bridge's answer, by request number.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<(), String>>>>>;

/// The live connection to the current bridge, used by [`WhatsAppChannel::send`].
#[derive(Clone)]
struct Conn {
    tx: mpsc::Sender<Request>,
    pending: Pending,
}

enum Ended {
    Cancelled,
    Closed(String),
}

/// The WhatsApp channel. See the [crate docs](crate).
pub struct WhatsAppChannel {
    settings: WhatsAppSettings,
    access: AccessControl,
    transcriber: Option<Arc<dyn Transcribe>>,
    conn: Mutex<Option<Conn>>,
    next_ref: AtomicU64,
    seen: nanobot_channels::RecentIds,
    self_ids: Mutex<HashSet<String>>,
    lid_to_phone: Mutex<HashMap<String, String>>,
    state: watch::Sender<LinkState>,
    bridge_starts: watch::Sender<u64>,
    bridge_pid: Mutex<Option<u32>>,
}

impl std::fmt::Debug for WhatsAppChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppChannel")
            .field("settings", &self.settings)
            .field("transcriber", &self.transcriber.is_some())
            .finish_non_exhaustive()
    }
}

/// What a JID names: a phone-number user, a LID (privacy id) user, a group or something else.
fn classify(jid: &str) -> (Option<String>, Option<String>) {
    let jid = jid.trim();
    let Some((user, server)) = jid.split_once('@') else {
        return (None, None);
    };
    let user = user.split(':').next().unwrap_or(user).to_string();
    if user.is_empty() {
        return (None, None);
    }
    match server {
        "s.whatsapp.net" | "c.us" => (Some(user), None),
        "lid" | "lid.whatsapp.net" => (None, Some(user)),
        _ => (None, None),
    }
}

/// The JID a reply goes to: a JID as given, or `<digits>@s.whatsapp.net` for a phone number.
fn target_jid(chat_id: &str) -> Option<String> {
    let chat = chat_id.trim();
    if chat.contains('@') {
        let (user, server) = chat.split_once('@')?;
        let ok = !user.is_empty()
            && !server.is_empty()
            && !chat.chars().any(|c| c.is_whitespace() || c.is_control())
            && !server.contains('@');
        return ok.then(|| chat.to_string());
    }
    let digits = chat.strip_prefix('+').unwrap_or(chat);
    (!digits.is_empty() && digits.len() <= 20 && digits.chars().all(|c| c.is_ascii_digit()))
        .then(|| format!("{digits}@s.whatsapp.net"))
}

/// The extension (with its dot) a received file of this type is saved with.
fn extension_for(mime: &str) -> String {
    format!(".{}", nanobot_channels::extension_for_mime(mime).unwrap_or("bin"))
}

fn mime_for(path: &Path) -> &'static str {
    nanobot_channels::mime_for_name(&path.to_string_lossy())
}

/// How a file is sent: as an image, a video, audio, or a document (everything else).
fn send_kind(mime: &str) -> &'static str {
    if mime.starts_with("image/") && mime != "image/gif" {
        "image"
    } else if mime.starts_with("video/") {
        "video"
    } else if DIRECT_AUDIO.contains(&mime) {
        "audio"
    } else {
        "document"
    }
}

impl WhatsAppChannel {
    /// A channel with these settings. Without [`with_pairing`](Self::with_pairing), denied direct messages are
    /// ignored; without [`with_transcriber`](Self::with_transcriber), voice notes are passed on as audio files.
    pub fn new(settings: WhatsAppSettings) -> Self {
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            settings.group_policy,
            None,
        );
        let lid_to_phone = settings.lid_mappings.clone().into_iter().collect();
        Self {
            settings,
            access,
            transcriber: None,
            conn: Mutex::new(None),
            next_ref: AtomicU64::new(1),
            seen: nanobot_channels::RecentIds::new(SEEN_CAPACITY),
            self_ids: Mutex::new(HashSet::new()),
            lid_to_phone: Mutex::new(lid_to_phone),
            state: watch::Sender::new(LinkState::Stopped),
            bridge_starts: watch::Sender::new(0),
            bridge_pid: Mutex::new(None),
        }
    }

    /// Denied direct messages get a pairing code from `store`; the owner approves it with `/pairing approve`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            AllowList::new(&self.settings.allow_from),
            self.settings.group_policy,
            Some(store),
        );
        self
    }

    /// Transcribes voice notes with `transcriber` (the text replaces the audio, as in nanobot 0.3.5).
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// The settings.
    pub fn settings(&self) -> &WhatsAppSettings {
        &self.settings
    }

    /// Watches the connection state.
    pub fn link_state(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    /// Watches how many times a bridge process was started (a restart after a crash adds one).
    pub fn bridge_starts(&self) -> watch::Receiver<u64> {
        self.bridge_starts.subscribe()
    }

    /// The process id of the running bridge, if one runs.
    pub fn bridge_pid(&self) -> Option<u32> {
        *lock(&self.bridge_pid)
    }

    /// One bridge lifetime: start it, serve frames until it ends or `cancel` fires.
    async fn session(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<Ended, WhatsAppError> {
        self.state.send_replace(LinkState::Connecting);
        let bridge = Bridge::start(
            &self.settings.bridge,
            &self.settings.auth_dir,
            self.settings.proxy.as_deref(),
            Mode::Run,
        )
        .await?;
        *lock(&self.bridge_pid) = bridge.pid();
        self.bridge_starts.send_modify(|n| *n += 1);
        let ws = match bridge.connect().await {
            Ok(ws) => ws,
            Err(e) => {
                bridge.stop().await;
                return Err(e);
            }
        };
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::channel::<Request>(64);
        let pending: Pending = Arc::default();
        *lock(&self.conn) = Some(Conn {
            tx: tx.clone(),
            pending: pending.clone(),
        });
        let mut logged_out = false;
        let mut not_linked = false;
        let mut reason = String::from("the bridge closed the connection");
        let outcome = loop {
            tokio::select! {
                () = cancel.cancelled() => break Ended::Cancelled,
                Some(req) = rx.recv() => {
                    let Ok(text) = serde_json::to_string(&req) else { continue };
                    if let Err(e) = sink.send(WsMessage::text(text)).await {
                        reason = format!("writing to the bridge failed: {e}");
                        break Ended::Closed(reason.clone());
                    }
                }
                frame = stream.next() => {
                    let text = match frame {
                        Some(Ok(WsMessage::Text(t))) => t,
                        Some(Ok(WsMessage::Close(_))) | None => break Ended::Closed(reason.clone()),
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => break Ended::Closed(format!("reading from the bridge failed: {e}")),
                    };
                    let event = match serde_json::from_str::<Event>(text.as_str()) {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::warn!(error = %e, "whatsapp: unreadable frame from the bridge");
                            continue;
                        }
                    };
                    match event {
                        Event::Qr { .. } => {
                            not_linked = true;
                            break Ended::Closed("not linked".into());
                        }
                        Event::Open { me, lid } => {
                            let mut ids = lock(&self.self_ids);
                            for jid in [me.as_deref(), lid.as_deref()].into_iter().flatten() {
                                ids.insert(bare_user(jid).to_string());
                            }
                            drop(ids);
                            let me = me.unwrap_or_default();
                            tracing::info!(account = %bare_user(&me), "whatsapp: connected");
                            self.state.send_replace(LinkState::Connected(me));
                        }
                        Event::Closed { logged_out: out, reason: why } => {
                            logged_out |= out;
                            reason = why;
                        }
                        Event::Message(m) => {
                            if let Err(e) = self.receive(*m, bus, &tx).await {
                                if matches!(e, ChannelError::Bus(_)) {
                                    break Ended::Closed(format!("the bus closed: {e}"));
                                }
                                tracing::warn!(error = %e, "whatsapp: a received message was dropped");
                            }
                        }
                        Event::Ack { r#ref } => {
                            if let Some(done) = lock(&pending).remove(&r#ref) {
                                let _ = done.send(Ok(()));
                            }
                        }
                        Event::Error { r#ref, message } => match r#ref.and_then(|r| lock(&pending).remove(&r)) {
                            Some(done) => {
                                let _ = done.send(Err(message));
                            }
                            None => tracing::warn!(error = %message, "whatsapp: the bridge reported an error"),
                        },
                    }
                }
            }
        };
        *lock(&self.conn) = None;
        for (_, done) in lock(&pending).drain() {
            let _ = done.send(Err("the bridge stopped".into()));
        }
        drop(sink);
        drop(stream);
        let code = bridge.stop().await;
        *lock(&self.bridge_pid) = None;
        if logged_out || code == Some(EXIT_LOGGED_OUT) {
            self.state.send_replace(LinkState::LoggedOut);
            return Err(WhatsAppError::LoggedOut);
        }
        if not_linked {
            self.state.send_replace(LinkState::NotLinked);
            return Err(WhatsAppError::NotLinked);
        }
        Ok(match outcome {
            Ended::Closed(why) => Ended::Closed(format!("{why} (bridge exit code {code:?})")),
            other => other,
        })
    }

    /// True the first time a message id is seen.
    fn first_sighting(&self, id: &str) -> bool {
        self.seen.first_sighting(id)
    }

    /// Who sent `m`, by phone number when it can be found, else by LID.
    fn sender_of(&self, m: &Incoming) -> Option<(String, Option<String>, Option<String>)> {
        let mut candidates = vec![m.sender_alt.clone().unwrap_or_default(), m.sender.clone()];
        if !m.is_group {
            candidates.push(m.chat.clone());
        }
        let (mut phone, mut lid) = (None, None);
        for c in &candidates {
            let (p, l) = classify(c);
            phone = phone.or(p);
            lid = lid.or(l);
        }
        let mut map = lock(&self.lid_to_phone);
        if let (Some(p), Some(l)) = (&phone, &lid) {
            map.insert(l.clone(), p.clone());
        }
        let id = phone
            .clone()
            .or_else(|| lid.as_ref().and_then(|l| map.get(l).cloned()))
            .or_else(|| lid.clone())?;
        Some((id, phone, lid))
    }

    fn addressed_to_us(&self, m: &Incoming) -> (bool, bool) {
        let ids = lock(&self.self_ids);
        let ours = |jid: &str| ids.contains(bare_user(jid));
        let reply = m.quoted_participant.as_deref().is_some_and(ours);
        (m.mentions.iter().any(|j| ours(j)) || reply, reply)
    }

    async fn receive(
        &self,
        m: Incoming,
        bus: &Arc<dyn Bus>,
        tx: &mpsc::Sender<Request>,
    ) -> Result<(), ChannelError> {
        if m.from_me || m.chat.is_empty() || m.chat == "status@broadcast" || !self.first_sighting(&m.id) {
            return Ok(());
        }
        let Some((sender_id, phone, lid)) = self.sender_of(&m) else {
            tracing::warn!(chat = %m.chat, "whatsapp: a message without a usable sender was dropped");
            return Ok(());
        };
        let (mentioned, reply_to_us) = self.addressed_to_us(&m);
        let ctx = InboundContext {
            sender_id: &sender_id,
            chat_id: &m.chat,
            is_group: m.is_group,
            mentioned,
            text: &m.text,
        };
        let mut decision = self.access.check(&ctx)?;
        // 0.3.5: a group named on allowFrom (by JID or its bare id) admits all its members.
        if m.is_group && decision == AccessDecision::Ignore {
            let allow = self.access.allow_list();
            let named = allow.names(&m.chat) || allow.names(bare_user(&m.chat));
            let policy_ok = self.settings.group_policy == GroupPolicy::Open || mentioned;
            if named && policy_ok {
                decision = AccessDecision::Allow;
            }
        }
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(req) => {
                self.reply_now(tx, &m.chat, AccessControl::pairing_message(&req))
                    .await;
                return Ok(());
            }
            AccessDecision::Handled { reply } => {
                self.reply_now(tx, &m.chat, reply).await;
                return Ok(());
            }
            _ => {
                tracing::debug!(sender = %sender_id, chat = %m.chat, "whatsapp: message not for the agent");
                return Ok(());
            }
        }
        let _ = tx
            .send(Request::Read {
                chat: m.chat.clone(),
                id: m.id.clone(),
                participant: m.is_group.then(|| m.sender.clone()).filter(|s| !s.is_empty()),
            })
            .await;
        let mut text = m.text.trim().to_string();
        let mut media = Vec::new();
        if let Some(file) = &m.media {
            self.receive_media(&m.id, file, &mut text, &mut media).await;
        }
        if text.is_empty() && media.is_empty() {
            return Ok(());
        }
        let mut inbound = InboundMessage::new(NAME, sender_id, m.chat.clone(), text);
        inbound.media = media;
        let meta = |v: Option<String>| {
            v.filter(|s| !s.is_empty())
                .map_or(serde_json::Value::Null, Into::into)
        };
        inbound = inbound
            .with_metadata("message_id", meta(Some(m.id.clone())))
            .with_metadata(
                "timestamp",
                if m.timestamp > 0 {
                    m.timestamp.into()
                } else {
                    serde_json::Value::Null
                },
            )
            .with_metadata("is_group", m.is_group)
            .with_metadata("is_forwarded", m.forwarded)
            .with_metadata("participant", meta(m.is_group.then(|| m.sender.clone())))
            .with_metadata("sender_alt", meta(m.sender_alt.clone()))
            .with_metadata("lid", meta(lid))
            .with_metadata("phone", meta(phone))
            .with_metadata("push_name", meta(m.push_name.clone()))
            .with_metadata("is_reply_to_bot", reply_to_us);
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Saves a received file (and transcribes a voice note); adds its tag to `text` and its path to `media`.
    async fn receive_media(
        &self,
        id: &str,
        file: &IncomingMedia,
        text: &mut String,
        media: &mut Vec<String>,
    ) {
        let label = match file.kind.as_str() {
            k @ ("image" | "video" | "audio" | "sticker") => k,
            _ => "file",
        };
        let push = |text: &mut String, tag: String| {
            if text.is_empty() {
                *text = tag;
            } else {
                text.push('\n');
                text.push_str(&tag);
            }
        };
        let path = match self.save_media(id, file).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "whatsapp: a received file was not saved");
                push(text, format!("[{label}: not saved: {e}]"));
                return;
            }
        };
        if file.kind == "audio"
            && file.voice
            && let Some(t) = &self.transcriber
        {
            match t.transcribe(&path).await {
                Ok(said) if !said.trim().is_empty() => {
                    push(text, said.trim().to_string());
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "whatsapp: transcription failed"),
            }
        }
        let shown = path.display().to_string();
        media.push(shown.clone());
        push(text, format!("[{label}: {shown}]"));
    }

    async fn save_media(&self, id: &str, file: &IncomingMedia) -> Result<PathBuf, WhatsAppError> {
        // base64 is 4/3 of the data: refuse before decoding what would be too large.
        let max = self.settings.max_media_bytes;
        if (file.data.len() as u64) / 4 * 3 > max + 3 {
            return Err(WhatsAppError::Bridge(format!("larger than {max} bytes")));
        }
        let bytes = B64
            .decode(file.data.as_bytes())
            .map_err(|e| WhatsAppError::Bridge(format!("the file's data is not base64: {e}")))?;
        if bytes.len() as u64 > max {
            return Err(WhatsAppError::Bridge(format!("larger than {max} bytes")));
        }
        let dir = &self.settings.media_dir;
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(WhatsAppError::io(dir))?;
        let suffix = file
            .file_name
            .as_deref()
            .and_then(|n| Path::new(n).extension())
            .map(|e| format!(".{}", safe_file_name(&e.to_string_lossy())))
            .unwrap_or_else(|| extension_for(&file.mimetype));
        let mut rnd = [0u8; 4];
        rand::rng().fill_bytes(&mut rnd);
        let id = if id.is_empty() { "msg" } else { id };
        let name = format!("wa_{}_{}{suffix}", safe_file_name(id), hex::encode(rnd));
        let path = dir.join(safe_file_name(&name));
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(WhatsAppError::io(&path))?;
        tokio::io::AsyncWriteExt::write_all(&mut f, &bytes)
            .await
            .map_err(WhatsAppError::io(&path))?;
        tokio::io::AsyncWriteExt::flush(&mut f)
            .await
            .map_err(WhatsAppError::io(&path))?;
        Ok(path)
    }

    /// Sends text from inside the receive loop without waiting for the ack (pairing codes, owner commands).
    async fn reply_now(&self, tx: &mpsc::Sender<Request>, chat: &str, text: String) {
        let r#ref = self.next_ref.fetch_add(1, Ordering::Relaxed);
        let _ = tx
            .send(Request::Send {
                r#ref,
                to: chat.to_string(),
                text: Some(text),
                media: None,
            })
            .await;
    }

    async fn request(
        &self,
        conn: &Conn,
        to: &str,
        text: Option<String>,
        media: Option<OutgoingMedia>,
    ) -> Result<(), ChannelError> {
        let r#ref = self.next_ref.fetch_add(1, Ordering::Relaxed);
        let (done, wait) = oneshot::channel();
        lock(&conn.pending).insert(r#ref, done);
        let transient = |why: &str| ChannelError::Transient {
            channel: NAME.into(),
            source: why.to_string().into(),
        };
        if conn
            .tx
            .send(Request::Send {
                r#ref,
                to: to.to_string(),
                text,
                media,
            })
            .await
            .is_err()
        {
            lock(&conn.pending).remove(&r#ref);
            return Err(transient("WhatsApp is not connected"));
        }
        match tokio::time::timeout(SEND_TIMEOUT, wait).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(message))) if message == "the bridge stopped" => Err(transient(&message)),
            Ok(Ok(Err(message))) => Err(ChannelError::Rejected {
                channel: NAME.into(),
                source: message.into(),
            }),
            Ok(Err(_)) => Err(transient("the bridge stopped")),
            Err(_) => {
                lock(&conn.pending).remove(&r#ref);
                Err(transient("no answer from the bridge within 60 s"))
            }
        }
    }

    async fn outgoing_file(&self, path: &str) -> Result<OutgoingMedia, ChannelError> {
        let p = Path::new(path);
        let io = |source| ChannelError::Io {
            path: path.to_string(),
            source,
        };
        let meta = tokio::fs::metadata(p).await.map_err(io)?;
        if meta.len() > self.settings.max_media_bytes {
            return Err(ChannelError::Rejected {
                channel: NAME.into(),
                source: format!(
                    "{path}: {} bytes is more than the {} bytes a WhatsApp file may have here",
                    meta.len(),
                    self.settings.max_media_bytes
                )
                .into(),
            });
        }
        let bytes = tokio::fs::read(p).await.map_err(io)?;
        let mime = mime_for(p);
        Ok(OutgoingMedia {
            kind: send_kind(mime),
            mimetype: mime.to_string(),
            file_name: p
                .file_name()
                .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned()),
            data: B64.encode(bytes),
        })
    }
}

#[async_trait]
impl Channel for WhatsAppChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let mut backoff = FIRST_BACKOFF;
        let result = loop {
            let started = Instant::now();
            match self.session(&bus, &cancel).await {
                Ok(Ended::Cancelled) => break Ok(()),
                Ok(Ended::Closed(why)) => {
                    tracing::warn!(reason = %why, ?backoff, "whatsapp: bridge ended; restarting")
                }
                Err(e @ (WhatsAppError::LoggedOut | WhatsAppError::NotLinked)) => {
                    tracing::error!(error = %e, "whatsapp: the channel stops");
                    break Err(e.into());
                }
                Err(
                    e @ (WhatsAppError::Config(_)
                    | WhatsAppError::NodeMissing { .. }
                    | WhatsAppError::NotInstalled { .. }),
                ) => {
                    break Err(e.into());
                }
                Err(e) => tracing::warn!(error = %e, ?backoff, "whatsapp: bridge failed; restarting"),
            }
            if started.elapsed() >= HEALTHY_AFTER {
                backoff = FIRST_BACKOFF;
            }
            tokio::select! {
                () = cancel.cancelled() => break Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        if !matches!(*self.state.borrow(), LinkState::LoggedOut | LinkState::NotLinked) {
            self.state.send_replace(LinkState::Stopped);
        }
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let to = target_jid(&msg.chat_id).ok_or_else(|| ChannelError::InvalidChatId {
            channel: NAME.into(),
            chat_id: msg.chat_id.clone(),
        })?;
        let conn = lock(&self.conn).clone().ok_or_else(|| ChannelError::Transient {
            channel: NAME.into(),
            source: "WhatsApp is not connected".into(),
        })?;
        let text = msg.content.trim();
        if !text.is_empty() {
            for piece in split_message(text, TEXT_LIMIT) {
                self.request(&conn, &to, Some(piece), None).await?;
            }
        }
        for path in &msg.media {
            let file = self.outgoing_file(path).await?;
            self.request(&conn, &to, None, Some(file)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jids() {
        assert_eq!(
            classify("4917012345:3@s.whatsapp.net"),
            (Some("4917012345".into()), None)
        );
        assert_eq!(classify("123@lid"), (None, Some("123".into())));
        assert_eq!(classify("123@g.us"), (None, None));
        assert_eq!(
            target_jid("+4917012345").as_deref(),
            Some("4917012345@s.whatsapp.net")
        );
        assert_eq!(target_jid("120363@g.us").as_deref(), Some("120363@g.us"));
        assert_eq!(target_jid("12 34"), None);
        assert_eq!(target_jid("@g.us"), None);
        assert_eq!(target_jid("a@b@c"), None);
        assert_eq!(target_jid(""), None);
    }

    #[test]
    fn files_are_sent_by_type() {
        assert_eq!(send_kind(mime_for(Path::new("a.PNG"))), "image");
        assert_eq!(send_kind(mime_for(Path::new("a.mp3"))), "audio");
        assert_eq!(send_kind(mime_for(Path::new("a.ogg"))), "document");
        assert_eq!(send_kind(mime_for(Path::new("report.pdf"))), "document");
        assert_eq!(extension_for("audio/ogg; codecs=opus"), ".ogg");
    }
}
