//! End to end: events dispatched by the fake gateway reach the bus; replies go out as passive replies.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, ManagerSettings};
use nanobot_qq::{INTENTS, QqChannel, QqSettings};
use nanobot_testkit::fake_qq::{FakeQq, SESSION_ID, c2c_message, group_message};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ALICE: &str = "ALICE_OPENID";
const EVE: &str = "EVE_OPENID";
const GROUP: &str = "GROUP_OPENID_1";

struct Harness {
    fake: FakeQq,
    channel: Arc<QqChannel>,
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
    media: tempfile::TempDir,
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        Self::start_with(extra, 30_000).await
    }

    async fn start_with(extra: Value, heartbeat_ms: u64) -> Result<Self> {
        let fake = FakeQq::start("102030", "secret-3", heartbeat_ms).await?;
        let mut block = json!({"enabled": true, "appId": "102030", "secret": "secret-3", "allowFrom": [ALICE],
            "baseUrl": fake.base_url()});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let media = tempfile::tempdir()?;
        // The fake serves the files users send on loopback: allowed as the gateway allows what
        // `tools.ssrfWhitelist` names (127.0.0.2 stays internal).
        let guard = nanobot_channels::download::SsrfGuard::from_cidrs(&["127.0.0.1/32"])?;
        let channel =
            Arc::new(QqChannel::new(QqSettings::from_block(&block)?, media.path())?.with_ssrf_guard(guard));
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(channel.clone());
        let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
        fake.ready(1).await?;
        Ok(Self {
            fake,
            channel,
            bus,
            cancel,
            manager,
            media,
        })
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(30), self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// Waits until the channel has finished with `n` events in total.
    async fn handled(&self, n: u64) -> Result<()> {
        let mut rx = self.channel.handled_events();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|h| *h >= n))
            .await
            .context("events not handled within 30 s")??;
        Ok(())
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.manager).await;
    }
}

#[tokio::test]
async fn an_allowed_user_is_answered_with_passive_replies() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let identify = h.fake.frame(2, 0).await?;
    assert_eq!(identify["d"]["token"], "QQBot qqtoken-1");
    assert_eq!(identify["d"]["intents"], INTENTS);
    assert_eq!(identify["d"]["shard"], json!([0, 1]));

    h.fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("m-1", ALICE, " hello bot "));
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("qq", ALICE, ALICE)
    );
    assert_eq!(inbound.content, "hello bot");
    assert_eq!(inbound.metadata["message_id"], "m-1");
    // The ackMessage went out first, as a passive reply.
    let ack = h.fake.sent(1).await?;
    assert_eq!(ack[0].path, format!("/v2/users/{ALICE}/messages"));
    assert_eq!(ack[0].body["msg_id"], "m-1");
    assert_eq!(ack[0].body["content"], "⏳ Processing...");
    assert_eq!(ack[0].body["msg_type"], 0);

    let mut reply = OutboundMessage::reply("qq", ALICE, "Hi Alice");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(2).await?;
    assert_eq!(sent[1].path, format!("/v2/users/{ALICE}/messages"));
    assert_eq!(
        sent[1].body["msg_id"], "m-1",
        "the reply names the message it answers"
    );
    assert_eq!(sent[1].body["content"], "Hi Alice");
    assert!(
        sent[1].body["msg_seq"].as_u64() > sent[0].body["msg_seq"].as_u64(),
        "msg_seq grows so QQ does not drop the second reply to the same message"
    );
    assert_eq!(sent[1].authorization.as_deref(), Some("QQBot qqtoken-1"));
    assert_eq!(h.fake.tokens_issued(), 1, "the token is cached");

    // An expired token is renewed once and the call repeated.
    h.fake.expire_tokens();
    let mut again = OutboundMessage::reply("qq", ALICE, "still here");
    again.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(again).await?;
    let sent = h.fake.sent(4).await?;
    assert_eq!(
        sent[2].authorization.as_deref(),
        Some("QQBot qqtoken-1"),
        "refused with 401"
    );
    assert_eq!(sent[3].authorization.as_deref(), Some("QQBot qqtoken-2"));
    assert_eq!(sent[3].body["content"], "still here");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_need_a_mention_and_strangers_are_not_served() -> Result<()> {
    let h = Harness::start(json!({"msgFormat": "markdown", "ackMessage": ""})).await?;
    // A group message that does not mention the bot, from an allowed member: ignored.
    h.fake.push_event(
        "GROUP_MESSAGE_CREATE",
        &group_message("g-1", GROUP, ALICE, "chatting"),
    );
    // A stranger's direct message: not served (no pairing store: nothing is sent).
    h.fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("e-1", EVE, "let me in"));
    // A stranger mentioning the bot in a group: ignored.
    h.fake.push_event(
        "GROUP_AT_MESSAGE_CREATE",
        &group_message("g-2", GROUP, EVE, "hey bot"),
    );
    h.handled(3).await?;
    assert_eq!(h.bus.inbound_len(), 0);
    assert!(h.fake.sent_messages().is_empty(), "{:?}", h.fake.sent_messages());

    // An allowed member mentioning the bot: served, answered in the group as Markdown.
    h.fake.push_event(
        "GROUP_AT_MESSAGE_CREATE",
        &group_message("g-3", GROUP, ALICE, "what's up"),
    );
    let inbound = h.inbound().await?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.chat_id.as_str()),
        (ALICE, GROUP)
    );
    assert_eq!(inbound.content, "what's up");
    let mut reply = OutboundMessage::reply("qq", GROUP, "**all good**");
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(1).await?;
    assert_eq!(sent.len(), 1, "no ackMessage when it is empty");
    assert_eq!(sent[0].path, format!("/v2/groups/{GROUP}/messages"));
    assert_eq!(sent[0].body["msg_id"], "g-3");
    assert_eq!(sent[0].body["msg_type"], 2);
    assert_eq!(sent[0].body["markdown"]["content"], "**all good**");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_dropped_connection_is_resumed_and_no_event_is_handled_twice() -> Result<()> {
    let h = Harness::start_with(json!({"ackMessage": ""}), 200).await?;
    h.fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("r-1", ALICE, "one"));
    assert_eq!(h.inbound().await?.content, "one");
    // A heartbeat carries the last sequence number and is acknowledged (the connection stays up).
    let seq_one = h.fake.frame(1, 0).await?;
    assert!(seq_one["op"] == 1);

    let frames_before = h.fake.frames().len();
    h.fake.drop_connections();
    // Sent while we are away: replayed on resume.
    let last = h
        .fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("r-2", ALICE, "two"));
    h.fake.ready(2).await?;
    let resume = h.fake.frame(6, frames_before).await?;
    assert_eq!(resume["d"]["session_id"], SESSION_ID);
    assert_eq!(
        resume["d"]["seq"].as_u64(),
        Some(last - 1),
        "resumes after the last event it saw"
    );
    assert_eq!(resume["d"]["token"], "QQBot qqtoken-1");
    assert!(
        h.fake.frames()[frames_before..].iter().all(|f| f["op"] != 2),
        "resumed, not identified afresh"
    );
    assert_eq!(h.inbound().await?.content, "two");
    // The same message delivered again (a redelivery) is not handled twice.
    h.fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("r-2", ALICE, "two"));
    h.fake
        .push_event("C2C_MESSAGE_CREATE", &c2c_message("r-3", ALICE, "three"));
    assert_eq!(
        h.inbound().await?.content,
        "three",
        "the duplicate of r-2 was skipped"
    );
    assert_eq!(h.bus.inbound_len(), 0);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn attachments_are_downloaded_within_the_limit() -> Result<()> {
    let h = Harness::start(json!({"ackMessage": "", "downloadMaxBytes": 1_048_576})).await?;
    let base = h.fake.base_url().to_string();
    let mut d = c2c_message("a-1", ALICE, "");
    d["attachments"] = json!([
        {"url": format!("{base}/files/photo.png"), "filename": "../../photo.png", "content_type": "image/png"},
        {"url": format!("{base}/files/big-1048577"), "filename": "big.bin", "content_type": "application/octet-stream"},
        {"url": "http://127.0.0.2:9/secret", "filename": "internal.txt", "content_type": "text/plain"},
        {"url": "file:///etc/passwd", "filename": "passwd", "content_type": "text/plain"},
    ]);
    h.fake.push_event("C2C_MESSAGE_CREATE", &d);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1, "{inbound:?}");
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("qq")), "{saved:?}");
    assert_eq!(std::fs::read_to_string(saved)?, "content of photo.png");
    assert!(
        inbound.content.starts_with("[Image]\nReceived files:"),
        "{}",
        inbound.content
    );
    assert_eq!(
        inbound.content.matches("[download failed]").count(),
        3,
        "{}",
        inbound.content
    );
    let left: Vec<_> = std::fs::read_dir(h.media.path().join("qq"))?.collect();
    assert_eq!(left.len(), 1, "the oversized file left nothing behind: {left:?}");
    assert!(
        !h.fake.calls().iter().any(|c| c.path == "/secret"),
        "the internal address was never fetched"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn wrong_credentials_stop_the_channel_with_a_clear_error() -> Result<()> {
    let fake = FakeQq::start("102030", "secret-3", 30_000).await?;
    let block = json!({"appId": "102030", "secret": "WRONG-SECRET", "allowFrom": [ALICE], "baseUrl": fake.base_url()});
    let channel = QqChannel::new(QqSettings::from_block(&block)?, std::env::temp_dir())?;
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        nanobot_channels::Channel::run(&channel, bus, CancellationToken::new()),
    )
    .await?
    .unwrap_err();
    let text = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(text.contains("appId"), "{text}");
    assert!(!text.contains("WRONG-SECRET"), "{text}");
    Ok(())
}

#[tokio::test]
async fn files_are_uploaded_and_sent_as_media_replies() -> Result<()> {
    let h = Harness::start(json!({"ackMessage": ""})).await?;
    h.fake.push_event(
        "C2C_MESSAGE_CREATE",
        &c2c_message("f-1", ALICE, "send me the report"),
    );
    let inbound = h.inbound().await?;
    let pdf = h.media.path().join("report.pdf");
    std::fs::write(&pdf, b"%PDF-1.4 tiny")?;
    let png = h.media.path().join("chart.png");
    std::fs::write(&png, b"PNG tiny")?;
    let mut reply = OutboundMessage::reply("qq", ALICE, "here it is");
    reply.metadata = inbound.metadata.clone();
    reply.media = vec![
        pdf.display().to_string(),
        png.display().to_string(),
        h.media.path().join("missing.txt").display().to_string(),
    ];
    h.bus.publish_outbound(reply).await?;
    let sent = h.fake.sent(4).await?;
    let uploads: Vec<_> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.path.ends_with("/files"))
        .collect();
    assert_eq!(uploads.len(), 2, "{uploads:?}");
    assert_eq!(uploads[0].path, format!("/v2/users/{ALICE}/files"));
    assert_eq!(uploads[0].body["file_type"], 4);
    assert_eq!(uploads[0].body["file_name"], "report.pdf");
    assert_eq!(uploads[0].body["file_data"], "JVBERi0xLjQgdGlueQ==");
    assert_eq!(uploads[1].body["file_type"], 1);
    assert!(uploads[1].body.get("file_name").is_none(), "images carry no name");
    assert_eq!(sent[0].body["msg_type"], 7);
    assert!(
        sent[0].body["media"]["file_info"]
            .as_str()
            .is_some_and(|i| i.starts_with("fileinfo-"))
    );
    assert_eq!(sent[0].body["msg_id"], "f-1");
    assert_eq!(sent[1].body["msg_type"], 7);
    assert_eq!(sent[2].body["content"], "[Attachment send failed: missing.txt]");
    assert_eq!(sent[3].body["content"], "here it is");
    h.stop().await;
    Ok(())
}
