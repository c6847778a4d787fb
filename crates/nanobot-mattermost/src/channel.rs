//! [`MattermostChannel`]: the WebSocket events, the REST calls, access control and sending.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, read_attachment, safe_file_name, server_text, split_message,
};
use nanobot_util::lock;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

use crate::settings::{ChannelPolicy, MAX_FILE_BYTES, MAX_POST_CHARS, MatchMode};
use crate::{MattermostSettings, NAME};

/// Bound of every REST call.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of the WebSocket connection and upgrade.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Threads whose context was already given (each once), and users and channels looked up, kept at most.
const REMEMBERED: usize = 4096;
/// A thread post's text is cut at this many characters in the context.
const CONTEXT_POST_CHARS: usize = 500;
/// Metadata key of the Mattermost details of an inbound message (`post_id`, `root_id`, `channel_type`,
/// `thread_ts`), as 0.3.5 names it.
pub const META_MATTERMOST: &str = "mattermost";
/// Metadata key of the post id an inbound message came from.
pub const META_MESSAGE_ID: &str = "message_id";

/// The Mattermost channel. See the [crate docs](crate).
pub struct MattermostChannel {
    settings: MattermostSettings,
    /// Direct messages: `allowFrom` and `dm.allowFrom` (or `dm.allowFrom` alone), strangers paired.
    dm_access: AccessControl,
    /// Channel posts: `allowFrom`.
    channel_access: AccessControl,
    media_dir: PathBuf,
    http: Mutex<Option<reqwest::Client>>,
    /// The bot's own user id and username (`GET /users/me`).
    me: Mutex<Option<(String, String)>>,
    /// Usernames and e-mail addresses of users, by id (for `allowFromMatchMode`).
    users: Mutex<HashMap<String, Value>>,
    /// Channel details (`type`, `team_id`) by id.
    channels: Mutex<HashMap<String, Value>>,
    /// Threads whose context was given.
    contexts: Mutex<HashSet<String>>,
    connections: watch::Sender<u64>,
}

impl std::fmt::Debug for MattermostChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MattermostChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

/// `"D"` → `dm` and the others as 0.3.5 names them.
fn channel_type(code: &str) -> &'static str {
    match code {
        "D" => "dm",
        "P" => "private",
        "G" => "group",
        _ => "public",
    }
}

/// Whether `text` @mentions `username` (not inside a longer name or an address).
fn mentions(text: &str, username: &str) -> bool {
    if username.is_empty() {
        return false;
    }
    let needle = format!("@{username}");
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '@';
    text.match_indices(&needle).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + needle.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// `text` without `@username` and the blanks after it, trimmed.
fn strip_mention(text: &str, username: &str) -> String {
    if username.is_empty() {
        return text.trim().to_owned();
    }
    let needle = format!("@{username}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(&needle) {
        out.push_str(&rest[..i]);
        rest = rest[i + needle.len()..].trim_start();
    }
    out.push_str(rest);
    out.trim().to_owned()
}

impl MattermostChannel {
    /// A channel with these settings that stores received files in `<media_root>/mattermost/`. Without
    /// [`with_pairing`](Self::with_pairing), strangers' direct messages are ignored.
    pub fn new(settings: MattermostSettings, media_root: impl AsRef<Path>) -> Self {
        let (dm_access, channel_access) = Self::access(&settings, None);
        Self {
            dm_access,
            channel_access,
            media_dir: media_root.as_ref().join(NAME),
            http: Mutex::default(),
            me: Mutex::default(),
            users: Mutex::default(),
            channels: Mutex::default(),
            contexts: Mutex::default(),
            connections: watch::Sender::new(0),
            settings,
        }
    }

    fn access(
        settings: &MattermostSettings,
        pairing: Option<Arc<PairingStore>>,
    ) -> (AccessControl, AccessControl) {
        let mut dm: Vec<String> = settings.dm_allow_from.clone();
        if !settings.dm_allowlist_only {
            dm.extend(settings.allow_from.iter().cloned());
        }
        (
            AccessControl::new(NAME, AllowList::new(&dm), GroupPolicy::Open, pairing),
            AccessControl::new(
                NAME,
                AllowList::new(&settings.allow_from),
                GroupPolicy::Open,
                None,
            ),
        )
    }

    /// Issues pairing codes to strangers writing direct messages through `store`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        let (dm, channel) = Self::access(&self.settings, Some(store));
        self.dm_access = dm;
        self.channel_access = channel;
        self
    }

    /// Counts the WebSocket connections that got the server's `hello`: a test waits for it.
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    fn client(&self) -> Result<reqwest::Client, ChannelError> {
        if let Some(c) = lock(&self.http).clone() {
            return Ok(c);
        }
        let built = nanobot_channels::api_client(NAME, |b| {
            b.timeout(API_TIMEOUT).redirect(reqwest::redirect::Policy::none())
        })?;
        *lock(&self.http) = Some(built.clone());
        Ok(built)
    }

    /// A failed answer as the error the manager acts on (the server's message cleaned of the token).
    async fn failure(&self, what: &str, resp: reqwest::Response) -> ChannelError {
        let status = resp.status().as_u16();
        let body = nanobot_channels::download::read_json(resp).await;
        let said = server_text(
            body["message"].as_str().unwrap_or_default(),
            &[self.settings.token.expose()],
        );
        let text = format!("{what}: HTTP {status} {said}");
        match status {
            401 => ChannelError::auth(NAME, format!("{text} (check channels.mattermost.token)")),
            429 => ChannelError::RateLimited {
                channel: NAME.into(),
                retry_after: None,
            },
            500.. => transient(text),
            _ => ChannelError::rejected(NAME, text),
        }
    }

    /// A REST call with the token; the JSON answer.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ChannelError> {
        let client = self.client()?;
        let mut request = client
            .request(method, format!("{}{path}", self.settings.server_url))
            .bearer_auth(self.settings.token.expose());
        if let Some(body) = body {
            request = request.json(body);
        }
        let resp = request
            .send()
            .await
            .map_err(|e| transient(format!("{path}: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(self.failure(path, resp).await);
        }
        Ok(nanobot_channels::download::read_json(resp).await)
    }

    fn me(&self) -> (String, String) {
        lock(&self.me).clone().unwrap_or_default()
    }

    /// A user's details (cached).
    async fn user(&self, id: &str) -> Option<Value> {
        if let Some(u) = lock(&self.users).get(id) {
            return Some(u.clone());
        }
        match self
            .api(reqwest::Method::GET, &format!("/api/v4/users/{id}"), None)
            .await
        {
            Ok(u) => {
                let mut users = lock(&self.users);
                if users.len() >= REMEMBERED {
                    users.clear();
                }
                users.insert(id.to_owned(), u.clone());
                Some(u)
            }
            Err(e) => {
                tracing::warn!(error = %e, "mattermost: a user could not be looked up");
                None
            }
        }
    }

    /// A channel's details (cached).
    async fn channel(&self, id: &str) -> Value {
        if let Some(c) = lock(&self.channels).get(id) {
            return c.clone();
        }
        match self
            .api(reqwest::Method::GET, &format!("/api/v4/channels/{id}"), None)
            .await
        {
            Ok(c) => {
                let mut channels = lock(&self.channels);
                if channels.len() >= REMEMBERED {
                    channels.clear();
                }
                channels.insert(id.to_owned(), c.clone());
                c
            }
            Err(e) => {
                tracing::warn!(error = %e, "mattermost: a channel could not be looked up");
                Value::Null
            }
        }
    }

    /// How the sender is matched against the allow lists: the id, or `id|username` / `id|email` by
    /// `allowFromMatchMode` (the shared allow list takes either part).
    async fn sender_label(&self, user_id: &str) -> String {
        let field = match self.settings.match_mode {
            MatchMode::Id => return user_id.to_owned(),
            MatchMode::Username => "username",
            MatchMode::Email => "email",
        };
        match self
            .user(user_id)
            .await
            .and_then(|u| u[field].as_str().map(str::to_owned))
        {
            Some(v) if !v.is_empty() => {
                let v = if field == "email" { v.to_lowercase() } else { v };
                format!("{user_id}|{v}")
            }
            _ => user_id.to_owned(),
        }
    }

    async fn react(&self, post_id: &str, emoji: &str, add: bool) {
        let (me, _) = self.me();
        if emoji.is_empty() || me.is_empty() || post_id.is_empty() {
            return;
        }
        let result = if add {
            self.api(
                reqwest::Method::POST,
                "/api/v4/reactions",
                Some(&json!({"user_id": me, "post_id": post_id, "emoji_name": emoji})),
            )
            .await
        } else {
            self.api(
                reqwest::Method::DELETE,
                &format!("/api/v4/users/{me}/posts/{post_id}/reactions/{emoji}"),
                None,
            )
            .await
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "mattermost: reaction not changed");
        }
    }

    async fn handle_posted(&self, bus: &Arc<dyn Bus>, frame: &Value) -> Result<(), ChannelError> {
        let data = &frame["data"];
        let post: Value = match &data["post"] {
            Value::String(s) => match serde_json::from_str(s) {
                Ok(p) => p,
                Err(_) => {
                    tracing::warn!("mattermost: a post that is not JSON was ignored");
                    return Ok(());
                }
            },
            other => other.clone(),
        };
        if post["type"].as_str().is_some_and(|t| t.starts_with("system_")) {
            return Ok(());
        }
        let text_of = |k: &str| post[k].as_str().unwrap_or_default().to_owned();
        let (sender, channel_id, message, root_id, post_id) = (
            text_of("user_id"),
            text_of("channel_id"),
            text_of("message"),
            text_of("root_id"),
            text_of("id"),
        );
        let (me, my_name) = self.me();
        if sender.is_empty() || channel_id.is_empty() || sender == me {
            return Ok(());
        }
        let kind = channel_type(data["channel_type"].as_str().unwrap_or_default());
        let is_dm = kind == "dm";
        if !self.settings.team_id.is_empty() && !is_dm {
            let mut team = [&data["team_id"], &frame["broadcast"]["team_id"]]
                .into_iter()
                .find_map(|v| v.as_str().filter(|t| !t.is_empty()))
                .map(str::to_owned);
            if team.is_none() {
                team = self.channel(&channel_id).await["team_id"]
                    .as_str()
                    .map(str::to_owned);
            }
            if team.as_deref() != Some(self.settings.team_id.as_str()) {
                return Ok(());
            }
        }
        let label = self.sender_label(&sender).await;
        if is_dm {
            if !self.settings.dm_enabled {
                return Ok(());
            }
            match self.dm_access.check(&InboundContext {
                sender_id: &label,
                chat_id: &channel_id,
                is_group: false,
                mentioned: true,
                text: &message,
            })? {
                AccessDecision::Allow => {}
                AccessDecision::PairingRequired(request) => {
                    return self
                        .post(&channel_id, &AccessControl::pairing_message(&request), None, &[])
                        .await
                        .map(|_| ());
                }
                AccessDecision::Handled { reply } => {
                    return self.post(&channel_id, &reply, None, &[]).await.map(|_| ());
                }
                _ => return Ok(()),
            }
        } else {
            let policy = if root_id.is_empty() {
                self.settings.group_policy
            } else {
                self.settings.group_policy_in_thread
            };
            let taken = match policy {
                ChannelPolicy::Open => true,
                ChannelPolicy::Mention => mentions(&message, &my_name),
                ChannelPolicy::Allowlist => self.settings.group_allow_from.contains(&channel_id),
            };
            if !taken {
                return Ok(());
            }
            let decision = self.channel_access.check(&InboundContext {
                sender_id: &label,
                chat_id: &channel_id,
                is_group: true,
                mentioned: true,
                text: &message,
            })?;
            if decision != AccessDecision::Allow {
                return Ok(());
            }
        }
        let text = strip_mention(&message, &my_name);
        let thread_ts = if !root_id.is_empty() {
            Some(root_id.clone())
        } else if self.settings.reply_in_thread && !is_dm {
            Some(post_id.clone())
        } else {
            None
        };
        self.react(&post_id, &self.settings.react_emoji, true).await;
        let mut media = Vec::new();
        for id in post["file_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            match self.download(id).await {
                Ok(path) => media.push(path),
                Err(e) => tracing::warn!(error = %e, "mattermost: a file was not downloaded"),
            }
        }
        let mut content = text;
        if !root_id.is_empty() && self.settings.include_thread_context {
            content = self
                .with_thread_context(content, &channel_id, &root_id, &post_id)
                .await;
        }
        if content.is_empty() && media.is_empty() {
            return Ok(());
        }
        let mut details = json!({"post_id": post_id, "root_id": root_id, "channel_type": kind});
        if let Some(t) = &thread_ts {
            details["thread_ts"] = json!(t);
        }
        let mut inbound = InboundMessage::new(NAME, sender, channel_id.clone(), content)
            .with_metadata(META_MATTERMOST, details)
            .with_metadata(META_MESSAGE_ID, post_id)
            .with_metadata(nanobot_bus::META_IS_GROUP, !is_dm);
        if let Some(t) = thread_ts {
            inbound = inbound.with_session_key(format!("{NAME}:{channel_id}:{t}"));
        }
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// The earlier posts of a thread before `text`, once per thread (as 0.3.5 words it; the root and the current
    /// post left out, each post cut at 500 characters).
    async fn with_thread_context(
        &self,
        text: String,
        channel_id: &str,
        root_id: &str,
        post_id: &str,
    ) -> String {
        let key = format!("{channel_id}:{root_id}");
        {
            let mut seen = lock(&self.contexts);
            if seen.len() >= REMEMBERED {
                seen.clear();
            }
            if !seen.insert(key) {
                return text;
            }
        }
        let path = format!(
            "/api/v4/posts/{root_id}/thread?perPage={}",
            self.settings.thread_context_limit
        );
        let thread = match self.api(reqwest::Method::GET, &path, None).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "mattermost: thread context unavailable");
                return text;
            }
        };
        let (me, _) = self.me();
        let lines: Vec<String> = thread["order"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|id| *id != root_id && *id != post_id)
            .filter_map(|id| {
                let post = &thread["posts"][id];
                let message = post["message"].as_str().unwrap_or_default().trim();
                if message.is_empty() {
                    return None;
                }
                let user = post["user_id"].as_str().unwrap_or("unknown");
                let label = if user == me {
                    "bot".to_owned()
                } else {
                    format!("<{user}>")
                };
                let mut cut: String = message.chars().take(CONTEXT_POST_CHARS).collect();
                if message.chars().count() > CONTEXT_POST_CHARS {
                    cut.push('…');
                }
                Some(format!("- {label}: {cut}"))
            })
            .collect();
        if lines.is_empty() {
            return text;
        }
        format!(
            "Mattermost thread context before this mention:\n{}\n\nCurrent message:\n{text}",
            lines.join("\n")
        )
    }

    /// Saves a file of a post into the media directory (within [`MAX_FILE_BYTES`]); its path.
    async fn download(&self, file_id: &str) -> Result<String, ChannelError> {
        let info = self
            .api(
                reqwest::Method::GET,
                &format!("/api/v4/files/{file_id}/info"),
                None,
            )
            .await?;
        let name = Path::new(info["name"].as_str().unwrap_or(file_id))
            .file_name()
            .map_or_else(|| file_id.to_owned(), |n| n.to_string_lossy().into_owned());
        let dest = self.media_dir.join(safe_file_name(&format!("{file_id}_{name}")));
        let resp = self
            .client()?
            .get(format!("{}/api/v4/files/{file_id}", self.settings.server_url))
            .bearer_auth(self.settings.token.expose())
            .send()
            .await
            .map_err(|e| transient(format!("file {file_id}: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(self.failure(&format!("file {file_id}"), resp).await);
        }
        nanobot_channels::download::save_body(NAME, "file", resp, &dest, MAX_FILE_BYTES).await?;
        Ok(dest.display().to_string())
    }

    /// Uploads a local file to `channel_id`; its file id.
    async fn upload(&self, channel_id: &str, path: &str) -> Result<String, ChannelError> {
        let bytes = read_attachment(Path::new(path), MAX_FILE_BYTES)
            .await
            .map_err(|e| ChannelError::rejected(NAME, e.to_string()))?;
        let name = Path::new(path)
            .file_name()
            .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
        let form = reqwest::multipart::Form::new()
            .text("channel_id", channel_id.to_owned())
            .part("files", reqwest::multipart::Part::bytes(bytes).file_name(name));
        let resp = self
            .client()?
            .post(format!("{}/api/v4/files", self.settings.server_url))
            .bearer_auth(self.settings.token.expose())
            .multipart(form)
            .send()
            .await
            .map_err(|e| transient(format!("upload: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(self.failure("upload", resp).await);
        }
        let answer = nanobot_channels::download::read_json(resp).await;
        answer["file_infos"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| transient("upload: no file id in the answer"))
    }

    /// One post (split at Mattermost's limit; the files go with the first piece); the first post's id.
    async fn post(
        &self,
        channel_id: &str,
        text: &str,
        root_id: Option<&str>,
        file_ids: &[String],
    ) -> Result<Option<String>, ChannelError> {
        let text = if text.trim().is_empty() && !file_ids.is_empty() {
            " "
        } else {
            text
        };
        let mut first = None;
        for (i, piece) in split_message(text, MAX_POST_CHARS).iter().enumerate() {
            let mut body = json!({"channel_id": channel_id, "message": piece});
            if let Some(root) = root_id.filter(|r| !r.is_empty()) {
                body["root_id"] = json!(root);
            }
            if i == 0 && !file_ids.is_empty() {
                body["file_ids"] = json!(file_ids);
            }
            let created = self
                .api(reqwest::Method::POST, "/api/v4/posts", Some(&body))
                .await?;
            if first.is_none() {
                first = created["id"].as_str().map(str::to_owned);
            }
        }
        Ok(first)
    }

    /// One connection: who the bot is, then the WebSocket's events until it ends or `cancel` fires.
    async fn connection(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        let me = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            me = self.api(reqwest::Method::GET, "/api/v4/users/me", None) => me?,
        };
        let id = me["id"].as_str().unwrap_or_default().to_owned();
        let username = me["username"].as_str().unwrap_or_default().to_owned();
        if id.is_empty() {
            return Err(transient("/api/v4/users/me answered without an id"));
        }
        tracing::info!(bot = %username, "mattermost: connected as the bot");
        *lock(&self.me) = Some((id, username));
        let upgrade = nanobot_channels::ws::upgrade_client(NAME, CONNECT_TIMEOUT, false)?;
        let ws_url = self.settings.ws_url();
        let target = nanobot_channels::ws::Upgrade {
            url: &ws_url,
            bearer: Some(self.settings.token.expose()),
            timeout: CONNECT_TIMEOUT,
            url_key: "channels.mattermost.serverUrl",
            credential_key: Some("channels.mattermost.token"),
        };
        let mut ws = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            ws = nanobot_channels::ws::connect(NAME, &upgrade, &target) => ws?,
        };
        loop {
            let frame = tokio::select! {
                () = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return Ok(());
                }
                f = ws.next() => f,
            };
            let text = match frame {
                None | Some(Ok(Ws::Close(_))) => return Err(transient("the server closed the WebSocket")),
                Some(Err(e)) => return Err(transient(format!("the WebSocket was lost: {e}"))),
                Some(Ok(Ws::Ping(payload))) => {
                    let _ = ws.send(Ws::Pong(payload)).await;
                    continue;
                }
                Some(Ok(Ws::Text(t))) => t.to_string(),
                Some(Ok(Ws::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                Some(Ok(_)) => continue,
            };
            let Ok(event) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let result = match event["event"].as_str() {
                Some("hello") => {
                    self.connections.send_modify(|n| *n += 1);
                    Ok(())
                }
                Some("posted") => self.handle_posted(bus, &event).await,
                _ => Ok(()),
            };
            if let Err(e) = result {
                if matches!(e, ChannelError::Bus(_)) {
                    return Err(e);
                }
                tracing::warn!(error = %e, "mattermost: an event was not handled");
            }
        }
    }
}

#[async_trait]
impl Channel for MattermostChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// One connection until it ends: a lost connection is reported (`Transient`) and the manager connects again
    /// with its backoff; a refused token is an authentication error, which stops the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        self.connection(&bus, &cancel).await
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        if chat.is_empty() || !chat.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let details = msg.metadata.get(META_MATTERMOST).unwrap_or(&Value::Null);
        let root = [&details["root_id"], &details["thread_ts"]]
            .into_iter()
            .chain(msg.metadata.get("root_id"))
            .find_map(|v| v.as_str().filter(|s| !s.is_empty()))
            .map(str::to_owned);
        let root = root.filter(|_| self.settings.reply_in_thread);
        let mut file_ids = Vec::new();
        let mut notes = Vec::new();
        for path in &msg.media {
            match self.upload(chat, path).await {
                Ok(id) => file_ids.push(id),
                Err(e @ (ChannelError::Transient { .. } | ChannelError::RateLimited { .. })) => {
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mattermost: a file was not sent");
                    notes.push(format!(
                        "[file not sent: {}]",
                        Path::new(path)
                            .file_name()
                            .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned())
                    ));
                }
            }
        }
        let mut text = msg.content.trim().to_owned();
        if !notes.is_empty() {
            text = format!("{text}\n{}", notes.join("\n")).trim().to_owned();
        }
        if text.is_empty() && file_ids.is_empty() {
            return Ok(());
        }
        self.post(chat, &text, root.as_deref(), &file_ids).await?;
        // The turn is over: its post loses the "working" reaction and gets the "done" one.
        if matches!(msg.kind, OutboundKind::Reply | OutboundKind::StreamEnd { .. })
            && !msg
                .metadata
                .get(nanobot_bus::META_STREAM_RESUMING)
                .is_some_and(|v| v == true)
            && let Some(post_id) = msg.metadata.get(META_MESSAGE_ID).and_then(Value::as_str)
        {
            self.react(post_id, &self.settings.react_emoji, false).await;
            self.react(post_id, &self.settings.done_emoji, true).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_whole_names() {
        assert!(mentions("@nanobot hi", "nanobot"));
        assert!(mentions("hey @nanobot, look", "nanobot"));
        assert!(!mentions("@nanobotx hi", "nanobot"));
        assert!(!mentions("mail me at x@nanobot", "nanobot"));
        assert!(!mentions("hi", "nanobot"));
        assert!(!mentions("@nanobot", ""));
        assert_eq!(strip_mention("@nanobot   what's up", "nanobot"), "what's up");
        assert_eq!(strip_mention("so @nanobot do it", "nanobot"), "so do it");
        assert_eq!(channel_type("D"), "dm");
        assert_eq!(channel_type("X"), "public");
    }
}
