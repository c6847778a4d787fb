//! End to end: serenity connects to the fake gateway, messages flow to the bus, replies come back over REST.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{ChannelManager, GroupPolicy, ManagerSettings, PairingStore};
use nanobot_config::{DiscordConfig, Secret};
use nanobot_discord::{DiscordChannel, DiscordSettings};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::fake::{BOT_ID, FakeDiscord, Recorded, TOKEN, message};

struct Harness {
    fake: FakeDiscord,
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    handled: watch::Receiver<u64>,
    media: tempfile::TempDir,
    _config_dir: tempfile::TempDir,
    manager: tokio::task::JoinHandle<()>,
}

impl Harness {
    async fn start(allow: &[&str], policy: GroupPolicy, pairing: bool) -> Result<Self> {
        let fake = FakeDiscord::start().await?;
        let config = DiscordConfig {
            token: Secret::new(TOKEN),
            allow_from: allow.iter().map(|s| s.to_string()).collect(),
            group_policy: policy,
            base_url: Some(fake.base.clone()),
            ..DiscordConfig::default()
        };
        let media = tempfile::tempdir()?;
        let config_dir = tempfile::tempdir()?;
        let mut channel = DiscordChannel::new(DiscordSettings::from_config(&config)?, media.path())?;
        if pairing {
            channel = channel.with_pairing(Arc::new(PairingStore::in_config_dir(config_dir.path())?));
        }
        let handled = channel.handled_messages();
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(Arc::new(channel));
        let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
        fake.identified().await?;
        Ok(Self {
            fake,
            bus,
            cancel,
            handled,
            media,
            _config_dir: config_dir,
            manager,
        })
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(20), self.bus.consume_inbound())
            .await
            .context("no inbound message within 20 s")?
            .context("bus closed")
    }

    /// Waits until the channel has handled `n` gateway messages in total.
    async fn handled(&mut self, n: u64) -> Result<()> {
        tokio::time::timeout(Duration::from_secs(20), self.handled.wait_for(|c| *c >= n))
            .await
            .context("the channel did not handle the messages within 20 s")??;
        Ok(())
    }

    async fn posts_to(&self, channel: &str, at_least: usize) -> Result<Vec<Recorded>> {
        let path = format!("/api/v10/channels/{channel}/messages");
        self.fake
            .wait_request(|reqs| {
                let posts: Vec<Recorded> = reqs
                    .iter()
                    .filter(|r| r.method == "POST" && r.path == path)
                    .cloned()
                    .collect();
                (posts.len() >= at_least).then_some(posts)
            })
            .await
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.manager).await;
    }
}

#[tokio::test]
async fn allowed_dm_reaches_the_bus_and_a_long_reply_is_split_at_2000() -> Result<()> {
    let h = Harness::start(&["40"], GroupPolicy::Mention, false).await?;
    let identify = h.fake.identified().await?;
    assert_eq!(identify["token"], format!("Bot {TOKEN}"));
    let intents = identify["intents"].as_u64().context("identify without intents")?;
    let needed = (1 << 9) | (1 << 12) | (1 << 15); // GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
    assert_eq!(intents & needed, needed, "intents {intents:#b}");

    let mut m = message(100, 20, None, (40, "alice"), "hello bot");
    let file_url = format!("{}/files/notes.txt", h.fake.base);
    m["attachments"] = json!([{
        "id": "7", "filename": "../notes.txt", "size": 16, "url": file_url, "proxy_url": file_url,
        "content_type": "text/plain",
    }]);
    h.fake.push_message(m);

    let inbound = h.inbound().await?;
    assert_eq!(inbound.channel, "discord");
    assert_eq!(inbound.sender_id, "40|alice");
    assert_eq!(inbound.chat_id, "20");
    assert!(
        inbound.content.starts_with("hello bot\n[file: "),
        "{}",
        inbound.content
    );
    assert_eq!(inbound.metadata["message_id"], "100");
    assert_eq!(inbound.media.len(), 1);
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("discord")), "{saved:?}");
    assert_eq!(std::fs::read_to_string(saved)?, "attachment-bytes");

    // Typing indicator and read receipt while the agent works.
    h.fake
        .wait_request(|r| {
            r.iter()
                .find(|x| x.method == "POST" && x.path == "/api/v10/channels/20/typing")
                .cloned()
        })
        .await?;
    h.fake
        .wait_request(|r| {
            r.iter()
                .find(|x| {
                    x.method == "PUT" && x.path.starts_with("/api/v10/channels/20/messages/100/reactions/")
                })
                .cloned()
        })
        .await?;

    let words: Vec<String> = (0..900).map(|i| format!("w{i:03}")).collect();
    let long = words.join(" "); // 4499 characters
    let mut reply = OutboundMessage::reply("discord", "20", long.clone());
    reply.reply_to = Some("100".into());
    h.bus.publish_outbound(reply).await?;
    let posts = h.posts_to("20", 3).await?;
    assert_eq!(posts.len(), 3, "4499 characters make three messages");
    let contents: Vec<String> = posts
        .iter()
        .map(|p| p.payload()["content"].as_str().unwrap_or_default().to_string())
        .collect();
    for c in &contents {
        assert!(
            c.chars().count() <= 2000,
            "piece of {} characters",
            c.chars().count()
        );
    }
    assert_eq!(contents.join(" "), long, "nothing lost or reordered");
    assert_eq!(posts[0].payload()["message_reference"]["message_id"], "100");
    assert_eq!(
        posts[0].payload()["message_reference"]["fail_if_not_exists"],
        false
    );
    assert!(posts[1].payload().get("message_reference").is_none());

    // A file goes out as a multipart attachment.
    let file = h.media.path().join("report.txt");
    std::fs::write(&file, "report")?;
    let mut with_file = OutboundMessage::reply("discord", "20", "here it is");
    with_file.media = vec![file.display().to_string()];
    h.bus.publish_outbound(with_file).await?;
    let posts = h.posts_to("20", 4).await?;
    assert_eq!(posts[3].file_names(), ["report.txt"]);
    assert_eq!(posts[3].payload()["content"], "here it is");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn guild_messages_need_a_mention_under_the_mention_policy() -> Result<()> {
    let mut h = Harness::start(&["40"], GroupPolicy::Mention, false).await?;
    h.fake
        .push_message(message(201, 30, Some(1), (40, "alice"), "just chatting"));
    h.handled(1).await?;
    assert_eq!(h.bus.inbound_len(), 0, "no mention, no answer");

    let mut m = message(
        202,
        30,
        Some(1),
        (40, "alice"),
        &format!("<@{BOT_ID}> what time is it?"),
    );
    m["mentions"] = json!([crate::fake::bot_user()]);
    h.fake.push_message(m);
    let inbound = h.inbound().await?;
    assert_eq!(
        inbound.content, "what time is it?",
        "the bot's mention is removed"
    );
    assert_eq!(inbound.metadata["guild_id"], "1");
    assert_eq!(inbound.metadata["is_group"], true);

    // A reply to one of the bot's messages counts as a mention.
    let mut reply = message(203, 30, Some(1), (40, "alice"), "and tomorrow?");
    reply["referenced_message"] = message(150, 30, Some(1), (999, "nanobot"), "It is noon.");
    reply["referenced_message"]["author"]["bot"] = json!(true);
    h.fake.push_message(reply);
    assert_eq!(h.inbound().await?.content, "and tomorrow?");

    // The bot's own messages are never answered.
    let mut own = message(204, 30, Some(1), (999, "nanobot"), &format!("<@{BOT_ID}> echo"));
    own["author"]["bot"] = json!(true);
    h.fake.push_message(own);
    h.handled(4).await?;
    assert_eq!(h.bus.inbound_len(), 0);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_stranger_is_not_served_and_gets_a_pairing_code_in_dms() -> Result<()> {
    let mut h = Harness::start(&["40"], GroupPolicy::Open, true).await?;
    // In a server: ignored silently, even with a mention.
    let mut m = message(301, 30, Some(1), (66, "eve"), &format!("<@{BOT_ID}> hi"));
    m["mentions"] = json!([crate::fake::bot_user()]);
    h.fake.push_message(m);
    h.handled(1).await?;
    // In a DM: a pairing code, and nothing for the agent.
    h.fake
        .push_message(message(302, 21, None, (66, "eve"), "let me in"));
    h.handled(2).await?;
    assert_eq!(h.bus.inbound_len(), 0, "a stranger never reaches the agent");
    let posts = h.posts_to("21", 1).await?;
    let text = posts[0].payload()["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("pairing code"), "{text}");
    assert!(
        h.fake
            .requests()
            .iter()
            .all(|r| !r.path.starts_with("/api/v10/channels/30/")),
        "nothing is sent to the server channel"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_rejected_token_is_an_auth_error() -> Result<()> {
    use nanobot_channels::{Channel, ChannelError};
    let fake = FakeDiscord::start().await?;
    let config = DiscordConfig {
        token: Secret::new("wrong-token"),
        allow_from: vec!["*".into()],
        base_url: Some(fake.base.clone()),
        ..DiscordConfig::default()
    };
    let media = tempfile::tempdir()?;
    let channel = DiscordChannel::new(DiscordSettings::from_config(&config)?, media.path())?;
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert!(!err.is_retryable());

    let bad_chat = channel
        .send(&OutboundMessage::reply("discord", "general", "hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(bad_chat, ChannelError::InvalidChatId { .. }),
        "{bad_chat:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_approval_request_has_buttons_and_a_press_answers_it_for_allowed_users_only() -> Result<()> {
    let h = Harness::start(&["40"], GroupPolicy::Mention, false).await?;
    let mut question = OutboundMessage::reply("discord", "20", "🔐 Approval needed (deletes files): `rm x`");
    question.metadata.insert(
        "_approval".into(),
        json!({"id": "ab12cd", "approve": "/approve ab12cd", "deny": "/deny ab12cd"}),
    );
    h.bus.publish_outbound(question).await?;
    let posts = h.posts_to("20", 1).await?;
    let buttons = &posts[0].payload()["components"][0]["components"];
    assert_eq!(
        buttons[0]["custom_id"],
        "/approve ab12cd",
        "{}",
        posts[0].payload()
    );
    assert_eq!(buttons[1]["custom_id"], "/deny ab12cd");

    // A stranger's press is acknowledged but never reaches the agent; alice's does, as her command.
    h.fake.push_press(20, 5000, (66, "mallory"), "/approve ab12cd");
    h.fake.push_press(20, 5000, (40, "alice"), "/deny ab12cd");
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str(),
            inbound.content.as_str()
        ),
        ("40|alice", "20", "/deny ab12cd")
    );
    // Both presses were acknowledged (Discord shows "interaction failed" otherwise).
    h.fake
        .wait_request(|r| (r.iter().filter(|x| x.path.ends_with("/callback")).count() >= 2).then_some(()))
        .await?;
    h.stop().await;
    Ok(())
}
