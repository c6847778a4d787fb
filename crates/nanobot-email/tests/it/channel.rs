//! The channel end to end: a real mailbox in, the bus, a real mailbox out.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use lettre::Message;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, MultiPart, SinglePart};
use mail_parser::{MessageParser, MimeHeaders as _};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, ChannelState, HealthRegistry, ManagerSettings, SupervisorSettings};
use nanobot_email::{EmailChannel, EmailSettings, PostAction};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::peers::{self, MailPeers, addr};

struct Running {
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    health: HealthRegistry,
}

impl Running {
    fn start(settings: EmailSettings) -> Self {
        let mut ms = ManagerSettings::new(true, true, 0);
        ms.supervisor = SupervisorSettings {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            healthy_after: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(120),
            watchdog_interval: Duration::from_secs(1),
        };
        let mut manager = ChannelManager::new(ms);
        manager.add(Arc::new(EmailChannel::new(settings)));
        let health = manager.health();
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
        Self {
            bus,
            cancel,
            task,
            health,
        }
    }

    async fn next(&self) -> anyhow::Result<InboundMessage> {
        match tokio::time::timeout(Duration::from_secs(60), self.bus.consume_inbound()).await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => bail!("bus closed"),
            Err(_) => bail!(
                "no inbound message within 60 s; health: {:?}",
                self.health.snapshot()
            ),
        }
    }

    /// Stops the channel and returns whatever it had already put on the bus.
    async fn stop(self) -> anyhow::Result<Vec<InboundMessage>> {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .context("the channel did not stop within 60 s")??;
        let mut left = Vec::new();
        while self.bus.inbound_len() > 0 {
            if let Some(m) = self.bus.consume_inbound().await {
                left.push(m);
            }
        }
        Ok(left)
    }

    async fn wait_health(
        &self,
        what: &str,
        ok: impl Fn(&nanobot_channels::ChannelHealth) -> bool,
    ) -> anyhow::Result<nanobot_channels::ChannelHealth> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(h) = self.health.get("email")
                && ok(&h)
            {
                return Ok(h);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{what}: not reached within 60 s: {:?}", self.health.get("email"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn text_mail(from: &str, to: &str, subject: &str, body: &str) -> anyhow::Result<Message> {
    Ok(Message::builder()
        .from(addr(from).parse()?)
        .to(addr(to).parse()?)
        .subject(subject)
        .message_id(None)
        .header(ContentType::TEXT_PLAIN)
        .body(body.to_string())?)
}

fn flags_of(msgs: &[(u32, Vec<String>, Vec<u8>)], subject: &str) -> Option<Vec<String>> {
    msgs.iter()
        .find(|(_, _, raw)| {
            MessageParser::default()
                .parse(raw)
                .and_then(|m| m.subject().map(|s| s == subject))
                .unwrap_or(false)
        })
        .map(|(_, flags, _)| flags.clone())
}

fn seen(flags: &[String]) -> bool {
    flags.iter().any(|f| f == "Seen")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_sender_gets_a_threaded_reply_in_text_and_html() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let run = Running::start(p.settings("reply", dir.path()));
    p.send(
        "reply-alice",
        text_mail(
            "reply-alice",
            "reply-bot",
            "Lunch plans",
            "Are we still on for noon?\n\n-- \nAlice",
        )?,
    )
    .await?;
    let inbound = run.next().await?;
    assert_eq!(inbound.channel, "email");
    assert_eq!(inbound.sender_id, addr("reply-alice"));
    assert_eq!(
        inbound.chat_id,
        addr("reply-alice"),
        "one session per sender, as 0.3.5"
    );
    assert!(
        inbound.content.contains("Subject: Lunch plans"),
        "{}",
        inbound.content
    );
    assert!(
        inbound.content.contains("Are we still on for noon?"),
        "{}",
        inbound.content
    );
    assert!(
        !inbound.content.contains("Alice\n") && !inbound.content.ends_with("Alice"),
        "signature trimmed: {}",
        inbound.content
    );
    let original_id = inbound.metadata["message_id"]
        .as_str()
        .context("message_id")?
        .to_string();
    assert!(
        original_id.starts_with('<') && original_id.ends_with('>'),
        "{original_id}"
    );

    // The agent's answer, routed back with the inbound metadata (as the gateway does).
    let mut reply = OutboundMessage::reply(
        "email",
        &inbound.chat_id,
        "**Sure**, see you at noon.\n\n- bring the `notes`",
    );
    reply.metadata = inbound.metadata.clone();
    run.bus.publish_outbound(reply).await?;

    let got = p.wait_for("reply-alice", "the reply", |m| !m.is_empty()).await?;
    assert_eq!(got.len(), 1, "exactly one reply");
    let raw = &got[0].2;
    let msg = MessageParser::default().parse(raw).context("reply parses")?;
    assert_eq!(msg.subject(), Some("Re: Lunch plans"));
    assert_eq!(
        msg.from().and_then(|a| a.first()).and_then(|a| a.address()),
        Some(addr("reply-bot").as_str())
    );
    assert_eq!(
        msg.in_reply_to().as_text().map(|t| format!("<{t}>")),
        Some(original_id.clone())
    );
    let refs = String::from_utf8_lossy(raw);
    assert!(
        refs.lines()
            .any(|l| l.starts_with("References:") && l.contains(&original_id)),
        "References names the original:\n{refs}"
    );
    let ct = msg.content_type().context("content type")?;
    assert_eq!((ct.ctype(), ct.subtype()), ("multipart", Some("alternative")));
    let text = msg.body_text(0).context("text part")?;
    assert!(text.contains("Sure, see you at noon."), "{text}");
    assert!(!text.contains("**"), "{text}");
    let html = msg.body_html(0).context("html part")?;
    assert!(
        html.contains("<strong>Sure</strong>") && html.contains("<code>notes</code>"),
        "{html}"
    );

    let bot = p.messages("reply-bot").await?;
    assert!(
        seen(&flags_of(&bot, "Lunch plans").context("the mail is in the bot's inbox")?),
        "marked seen once handled"
    );
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_mail_gets_nothing_and_stays_unseen() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    p.send(
        "stranger-mallory",
        text_mail("stranger-mallory", "stranger-bot", "Let me in", "please")?,
    )
    .await?;
    // Forged: the From says alice, but mallory is the authenticated SMTP user. Without DKIM/SPF checks the channel
    // cannot tell; with them (see `unauthenticated_mail_is_left_alone`) it can.
    p.send(
        "stranger-alice",
        text_mail("stranger-alice", "stranger-bot", "Hi", "hello")?,
    )
    .await?;
    let run = Running::start(p.settings("stranger", dir.path()));
    let first = run.next().await?;
    assert_eq!(
        first.sender_id,
        addr("stranger-alice"),
        "mallory's earlier mail was not served"
    );
    let left = run.stop().await?;
    assert!(
        left.iter().all(|m| m.sender_id != addr("stranger-mallory")),
        "{left:?}"
    );
    let bot = p.messages("stranger-bot").await?;
    assert!(
        !seen(&flags_of(&bot, "Let me in").context("mallory's mail is there")?),
        "left unseen"
    );
    assert!(seen(&flags_of(&bot, "Hi").context("alice's mail is there")?));
    assert!(
        p.messages("stranger-mallory").await?.is_empty(),
        "no reply to the stranger"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_reach_the_agent_as_media_within_limits() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let mut settings = p.settings("attach", dir.path());
    settings.max_attachment_size = 1_000;
    let media_dir = settings.media_dir.clone();
    let run = Running::start(settings);
    let mut pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    pdf.extend(0u8..=255);
    let mail = Message::builder()
        .from(addr("attach-alice").parse()?)
        .to(addr("attach-bot").parse()?)
        .subject("Report")
        .message_id(None)
        .multipart(
            MultiPart::mixed()
                .singlepart(SinglePart::plain("Please read the attached report.".to_string()))
                .singlepart(
                    Attachment::new("../../report.pdf".into())
                        .body(pdf.clone(), ContentType::parse("application/pdf")?),
                )
                .singlepart(
                    Attachment::new("tool.zip".into())
                        .body(vec![1u8; 10], ContentType::parse("application/zip")?),
                )
                .singlepart(
                    Attachment::new("big.pdf".into())
                        .body(vec![b'x'; 5_000], ContentType::parse("application/pdf")?),
                ),
        )?;
    p.send("attach-alice", mail).await?;
    let inbound = run.next().await?;
    assert_eq!(
        inbound.media.len(),
        1,
        "only the allowed type within the size limit: {:?}",
        inbound.media
    );
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(&media_dir), "{saved:?} inside {media_dir:?}");
    assert!(
        saved
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with("report.pdf"))
    );
    assert_eq!(std::fs::read(saved)?, pdf);
    assert!(
        inbound.content.contains("Please read the attached report."),
        "{}",
        inbound.content
    );
    assert!(inbound.content.contains("[attachment: "), "{}", inbound.content);
    run.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_answers_no_mail_twice_and_skips_none() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    for i in 1..=3 {
        p.send(
            "restart-alice",
            text_mail("restart-alice", "restart-bot", &format!("Mail {i}"), "x")?,
        )
        .await?;
    }
    let subject = |m: &InboundMessage| {
        m.metadata["email_subject"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut handled = Vec::new();
    let first = Running::start(p.settings("restart", dir.path()));
    handled.push(subject(&first.next().await?));
    handled.extend(first.stop().await?.iter().map(subject));

    p.send(
        "restart-alice",
        text_mail("restart-alice", "restart-bot", "Mail 4", "x")?,
    )
    .await?;
    let second = Running::start(p.settings("restart", dir.path()));
    while handled.len() < 4 {
        handled.push(subject(&second.next().await?));
    }
    handled.extend(second.stop().await?.iter().map(subject));
    let mut sorted = handled.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["Mail 1", "Mail 2", "Mail 3", "Mail 4"],
        "each once, none skipped: {handled:?}"
    );
    let bot = p.messages("restart-bot").await?;
    assert!(bot.iter().all(|(_, f, _)| seen(f)), "all handled mail is seen");
    assert!(dir.path().join("data/email/state.json").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imap_server_going_away_and_coming_back_is_survived() -> anyhow::Result<()> {
    // Its own servers: this test stops Dovecot.
    let Some(p) = MailPeers::start()? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let run = Running::start(p.settings("outage", dir.path()));
    p.send(
        "outage-alice",
        text_mail("outage-alice", "outage-bot", "Before", "x")?,
    )
    .await?;
    assert_eq!(run.next().await?.metadata["email_subject"], "Before");

    p.stop_imap();
    let h = run
        .wait_health("a restart after the outage", |h| h.restarts >= 1)
        .await?;
    assert!(h.last_error.is_some(), "{h:?}");
    p.send(
        "outage-alice",
        text_mail("outage-alice", "outage-bot", "During", "x")?,
    )
    .await?;
    p.start_imap()?;
    let after = run.next().await?;
    assert_eq!(
        after.metadata["email_subject"], "During",
        "the mail sent while IMAP was down, once"
    );
    let h = run
        .wait_health("running again", |h| h.state == ChannelState::Running)
        .await?;
    assert_ne!(h.state, ChannelState::Failed);
    let left = run.stop().await?;
    assert!(left.is_empty(), "nothing handled twice: {left:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_failure_not_a_crash_loop() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let mut settings = p.settings("badpass", dir.path());
    settings.imap.password = nanobot_config::Secret::new("WRONG-PASSWORD-123");
    let run = Running::start(settings.clone());
    let h = run
        .wait_health("failed", |h| h.state == ChannelState::Failed)
        .await?;
    let err = h.last_error.clone().unwrap_or_default();
    assert!(
        err.contains("authentication failed") && err.contains("rejected"),
        "{err}"
    );
    assert!(err.contains(&addr("badpass-bot")), "names the account: {err}");
    assert!(
        !err.contains("WRONG-PASSWORD-123"),
        "never echoes the password: {err}"
    );
    assert_eq!(h.restarts, 0, "not restarted");
    run.stop().await?;
    let login = nanobot_email::check_imap_login(&settings).await.unwrap_err();
    assert!(
        matches!(login, nanobot_email::EmailError::Login { .. }),
        "{login}"
    );
    // What `nanobot doctor` shows: the account and the server, never the password.
    let shown = login.to_string();
    assert!(
        shown.contains(&addr("badpass-bot")) && shown.contains(&settings.imap.endpoint()),
        "{shown}"
    );
    assert!(!shown.contains("WRONG-PASSWORD-123"), "{shown}");

    // A wrong SMTP password: the reply fails as an authentication error (not retried as a passing fault).
    let mut settings = p.settings("badpass", dir.path());
    settings.smtp.password = nanobot_config::Secret::new("WRONG-SMTP-456");
    let channel = EmailChannel::new(settings);
    let err = nanobot_channels::Channel::send(
        &channel,
        &OutboundMessage::reply("email", addr("badpass-alice"), "hi"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, nanobot_channels::ChannelError::Auth { .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(!format!("{err:?}").contains("WRONG-SMTP-456"), "{err:?}");

    // Without consent nothing is read or sent.
    let mut settings = p.settings("badpass", dir.path());
    settings.consent_granted = false;
    let run = Running::start(settings.clone());
    let h = run
        .wait_health("failed", |h| h.state == ChannelState::Failed)
        .await?;
    assert!(h.last_error.unwrap_or_default().contains("consentGranted"));
    run.stop().await?;
    let channel = EmailChannel::new(settings);
    let err = nanobot_channels::Channel::send(
        &channel,
        &OutboundMessage::reply("email", addr("badpass-alice"), "hi"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("invalid configuration"), "{err}");
    assert!(p.messages("badpass-alice").await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_and_polling_work_too() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let mut settings = p.settings("starttls", dir.path());
    settings.imap.port = p.imap_port;
    settings.imap.implicit_tls = false;
    settings.prefer_idle = false;
    let run = Running::start(settings);
    p.send(
        "starttls-alice",
        text_mail("starttls-alice", "starttls-bot", "Over STARTTLS", "x")?,
    )
    .await?;
    assert_eq!(run.next().await?.metadata["email_subject"], "Over STARTTLS");
    run.stop().await?;

    // A CA the server's certificate does not chain to: the TLS handshake fails, nothing is sent in clear.
    let mut settings = p.settings("starttls", dir.path());
    settings.extra_roots = vec![];
    settings.system_roots = true;
    let err = nanobot_email::check_imap_login(&settings).await.unwrap_err();
    assert!(err.to_string().contains("connecting to 127.0.0.1"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_mail_is_left_alone_when_dkim_and_spf_are_required() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let mut settings = p.settings("verify", dir.path());
    settings.verify_dkim = true;
    settings.verify_spf = true;
    settings.trusted_authserv_ids = vec!["mx.nanobot.test".into()];
    p.send(
        "verify-alice",
        text_mail("verify-alice", "verify-bot", "No results", "x")?,
    )
    .await?;
    let mut forged = text_mail("verify-alice", "verify-bot", "Untrusted results", "x")?;
    forged.headers_mut().insert_raw(HeaderValue::new(
        HeaderName::new_from_ascii_str("Authentication-Results"),
        "evil.example; spf=pass smtp.mailfrom=nanobot.test; dkim=pass header.d=nanobot.test".into(),
    ));
    p.send("verify-alice", forged).await?;
    let mut good = text_mail("verify-alice", "verify-bot", "Authenticated", "x")?;
    good.headers_mut().insert_raw(HeaderValue::new(
        HeaderName::new_from_ascii_str("Authentication-Results"),
        "mx.nanobot.test; spf=pass smtp.mailfrom=verify-alice@nanobot.test; dkim=pass header.d=nanobot.test"
            .into(),
    ));
    p.send("verify-alice", good).await?;
    let run = Running::start(settings);
    assert_eq!(run.next().await?.metadata["email_subject"], "Authenticated");
    run.stop().await?;
    let bot = p.messages("verify-bot").await?;
    assert!(!seen(&flags_of(&bot, "No results").context("present")?));
    assert!(!seen(&flags_of(&bot, "Untrusted results").context("present")?));
    Ok(())
}

/// Subjects and flags of every message in `user`'s `mailbox`.
async fn mailbox(p: &MailPeers, user: &str, mailbox: &str) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    use futures::TryStreamExt as _;
    let mut s = p.imap(user).await?;
    s.select(mailbox).await?;
    let fetched: Vec<_> = s
        .uid_fetch("1:*", "(UID FLAGS BODY.PEEK[])")
        .await?
        .try_collect()
        .await
        .unwrap_or_default();
    let out = fetched
        .iter()
        .map(|f| {
            let subject = MessageParser::default()
                .parse(f.body().unwrap_or_default())
                .and_then(|m| m.subject().map(str::to_string))
                .unwrap_or_default();
            (subject, f.flags().map(|fl| format!("{fl:?}")).collect())
        })
        .collect();
    let _ = s.logout().await;
    Ok(out)
}

/// `postAction` on handled mail; mallory's mail (a stranger) comes first and must stay untouched.
async fn post_action_case(scenario: &str, action: PostAction) -> anyhow::Result<Option<&'static MailPeers>> {
    let Some(p) = peers::shared() else { return Ok(None) };
    let dir = tempfile::tempdir()?;
    let bot = format!("{scenario}-bot");
    if let PostAction::Move(target) = &action {
        let mut s = p.imap(&bot).await?;
        s.create(target).await?;
        let _ = s.logout().await;
    }
    let mallory = format!("{scenario}-mallory");
    let alice = format!("{scenario}-alice");
    p.send(&mallory, text_mail(&mallory, &bot, "Stranger", "let me in")?)
        .await?;
    p.send(&alice, text_mail(&alice, &bot, "Handle me", "hello")?)
        .await?;
    let mut settings = p.settings(scenario, dir.path());
    settings.post_action = Some(action);
    let run = Running::start(settings);
    let first = run.next().await?;
    assert_eq!(first.sender_id, addr(&alice));
    let inbox = p
        .wait_for(&bot, "the handled mail leaving INBOX", |msgs| {
            flags_of(msgs, "Handle me").is_none()
        })
        .await?;
    run.stop().await?;
    let stranger = flags_of(&inbox, "Stranger").context("the stranger's mail is still in INBOX")?;
    assert!(
        !seen(&stranger) && !stranger.iter().any(|f| f == "Deleted"),
        "the stranger's mail is untouched: {stranger:?}"
    );
    assert_eq!(inbox.len(), 1, "only the stranger's mail is left in INBOX");
    Ok(Some(p))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_action_move_moves_handled_mail_to_the_target_mailbox() -> anyhow::Result<()> {
    let Some(p) = post_action_case("pamove", PostAction::Move("Handled".into())).await? else {
        return Ok(());
    };
    let moved = mailbox(p, "pamove-bot", "Handled").await?;
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(moved[0].0, "Handle me");
    assert!(
        seen(&moved[0].1),
        "moved after it was marked seen: {:?}",
        moved[0].1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_action_delete_removes_handled_mail() -> anyhow::Result<()> {
    // The handled mail left INBOX (expunged, not only flagged: INBOX is listed with \\Deleted mail too) and the
    // stranger's stayed; deleted means no copy elsewhere either.
    if let Some(p) = post_action_case("padelete", PostAction::Delete).await? {
        let mut s = p.imap("padelete-bot").await?;
        let names: Vec<_> = futures::TryStreamExt::try_collect(s.list(None, Some("*")).await?).await?;
        let _ = s.logout().await;
        let names: Vec<String> = names.iter().map(|n| n.name().to_string()).collect();
        assert_eq!(names, ["INBOX"], "no mailbox was created for a delete");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_action_reaches_skipped_mail_only_when_ignore_skipped_is_off() -> anyhow::Result<()> {
    let Some(p) = peers::shared() else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    p.send(
        "paskip-mallory",
        text_mail("paskip-mallory", "paskip-bot", "Stranger", "let me in")?,
    )
    .await?;
    p.send(
        "paskip-alice",
        text_mail("paskip-alice", "paskip-bot", "Handle me", "hello")?,
    )
    .await?;
    let mut settings = p.settings("paskip", dir.path());
    settings.post_action = Some(PostAction::Delete);
    settings.post_action_ignore_skipped = false;
    let run = Running::start(settings);
    assert_eq!(run.next().await?.sender_id, addr("paskip-alice"));
    p.wait_for("paskip-bot", "both mails deleted", <[_]>::is_empty)
        .await?;
    let left = run.stop().await?;
    assert!(left.is_empty(), "the stranger was still not served: {left:?}");
    Ok(())
}
