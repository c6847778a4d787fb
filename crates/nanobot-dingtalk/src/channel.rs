//! [`DingTalkChannel`]: the Stream connection, access control and sending.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::{RemoteMedia, SsrfGuard};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, safe_file_name, split_message,
};
use nanobot_util::ErrorChain;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::api::{Api, BOT_TOPIC};
use crate::outbound::{Kind, Payload, Source, mime_of};
use crate::{DingTalkSettings, NAME};

/// Prefix of group chat ids (`group:<openConversationId>`); other chat ids are users' staff ids.
pub const GROUP_PREFIX: &str = "group:";
/// Metadata key: the sender's display name (group replies are headed with it).
pub const META_SENDER_NAME: &str = "sender_name";

/// Message ids remembered against redelivery.
const SEEN_CAPACITY: usize = 1000;
/// Longest piece of Markdown in one message.
const PIECE_LIMIT: usize = 4000;
/// Bound of the WebSocket handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The server pings about every 10 s; a connection silent for this long is considered dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(120);
/// The notice a direct message gets under `disablePrivateChat`.
const PRIVATE_CHAT_DISABLED: &str =
    "私聊已关闭，请在群聊中 @ 我。(Private chat is turned off for this bot: please mention me in a group.)";

/// The DingTalk channel. See the [crate docs](crate).
pub struct DingTalkChannel {
    settings: DingTalkSettings,
    access: AccessControl,
    media_dir: PathBuf,
    api: Api,
    seen: nanobot_channels::RecentIds,
    handled: watch::Sender<u64>,
    connections: watch::Sender<u64>,
    /// Fetches remote attachments before uploading them.
    remote: RemoteMedia,
}

impl std::fmt::Debug for DingTalkChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DingTalkChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

enum Ended {
    Cancelled,
    Dropped(String),
}

/// A received robot message, as far as the channel needs it.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    msg_id: String,
    sender: String,
    sender_name: String,
    group: bool,
    conversation_id: String,
    mentioned: bool,
    msg_type: String,
    text: String,
    /// `(downloadCode, file name)` of attached pictures and files.
    files: Vec<(String, String)>,
}

fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

impl Received {
    fn from_data(d: &Value) -> Option<Self> {
        let sender = [s(d, "senderStaffId"), s(d, "senderId")]
            .into_iter()
            .find(|x| !x.is_empty())?;
        let conversation_id = [s(d, "conversationId"), s(d, "openConversationId")]
            .into_iter()
            .find(|x| !x.is_empty())
            .unwrap_or_default();
        let msg_type = s(d, "msgtype");
        let content = d.get("content").cloned().unwrap_or(Value::Null);
        let mut text = d["text"]["content"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        if text.is_empty() {
            text = content["recognition"]
                .as_str()
                .unwrap_or_default()
                .trim()
                .to_string();
        }
        let mut files = Vec::new();
        match msg_type.as_str() {
            "picture" => {
                if let Some(code) = content["downloadCode"].as_str() {
                    files.push((code.to_string(), "image.jpg".to_string()));
                }
            }
            "file" => {
                if let Some(code) = content["downloadCode"].as_str().or(d["downloadCode"].as_str()) {
                    let name = content["fileName"].as_str().unwrap_or("file");
                    files.push((code.to_string(), name.to_string()));
                }
            }
            "richText" => {
                for item in content["richText"].as_array().into_iter().flatten() {
                    let t = item["text"].as_str().unwrap_or_default().trim();
                    if !t.is_empty() {
                        let t = match item["type"].as_str().unwrap_or_default() {
                            "bold" => format!("**{t}**"),
                            "italic" => format!("*{t}*"),
                            "inlineCode" => format!("`{t}`"),
                            "pre" => format!("```\n{t}\n```"),
                            _ => t.to_string(),
                        };
                        text = if text.is_empty() { t } else { format!("{text} {t}") };
                    }
                    if let Some(code) = item["downloadCode"].as_str() {
                        let name = item["fileName"].as_str().unwrap_or("file");
                        files.push((code.to_string(), name.to_string()));
                    }
                }
            }
            _ => {}
        }
        let group = d["conversationType"].as_str() == Some("2") && !conversation_id.is_empty();
        Some(Self {
            msg_id: s(d, "msgId"),
            sender,
            sender_name: d["senderNick"].as_str().unwrap_or("Unknown").to_string(),
            group,
            conversation_id,
            // DingTalk delivers group messages to a robot only when it is @mentioned, unless the app may read
            // every group message; `isInAtList: false` says it was not mentioned.
            mentioned: d["isInAtList"].as_bool().unwrap_or(true),
            msg_type,
            text,
            files,
        })
    }
}

/// Escapes Markdown in a display name put into a heading.
fn escape_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().filter(|c| !c.is_control()) {
        if "\\`*_{}[]()#+-.!|<>~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl DingTalkChannel {
    /// A channel with these settings that stores downloaded files under `<media_dir>/dingtalk/`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: DingTalkSettings, media_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let api = Api::new(
            settings.api_url.clone(),
            settings.oapi_url.clone(),
            settings.client_id.clone(),
            settings.client_secret.clone(),
        )?;
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Mention,
            None,
        );
        let remote = Self::remote_media(&settings, SsrfGuard::default());
        Ok(Self {
            settings,
            access,
            media_dir: media_dir.into(),
            api,
            seen: nanobot_channels::RecentIds::new(SEEN_CAPACITY),
            handled: watch::Sender::new(0),
            connections: watch::Sender::new(0),
            remote,
        })
    }

    /// Checks remote attachments (URLs the agent sends that DingTalk does not fetch itself) with `guard` (the
    /// gateway passes one with `tools.ssrfWhitelist`). Without it, internal addresses are refused.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.remote = Self::remote_media(&self.settings, guard);
        self
    }

    fn remote_media(settings: &DingTalkSettings, guard: SsrfGuard) -> RemoteMedia {
        RemoteMedia::new(guard).with_redirects(
            settings.allow_remote_media_redirects,
            &settings.remote_media_redirect_allowed_hosts,
        )
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

    /// Counts the frames the receive loop has finished with (callbacks handled, ignored or duplicate; pings).
    pub fn handled_frames(&self) -> watch::Receiver<u64> {
        self.handled.subscribe()
    }

    /// Counts the Stream connections opened so far.
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    fn first_sighting(&self, id: &str) -> bool {
        self.seen.first_sighting(id)
    }

    async fn session(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<Ended, ChannelError> {
        let url = self.api.open_connection().await?;
        // Through reqwest's upgrade: the ticket in the URL is never logged (tungstenite's handshake logs it).
        let client = nanobot_channels::ws::upgrade_client(NAME, CONNECT_TIMEOUT, false)?;
        let target = nanobot_channels::ws::Upgrade {
            url: url.as_str(),
            bearer: None,
            timeout: CONNECT_TIMEOUT,
            url_key: "the Stream endpoint",
            credential_key: None,
        };
        let mut ws = tokio::select! {
            () = cancel.cancelled() => return Ok(Ended::Cancelled),
            r = nanobot_channels::ws::connect(NAME, &client, &target) => r?,
        };
        self.connections.send_modify(|n| *n += 1);
        tracing::info!("dingtalk: stream connected");
        let mut last_rx = Instant::now();
        let mut check = tokio::time::interval(SILENCE_LIMIT / 4);
        check.tick().await;
        loop {
            let text = tokio::select! {
                () = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return Ok(Ended::Cancelled);
                }
                _ = check.tick() => {
                    if last_rx.elapsed() > SILENCE_LIMIT {
                        return Ok(Ended::Dropped("no frame from the server for two minutes".into()));
                    }
                    continue;
                }
                msg = ws.next() => match msg {
                    None | Some(Ok(Ws::Close(_))) => return Ok(Ended::Dropped("closed by the server".into())),
                    Some(Err(e)) => return Ok(Ended::Dropped(e.to_string())),
                    Some(Ok(Ws::Text(t))) => { last_rx = Instant::now(); t.to_string() }
                    Some(Ok(_)) => { last_rx = Instant::now(); continue; }
                },
            };
            let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                tracing::warn!("dingtalk: frame is not JSON; ignored");
                continue;
            };
            let kind = frame["type"].as_str().unwrap_or_default();
            let headers = &frame["headers"];
            let topic = headers["topic"].as_str().unwrap_or_default();
            let message_id = headers["messageId"].as_str().unwrap_or_default();
            let data = frame["data"].as_str().unwrap_or_default();
            let ack_data = match (kind, topic) {
                ("SYSTEM", _) => data.to_string(),
                _ => json!({"response": "OK"}).to_string(),
            };
            let ack = json!({
                "code": 200,
                "headers": {"messageId": message_id, "contentType": "application/json"},
                "message": "OK",
                "data": ack_data,
            });
            if let Err(e) = ws.send(Ws::Text(ack.to_string().into())).await {
                return Ok(Ended::Dropped(format!("acknowledgement failed: {e}")));
            }
            if kind == "SYSTEM" && topic == "disconnect" {
                self.handled.send_modify(|n| *n += 1);
                let _ = ws.close(None).await;
                return Ok(Ended::Dropped("the server asked to reconnect".into()));
            }
            if kind == "CALLBACK" && topic == BOT_TOPIC {
                let result = match serde_json::from_str::<Value>(data) {
                    Ok(d) => self.handle(bus, message_id, &d).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "dingtalk: callback data is not JSON");
                        Ok(())
                    }
                };
                if let Err(e) = result {
                    if matches!(e, ChannelError::Bus(_)) {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "dingtalk: could not handle a message");
                }
            }
            self.handled.send_modify(|n| *n += 1);
        }
    }

    async fn handle(&self, bus: &Arc<dyn Bus>, frame_id: &str, d: &Value) -> Result<(), ChannelError> {
        let Some(msg) = Received::from_data(d) else {
            tracing::warn!("dingtalk: message without a sender ignored");
            return Ok(());
        };
        let id = if msg.msg_id.is_empty() {
            frame_id
        } else {
            &msg.msg_id
        };
        if !self.first_sighting(id) {
            tracing::debug!(message = %id, "dingtalk: duplicate delivery ignored");
            return Ok(());
        }
        let chat_id = if msg.group {
            format!("{GROUP_PREFIX}{}", msg.conversation_id)
        } else {
            msg.sender.clone()
        };
        if !msg.group && self.settings.disable_private_chat {
            return self.send_markdown(&chat_id, PRIVATE_CHAT_DISABLED).await;
        }
        let decision = self.access.check(&InboundContext {
            sender_id: &msg.sender,
            chat_id: &chat_id,
            is_group: msg.group,
            mentioned: msg.mentioned,
            text: &msg.text,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                return self
                    .send_markdown(&chat_id, &AccessControl::pairing_message(&request))
                    .await;
            }
            AccessDecision::Handled { reply } => return self.send_markdown(&chat_id, &reply).await,
            _ => return Ok(()),
        }
        let mut content = msg.text.clone();
        let mut media = Vec::new();
        for (code, name) in &msg.files {
            if let Some(path) = self.receive(code, name, &msg.sender).await {
                media.push(path);
            }
        }
        if !media.is_empty() {
            if content.is_empty() {
                content = if msg.msg_type == "picture" {
                    "[Image]"
                } else {
                    "[File]"
                }
                .to_string();
            }
            let list: Vec<String> = media.iter().map(|p| format!("- {p}")).collect();
            content = format!("{content}\n\nReceived files:\n{}", list.join("\n"));
        }
        if content.is_empty() {
            tracing::debug!(kind = %msg.msg_type, "dingtalk: empty or unsupported message ignored");
            return Ok(());
        }
        let mut inbound = InboundMessage::new(NAME, msg.sender.clone(), chat_id, content)
            .with_metadata(META_SENDER_NAME, msg.sender_name.clone())
            .with_metadata("platform", "dingtalk")
            .with_metadata("conversation_type", if msg.group { "2" } else { "1" })
            .with_metadata("is_group", msg.group);
        if msg.group && self.settings.group_user_isolation {
            inbound = inbound.with_session_key(format!(
                "{NAME}:{GROUP_PREFIX}{}:{}",
                msg.conversation_id, msg.sender
            ));
        }
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Downloads a received file into `<media>/dingtalk/`; `None` (logged) when it fails.
    async fn receive(&self, code: &str, name: &str, sender: &str) -> Option<String> {
        let dir = self.media_dir.join(NAME);
        let unique: String = code
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(16)
            .collect();
        let path = dir.join(format!(
            "{}_{}_{}",
            safe_file_name(sender),
            safe_file_name(&unique),
            safe_file_name(name)
        ));
        let result = self.api.download(code, &path, self.settings.max_file_bytes).await;
        match result {
            Ok(_) => Some(path.display().to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "dingtalk: download failed");
                None
            }
        }
    }

    /// One robot message (`msgKey` and its `msgParam`) to a user (`oToMessages/batchSend`) or a group
    /// (`groupMessages/send`).
    async fn send_robot(&self, chat_id: &str, key: &str, param: &Value) -> Result<(), ChannelError> {
        let param = param.to_string();
        let (path, mut body) = match chat_id.strip_prefix(GROUP_PREFIX) {
            Some(conversation) => (
                "/v1.0/robot/groupMessages/send",
                json!({"robotCode": self.api.robot_code(), "openConversationId": conversation}),
            ),
            None => (
                "/v1.0/robot/oToMessages/batchSend",
                json!({"robotCode": self.api.robot_code(), "userIds": [chat_id]}),
            ),
        };
        body["msgKey"] = key.into();
        body["msgParam"] = param.into();
        self.api.call(path, &body).await.map(drop)
    }

    /// One Markdown robot message to a user or a group.
    async fn send_markdown(&self, chat_id: &str, text: &str) -> Result<(), ChannelError> {
        self.send_robot(
            chat_id,
            "sampleMarkdown",
            &json!({"text": text, "title": "Nanobot Reply"}),
        )
        .await
    }

    /// Sends one attachment: an image URL as a picture DingTalk fetches itself; a file uploaded (within DingTalk's
    /// size limit of its type, HTML zipped) and sent as a picture (an image; as a file if DingTalk refuses that) or
    /// as a file. An error means it did not go.
    async fn send_attachment(&self, chat_id: &str, source: &Source) -> Result<(), ChannelError> {
        let kind = source.kind();
        let max = kind.max_bytes();
        let (data, file_name, content_type) = match source {
            Source::Remote(url) => {
                if kind == Kind::Image {
                    let param = json!({"photoURL": url.as_str()});
                    match self.send_robot(chat_id, "sampleImageMsg", &param).await {
                        Ok(()) => return Ok(()),
                        Err(e) => tracing::warn!(
                            error = %ErrorChain(&e),
                            "dingtalk: image URL message refused; trying to upload the image instead"
                        ),
                    }
                }
                let (data, mime) = self.fetch_remote(url, max).await?;
                (data, source.file_name(), mime)
            }
            Source::Local(path) => {
                let data = nanobot_channels::read_attachment(path, max)
                    .await
                    .map_err(|e| ChannelError::rejected(NAME, e.to_string()))?;
                let name = source.file_name();
                let mime = mime_of(&name).map(str::to_string);
                (data, name, mime)
            }
        };
        let too_big = |n: usize| {
            ChannelError::rejected(
                NAME,
                format!(
                    "{n} bytes exceed DingTalk's {max}-byte limit of a {} upload",
                    kind.as_str()
                ),
            )
        };
        if data.len() as u64 > max {
            return Err(too_big(data.len()));
        }
        let payload =
            tokio::task::spawn_blocking(move || Payload::new(data, file_name, content_type.as_deref()))
                .await
                .map_err(|e| ChannelError::transient(NAME, format!("file preparation task failed: {e}")))??;
        if payload.data.len() as u64 > max {
            return Err(too_big(payload.data.len()));
        }
        let media_id = self
            .api
            .upload(
                kind.as_str(),
                &payload.file_name,
                &payload.mime,
                payload.data.into(),
            )
            .await?;
        if kind == Kind::Image {
            match self
                .send_robot(chat_id, "sampleImageMsg", &json!({"photoURL": media_id}))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) => tracing::warn!(
                    error = %ErrorChain(&e),
                    file = %payload.file_name,
                    "dingtalk: picture message refused; sending the image as a file"
                ),
            }
        }
        let param =
            json!({"mediaId": media_id, "fileName": payload.file_name, "fileType": payload.file_type});
        self.send_robot(chat_id, "sampleFile", &param).await
    }

    /// Fetches a remote attachment (not an image URL DingTalk fetches itself) for upload, at most `max` bytes,
    /// behind the SSRF guard and with the redirect rules of `allowRemoteMediaRedirects` and
    /// `remoteMediaRedirectAllowedHosts`: its bytes and content type.
    async fn fetch_remote(
        &self,
        url: &url::Url,
        max: u64,
    ) -> Result<(Vec<u8>, Option<String>), ChannelError> {
        let fetched = self
            .remote
            .clone()
            .with_max_bytes(max)
            .fetch(NAME, url.as_str())
            .await?;
        if fetched.bytes.is_empty() {
            return Err(ChannelError::rejected(NAME, "the remote file is empty"));
        }
        Ok((fetched.bytes, fetched.content_type))
    }
}

/// The name shown for an attachment reference nothing else could be made of.
fn file_label(reference: &str) -> String {
    let reference = reference.trim();
    reference
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or(reference)
        .to_string()
}

#[async_trait]
impl Channel for DingTalkChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One stream connection until it ends: a dropped connection (or the server's request to reconnect) is
    /// reported (`Transient`) and the manager connects again with its backoff; refused credentials stop the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        match self.session(&bus, &cancel).await? {
            Ended::Cancelled => Ok(()),
            Ended::Dropped(why) => Err(ChannelError::transient(
                NAME,
                format!("stream connection ended: {why}"),
            )),
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        let target = chat.strip_prefix(GROUP_PREFIX).unwrap_or(chat);
        if target.is_empty() || target.contains(char::is_whitespace) {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let mut text = msg.content.trim().to_string();
        let name = msg
            .metadata
            .get(META_SENDER_NAME)
            .and_then(Value::as_str)
            .map(escape_name)
            .filter(|n| !n.is_empty());
        if !text.is_empty() {
            if chat.starts_with(GROUP_PREFIX)
                && let Some(name) = name
            {
                text = format!("# @{name}\n\n{text}");
            }
            for piece in split_message(&text, PIECE_LIMIT) {
                self.send_markdown(chat, &piece).await?;
            }
        }
        for reference in &msg.media {
            if reference.trim().is_empty() {
                continue;
            }
            let source = Source::parse(reference);
            let result = match &source {
                Some(source) => self.send_attachment(chat, source).await,
                None => Err(ChannelError::rejected(
                    NAME,
                    "not a local path, file:// or http(s) URL",
                )),
            };
            if let Err(e) = result {
                // The chat sees that a file is missing; the next attachments still go.
                let name = source.map_or_else(|| file_label(reference), |s| s.file_name());
                tracing::warn!(file = %name, error = %ErrorChain(&e), "dingtalk: attachment not sent");
                self.send_markdown(chat, &format!("[Attachment send failed: {name}]"))
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_robot_messages() {
        let d = json!({"msgId": "m1", "senderStaffId": "staff1", "senderNick": "Al", "conversationType": "2",
            "conversationId": "cid1", "isInAtList": true, "msgtype": "text", "text": {"content": " hi "}});
        let r = Received::from_data(&d).unwrap();
        assert!(r.group && r.mentioned);
        assert_eq!((r.sender.as_str(), r.text.as_str()), ("staff1", "hi"));
        let rich = json!({"senderId": "$:x", "conversationType": "1", "msgtype": "richText", "content": {"richText": [
            {"text": "look"}, {"text": "here", "type": "bold"}, {"downloadCode": "dc1", "fileName": "a.png"}]}});
        let r = Received::from_data(&rich).unwrap();
        assert!(!r.group);
        assert_eq!(r.text, "look **here**");
        assert_eq!(r.files, [("dc1".to_string(), "a.png".to_string())]);
        assert!(
            Received::from_data(&json!({"msgtype": "text"})).is_none(),
            "no sender"
        );
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape_name("a*b_[c]\n"), "a\\*b\\_\\[c\\]");
    }
}
