use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_napcat::{NapcatChannel, NapcatSettings};
use nanobot_testkit::fake_onebot::{FakeOneBot, SELF_ID, group_message, member_joined, private_message};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ALICE: i64 = 20002;
const STRANGER: i64 = 30003;
const GROUP: i64 = 55555;
const TOKEN: &str = "napcat-token-1";

struct Harness {
    fake: FakeOneBot,
    channel: Arc<NapcatChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        let fake = FakeOneBot::start(Some(TOKEN)).await?;
        let mut block = json!({"enabled": true, "wsUrl": fake.ws_url(), "accessToken": TOKEN,
            "allowFrom": [ALICE.to_string()]});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        // The fake serves images on loopback: allowed as the gateway allows what `tools.ssrfWhitelist` names.
        let guard = SsrfGuard::from_cidrs(&["127.0.0.1/32"])?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let channel = Arc::new(
            NapcatChannel::new(NapcatSettings::from_block(&block)?, media.path())
                .with_ssrf_guard(guard)
                .with_pairing(pairing),
        );
        let bus = Arc::new(InProcessBus::new(64));
        let mut manager = ChannelManager::new(ManagerSettings {
            supervisor: SupervisorSettings::quick(),
            ..ManagerSettings::default()
        });
        manager.add(channel.clone());
        let manager = manager.spawn(bus.clone());
        let h = Self {
            fake,
            channel,
            bus,
            manager,
            media,
            _data: data,
        };
        h.logged_in(1).await?;
        Ok(h)
    }

    /// Waits until the channel has logged in `n` times.
    async fn logged_in(&self, n: u64) -> Result<()> {
        let mut logins = self.channel.logins();
        tokio::time::timeout(Duration::from_secs(30), logins.wait_for(|l| *l >= n))
            .await
            .context("no login within 30 s")??;
        Ok(())
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(30), self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    /// The `send_msg` calls so far, once there are `n`.
    async fn sent(&self, n: usize) -> Result<Vec<Value>> {
        Ok(self
            .fake
            .wait_actions("send_msg", n)
            .await?
            .into_iter()
            .map(|a| a.params)
            .collect())
    }

    async fn stop(self) {
        self.manager.stop(Duration::from_secs(20)).await;
    }
}

/// The text segments of a `send_msg`'s message, joined.
fn text_of(params: &Value) -> String {
    params["message"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["type"] == "text")
        .filter_map(|s| s["data"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn an_allowed_user_is_answered_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    assert!(
        h.fake.actions().iter().any(|a| a.action == "get_login_info"),
        "logged in with get_login_info"
    );
    h.fake.push_event(&private_message(1, ALICE, " hello bot "));
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("napcat", "20002", "private:20002")
    );
    assert_eq!(inbound.content, "hello bot");
    assert_eq!(inbound.metadata["message_id"], 1, "a number, as 0.3.5 keeps it");
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], false);

    h.bus
        .publish_outbound(OutboundMessage::reply("napcat", "private:20002", "Hi Alice"))
        .await?;
    let sent = h.sent(1).await?;
    assert_eq!(sent[0]["message_type"], "private");
    assert_eq!(sent[0]["user_id"], json!(ALICE));
    assert_eq!(text_of(&sent[0]), "Hi Alice");

    // The same message delivered twice reaches the agent once.
    h.fake.push_event(&private_message(1, ALICE, " hello bot "));
    h.fake.push_event(&private_message(2, ALICE, "second"));
    assert_eq!(h.inbound().await?.content, "second");

    // A stranger in a private chat is not served: a pairing code comes back instead.
    h.fake.push_event(&private_message(3, STRANGER, "let me in"));
    let sent = h.sent(2).await?;
    assert_eq!(sent[1]["user_id"], json!(STRANGER));
    assert!(text_of(&sent[1]).contains("pairing"), "{}", sent[1]);
    h.fake
        .push_event(&private_message(4, ALICE, "after the stranger"));
    assert_eq!(
        h.inbound().await?.content,
        "after the stranger",
        "the stranger's message never reached the agent"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_follow_their_policy_and_replies_to_the_bot_count_as_mentions() -> Result<()> {
    let h = Harness::start(json!({"groupPolicyOverrides": {"77777": "open"}})).await?;
    let at_bot = json!({"type": "at", "data": {"qq": SELF_ID.to_string()}});
    // No mention under `mention`: ignored.
    h.fake.push_event(&group_message(
        10,
        GROUP,
        ALICE,
        "Alice",
        json!([{"type": "text", "data": {"text": "chatter"}}]),
    ));
    // A mention: taken, as "<nickname>: <text>".
    h.fake.push_event(&group_message(
        11,
        GROUP,
        ALICE,
        "Alice",
        json!([at_bot, {"type": "text", "data": {"text": " what time is it"}}]),
    ));
    let inbound = h.inbound().await?;
    assert_eq!(inbound.chat_id, format!("group:{GROUP}"));
    assert_eq!(inbound.content, "Alice: what time is it");
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], true);

    // The bot answers; a reply to that answer is addressed to the bot without a mention.
    h.bus
        .publish_outbound(OutboundMessage::reply("napcat", format!("group:{GROUP}"), "noon"))
        .await?;
    let sent = h.sent(1).await?;
    assert_eq!(
        (sent[0]["message_type"].clone(), sent[0]["group_id"].clone()),
        (json!("group"), json!(GROUP))
    );
    // The fake numbers the messages it sends from 5000.
    let bot_message_id = 5000;
    h.fake.push_event(&group_message(
        12,
        GROUP,
        ALICE,
        "Alice",
        json!([{"type": "reply", "data": {"id": bot_message_id.to_string()}}, {"type": "text", "data": {"text": "thanks"}}]),
    ));
    assert_eq!(h.inbound().await?.content, "Alice: thanks");

    // A group overridden to `open` takes every message; a stranger in a group is ignored, mention or not.
    h.fake.push_event(&group_message(
        13,
        GROUP,
        STRANGER,
        "Eve",
        json!([at_bot, {"type": "text", "data": {"text": "hey"}}]),
    ));
    h.fake.push_event(&group_message(
        14,
        77777,
        ALICE,
        "Alice",
        json!([{"type": "text", "data": {"text": "open chatter"}}]),
    ));
    let inbound = h.inbound().await?;
    assert_eq!(
        (inbound.chat_id.as_str(), inbound.content.as_str()),
        ("group:77777", "Alice: open chatter")
    );
    assert_eq!(
        h.fake.actions().iter().filter(|a| a.action == "send_msg").count(),
        1,
        "nothing sent to the stranger"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_long_answer_is_split_and_images_go_both_ways() -> Result<()> {
    let h = Harness::start(json!({"maxImageBytes": 1024})).await?;
    let base = h.fake.base_url();
    h.fake.push_event(&json!({
        "post_type": "message", "message_type": "private", "sub_type": "friend", "self_id": SELF_ID,
        "message_id": 20, "user_id": ALICE, "time": 1, "raw_message": "",
        "sender": {"user_id": ALICE, "nickname": "Alice"},
        "message": [
            {"type": "text", "data": {"text": "look"}},
            {"type": "image", "data": {"url": format!("{base}/files/cat.png"), "file": "../../cat.png"}},
            {"type": "image", "data": {"url": format!("{base}/files/big-2048"), "file": "big.png"}},
            {"type": "image", "data": {"url": format!("{base}/files/declared.png"), "file": "declared.png", "file_size": "999999"}},
            {"type": "image", "data": {"url": "http://127.0.0.2:9/secret.png", "file": "secret.png"}}
        ]
    }));
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "look");
    assert_eq!(
        inbound.media.len(),
        1,
        "only the image within the limits, from an allowed address: {:?}",
        inbound.media
    );
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("napcat")), "{saved:?}");
    assert_eq!(std::fs::read_to_string(saved)?, "content of cat.png");
    let left: Vec<_> = std::fs::read_dir(h.media.path().join("napcat"))?.collect();
    assert_eq!(left.len(), 1, "nothing left of the refused images: {left:?}");

    // Out: a local image as base64 with the first piece of a long answer; the rest in further messages.
    let picture = h.media.path().join("out.png");
    std::fs::write(&picture, b"PNGDATA")?;
    let long = "word ".repeat(1700);
    let mut reply = OutboundMessage::reply("napcat", "private:20002", long.trim());
    reply.media = vec![picture.display().to_string()];
    h.bus.publish_outbound(reply).await?;
    let sent = h.sent(3).await?;
    assert_eq!(sent[0]["message"][0]["type"], "image");
    use base64::Engine as _;
    assert_eq!(
        sent[0]["message"][0]["data"]["file"],
        format!(
            "base64://{}",
            base64::engine::general_purpose::STANDARD.encode(b"PNGDATA")
        )
    );
    let pieces: Vec<String> = sent.iter().map(text_of).collect();
    assert!(
        pieces
            .iter()
            .all(|p| p.chars().count() <= nanobot_napcat::PIECE_LIMIT),
        "{pieces:?}"
    );
    assert_eq!(
        pieces.join(" ").split_whitespace().count(),
        1700,
        "nothing lost in the split"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_channel_comes_back_when_napcat_restarts_and_welcomes_new_members() -> Result<()> {
    let h = Harness::start(json!({"allowFrom": ["*"]})).await?;
    h.fake.drop_connections();
    h.logged_in(2).await?;
    h.fake.push_event(&private_message(30, ALICE, "still there?"));
    assert_eq!(h.inbound().await?.content, "still there?");

    h.fake.push_event(&member_joined(GROUP, 40004));
    let inbound = h.inbound().await?;
    assert_eq!(inbound.chat_id, format!("group:{GROUP}"));
    assert_eq!(
        inbound.content,
        format!("[group event] new member member-40004 joined group {GROUP}")
    );
    let lookup = h.fake.wait_actions("get_group_member_info", 1).await?;
    assert_eq!(lookup[0].params["group_id"], json!(GROUP));
    assert_eq!(lookup[0].params["user_id"], json!(40004));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_wrong_token_stops_the_channel_with_one_clear_error() -> Result<()> {
    let fake = FakeOneBot::start(Some(TOKEN)).await?;
    let block = json!({"enabled": true, "wsUrl": format!("{}?access_token=SEKRIT-IN-URL", fake.ws_url()),
        "accessToken": "wrong-SEKRIT", "allowFrom": ["*"]});
    let channel = NapcatChannel::new(NapcatSettings::from_block(&block)?, std::env::temp_dir());
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        channel.run(bus, CancellationToken::new()),
    )
    .await
    .context("run did not end")?
    .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    let shown = nanobot_util::error_chain(&err);
    assert!(shown.contains("check channels.napcat.accessToken"), "{shown}");
    assert!(!shown.contains("SEKRIT"), "{shown}");
    assert!(fake.refused() >= 1);

    // Nothing listening: a transient error the manager retries, naming the address.
    drop(fake);
    let channel = NapcatChannel::new(
        NapcatSettings::from_block(&json!({"wsUrl": "ws://127.0.0.1:9/"}))?,
        std::env::temp_dir(),
    );
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ChannelError::Transient { .. }), "{err:?}");
    assert!(
        nanobot_util::error_chain(&err).contains("ws://127.0.0.1:9/"),
        "{err:?}"
    );
    // Sending while disconnected is a transient failure (the manager retries), not a panic or a hang.
    let err = channel
        .send(&OutboundMessage::reply("napcat", "private:1", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Transient { .. }), "{err:?}");
    let err = channel
        .send(&OutboundMessage::reply("napcat", "telegram-chat", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::InvalidChatId { .. }), "{err:?}");
    Ok(())
}
