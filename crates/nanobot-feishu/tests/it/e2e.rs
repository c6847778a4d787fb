//! End to end: events pushed by the fake reach the bus; replies go out through the fake's IM API.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, GroupPolicy, ManagerSettings, Transcribe, TranscribeError};
use nanobot_config::{FeishuConfig, Secret};
use nanobot_feishu::{FeishuChannel, FeishuSettings};
use nanobot_testkit::fake_feishu::{BOT_OPEN_ID, FakeFeishu, message_event};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub(crate) const ALICE: &str = "ou_alice";
const EVE: &str = "ou_eve";
pub(crate) const GROUP: &str = "oc_group1";

pub(crate) struct Harness {
    pub(crate) fake: FakeFeishu,
    pub(crate) channel: Arc<FeishuChannel>,
    pub(crate) bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
    pub(crate) media: tempfile::TempDir,
}

impl Harness {
    pub(crate) async fn start(policy: GroupPolicy) -> Result<Self> {
        Self::start_with(policy, None).await
    }

    async fn start_with(policy: GroupPolicy, transcriber: Option<Arc<dyn Transcribe>>) -> Result<Self> {
        Self::start_full(policy, transcriber, |_| {}).await
    }

    /// A harness whose settings `edit` adjusts first.
    pub(crate) async fn start_tuned(
        policy: GroupPolicy,
        edit: impl FnOnce(&mut FeishuSettings),
    ) -> Result<Self> {
        Self::start_full(policy, None, edit).await
    }

    async fn start_full(
        policy: GroupPolicy,
        transcriber: Option<Arc<dyn Transcribe>>,
        edit: impl FnOnce(&mut FeishuSettings),
    ) -> Result<Self> {
        let fake = FakeFeishu::start("cli_test", "secret-1").await?;
        let config = FeishuConfig {
            app_id: "cli_test".into(),
            app_secret: Secret::new("secret-1"),
            allow_from: vec![ALICE.into()],
            group_policy: policy,
            done_emoji: Some("DONE".into()),
            base_url: Some(fake.base_url().to_string()),
            ..FeishuConfig::default()
        };
        let media = tempfile::tempdir()?;
        let mut settings = FeishuSettings::from_config(&config)?;
        edit(&mut settings);
        let mut channel = FeishuChannel::new(settings, media.path())?;
        if let Some(t) = transcriber {
            channel = channel.with_transcriber(t);
        }
        let channel = Arc::new(channel);
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
            media,
        })
    }

    pub(crate) async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(30), self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// Pushes an event, waits for its acknowledgement and until the channel has finished with it.
    pub(crate) async fn push(&self, event: &Value) -> Result<()> {
        let before = *self.channel.handled_events().borrow();
        let frame = self.fake.push_event(event)?;
        let ack = self.fake.acked(&frame).await?;
        assert_eq!(ack.payload["code"], 200);
        let mut rx = self.channel.handled_events();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|n| *n > before))
            .await
            .context("event not handled within 30 s")??;
        Ok(())
    }

    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.manager).await;
    }
}

pub(crate) fn dm(event_id: &str, message_id: &str, from: &str, text: &str) -> Value {
    message_event(event_id, message_id, from, "oc_p2p_chat", "p2p", text, &[])
}

#[tokio::test]
async fn an_allowed_direct_message_is_answered() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    h.push(&dm("ev1", "om_1", ALICE, "hello bot")).await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("feishu", ALICE, ALICE)
    );
    assert_eq!(inbound.content, "hello bot");
    assert_eq!(inbound.metadata["message_id"], "om_1");
    // The received reaction went on the message.
    let reaction = h
        .fake
        .call_where("reaction", |c| {
            c.path == "/open-apis/im/v1/messages/om_1/reactions"
        })
        .await?;
    assert_eq!(reaction.body["reaction_type"]["emoji_type"], "THUMBSUP");

    let mut reply = OutboundMessage::reply("feishu", ALICE, "Hi **Alice**");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent[0].path, "/open-apis/im/v1/messages");
    assert_eq!(sent[0].query, "receive_id_type=open_id");
    assert_eq!(sent[0].body["receive_id"], ALICE);
    assert_eq!(
        sent[0].body["msg_type"], "interactive",
        "Markdown goes out as a card"
    );
    let card: Value = serde_json::from_str(sent[0].body["content"].as_str().context("content")?)?;
    assert_eq!(card["elements"][0]["content"], "Hi **Alice**");
    // doneEmoji replaces the reaction once the reply is out.
    h.fake
        .call_where("done reaction", |c| {
            c.path == "/open-apis/im/v1/messages/om_1/reactions"
                && c.body["reaction_type"]["emoji_type"] == "DONE"
        })
        .await?;
    assert!(h.fake.calls().iter().any(|c| c.method == "DELETE"));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_need_a_mention_and_strangers_are_not_served() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let plain = message_event("ev1", "om_1", ALICE, GROUP, "group", "just chatting", &[]);
    h.push(&plain).await?;
    h.push(&dm("ev2", "om_2", EVE, "let me in")).await?;
    let to_eve = message_event(
        "ev3",
        "om_3",
        EVE,
        GROUP,
        "group",
        "@_user_1 hi",
        &[("@_user_1", BOT_OPEN_ID, "bot")],
    );
    h.push(&to_eve).await?;
    let other_bot = message_event(
        "ev4",
        "om_4",
        ALICE,
        GROUP,
        "group",
        "@_user_1 not you",
        &[("@_user_1", "ou_someone", "Bob")],
    );
    h.push(&other_bot).await?;
    let mentioned = message_event(
        "ev5",
        "om_5",
        ALICE,
        GROUP,
        "group",
        "@_user_1 what time is it?",
        &[("@_user_1", BOT_OPEN_ID, "bot")],
    );
    h.push(&mentioned).await?;
    // The first message on the bus is the last one pushed: the others were dropped.
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "what time is it?");
    assert_eq!(inbound.chat_id, GROUP);
    assert_eq!(
        inbound.session_key(),
        "feishu:oc_group1:om_5",
        "topicIsolation: one session per topic"
    );
    assert!(
        h.fake.sent_messages().is_empty(),
        "nothing was sent to the stranger"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_dropped_connection_is_reopened_and_redeliveries_are_handled_once() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let first = dm("ev1", "om_1", ALICE, "first");
    h.push(&first).await?;
    assert_eq!(h.inbound().await?.content, "first");
    h.fake.drop_connections();
    h.fake.connected(2).await?;
    let mut connections = h.channel.connections();
    tokio::time::timeout(Duration::from_secs(30), connections.wait_for(|n| *n >= 2)).await??;
    // The platform redelivers the event (same ids) on the new connection, then a new one arrives.
    h.push(&first).await?;
    h.push(&dm("ev2", "om_2", ALICE, "second")).await?;
    assert_eq!(
        h.inbound().await?.content,
        "second",
        "the redelivered event was not handled twice"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_expired_token_is_renewed() -> Result<()> {
    let h = Harness::start(GroupPolicy::Open).await?;
    h.bus
        .publish_outbound(OutboundMessage::reply("feishu", GROUP, "one"))
        .await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent[0].token.as_deref(), Some("t-1"));
    assert_eq!(sent[0].query, "receive_id_type=chat_id");
    h.fake.expire_tokens();
    h.bus
        .publish_outbound(OutboundMessage::reply("feishu", GROUP, "two"))
        .await?;
    h.fake
        .call_where("send with a new token", |c| {
            c.body["content"] == r#"{"text":"two"}"# && c.token.as_deref() == Some("t-2")
        })
        .await?;
    assert_eq!(h.fake.tokens_issued(), 2);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn wrong_credentials_are_an_auth_error() -> Result<()> {
    use nanobot_channels::{Channel, ChannelError};
    let fake = FakeFeishu::start("cli_test", "secret-1").await?;
    let config = FeishuConfig {
        app_id: "cli_test".into(),
        app_secret: Secret::new("wrong-secret"),
        base_url: Some(fake.base_url().to_string()),
        ..FeishuConfig::default()
    };
    let media = tempfile::tempdir()?;
    let channel = FeishuChannel::new(FeishuSettings::from_config(&config)?, media.path())?;
    let bus = Arc::new(InProcessBus::new(8));
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        channel.run(bus, CancellationToken::new()),
    )
    .await?
    .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert!(!format!("{err:?}").contains("wrong-secret"));
    Ok(())
}

/// Reads the downloaded voice message back as its "transcription".
struct EchoTranscriber;

#[async_trait::async_trait]
impl Transcribe for EchoTranscriber {
    async fn transcribe(&self, path: &std::path::Path) -> Result<String, TranscribeError> {
        let bytes = std::fs::read(path).map_err(|e| TranscribeError(Box::new(e)))?;
        Ok(format!("heard {}", String::from_utf8_lossy(&bytes)))
    }
}

#[tokio::test]
async fn a_voice_message_is_downloaded_and_read_as_its_transcription() -> Result<()> {
    let h = Harness::start_with(GroupPolicy::Open, Some(Arc::new(EchoTranscriber))).await?;
    let mut event = dm("ev-audio", "om_audio", ALICE, "");
    event["event"]["message"]["message_type"] = json!("audio");
    event["event"]["message"]["content"] =
        json!(json!({"file_key": "file_v3_voice", "duration": 2000}).to_string());
    h.push(&event).await?;
    let msg = h.inbound().await?;
    assert!(
        msg.content.starts_with("[transcription: heard resource of ")
            && msg.content.contains("om_audio/resources/file_v3_voice"),
        "{}",
        msg.content
    );
    assert_eq!(msg.media.len(), 1, "the voice file stays attached");
    h.stop().await;
    Ok(())
}
