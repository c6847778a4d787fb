//! End to end: Socket Mode events from the fake reach the bus; replies go through the real emulate Web API.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_channels::{Channel, ChannelError, ChannelManager, GroupPolicy, ManagerSettings, PairingStore};
use nanobot_config::{Secret, SlackConfig};
use nanobot_slack::{SlackChannel, SlackSettings};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::{ALICE_TOKEN, APP_TOKEN, BOT_TOKEN, Call, GENERAL, SlackFake};

struct Harness {
    slack: SlackFake,
    channel: Arc<SlackChannel>,
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    media: tempfile::TempDir,
    _config_dir: tempfile::TempDir,
    manager: tokio::task::JoinHandle<()>,
    bot: String,
    alice: String,
}

impl Harness {
    async fn start(policy: GroupPolicy, pairing: bool) -> Result<Option<Self>> {
        let Some(slack) = SlackFake::start().await? else {
            return Ok(None);
        };
        let alice = slack.call(ALICE_TOKEN, "auth.test", json!({})).await?["user_id"]
            .as_str()
            .context("alice's id")?
            .to_string();
        let config = SlackConfig {
            app_token: Secret::new(APP_TOKEN),
            bot_token: Secret::new(BOT_TOKEN),
            allow_from: vec![alice.clone()],
            group_policy: policy,
            base_url: Some(slack.api.clone()),
            ..SlackConfig::default()
        };
        let mut settings = SlackSettings::from_config(&config)?;
        settings.socket_connections = 1;
        let media = tempfile::tempdir()?;
        let config_dir = tempfile::tempdir()?;
        let mut channel = SlackChannel::new(settings, media.path())?;
        if pairing {
            channel = channel.with_pairing(Arc::new(PairingStore::in_config_dir(config_dir.path())?));
        }
        let channel = Arc::new(channel);
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(channel.clone());
        let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
        slack.connected().await?;
        let bot = channel.bot_user_id().context("auth.test ran before connecting")?;
        Ok(Some(Self {
            slack,
            channel,
            bus,
            cancel,
            media,
            _config_dir: config_dir,
            manager,
            bot,
            alice,
        }))
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(20), self.bus.consume_inbound())
            .await
            .context("no inbound message within 20 s")?
            .context("bus closed")
    }

    /// Waits until the channel has handled `n` events in total.
    async fn handled(&self, n: u64) -> Result<()> {
        let mut rx = self.channel.handled_events();
        tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|c| *c >= n))
            .await
            .context("the channel did not handle the events within 20 s")??;
        Ok(())
    }

    /// Posts `text` to `channel` as alice in emulate and pushes the matching message event; returns its ts.
    async fn alice_says(&self, channel: &str, channel_type: &str, text: &str) -> Result<String> {
        let posted = self
            .slack
            .call(
                ALICE_TOKEN,
                "chat.postMessage",
                json!({"channel": channel, "text": text}),
            )
            .await?;
        let ts = posted["ts"].as_str().context("ts")?.to_string();
        let envelope = self.slack.push_event(json!({
            "type": "message", "channel": channel, "channel_type": channel_type,
            "user": self.alice, "text": text, "ts": ts, "event_ts": ts,
        }));
        self.slack.acked(&envelope).await?;
        Ok(ts)
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.manager).await;
    }
}

fn posts(calls: &[Call]) -> Vec<Value> {
    calls
        .iter()
        .filter(|c| c.method == "chat.postMessage")
        .map(Call::json)
        .collect()
}

#[tokio::test]
async fn a_mention_in_a_channel_is_answered_in_its_thread_split_at_the_limit() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Mention, false).await? else {
        return Ok(());
    };
    let ts = h
        .alice_says(GENERAL, "channel", &format!("<@{}> summarise 1 &lt; 2", h.bot))
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.channel, "slack");
    assert_eq!(inbound.sender_id, h.alice);
    assert_eq!(inbound.chat_id, GENERAL);
    assert_eq!(
        inbound.content, "summarise 1 < 2",
        "mention removed, escapes undone"
    );
    assert_eq!(
        inbound.session_key(),
        format!("slack:{GENERAL}:{ts}"),
        "one session per thread"
    );
    assert_eq!(inbound.metadata["thread_ts"], ts.as_str());
    assert_eq!(inbound.metadata["message_ts"], ts.as_str());

    // The received reaction is on the user's message.
    let reactions = h
        .slack
        .call(
            BOT_TOKEN,
            "reactions.get",
            json!({"channel": GENERAL, "timestamp": ts}),
        )
        .await?;
    let names: Vec<&str> = reactions["message"]["reactions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["eyes"], "{reactions}");

    // A reply longer than one Slack message: **bold** becomes mrkdwn, two posts, both in the thread.
    let filler: Vec<String> = (0..8000).map(|i| format!("w{i:04}")).collect();
    let body = format!("**Summary** of the thread: {}", filler.join(" "));
    let mut reply = OutboundMessage::reply("slack", GENERAL, body);
    reply.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(reply).await?;
    h.slack
        .wait_calls(|calls| {
            calls
                .iter()
                .any(|c| c.method == "reactions.add" && c.json()["name"] == "white_check_mark")
                .then_some(())
        })
        .await?;
    let sent = posts(&h.slack.calls());
    assert_eq!(sent.len(), 2, "8000 words (≈48,000 characters) make two messages");
    for p in &sent {
        assert_eq!(p["thread_ts"], ts.as_str());
        assert!(p["text"].as_str().unwrap_or_default().chars().count() <= 39_000);
    }
    let replies = h
        .slack
        .call(
            BOT_TOKEN,
            "conversations.replies",
            json!({"channel": GENERAL, "ts": ts}),
        )
        .await?;
    let texts: Vec<&str> = replies["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["ts"] != ts.as_str())
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert_eq!(texts.len(), 2, "both pieces are in the thread: {replies}");
    assert!(
        texts[0].starts_with("*Summary* of the thread: w0000 w0001"),
        "{}",
        &texts[0][..40]
    );
    assert!(texts[1].ends_with("w7999"));

    // Done: the working reaction is replaced.
    let reactions = h
        .slack
        .call(
            BOT_TOKEN,
            "reactions.get",
            json!({"channel": GENERAL, "timestamp": ts}),
        )
        .await?;
    let names: Vec<&str> = reactions["message"]["reactions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["white_check_mark"], "{reactions}");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_a_mention_channel_messages_are_ignored_but_dms_are_served() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Mention, false).await? else {
        return Ok(());
    };
    h.alice_says(GENERAL, "channel", "just chatting, no bot here")
        .await?;
    h.handled(1).await?;
    assert_eq!(h.bus.inbound_len(), 0, "no mention, no answer");

    // A direct message (no mention needed), answered inline (no thread).
    let dm = h
        .slack
        .call(ALICE_TOKEN, "conversations.open", json!({"users": h.bot}))
        .await?;
    let dm_channel = dm["channel"]["id"].as_str().context("dm id")?.to_string();
    h.alice_says(&dm_channel, "im", "hello in private").await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "hello in private");
    assert_eq!(inbound.session_key(), format!("slack:{dm_channel}"));
    assert!(inbound.metadata.get("thread_ts").is_none());
    let mut reply = OutboundMessage::reply("slack", dm_channel.clone(), "Hi _there_");
    reply.metadata = inbound.metadata.clone();
    h.channel.send(&reply).await?;
    let sent = posts(&h.slack.calls());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["channel"], dm_channel.as_str());
    assert!(sent[0].get("thread_ts").is_none());
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_mention_sent_as_message_and_app_mention_is_served_once() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Mention, false).await? else {
        return Ok(());
    };
    let text = format!("<@{}> once please", h.bot);
    let ts = h.alice_says(GENERAL, "channel", &text).await?;
    let twin = h.slack.push_event(json!({
        "type": "app_mention", "channel": GENERAL, "user": h.alice, "text": text, "ts": ts, "event_ts": ts,
    }));
    h.slack.acked(&twin).await?;
    h.handled(2).await?;
    assert_eq!(h.bus.inbound_len(), 1, "the twin event is dropped");
    assert_eq!(h.inbound().await?.content, "once please");

    // An app that subscribes to app_mention only is served too.
    let envelope = h.slack.push_event(json!({
        "type": "app_mention", "channel": GENERAL, "user": h.alice,
        "text": format!("<@{}> second", h.bot), "ts": "1795331600.000100",
    }));
    h.slack.acked(&envelope).await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "second");
    assert_eq!(inbound.metadata["thread_ts"], "1795331600.000100");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn addressed_inside_an_existing_thread_the_model_gets_its_earlier_messages() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Mention, false).await? else {
        return Ok(());
    };
    let root = h.alice_says(GENERAL, "channel", "Planning the offsite").await?;
    h.slack
        .call(
            ALICE_TOKEN,
            "chat.postMessage",
            json!({"channel": GENERAL, "text": "I suggest Lisbon &amp; Porto", "thread_ts": root}),
        )
        .await?;
    let text = format!("<@{}> what do you think?", h.bot);
    let posted = h
        .slack
        .call(
            ALICE_TOKEN,
            "chat.postMessage",
            json!({"channel": GENERAL, "text": text, "thread_ts": root}),
        )
        .await?;
    let ts = posted["ts"].as_str().context("ts")?.to_string();
    let envelope = h.slack.push_event(json!({
        "type": "message", "channel": GENERAL, "channel_type": "channel", "user": h.alice,
        "text": text, "ts": ts, "thread_ts": root,
    }));
    h.slack.acked(&envelope).await?;
    let inbound = h.inbound().await?;
    let alice = &h.alice;
    assert_eq!(
        inbound.content,
        format!(
            "[Earlier messages in this thread]\n<@{alice}>: Planning the offsite\n<@{alice}>: I suggest Lisbon & Porto\n\
             [End of thread context]\n\nwhat do you think?"
        )
    );
    assert_eq!(inbound.session_key(), format!("slack:{GENERAL}:{root}"));

    // The next message in the same thread carries no context again (the session has it).
    let next = h.slack.push_event(json!({
        "type": "message", "channel": GENERAL, "channel_type": "channel", "user": h.alice,
        "text": format!("<@{}> and the dates?", h.bot), "ts": "1795339999.000001", "thread_ts": root,
    }));
    h.slack.acked(&next).await?;
    assert_eq!(h.inbound().await?.content, "and the dates?");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_stranger_is_not_served_and_gets_a_pairing_code_in_dms() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Open, true).await? else {
        return Ok(());
    };
    let eve = h.slack.call("xoxp-eve", "auth.test", json!({})).await?["user_id"]
        .as_str()
        .context("eve's id")?
        .to_string();
    let channel_event = h.slack.push_event(json!({
        "type": "message", "channel": GENERAL, "channel_type": "channel", "user": eve,
        "text": format!("<@{}> hi", h.bot), "ts": "1795331400.000100",
    }));
    h.slack.acked(&channel_event).await?;
    let dm_event = h.slack.push_event(json!({
        "type": "message", "channel": "D0EVE", "channel_type": "im", "user": eve,
        "text": "let me in", "ts": "1795331401.000100",
    }));
    h.slack.acked(&dm_event).await?;
    h.handled(2).await?;
    assert_eq!(h.bus.inbound_len(), 0, "a stranger never reaches the agent");
    let calls = h.slack.calls();
    let sent = posts(&calls);
    assert_eq!(sent.len(), 1, "only the pairing code is sent: {sent:?}");
    assert_eq!(sent[0]["channel"], "D0EVE");
    assert!(
        sent[0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("pairing code")
    );
    assert!(
        calls.iter().all(|c| c.method != "reactions.add"),
        "no reaction for strangers"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_are_downloaded_with_the_bot_token_and_uploaded_into_the_thread() -> Result<()> {
    let Some(h) = Harness::start(GroupPolicy::Open, false).await? else {
        return Ok(());
    };
    let url = h.slack.private_file_url("F0001/notes.txt");
    let envelope = h.slack.push_event(json!({
        "type": "message", "subtype": "file_share", "channel": GENERAL, "channel_type": "channel",
        "user": h.alice, "text": "see attached", "ts": "1795331500.000100",
        "files": [{"id": "F0001", "name": "../notes.txt", "mimetype": "text/plain",
                   "url_private": url, "url_private_download": url}],
    }));
    h.slack.acked(&envelope).await?;
    let inbound = h.inbound().await?;
    assert!(
        inbound.content.starts_with("see attached\n[file: "),
        "{}",
        inbound.content
    );
    assert_eq!(inbound.media.len(), 1);
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(h.media.path().join("slack")), "{saved:?}");
    assert_eq!(std::fs::read_to_string(saved)?, "shared file body");

    let file = h.media.path().join("chart.txt");
    std::fs::write(&file, "1,2,3")?;
    let mut reply = OutboundMessage::reply("slack", GENERAL, "Here is the chart.");
    reply.metadata = inbound.metadata.clone();
    reply.media = vec![file.display().to_string()];
    h.channel.send(&reply).await?;
    let calls = h.slack.calls();
    let complete = calls
        .iter()
        .find(|c| c.method == "files.completeUploadExternal")
        .context("completeUploadExternal was not called")?
        .json();
    assert_eq!(complete["channel_id"], GENERAL);
    assert_eq!(complete["thread_ts"], "1795331500.000100");
    assert_eq!(complete["files"][0]["title"], "chart.txt");
    let files = h.slack.call(BOT_TOKEN, "files.list", json!({})).await?;
    assert!(
        files["files"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["name"] == "chart.txt"),
        "emulate has the uploaded file: {files}"
    );
    assert!(
        posts(&calls).iter().all(|p| !p["text"]
            .as_str()
            .unwrap_or_default()
            .contains("could not upload")),
        "the upload succeeded"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_wrong_app_token_is_an_auth_error() -> Result<()> {
    let Some(slack) = SlackFake::start().await? else {
        return Ok(());
    };
    let config = SlackConfig {
        app_token: Secret::new("xapp-wrong"),
        bot_token: Secret::new(BOT_TOKEN),
        allow_from: vec!["*".into()],
        base_url: Some(slack.api.clone()),
        ..SlackConfig::default()
    };
    let media = tempfile::tempdir()?;
    let channel = SlackChannel::new(SlackSettings::from_config(&config)?, media.path())?;
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert!(!err.is_retryable());
    Ok(())
}

/// Needs no peer: the Socket Mode fake plus a front server answering the Web API locally.
#[tokio::test]
async fn socket_mode_envelopes_are_acked_and_only_allowed_users_are_served() -> Result<()> {
    let slack = SlackFake::start_hermetic().await?;
    let config = SlackConfig {
        app_token: Secret::new(APP_TOKEN),
        bot_token: Secret::new(BOT_TOKEN),
        allow_from: vec!["U0ALICE".into()],
        base_url: Some(slack.api.clone()),
        ..SlackConfig::default()
    };
    let mut settings = SlackSettings::from_config(&config)?;
    settings.socket_connections = 1;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(SlackChannel::new(settings, media.path())?);
    let bus = Arc::new(InProcessBus::new(16));
    let cancel = CancellationToken::new();
    let mut manager = ChannelManager::new(ManagerSettings::default());
    manager.add(channel.clone());
    let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
    slack.connected().await?;
    assert_eq!(channel.bot_user_id().as_deref(), Some("UBOT"));

    let stranger = slack.push_event(json!({
        "type": "message", "channel": "D0EVE", "channel_type": "im", "user": "U0EVE",
        "text": "hi", "ts": "1795330001.000001",
    }));
    let allowed = slack.push_event(json!({
        "type": "message", "channel": "D0ALICE", "channel_type": "im", "user": "U0ALICE",
        "text": "hello &amp; welcome", "ts": "1795330002.000001",
    }));
    slack.acked(&stranger).await?;
    slack.acked(&allowed).await?;
    let inbound = tokio::time::timeout(Duration::from_secs(20), bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(
        (
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str(),
            inbound.content.as_str()
        ),
        ("U0ALICE", "D0ALICE", "hello & welcome")
    );
    let mut handled = channel.handled_events();
    tokio::time::timeout(Duration::from_secs(20), handled.wait_for(|n| *n >= 2)).await??;
    assert_eq!(bus.inbound_len(), 0, "the stranger's message was dropped");

    let mut reply = OutboundMessage::reply("slack", "D0ALICE", "**ok**");
    reply.metadata = inbound.metadata.clone();
    bus.publish_outbound(reply).await?;
    let post = slack.wait_calls(|calls| posts(calls).into_iter().next()).await?;
    assert_eq!(post["channel"], "D0ALICE");
    assert_eq!(post["text"], "*ok*");
    assert!(posts(&slack.calls()).iter().all(|p| p["channel"] != "D0EVE"));
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), manager).await;
    Ok(())
}

/// The error and its sources, as a log line shows them.
fn chain(err: &ChannelError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// A channel on `slack`'s front server whose Web API calls are bounded by `timeout`.
fn bounded_channel(slack: &SlackFake, timeout: Duration) -> Result<(SlackChannel, tempfile::TempDir)> {
    let config = SlackConfig {
        app_token: Secret::new(APP_TOKEN),
        bot_token: Secret::new(BOT_TOKEN),
        allow_from: vec!["*".into()],
        base_url: Some(slack.api.clone()),
        ..SlackConfig::default()
    };
    let mut settings = SlackSettings::from_config(&config)?;
    settings.socket_connections = 1;
    let media = tempfile::tempdir()?;
    let channel = SlackChannel::new(settings, media.path())?.with_api_timeout(timeout);
    Ok((channel, media))
}

/// Against the emulator: a `chat.postMessage` that is never answered fails within the bound with a retryable
/// error naming the method; once the peer answers again, the same channel posts.
#[tokio::test]
async fn a_stalled_web_api_call_fails_within_its_bound_and_the_channel_recovers() -> Result<()> {
    let Some(slack) = SlackFake::start().await? else {
        return Ok(());
    };
    let (channel, _media) = bounded_channel(&slack, Duration::from_secs(3))?;
    slack.stall("chat.postMessage");
    let reply = OutboundMessage::reply("slack", GENERAL, "are you there?");
    let err = channel.send(&reply).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let text = chain(&err);
    assert!(text.contains("chat.postMessage") && text.contains("3s"), "{text}");
    assert!(!text.contains(BOT_TOKEN), "{text}");
    assert_eq!(posts(&slack.calls()).len(), 1, "the call reached the peer");

    slack.unstall("chat.postMessage");
    channel
        .send(&OutboundMessage::reply("slack", GENERAL, "back again"))
        .await?;
    let history = slack
        .call(ALICE_TOKEN, "conversations.history", json!({"channel": GENERAL}))
        .await?;
    let texts: Vec<&str> = history["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert!(texts.contains(&"back again"), "{texts:?}");
    assert!(!texts.contains(&"are you there?"), "{texts:?}");
    Ok(())
}

/// Against the emulator: a stalled `auth.test` at start-up ends `run` with a retryable error instead of waiting.
#[tokio::test]
async fn a_stalled_auth_test_ends_run_within_its_bound() -> Result<()> {
    let Some(slack) = SlackFake::start().await? else {
        return Ok(());
    };
    let (channel, _media) = bounded_channel(&slack, Duration::from_millis(300))?;
    slack.stall("auth.test");
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(chain(&err).contains("auth.test"), "{err:?}");
    Ok(())
}

/// Needs no peer: a Socket Mode server that accepts the connection but never says `hello` ends `run` with a
/// retryable error within the bound (and a stalled `apps.connections.open` likewise).
#[tokio::test]
async fn a_silent_socket_mode_server_ends_run_within_its_bound() -> Result<()> {
    let slack = SlackFake::start_hermetic().await?;
    let (channel, _media) = bounded_channel(&slack, Duration::from_secs(1))?;
    slack.silence_socket();
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = channel
        .run(bus.clone(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(chain(&err).contains("hello"), "{err:?}");

    slack.stall("apps.connections.open");
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(chain(&err).contains("apps.connections.open"), "{err:?}");
    Ok(())
}

/// Needs no peer: a Socket Mode server that accepts the TCP connection but never answers the WebSocket upgrade
/// ends `run` with a retryable error naming the handshake.
#[tokio::test]
async fn a_hung_websocket_handshake_ends_run_within_its_bound() -> Result<()> {
    let slack = SlackFake::start_hermetic().await?;
    let (channel, _media) = bounded_channel(&slack, Duration::from_millis(500))?;
    slack.hang_handshakes();
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(chain(&err).contains("WebSocket handshake"), "{}", chain(&err));
    Ok(())
}

/// Needs no peer: a connection that goes quiet after its `hello` (no pong to the pings, the TCP connection
/// still open) is given up with a retryable error, so the manager reconnects; a `disconnect` envelope (Slack's
/// refresh) opens a new connection first, and events on it are served.
#[tokio::test]
async fn a_refresh_reconnects_and_a_dead_connection_is_given_up() -> Result<()> {
    let slack = SlackFake::start_hermetic().await?;
    let (channel, _media) = bounded_channel(&slack, Duration::from_millis(500))?;
    let channel = Arc::new(channel);
    let bus = Arc::new(InProcessBus::new(16));
    let run = tokio::spawn({
        let (channel, bus) = (Arc::clone(&channel), Arc::clone(&bus));
        async move { channel.run(bus as Arc<dyn Bus>, CancellationToken::new()).await }
    });
    slack.hellos(1).await?;
    slack.request_refresh();
    slack.hellos(2).await?;
    let id = slack.push_event(json!({
        "type": "message", "channel": "D0ALICE", "channel_type": "im", "user": "U0ALICE",
        "text": "after the refresh", "ts": "1795330003.000001",
    }));
    slack.acked(&id).await?;
    let inbound = tokio::time::timeout(Duration::from_secs(20), bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(inbound.content, "after the refresh");

    slack.freeze_sockets();
    let err = tokio::time::timeout(Duration::from_secs(20), run)
        .await??
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let text = chain(&err);
    assert!(
        text.contains("connection lost") && text.contains("not even a pong"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn an_approval_request_has_buttons_and_a_press_answers_it_in_its_thread() -> Result<()> {
    let slack = SlackFake::start_hermetic().await?;
    let config = SlackConfig {
        app_token: Secret::new(APP_TOKEN),
        bot_token: Secret::new(BOT_TOKEN),
        allow_from: vec!["U0ALICE".into()],
        base_url: Some(slack.api.clone()),
        ..SlackConfig::default()
    };
    let mut settings = SlackSettings::from_config(&config)?;
    settings.socket_connections = 1;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(SlackChannel::new(settings, media.path())?);
    let bus = Arc::new(InProcessBus::new(16));
    let cancel = CancellationToken::new();
    let mut manager = ChannelManager::new(ManagerSettings::default());
    manager.add(channel.clone());
    let manager = tokio::spawn(manager.run(bus.clone() as Arc<dyn Bus>, cancel.clone()));
    slack.connected().await?;

    let mut question = OutboundMessage::reply("slack", "C000000001", "🔐 Approval needed: `rm x`");
    question
        .metadata
        .insert("thread_ts".into(), json!("1795330000.000001"));
    question.metadata.insert(
        "_approval".into(),
        json!({"id": "ab12cd", "approve": "/approve ab12cd", "deny": "/deny ab12cd"}),
    );
    bus.publish_outbound(question).await?;
    let post = slack.wait_calls(|calls| posts(calls).into_iter().next()).await?;
    assert_eq!(post["thread_ts"], "1795330000.000001", "{post}");
    let blocks: serde_json::Value = match &post["blocks"] {
        serde_json::Value::String(s) => serde_json::from_str(s)?,
        other => other.clone(),
    };
    let buttons = &blocks[1]["elements"];
    assert_eq!(buttons[0]["value"], "/approve ab12cd", "{blocks}");
    assert_eq!(buttons[1]["value"], "/deny ab12cd", "{blocks}");

    let stranger = slack.push_press(
        "U0EVE",
        "C000000001",
        Some("1795330000.000001"),
        "/approve ab12cd",
    );
    let alice = slack.push_press("U0ALICE", "C000000001", Some("1795330000.000001"), "/deny ab12cd");
    slack.acked(&stranger).await?;
    slack.acked(&alice).await?;
    let inbound = tokio::time::timeout(Duration::from_secs(20), bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.content.as_str()),
        ("U0ALICE", "/deny ab12cd")
    );
    assert_eq!(
        inbound.session_key(),
        "slack:C000000001:1795330000.000001",
        "the answer reaches the session of the thread the question was asked in"
    );
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), manager).await;
    Ok(())
}
