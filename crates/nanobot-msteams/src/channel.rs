//! [`MsTeamsChannel`]: the webhook the Bot Framework posts to, access control, and answers through the Bot
//! Connector.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use base64::Engine as _;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::{RemoteMedia, SsrfGuard};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, read_attachment, safe_file_name, server_text, split_message,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::auth::{Auth, Refusal};
use crate::refs::{ConversationRef, RefStore};
use crate::text::user_text;
use crate::{MsTeamsSettings, NAME};

/// Bound of every call to the Bot Connector, the token endpoint and the key set.
const API_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound of handling one request of the Bot Framework (its own wait is 15 s; 0.3.5 waits as long).
const HANDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest CA bundle read (the system's whole store is about 200 KiB).
const MAX_CA_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Largest request body taken (activities are a few KiB).
const MAX_BODY_BYTES: usize = 256 * 1024;
/// Largest file received.
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;
/// Largest image sent inline (Teams shows inline images up to about 1 MB).
pub const MAX_INLINE_IMAGE_BYTES: u64 = 1024 * 1024;
/// Teams refuses messages of more than about 28 KB: answers are split below it.
pub const MAX_MESSAGE_BYTES: usize = 24_000;
/// Metadata key of the Teams details of an inbound message (`activity_id`, `conversation_id`,
/// `conversation_type`, `from_name`), as 0.3.5 names it.
pub const META_MSTEAMS: &str = "msteams";

/// The Microsoft Teams channel. See the [crate docs](crate).
pub struct MsTeamsChannel {
    inner: Inner,
}

/// The channel's parts; cheap to clone (the webhook's handlers get a copy sharing them).
#[derive(Clone)]
struct Inner {
    settings: Arc<MsTeamsSettings>,
    auth: Arc<Auth>,
    refs: Arc<RefStore>,
    access: Arc<AccessControl>,
    remote: RemoteMedia,
    media_dir: PathBuf,
    client: Arc<OnceLock<reqwest::Client>>,
    listening: Arc<watch::Sender<Option<SocketAddr>>>,
}

impl std::fmt::Debug for MsTeamsChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsTeamsChannel")
            .field("settings", &self.inner.settings)
            .field("media_dir", &self.inner.media_dir)
            .finish_non_exhaustive()
    }
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

/// A conversation id as one path segment.
fn segment(id: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b':');
    percent_encoding::utf8_percent_encode(id, KEEP).to_string()
}

/// The MIME type of an image Teams shows inline, by file extension.
fn image_type(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

/// `text` in pieces Teams takes.
fn pieces(text: &str) -> Vec<String> {
    if text.len() <= MAX_MESSAGE_BYTES {
        return vec![text.to_owned()];
    }
    // Characters take at most four bytes: the bound holds whatever the text.
    let limit = if text.is_ascii() {
        MAX_MESSAGE_BYTES
    } else {
        MAX_MESSAGE_BYTES / 4
    };
    split_message(text, limit)
}

impl MsTeamsChannel {
    /// A channel with these settings that keeps its conversation references in `state_dir` (0.3.5's
    /// `<workspace>/state`) and received files in `<media_root>/msteams/`. Without
    /// [`with_pairing`](Self::with_pairing), strangers are ignored; without
    /// [`with_ssrf_guard`](Self::with_ssrf_guard), files on internal addresses are refused.
    pub fn new(settings: MsTeamsSettings, state_dir: impl AsRef<Path>, media_root: impl AsRef<Path>) -> Self {
        Self {
            inner: Inner {
                auth: Arc::new(Auth::new(&settings)),
                refs: Arc::new(RefStore::open(state_dir.as_ref(), &settings)),
                access: Self::access(&settings, None),
                remote: RemoteMedia::new(SsrfGuard::default()).with_max_bytes(MAX_FILE_BYTES),
                media_dir: media_root.as_ref().join(NAME),
                client: Arc::new(OnceLock::new()),
                listening: Arc::new(watch::Sender::new(None)),
                settings: Arc::new(settings),
            },
        }
    }

    fn access(settings: &MsTeamsSettings, pairing: Option<Arc<PairingStore>>) -> Arc<AccessControl> {
        Arc::new(AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Open,
            pairing,
        ))
    }

    /// Issues pairing codes to strangers through `store`.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.inner.access = Self::access(&self.inner.settings, Some(store));
        self
    }

    /// Fetches the files users share (their download links) behind `guard`.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.inner.remote = RemoteMedia::new(guard).with_max_bytes(MAX_FILE_BYTES);
        self
    }
}

impl Inner {
    fn client(&self) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let mut roots = Vec::new();
        for file in &self.settings.extra_roots {
            let pem = nanobot_util::read_to_string_bounded(file, MAX_CA_FILE_BYTES).map_err(|e| {
                ChannelError::Config {
                    channel: NAME.into(),
                    message: format!("cannot read the CA file {}: {e}", file.display()),
                }
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| ChannelError::Config {
                    channel: NAME.into(),
                    message: format!("the CA file {} is not PEM: {e}", file.display()),
                })?;
            roots.extend(certs);
        }
        let built = nanobot_channels::api_client(NAME, |b| {
            roots
                .into_iter()
                .fold(b, reqwest::ClientBuilder::add_root_certificate)
                .timeout(API_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
        })?;
        Ok(self.client.get_or_init(|| built))
    }

    /// Runs `change` on the references off the async workers (it writes and syncs their files).
    async fn on_refs(&self, change: impl FnOnce(&RefStore) + Send + 'static) {
        let refs = Arc::clone(&self.refs);
        if let Err(e) = tokio::task::spawn_blocking(move || change(&refs)).await {
            tracing::warn!(error = %e, "msteams: conversation references not updated");
        }
    }

    /// Posts `activity` into a conversation (a new message; `replyToId` in it makes it a reply).
    async fn post(
        &self,
        service_url: &str,
        conversation_id: &str,
        activity: &Value,
    ) -> Result<(), ChannelError> {
        let client = self.client()?;
        let url = format!(
            "{}/v3/conversations/{}/activities",
            service_url.trim_end_matches('/'),
            segment(conversation_id)
        );
        let mut renewed = false;
        loop {
            let bearer = self.auth.bearer(client).await?;
            let resp = client
                .post(&url)
                .bearer_auth(&bearer)
                .json(activity)
                .send()
                .await
                .map_err(|e| transient(format!("Bot Connector: {}", e.without_url())))?;
            let status = resp.status().as_u16();
            if resp.status().is_success() {
                return Ok(());
            }
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = nanobot_channels::download::read_json(resp).await;
            // The connector's message only: a body echoing the request would carry the answer's text.
            let said = server_text(
                body["error"]["message"].as_str().unwrap_or_default(),
                &[self.settings.app_password.expose(), &bearer],
            );
            let text = format!("Bot Connector at {service_url}: HTTP {status} {said}");
            match status {
                // A token the connector no longer takes is asked for again, once.
                401 | 403 if !renewed => {
                    self.auth.forget_token().await;
                    renewed = true;
                }
                401 | 403 => {
                    return Err(ChannelError::auth(
                        NAME,
                        format!("{text} (check channels.msteams.appId, appPassword and tenantId)"),
                    ));
                }
                429 => {
                    return Err(ChannelError::RateLimited {
                        channel: NAME.into(),
                        retry_after,
                    });
                }
                500.. => return Err(transient(text)),
                _ => return Err(ChannelError::rejected(NAME, text)),
            }
        }
    }

    /// Sends `text` (split as Teams needs) and `attachments` (on the first message) into a conversation.
    async fn say(
        &self,
        service_url: &str,
        conversation_id: &str,
        reply_to: Option<&str>,
        text: &str,
        attachments: Vec<Value>,
    ) -> Result<(), ChannelError> {
        let mut attachments = Some(attachments).filter(|a| !a.is_empty());
        for piece in pieces(text) {
            let mut activity =
                json!({"type": "message", "text": if piece.is_empty() { " " } else { piece.as_str() }});
            if let Some(id) = reply_to {
                activity["replyToId"] = json!(id);
            }
            if let Some(a) = attachments.take() {
                activity["attachments"] = json!(a);
            }
            self.post(service_url, conversation_id, &activity).await?;
        }
        Ok(())
    }

    /// Saves the files of an activity into the media directory; their paths.
    async fn download(&self, activity: &Value) -> Vec<String> {
        let mut saved = Vec::new();
        let id = activity["id"].as_str().unwrap_or("msg");
        for (n, attachment) in activity["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let kind = attachment["contentType"].as_str().unwrap_or_default();
            let name = attachment["name"].as_str().unwrap_or_default();
            let (url, authorised) = if kind == "application/vnd.microsoft.teams.file.download.info" {
                (
                    attachment["content"]["downloadUrl"].as_str().unwrap_or_default(),
                    false,
                )
            } else if kind.starts_with("image/") {
                let url = attachment["contentUrl"].as_str().unwrap_or_default();
                (url, self.settings.is_trusted_service_url(url))
            } else {
                continue;
            };
            if url.is_empty() || url.starts_with("data:") {
                continue;
            }
            let fallback = format!("attachment-{n}");
            let name = Path::new(name)
                .file_name()
                .map_or(fallback, |f| f.to_string_lossy().into_owned());
            let dest = self.media_dir.join(safe_file_name(&format!("{id}_{name}")));
            let result = if authorised {
                self.download_from_connector(url, &dest).await
            } else {
                self.remote.save(NAME, url, &dest).await.map(|_| ())
            };
            match result {
                Ok(()) => saved.push(dest.display().to_string()),
                Err(e) => tracing::warn!(error = %e, "msteams: a file was not downloaded"),
            }
        }
        saved
    }

    /// An image kept by the Bot Connector (a trusted service host), fetched with the bot's token.
    async fn download_from_connector(&self, url: &str, dest: &Path) -> Result<(), ChannelError> {
        let client = self.client()?;
        let bearer = self.auth.bearer(client).await?;
        let resp = client
            .get(url)
            .bearer_auth(bearer)
            .send()
            .await
            .map_err(|e| transient(format!("image: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(ChannelError::rejected(
                NAME,
                format!("image: HTTP {}", resp.status().as_u16()),
            ));
        }
        nanobot_channels::download::save_body(NAME, "image", resp, dest, MAX_FILE_BYTES).await?;
        Ok(())
    }

    /// One activity the Bot Framework sent (already authenticated).
    async fn handle(&self, bus: &Arc<dyn Bus>, activity: &Value) -> Result<(), ChannelError> {
        if activity["type"].as_str() != Some("message") {
            return Ok(());
        }
        let text_of = |v: &Value| v.as_str().unwrap_or_default().trim().to_owned();
        let from = &activity["from"];
        let aad = text_of(&from["aadObjectId"]);
        let from_id = text_of(&from["id"]);
        let sender = if aad.is_empty() {
            from_id.clone()
        } else {
            aad.clone()
        };
        let conversation_id = text_of(&activity["conversation"]["id"]);
        let service_url = text_of(&activity["serviceUrl"]);
        let activity_id = text_of(&activity["id"]);
        let conversation_type = text_of(&activity["conversation"]["conversationType"]);
        let recipient = text_of(&activity["recipient"]["id"]);
        if sender.is_empty() || conversation_id.is_empty() || service_url.is_empty() {
            return Ok(());
        }
        if !self.settings.is_trusted_service_url(&service_url) {
            tracing::warn!(%service_url, "msteams: an activity from an untrusted serviceUrl was ignored (channels.msteams.trustedServiceUrlHosts)");
            return Ok(());
        }
        if !recipient.is_empty() && from_id == recipient {
            return Ok(());
        }
        if !conversation_type.is_empty() && conversation_type != "personal" {
            tracing::debug!(%conversation_type, "msteams: only personal chats are answered (as 0.3.5)");
            return Ok(());
        }
        let is_reply = !text_of(&activity["replyToId"]).is_empty()
            || activity["channelData"]["messageType"].as_str() == Some("reply");
        let mut text = user_text(activity["text"].as_str().unwrap_or_default(), is_reply);
        let has_files = activity["attachments"].as_array().is_some_and(|a| {
            a.iter()
                .any(|a| a["contentType"].as_str().is_some_and(|k| k != "text/html"))
        });
        if text.is_empty() && !has_files {
            text.clone_from(&self.settings.mention_only_response);
            if text.is_empty() {
                return Ok(());
            }
        }
        let label = if aad.is_empty() || from_id.is_empty() {
            sender.clone()
        } else {
            format!("{aad}|{from_id}")
        };
        let decision = self.access.check(&InboundContext {
            sender_id: &label,
            chat_id: &conversation_id,
            is_group: false,
            mentioned: true,
            text: &text,
        })?;
        let reply_to =
            Some(activity_id.as_str()).filter(|id| !id.is_empty() && self.settings.reply_in_thread);
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                let message = AccessControl::pairing_message(&request);
                return self
                    .say(&service_url, &conversation_id, reply_to, &message, Vec::new())
                    .await;
            }
            AccessDecision::Handled { reply } => {
                return self
                    .say(&service_url, &conversation_id, reply_to, &reply, Vec::new())
                    .await;
            }
            _ => {
                tracing::warn!(%sender, "msteams: a message from a sender not on channels.msteams.allowFrom was ignored");
                return Ok(());
            }
        }
        let tenant = [
            &activity["channelData"]["tenant"]["id"],
            &activity["conversation"]["tenantId"],
        ]
        .into_iter()
        .find_map(|v| v.as_str().filter(|s| !s.is_empty()))
        .map(str::to_owned);
        let reference = ConversationRef {
            service_url: service_url.clone(),
            conversation_id: conversation_id.clone(),
            bot_id: Some(recipient).filter(|r| !r.is_empty()),
            activity_id: Some(activity_id.clone()).filter(|a| !a.is_empty()),
            conversation_type: Some(conversation_type.clone()).filter(|c| !c.is_empty()),
            tenant_id: tenant,
            updated_at: 0.0,
        };
        self.on_refs(move |refs| refs.remember(reference)).await;
        let media = if has_files {
            self.download(activity).await
        } else {
            Vec::new()
        };
        if text.is_empty() && media.is_empty() {
            return Ok(());
        }
        let details = json!({
            "activity_id": activity_id,
            "conversation_id": conversation_id,
            "conversation_type": if conversation_type.is_empty() { "personal" } else { conversation_type.as_str() },
            "from_name": from["name"],
        });
        let mut inbound = InboundMessage::new(NAME, sender, conversation_id, text)
            .with_metadata(META_MSTEAMS, details)
            .with_metadata(nanobot_bus::META_IS_GROUP, false);
        inbound.media = media;
        bus.publish_inbound(inbound).await?;
        Ok(())
    }

    /// Inline image attachments of the files an answer carries, and a note for each file that cannot go.
    async fn attachments(&self, media: &[String]) -> (Vec<Value>, Vec<String>) {
        let mut attachments = Vec::new();
        let mut notes = Vec::new();
        for path in media {
            let file = Path::new(path);
            let name = file
                .file_name()
                .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
            let Some(kind) = image_type(file) else {
                tracing::warn!(file = %name, "msteams: only images can be sent to Teams; the file was not sent");
                notes.push(format!("[file not sent: {name}]"));
                continue;
            };
            match read_attachment(file, MAX_INLINE_IMAGE_BYTES).await {
                Ok(bytes) => attachments.push(json!({
                    "contentType": kind,
                    "contentUrl": format!("data:{kind};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes)),
                    "name": name,
                })),
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "msteams: an image was not sent");
                    notes.push(format!("[file not sent: {name}]"));
                }
            }
        }
        (attachments, notes)
    }
}

#[derive(Clone)]
struct Served {
    inner: Arc<Inner>,
    bus: Arc<dyn Bus>,
}

fn answer(status: StatusCode, body: Value) -> (StatusCode, axum::Json<Value>) {
    (status, axum::Json(body))
}

/// The webhook: the token checked, the activity handled, `200 {}` (as 0.3.5 answers, also when handling
/// failed: the Bot Framework would only send it again).
async fn webhook(
    State(served): State<Served>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, axum::Json<Value>) {
    let Ok(activity) = serde_json::from_slice::<Value>(&body) else {
        return answer(StatusCode::BAD_REQUEST, json!({"error": "the body is not JSON"}));
    };
    if !activity.is_object() {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "the body is not an activity"}),
        );
    }
    let inner = &served.inner;
    let work = async {
        if inner.settings.validate_inbound_auth {
            let client = match inner.client() {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "msteams: no HTTP client");
                    return answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "unavailable"}));
                }
            };
            let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
            match inner.auth.check(client, authorization, &activity).await {
                Ok(()) => {}
                Err(Refusal::Unauthorized(why)) => {
                    tracing::warn!(%why, "msteams: a request without a valid Bot Framework token was refused");
                    return answer(StatusCode::UNAUTHORIZED, json!({"error": "unauthorized"}));
                }
                Err(Refusal::Unavailable(why)) => {
                    tracing::warn!(%why, "msteams: the Bot Framework's keys are unavailable; a request was refused");
                    return answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "unavailable"}));
                }
            }
        }
        if let Err(e) = inner.handle(&served.bus, &activity).await {
            tracing::warn!(error = %e, "msteams: an activity was not handled");
        }
        answer(StatusCode::OK, json!({}))
    };
    match tokio::time::timeout(HANDLE_TIMEOUT, work).await {
        Ok(a) => a,
        Err(_) => {
            tracing::warn!("msteams: an activity took longer than {HANDLE_TIMEOUT:?} to handle");
            answer(StatusCode::OK, json!({}))
        }
    }
}

#[async_trait]
impl Channel for MsTeamsChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// Serves the webhook on `host:port` until `cancel` fires. A port that cannot be opened is reported
    /// (`Transient`) and the manager tries again with its backoff.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let s = &self.inner.settings;
        if !s.validate_inbound_auth {
            tracing::warn!(
                "msteams: validateInboundAuth is off: anyone who can reach the webhook can write as any user"
            );
        }
        let where_ = format!("{}:{} (channels.msteams.host, port)", s.host, s.port);
        let host = s.host.trim_start_matches('[').trim_end_matches(']');
        let listener = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            l = tokio::net::TcpListener::bind((host, s.port)) => {
                l.map_err(|e| transient(format!("cannot listen on {where_}: {e}")))?
            }
        };
        let addr = listener
            .local_addr()
            .map_err(|e| transient(format!("cannot listen on {where_}: {e}")))?;
        let router = axum::Router::new()
            .route(&s.path, axum::routing::post(webhook))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(Served {
                inner: Arc::new(self.inner.clone()),
                bus,
            });
        tracing::info!(%addr, path = %s.path, "msteams: webhook listening");
        self.inner.listening.send_replace(Some(addr));
        let stop = cancel.clone();
        let served =
            axum::serve(listener, router).with_graceful_shutdown(async move { stop.cancelled().await });
        let result = served.await;
        self.inner.listening.send_replace(None);
        match result {
            Ok(()) if cancel.is_cancelled() => Ok(()),
            Ok(()) => Err(transient("the webhook stopped")),
            Err(e) => Err(transient(format!("the webhook failed: {e}"))),
        }
    }

    /// The webhook's address, once it listens (`port: 0` picks one).
    fn listening(&self) -> Option<watch::Receiver<Option<SocketAddr>>> {
        Some(self.inner.listening.subscribe())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        if matches!(msg.kind, OutboundKind::StreamDelta { .. }) {
            return Ok(());
        }
        let inner = &self.inner;
        let chat = msg.chat_id.trim();
        let Some(reference) = inner.refs.get(chat) else {
            return Err(ChannelError::rejected(
                NAME,
                format!(
                    "no conversation reference for chat {chat:?}: Teams users must write to the bot first"
                ),
            ));
        };
        if !inner.settings.is_trusted_service_url(&reference.service_url) {
            return Err(ChannelError::rejected(
                NAME,
                format!("the conversation reference of chat {chat:?} has an untrusted serviceUrl"),
            ));
        }
        let (attachments, notes) = inner.attachments(&msg.media).await;
        let mut text = msg.content.trim().to_owned();
        if !notes.is_empty() {
            text = format!("{text}\n{}", notes.join("\n")).trim().to_owned();
        }
        if text.is_empty() && attachments.is_empty() {
            return Ok(());
        }
        let reply_to = reference
            .activity_id
            .as_deref()
            .filter(|_| inner.settings.reply_in_thread);
        inner
            .say(
                &reference.service_url,
                &reference.conversation_id,
                reply_to,
                &text,
                attachments,
            )
            .await?;
        let chat = chat.to_owned();
        inner.on_refs(move |refs| refs.touch(&chat)).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_ids_are_one_path_segment() {
        assert_eq!(segment("a:1Xy-_.~"), "a:1Xy-_.~");
        assert_eq!(
            segment("19:abc@thread.tacv2;messageid=1"),
            "19:abc%40thread.tacv2%3Bmessageid%3D1"
        );
        assert_eq!(segment("../x/y"), "..%2Fx%2Fy");
    }

    #[test]
    fn long_answers_are_split_below_teams_limit() {
        assert_eq!(pieces("short").len(), 1);
        let ascii = "word ".repeat(10_000);
        let parts = pieces(&ascii);
        assert!(
            parts.len() >= 3 && parts.iter().all(|p| p.len() <= MAX_MESSAGE_BYTES),
            "{}",
            parts.len()
        );
        let wide = "字".repeat(10_000);
        assert!(pieces(&wide).iter().all(|p| p.len() <= MAX_MESSAGE_BYTES));
        assert_eq!(image_type(Path::new("a/b.PNG")), Some("image/png"));
        assert_eq!(image_type(Path::new("a/b.pdf")), None);
    }
}
