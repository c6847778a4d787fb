//! [`TelegramChannel`]: receiving (polling or webhook), access control, media, typing, sending and streaming.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, Heartbeat, InboundContext, PairingStore,
    TELEGRAM_LIMIT, Transcribe, markdown_to_telegram_html, split_message,
};
use teloxide::adaptors::Throttle;
use teloxide::adaptors::throttle::Limits;
use teloxide::net::Download;
use teloxide::payloads::{EditMessageTextSetters, GetUpdatesSetters, SendMessageSetters, SetWebhookSetters};
use teloxide::prelude::{Bot, Requester};
use teloxide::requests::{HasPayload, Request};
use teloxide::types::{
    AllowedUpdate, BotCommand, CallbackQuery, ChatAction, ChatId, InlineKeyboardButton, InlineKeyboardMarkup,
    Message, MessageId, ParseMode, ReplyMarkup, ReplyParameters, Update, UpdateKind, UserId,
};
use teloxide::{ApiError, RequestError};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::media::{self, Attachment};
use crate::{TelegramSettings, WebhookSettings};

/// The bot commands registered with Telegram (`setMyCommands`): 0.3.5's menu (names as Telegram allows them:
/// `dream_log` is `/dream-log`), with our descriptions.
pub const BOT_COMMANDS: &[(&str, &str)] = &[
    ("start", "Start the bot"),
    ("new", "Start a new conversation"),
    ("compact", "Summarise older messages into memory"),
    ("stop", "Stop the current task"),
    ("restart", "Restart nanobot (the owner only)"),
    ("status", "Show model, usage and session size"),
    ("history", "Show the last messages of this chat"),
    ("goal", "Work on a long-running task"),
    ("trigger", "Create a named local trigger for this chat"),
    ("pairing", "Pairing requests: list, approve, deny"),
    ("model", "Show or switch the model preset"),
    ("skill", "List the skills"),
    ("dream", "Consolidate memory now (Dream)"),
    ("dream_log", "Show recent Dream changes"),
    ("dream_restore", "Undo a Dream change"),
    ("dream_prompt", "Show or set up Dream's instructions"),
    ("evaluator_prompt", "Show or set up when the heartbeat speaks up"),
    ("help", "Show available commands"),
];

const NAME: &str = "telegram";
/// Telegram's hard limit for one message, after entity parsing.
const HARD_LIMIT: usize = 4096;
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// A typing indicator never outlives this, even if no reply comes.
const TYPING_MAX: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
struct BotIdentity {
    id: UserId,
    username: String,
}

#[derive(Debug)]
struct StreamState {
    message_id: Option<MessageId>,
    text: String,
    shown: String,
    last_edit: Option<Instant>,
}

/// The Telegram channel. See the [crate docs](crate).
pub struct TelegramChannel {
    /// Sends go through teloxide's `Throttle`, which queues them within Telegram's limits (per chat, per group,
    /// overall) instead of running into flood waits.
    bot: Throttle<Bot>,
    /// The throttle's queue worker, started by the first `run` or `send` (it needs the runtime).
    queue: Mutex<Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>>,
    settings: TelegramSettings,
    access: AccessControl,
    media_dir: PathBuf,
    transcriber: Option<Arc<dyn Transcribe>>,
    heartbeat: Heartbeat,
    me: Mutex<Option<BotIdentity>>,
    typing: Arc<Mutex<HashMap<i64, CancellationToken>>>,
    streams: tokio::sync::Mutex<HashMap<String, StreamState>>,
    /// Where the webhook server's refusals go (logged only, unless the gateway gives its metrics).
    refusals: Arc<dyn nanobot_http::RefusalObserver>,
}

impl std::fmt::Debug for TelegramChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .field("transcriber", &self.transcriber.is_some())
            .finish_non_exhaustive()
    }
}

use nanobot_util::{Backoff, lock};

impl TelegramChannel {
    /// A channel with these settings that stores downloaded media in `media_dir`. Without
    /// [`with_pairing`](Self::with_pairing), denied direct messages are ignored.
    pub fn new(settings: TelegramSettings, media_dir: impl Into<PathBuf>) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        let mut client = teloxide::net::default_reqwest_settings()
            .timeout(settings.poll_timeout + Duration::from_secs(15));
        if let Some(proxy) = &settings.proxy {
            let proxy = reqwest_012::Proxy::all(proxy.as_str())
                .map_err(|e| bad(format!("channels.telegram.proxy: {e}")))?;
            client = client.proxy(proxy);
        }
        let client = client
            .build()
            .map_err(|e| bad(format!("cannot build the HTTP client: {e}")))?;
        let mut bot = Bot::with_client(settings.token.expose(), client);
        if let Some(url) = &settings.api_url {
            bot = bot.set_api_url(url.clone());
        }
        let (bot, queue) = Throttle::new(bot, Limits::default());
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            settings.group_policy,
            None,
        );
        Ok(Self {
            bot,
            queue: Mutex::new(Some(Box::pin(queue))),
            settings,
            access,
            media_dir: media_dir.into(),
            transcriber: None,
            heartbeat: Heartbeat::new(),
            me: Mutex::new(None),
            typing: Arc::new(Mutex::new(HashMap::new())),
            streams: tokio::sync::Mutex::new(HashMap::new()),
            refusals: Arc::new(nanobot_http::LogRefusals),
        })
    }

    /// Issues pairing codes to denied direct messages and honours `/pairing approve` from owners.
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

    /// Reports the webhook server's refusals (slow request heads, idle connections, the per-address cap, bodies
    /// over the limit) to `observer`, such as the gateway's metrics, instead of only logging them.
    #[must_use]
    pub fn with_refusal_observer(mut self, observer: Arc<dyn nanobot_http::RefusalObserver>) -> Self {
        self.refusals = observer;
        self
    }

    /// Transcribes voice notes and audio files with `transcriber`.
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// The teloxide bot (for callers that need Bot API methods this channel does not wrap). Its sends are not
    /// queued with the channel's own.
    pub fn bot(&self) -> &Bot {
        self.bot.inner()
    }

    /// Starts the send queue's worker once (it ends when the channel is dropped).
    fn start_queue(&self) {
        if let Some(worker) = lock(&self.queue).take() {
            tokio::spawn(worker);
        }
    }

    async fn register(&self) -> Result<BotIdentity, ChannelError> {
        let me = self.bot.get_me().await.map_err(map_err)?;
        let identity = BotIdentity {
            id: me.user.id,
            username: me.username().to_string(),
        };
        *lock(&self.me) = Some(identity.clone());
        let commands: Vec<BotCommand> = BOT_COMMANDS
            .iter()
            .map(|(c, d)| BotCommand::new(*c, *d))
            .collect();
        if let Err(e) = self.bot.set_my_commands(commands).await {
            tracing::warn!(error = %scrub(e), "telegram: could not register bot commands");
        }
        Ok(identity)
    }

    async fn poll(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        if let Err(e) = self.bot.delete_webhook().await {
            tracing::debug!(error = %scrub(e), "telegram: deleteWebhook failed");
        }
        // Drop updates that queued up while we were away: ask for the last one only, then confirm past it.
        let pending = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = self.bot.get_updates().offset(-1).timeout(0).send() => r.map_err(map_err)?,
        };
        let mut offset = pending.last().map_or(0, |u| u.id.as_offset());
        self.heartbeat.beat();
        let timeout = u32::try_from(self.settings.poll_timeout.as_secs()).unwrap_or(30);
        let mut schedule = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(32));
        loop {
            let request = self
                .bot
                .get_updates()
                .offset(offset)
                .timeout(timeout)
                .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
            let result = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                r = request.send() => r,
            };
            match result {
                Ok(updates) => {
                    schedule.reset();
                    self.heartbeat.beat();
                    for update in updates {
                        offset = update.id.as_offset();
                        self.handle_update(update, bus).await?;
                    }
                }
                Err(e) => {
                    let err = map_err(e);
                    if matches!(err, ChannelError::Auth { .. }) {
                        return Err(err);
                    }
                    // Telegram's own `retry_after` (a flood wait) is obeyed as given, uncapped.
                    let own = schedule.next_delay();
                    let wait = err.retry_after().unwrap_or(own);
                    tracing::warn!(error = %err, ?wait, "telegram: getUpdates failed");
                    tokio::select! {
                        () = cancel.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    async fn serve_webhook(
        &self,
        bus: &Arc<dyn Bus>,
        cancel: &CancellationToken,
        hook: &WebhookSettings,
    ) -> Result<(), ChannelError> {
        let addr = format!("{}:{}", hook.listen_host, hook.listen_port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| ChannelError::Io {
                path: format!("webhook listener {addr}"),
                source,
            })?;
        let mut set = self
            .bot
            .set_webhook(hook.url.clone())
            .max_connections(hook.max_connections)
            .drop_pending_updates(true)
            .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
        if !hook.secret_token.is_empty() {
            set.payload_mut().secret_token = Some(hook.secret_token.expose().to_string());
        }
        set.send().await.map_err(map_err)?;
        let (tx, mut rx) = mpsc::channel::<Update>(64);
        let router = webhook_router(&hook.path, tx, hook.secret_token.expose().to_string());
        let router = router.layer(axum::extract::DefaultBodyLimit::max(WEBHOOK_MAX_BODY));
        // Bounded like every listener nanobot opens: a client gets `headerReadTimeout` for each request head, an
        // idle connection is closed, and one address holds at most as many connections as Telegram was told to
        // open (plus a few), so slow or hostile clients cannot pile up.
        let mut limits = nanobot_http::ServerLimits::default();
        limits.max_connections_per_client = usize::from(hook.max_connections) + 8;
        limits.header_read_timeout = hook.header_read_timeout;
        limits.idle_timeout = hook.idle_timeout;
        limits.max_body_bytes = WEBHOOK_MAX_BODY;
        limits.max_other_body_bytes = WEBHOOK_MAX_BODY;
        let server_cancel = cancel.child_token();
        let server = nanobot_http::serve(
            listener,
            router,
            limits,
            self.refusals.clone(),
            server_cancel.clone(),
            "telegram-webhook",
        );
        tracing::info!(%addr, path = %hook.path, "telegram: webhook listening");
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                update = rx.recv() => match update {
                    Some(update) => {
                        self.heartbeat.beat();
                        self.handle_update(update, bus).await?;
                    }
                    None => break,
                },
            }
        }
        server_cancel.cancel();
        server.abort();
        Ok(())
    }

    async fn handle_update(&self, update: Update, bus: &Arc<dyn Bus>) -> Result<(), ChannelError> {
        let msg = match update.kind {
            UpdateKind::Message(msg) => msg,
            UpdateKind::CallbackQuery(query) => {
                return match self.handle_callback(&query, bus).await {
                    Err(ChannelError::Bus(e)) => Err(ChannelError::Bus(e)),
                    Err(e) => {
                        tracing::warn!(error = %e, "telegram: could not handle a button press");
                        Ok(())
                    }
                    Ok(()) => Ok(()),
                };
            }
            UpdateKind::Error(raw) => {
                tracing::warn!(update = %raw, "telegram: could not parse an update; skipped");
                return Ok(());
            }
            _ => return Ok(()),
        };
        match self.handle_message(&msg, bus).await {
            Err(ChannelError::Bus(e)) => Err(ChannelError::Bus(e)),
            Err(e) => {
                tracing::warn!(error = %e, chat = msg.chat.id.0, "telegram: could not handle a message");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// A press on a button: an approval request's (its command, `/approve ID` or `/deny ID`) or a `message` tool
    /// button's (its label, which is never a command) goes to the agent as a message from the person who pressed
    /// it, after the same access check as their messages. Other commands in callback data are ignored.
    async fn handle_callback(&self, query: &CallbackQuery, bus: &Arc<dyn Bus>) -> Result<(), ChannelError> {
        let answer = |text: Option<&str>| {
            let mut request = self.bot.answer_callback_query(query.id.clone());
            request.payload_mut().text = text.map(str::to_owned);
            request.send()
        };
        let data = query.data.as_deref().unwrap_or_default();
        let is_answer = data.starts_with("/approve ")
            || data.starts_with("/deny ")
            || (!data.trim().is_empty() && !data.starts_with('/'));
        let Some(chat) = query
            .message
            .as_ref()
            .map(|m| m.chat().id.0)
            .filter(|_| is_answer)
        else {
            answer(None).await.map_err(map_err)?;
            return Ok(());
        };
        let from = &query.from;
        let sender_id = match &from.username {
            Some(username) => format!("{}|{username}", from.id),
            None => from.id.to_string(),
        };
        let chat_id = chat.to_string();
        let is_group = query.message.as_ref().is_some_and(|m| !m.chat().is_private());
        let ctx = InboundContext {
            sender_id: &sender_id,
            chat_id: &chat_id,
            is_group,
            mentioned: true,
            text: data,
        };
        if !matches!(self.access.check(&ctx)?, AccessDecision::Allow) {
            answer(Some("Not allowed")).await.map_err(map_err)?;
            return Ok(());
        }
        let inbound = InboundMessage::new(NAME, sender_id, chat_id, data)
            .with_metadata("user_id", from.id.0)
            .with_metadata("first_name", from.first_name.clone())
            .with_metadata("is_group", is_group);
        bus.publish_inbound(inbound).await?;
        if let Err(e) = answer(None).await {
            tracing::debug!(error = %scrub(e), "telegram: answerCallbackQuery failed");
        }
        Ok(())
    }

    async fn handle_message(&self, msg: &Message, bus: &Arc<dyn Bus>) -> Result<(), ChannelError> {
        let Some(from) = msg.from.as_ref() else {
            return Ok(());
        };
        if from.is_bot {
            return Ok(());
        }
        let sender_id = match &from.username {
            Some(username) => format!("{}|{username}", from.id),
            None => from.id.to_string(),
        };
        let chat = msg.chat.id.0;
        let chat_id = chat.to_string();
        let is_group = !msg.chat.is_private();
        let text = msg.text().or_else(|| msg.caption()).unwrap_or_default();
        let me = lock(&self.me).clone();
        let bot_username = me.as_ref().map(|m| m.username.clone()).unwrap_or_default();
        let mentioned = (!bot_username.is_empty()
            && text
                .to_lowercase()
                .contains(&format!("@{}", bot_username.to_lowercase())))
            || msg
                .reply_to_message()
                .and_then(|r| r.from.as_ref())
                .is_some_and(|u| me.as_ref().is_some_and(|m| m.id == u.id));

        let ctx = InboundContext {
            sender_id: &sender_id,
            chat_id: &chat_id,
            is_group,
            mentioned,
            text,
        };
        match self.access.check(&ctx)? {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                self.send_plain(chat, &AccessControl::pairing_message(&request), None)
                    .await?;
                return Ok(());
            }
            AccessDecision::Handled { reply } => {
                self.send_plain(chat, &reply, None).await?;
                return Ok(());
            }
            _ => return Ok(()),
        }

        let mut content = text.to_string();
        if let Some((command, rest)) = parse_command(text, &bot_username) {
            if command == "start" {
                let greeting = format!(
                    "👋 Hi {}! I'm nanobot.\n\nSend me a message and I'll respond.\nType /help to see available commands.",
                    from.first_name
                );
                self.send_plain(chat, &greeting, None).await?;
                return Ok(());
            }
            // Drop the `@botname` suffix so the agent sees `/new`, `/stop`, `/help`.
            content = if rest.is_empty() {
                format!("/{command}")
            } else {
                format!("/{command} {rest}")
            };
        }

        let mut media_paths = Vec::new();
        if let Some(attachment) = media::attachment(msg) {
            let line = self.receive_attachment(&attachment, &mut media_paths).await;
            if content.is_empty() {
                content = line;
            } else {
                content = format!("{content}\n{line}");
            }
        }
        if content.trim().is_empty() {
            return Ok(());
        }

        let mut inbound = InboundMessage::new(NAME, sender_id, chat_id, content)
            .with_metadata("message_id", msg.id.0)
            .with_metadata("user_id", from.id.0)
            .with_metadata("first_name", from.first_name.clone())
            .with_metadata("is_group", is_group)
            .with_streaming(self.settings.streaming);
        if let Some(username) = &from.username {
            inbound = inbound.with_metadata("username", username.clone());
        }
        if let Some(thread) = msg.thread_id {
            inbound = inbound.with_metadata("thread_id", thread.0.0);
        }
        inbound.media = media_paths;
        self.start_typing(chat);
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Downloads (and maybe transcribes) an attachment; returns the line the agent sees for it.
    async fn receive_attachment(&self, attachment: &Attachment, media_paths: &mut Vec<String>) -> String {
        let label = attachment.kind.label();
        let path = match self.download(attachment).await {
            Ok(path) => path,
            Err(e) => {
                tracing::warn!(error = %e, "telegram: media download failed");
                return format!("[{label}: download failed]");
            }
        };
        let shown = path.display().to_string();
        media_paths.push(shown.clone());
        if attachment.kind.transcribable()
            && let Some(transcriber) = &self.transcriber
        {
            match transcriber.transcribe(&path).await {
                Ok(text) if !text.trim().is_empty() => return format!("[transcription: {}]", text.trim()),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "telegram: transcription failed"),
            }
        }
        format!("[{label}: {shown}]")
    }

    async fn download(&self, attachment: &Attachment) -> Result<PathBuf, ChannelError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| ChannelError::Io { path, source }
        };
        tokio::fs::create_dir_all(&self.media_dir)
            .await
            .map_err(io(&self.media_dir))?;
        let file = self
            .bot
            .get_file(attachment.file_id.clone())
            .await
            .map_err(map_err)?;
        let dst = self.media_dir.join(&attachment.file_name);
        let mut out = tokio::fs::File::create(&dst).await.map_err(io(&dst))?;
        self.bot
            .download_file(&file.path, &mut out)
            .await
            .map_err(|e| ChannelError::Transient {
                channel: NAME.into(),
                source: Box::new(e),
            })?;
        out.flush().await.map_err(io(&dst))?;
        Ok(dst)
    }

    fn start_typing(&self, chat: i64) {
        let token = CancellationToken::new();
        if let Some(old) = lock(&self.typing).insert(chat, token.clone()) {
            old.cancel();
        }
        let bot = self.bot.clone();
        let typing = self.typing.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            while started.elapsed() < TYPING_MAX {
                if let Err(e) = bot.send_chat_action(ChatId(chat), ChatAction::Typing).await {
                    tracing::debug!(error = %scrub(e), chat, "telegram: typing indicator failed");
                }
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
            let mut map = lock(&typing);
            if map.get(&chat).is_some_and(|t| t.is_cancelled() || t == &token) {
                map.remove(&chat);
            }
        });
    }

    fn stop_typing(&self, chat: i64) {
        if let Some(token) = lock(&self.typing).remove(&chat) {
            token.cancel();
        }
    }

    fn stop_all_typing(&self) {
        for (_, token) in lock(&self.typing).drain() {
            token.cancel();
        }
    }

    fn reply_target(&self, msg: &OutboundMessage) -> Option<MessageId> {
        if !self.settings.reply_to_message {
            return None;
        }
        msg.reply_to
            .as_deref()
            .and_then(|id| id.parse::<i32>().ok())
            .or_else(|| {
                msg.metadata
                    .get("message_id")
                    .and_then(serde_json::Value::as_i64)
                    .and_then(|id| i32::try_from(id).ok())
            })
            .map(MessageId)
    }

    /// Sends `text` as is (no parse mode).
    async fn send_plain(
        &self,
        chat: i64,
        text: &str,
        reply_to: Option<MessageId>,
    ) -> Result<Message, ChannelError> {
        let mut request = self.bot.send_message(ChatId(chat), text);
        if let Some(id) = reply_to {
            request.payload_mut().reply_parameters = Some(ReplyParameters {
                allow_sending_without_reply: Some(true),
                ..ReplyParameters::new(id)
            });
        }
        request.send().await.map_err(map_err)
    }

    /// Sends one piece of Markdown as HTML, or as plain text when Telegram rejects the markup.
    async fn send_chunk(
        &self,
        chat: i64,
        markdown: &str,
        reply_to: Option<MessageId>,
    ) -> Result<Message, ChannelError> {
        let html = markdown_to_telegram_html(markdown);
        if !html.trim().is_empty() && html.chars().count() <= HARD_LIMIT {
            let mut request = self
                .bot
                .send_message(ChatId(chat), html)
                .parse_mode(ParseMode::Html);
            if let Some(id) = reply_to {
                request.payload_mut().reply_parameters = Some(ReplyParameters {
                    allow_sending_without_reply: Some(true),
                    ..ReplyParameters::new(id)
                });
            }
            match request.send().await {
                Ok(message) => return Ok(message),
                Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
                    tracing::warn!(%reason, "telegram: HTML rejected; sending plain text");
                }
                Err(e) => return Err(map_err(e)),
            }
        }
        self.send_plain(chat, markdown, reply_to).await
    }

    async fn send_text(
        &self,
        chat: i64,
        markdown: &str,
        reply_to: Option<MessageId>,
    ) -> Result<(), ChannelError> {
        for (i, piece) in telegram_pieces(markdown).iter().enumerate() {
            self.send_chunk(chat, piece, if i == 0 { reply_to } else { None })
                .await?;
        }
        Ok(())
    }

    async fn send_file(&self, chat: i64, path: &str) -> Result<(), ChannelError> {
        use teloxide::types::InputFile;
        let file = InputFile::file(PathBuf::from(path));
        let ext = Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let result = match ext.as_str() {
            "jpg" | "jpeg" | "png" | "gif" | "webp" => {
                self.bot.send_photo(ChatId(chat), file).send().await.map(drop)
            }
            "ogg" | "oga" | "opus" => self.bot.send_voice(ChatId(chat), file).send().await.map(drop),
            "mp3" | "m4a" | "wav" | "flac" => self.bot.send_audio(ChatId(chat), file).send().await.map(drop),
            _ => self.bot.send_document(ChatId(chat), file).send().await.map(drop),
        };
        result.map_err(map_err)
    }

    /// An approval request with its two buttons (their callback data is the answer command).
    fn approval_keyboard(approval: &serde_json::Value) -> ReplyMarkup {
        let field = |k: &str| {
            approval
                .get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        ReplyMarkup::InlineKeyboard(InlineKeyboardMarkup::new([[
            InlineKeyboardButton::callback("✅ Yes", field("approve")),
            InlineKeyboardButton::callback("❌ No", field("deny")),
        ]]))
    }

    /// The `message` tool's buttons (rows of labels): pressing one sends its label back as a message. Callback
    /// data is cut to Telegram's 64 bytes at a character boundary.
    fn buttons_keyboard(rows: &[Vec<String>]) -> ReplyMarkup {
        let data = |label: &str| {
            let mut end = label.len().min(64);
            while !label.is_char_boundary(end) {
                end -= 1;
            }
            label[..end].to_owned()
        };
        ReplyMarkup::InlineKeyboard(InlineKeyboardMarkup::new(rows.iter().map(|row| {
            row.iter()
                .map(|l| InlineKeyboardButton::callback(l.clone(), data(l)))
                .collect::<Vec<_>>()
        })))
    }

    /// A message with an inline keyboard under it.
    async fn send_with_keyboard(
        &self,
        chat: i64,
        msg: &OutboundMessage,
        markup: ReplyMarkup,
    ) -> Result<(), ChannelError> {
        let html = markdown_to_telegram_html(&msg.content);
        let mut request = self
            .bot
            .send_message(ChatId(chat), html)
            .parse_mode(ParseMode::Html)
            .reply_markup(markup.clone());
        if let Some(id) = self.reply_target(msg) {
            request.payload_mut().reply_parameters = Some(ReplyParameters {
                allow_sending_without_reply: Some(true),
                ..ReplyParameters::new(id)
            });
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(RequestError::Api(ApiError::CantParseEntities(_))) => self
                .bot
                .send_message(ChatId(chat), msg.content.clone())
                .reply_markup(markup)
                .send()
                .await
                .map(drop)
                .map_err(map_err),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn send_reply(&self, chat: i64, msg: &OutboundMessage) -> Result<(), ChannelError> {
        for path in &msg.media {
            self.send_file(chat, path).await?;
        }
        if msg.content.trim().is_empty() {
            return Ok(());
        }
        if let Some(approval) = msg.metadata.get("_approval") {
            return self
                .send_with_keyboard(chat, msg, Self::approval_keyboard(approval))
                .await;
        }
        let rows = nanobot_bus::buttons(&msg.metadata);
        if !rows.is_empty() {
            return self
                .send_with_keyboard(chat, msg, Self::buttons_keyboard(&rows))
                .await;
        }
        self.send_text(chat, &msg.content, self.reply_target(msg)).await
    }

    /// Extends a streamed message. Failures are logged, never returned: a retried delta would duplicate text,
    /// and the stream's end repairs whatever was missed.
    async fn stream_delta(&self, chat: i64, stream_id: &str, delta: &str) {
        let mut streams = self.streams.lock().await;
        let state = streams
            .entry(stream_id.to_string())
            .or_insert_with(|| StreamState {
                message_id: None,
                text: String::new(),
                shown: String::new(),
                last_edit: None,
            });
        state.text.push_str(delta);
        let preview: String = state.text.chars().take(TELEGRAM_LIMIT).collect();
        if preview.trim().is_empty() || preview == state.shown {
            return;
        }
        match state.message_id {
            None => match self.bot.send_message(ChatId(chat), preview.clone()).send().await {
                Ok(message) => {
                    state.message_id = Some(message.id);
                    state.shown = preview;
                    state.last_edit = Some(Instant::now());
                }
                Err(e) => tracing::warn!(error = %scrub(e), "telegram: could not start a streamed message"),
            },
            Some(id) => {
                if state
                    .last_edit
                    .is_some_and(|t| t.elapsed() < self.settings.stream_edit_interval)
                {
                    return;
                }
                match self
                    .bot
                    .edit_message_text(ChatId(chat), id, preview.clone())
                    .send()
                    .await
                {
                    Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => {
                        state.shown = preview;
                        state.last_edit = Some(Instant::now());
                    }
                    Err(e) => {
                        tracing::warn!(error = %scrub(e), "telegram: could not edit a streamed message")
                    }
                }
            }
        }
    }

    /// Finishes a streamed message: the first piece replaces the streamed text (as HTML), the rest follow.
    async fn stream_end(
        &self,
        chat: i64,
        stream_id: &str,
        msg: &OutboundMessage,
    ) -> Result<(), ChannelError> {
        let message_id = self
            .streams
            .lock()
            .await
            .get(stream_id)
            .and_then(|s| s.message_id);
        let Some(id) = message_id else {
            self.streams.lock().await.remove(stream_id);
            return self.send_reply(chat, msg).await;
        };
        let pieces = telegram_pieces(&msg.content);
        let mut rest = pieces.iter();
        if let Some(first) = rest.next() {
            self.edit_chunk(chat, id, first).await?;
        }
        for piece in rest {
            self.send_chunk(chat, piece, None).await?;
        }
        self.streams.lock().await.remove(stream_id);
        Ok(())
    }

    async fn edit_chunk(&self, chat: i64, id: MessageId, markdown: &str) -> Result<(), ChannelError> {
        let html = markdown_to_telegram_html(markdown);
        if !html.trim().is_empty() && html.chars().count() <= HARD_LIMIT {
            match self
                .bot
                .edit_message_text(ChatId(chat), id, html)
                .parse_mode(ParseMode::Html)
                .send()
                .await
            {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => return Ok(()),
                Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
                    tracing::warn!(%reason, "telegram: HTML rejected; editing as plain text");
                }
                Err(e) => return Err(map_err(e)),
            }
        }
        match self
            .bot
            .edit_message_text(ChatId(chat), id, markdown)
            .send()
            .await
        {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(e) => Err(map_err(e)),
        }
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        self.start_queue();
        let identity = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = self.register() => r?,
        };
        tracing::info!(bot = %identity.username, "telegram: connected");
        self.heartbeat.beat();
        let result = match &self.settings.webhook {
            None => self.poll(&bus, &cancel).await,
            Some(hook) => self.serve_webhook(&bus, &cancel, hook).await,
        };
        self.stop_all_typing();
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        self.start_queue();
        let chat: i64 = msg
            .chat_id
            .trim()
            .parse()
            .map_err(|_| ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            })?;
        match &msg.kind {
            OutboundKind::StreamDelta { stream_id } => {
                self.stream_delta(chat, stream_id, &msg.content).await;
                Ok(())
            }
            OutboundKind::StreamEnd { stream_id } => {
                let result = self.stream_end(chat, stream_id, msg).await;
                self.stop_typing(chat);
                result
            }
            OutboundKind::Reply => {
                let result = self.send_reply(chat, msg).await;
                self.stop_typing(chat);
                result
            }
            _ => self.send_text(chat, &msg.content, None).await,
        }
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        // A webhook has no poll loop to watch: silence there just means nobody wrote.
        self.settings.webhook.is_none().then(|| self.heartbeat.clone())
    }

    fn supports_streaming(&self) -> bool {
        self.settings.streaming
    }

    fn supports_buttons(&self) -> bool {
        true
    }
}

/// Splits Markdown into pieces whose HTML fits in one Telegram message: at [`TELEGRAM_LIMIT`] characters, and
/// smaller where markup (`&amp;`, tags) would push a piece's HTML past Telegram's hard limit.
fn telegram_pieces(markdown: &str) -> Vec<String> {
    fn fit(markdown: &str, limit: usize, out: &mut Vec<String>) {
        for piece in split_message(markdown, limit) {
            if limit > 256 && markdown_to_telegram_html(&piece).chars().count() > HARD_LIMIT {
                fit(&piece, limit / 2, out);
            } else {
                out.push(piece);
            }
        }
    }
    let mut out = Vec::new();
    fit(markdown, TELEGRAM_LIMIT, &mut out);
    out
}

/// `/cmd@bot rest` → `("cmd", "rest")`, for commands addressed to us (or to no bot in particular).
fn parse_command<'a>(text: &'a str, bot_username: &str) -> Option<(String, &'a str)> {
    let text = text.trim_start();
    let body = text.strip_prefix('/')?;
    let (word, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    let (command, target) = word.split_once('@').map_or((word, None), |(c, t)| (c, Some(t)));
    if command.is_empty() || !command.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    if target.is_some_and(|t| !t.eq_ignore_ascii_case(bot_username)) {
        return None;
    }
    Some((command.to_ascii_lowercase(), rest.trim()))
}

/// Largest webhook request body Telegram may post (an update is a few KiB; a long message with entities stays
/// far below this).
const WEBHOOK_MAX_BODY: usize = 1024 * 1024;

fn webhook_router(path: &str, tx: mpsc::Sender<Update>, secret: String) -> axum::Router {
    use axum::http::{HeaderMap, StatusCode};
    let secret = Arc::new(secret);
    axum::Router::new().route(
        path,
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let tx = tx.clone();
            let secret = secret.clone();
            async move {
                if !secret.is_empty() {
                    let given = headers
                        .get("x-telegram-bot-api-secret-token")
                        .map(|v| v.as_bytes())
                        .unwrap_or_default();
                    if !constant_time_eq(given, secret.as_bytes()) {
                        return StatusCode::UNAUTHORIZED;
                    }
                }
                let update: Update = match serde_json::from_slice(&body) {
                    Ok(update) => update,
                    Err(e) => {
                        tracing::warn!(error = %e, "telegram: webhook body is not an Update");
                        return StatusCode::BAD_REQUEST;
                    }
                };
                match tx.send(update).await {
                    Ok(()) => StatusCode::OK,
                    Err(_) => StatusCode::SERVICE_UNAVAILABLE,
                }
            }
        }),
    )
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Classifies a Bot API failure by what the caller does next.
/// Drops the body a server sent back from a teloxide error before it is shown or logged: a broken proxy may echo
/// the request path, which holds the bot token (teloxide already hides the token in URLs).
fn scrub(e: RequestError) -> RequestError {
    match e {
        RequestError::InvalidJson { source, raw } => RequestError::InvalidJson {
            source,
            raw: format!("({} bytes, not shown)", raw.len()).into(),
        },
        other => other,
    }
}

fn map_err(e: RequestError) -> ChannelError {
    let channel = NAME.to_string();
    let e = scrub(e);
    match e {
        RequestError::RetryAfter(seconds) => ChannelError::RateLimited {
            channel,
            retry_after: Some(seconds.duration()),
        },
        RequestError::Api(ApiError::InvalidToken) => ChannelError::Auth {
            channel,
            source: Box::new(e),
        },
        RequestError::Api(_) | RequestError::MigrateToChatId(_) => ChannelError::Rejected {
            channel,
            source: Box::new(e),
        },
        other => ChannelError::Transient {
            channel,
            source: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_addressed_to_us_are_recognised() {
        assert_eq!(parse_command("/new", "nanobot"), Some(("new".into(), "")));
        assert_eq!(
            parse_command("/Help@NanoBot please", "nanobot"),
            Some(("help".into(), "please"))
        );
        assert_eq!(parse_command("/new@otherbot", "nanobot"), None);
        assert_eq!(parse_command("no command", "nanobot"), None);
        assert_eq!(parse_command("/ path", "nanobot"), None);
        assert_eq!(parse_command("/etc/passwd", "nanobot"), None);
    }

    #[test]
    fn errors_are_classified() {
        let retry = map_err(RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(
            7,
        )));
        assert!(retry.is_retryable());
        assert_eq!(retry.retry_after(), Some(Duration::from_secs(7)));
        assert!(matches!(
            map_err(RequestError::Api(ApiError::InvalidToken)),
            ChannelError::Auth { .. }
        ));
        let rejected = map_err(RequestError::Api(ApiError::ChatNotFound));
        assert!(!rejected.is_retryable());
    }

    #[test]
    fn pieces_stay_under_the_hard_limit_after_escaping() {
        // 3,900 characters that each become 4 or 5 in HTML.
        let markdown = "<&> ".repeat(975);
        let pieces = telegram_pieces(&markdown);
        assert!(pieces.len() > 1);
        for piece in &pieces {
            assert!(markdown_to_telegram_html(piece).chars().count() <= HARD_LIMIT);
        }
        let words: usize = pieces.iter().map(|p| p.split_whitespace().count()).sum();
        assert_eq!(words, 975);
        assert_eq!(telegram_pieces("short"), ["short"]);
    }

    #[test]
    fn secret_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
