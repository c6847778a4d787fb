//! [`SignalChannel`]: the daemon's event stream, the access rules, and sending through its JSON-RPC.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, Heartbeat, InboundContext,
    PairingStore, read_attachment, safe_file_name, server_text, split_message,
};
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::settings::{Policy, id_variants};
use crate::style::{per_piece, to_signal};
use crate::{NAME, SignalSettings};

/// Bound of a JSON-RPC call and of the daemon's check.
const RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// The event stream is given up (and opened again by the manager) after this long without an event or the
/// daemon's keep-alive (sent every 15 s).
const STREAM_IDLE: Duration = Duration::from_secs(60);
/// Longest message sent, in characters (0.3.5's limit; signal-cli sends longer text as an attachment).
pub const MAX_MESSAGE_CHARS: usize = 64_000;
/// Largest attachment sent or received.
pub const MAX_ATTACHMENT_BYTES: u64 = 100 * 1024 * 1024;
/// The typing indicator is sent again this often while an answer is being made (Signal's lasts about 15 s).
const TYPING_REFRESH: Duration = Duration::from_secs(10);
/// The typing indicator is given up after this long without an answer.
const TYPING_FOR_AT_MOST: Duration = Duration::from_secs(600);
/// A group message is kept in the context at most this many characters long.
const CONTEXT_CHARS: usize = 200;
/// Longest SSE line taken (an event carries one envelope).
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The Signal channel. See the [crate docs](crate).
pub struct SignalChannel {
    settings: SignalSettings,
    attachments_dir: PathBuf,
    media_dir: PathBuf,
    dm_access: AccessControl,
    /// The bot account's ids (its number's forms, and its UUID once seen).
    me: Mutex<HashSet<String>>,
    /// Recent messages of each allowed group: (sender name, text).
    buffers: Mutex<HashMap<String, VecDeque<(String, String)>>>,
    client: OnceLock<reqwest::Client>,
    request_id: AtomicU64,
    typing: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    heartbeat: Heartbeat,
    streams: watch::Sender<u64>,
}

impl std::fmt::Debug for SignalChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalChannel")
            .field("settings", &self.settings)
            .field("attachments_dir", &self.attachments_dir)
            .finish_non_exhaustive()
    }
}

/// What a call to the daemon failed with.
#[derive(Debug)]
enum RpcError {
    /// The daemon could not be reached or answered HTTP errors.
    Unreachable(String),
    /// A JSON-RPC error: its code and message.
    Refused(i64, String),
}

impl RpcError {
    fn into_channel(self, what: &str) -> ChannelError {
        match self {
            Self::Unreachable(e) => ChannelError::transient(NAME, format!("{what}: {e}")),
            Self::Refused(-5, m) => {
                tracing::warn!(message = %m, "signal: rate limited by the Signal server");
                ChannelError::RateLimited {
                    channel: NAME.into(),
                    retry_after: None,
                }
            }
            // -1: the user's error (unregistered number, unknown group, bad attachment): retrying does not help.
            Self::Refused(code @ (-1 | -32602 | -32600 | -32601), m) => {
                ChannelError::rejected(NAME, format!("{what}: signal-cli refused it ({code}): {m}"))
            }
            Self::Refused(code, m) => {
                ChannelError::transient(NAME, format!("{what}: signal-cli error {code}: {m}"))
            }
        }
    }
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

/// Whether `chat_id` is a group's (base64, as 0.3.5 tells them apart).
fn is_group_id(chat_id: &str) -> bool {
    chat_id.contains('=') || (chat_id.len() > 40 && !chat_id.contains('-'))
}

/// The sender's ids in an envelope, each once: number, source, UUID and service ids.
fn sender_ids(envelope: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for key in [
        "sourceNumber",
        "source",
        "sourceUuid",
        "sourceServiceId",
        "sourceAci",
        "sourceACI",
    ] {
        if let Some(v) = envelope[key].as_str().map(str::trim).filter(|v| !v.is_empty())
            && !out.iter().any(|o| o == v)
        {
            out.push(v.to_owned());
        }
    }
    out
}

/// The id a chat with this sender is addressed by: a number if there is one, else the first id (a UUID).
fn primary_id(ids: &[String]) -> String {
    ids.iter()
        .find(|p| p.starts_with('+') || p.chars().all(|c| c.is_ascii_digit()))
        .or_else(|| ids.first())
        .cloned()
        .unwrap_or_default()
}

fn group_id(data: &Value) -> Option<String> {
    [&data["groupInfo"], &data["groupV2"]].into_iter().find_map(|g| {
        ["groupId", "id", "groupID"]
            .into_iter()
            .find_map(|k| g[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned))
    })
}

/// The ids a mention names (any field whose name says number, uuid, service id or aci, two levels deep).
fn mention_ids(mention: &Value) -> Vec<String> {
    fn walk(v: &Value, depth: usize, out: &mut Vec<String>) {
        let Some(map) = v.as_object().filter(|_| depth <= 2) else {
            return;
        };
        for (key, child) in map {
            let key = key.to_lowercase();
            match child {
                Value::String(s)
                    if !s.is_empty()
                        && ["number", "uuid", "serviceid", "aci"]
                            .iter()
                            .any(|t| key.contains(t)) =>
                {
                    out.push(s.clone());
                }
                Value::Object(_) => walk(child, depth + 1, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(mention, 0, &mut out);
    out.dedup();
    out
}

/// A mention's span, in UTF-16 units.
fn mention_span(mention: &Value) -> Option<(usize, usize)> {
    let start = usize::try_from(mention["start"].as_i64()?).ok()?;
    let length = usize::try_from(mention["length"].as_i64()?)
        .ok()
        .filter(|l| *l > 0)?;
    Some((start, length))
}

/// The text before UTF-16 offset `at` is blank.
fn blank_before(text: &str, at: usize) -> bool {
    let mut units = 0;
    for c in text.chars() {
        if units >= at {
            break;
        }
        if !c.is_whitespace() {
            return false;
        }
        units += c.len_utf16();
    }
    true
}

/// A leading mention placeholder (U+FFFC, U+FFFD or ESC followed by a blank or the end) when clients leave the
/// mention's details out: its span.
fn leading_placeholder(text: &str) -> Option<(usize, usize)> {
    let lead: usize = text
        .chars()
        .take_while(|c| c.is_whitespace())
        .map(char::len_utf16)
        .sum();
    let mut rest = text.trim_start().chars();
    let marker = rest.next()?;
    if !matches!(marker, '\u{FFFC}' | '\u{FFFD}' | '\u{1b}') {
        return None;
    }
    match rest.next() {
        Some(c) if !c.is_whitespace() => None,
        _ => Some((lead, 1)),
    }
}

/// `text` without the UTF-16 spans given, trimmed.
fn without_spans(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    spans.sort_unstable();
    spans.dedup();
    let mut kept = Vec::with_capacity(units.len());
    let mut at = 0;
    for (start, len) in spans {
        let start = start.clamp(at, units.len());
        kept.extend_from_slice(&units[at..start]);
        at = (start + len).min(units.len());
    }
    kept.extend_from_slice(&units[at..]);
    String::from_utf16_lossy(&kept).trim().to_owned()
}

/// One JSON-RPC call to the daemon at `url`; its `result`.
async fn call(
    client: &reqwest::Client,
    url: &str,
    id: Value,
    method: &str,
    params: Value,
) -> Result<Value, RpcError> {
    let request = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
    let resp = client
        .post(url)
        .timeout(RPC_TIMEOUT)
        .json(&request)
        .send()
        .await
        .map_err(|e| RpcError::Unreachable(format!("{url}: {}", e.without_url())))?;
    let status = resp.status().as_u16();
    let body = nanobot_channels::download::read_json(resp).await;
    if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
        let message = server_text(error["message"].as_str().unwrap_or("no message"), &[]);
        return Err(RpcError::Refused(error["code"].as_i64().unwrap_or(0), message));
    }
    if !(200..300).contains(&status) {
        return Err(RpcError::Unreachable(format!("{url}: HTTP {status}")));
    }
    Ok(body.get("result").cloned().unwrap_or(Value::Null))
}

impl SignalChannel {
    /// A channel with these settings that reads received attachments from `attachments_dir` (signal-cli's, when
    /// `attachmentsDir` is unset) and copies them into `<media_root>/signal/`. Without
    /// [`with_pairing`](Self::with_pairing), strangers' direct messages are ignored.
    pub fn new(
        settings: SignalSettings,
        attachments_dir: impl AsRef<Path>,
        media_root: impl AsRef<Path>,
    ) -> Self {
        let me = id_variants(&settings.phone_number).into_iter().collect();
        Self {
            dm_access: Self::access(&settings, None),
            attachments_dir: attachments_dir.as_ref().to_path_buf(),
            media_dir: media_root.as_ref().join(NAME),
            me: Mutex::new(me),
            buffers: Mutex::default(),
            client: OnceLock::new(),
            request_id: AtomicU64::new(0),
            typing: Mutex::default(),
            heartbeat: Heartbeat::new(),
            streams: watch::Sender::new(0),
            settings,
        }
    }

    fn access(settings: &SignalSettings, pairing: Option<Arc<PairingStore>>) -> AccessControl {
        let allowed: Vec<String> = match settings.dm_policy {
            Policy::Open => vec!["*".into()],
            Policy::Allowlist => settings
                .dm_allow_from
                .iter()
                .flat_map(|e| {
                    if e == "*" {
                        vec![e.clone()]
                    } else {
                        e.split('|').flat_map(id_variants).collect()
                    }
                })
                .collect(),
        };
        AccessControl::new(NAME, AllowList::new(&allowed), GroupPolicy::Open, pairing)
    }

    /// Issues pairing codes to strangers writing direct messages through `store`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.dm_access = Self::access(&self.settings, Some(store));
        self
    }

    /// Counts the event streams opened (after the daemon's check): a test waits for it.
    pub fn streams(&self) -> watch::Receiver<u64> {
        self.streams.subscribe()
    }

    fn client(&self) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let built = nanobot_channels::api_client(NAME, |b| {
            b.connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
        })?;
        Ok(self.client.get_or_init(|| built))
    }

    /// One JSON-RPC call; its `result`.
    async fn rpc(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let client = self.client().map_err(|e| RpcError::Unreachable(e.to_string()))?;
        let id = self.request_id.fetch_add(1, Ordering::Relaxed) + 1;
        call(client, &self.rpc_url(), json!(id), method, params).await
    }

    fn rpc_url(&self) -> String {
        format!("{}/api/v1/rpc", self.settings.base_url())
    }

    fn is_me(&self, id: &str) -> bool {
        let me = lock(&self.me);
        id_variants(id).iter().any(|v| me.contains(v))
    }

    /// Whether a group message is for the bot (0.3.5's rules): a mention naming the bot, a leading mention that
    /// names nobody, a leading placeholder without mention details, or the bot's number in the text.
    fn mentioned(&self, text: &str, mentions: &[Value]) -> bool {
        if mentions
            .iter()
            .any(|m| mention_ids(m).iter().any(|id| self.is_me(id)))
        {
            return true;
        }
        if mentions
            .iter()
            .filter(|m| mention_ids(m).is_empty())
            .filter_map(mention_span)
            .any(|(start, _)| blank_before(text, start))
        {
            return true;
        }
        if mentions.is_empty() && leading_placeholder(text).is_some() {
            return true;
        }
        id_variants(&self.settings.phone_number)
            .iter()
            .any(|n| !n.is_empty() && text.contains(n.as_str()))
    }

    /// `text` without the bot's mentions.
    fn strip_mentions(&self, text: &str, mentions: &[Value]) -> String {
        let mut spans: Vec<(usize, usize)> = mentions
            .iter()
            .filter_map(|m| {
                let span = mention_span(m)?;
                let ids = mention_ids(m);
                let mine =
                    ids.iter().any(|id| self.is_me(id)) || (ids.is_empty() && blank_before(text, span.0));
                mine.then_some(span)
            })
            .collect();
        if spans.is_empty()
            && let Some(span) = leading_placeholder(text)
        {
            spans.push(span);
        }
        without_spans(text, spans)
    }

    /// Keeps a group message as context; the context before it (the last `groupMessageBufferSize` messages).
    fn remember_in_group(&self, group: &str, name: &str, text: &str) -> Vec<(String, String)> {
        let mut buffers = lock(&self.buffers);
        if buffers.len() >= 1024 && !buffers.contains_key(group) {
            buffers.clear();
        }
        let buffer = buffers.entry(group.to_owned()).or_default();
        let before: Vec<(String, String)> = buffer.iter().cloned().collect();
        buffer.push_back((name.to_owned(), text.chars().take(CONTEXT_CHARS).collect()));
        while buffer.len() > self.settings.group_message_buffer_size {
            buffer.pop_front();
        }
        before
            .into_iter()
            .rev()
            .take(self.settings.group_message_buffer_size.saturating_sub(1))
            .rev()
            .collect()
    }

    /// Copies a received attachment out of signal-cli's directory into the media directory; its path.
    async fn take_attachment(&self, attachment: &Value) -> Result<(String, String), String> {
        let id = attachment["id"]
            .as_str()
            .filter(|i| !i.is_empty())
            .ok_or("an attachment without an id")?;
        let id_path = Path::new(id);
        let file_name = id_path
            .file_name()
            .filter(|_| id_path.parent().is_none_or(|p| p.as_os_str().is_empty()));
        let Some(file_name) = file_name else {
            return Err(format!("attachment id {id:?} is not a file name"));
        };
        let source = self.attachments_dir.join(file_name);
        let name = attachment["filename"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("attachment_{id}"), str::to_owned);
        let dest = self.media_dir.join(format!("signal_{}", safe_file_name(&name)));
        let size = tokio::fs::metadata(&source)
            .await
            .map_err(|e| {
                format!(
                    "{} ({e}; set channels.signal.attachmentsDir to signal-cli's)",
                    source.display()
                )
            })?
            .len();
        if size > MAX_ATTACHMENT_BYTES {
            return Err(format!("{name} is larger than {MAX_ATTACHMENT_BYTES} bytes"));
        }
        tokio::fs::create_dir_all(&self.media_dir)
            .await
            .map_err(|e| format!("{}: {e}", self.media_dir.display()))?;
        tokio::fs::copy(&source, &dest)
            .await
            .map_err(|e| format!("{} → {}: {e}", source.display(), dest.display()))?;
        let kind = attachment["contentType"].as_str().unwrap_or_default();
        let kind = match kind.split('/').next() {
            Some(k @ ("image" | "audio" | "video")) if kind.contains('/') => k,
            _ => "file",
        };
        Ok((dest.display().to_string(), kind.to_owned()))
    }

    /// One `receive` event.
    async fn handle(&self, bus: &Arc<dyn Bus>, event: &Value) -> Result<(), ChannelError> {
        let envelope = &event["envelope"];
        if !envelope.is_object() {
            return Ok(());
        }
        let ids = sender_ids(envelope);
        if ids.is_empty() {
            return Ok(());
        }
        if ids.iter().any(|id| self.is_me(id)) {
            let mut me = lock(&self.me);
            for id in &ids {
                me.extend(id_variants(id));
            }
        }
        let data = &envelope["dataMessage"];
        if envelope["receiptMessage"].is_object() || !data.is_object() || !data["reaction"].is_null() {
            return Ok(());
        }
        let text = data["message"].as_str().unwrap_or_default();
        let attachments: Vec<Value> = data["attachments"].as_array().cloned().unwrap_or_default();
        if text.is_empty() && attachments.is_empty() {
            return Ok(());
        }
        let number = primary_id(&ids);
        let sender = ids.join("|");
        let name = envelope["sourceName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(&number)
            .to_owned();
        let mentions: Vec<Value> = data["mentions"].as_array().cloned().unwrap_or_default();
        let is_group = data["groupInfo"].is_object() || data["groupV2"].is_object();
        let group = group_id(data);
        let mut content = Vec::new();
        let chat_id = if is_group {
            let chat = group.clone().unwrap_or_else(|| number.clone());
            let s = &self.settings;
            let listed = s.group_allow_from.iter().any(|g| g == "*" || *g == chat);
            if !s.group_enabled || (s.group_policy == Policy::Allowlist && !listed) {
                tracing::debug!(group = %chat, "signal: a message of a group not answered was ignored");
                return Ok(());
            }
            let before = self.remember_in_group(&chat, &name, text);
            let command = text.trim_start().starts_with('/');
            if s.group_require_mention && !command && !self.mentioned(text, &mentions) {
                return Ok(());
            }
            if !before.is_empty() {
                let lines: Vec<String> = before.iter().map(|(n, t)| format!("{n}: {t}")).collect();
                content.push(format!(
                    "[Recent group messages for context:]\n{}\n---",
                    lines.join("\n")
                ));
            }
            if !text.is_empty() {
                content.push(format!("[{name}]: {}", self.strip_mentions(text, &mentions)));
            }
            chat
        } else {
            if !self.settings.dm_enabled {
                return Ok(());
            }
            let label: Vec<String> = ids.iter().flat_map(|id| id_variants(id)).collect();
            match self.dm_access.check(&InboundContext {
                sender_id: &label.join("|"),
                chat_id: &number,
                is_group: false,
                mentioned: true,
                text,
            })? {
                AccessDecision::Allow => {}
                AccessDecision::PairingRequired(request) => {
                    return self.say(&number, &AccessControl::pairing_message(&request)).await;
                }
                AccessDecision::Handled { reply } => return self.say(&number, &reply).await,
                _ => return Ok(()),
            }
            if !text.is_empty() {
                content.push(text.to_owned());
            }
            number.clone()
        };
        let mut media = Vec::new();
        for attachment in &attachments {
            let shown = attachment["filename"]
                .as_str()
                .or_else(|| attachment["id"].as_str())
                .unwrap_or("attachment");
            match self.take_attachment(attachment).await {
                Ok((path, kind)) => {
                    content.push(format!("[{kind}: {path}]"));
                    media.push(path);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "signal: an attachment could not be read");
                    content.push(format!("[attachment: {shown} - not found]"));
                }
            }
        }
        let content = if content.is_empty() {
            "[empty message]".to_owned()
        } else {
            content.join("\n")
        };
        self.start_typing(&chat_id);
        let mut inbound = InboundMessage::new(NAME, sender, chat_id, content)
            .with_metadata("timestamp", data["timestamp"].clone())
            .with_metadata("sender_name", envelope["sourceName"].clone())
            .with_metadata("sender_number", json!(number))
            .with_metadata("is_group", json!(is_group))
            .with_metadata("group_id", json!(group))
            .with_metadata(nanobot_bus::META_IS_GROUP, is_group);
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// The recipient of a chat as signal-cli's `send` takes it.
    fn recipient(chat_id: &str) -> Value {
        if is_group_id(chat_id) {
            json!({"groupId": chat_id})
        } else {
            json!({"recipient": [chat_id]})
        }
    }

    /// Sends plain `text` (a pairing code, a command's answer) to a chat.
    async fn say(&self, chat_id: &str, text: &str) -> Result<(), ChannelError> {
        let mut params = Self::recipient(chat_id);
        params["message"] = json!(text);
        self.rpc("send", params)
            .await
            .map(|_| ())
            .map_err(|e| e.into_channel("send"))
    }

    /// Shows "typing…" in the chat until the answer is sent (refreshed, bounded).
    fn start_typing(&self, chat_id: &str) {
        let Ok(client) = self.client() else {
            return;
        };
        let (client, url) = (client.clone(), self.rpc_url());
        let params = if is_group_id(chat_id) {
            json!({"groupId": chat_id})
        } else {
            json!({"recipient": chat_id})
        };
        let task = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            while started.elapsed() < TYPING_FOR_AT_MOST {
                if let Err(e) = call(&client, &url, json!("typing"), "sendTyping", params.clone()).await {
                    tracing::debug!(error = ?e, "signal: typing indicator not sent");
                }
                tokio::time::sleep(TYPING_REFRESH).await;
            }
        });
        if let Some(old) = lock(&self.typing).insert(chat_id.to_owned(), task.abort_handle()) {
            old.abort();
        }
    }

    fn stop_typing(&self, chat_id: &str) {
        if let Some(task) = lock(&self.typing).remove(chat_id) {
            task.abort();
        }
    }

    /// The check, then the event stream until it ends.
    async fn connection(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        let client = self.client()?;
        let base = self.settings.base_url();
        let hint = format!(
            "is `signal-cli -a {} daemon --http {}:{}` running? (channels.signal.daemonHost, daemonPort)",
            self.settings.phone_number, self.settings.daemon_host, self.settings.daemon_port
        );
        let check = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = client.get(format!("{base}/api/v1/check")).timeout(RPC_TIMEOUT).send() => r,
        };
        match check {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                return Err(transient(format!(
                    "{base}/api/v1/check: HTTP {}; {hint}",
                    r.status().as_u16()
                )));
            }
            Err(e) => {
                return Err(transient(format!(
                    "{base}/api/v1/check: {}; {hint}",
                    e.without_url()
                )));
            }
        }
        if let Err(e) = self
            .rpc("updateConfiguration", json!({"typingIndicators": true}))
            .await
        {
            tracing::warn!(error = ?e, "signal: typing indicators could not be turned on");
        }
        let resp = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = client.get(format!("{base}/api/v1/events")).header("Accept", "text/event-stream").send() => r,
        }
        .map_err(|e| transient(format!("{base}/api/v1/events: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(transient(format!(
                "{base}/api/v1/events: HTTP {}",
                resp.status().as_u16()
            )));
        }
        tracing::info!(account = %self.settings.phone_number, "signal: receiving from signal-cli");
        self.streams.send_modify(|n| *n += 1);
        let mut resp = resp;
        let mut pending: Vec<u8> = Vec::new();
        let mut data: Vec<String> = Vec::new();
        loop {
            let chunk = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                c = tokio::time::timeout(STREAM_IDLE, resp.chunk()) => c,
            };
            let chunk = match chunk {
                Err(_) => {
                    return Err(transient(format!(
                        "no event or keep-alive from signal-cli for {STREAM_IDLE:?}"
                    )));
                }
                Ok(Err(e)) => {
                    return Err(transient(format!(
                        "the event stream was lost: {}",
                        e.without_url()
                    )));
                }
                Ok(Ok(None)) => return Err(transient("signal-cli ended the event stream")),
                Ok(Ok(Some(c))) => c,
            };
            self.heartbeat.beat();
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    if !data.is_empty() {
                        let payload = data.join("\n");
                        data.clear();
                        match serde_json::from_str::<Value>(&payload) {
                            Ok(event) => {
                                if let Err(e) = self.handle(bus, &event).await {
                                    if matches!(e, ChannelError::Bus(_)) {
                                        return Err(e);
                                    }
                                    tracing::warn!(error = %e, "signal: an event was not handled");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "signal: an event that is not JSON was ignored")
                            }
                        }
                    }
                } else if let Some(rest) = line.strip_prefix("data:") {
                    data.push(rest.strip_prefix(' ').unwrap_or(rest).to_owned());
                }
            }
            if pending.len() > MAX_LINE_BYTES || data.iter().map(String::len).sum::<usize>() > MAX_LINE_BYTES
            {
                return Err(transient("signal-cli sent an event larger than 4 MiB"));
            }
        }
    }

    /// The files of an answer as data URIs signal-cli takes (so a daemon on another machine gets them too).
    async fn attachments(&self, media: &[String]) -> Result<Vec<String>, ChannelError> {
        let mut out = Vec::new();
        for path in media {
            let file = Path::new(path);
            let bytes = read_attachment(file, MAX_ATTACHMENT_BYTES)
                .await
                .map_err(|e| ChannelError::rejected(NAME, e.to_string()))?;
            let name = file
                .file_name()
                .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
            let kind = mime_of(&name);
            let name = percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC);
            out.push(format!(
                "data:{kind};filename={name};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ));
        }
        Ok(out)
    }
}

/// A MIME type by file extension (what Signal shows the file as).
fn mime_of(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "ogg" | "oga" => "audio/ogg",
        "pdf" => "application/pdf",
        "txt" | "md" => "text/plain",
        _ => "application/octet-stream",
    }
}

#[async_trait]
impl Channel for SignalChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One connection to the daemon until its event stream ends: a daemon that is not there or goes away is
    /// reported (`Transient`) and the manager connects again with its backoff.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        self.connection(&bus, &cancel).await
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        Some(self.heartbeat.clone())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let chat = msg.chat_id.trim();
        if chat.is_empty() {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        let final_answer = matches!(msg.kind, OutboundKind::Reply | OutboundKind::StreamEnd { .. });
        let result = async {
            let (text, ranges) = to_signal(&msg.content);
            let attachments = self.attachments(&msg.media).await?;
            if text.is_empty() && attachments.is_empty() {
                return Ok(());
            }
            let pieces = if text.is_empty() {
                vec![String::new()]
            } else {
                split_message(&text, MAX_MESSAGE_CHARS)
            };
            let styles = per_piece(&text, &pieces, &ranges);
            let mut attachments = Some(attachments).filter(|a| !a.is_empty());
            for (piece, styles) in pieces.iter().zip(styles) {
                let mut params = Self::recipient(chat);
                params["message"] = json!(piece);
                if !styles.is_empty() {
                    params["textStyle"] =
                        json!(styles.iter().map(crate::style::Range::param).collect::<Vec<_>>());
                }
                if let Some(a) = attachments.take() {
                    params["attachments"] = json!(a);
                }
                self.rpc("send", params)
                    .await
                    .map_err(|e| e.into_channel("send"))?;
            }
            Ok(())
        }
        .await;
        if final_answer {
            self.stop_typing(chat);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chats_are_told_apart_and_senders_named_as_0_3_5_does() {
        assert!(is_group_id("aGVsbG8gd29ybGQgZ3JvdXAgaWQgMzIgYnl0ZXMhIQ=="));
        assert!(!is_group_id("+15550001111"));
        assert!(!is_group_id("5a3c1e2b-0000-4000-8000-1234567890ab"));
        let env = json!({"sourceNumber": "+1555", "source": "+1555", "sourceUuid": "uuid-1"});
        assert_eq!(sender_ids(&env), ["+1555", "uuid-1"]);
        assert_eq!(primary_id(&sender_ids(&env)), "+1555");
        assert_eq!(primary_id(&["uuid-2".to_owned()]), "uuid-2");
        assert_eq!(
            group_id(&json!({"groupInfo": {"groupId": "g=="}})).as_deref(),
            Some("g==")
        );
        assert_eq!(group_id(&json!({"groupV2": {"id": "v2"}})).as_deref(), Some("v2"));
    }

    #[test]
    fn mentions_are_found_and_taken_out_by_utf16_span() {
        let s = SignalSettings::from_block(&json!({"phoneNumber": "+15550001111"})).unwrap();
        let c = SignalChannel::new(s, "/nonexistent", "/nonexistent");
        let text = "\u{FFFC} what now?";
        let mine = json!({"number": "+15550001111", "uuid": "u-bot", "start": 0, "length": 1});
        assert!(c.mentioned(text, std::slice::from_ref(&mine)));
        assert_eq!(c.strip_mentions(text, std::slice::from_ref(&mine)), "what now?");
        let other = json!({"number": "+19990000000", "uuid": "u-x", "start": 0, "length": 1});
        assert!(!c.mentioned(text, std::slice::from_ref(&other)));
        assert!(
            c.mentioned("\u{FFFC} hi", &[]),
            "a leading placeholder without details"
        );
        assert!(c.mentioned("ping 15550001111", &[]), "the number in the text");
        assert!(!c.mentioned("hello all", &[]));
        let emoji = "😀 \u{FFFC} x";
        let later = json!({"uuid": "u-bot", "start": 3, "length": 1});
        c.me.lock().unwrap().insert("u-bot".into());
        assert_eq!(c.strip_mentions(emoji, &[later]), "😀  x");
        assert_eq!(mime_of("a.PNG"), "image/png");
    }
}
