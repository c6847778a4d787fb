//! End to end: robot messages pushed by the fake reach the bus; replies go out through the fake's robot API.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, ManagerSettings};
use nanobot_config::{DingTalkConfig, Secret};
use nanobot_dingtalk::{DingTalkChannel, DingTalkSettings};
use nanobot_testkit::fake_dingtalk::{FakeDingTalk, text_message};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub(crate) const ALICE: &str = "staff-alice";
const EVE: &str = "staff-eve";

/// The channel, running under a channel manager, against a fake DingTalk with a Stream connection open.
pub(crate) struct Harness {
    pub(crate) fake: FakeDingTalk,
    pub(crate) channel: Arc<DingTalkChannel>,
    pub(crate) bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
    _media: tempfile::TempDir,
}

impl Harness {
    pub(crate) async fn start(edit: impl FnOnce(&mut DingTalkConfig)) -> Result<Self> {
        let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
        let mut config = DingTalkConfig {
            client_id: "ding_test".into(),
            client_secret: Secret::new("secret-2"),
            allow_from: vec![ALICE.into()],
            base_url: Some(fake.base_url().to_string()),
            ..DingTalkConfig::default()
        };
        edit(&mut config);
        let media = tempfile::tempdir()?;
        let channel = Arc::new(DingTalkChannel::new(
            DingTalkSettings::from_config(&config)?,
            media.path(),
        )?);
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(channel.clone());
        let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
        fake.connected(1).await?;
        Ok(Self {
            fake,
            channel,
            bus,
            cancel,
            manager,
            _media: media,
        })
    }

    pub(crate) async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(30), self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// Pushes a robot message, waits for its acknowledgement and until the channel has finished with it.
    pub(crate) async fn push(&self, data: &Value) -> Result<()> {
        let before = *self.channel.handled_frames().borrow();
        let frame = self.fake.push_message(data)?;
        let ack = self.fake.acked(&frame).await?;
        assert_eq!(ack.frame["code"], 200);
        let mut rx = self.channel.handled_frames();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|n| *n > before))
            .await
            .context("message not handled within 30 s")??;
        Ok(())
    }

    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.manager).await;
    }
}

pub(crate) fn param(call: &nanobot_testkit::fake_dingtalk::DingTalkCall) -> Value {
    serde_json::from_str(call.body["msgParam"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_allowed_direct_message_is_answered_and_pings_acknowledged() -> Result<()> {
    let h = Harness::start(|_| {}).await?;
    let ping = h.fake.push_system("ping", &json!({"opaque": "x"}))?;
    let ack = h.fake.acked(&ping).await?;
    assert_eq!(ack.frame["data"], r#"{"opaque":"x"}"#);
    h.push(&text_message("m1", ALICE, "1", "cid-dm", " hello bot ", false))
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("dingtalk", ALICE, ALICE)
    );
    assert_eq!(inbound.content, "hello bot");
    let mut reply = OutboundMessage::reply("dingtalk", ALICE, "**Hi**");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent[0].path, "/v1.0/robot/oToMessages/batchSend");
    assert_eq!(sent[0].body["userIds"], json!([ALICE]));
    assert_eq!(sent[0].body["robotCode"], "ding_test");
    assert_eq!(sent[0].body["msgKey"], "sampleMarkdown");
    assert_eq!(param(&sent[0])["text"], "**Hi**");
    assert_eq!(sent[0].token.as_deref(), Some("at-1"));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_need_a_mention_and_strangers_are_not_served() -> Result<()> {
    let h = Harness::start(|c| c.group_user_isolation = true).await?;
    h.push(&text_message("m1", ALICE, "2", "cid-g", "not for you", false))
        .await?;
    h.push(&text_message("m2", EVE, "1", "cid-eve", "let me in", false))
        .await?;
    h.push(&text_message("m3", EVE, "2", "cid-g", "me too", true))
        .await?;
    h.push(&text_message("m4", ALICE, "2", "cid-g", "what time is it?", true))
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        inbound.content, "what time is it?",
        "the earlier messages were dropped"
    );
    assert_eq!(inbound.chat_id, "group:cid-g");
    assert_eq!(
        inbound.session_key(),
        "dingtalk:group:cid-g:staff-alice",
        "groupUserIsolation"
    );
    assert!(
        h.fake.sent_messages().is_empty(),
        "nothing was sent to the stranger"
    );
    // Group replies go to the conversation, headed with the sender's name.
    let mut reply = OutboundMessage::reply("dingtalk", "group:cid-g", "noon");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent[0].path, "/v1.0/robot/groupMessages/send");
    assert_eq!(sent[0].body["openConversationId"], "cid-g");
    assert_eq!(param(&sent[0])["text"], "# @nick\\-staff\\-alice\n\nnoon");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn private_chat_can_be_disabled() -> Result<()> {
    let h = Harness::start(|c| c.disable_private_chat = true).await?;
    h.push(&text_message("m1", ALICE, "1", "cid-dm", "hello", false))
        .await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent[0].body["userIds"], json!([ALICE]));
    assert!(
        param(&sent[0])["text"]
            .as_str()
            .unwrap_or_default()
            .contains("group")
    );
    h.push(&text_message("m2", ALICE, "2", "cid-g", "in a group", true))
        .await?;
    assert_eq!(
        h.inbound().await?.content,
        "in a group",
        "the direct message never reached the bus"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn disconnects_and_drops_reconnect_and_redeliveries_are_handled_once() -> Result<()> {
    let h = Harness::start(|_| {}).await?;
    let first = text_message("m1", ALICE, "1", "cid-dm", "first", false);
    h.push(&first).await?;
    assert_eq!(h.inbound().await?.content, "first");
    // The server asks the client to reconnect…
    let bye = h.fake.push_system("disconnect", &json!({"reason": "upgrade"}))?;
    h.fake.acked(&bye).await?;
    h.fake.connected(2).await?;
    // …and a connection is cut.
    h.fake.drop_connections();
    h.fake.connected(3).await?;
    let mut connections = h.channel.connections();
    tokio::time::timeout(Duration::from_secs(30), connections.wait_for(|n| *n >= 3)).await??;
    h.push(&first).await?;
    h.push(&text_message("m2", ALICE, "1", "cid-dm", "second", false))
        .await?;
    assert_eq!(
        h.inbound().await?.content,
        "second",
        "the redelivered message was not handled twice"
    );
    // Each connection used a fresh ticket (the fake refuses a ticket twice).
    let opens = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.path == "/v1.0/gateway/connections/open")
        .count();
    assert_eq!(opens, 3);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_expired_token_is_renewed() -> Result<()> {
    let h = Harness::start(|_| {}).await?;
    h.bus
        .publish_outbound(OutboundMessage::reply("dingtalk", ALICE, "one"))
        .await?;
    assert_eq!(h.fake.sent(1).await?[0].token.as_deref(), Some("at-1"));
    h.fake.expire_tokens();
    h.bus
        .publish_outbound(OutboundMessage::reply("dingtalk", ALICE, "two"))
        .await?;
    let sent = h.fake.sent(3).await?;
    // The rejected attempt with the old token, then the same message with a new one.
    assert_eq!(sent[1].token.as_deref(), Some("at-1"));
    assert_eq!(sent[2].token.as_deref(), Some("at-2"));
    assert_eq!(param(&sent[2])["text"], "two");
    assert_eq!(h.fake.tokens_issued(), 2);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn wrong_credentials_are_an_auth_error() -> Result<()> {
    use nanobot_channels::{Channel, ChannelError};
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let config = DingTalkConfig {
        client_id: "ding_test".into(),
        client_secret: Secret::new("wrong-secret"),
        base_url: Some(fake.base_url().to_string()),
        ..DingTalkConfig::default()
    };
    let media = tempfile::tempdir()?;
    let channel = DingTalkChannel::new(DingTalkSettings::from_config(&config)?, media.path())?;
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        channel.run(Arc::new(InProcessBus::new(8)), CancellationToken::new()),
    )
    .await?
    .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert!(!format!("{err:?}").contains("wrong-secret"));
    Ok(())
}
