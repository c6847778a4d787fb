//! [`DiscordChannel`]: the gateway connection, access control, typing, attachments and sending.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, DISCORD_LIMIT, InboundContext,
    PairingStore, split_message,
};
use serenity::all::{
    Attachment, ButtonStyle, ChannelId, ClientBuilder, ComponentInteraction, Context, CreateActionRow,
    CreateAttachment, CreateButton, CreateInteractionResponse, CreateMessage, EventHandler, Http,
    HttpBuilder, Interaction, Message, MessageId, MessageReference, MessageReferenceKind, ReactionType,
    Ready, UserId,
};
use tokio_util::sync::CancellationToken;

use crate::inbound::{clean_content, is_mentioned, safe_file_name};
use crate::{DiscordSettings, NAME};

/// Discord shows "typing…" for about 10 s; we renew it a little earlier.
const TYPING_EVERY: Duration = Duration::from_secs(8);
/// A typing indicator never outlives this, even if no reply comes.
const TYPING_MAX: Duration = Duration::from_secs(600);
/// Discord accepts at most this many files on one message.
const MAX_FILES_PER_MESSAGE: usize = 10;

use nanobot_util::lock;

/// State shared by the channel (sending) and the gateway event handler (receiving).
struct Shared {
    settings: DiscordSettings,
    access: AccessControl,
    media_dir: PathBuf,
    bot_id: Mutex<Option<UserId>>,
    typing: Mutex<HashMap<u64, CancellationToken>>,
    handled: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    fn bot_id(&self) -> Option<UserId> {
        *lock(&self.bot_id)
    }

    /// Keeps "typing…" alive in `channel` until [`Shared::stop_typing`] or [`TYPING_MAX`].
    fn start_typing(self: &Arc<Self>, http: Arc<Http>, channel: ChannelId) {
        let token = CancellationToken::new();
        {
            let mut typing = lock(&self.typing);
            if typing.contains_key(&channel.get()) {
                return;
            }
            typing.insert(channel.get(), token.clone());
        }
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + TYPING_MAX;
            loop {
                if let Err(e) = http.broadcast_typing(channel).await {
                    tracing::debug!(error = %e, "discord: typing indicator failed");
                }
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(TYPING_EVERY) => {}
                }
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
            }
            let mut typing = lock(&shared.typing);
            if typing
                .get(&channel.get())
                .is_some_and(|t| t.is_cancelled() || t == &token)
            {
                typing.remove(&channel.get());
            }
        });
    }

    fn stop_typing(&self, channel: u64) {
        if let Some(token) = lock(&self.typing).remove(&channel) {
            token.cancel();
        }
    }
}

/// The Discord channel. See the [crate docs](crate).
pub struct DiscordChannel {
    shared: Arc<Shared>,
    http: Arc<Http>,
}

impl std::fmt::Debug for DiscordChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordChannel")
            .field("settings", &self.shared.settings)
            .field("media_dir", &self.shared.media_dir)
            .finish_non_exhaustive()
    }
}

impl DiscordChannel {
    /// A channel with these settings that stores downloaded attachments under `media_dir`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: DiscordSettings, media_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let http = Arc::new(build_http(&settings)?);
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            settings.group_policy,
            None,
        );
        Ok(Self {
            shared: Arc::new(Shared {
                settings,
                access,
                media_dir: media_dir.into(),
                bot_id: Mutex::new(None),
                typing: Mutex::new(HashMap::new()),
                handled: tokio::sync::watch::Sender::new(0),
            }),
            http,
        })
    }

    /// Issues pairing codes to denied direct messages and honours `/pairing approve` from owners.
    #[must_use]
    pub fn with_pairing(self, store: Arc<PairingStore>) -> Self {
        let s = &self.shared;
        let access = AccessControl::new(
            NAME,
            AllowList::new(&s.settings.allow_from),
            s.settings.group_policy,
            Some(store),
        );
        let shared = Arc::new(Shared {
            settings: s.settings.clone(),
            access,
            media_dir: s.media_dir.clone(),
            bot_id: Mutex::new(s.bot_id()),
            typing: Mutex::new(HashMap::new()),
            handled: tokio::sync::watch::Sender::new(*s.handled.borrow()),
        });
        Self {
            shared,
            http: self.http,
        }
    }

    /// The serenity REST client the channel sends with (for callers that need endpoints it does not wrap).
    pub fn http(&self) -> &Arc<Http> {
        &self.http
    }

    /// Counts the gateway messages this channel has finished handling, whatever the outcome (forwarded to the
    /// bus, answered with a pairing code, ignored by policy). Useful for metrics and for tests that must know a
    /// message was looked at and dropped.
    pub fn handled_messages(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.handled.subscribe()
    }

    /// The bot's own user id, once [`Channel::run`] has logged in.
    pub fn bot_id(&self) -> Option<u64> {
        self.shared.bot_id().map(UserId::get)
    }

    async fn send_text(&self, channel: ChannelId, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let mut files = Vec::new();
        let mut notes = Vec::new();
        for path in &msg.media {
            match CreateAttachment::path(path).await {
                Ok(file) => files.push(file),
                Err(e) => {
                    tracing::warn!(path = %path, error = %e, "discord: cannot attach file");
                    notes.push(format!("[could not attach {}]", file_label(path)));
                }
            }
        }
        let mut text = msg.content.clone();
        for note in notes {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&note);
        }
        let mut pieces = split_message(&text, DISCORD_LIMIT);
        let reply_to = msg
            .reply_to
            .as_deref()
            .and_then(|id| id.trim().parse::<u64>().ok())
            .filter(|id| *id != 0)
            .map(MessageId::new);
        let mut file_groups: Vec<Vec<CreateAttachment>> = Vec::new();
        let mut files = files.into_iter().peekable();
        while files.peek().is_some() {
            file_groups.push(files.by_ref().take(MAX_FILES_PER_MESSAGE).collect());
        }
        if pieces.is_empty() && file_groups.is_empty() {
            return Ok(());
        }
        // The last text piece carries the first group of files; further groups follow on their own.
        let mut file_groups = file_groups.into_iter();
        if pieces.is_empty() {
            pieces.push(String::new());
        }
        let last_text = pieces.len() - 1;
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut create = CreateMessage::new();
            if !piece.is_empty() {
                create = create.content(piece);
            }
            if i == 0
                && let Some(id) = reply_to
            {
                // A deleted original must not make the answer fail: send it unquoted then.
                let reference = MessageReference::new(MessageReferenceKind::Default, channel)
                    .message_id(id)
                    .fail_if_not_exists(false);
                create = create.reference_message(reference);
            }
            if i == last_text
                && let Some(group) = file_groups.next()
            {
                create = create.add_files(group);
            }
            // An approval request: two buttons whose ids are the answer commands.
            if i == last_text
                && let Some(approval) = msg.metadata.get("_approval")
            {
                let field = |k: &str| {
                    approval
                        .get(k)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                };
                create = create.components(vec![CreateActionRow::Buttons(vec![
                    CreateButton::new(field("approve"))
                        .label("Yes")
                        .style(ButtonStyle::Success),
                    CreateButton::new(field("deny"))
                        .label("No")
                        .style(ButtonStyle::Danger),
                ])]);
            }
            channel.send_message(&self.http, create).await.map_err(map_err)?;
        }
        for group in file_groups {
            channel
                .send_message(&self.http, CreateMessage::new().add_files(group))
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }
}

fn file_label(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned())
}

/// Builds a serenity REST client for these settings.
fn build_http(settings: &DiscordSettings) -> Result<Http, ChannelError> {
    let mut builder = HttpBuilder::new(settings.token.expose());
    let bad = |e: reqwest_012::Error| ChannelError::Config {
        channel: NAME.into(),
        message: format!("channels.discord.proxy: {e}"),
    };
    // serenity's default client has no timeout: every REST call (sends, uploads, typing) is bounded here
    // (connect 10 s, whole request 60 s), so a server that stops answering cannot hold a send forever.
    let mut client = reqwest_012::Client::builder()
        .use_rustls_tls()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(60));
    if let Some(proxy) = &settings.proxy {
        let mut p = reqwest_012::Proxy::all(proxy.url.as_str()).map_err(bad)?;
        if !proxy.username.is_empty() {
            p = p.basic_auth(&proxy.username, proxy.password.expose());
        }
        client = client.proxy(p);
    }
    builder = builder.client(client.build().map_err(|e| ChannelError::Config {
        channel: NAME.into(),
        message: format!("cannot build the HTTP client: {e}"),
    })?);
    if let Some(base) = &settings.api_base {
        // serenity's rate limiter ignores the base override, so it must be off for the override to apply.
        builder = builder.proxy(base.clone()).ratelimiter_disabled(true);
    }
    Ok(builder.build())
}

/// Classifies a serenity error by what the caller does next.
pub(crate) fn map_err(e: serenity::Error) -> ChannelError {
    use serenity::all::{GatewayError, HttpError};
    let channel = NAME.to_string();
    match e {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(ref resp)) => match resp.status_code.as_u16() {
            401 | 403 => ChannelError::Auth {
                channel,
                source: Box::new(e),
            },
            429 => ChannelError::RateLimited {
                channel,
                retry_after: None,
            },
            500.. => ChannelError::Transient {
                channel,
                source: Box::new(e),
            },
            _ => ChannelError::Rejected {
                channel,
                source: Box::new(e),
            },
        },
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => ChannelError::Auth {
            channel,
            source: Box::new(e),
        },
        serenity::Error::Gateway(
            GatewayError::InvalidGatewayIntents | GatewayError::DisallowedGatewayIntents,
        ) => ChannelError::Config {
            channel,
            message: format!(
                "{e}: enable the Message Content intent for the bot in the Discord developer portal, or fix \
                     channels.discord.intents"
            ),
        },
        serenity::Error::Model(_)
        | serenity::Error::Http(HttpError::InvalidHeader(_) | HttpError::Url(_)) => ChannelError::Rejected {
            channel,
            source: Box::new(e),
        },
        other => ChannelError::Transient {
            channel,
            source: Box::new(other),
        },
    }
}

/// Receives gateway events for one [`Channel::run`].
struct Handler {
    shared: Arc<Shared>,
    bus: Arc<dyn Bus>,
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        *lock(&self.shared.bot_id) = Some(ready.user.id);
        tracing::info!(bot = %ready.user.name, "discord: connected to the gateway");
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        if let Interaction::Component(press) = interaction
            && let Err(e) = self.handle_press(&ctx.http, &press).await
        {
            tracing::warn!(error = %e, "discord: could not handle a button press");
        }
    }

    async fn message(&self, ctx: Context, msg: Message) {
        if let Err(e) = self.handle(&ctx.http, &msg).await {
            tracing::warn!(error = %e, message = %msg.id, "discord: could not handle a message");
        }
        self.shared.handled.send_modify(|n| *n += 1);
    }
}

impl Handler {
    /// A press on an approval request's button: its id (`/approve ID`, `/deny ID`) goes to the agent as a
    /// message from the person who pressed it, after the same access check as their messages.
    async fn handle_press(&self, http: &Arc<Http>, press: &ComponentInteraction) -> Result<(), ChannelError> {
        // Acknowledged first (Discord shows a failure after 3 s otherwise); the agent's reply follows.
        if let Err(e) = press
            .create_response(http, CreateInteractionResponse::Acknowledge)
            .await
        {
            tracing::debug!(error = %e, "discord: could not acknowledge a button press");
        }
        let data = press.data.custom_id.as_str();
        if !(data.starts_with("/approve ") || data.starts_with("/deny ")) {
            return Ok(());
        }
        let user = press.member.as_ref().map_or(&press.user, |m| &m.user);
        if user.bot {
            return Ok(());
        }
        let sender_id = format!("{}|{}", user.id, user.name);
        let chat_id = press.channel_id.to_string();
        let is_group = press.guild_id.is_some();
        let decision = self.shared.access.check(&InboundContext {
            sender_id: &sender_id,
            chat_id: &chat_id,
            is_group,
            mentioned: true,
            text: data,
        })?;
        if !matches!(decision, AccessDecision::Allow) {
            return Ok(());
        }
        let inbound = InboundMessage::new(NAME, sender_id, chat_id, data)
            .with_metadata("username", user.name.clone())
            .with_metadata("is_group", is_group);
        self.bus.publish_inbound(inbound).await?;
        Ok(())
    }

    async fn handle(&self, http: &Arc<Http>, msg: &Message) -> Result<(), ChannelError> {
        let shared = &self.shared;
        if msg.author.bot || shared.bot_id() == Some(msg.author.id) {
            return Ok(());
        }
        let is_group = msg.guild_id.is_some();
        if is_group
            && !shared.settings.allow_channels.is_empty()
            && !shared
                .settings
                .allow_channels
                .iter()
                .any(|c| c == &msg.channel_id.to_string())
        {
            return Ok(());
        }
        let sender_id = format!("{}|{}", msg.author.id, msg.author.name);
        let chat_id = msg.channel_id.to_string();
        let bot_id = shared.bot_id();
        let mentioned = bot_id.is_some_and(|id| is_mentioned(msg, id));
        let content = clean_content(&msg.content, bot_id);
        let decision = shared.access.check(&InboundContext {
            sender_id: &sender_id,
            chat_id: &chat_id,
            is_group,
            mentioned,
            text: &content,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                let text = AccessControl::pairing_message(&request);
                msg.channel_id
                    .send_message(http, CreateMessage::new().content(text))
                    .await
                    .map_err(map_err)?;
                return Ok(());
            }
            AccessDecision::Handled { reply } => {
                msg.channel_id
                    .send_message(http, CreateMessage::new().content(reply))
                    .await
                    .map_err(map_err)?;
                return Ok(());
            }
            _ => return Ok(()),
        }
        if !shared.settings.read_receipt_emoji.is_empty() {
            let emoji = ReactionType::Unicode(shared.settings.read_receipt_emoji.clone());
            if let Err(e) = http.create_reaction(msg.channel_id, msg.id, &emoji).await {
                tracing::debug!(error = %e, "discord: read receipt reaction failed");
            }
        }
        let mut lines = Vec::new();
        if !content.is_empty() {
            lines.push(content);
        }
        let mut media = Vec::new();
        for attachment in &msg.attachments {
            lines.push(self.receive_attachment(attachment, &mut media).await);
        }
        let mut inbound = InboundMessage::new(NAME, sender_id, chat_id, lines.join("\n"))
            .with_metadata("message_id", msg.id.to_string())
            .with_metadata("username", msg.author.name.clone())
            .with_metadata("is_group", is_group);
        if let Some(guild) = msg.guild_id {
            inbound = inbound.with_metadata("guild_id", guild.to_string());
        }
        inbound.media = media;
        shared.start_typing(Arc::clone(http), msg.channel_id);
        if let Err(e) = self.bus.publish_inbound(inbound).await {
            shared.stop_typing(msg.channel_id.get());
            return Err(e.into());
        }
        Ok(())
    }

    /// Downloads an attachment into the media directory; returns the line the agent sees for it.
    async fn receive_attachment(&self, attachment: &Attachment, media: &mut Vec<String>) -> String {
        let label = if attachment
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("image/"))
        {
            "image"
        } else {
            "file"
        };
        if attachment.size > self.shared.settings.max_attachment_bytes {
            return format!("[{label}: {} (too large to download)]", attachment.filename);
        }
        let dir = self.shared.media_dir.join(NAME);
        let path = dir.join(format!(
            "{}_{}",
            attachment.id,
            safe_file_name(&attachment.filename)
        ));
        let result = async {
            let bytes = attachment.download().await.map_err(map_err)?;
            let io = |source| ChannelError::Io {
                path: path.display().to_string(),
                source,
            };
            tokio::fs::create_dir_all(&dir).await.map_err(io)?;
            tokio::fs::write(&path, bytes).await.map_err(io)?;
            Ok::<_, ChannelError>(())
        }
        .await;
        match result {
            Ok(()) => {
                let shown = path.display().to_string();
                media.push(shown.clone());
                format!("[{label}: {shown}]")
            }
            Err(e) => {
                tracing::warn!(error = %e, file = %attachment.filename, "discord: attachment download failed");
                format!("[{label}: {} (download failed)]", attachment.filename)
            }
        }
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        // Log in over REST first: a bad token becomes an Auth error here (serenity itself would only log it), and
        // the bot's id is known before the first message arrives.
        let me = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = self.http.get_current_user() => r.map_err(map_err)?,
        };
        *lock(&self.shared.bot_id) = Some(me.id);
        let handler = Handler {
            shared: Arc::clone(&self.shared),
            bus,
        };
        let http = build_http(&self.shared.settings)?;
        let mut client = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = ClientBuilder::new_with_http(http, self.shared.settings.intents).event_handler(handler) => {
                r.map_err(map_err)?
            }
        };
        let shards = client.shard_manager.clone();
        tokio::select! {
            () = cancel.cancelled() => {
                shards.shutdown_all().await;
                Ok(())
            }
            r = client.start() => match r {
                Ok(()) => Err(ChannelError::Transient {
                    channel: NAME.into(),
                    source: "the Discord gateway connection ended".into(),
                }),
                Err(e) => Err(map_err(e)),
            },
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let id = msg
            .chat_id
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|id| *id != 0)
            .ok_or_else(|| ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            })?;
        match msg.kind {
            OutboundKind::StreamDelta { .. } => return Ok(()),
            OutboundKind::Reply | OutboundKind::StreamEnd { .. } => self.shared.stop_typing(id),
            _ => {}
        }
        self.send_text(ChannelId::new(id), msg).await
    }
}
