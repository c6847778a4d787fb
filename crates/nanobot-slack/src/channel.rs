//! [`SlackChannel`]: Socket Mode receiving, access control, reactions, threads, files and sending.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, InboundContext, PairingStore, RecentIds,
    SLACK_LIMIT, api_client, markdown_to_slack_mrkdwn, split_message,
};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use tokio::sync::{mpsc, watch};

use crate::socket;
use tokio_util::sync::CancellationToken;

use crate::inbound::{clean_text, is_direct, mentions, reply_thread, safe_file_name};
use crate::{NAME, SlackSettings};

/// Metadata key: the received message's `ts` (reactions go on it).
pub const META_MESSAGE_TS: &str = "message_ts";
/// Metadata key: the thread the reply goes to.
pub const META_THREAD_TS: &str = "thread_ts";
/// Metadata key: Slack's `channel_type` (`im`, `channel`, `group`, `mpim`).
pub const META_CHANNEL_TYPE: &str = "channel_type";

use nanobot_util::lock;

/// The Slack channel. See the [crate docs](crate).
pub struct SlackChannel {
    settings: SlackSettings,
    access: AccessControl,
    dm_allow: Option<AllowList>,
    media_dir: PathBuf,
    client: Arc<SlackHyperClient>,
    files: reqwest::Client,
    bot_user: Mutex<Option<String>>,
    seen: RecentIds,
    threads: RecentIds,
    handled: watch::Sender<u64>,
    api_timeout: Duration,
}

/// Default bound on one Slack Web API call (connect, request and the whole answer) and on the Socket Mode
/// connection's `hello`. See [`SlackChannel::with_api_timeout`].
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for SlackChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

/// The error for a Slack call that did not finish within its bound.
fn stalled(what: &str, after: Duration) -> ChannelError {
    ChannelError::Transient {
        channel: NAME.into(),
        source: format!("Slack {what} got no answer within {after:?}").into(),
    }
}

/// The longest wait between two WebSocket pings on a Socket Mode connection (shorter when the API bound is).
const PING_EVERY: Duration = Duration::from_secs(15);

/// Opens a Socket Mode connection: `apps.connections.open` with the app token, then the WebSocket and its
/// `hello`, each within `bound`.
async fn open_connection(
    client: &SlackHyperClient,
    app_token: &SlackApiToken,
    bound: Duration,
) -> Result<socket::Connection, ChannelError> {
    let session = client.open_session(app_token);
    let request = SlackApiAppsConnectionOpenRequest::new();
    let opened = tokio::time::timeout(bound, session.apps_connections_open(&request))
        .await
        .map_err(|_| stalled("apps.connections.open", bound))?
        .map_err(map_err)?;
    socket::open(opened.url.value().as_ref(), bound)
        .await
        .map_err(|e| match e {
            socket::OpenError::Stalled(what) => stalled(what, bound),
            socket::OpenError::Failed(why) => ChannelError::Transient {
                channel: NAME.into(),
                source: why.into(),
            },
        })
}

/// The error that ends `run` when a connection task has ended (`None`: it stopped without one).
fn connection_ended(ended: Result<Option<ChannelError>, tokio::task::JoinError>) -> ChannelError {
    match ended {
        Ok(Some(e)) => e,
        Ok(None) => ChannelError::Transient {
            channel: NAME.into(),
            source: "the Socket Mode connection stopped".into(),
        },
        Err(e) => ChannelError::Transient {
            channel: NAME.into(),
            source: format!("the Socket Mode connection task failed: {e}").into(),
        },
    }
}

/// Serves one Socket Mode connection until it is lost, replacing it when Slack asks for a refresh (the new one
/// is open before the old one is closed). Returns the error that should end `run` (`None`: the channel stopped).
async fn keep_connected(
    client: Arc<SlackHyperClient>,
    app_token: SlackApiToken,
    bound: Duration,
    mut ws: socket::Connection,
    deliver: mpsc::Sender<socket::Delivery>,
) -> Option<ChannelError> {
    let ping_every = bound.min(PING_EVERY);
    loop {
        match socket::serve(&mut ws, &deliver, ping_every).await {
            socket::Ended::Stopped => return None,
            socket::Ended::Lost(why) => {
                return Some(ChannelError::Transient {
                    channel: NAME.into(),
                    source: format!("Socket Mode connection lost: {why}").into(),
                });
            }
            socket::Ended::Refresh => {
                let next = match open_connection(&client, &app_token, bound).await {
                    Ok(next) => next,
                    Err(e) => return Some(e),
                };
                let mut old = std::mem::replace(&mut ws, next);
                let _ = tokio::time::timeout(bound, old.close(None)).await;
            }
        }
    }
}

/// Bound on the TCP connect of every Web API call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many recent `(channel, ts)` pairs are remembered to handle a message once.
const SEEN_CAPACITY: usize = 512;

/// A `message` or `app_mention` event, reduced to what the channel uses.
struct Received {
    user: String,
    from_bot: bool,
    channel: String,
    channel_type: Option<String>,
    ts: String,
    thread_ts: Option<String>,
    text: String,
    files: Vec<SlackFile>,
    app_mention: bool,
}

impl Received {
    /// `None` for events the channel does not answer (edits, joins, bot messages without a user, …).
    fn from_event(body: SlackEventCallbackBody) -> Option<Self> {
        match body {
            SlackEventCallbackBody::Message(msg) => {
                if !matches!(msg.subtype, None | Some(SlackMessageEventType::FileShare))
                    || msg.hidden == Some(true)
                {
                    return None;
                }
                let content = msg.content.unwrap_or_else(SlackMessageContent::new);
                Some(Self {
                    user: msg.sender.user?.to_string(),
                    from_bot: msg.sender.bot_id.is_some(),
                    channel: msg.origin.channel?.to_string(),
                    channel_type: msg.origin.channel_type.map(|t| t.to_string()),
                    ts: msg.origin.ts.to_string(),
                    thread_ts: msg.origin.thread_ts.map(|t| t.to_string()),
                    text: content.text.unwrap_or_default(),
                    files: content.files.unwrap_or_default(),
                    app_mention: false,
                })
            }
            SlackEventCallbackBody::AppMention(ev) => Some(Self {
                user: ev.user.to_string(),
                from_bot: false,
                channel: ev.channel.to_string(),
                channel_type: ev.origin.channel_type.map(|t| t.to_string()),
                ts: ev.origin.ts.to_string(),
                thread_ts: ev.origin.thread_ts.map(|t| t.to_string()),
                text: ev.content.text.unwrap_or_default(),
                files: ev.content.files.unwrap_or_default(),
                app_mention: true,
            }),
            _ => None,
        }
    }
}

/// Records `(channel, ts)` in a bounded memory; true when it was not there yet.
fn remember(memory: &RecentIds, channel: &str, ts: &str) -> bool {
    memory.insert(&format!("{channel}\u{0}{ts}"))
}

fn bad_config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.into(),
        message,
    }
}

impl SlackChannel {
    /// A channel with these settings that stores downloaded files under `media_dir`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: SlackSettings, media_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A bounded TCP connect for every Web API call, those slack-morphism makes itself (reconnecting Socket
        // Mode) included; each call this channel makes is also bounded as a whole (`bounded`).
        let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| bad_config(format!("cannot load the system's root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let connector =
            SlackClientHyperConnector::with_connector(https).with_slack_api_url(&settings.api_url);
        let client = Arc::new(SlackClient::new(connector));
        // File downloads: bounded connect and a bound on the whole transfer.
        let files = api_client(NAME, |b| {
            b.connect_timeout(std::time::Duration::from_secs(10))
                .timeout(std::time::Duration::from_secs(120))
        })?;
        let mut allow = settings.allow_from.clone();
        // Channel ids (C…/G…) never equal user ids (U…/W…), so listing them here only lets the `allowlist`
        // group policy match the chat.
        allow.extend(settings.group_allow_from.iter().cloned());
        let access = AccessControl::new(NAME, AllowList::new(&allow), settings.group_policy, None);
        let dm_allow = settings.dm_allow_from.as_ref().map(AllowList::new);
        Ok(Self {
            settings,
            access,
            dm_allow,
            media_dir: media_dir.into(),
            client,
            files,
            bot_user: Mutex::new(None),
            seen: RecentIds::new(SEEN_CAPACITY),
            threads: RecentIds::new(SEEN_CAPACITY),
            handled: watch::Sender::new(0),
            api_timeout: DEFAULT_API_TIMEOUT,
        })
    }

    /// Bounds each Web API call (default [`DEFAULT_API_TIMEOUT`]) and the wait for the Socket Mode `hello` after
    /// connecting. A call that takes longer fails with a retryable error naming the method.
    #[must_use]
    pub fn with_api_timeout(mut self, timeout: Duration) -> Self {
        self.api_timeout = timeout;
        self
    }

    /// Runs one Web API call (`method`, e.g. `chat.postMessage`) within the channel's bound.
    async fn bounded<T>(
        &self,
        method: &str,
        call: impl std::future::Future<Output = Result<T, SlackClientError>>,
    ) -> Result<T, ChannelError> {
        match tokio::time::timeout(self.api_timeout, call).await {
            Ok(result) => result.map_err(map_err),
            Err(_) => Err(stalled(method, self.api_timeout)),
        }
    }

    /// Issues pairing codes to denied direct messages and honours `/pairing approve` from owners.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            self.access.allow_list().clone(),
            self.settings.group_policy,
            Some(store),
        );
        self
    }

    /// The slack-morphism client (for Web API methods this channel does not wrap; open a session with the bot
    /// token).
    pub fn client(&self) -> &Arc<SlackHyperClient> {
        &self.client
    }

    /// The bot's own user id, once [`Channel::run`] has called `auth.test`.
    pub fn bot_user_id(&self) -> Option<String> {
        lock(&self.bot_user).clone()
    }

    /// Counts the events this channel has finished handling, whatever the outcome (forwarded to the bus,
    /// answered with a pairing code, ignored by policy). Useful for metrics and for tests that must know an
    /// event was looked at and dropped.
    pub fn handled_events(&self) -> watch::Receiver<u64> {
        self.handled.subscribe()
    }

    /// True the first time a message (`channel`, `ts`) is seen: Slack sends a mention both as `message` and as
    /// `app_mention` when the app subscribes to both.
    fn first_sighting(&self, channel: &str, ts: &str) -> bool {
        remember(&self.seen, channel, ts)
    }

    /// Earlier messages of the thread `root` (up to the configured limit: the parent, then the latest ones
    /// before `current`), formatted for the model; `None` when there are none or Slack refuses.
    async fn thread_context(
        &self,
        channel: &str,
        root: &str,
        current: &str,
        bot_user: &str,
    ) -> Option<String> {
        let limit = usize::try_from(self.settings.thread_context_limit).unwrap_or(0);
        if limit == 0 || !remember(&self.threads, channel, root) {
            return None;
        }
        let token = self.bot_token();
        let session = self.client.open_session(&token);
        let req =
            SlackApiConversationsRepliesRequest::new(channel.to_string().into(), root.to_string().into())
                .with_limit(200);
        let resp = match self
            .bounded("conversations.replies", session.conversations_replies(&req))
            .await
        {
            Ok(resp) => resp,
            Err(e) => {
                tracing::debug!(error = %e, "slack: could not read the thread context");
                return None;
            }
        };
        let earlier: Vec<String> = resp
            .messages
            .iter()
            .filter(|m| m.origin.ts.0 != current)
            .filter_map(|m| {
                let text = m
                    .content
                    .text
                    .as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())?;
                let from_bot =
                    m.sender.bot_id.is_some() || m.sender.user.as_ref().is_some_and(|u| u.0 == bot_user);
                let who = if from_bot {
                    "assistant".to_string()
                } else {
                    m.sender
                        .user
                        .as_ref()
                        .map_or_else(|| "someone".to_string(), |u| format!("<@{u}>"))
                };
                Some(format!("{who}: {}", clean_text(text, bot_user)))
            })
            .collect();
        let kept: Vec<&String> = match earlier.split_first() {
            None => return None,
            Some((parent, rest)) => std::iter::once(parent)
                .chain(rest.iter().skip(rest.len().saturating_sub(limit - 1)))
                .take(limit)
                .collect(),
        };
        Some(kept.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"))
    }

    fn bot_token(&self) -> SlackApiToken {
        SlackApiToken::new(self.settings.bot_token.expose().to_string().into())
    }

    async fn post(
        &self,
        channel: &str,
        text: String,
        thread_ts: Option<&str>,
    ) -> Result<SlackTs, ChannelError> {
        self.post_content(channel, SlackMessageContent::new().with_text(text), thread_ts)
            .await
    }

    /// An approval request: the text, then Yes / No buttons whose values are the answer commands.
    async fn post_approval(
        &self,
        channel: &str,
        text: String,
        thread_ts: Option<&str>,
        approval: &serde_json::Value,
    ) -> Result<SlackTs, ChannelError> {
        let field = |k: &str| {
            approval
                .get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let button = |id: &str, label: &str, value: String, style: SlackBlockButtonStyle| {
            SlackActionBlockElement::Button(
                SlackBlockButtonElement::new(SlackBlockPlainText::new(label.to_owned()).into())
                    .with_action_id(id.to_owned().into())
                    .with_value(value)
                    .with_style(style),
            )
        };
        let blocks = vec![
            SlackBlock::Section(SlackSectionBlock::new().with_text(SlackBlockText::MarkDown(
                SlackBlockMarkDownText::new(text.clone()),
            ))),
            SlackBlock::Actions(SlackActionsBlock::new(vec![
                button(
                    "nanobot_approve",
                    "Yes",
                    field("approve"),
                    SlackBlockButtonStyle::Primary,
                ),
                button("nanobot_deny", "No", field("deny"), SlackBlockButtonStyle::Danger),
            ])),
        ];
        let content = SlackMessageContent::new().with_text(text).with_blocks(blocks);
        self.post_content(channel, content, thread_ts).await
    }

    async fn post_content(
        &self,
        channel: &str,
        content: SlackMessageContent,
        thread_ts: Option<&str>,
    ) -> Result<SlackTs, ChannelError> {
        let token = self.bot_token();
        let session = self.client.open_session(&token);
        let mut req = SlackApiChatPostMessageRequest::new(channel.to_string().into(), content);
        if let Some(ts) = thread_ts {
            req = req.with_thread_ts(ts.to_string().into());
        }
        let resp = self
            .bounded("chat.postMessage", session.chat_post_message(&req))
            .await?;
        Ok(resp.ts)
    }

    async fn react(&self, channel: &str, ts: &str, name: &str, add: bool) {
        if name.is_empty() || ts.is_empty() {
            return;
        }
        let token = self.bot_token();
        let session = self.client.open_session(&token);
        let result = if add {
            let req = SlackApiReactionsAddRequest::new(
                channel.to_string().into(),
                name.to_string().into(),
                ts.to_string().into(),
            );
            self.bounded("reactions.add", session.reactions_add(&req))
                .await
                .map(drop)
        } else {
            let req = SlackApiReactionsRemoveRequest::new(name.to_string().into())
                .with_channel(channel.to_string().into())
                .with_timestamp(ts.to_string().into());
            self.bounded("reactions.remove", session.reactions_remove(&req))
                .await
                .map(drop)
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, reaction = name, add, "slack: reaction failed");
        }
    }

    /// Uploads one local file into `channel` (and thread) through the external upload flow.
    async fn upload(&self, channel: &str, path: &str, thread_ts: Option<&str>) -> Result<(), ChannelError> {
        let bytes = tokio::fs::read(path).await.map_err(|source| ChannelError::Io {
            path: path.to_string(),
            source,
        })?;
        let name = Path::new(path)
            .file_name()
            .map_or_else(|| "file".to_string(), |n| n.to_string_lossy().into_owned());
        let token = self.bot_token();
        let session = self.client.open_session(&token);
        let req = SlackApiFilesGetUploadUrlExternalRequest::new(name.clone(), bytes.len());
        let url = self
            .bounded(
                "files.getUploadURLExternal",
                session.get_upload_url_external(&req),
            )
            .await?;
        let req =
            SlackApiFilesUploadViaUrlRequest::new(url.upload_url, bytes, "application/octet-stream".into());
        self.bounded("file upload", session.files_upload_via_url(&req))
            .await?;
        let mut complete = SlackApiFilesCompleteUploadExternalRequest::new(vec![
            SlackApiFilesComplete::new(url.file_id).with_title(name),
        ])
        .with_channel_id(channel.to_string().into());
        if let Some(ts) = thread_ts {
            complete = complete.with_thread_ts(ts.to_string().into());
        }
        self.bounded(
            "files.completeUploadExternal",
            session.files_complete_upload_external(&complete),
        )
        .await?;
        Ok(())
    }

    /// A press on an approval request's button: its value (`/approve ID`, `/deny ID`) goes to the agent as a
    /// message from the person who pressed it, in the question's thread, after the same access check as their
    /// messages.
    async fn handle_press(
        &self,
        bus: &Arc<dyn Bus>,
        press: SlackInteractionBlockActionsEvent,
    ) -> Result<(), ChannelError> {
        let Some(value) = press
            .actions
            .iter()
            .flatten()
            .filter_map(|a| a.value.as_deref())
            .find(|v| v.starts_with("/approve ") || v.starts_with("/deny "))
        else {
            return Ok(());
        };
        let Some(user) = press.user.as_ref().map(|u| u.id.to_string()) else {
            return Ok(());
        };
        let container_channel = match &press.container {
            SlackInteractionActionContainer::Message(m) => m.channel_id.as_ref().map(ToString::to_string),
            _ => None,
        };
        let Some(channel) = press
            .channel
            .as_ref()
            .map(|c| c.id.to_string())
            .or(container_channel)
        else {
            return Ok(());
        };
        let direct = is_direct(None, &channel);
        if direct
            && let Some(dm_allow) = &self.dm_allow
            && !dm_allow.allows(&user)
        {
            return Ok(());
        }
        let decision = self.access.check(&InboundContext {
            sender_id: &user,
            chat_id: &channel,
            is_group: !direct,
            mentioned: true,
            text: value,
        })?;
        if !matches!(decision, AccessDecision::Allow) {
            return Ok(());
        }
        let thread = press
            .message
            .as_ref()
            .and_then(|m| m.origin.thread_ts.as_ref())
            .map(ToString::to_string);
        let mut inbound =
            InboundMessage::new(NAME, user, channel.clone(), value).with_metadata("is_group", !direct);
        if let Some(thread) = thread {
            if !direct {
                inbound = inbound.with_session_key(format!("{NAME}:{channel}:{thread}"));
            }
            inbound = inbound.with_metadata(META_THREAD_TS, thread);
        }
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    async fn handle_event(
        &self,
        bus: &Arc<dyn Bus>,
        event: SlackPushEventCallback,
    ) -> Result<(), ChannelError> {
        let Some(msg) = Received::from_event(event.event) else {
            return Ok(());
        };
        let bot_user = self.bot_user_id().unwrap_or_default();
        if msg.from_bot || msg.user == bot_user {
            return Ok(());
        }
        if !self.first_sighting(&msg.channel, &msg.ts) {
            // The same message as both `message` and `app_mention`: handled once.
            return Ok(());
        }
        let Received {
            user,
            channel,
            channel_type,
            ts,
            thread_ts,
            text: raw_text,
            files,
            app_mention,
            ..
        } = msg;
        let direct = is_direct(channel_type.as_deref(), &channel);
        let mentioned = app_mention || mentions(&raw_text, &bot_user);
        let text = clean_text(&raw_text, &bot_user);
        if direct {
            if !self.settings.dm_enabled {
                return Ok(());
            }
            if let Some(dm_allow) = &self.dm_allow
                && !dm_allow.allows(&user)
            {
                tracing::info!(sender = %user, "slack: direct message not on dm.allowFrom");
                return Ok(());
            }
        }
        let thread = reply_thread(&ts, thread_ts.as_deref(), direct, self.settings.reply_in_thread);
        let decision = self.access.check(&InboundContext {
            sender_id: &user,
            chat_id: &channel,
            is_group: !direct,
            mentioned,
            text: &text,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                self.post(
                    &channel,
                    AccessControl::pairing_message(&request),
                    thread.as_deref(),
                )
                .await?;
                return Ok(());
            }
            AccessDecision::Handled { reply } => {
                self.post(&channel, reply, thread.as_deref()).await?;
                return Ok(());
            }
            _ => return Ok(()),
        }
        self.react(&channel, &ts, &self.settings.react_emoji, true).await;
        if thread.as_deref() == Some(ts.as_str()) {
            // A thread the bot starts itself: its history is the session's, no context to fetch later.
            remember(&self.threads, &channel, &ts);
        }
        let mut lines = Vec::new();
        if let Some(root) = thread_ts.as_deref().filter(|root| *root != ts)
            && let Some(context) = self.thread_context(&channel, root, &ts, &bot_user).await
        {
            lines.push(format!(
                "[Earlier messages in this thread]\n{context}\n[End of thread context]\n"
            ));
        }
        if !text.is_empty() {
            lines.push(text);
        }
        let mut media = Vec::new();
        for file in &files {
            lines.push(self.receive_file(file, &mut media).await);
        }
        let mut inbound = InboundMessage::new(NAME, user, channel.clone(), lines.join("\n"))
            .with_metadata(META_MESSAGE_TS, ts)
            .with_metadata("is_group", !direct);
        if let Some(t) = channel_type {
            inbound = inbound.with_metadata(META_CHANNEL_TYPE, t);
        }
        if let Some(thread) = thread {
            if !direct {
                inbound = inbound.with_session_key(format!("{NAME}:{channel}:{thread}"));
            }
            inbound = inbound.with_metadata(META_THREAD_TS, thread);
        }
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Downloads a shared file into the media directory; returns the line the agent sees for it.
    async fn receive_file(&self, file: &SlackFile, media: &mut Vec<String>) -> String {
        let name = file
            .name
            .clone()
            .or_else(|| file.title.clone())
            .unwrap_or_else(|| file.id.to_string());
        let label = if file.mimetype.as_ref().is_some_and(|m| m.0.starts_with("image/")) {
            "image"
        } else {
            "file"
        };
        let Some(url) = file.url_private_download.as_ref().or(file.url_private.as_ref()) else {
            return format!("[{label}: {name} (no download URL)]");
        };
        let dir = self.media_dir.join(NAME);
        let path = dir.join(format!(
            "{}_{}",
            safe_file_name(&file.id.0),
            safe_file_name(&name)
        ));
        match self.download(url.as_str(), &path).await {
            Ok(()) => {
                let shown = path.display().to_string();
                media.push(shown.clone());
                format!("[{label}: {shown}]")
            }
            Err(e) => {
                tracing::warn!(error = %e, file = %name, "slack: file download failed");
                format!("[{label}: {name} (download failed)]")
            }
        }
    }

    /// Streams a file into `path`, refusing more than `maxFileBytes` whatever the server says about its length
    /// (the shared bounded download: a cut-off file never appears under its name).
    async fn download(&self, url: &str, path: &Path) -> Result<(), ChannelError> {
        let resp = self
            .files
            .get(url)
            .bearer_auth(self.settings.bot_token.expose())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ChannelError::transient(NAME, e.without_url()))?;
        nanobot_channels::download::save_body(NAME, "file", resp, path, self.settings.max_file_bytes)
            .await
            .map(|_| ())
    }
}

/// Classifies a slack-morphism error by what the caller does next.
/// The error without the response bodies slack-morphism keeps in it: a body is whatever the server (or a proxy
/// in between) sent, and one that echoes the request carries the token.
fn without_bodies(e: SlackClientError) -> SlackClientError {
    match e {
        SlackClientError::ApiError(mut api) => {
            api.http_response_body = None;
            SlackClientError::ApiError(api)
        }
        SlackClientError::HttpError(mut http) => {
            http.http_response_body = None;
            SlackClientError::HttpError(http)
        }
        SlackClientError::ProtocolError(mut p) => {
            p.json_body = None;
            SlackClientError::ProtocolError(p)
        }
        SlackClientError::RateLimitError(mut r) => {
            r.http_response_body = None;
            SlackClientError::RateLimitError(r)
        }
        other => other,
    }
}

pub(crate) fn map_err(e: SlackClientError) -> ChannelError {
    let e = without_bodies(e);
    let channel = NAME.to_string();
    match &e {
        SlackClientError::ApiError(api) => match api.code.as_str() {
            "invalid_auth"
            | "not_authed"
            | "account_inactive"
            | "token_revoked"
            | "token_expired"
            | "missing_scope"
            | "not_allowed_token_type" => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            "ratelimited" => ChannelError::RateLimited {
                channel,
                retry_after: None,
            },
            "internal_error" | "fatal_error" | "service_unavailable" | "request_timeout" => {
                ChannelError::Transient {
                    channel,
                    source: Box::new(e),
                }
            }
            _ => ChannelError::Rejected {
                channel,
                source: Box::new(e),
            },
        },
        SlackClientError::RateLimitError(limit) => ChannelError::RateLimited {
            channel,
            retry_after: limit.retry_after,
        },
        SlackClientError::HttpError(http) => match http.status_code.as_u16() {
            401 | 403 => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            429 => ChannelError::RateLimited {
                channel,
                retry_after: None,
            },
            400..=499 => ChannelError::Rejected {
                channel,
                source: Box::new(e),
            },
            _ => ChannelError::Transient {
                channel,
                source: Box::new(e),
            },
        },
        _ => ChannelError::Transient {
            channel,
            source: Box::new(e),
        },
    }
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        // Check both tokens first, so that a wrong one is an Auth error here (slack-morphism would only log and
        // retry), and learn the bot's user id for mention detection.
        let token = self.bot_token();
        let session = self.client.open_session(&token);
        let me = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = self.bounded("auth.test", session.auth_test()) => r?,
        };
        *lock(&self.bot_user) = Some(me.user_id.to_string());
        let app_token = SlackApiToken::new(self.settings.app_token.expose().to_string().into());
        // The first connections are opened here, within the bound, so a wrong app token or a stalled server ends
        // `run` at once; afterwards each connection is kept (and refreshed) by a task of its own.
        let (tx, mut deliveries) = mpsc::channel(256);
        let mut connections = tokio::task::JoinSet::new();
        for _ in 0..self.settings.socket_connections.max(1) {
            let ws = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                r = open_connection(&self.client, &app_token, self.api_timeout) => r?,
            };
            connections.spawn(keep_connected(
                Arc::clone(&self.client),
                app_token.clone(),
                self.api_timeout,
                ws,
                tx.clone(),
            ));
        }
        drop(tx);
        tracing::info!(bot = %me.user_id, "slack: socket mode connected");
        loop {
            tokio::select! {
                () = cancel.cancelled() => {
                    connections.abort_all();
                    return Ok(());
                }
                Some(ended) = connections.join_next() => {
                    connections.abort_all();
                    return Err(connection_ended(ended));
                }
                delivery = deliveries.recv() => {
                    let Some(delivery) = delivery else {
                        // Every connection dropped its sender, so every task has ended (or is ending): report
                        // why the first one did, not merely that deliveries stopped (both are ready at once, and
                        // `select!` may pick either).
                        let ended = tokio::time::timeout(self.api_timeout, connections.join_next()).await;
                        connections.abort_all();
                        return Err(match ended {
                            Ok(Some(ended)) => connection_ended(ended),
                            _ => ChannelError::Transient {
                                channel: NAME.into(),
                                source: "the Socket Mode connections stopped".into(),
                            },
                        });
                    };
                    let (what, handled) = match delivery {
                        socket::Delivery::Push(event) => {
                            let r = self.handle_event(&bus, *event).await;
                            self.handled.send_modify(|n| *n += 1);
                            ("an event", r)
                        }
                        socket::Delivery::Press(press) => ("a button press", self.handle_press(&bus, *press).await),
                    };
                    if let Err(e) = handled {
                        if matches!(e, ChannelError::Bus(_)) {
                            connections.abort_all();
                            return Err(e);
                        }
                        tracing::warn!(error = %e, "slack: could not handle {what}");
                    }
                }
            }
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let channel = msg.chat_id.trim();
        if channel.is_empty() || channel.contains(char::is_whitespace) {
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
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
        };
        let thread = meta(META_THREAD_TS);
        if let Some(approval) = msg.metadata.get("_approval") {
            self.post_approval(channel, markdown_to_slack_mrkdwn(&msg.content), thread, approval)
                .await?;
            return Ok(());
        }
        for piece in split_message(&markdown_to_slack_mrkdwn(&msg.content), SLACK_LIMIT) {
            self.post(channel, piece, thread).await?;
        }
        for path in &msg.media {
            // The text is already out: a failed upload becomes a note rather than an error that would make the
            // manager send everything again.
            if let Err(e) = self.upload(channel, path, thread).await {
                tracing::warn!(error = %e, path = %path, "slack: file upload failed");
                self.post(
                    channel,
                    format!("[could not upload {}]", file_label(path)),
                    thread,
                )
                .await?;
            }
        }
        if final_reply && let Some(ts) = meta(META_MESSAGE_TS) {
            self.react(channel, ts, &self.settings.react_emoji, false).await;
            self.react(channel, ts, &self.settings.done_emoji, true).await;
        }
        Ok(())
    }
}

fn file_label(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned())
}
