use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_signal::{MAX_MESSAGE_CHARS, SignalChannel, SignalSettings};
use nanobot_testkit::fake_signal::{FakeSignal, RpcFailure, SignalUser, group_id_for};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const BOT: &str = "+15550001000";
const WITHIN: Duration = Duration::from_secs(30);

struct Harness {
    fake: FakeSignal,
    channel: Arc<SignalChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    alice: SignalUser,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        let fake = FakeSignal::start(BOT).await?;
        let alice = SignalUser::new("alice", "+15550002000");
        fake.add_contact(&alice);
        let mut block = json!({"enabled": true, "phoneNumber": BOT, "daemonHost": fake.host(),
            "daemonPort": fake.port(), "dm": {"allowFrom": ["15550002000"]}});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let channel = Arc::new(
            SignalChannel::new(
                SignalSettings::from_block(&block)?,
                fake.attachments_dir(),
                media.path(),
            )
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
            alice,
            media,
            _data: data,
        };
        h.streams(1).await?;
        Ok(h)
    }

    async fn streams(&self, n: u64) -> Result<()> {
        let mut s = self.channel.streams();
        tokio::time::timeout(WITHIN, s.wait_for(|x| *x >= n))
            .await
            .context("no event stream within 30 s")??;
        self.fake.wait_listeners(1).await
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WITHIN, self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    async fn stop(self) {
        self.manager.stop(Duration::from_secs(20)).await;
    }
}

#[tokio::test]
async fn the_owner_is_answered_with_styles_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let eve = SignalUser::new("eve", "+15550003000");
    h.fake.add_contact(&eve);
    h.fake.deliver_direct(&eve, "hello?");
    let pairing = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(pairing[0].recipients, [eve.id()]);
    assert!(pairing[0].message.contains("pairing code"), "{:?}", pairing[0]);

    h.fake.deliver_direct(&h.alice, "hi bot");
    let inbound = h.inbound().await?;
    assert_eq!(inbound.channel, "signal");
    assert_eq!(inbound.chat_id, "+15550002000");
    assert_eq!(inbound.sender_id, format!("+15550002000|{}", h.alice.uuid));
    assert_eq!(
        inbound.content, "hi bot",
        "the stranger's message was never published"
    );
    assert_eq!(inbound.metadata["is_group"], false);
    assert_eq!(inbound.metadata["sender_number"], "+15550002000");
    // "typing…" while the answer is made.
    h.fake.wait_calls("sendTyping", 1, WITHIN).await?;

    h.bus
        .publish_outbound(OutboundMessage::reply(
            "signal",
            "+15550002000",
            "**bold** and *it* `code`",
        ))
        .await?;
    let sent = h.fake.wait_sent(2, WITHIN).await?;
    assert_eq!(sent[1].recipients, ["+15550002000"]);
    assert_eq!(sent[1].message, "bold and it code");
    assert_eq!(sent[1].text_styles, ["0:4:BOLD", "9:2:ITALIC", "12:4:MONOSPACE"]);
    let config = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.method == "updateConfiguration")
        .context("config")?;
    assert_eq!(config.params["typingIndicators"], true);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_follow_their_policy_and_mentions_with_context() -> Result<()> {
    let allowed = group_id_for("friends");
    let h = Harness::start(json!({"group": {"enabled": true, "allowFrom": [allowed.clone()]}})).await?;
    assert_eq!(h.fake.add_group("friends", &[&h.alice]), allowed);
    let other = h.fake.add_group("strangers", &[&h.alice]);
    let me = h.fake.me();
    h.fake.deliver_group(&h.alice, &allowed, "we meet at five", &[]);
    h.fake
        .deliver_group(&h.alice, &other, "\u{FFFC} in the wrong group", &[(&me, 0, 1)]);
    h.fake
        .deliver_group(&h.alice, &allowed, "\u{FFFC} when do we meet?", &[(&me, 0, 1)]);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.chat_id, allowed);
    assert_eq!(inbound.metadata["is_group"], true);
    assert_eq!(inbound.metadata["group_id"], json!(allowed));
    assert_eq!(
        inbound.content,
        "[Recent group messages for context:]\nalice: we meet at five\n---\n[alice]: when do we meet?"
    );
    // A command needs no mention.
    h.fake.deliver_group(&h.alice, &allowed, "/help", &[]);
    assert_eq!(h.inbound().await?.content.lines().last(), Some("[alice]: /help"));
    h.bus
        .publish_outbound(OutboundMessage::reply("signal", allowed.clone(), "at five"))
        .await?;
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].group_ids, std::slice::from_ref(&allowed));
    assert_eq!(sent[0].message, "at five");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn attachments_go_both_ways_and_long_answers_are_split() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.fake
        .deliver_with_attachment(&h.alice, "look", Some("cat.png"), "image/png", b"\x89PNG cat")?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1);
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("signal")), "{saved:?}");
    assert_eq!(std::fs::read(saved)?, b"\x89PNG cat");
    assert_eq!(inbound.content, format!("look\n[image: {}]", saved.display()));

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("report.pdf");
    std::fs::write(&file, b"%PDF report")?;
    let long = "word ".repeat(MAX_MESSAGE_CHARS / 4);
    let mut reply = OutboundMessage::reply("signal", "+15550002000", format!("**{}**", long.trim()));
    reply.media = vec![file.display().to_string()];
    h.channel.send(&reply).await?;
    let sent = h.fake.sent();
    assert!(sent.len() >= 2, "{}", sent.len());
    assert!(
        sent.iter()
            .all(|s| s.message.chars().count() <= MAX_MESSAGE_CHARS)
    );
    assert_eq!(sent[0].attachments.len(), 1, "files go with the first piece");
    assert!(sent[1].attachments.is_empty());
    assert_eq!(sent[0].attachments[0].bytes, b"%PDF report");
    assert_eq!(sent[0].attachments[0].filename.as_deref(), Some("report.pdf"));
    for s in &sent {
        let len16: usize = s.message.encode_utf16().count();
        assert_eq!(
            s.text_styles,
            [format!("0:{len16}:BOLD")],
            "each piece keeps its own bold"
        );
    }
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_daemon_going_away_and_errors() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.fake.restart_events();
    h.streams(2).await?;
    h.fake.deliver_direct(&h.alice, "after the restart");
    assert_eq!(h.inbound().await?.content, "after the restart");

    h.fake.fail_rpc(Some(RpcFailure::Http(503)));
    let err = h
        .channel
        .send(&OutboundMessage::reply("signal", "+15550002000", "x"))
        .await;
    assert!(matches!(err, Err(ChannelError::Transient { .. })), "{err:?}");
    h.fake
        .fail_rpc(Some(RpcFailure::RateLimit { retry_after_secs: 5 }));
    let err = h
        .channel
        .send(&OutboundMessage::reply("signal", "+15550002000", "x"))
        .await;
    assert!(matches!(err, Err(ChannelError::RateLimited { .. })), "{err:?}");
    h.fake.fail_rpc(None);
    // An unregistered number is the user's error: rejected, not retried.
    let err = h
        .channel
        .send(&OutboundMessage::reply("signal", "+15559999999", "x"))
        .await;
    assert!(matches!(err, Err(ChannelError::Rejected { .. })), "{err:?}");
    h.channel
        .send(&OutboundMessage::reply("signal", "+15550002000", "fine again"))
        .await?;
    assert_eq!(h.fake.sent().last().unwrap().message, "fine again");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn no_daemon_is_a_transient_error_naming_how_to_start_it() -> Result<()> {
    let port = nanobot_testkit::peers::free_port()?;
    let block = json!({"phoneNumber": BOT, "daemonHost": "127.0.0.1", "daemonPort": port});
    let media = tempfile::tempdir()?;
    let channel = SignalChannel::new(SignalSettings::from_block(&block)?, media.path(), media.path());
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = tokio::time::timeout(WITHIN, channel.run(bus, CancellationToken::new()))
        .await?
        .unwrap_err();
    assert!(matches!(err, ChannelError::Transient { .. }), "{err:?}");
    let shown = nanobot_testkit::secrets::error_text(&err);
    assert!(
        shown.contains("signal-cli -a +15550001000 daemon --http 127.0.0.1"),
        "{shown}"
    );
    Ok(())
}
