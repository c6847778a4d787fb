use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_matrix::{MAX_MESSAGE_CHARS, MatrixChannel, MatrixSettings};
use nanobot_testkit::peers;
use nanobot_testkit::synapse::{self, MatrixUser, Synapse};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::relay::Relay;

const WITHIN: Duration = Duration::from_secs(60);

/// A 1x1 RGBA PNG.
const PNG: [u8; 70] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00,
    0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05,
    0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42,
    0x60, 0x82,
];

/// The shared synapse, or `None` (skipped) when it is not installed and CI is not set.
async fn homeserver() -> Option<&'static Synapse> {
    peers::require("matrix-synapse (.ci/.peers/synapse-venv)", synapse::python())?;
    Some(Synapse::shared().await.expect("starting synapse"))
}

struct Harness {
    hs: &'static Synapse,
    channel: Arc<MatrixChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    bot: MatrixUser,
    alice: MatrixUser,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

fn block(bot: &MatrixUser, alice: &MatrixUser, homeserver: &str, extra: &Value) -> Value {
    let mut block = json!({"enabled": true, "homeserver": homeserver, "userId": bot.user_id,
        "password": bot.password, "allowFrom": [alice.user_id], "e2eeEnabled": false});
    if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    block
}

impl Harness {
    async fn start(hs: &'static Synapse, extra: Value) -> Result<Self> {
        Self::start_at(hs, None, extra).await
    }

    /// The bot on `homeserver` (the synapse itself unless given), allowing Alice, under the channel manager.
    async fn start_at(hs: &'static Synapse, homeserver: Option<String>, extra: Value) -> Result<Self> {
        let bot = hs.fresh_user("bot").await?;
        let alice = hs.fresh_user("alice").await?;
        Self::start_as(hs, bot, alice, homeserver, extra).await
    }

    /// The channel for `bot`, allowing `alice`.
    async fn start_as(
        hs: &'static Synapse,
        bot: MatrixUser,
        alice: MatrixUser,
        homeserver: Option<String>,
        extra: Value,
    ) -> Result<Self> {
        let url = homeserver.unwrap_or_else(|| hs.url());
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let settings = MatrixSettings::from_block(&block(&bot, &alice, &url, &extra))?;
        let channel = Arc::new(MatrixChannel::new(settings, data.path(), media.path()).with_pairing(pairing));
        let bus = Arc::new(InProcessBus::new(64));
        let mut manager = ChannelManager::new(ManagerSettings {
            supervisor: SupervisorSettings::quick(),
            ..ManagerSettings::default()
        });
        manager.add(channel.clone());
        let manager = manager.spawn(bus.clone());
        let h = Self {
            hs,
            channel,
            bus,
            manager,
            bot,
            alice,
            media,
            _data: data,
        };
        h.synced(1).await?;
        Ok(h)
    }

    /// Waits until the channel finished `n` syncs.
    async fn synced(&self, n: u64) -> Result<()> {
        let mut s = self.channel.syncs();
        tokio::time::timeout(WITHIN, s.wait_for(|x| *x >= n))
            .await
            .context("the channel did not sync in time")??;
        Ok(())
    }

    /// A direct chat `user` opens with the bot, once the bot is in it.
    async fn dm(&self, user: &MatrixUser) -> Result<String> {
        let room = self
            .hs
            .create_room(&user.access_token, "dm", &[self.bot.user_id.as_str()], true)
            .await?;
        self.hs
            .wait_joined(&user.access_token, &room, &self.bot.user_id, WITHIN)
            .await?;
        Ok(room)
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WITHIN, self.bus.consume_inbound())
            .await
            .context("no inbound message in time")?
            .context("bus closed")
    }

    fn sent_by_bot(&self) -> impl Fn(&Value) -> bool + use<> {
        let bot = self.bot.user_id.clone();
        move |e: &Value| e["sender"] == bot.as_str() && e["type"] == "m.room.message"
    }

    async fn stop(self) {
        self.manager.stop(Duration::from_secs(20)).await;
    }
}

fn mentioning(body: &str, user: &str) -> Value {
    json!({"msgtype": "m.text", "body": body, "m.mentions": {"user_ids": [user]}})
}

#[tokio::test]
async fn an_owner_is_answered_in_a_direct_chat_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let h = Harness::start(hs, json!({})).await?;
    let alice = h.alice.access_token.clone();
    // The password login saved its session where 0.3.5 keeps it, in 0.3.5's format.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(h.channel.session_file())?)?;
    assert!(
        saved["access_token"].as_str().is_some_and(|t| !t.is_empty()),
        "{saved}"
    );
    assert!(
        saved["device_id"].as_str().is_some_and(|d| !d.is_empty()),
        "{saved}"
    );

    let room = h.dm(&h.alice).await?;
    let mut seen = hs.timeline(&alice).await?;
    let mut since = hs.sync_token(&alice).await?;
    hs.send_text(&alice, &room, "hi bot").await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.channel, "matrix");
    assert_eq!(inbound.chat_id, room);
    assert_eq!(inbound.sender_id, h.alice.user_id);
    assert_eq!(inbound.content, "hi bot");
    assert_eq!(inbound.metadata["is_group"], false);
    assert_eq!(inbound.metadata["room"], "dm");
    assert!(
        inbound.metadata["event_id"]
            .as_str()
            .is_some_and(|e| e.starts_with('$'))
    );
    assert!(!inbound.wants_stream);
    // "typing…" shows while the answer is made.
    let bot = h.bot.user_id.clone();
    let typing_is = |on: bool| {
        let (bot, room) = (bot.clone(), room.clone());
        move |r: &Value| {
            r["rooms"]["join"][&room]["ephemeral"]["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "m.typing")
                .any(|e| {
                    let users = e["content"]["user_ids"].as_array().cloned().unwrap_or_default();
                    users.iter().any(|u| u == bot.as_str()) == on
                })
                .then_some(())
        }
    };
    hs.wait_sync(&alice, &mut since, WITHIN, typing_is(true)).await?;

    h.bus
        .publish_outbound(OutboundMessage::reply(
            "matrix",
            &room,
            "**Done**, see [the site](https://example.org)",
        ))
        .await?;
    let answer = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    let content = &answer["content"];
    assert_eq!(content["body"], "**Done**, see [the site](https://example.org)");
    assert_eq!(content["format"], "org.matrix.custom.html");
    assert_eq!(
        content["formatted_body"],
        "<p><strong>Done</strong>, see <a href=\"https://example.org\">the site</a></p>"
    );
    assert_eq!(content["m.mentions"], json!({}));
    assert!(
        content.get("m.relates_to").is_none(),
        "a plain answer is no reply (as 0.3.5)"
    );
    // The answer ends "typing…".
    hs.wait_sync(&alice, &mut since, WITHIN, typing_is(false)).await?;

    // A stranger: the bot joins the direct chat they invite it to, to hand out a pairing code.
    let eve = hs.fresh_user("eve").await?;
    let eve_room = h.dm(&eve).await?;
    let mut eve_seen = hs.timeline(&eve.access_token).await?;
    hs.send_text(&eve.access_token, &eve_room, "let me in").await?;
    let code = hs
        .wait_event(
            &eve.access_token,
            &mut eve_seen,
            &eve_room,
            WITHIN,
            h.sent_by_bot(),
        )
        .await?;
    assert!(
        code["content"]["body"]
            .as_str()
            .unwrap_or_default()
            .contains("pairing code"),
        "{code}"
    );
    // A stranger's "direct" chat that is a room (three members) is left at once.
    let carol = hs.fresh_user("carol").await?;
    let crowded = hs
        .create_room(&eve.access_token, "dm", &[carol.user_id.as_str()], true)
        .await?;
    hs.join(&carol.access_token, &crowded).await?;
    let mut crowd_seen = hs.timeline(&eve.access_token).await?;
    // Invited as into a direct chat once Carol is in.
    hs.call(
        Method::PUT,
        &[
            "_matrix",
            "client",
            "v3",
            "rooms",
            &crowded,
            "state",
            "m.room.member",
            &bot,
        ],
        &[],
        Some(&eve.access_token),
        Some(&json!({"membership": "invite", "is_direct": true})),
    )
    .await?;
    let left = hs
        .wait_event(&eve.access_token, &mut crowd_seen, &crowded, WITHIN, |e| {
            e["type"] == "m.room.member"
                && e["state_key"] == bot.as_str()
                && e["content"]["membership"] == "leave"
        })
        .await?;
    assert_eq!(left["sender"], bot.as_str(), "the bot left by itself");
    // A stranger's invite to a room that is not a direct chat is not taken; Alice's later one is.
    let eves_group = hs
        .create_room(&eve.access_token, "eve's group", &[h.bot.user_id.as_str()], false)
        .await?;
    let later = hs
        .create_room(&alice, "alice's group", &[h.bot.user_id.as_str()], false)
        .await?;
    hs.wait_joined(&alice, &later, &h.bot.user_id, WITHIN).await?;
    assert_eq!(
        hs.membership(&eve.access_token, &eves_group, &h.bot.user_id)
            .await?
            .as_deref(),
        Some("invite")
    );
    // Eve's message never reached the bus: the next message there is Alice's.
    hs.send_text(&alice, &room, "second").await?;
    assert_eq!(h.inbound().await?.content, "second");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn rooms_follow_the_group_policy_and_threads_are_answered_in_the_thread() -> Result<()> {
    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let h = Harness::start(hs, json!({"groupPolicy": "mention"})).await?;
    let (alice, bot) = (h.alice.access_token.clone(), h.bot.user_id.clone());
    let carol = hs.fresh_user("carol").await?;
    let room = hs
        .create_room(&alice, "team", &[bot.as_str(), carol.user_id.as_str()], false)
        .await?;
    hs.join(&carol.access_token, &room).await?;
    hs.wait_joined(&alice, &room, &bot, WITHIN).await?;
    let mut seen = hs.timeline(&alice).await?;

    // Three members: a room, where only mentions are taken, and only from allowed senders.
    hs.send_text(&alice, &room, "no mention here").await?;
    hs.send_event(
        &carol.access_token,
        &room,
        "m.room.message",
        &mentioning("carol asks", &bot),
    )
    .await?;
    let root = hs
        .send_event(
            &alice,
            &room,
            "m.room.message",
            &mentioning("bot: hello team", &bot),
        )
        .await?;
    let inbound = h.inbound().await?;
    assert_eq!(
        inbound.content, "bot: hello team",
        "the mention stays in the text, as 0.3.5"
    );
    assert_eq!(inbound.metadata["is_group"], true);
    assert_eq!(inbound.metadata["room"], "team");
    assert_eq!(inbound.session_key(), format!("matrix:{room}"));

    // A message in a thread: its own session, and the answer goes into the thread.
    let mut threaded = mentioning("in the thread", &bot);
    threaded["m.relates_to"] = json!({"rel_type": "m.thread", "event_id": root});
    let reply_to = hs.send_event(&alice, &room, "m.room.message", &threaded).await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "in the thread");
    assert_eq!(inbound.session_key(), format!("matrix:{room}:thread:{root}"));
    assert_eq!(inbound.metadata["thread_root_event_id"], root.as_str());
    assert_eq!(inbound.metadata["thread_reply_to_event_id"], reply_to.as_str());
    let mut answer = OutboundMessage::reply("matrix", &room, "threaded answer");
    answer.metadata = inbound.metadata.clone();
    h.bus.publish_outbound(answer).await?;
    let sent = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    assert_eq!(sent["content"]["body"], "threaded answer");
    assert_eq!(
        sent["content"]["m.relates_to"],
        json!({"rel_type": "m.thread", "event_id": root, "m.in_reply_to": {"event_id": reply_to},
            "is_falling_back": true})
    );
    h.stop().await;

    // `allowlist`: only the rooms of groupAllowFrom, with or without mentions (the bot joins both at its start).
    let (bot, alice) = (hs.fresh_user("bot").await?, hs.fresh_user("alice").await?);
    let third = hs.fresh_user("third").await?;
    let members = [bot.user_id.as_str(), third.user_id.as_str()];
    let listed = hs
        .create_room(&alice.access_token, "listed", &members, false)
        .await?;
    let other = hs
        .create_room(&alice.access_token, "other", &members, false)
        .await?;
    for room in [&listed, &other] {
        hs.join(&third.access_token, room).await?;
    }
    let extra = json!({"groupPolicy": "allowlist", "groupAllowFrom": [listed]});
    let h = Harness::start_as(hs, bot, alice, None, extra).await?;
    let (alice, bot) = (h.alice.access_token.clone(), h.bot.user_id.clone());
    for room in [&listed, &other] {
        hs.wait_joined(&alice, room, &bot, WITHIN).await?;
    }
    hs.send_event(&alice, &other, "m.room.message", &mentioning("not listed", &bot))
        .await?;
    hs.send_text(&alice, &listed, "listed, no mention").await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "listed, no mention");
    assert_eq!(inbound.chat_id, listed);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn media_goes_both_ways_long_answers_are_split_and_streams_are_edits() -> Result<()> {
    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let h = Harness::start(hs, json!({"streaming": true, "maxMediaBytes": 1_000_000})).await?;
    let alice = h.alice.access_token.clone();
    let room = h.dm(&h.alice).await?;
    let mut seen = hs.timeline(&alice).await?;

    // An image in: saved under <media>/matrix/ with the bytes sent.
    let mxc = hs.upload(&alice, PNG.to_vec(), "image/png", "pixel.png").await?;
    let image = json!({"msgtype": "m.image", "body": "pixel.png", "url": mxc,
        "info": {"mimetype": "image/png", "size": PNG.len()}});
    hs.send_event(&alice, &room, "m.room.message", &image).await?;
    let inbound = h.inbound().await?;
    assert!(inbound.wants_stream, "streaming is asked for");
    assert_eq!(inbound.media.len(), 1, "{inbound:?}");
    let path = std::path::PathBuf::from(&inbound.media[0]);
    assert!(path.starts_with(h.media.path().join("matrix")), "{path:?}");
    assert!(path.to_string_lossy().ends_with("_pixel.png"), "{path:?}");
    assert_eq!(std::fs::read(&path)?, PNG);
    assert_eq!(
        inbound.content,
        format!("pixel.png\n[attachment: {}]", path.display())
    );
    assert_eq!(inbound.metadata["attachments"][0]["type"], "image");
    assert_eq!(inbound.metadata["attachments"][0]["size_bytes"], PNG.len());
    // A file said to be over the limit is not fetched.
    let big = json!({"msgtype": "m.file", "body": "big.bin", "url": mxc,
        "info": {"mimetype": "application/octet-stream", "size": 5_000_000}});
    hs.send_event(&alice, &room, "m.room.message", &big).await?;
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "big.bin\n[attachment: big.bin - too large]");
    assert!(inbound.media.is_empty());

    // A file out: uploaded, sent before the text.
    let out = h.media.path().join("chart.png");
    std::fs::write(&out, PNG)?;
    let mut reply = OutboundMessage::reply("matrix", &room, "here it is");
    reply.media = vec![out.display().to_string(), "/nonexistent/gone.pdf".into()];
    h.bus.publish_outbound(reply).await?;
    let file = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    let content = &file["content"];
    assert_eq!(content["msgtype"], "m.image");
    assert_eq!(content["body"], "chart.png");
    assert_eq!(
        content["info"],
        json!({"mimetype": "image/png", "size": PNG.len()})
    );
    assert_eq!(hs.download(&alice, content["url"].as_str().unwrap()).await?, PNG);
    let text = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    assert_eq!(
        text["content"]["body"],
        "here it is\n[attachment: gone.pdf - upload failed]"
    );

    // A long answer: split below the limit, nothing lost.
    let words: Vec<String> = (0..4000).map(|i| format!("w{i}")).collect();
    h.bus
        .publish_outbound(OutboundMessage::reply("matrix", &room, words.join(" ")))
        .await?;
    let mut got: Vec<String> = Vec::new();
    while got.len() < words.len() {
        let piece = hs
            .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
            .await?;
        let body = piece["content"]["body"].as_str().unwrap_or_default().to_owned();
        assert!(body.chars().count() <= MAX_MESSAGE_CHARS, "{} chars", body.len());
        got.extend(body.split_whitespace().map(str::to_owned));
    }
    assert_eq!(got, words);

    // A streamed answer: one message, then edits; the end has the whole text, with its HTML.
    for delta in ["Hel", "lo ", "world"] {
        h.bus
            .publish_outbound(OutboundMessage::of_kind(
                OutboundKind::StreamDelta {
                    stream_id: "s1".into(),
                },
                "matrix",
                &room,
                delta,
            ))
            .await?;
    }
    h.bus
        .publish_outbound(OutboundMessage::of_kind(
            OutboundKind::StreamEnd {
                stream_id: "s1".into(),
            },
            "matrix",
            &room,
            "Hello world, **all** done",
        ))
        .await?;
    let first = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    assert_eq!(
        first["content"]["body"], "Hel",
        "the first delta starts the message"
    );
    let first_id = first["event_id"].as_str().unwrap().to_owned();
    let last = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, |e| {
            e["content"]["m.new_content"]["body"] == "Hello world, **all** done"
        })
        .await?;
    assert_eq!(
        last["content"]["m.relates_to"],
        json!({"rel_type": "m.replace", "event_id": first_id})
    );
    assert_eq!(
        last["content"]["m.new_content"]["formatted_body"],
        "<p>Hello world, <strong>all</strong> done</p>"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_server_going_away_and_coming_back_loses_nothing() -> Result<()> {
    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let target = hs.url().trim_start_matches("http://").to_owned();
    let relay = Relay::start(target).await?;
    let h = Harness::start_at(hs, Some(relay.url()), json!({})).await?;
    let alice = h.alice.access_token.clone();
    let room = h.dm(&h.alice).await?;
    hs.send_text(&alice, &room, "before").await?;
    assert_eq!(h.inbound().await?.content, "before");

    relay.cut();
    // The sync in flight fails; the manager starts the channel again (and again, while the server is away).
    let mut runs = h.channel.runs();
    tokio::time::timeout(WITHIN, runs.wait_for(|n| *n >= 3))
        .await
        .context("the channel was not restarted")??;
    // More than a sync's timeline holds (synapse gives 10 events a room): the gap is fetched back.
    for i in 0..25 {
        hs.send_text(&alice, &room, &format!("during {i}")).await?;
    }
    relay.restore();
    // Back: the sync goes on from where it was, so every message written meanwhile is answered, in order.
    for i in 0..25 {
        assert_eq!(h.inbound().await?.content, format!("during {i}"));
    }
    h.stop().await;
    Ok(())
}

/// Runs the channel alone until it fails (bounded).
async fn run_error(channel: &MatrixChannel) -> ChannelError {
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    tokio::time::timeout(WITHIN, channel.run(bus, CancellationToken::new()))
        .await
        .expect("the channel gave up in time")
        .expect_err("the channel failed")
}

fn chain(e: &ChannelError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[tokio::test]
async fn bad_credentials_are_one_clear_error_and_a_stale_session_is_replaced() -> Result<()> {
    // Before it has logged in, a send is a transient failure the manager retries, never an authentication error
    // (which would drop the message with a wrong hint).
    let unstarted = MatrixChannel::new(
        MatrixSettings::from_block(
            &json!({"userId": "@b:h", "password": "pw", "homeserver": "http://127.0.0.1:9"}),
        )?,
        std::env::temp_dir(),
        std::env::temp_dir(),
    );
    let e = unstarted
        .send(&OutboundMessage::reply("matrix", "!room:h", "early"))
        .await
        .expect_err("not logged in");
    assert!(e.is_retryable(), "{}", chain(&e));

    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let bot = hs.fresh_user("bot").await?;
    let alice = hs.fresh_user("alice").await?;
    let data = tempfile::tempdir()?;

    // A wrong password: refused, named, never shown.
    let mut wrong = bot.clone();
    wrong.password = "wrong-PASSWORD-4711".into();
    let channel = MatrixChannel::new(
        MatrixSettings::from_block(&block(&wrong, &alice, &hs.url(), &json!({})))?,
        data.path(),
        data.path(),
    );
    let e = run_error(&channel).await;
    let text = chain(&e);
    assert!(matches!(e, ChannelError::Auth { .. }), "{text}");
    assert!(text.contains("channels.matrix.password"), "{text}");
    assert!(!text.contains("wrong-PASSWORD-4711"), "{text}");

    // Someone else's token: a configuration error naming userId.
    let token = json!({"password": "", "accessToken": alice.access_token, "deviceId": alice.device_id});
    let channel = MatrixChannel::new(
        MatrixSettings::from_block(&block(&bot, &alice, &hs.url(), &token))?,
        data.path(),
        data.path(),
    );
    let e = run_error(&channel).await;
    let text = chain(&e);
    assert!(text.contains("channels.matrix.userId"), "{text}");
    assert!(!text.contains(&alice.access_token), "{text}");

    // A token that was logged out: an authentication error.
    let gone = hs.login(&bot.localpart, &bot.password).await?;
    hs.call(
        Method::POST,
        &["_matrix", "client", "v3", "logout"],
        &[],
        Some(&gone.access_token),
        Some(&json!({})),
    )
    .await?;
    let token = json!({"password": "", "accessToken": gone.access_token, "deviceId": gone.device_id});
    let channel = MatrixChannel::new(
        MatrixSettings::from_block(&block(&bot, &alice, &hs.url(), &token))?,
        data.path(),
        data.path(),
    );
    let e = run_error(&channel).await;
    assert!(matches!(e, ChannelError::Auth { .. }), "{}", chain(&e));

    // The saved session of a password login, logged out meanwhile: the bot logs in again and saves the new one.
    let store = data.path().join("matrix-store");
    std::fs::create_dir_all(&store)?;
    let stale = json!({"access_token": gone.access_token, "device_id": gone.device_id});
    std::fs::write(store.join("session.json"), stale.to_string())?;
    let channel = Arc::new(MatrixChannel::new(
        MatrixSettings::from_block(&block(&bot, &alice, &hs.url(), &json!({})))?,
        data.path(),
        data.path(),
    ));
    let cancel = CancellationToken::new();
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let running = tokio::spawn({
        let (channel, cancel) = (channel.clone(), cancel.clone());
        async move { channel.run(bus, cancel).await }
    });
    let mut syncs = channel.syncs();
    tokio::time::timeout(WITHIN, syncs.wait_for(|n| *n >= 1)).await??;
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(store.join("session.json"))?)?;
    assert_ne!(
        saved["access_token"],
        gone.access_token.as_str(),
        "a new session was saved"
    );
    assert_ne!(saved["device_id"], gone.device_id.as_str());
    cancel.cancel();
    tokio::time::timeout(WITHIN, running).await???;
    Ok(())
}

#[tokio::test]
async fn encrypted_rooms_are_neither_read_nor_written_in_the_clear() -> Result<()> {
    let Some(hs) = homeserver().await else {
        return Ok(());
    };
    let h = Harness::start(hs, json!({})).await?;
    let alice = h.alice.access_token.clone();
    let room = h.dm(&h.alice).await?;
    hs.call(
        Method::PUT,
        &[
            "_matrix",
            "client",
            "v3",
            "rooms",
            &room,
            "state",
            "m.room.encryption",
            "",
        ],
        &[],
        Some(&alice),
        Some(&json!({"algorithm": "m.megolm.v1.aes-sha2"})),
    )
    .await?;
    let mut seen = hs.timeline(&alice).await?;
    let encrypted = json!({"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEpABd2hhdGV2ZXI",
        "device_id": "ALICEDEV", "sender_key": "c2VuZGVyIGtleQ", "session_id": "c2Vzc2lvbg"});
    hs.send_event(&alice, &room, "m.room.encrypted", &encrypted)
        .await?;
    let notice = hs
        .wait_event(&alice, &mut seen, &room, WITHIN, h.sent_by_bot())
        .await?;
    assert_eq!(notice["content"]["msgtype"], "m.notice");
    assert!(
        notice["content"]["body"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot read encrypted"),
        "{notice}"
    );
    // Once per room: a second encrypted message gets no second notice (the plain one after it shows it was read).
    hs.send_event(&alice, &room, "m.room.encrypted", &encrypted)
        .await?;
    hs.send_text(&alice, &room, "plain words").await?;
    assert_eq!(h.inbound().await?.content, "plain words");
    let notices = hs
        .messages(&alice, &room)
        .await?
        .into_iter()
        .filter(|e| e["sender"] == h.bot.user_id.as_str() && e["content"]["msgtype"] == "m.notice")
        .count();
    assert_eq!(notices, 1);
    // Nothing goes into the encrypted room in the clear.
    let e = h
        .channel
        .send(&OutboundMessage::reply("matrix", &room, "secret answer"))
        .await
        .expect_err("refused");
    assert!(chain(&e).contains("encrypted room"), "{}", chain(&e));
    h.stop().await;
    Ok(())
}
