use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_msteams::{MAX_MESSAGE_BYTES, MsTeamsChannel, MsTeamsSettings};
use nanobot_testkit::fake_msteams::{APP_ID, APP_PASSWORD, FakeTeams, InboundToken, TENANT_ID, TeamsUser};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WITHIN: Duration = Duration::from_secs(30);

struct Harness {
    fake: FakeTeams,
    channel: Arc<MsTeamsChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    webhook: String,
    alice: TeamsUser,
    state: tempfile::TempDir,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

fn block(fake: &FakeTeams, alice: &TeamsUser, extra: &Value) -> Value {
    let mut block = json!({"enabled": true, "appId": APP_ID, "appPassword": APP_PASSWORD, "tenantId": TENANT_ID,
        "host": "127.0.0.1", "port": 0, "allowFrom": [alice.aad_object_id],
        "trustedServiceUrlHosts": ["127.0.0.1"], "openIdMetadata": fake.openid_config_url(),
        "loginEndpoint": fake.base_url()});
    if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    block
}

fn settings(fake: &FakeTeams, block: &Value) -> Result<MsTeamsSettings> {
    let mut s = MsTeamsSettings::from_block(block)?;
    s.extra_roots.push(fake.ca_file().to_path_buf());
    Ok(s)
}

async fn listening(channel: &MsTeamsChannel) -> Result<SocketAddr> {
    let mut addr = channel.listening().context("a webhook channel")?;
    let addr = tokio::time::timeout(WITHIN, addr.wait_for(Option::is_some))
        .await
        .context("the webhook did not listen within 30 s")??;
    addr.context("listening")
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        nanobot_testkit::install_ring();
        let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await?;
        Self::start_with(fake, tempfile::tempdir()?, extra).await
    }

    async fn start_with(fake: FakeTeams, state: tempfile::TempDir, extra: Value) -> Result<Self> {
        let alice = TeamsUser::new("alice");
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let guard = nanobot_channels::download::SsrfGuard::from_cidrs(&["127.0.0.1/32"])?;
        let channel = Arc::new(
            MsTeamsChannel::new(
                settings(&fake, &block(&fake, &alice, &extra))?,
                state.path(),
                media.path(),
            )
            .with_pairing(pairing)
            .with_ssrf_guard(guard),
        );
        let bus = Arc::new(InProcessBus::new(64));
        let mut manager = ChannelManager::new(ManagerSettings {
            supervisor: SupervisorSettings::quick(),
            ..ManagerSettings::default()
        });
        manager.add(channel.clone());
        let manager = manager.spawn(bus.clone());
        let addr = listening(&channel).await?;
        Ok(Self {
            fake,
            channel,
            bus,
            manager,
            webhook: format!("http://{addr}/api/messages"),
            alice,
            state,
            media,
            _data: data,
        })
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WITHIN, self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// Alice's message in her personal chat, delivered with a valid token; the status.
    async fn alice_says(&self, text: &str) -> Result<(Value, u16)> {
        let activity = self.fake.message(
            &self.alice,
            &self.alice.personal_conversation_id(),
            "personal",
            text,
        );
        let status = self
            .fake
            .deliver(&self.webhook, &activity, Some(&self.fake.valid_token()))
            .await?;
        Ok((activity, status))
    }

    async fn stop(self) -> (FakeTeams, tempfile::TempDir) {
        self.manager.stop(Duration::from_secs(20)).await;
        (self.fake, self.state)
    }
}

#[tokio::test]
async fn the_owner_is_answered_in_a_reply_and_the_reference_is_kept_as_0_3_5_keeps_it() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let (activity, status) = h.alice_says("<at>nanobot</at> hello &amp; welcome").await?;
    assert_eq!(status, 200);
    let inbound = h.inbound().await?;
    let conversation = h.alice.personal_conversation_id();
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("msteams", h.alice.aad_object_id.as_str(), conversation.as_str())
    );
    assert_eq!(inbound.content, "hello & welcome");
    assert_eq!(inbound.metadata["msteams"]["activity_id"], activity["id"]);
    assert_eq!(inbound.metadata["msteams"]["conversation_type"], "personal");
    assert_eq!(inbound.metadata["msteams"]["from_name"], "alice");

    h.bus
        .publish_outbound(OutboundMessage::reply(
            "msteams",
            conversation.clone(),
            "Hi Alice",
        ))
        .await?;
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].conversation_id, conversation);
    assert_eq!(sent[0].body["type"], "message");
    assert_eq!(sent[0].body["text"], "Hi Alice");
    assert_eq!(
        sent[0].body["replyToId"], activity["id"],
        "a reply to the message"
    );
    let requests = h.fake.token_requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].tenant, TENANT_ID);
    assert_eq!(requests[0].scope, "https://api.botframework.com/.default");

    // A second answer reuses the token.
    h.bus
        .publish_outbound(OutboundMessage::reply("msteams", conversation.clone(), "Again"))
        .await?;
    h.fake.wait_sent(2, WITHIN).await?;
    assert_eq!(h.fake.tokens_issued(), 1);

    let refs: Value =
        serde_json::from_slice(&std::fs::read(h.state.path().join("msteams_conversations.json"))?)?;
    assert_eq!(refs[&conversation]["service_url"], h.fake.service_url());
    assert_eq!(refs[&conversation]["activity_id"], activity["id"]);
    assert_eq!(refs[&conversation]["conversation_type"], "personal");
    assert_eq!(refs[&conversation]["tenant_id"], TENANT_ID);
    let meta: Value = serde_json::from_slice(&std::fs::read(
        h.state.path().join("msteams_conversations_meta.json"),
    )?)?;
    assert!(
        meta[&conversation]["updated_at"].as_f64().unwrap() > 1.0e9,
        "{meta}"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn requests_without_a_valid_bot_framework_token_are_refused() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let service = h.fake.service_url();
    let valid = InboundToken::for_app(APP_ID, &service);
    let cases = [
        (
            "forged",
            Some(h.fake.token(&InboundToken {
                forged: true,
                ..valid.clone()
            })),
        ),
        (
            "expired",
            Some(h.fake.token(&InboundToken {
                lifetime_secs: -3600,
                ..valid.clone()
            })),
        ),
        (
            "another app",
            Some(h.fake.token(&InboundToken {
                audience: "another-app".into(),
                ..valid.clone()
            })),
        ),
        (
            "another issuer",
            Some(h.fake.token(&InboundToken {
                issuer: "https://sts.windows.net/x/".into(),
                ..valid.clone()
            })),
        ),
        (
            "unknown key",
            Some(h.fake.token(&InboundToken {
                kid: Some("rotated-away".into()),
                ..valid.clone()
            })),
        ),
        (
            "another service",
            Some(h.fake.token(&InboundToken {
                service_url: Some("https://127.0.0.1:1/x/".into()),
                ..valid.clone()
            })),
        ),
        (
            "no service URL",
            Some(h.fake.token(&InboundToken {
                service_url: None,
                ..valid.clone()
            })),
        ),
        ("not a token", Some("not.a.jwt".to_owned())),
        ("none", None),
    ];
    for (what, token) in &cases {
        let activity = h.fake.message(
            &h.alice,
            &h.alice.personal_conversation_id(),
            "personal",
            "let me in",
        );
        let status = h.fake.deliver(&h.webhook, &activity, token.as_deref()).await?;
        assert_eq!(status, 401, "{what}");
    }
    // An activity that claims another Bot Connector than its token names is refused too.
    let mut moved = h
        .fake
        .message(&h.alice, &h.alice.personal_conversation_id(), "personal", "moved");
    moved["serviceUrl"] = json!("https://127.0.0.1:9/amer/");
    assert_eq!(
        h.fake
            .deliver(&h.webhook, &moved, Some(&h.fake.valid_token()))
            .await?,
        401
    );
    // The webhook's other answers.
    let client = h.fake.client()?;
    let not_json = client.post(&h.webhook).body("{oops").send().await?;
    assert_eq!(not_json.status().as_u16(), 400);
    let elsewhere = client
        .post(h.webhook.replace("/api/messages", "/other"))
        .body("{}")
        .send()
        .await?;
    assert_eq!(elsewhere.status().as_u16(), 404);
    // The valid token still works afterwards, and its message is the first on the bus: each request is handled
    // before it is answered, so nothing refused reached the agent.
    let (_, status) = h.alice_says("finally").await?;
    assert_eq!(status, 200);
    assert_eq!(h.inbound().await?.content, "finally");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_stranger_gets_a_pairing_code_and_group_chats_are_not_answered() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let eve = TeamsUser::new("eve");
    let activity = h
        .fake
        .message(&eve, &eve.personal_conversation_id(), "personal", "hello?");
    assert_eq!(
        h.fake
            .deliver(&h.webhook, &activity, Some(&h.fake.valid_token()))
            .await?,
        200
    );
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].conversation_id, eve.personal_conversation_id());
    assert!(
        sent[0].body["text"].as_str().unwrap().contains("pairing code"),
        "{:?}",
        sent[0].body
    );
    for kind in ["groupChat", "channel"] {
        let group = h.fake.message(
            &h.alice,
            "19:room@thread.v2",
            kind,
            "<at>nanobot</at> in the group",
        );
        assert_eq!(
            h.fake
                .deliver(&h.webhook, &group, Some(&h.fake.valid_token()))
                .await?,
            200,
            "{kind}"
        );
    }
    // Alice's own message arrives after them: nothing else was published before it.
    h.alice_says("only me").await?;
    assert_eq!(h.inbound().await?.content, "only me");
    assert_eq!(h.fake.sent().len(), 1, "only the pairing code was sent");
    assert!(
        !h.state.path().join("msteams_conversations.json").exists() || {
            let refs: Value =
                serde_json::from_slice(&std::fs::read(h.state.path().join("msteams_conversations.json"))?)?;
            refs.get(eve.personal_conversation_id()).is_none() && refs.get("19:room@thread.v2").is_none()
        }
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn long_answers_are_split_and_files_go_both_ways() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let png = b"\x89PNG\r\n\x1a\nnot really an image".to_vec();
    let files = nanobot_testkit::file_server::FileServer::start(vec![(
        "/shared/report.pdf",
        nanobot_testkit::file_server::Answer::file(b"%PDF-1.4 report", "application/pdf"),
    )])
    .await;
    let mut activity = h.fake.message(
        &h.alice,
        &h.alice.personal_conversation_id(),
        "personal",
        "see attached",
    );
    activity["attachments"] = json!([
        {"contentType": "application/vnd.microsoft.teams.file.download.info", "name": "report.pdf",
         "content": {"downloadUrl": files.url("/shared/report.pdf"), "uniqueId": "u1", "fileType": "pdf"}},
        {"contentType": "text/html", "content": "<div>see attached</div>"}
    ]);
    assert_eq!(
        h.fake
            .deliver(&h.webhook, &activity, Some(&h.fake.valid_token()))
            .await?,
        200
    );
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "see attached");
    assert_eq!(inbound.media.len(), 1, "{:?}", inbound.media);
    assert!(inbound.media[0].starts_with(&h.media.path().join("msteams").display().to_string()));
    assert_eq!(std::fs::read(&inbound.media[0])?, b"%PDF-1.4 report");

    let dir = tempfile::tempdir()?;
    let image = dir.path().join("chart.png");
    std::fs::write(&image, &png)?;
    let doc = dir.path().join("notes.docx");
    std::fs::write(&doc, b"doc")?;
    let long = "All work and no play. ".repeat(3_000);
    let mut reply = OutboundMessage::reply("msteams", h.alice.personal_conversation_id(), long.clone());
    reply.media = vec![image.display().to_string(), doc.display().to_string()];
    h.channel.send(&reply).await?;
    let sent = h.fake.sent();
    assert!(sent.len() >= 3, "{} pieces", sent.len());
    let mut joined = String::new();
    for (i, s) in sent.iter().enumerate() {
        let text = s.body["text"].as_str().unwrap();
        assert!(
            text.len() <= MAX_MESSAGE_BYTES,
            "piece {i} is {} bytes",
            text.len()
        );
        assert_eq!(s.body["replyToId"], activity["id"]);
        assert_eq!(
            s.body.get("attachments").is_some(),
            i == 0,
            "attachments on the first piece only"
        );
        joined.push_str(text);
    }
    assert!(
        joined.contains("[file not sent: notes.docx]"),
        "only images go to Teams"
    );
    let attachment = &sent[0].body["attachments"][0];
    assert_eq!(attachment["contentType"], "image/png");
    assert_eq!(attachment["name"], "chart.png");
    let data = attachment["contentUrl"].as_str().unwrap();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data.strip_prefix("data:image/png;base64,").unwrap())?;
    assert_eq!(decoded, png);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_connector_going_away_and_coming_back_and_an_expired_token() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.alice_says("hello").await?;
    h.inbound().await?;
    let chat = h.alice.personal_conversation_id();
    h.fake.fail_connector(Some(503));
    let err = h
        .channel
        .send(&OutboundMessage::reply(
            "msteams",
            chat.clone(),
            "during the outage",
        ))
        .await;
    assert!(matches!(err, Err(ChannelError::Transient { .. })), "{err:?}");
    h.fake.fail_connector(Some(429));
    let err = h
        .channel
        .send(&OutboundMessage::reply("msteams", chat.clone(), "too fast"))
        .await;
    assert!(
        matches!(err, Err(ChannelError::RateLimited { retry_after: Some(d), .. }) if d == Duration::from_secs(1)),
        "{err:?}"
    );
    h.fake.fail_connector(None);
    h.channel
        .send(&OutboundMessage::reply("msteams", chat.clone(), "back again"))
        .await?;
    assert_eq!(h.fake.sent().last().unwrap().body["text"], "back again");
    // The connector stops taking the token: a new one is asked for, once, and the answer goes.
    h.fake.expire_tokens();
    h.channel
        .send(&OutboundMessage::reply(
            "msteams",
            chat.clone(),
            "with a new token",
        ))
        .await?;
    assert_eq!(h.fake.sent().last().unwrap().body["text"], "with a new token");
    assert_eq!(h.fake.tokens_issued(), 2);
    // An answer for a chat nobody wrote from is refused, naming why.
    let err = h
        .channel
        .send(&OutboundMessage::reply("msteams", "a:1nobody", "hi"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("rejected") && format!("{err:?}").contains("write to the bot first"),
        "{err:?}"
    );

    // The channel stops and a new one starts on the same state: it answers without a new message.
    let (fake, state) = h.stop().await;
    let h = Harness::start_with(fake, state, json!({})).await?;
    h.channel
        .send(&OutboundMessage::reply(
            "msteams",
            chat.clone(),
            "after a restart",
        ))
        .await?;
    assert_eq!(h.fake.sent().last().unwrap().body["text"], "after a restart");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_is_one_clear_error_and_missing_keys_are_a_retry() -> Result<()> {
    nanobot_testkit::install_ring();
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await?;
    let alice = TeamsUser::new("alice");
    let state = tempfile::tempdir()?;
    let media = tempfile::tempdir()?;
    let wrong = block(&fake, &alice, &json!({"appPassword": "WRONG-secret-value-123"}));
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    // The webhook takes the message (the token is the Bot Framework's, not the bot's) ...
    let channel = MsTeamsChannel::new(settings(&fake, &wrong)?, state.path(), media.path());
    let channel = Arc::new(channel);
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (c, bus, cancel) = (channel.clone(), bus.clone(), cancel.clone());
        async move { c.run(bus, cancel).await }
    });
    let addr = listening(&channel).await?;
    let webhook = format!("http://{addr}/api/messages");
    let activity = fake.message(&alice, &alice.personal_conversation_id(), "personal", "hi");
    assert_eq!(
        fake.deliver(&webhook, &activity, Some(&fake.valid_token()))
            .await?,
        200
    );
    tokio::time::timeout(WITHIN, bus.consume_inbound())
        .await?
        .context("inbound")?;
    // ... and the answer fails with one authentication error naming the keys, never the password.
    let err = channel
        .send(&OutboundMessage::reply(
            "msteams",
            alice.personal_conversation_id(),
            "hello",
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    let shown = nanobot_testkit::secrets::error_text(&err);
    assert!(
        shown.contains("appPassword") && shown.contains("HTTP 401"),
        "{shown}"
    );
    assert!(!shown.contains("WRONG-secret-value-123"), "{shown}");
    cancel.cancel();
    let _ = tokio::time::timeout(WITHIN, task).await;

    // Keys that cannot be fetched: 503, so the Bot Framework tries again; nothing reaches the agent.
    let closed = nanobot_testkit::peers::free_port()?;
    let unreachable = block(
        &fake,
        &alice,
        &json!({"openIdMetadata": format!("https://127.0.0.1:{closed}/v1/.well-known/openidconfiguration")}),
    );
    let channel = Arc::new(MsTeamsChannel::new(
        settings(&fake, &unreachable)?,
        state.path(),
        media.path(),
    ));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (c, bus, cancel) = (channel.clone(), bus.clone(), cancel.clone());
        async move { c.run(bus, cancel).await }
    });
    let addr = listening(&channel).await?;
    let status = fake
        .deliver(
            &format!("http://{addr}/api/messages"),
            &activity,
            Some(&fake.valid_token()),
        )
        .await?;
    assert_eq!(status, 503);
    cancel.cancel();
    let _ = tokio::time::timeout(WITHIN, task).await;
    Ok(())
}

#[tokio::test]
async fn with_inbound_checks_off_any_request_is_taken() -> Result<()> {
    let h = Harness::start(json!({"validateInboundAuth": false})).await?;
    let activity = h.fake.message(
        &h.alice,
        &h.alice.personal_conversation_id(),
        "personal",
        "no token at all",
    );
    assert_eq!(h.fake.deliver(&h.webhook, &activity, None).await?, 200);
    assert_eq!(h.inbound().await?.content, "no token at all");
    h.stop().await;
    Ok(())
}
