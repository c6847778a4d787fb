//! [`EmailChannel`]: the receive loop (IMAP, IDLE or polling) and replies (SMTP).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_imap::extensions::idle::IdleResponse;
use async_trait::async_trait;
use futures::TryStreamExt as _;
use lettre::{AsyncSmtpTransport, Tokio1Executor};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{Channel, ChannelError, Heartbeat, safe_file_name};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::imap::{self, ImapSession, bounded};
use crate::message::{ParsedMail, parse_mail};
use crate::outbound::{self, Thread, reply_subject};
use crate::{
    EmailError, EmailSettings, MailboxState, NAME, PostAction, StateFile, check_authentication_results, tls,
};

/// Inbound metadata: the received message's `Message-ID`.
pub const META_MESSAGE_ID: &str = "message_id";
/// Inbound metadata: its subject.
pub const META_SUBJECT: &str = "email_subject";
/// Inbound metadata: its `References`, space-separated.
pub const META_REFERENCES: &str = "email_references";

/// The e-mail channel. See the [crate docs](crate).
pub struct EmailChannel {
    settings: Arc<EmailSettings>,
    heartbeat: Heartbeat,
    threads: Mutex<HashMap<String, Thread>>,
    smtp: tokio::sync::OnceCell<AsyncSmtpTransport<Tokio1Executor>>,
}

impl std::fmt::Debug for EmailChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailChannel")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What the server offers for `postAction`.
#[derive(Debug, Clone, Copy)]
struct Features {
    /// `MOVE` (RFC 6851).
    mv: bool,
    /// `UIDPLUS` (RFC 4315): `UID EXPUNGE`.
    uidplus: bool,
}

/// The server's NO or BAD answer to a command, if that is what `e` is (the connection is still usable).
fn refusal(e: &EmailError) -> Option<&str> {
    match e {
        EmailError::Imap {
            source: async_imap::error::Error::No(m) | async_imap::error::Error::Bad(m),
            ..
        } => Some(m),
        _ => None,
    }
}

/// What happened to one message.
enum Handled {
    Delivered,
    Skipped,
}

impl EmailChannel {
    /// A channel with these settings (nothing is contacted until [`Channel::run`] or [`Channel::send`]).
    pub fn new(settings: EmailSettings) -> Self {
        Self {
            settings: Arc::new(settings),
            heartbeat: Heartbeat::new(),
            threads: Mutex::new(HashMap::new()),
            smtp: tokio::sync::OnceCell::new(),
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &EmailSettings {
        &self.settings
    }

    fn consent_error() -> EmailError {
        EmailError::Config(
            "channels.email.consentGranted is false: no mail is read or sent until the account owner agrees \
             (set it to true)"
                .into(),
        )
    }

    fn state_key(&self) -> String {
        let i = &self.settings.imap;
        format!("{}@{}/{}", i.username, i.endpoint(), i.mailbox)
    }

    async fn run_connection(
        &self,
        bus: &dyn Bus,
        cancel: &CancellationToken,
        state: &mut StateFile,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<(), EmailError> {
        let s = &self.settings;
        let endpoint = s.imap.endpoint();
        let mut session = tokio::select! {
            r = imap::connect(s, tls) => r?,
            () = cancel.cancelled() => return Ok(()),
        };
        let validity = imap::select(&mut session, s).await?;
        let caps = bounded(&endpoint, "CAPABILITY", s.timeout, session.capabilities()).await?;
        let idle = s.prefer_idle && caps.has_str("IDLE");
        let features = Features {
            mv: caps.has_str("MOVE"),
            uidplus: caps.has_str("UIDPLUS"),
        };
        tracing::info!(
            server = %endpoint,
            mailbox = %s.imap.mailbox,
            mode = if idle { "IDLE" } else { "polling" },
            "email: connected"
        );
        loop {
            self.heartbeat.beat();
            self.sync(&mut session, bus, cancel, state, validity, features)
                .await?;
            while session.unsolicited_responses.try_recv().is_ok() {}
            if cancel.is_cancelled() {
                imap::logout(session, s.timeout).await;
                return Ok(());
            }
            if idle {
                let mut handle = session.idle();
                bounded(&endpoint, "IDLE", s.timeout, handle.init()).await?;
                let outcome = {
                    let (wait, _stop) = handle.wait_with_timeout(s.idle_renew);
                    tokio::select! {
                        r = wait => Some(r),
                        () = cancel.cancelled() => None,
                    }
                };
                match outcome {
                    None => return Ok(()),
                    Some(Err(source)) => {
                        return Err(EmailError::Imap {
                            endpoint,
                            what: "IDLE",
                            source,
                        });
                    }
                    Some(Ok(
                        IdleResponse::NewData(_) | IdleResponse::Timeout | IdleResponse::ManualInterrupt,
                    )) => {}
                }
                session = bounded(&endpoint, "DONE (end of IDLE)", s.timeout, handle.done()).await?;
            } else {
                tokio::select! {
                    () = tokio::time::sleep(s.poll_interval) => {}
                    () = cancel.cancelled() => {
                        imap::logout(session, s.timeout).await;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Handles every unseen message newer than the last UID recorded, in UID order.
    async fn sync(
        &self,
        session: &mut ImapSession,
        bus: &dyn Bus,
        cancel: &CancellationToken,
        state: &mut StateFile,
        validity: u32,
        features: Features,
    ) -> Result<(), EmailError> {
        let s = &self.settings;
        let endpoint = s.imap.endpoint();
        let key = self.state_key();
        let last = match state.get(&key) {
            Some(st) if st.uid_validity == validity => st.last_uid,
            Some(st) => {
                tracing::warn!(
                    old = st.uid_validity,
                    new = validity,
                    "email: the mailbox's UIDVALIDITY changed; looking at all unseen mail again"
                );
                0
            }
            None => 0,
        };
        let query = format!("UID {}:* UNSEEN", last.saturating_add(1));
        let found = bounded(&endpoint, "UID SEARCH", s.timeout, session.uid_search(&query)).await?;
        let mut uids: Vec<u32> = found.into_iter().filter(|u| *u > last).collect();
        uids.sort_unstable();
        for uid in uids {
            if cancel.is_cancelled() {
                break;
            }
            let act = match self.handle(session, bus, uid, validity).await? {
                Handled::Delivered => {
                    tracing::debug!(uid, "email: message delivered to the agent");
                    true
                }
                Handled::Skipped => !s.post_action_ignore_skipped,
            };
            if act {
                self.post_action(session, uid, features).await?;
            }
            state.set(
                &key,
                MailboxState {
                    uid_validity: validity,
                    last_uid: uid,
                },
            )?;
            self.heartbeat.beat();
        }
        Ok(())
    }

    /// Applies `postAction` to message `uid` (bounded commands). A command the server refuses is logged and the
    /// message left where it is; a broken connection is an error (the caller reconnects).
    async fn post_action(
        &self,
        session: &mut ImapSession,
        uid: u32,
        features: Features,
    ) -> Result<(), EmailError> {
        let s = &self.settings;
        let Some(action) = &s.post_action else {
            return Ok(());
        };
        let endpoint = s.imap.endpoint();
        if let PostAction::Move(target) = action {
            let (what, result) = if features.mv {
                let r = bounded(
                    &endpoint,
                    "UID MOVE",
                    s.timeout,
                    session.uid_mv(uid.to_string(), target),
                )
                .await;
                ("UID MOVE", r)
            } else {
                let r = bounded(
                    &endpoint,
                    "UID COPY",
                    s.timeout,
                    session.uid_copy(uid.to_string(), target),
                )
                .await;
                ("UID COPY", r)
            };
            match result {
                Ok(()) => {}
                Err(e) => {
                    if let Some(m) = refusal(&e) {
                        tracing::warn!(
                            uid,
                            mailbox = %target,
                            "email: postAction move: the server refused {what} ({m}); the message stays in {}",
                            s.imap.mailbox
                        );
                        return Ok(());
                    }
                    return Err(e);
                }
            }
            if features.mv {
                tracing::debug!(uid, mailbox = %target, "email: handled message moved");
                return Ok(());
            }
        }
        let stored = bounded(&endpoint, "UID STORE \\Deleted", s.timeout, async {
            session
                .uid_store(uid.to_string(), "+FLAGS.SILENT (\\Deleted)")
                .await?
                .try_collect::<Vec<_>>()
                .await
        })
        .await;
        if let Err(e) = stored {
            if let Some(m) = refusal(&e) {
                tracing::warn!(
                    uid,
                    "email: postAction: the server refused to flag the message deleted ({m})"
                );
                return Ok(());
            }
            return Err(e);
        }
        if features.uidplus {
            let expunged = bounded(&endpoint, "UID EXPUNGE", s.timeout, async {
                session
                    .uid_expunge(uid.to_string())
                    .await?
                    .try_collect::<Vec<_>>()
                    .await
            })
            .await;
            match expunged {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let Some(m) = refusal(&e) else { return Err(e) };
                    tracing::warn!(uid, "email: postAction: UID EXPUNGE refused ({m})");
                }
            }
        }
        if s.post_action_expunge {
            // Without UIDPLUS only a mailbox-wide EXPUNGE removes it: that also removes mail others flagged
            // \Deleted, hence only on postActionExpunge (as 0.3.5).
            let expunged = bounded(&endpoint, "EXPUNGE", s.timeout, async {
                session.expunge().await?.try_collect::<Vec<_>>().await
            })
            .await;
            if let Err(e) = expunged {
                let Some(m) = refusal(&e) else { return Err(e) };
                tracing::warn!(uid, "email: postAction: EXPUNGE refused ({m})");
            }
        } else if !features.uidplus {
            tracing::debug!(
                uid,
                "email: the server has no UID EXPUNGE and postActionExpunge is off: the message is only flagged \\Deleted"
            );
        }
        Ok(())
    }

    async fn fetch_one(
        &self,
        session: &mut ImapSession,
        uid: u32,
        query: &str,
    ) -> Result<Option<async_imap::types::Fetch>, EmailError> {
        let s = &self.settings;
        let fetched: Vec<async_imap::types::Fetch> =
            bounded(&s.imap.endpoint(), "UID FETCH", s.timeout, async {
                session
                    .uid_fetch(uid.to_string(), query)
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        Ok(fetched.into_iter().find(|f| f.uid == Some(uid)))
    }

    async fn handle(
        &self,
        session: &mut ImapSession,
        bus: &dyn Bus,
        uid: u32,
        validity: u32,
    ) -> Result<Handled, EmailError> {
        let s = &self.settings;
        let Some(head) = self
            .fetch_one(session, uid, "(UID RFC822.SIZE BODY.PEEK[HEADER])")
            .await?
        else {
            return Ok(Handled::Skipped);
        };
        let size = head.size.map_or(0, u64::from);
        let headers = parse_mail(head.header().unwrap_or_default());
        let Some(sender) = headers.from.clone() else {
            tracing::info!(uid, "email: message without a single From address; left unread");
            return Ok(Handled::Skipped);
        };
        if s.own_addresses().contains(&sender) {
            tracing::info!(uid, "email: message from the bot's own address; left unread");
            return Ok(Handled::Skipped);
        }
        if s.verify_dkim || s.verify_spf {
            let verdict = check_authentication_results(
                headers.auth_results.iter().map(String::as_str),
                Some(&sender),
                &s.trusted_authserv_ids,
            );
            if (s.verify_spf && !verdict.spf) || (s.verify_dkim && !verdict.dkim) {
                tracing::warn!(
                    uid,
                    sender,
                    spf = verdict.spf,
                    dkim = verdict.dkim,
                    "email: sender not authenticated (no aligned pass from one trusted Authentication-Results \
                     header); left unread"
                );
                return Ok(Handled::Skipped);
            }
        }
        if !s.allows(&sender) {
            tracing::info!(
                uid,
                sender,
                "email: sender not on channels.email.allowFrom; left unread"
            );
            return Ok(Handled::Skipped);
        }
        let mail = if size > s.max_message_bytes {
            ParsedMail {
                body: format!(
                    "(message of {size} bytes is larger than this channel downloads; only its headers were read)"
                ),
                ..headers
            }
        } else {
            match self.fetch_one(session, uid, "(UID BODY.PEEK[])").await? {
                Some(full) => parse_mail(full.body().unwrap_or_default()),
                None => return Ok(Handled::Skipped),
            }
        };
        let media = self.save_attachments(&mail, validity, uid).await;
        let mut body: String = mail.body.chars().take(s.max_body_chars).collect();
        if body.trim().is_empty() {
            body = "(empty email body)".into();
        }
        let mut content = format!(
            "Email from {sender}\nSubject: {}\nDate: {}\n\n{body}",
            mail.subject, mail.date
        );
        for path in &media {
            let name = std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            content.push_str(&format!("\n[attachment: {name} saved to {path}]"));
        }
        let mut inbound = InboundMessage::new(NAME, &sender, &sender, content)
            .with_metadata("sender_email", sender.clone())
            // A mail thread is a private conversation with its sender.
            .with_metadata(nanobot_bus::META_IS_GROUP, false)
            .with_metadata("uid", uid)
            .with_metadata(META_SUBJECT, mail.subject.clone())
            .with_metadata("date", mail.date.clone())
            .with_metadata(META_REFERENCES, mail.references.join(" "));
        if let Some(id) = &mail.message_id {
            inbound = inbound.with_metadata(META_MESSAGE_ID, id.clone());
        }
        inbound.media = media;
        self.remember_thread(&sender, &mail);
        bus.publish_inbound(inbound)
            .await
            .map_err(|e| EmailError::Compose(format!("the message bus refused the message: {e}")))?;
        if s.mark_seen {
            let endpoint = s.imap.endpoint();
            let _: Vec<_> = bounded(&endpoint, "UID STORE \\Seen", s.timeout, async {
                session
                    .uid_store(uid.to_string(), "+FLAGS.SILENT (\\Seen)")
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        }
        Ok(Handled::Delivered)
    }

    fn remember_thread(&self, sender: &str, mail: &ParsedMail) {
        let mut threads = nanobot_util::lock(&self.threads);
        threads.insert(
            sender.to_string(),
            Thread {
                subject: mail.subject.clone(),
                message_id: mail.message_id.clone(),
                references: mail.references.clone(),
            },
        );
    }

    /// Saves the allowed attachments under the media folder; returns their paths.
    async fn save_attachments(&self, mail: &ParsedMail, validity: u32, uid: u32) -> Vec<String> {
        let s = &self.settings;
        if s.allowed_attachment_types.is_empty() || mail.attachments.is_empty() {
            return Vec::new();
        }
        let mut saved = Vec::new();
        for a in &mail.attachments {
            if saved.len() >= s.max_attachments_per_email {
                tracing::warn!(
                    uid,
                    "email: more attachments than maxAttachmentsPerEmail; the rest skipped"
                );
                break;
            }
            if !s.attachment_type_allowed(&a.mime) {
                tracing::debug!(uid, mime = %a.mime, "email: attachment type not allowed; skipped");
                continue;
            }
            if a.data.len() as u64 > s.max_attachment_size {
                tracing::warn!(
                    uid,
                    size = a.data.len(),
                    limit = s.max_attachment_size,
                    "email: attachment too large; skipped"
                );
                continue;
            }
            if let Err(e) = tokio::fs::create_dir_all(&s.media_dir).await {
                tracing::warn!(dir = %s.media_dir.display(), error = %e, "email: cannot create the media folder");
                return saved;
            }
            let path = s
                .media_dir
                .join(format!("{validity}-{uid}_{}", safe_file_name(&a.name)));
            match tokio::fs::write(&path, &a.data).await {
                Ok(()) => saved.push(path.display().to_string()),
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "email: cannot save attachment"),
            }
        }
        saved
    }

    fn thread_for(&self, msg: &OutboundMessage) -> Option<Thread> {
        let meta = |k: &str| msg.metadata.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some(id) = meta(META_MESSAGE_ID).filter(|i| !i.is_empty()) {
            return Some(Thread {
                subject: meta(META_SUBJECT).unwrap_or_default(),
                message_id: Some(id),
                references: meta(META_REFERENCES)
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_string)
                    .collect(),
            });
        }
        let threads = nanobot_util::lock(&self.threads);
        threads.get(&msg.chat_id.trim().to_lowercase()).cloned()
    }
}

#[async_trait]
impl Channel for EmailChannel {
    fn name(&self) -> &str {
        NAME
    }

    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let s = &self.settings;
        if !s.consent_granted {
            tracing::warn!(
                "email: channels.email.consentGranted is false; the channel reads and sends nothing"
            );
            return Err(Self::consent_error().into());
        }
        if !s.verify_dkim && !s.verify_spf {
            tracing::warn!(
                "email: verifyDkim and verifySpf are both off: anyone can forge a From address on allowFrom"
            );
        }
        let tls = tls::client_config(&s.extra_roots, s.system_roots)?;
        let path = s.state_path.clone();
        let mut state = tokio::task::spawn_blocking(move || StateFile::load(path))
            .await
            .map_err(|e| EmailError::Compose(format!("loading the state file: {e}")))??;
        match self.run_connection(bus.as_ref(), &cancel, &mut state, tls).await {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "email: IMAP connection ended");
                Err(e.into())
            }
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let s = &self.settings;
        if !s.consent_granted {
            tracing::warn!("email: not sending: channels.email.consentGranted is false");
            return Err(Self::consent_error().into());
        }
        if !matches!(msg.kind, OutboundKind::Reply | OutboundKind::StreamEnd { .. }) {
            return Ok(());
        }
        let to = msg.chat_id.trim();
        if to.is_empty() || !to.contains('@') {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        let thread = self.thread_for(msg);
        let force = msg
            .metadata
            .get("force_send")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if thread.is_some() && !s.auto_reply && !force {
            tracing::info!("email: autoReplyEnabled is false; reply not sent");
            return Ok(());
        }
        let subject = msg
            .metadata
            .get("subject")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map_or_else(
                || {
                    reply_subject(
                        thread.as_ref().map_or("", |t| t.subject.as_str()),
                        &s.subject_prefix,
                    )
                },
                str::to_string,
            );
        let email = outbound::compose(s, to, &subject, thread.as_ref(), &msg.content, &msg.media).map_err(
            |e| match e {
                EmailError::Compose(_) => ChannelError::InvalidChatId {
                    channel: NAME.into(),
                    chat_id: msg.chat_id.clone(),
                },
                other => other.into(),
            },
        )?;
        let transport = self
            .smtp
            .get_or_try_init(|| async { outbound::transport(s) })
            .await?;
        outbound::send(transport, s, email).await?;
        tracing::info!(to, "email: reply sent");
        Ok(())
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        Some(self.heartbeat.clone())
    }
}
