use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use nanobot_bus::{Bus, BusError, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_testkit::fake_weixin::{Answer, BOT_ID, FakeWeixin, padded_size, with_ref};
use nanobot_testkit::secrets::error_text;
use nanobot_weixin::{MAX_MESSAGE_CHARS, WeixinChannel, WeixinSettings};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

const ALICE: &str = "alice@im.wechat";
const MALLORY: &str = "mallory@im.wechat";
const WITHIN: Duration = Duration::from_secs(30);

/// A JPEG's first bytes and some body.
fn jpeg() -> Vec<u8> {
    let mut v = b"\xff\xd8\xff\xe0\0\x10JFIF\0".to_vec();
    v.extend((0..300u32).map(|i| (i * 7 % 251) as u8));
    v
}

fn ctx_of(msg: &Value) -> String {
    msg["context_token"].as_str().unwrap().to_owned()
}

fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    Sha256::digest(data.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The block the tests start from: the fake's addresses, alice allowed.
fn block(fake: &FakeWeixin, token: Option<&str>, extra: &Value) -> Value {
    let mut block = json!({"enabled": true, "baseUrl": fake.base_url(), "cdnBaseUrl": fake.cdn_base_url(),
        "allowFrom": [ALICE]});
    if let Some(t) = token {
        block["token"] = json!(t);
    }
    if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    block
}

struct Harness {
    fake: FakeWeixin,
    channel: Arc<WeixinChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    media: tempfile::TempDir,
    state: tempfile::TempDir,
    token: String,
    _data: tempfile::TempDir,
}

impl Harness {
    /// A logged-in channel (a token issued by the fake) under the manager, listening.
    async fn start(extra: Value) -> Result<Self> {
        let fake = FakeWeixin::start().await?;
        let token = fake.issue_token(ALICE);
        let block = block(&fake, Some(&token), &extra);
        Self::with(fake, token, &block, tempfile::tempdir()?).await
    }

    async fn with(fake: FakeWeixin, token: String, block: &Value, state: tempfile::TempDir) -> Result<Self> {
        let bus = Arc::new(InProcessBus::new(64));
        Self::with_bus(fake, token, block, state, bus.clone(), bus).await
    }

    /// [`Harness::with`], the manager on `front` (a bus in front of `bus`, the one the test reads).
    async fn with_bus(
        fake: FakeWeixin,
        token: String,
        block: &Value,
        state: tempfile::TempDir,
        bus: Arc<InProcessBus>,
        front: Arc<dyn Bus>,
    ) -> Result<Self> {
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let channel = Arc::new(
            WeixinChannel::new(WeixinSettings::from_block(block)?, state.path(), media.path())
                .with_pairing(pairing)
                .with_ssrf_guard(SsrfGuard::from_cidrs(&["127.0.0.1/32"])?),
        );
        let mut manager = ChannelManager::new(ManagerSettings {
            supervisor: SupervisorSettings::quick(),
            ..ManagerSettings::default()
        });
        manager.add(channel.clone());
        let manager = manager.spawn(front);
        let polls = fake.polls();
        fake.wait_polls(polls + 1, WITHIN).await?;
        Ok(Self {
            fake,
            channel,
            bus,
            manager,
            media,
            state,
            token,
            _data: data,
        })
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WITHIN, self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    async fn publish(&self, msg: OutboundMessage) -> Result<()> {
        self.bus.publish_outbound(msg).await?;
        Ok(())
    }

    /// Pushes a text from alice and waits for it on the bus (her context token is then the latest).
    async fn hello(&self, text: &str) -> Result<Value> {
        let m = self.fake.push_text(ALICE, text);
        let inbound = self.inbound().await?;
        assert_eq!(inbound.content, text);
        Ok(m)
    }

    fn account(&self) -> Result<Value> {
        let text = std::fs::read_to_string(self.state.path().join("account.json"))?;
        Ok(serde_json::from_str(&text)?)
    }

    /// Stops the manager; the state directory, kept for a look after the stop.
    async fn stop(self) -> tempfile::TempDir {
        assert!(
            self.manager.stop(WITHIN).await,
            "the channel did not stop when cancelled"
        );
        self.state
    }
}

/// A bus in front of an in-process one, for what a bus may do to the channel.
struct FrontBus {
    inner: Arc<InProcessBus>,
    /// Inbound messages still to refuse (a bus on a server gone for a moment).
    refuse: AtomicUsize,
    /// Cancelled with the first inbound message (the gateway stopping while a batch is handled); the message
    /// is taken only after the channel had a turn to see the stop.
    stop: Option<CancellationToken>,
}

impl FrontBus {
    fn new(inner: Arc<InProcessBus>) -> Self {
        Self {
            inner,
            refuse: AtomicUsize::new(0),
            stop: None,
        }
    }
}

#[async_trait]
impl Bus for FrontBus {
    async fn publish_inbound(&self, msg: InboundMessage) -> Result<(), BusError> {
        if self
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(BusError::Unavailable("refused by the test".into()));
        }
        if let Some(stop) = &self.stop {
            stop.cancel();
            tokio::task::yield_now().await;
        }
        self.inner.publish_inbound(msg).await
    }
    async fn consume_inbound(&self) -> Option<InboundMessage> {
        self.inner.consume_inbound().await
    }
    async fn publish_outbound(&self, msg: OutboundMessage) -> Result<(), BusError> {
        self.inner.publish_outbound(msg).await
    }
    async fn consume_outbound(&self) -> Option<OutboundMessage> {
        self.inner.consume_outbound().await
    }
    fn inbound_len(&self) -> usize {
        self.inner.inbound_len()
    }
    fn outbound_len(&self) -> usize {
        self.inner.outbound_len()
    }
    fn close(&self) {
        self.inner.close();
    }
}

/// Waits until `user` was told "typing" with `status` (1 on, 2 off).
async fn typing(fake: &FakeWeixin, user: &str, status: i64) -> Result<()> {
    for n in 1..64 {
        fake.wait_calls("/ilink/bot/sendtyping", n, WITHIN).await?;
        if fake.typing().iter().any(|t| t.user == user && t.status == status) {
            return Ok(());
        }
    }
    bail!("typing was never {status}: {:?}", fake.typing())
}

#[tokio::test]
async fn the_owner_is_answered_on_the_context_token_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    // notifystart with 0.3.5's headers and base_info.
    assert_eq!(h.fake.notifications().0, 1);
    let notify = h
        .fake
        .wait_calls("/ilink/bot/msg/notifystart", 1, WITHIN)
        .await?
        .remove(0);
    assert_eq!(
        notify.header("authorization"),
        Some(format!("Bearer {}", h.token).as_str())
    );
    assert_eq!(notify.header("authorizationtype"), Some("ilink_bot_token"));
    assert_eq!(notify.header("ilink-app-id"), Some("bot"));
    assert_eq!(notify.header("ilink-app-clientversion"), Some("132102"));
    assert_eq!(notify.header("content-type"), Some("application/json"));
    let uin = STANDARD.decode(notify.header("x-wechat-uin").unwrap())?;
    assert!(String::from_utf8(uin)?.parse::<u32>().is_ok());
    assert_eq!(notify.body["base_info"]["channel_version"], "2.4.6");
    assert!(
        notify.body["base_info"]["bot_agent"]
            .as_str()
            .unwrap()
            .contains("nanobot")
    );

    let stranger = h.fake.push_text(MALLORY, "let me in");
    let hello = h.fake.text(ALICE, "hello");
    h.fake.push(&hello);
    h.fake.push(&hello); // the same message_id: dropped
    let mut own = h.fake.text(BOT_ID, "the bot's own echo");
    own["message_type"] = json!(2);
    h.fake.push(&own);

    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("weixin", ALICE, ALICE)
    );
    assert_eq!(
        inbound.content, "hello",
        "the stranger's message never reached the bus"
    );
    assert_eq!(
        inbound.metadata["message_id"],
        json!(hello["message_id"].to_string())
    );
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], false);
    assert!(
        inbound.wants_stream,
        "streaming is on by 0.3.5's default (buffered)"
    );
    assert!(inbound.media.is_empty());

    // The stranger got a pairing code on their own context token.
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].to_user_id, MALLORY);
    assert_eq!(sent[0].context_token, ctx_of(&stranger));
    assert!(sent[0].text().unwrap().contains("pairing code"), "{:?}", sent[0]);

    // Typing: on when her message came (the ticket from getconfig, asked with her context token).
    typing(&h.fake, ALICE, 1).await?;
    h.publish(OutboundMessage::reply("weixin", ALICE, "  final answer \n"))
        .await?;
    let sent = h.fake.wait_sent(2, WITHIN).await?;
    let answer = &sent[1];
    assert_eq!(answer.to_user_id, ALICE);
    assert_eq!(
        answer.context_token,
        ctx_of(&hello),
        "on her latest context token"
    );
    assert_eq!(answer.text(), Some("final answer"), "trimmed");
    assert!(answer.client_id.starts_with("nanobot-") && answer.client_id.len() == 28);
    assert_eq!((answer.message_type, answer.message_state), (2, 2));
    assert_eq!(answer.body["msg"]["from_user_id"], "");
    assert_eq!(answer.items.len(), 1);
    assert_eq!(answer.body["base_info"]["channel_version"], "2.4.6");

    // Off once the answer is sent.
    typing(&h.fake, ALICE, 2).await?;
    let config = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/getconfig" && c.body["ilink_user_id"] == ALICE)
        .context("no getconfig")?;
    assert_eq!(config.body["context_token"], hello["context_token"]);

    // Nothing else came through: the next message is the next on the bus.
    h.hello("second").await?;
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn media_come_in_deciphered_and_quotes_read_as_0_3_5s() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let dir = h.media.path().join("weixin");

    let jpg = jpeg();
    h.fake.push_image(ALICE, &jpg);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1);
    let saved = Path::new(&inbound.media[0]);
    assert!(saved.starts_with(&dir), "{saved:?}");
    let name = saved.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("image_") && name.ends_with(".jpg"), "{name}");
    assert_eq!(std::fs::read(saved)?, jpg, "deciphered");
    assert_eq!(
        inbound.content,
        format!("[image]\n[Image: source: {}]", saved.display())
    );

    let doc = "年度报告 numbers 1 2 3\n".repeat(7);
    h.fake.push_file(ALICE, "report 年.txt", doc.as_bytes());
    let inbound = h.inbound().await?;
    let saved = Path::new(&inbound.media[0]);
    assert_eq!(saved, dir.join("report_年.txt"));
    assert_eq!(std::fs::read(saved)?, doc.as_bytes());
    assert_eq!(
        inbound.content,
        format!("[file: report 年.txt]\n[File: source: {}]", saved.display())
    );
    // The same name again never overwrites the first.
    h.fake.push_file(ALICE, "report 年.txt", b"other");
    let again = h.inbound().await?;
    assert_eq!(Path::new(&again.media[0]), dir.join("report_年_2.txt"));
    assert_eq!(std::fs::read(saved)?, doc.as_bytes());

    let downloads = h.fake.downloads().len();
    h.fake
        .push(&h.fake.voice(ALICE, b"#!SILK_V3 bytes", Some("spoken words")));
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "[voice] spoken words");
    assert!(inbound.media.is_empty());
    assert_eq!(
        h.fake.downloads().len(),
        downloads,
        "the transcript is used, nothing downloaded"
    );

    let silk = b"#!SILK_V3 a voice without a transcript".repeat(3);
    h.fake.push(&h.fake.voice(ALICE, &silk, None));
    let inbound = h.inbound().await?;
    let saved = Path::new(&inbound.media[0]);
    assert!(saved.to_string_lossy().ends_with(".silk"), "{saved:?}");
    assert_eq!(std::fs::read(saved)?, silk);
    assert_eq!(
        inbound.content,
        format!("[voice]\n[Audio: source: {}]", saved.display())
    );

    let video = b"\0\0\0\x18ftypmp42 video bytes ".repeat(9);
    h.fake.push(&h.fake.video(ALICE, &video));
    let inbound = h.inbound().await?;
    assert!(
        inbound.content.starts_with("[video]\n[Video: source: "),
        "{}",
        inbound.content
    );
    assert!(inbound.media[0].ends_with(".mp4"));
    assert_eq!(sha256_hex(std::fs::read(&inbound.media[0])?), sha256_hex(&video));

    let mut quote = h.fake.text(ALICE, "what about this");
    with_ref(
        &mut quote,
        "earlier",
        json!({"type": 1, "text_item": {"text": "the quoted line"}}),
    );
    h.fake.push(&quote);
    assert_eq!(
        h.inbound().await?.content,
        "[引用: earlier | the quoted line]\nwhat about this"
    );

    // A quote of an image: the text, and the quoted image fetched (the message has none of its own).
    let quoted_png = b"\x89PNG\r\n\x1a\n quoted image".to_vec();
    let mut quote = h.fake.text(ALICE, "what is in it?");
    with_ref(&mut quote, "", h.fake.image_item(&quoted_png));
    h.fake.push(&quote);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1);
    assert_eq!(std::fs::read(&inbound.media[0])?, quoted_png);
    assert_eq!(
        inbound.content,
        format!("what is in it?\n[image]\n[Image: source: {}]", inbound.media[0])
    );

    // Media with a server-given full_url (on loopback, allowed by this channel's guard) come in too.
    h.fake.set_full_urls(true);
    h.fake.push_image(ALICE, &jpg);
    let inbound = h.inbound().await?;
    assert_eq!(std::fs::read(&inbound.media[0])?, jpg);

    // A download the CDN refuses leaves the bare tag.
    let mut missing = h.fake.file(ALICE, "gone.txt", b"x");
    missing["item_list"][0]["file_item"]["media"]["encrypt_query_param"] = json!("bm8tc3VjaC1maWxl");
    missing["item_list"][0]["file_item"]["media"]
        .as_object_mut()
        .unwrap()
        .remove("full_url");
    h.fake.push(&missing);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.content, "[file: gone.txt]");
    assert!(inbound.media.is_empty());
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_and_images_go_out_enciphered_through_the_cdn() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let hello = h.hello("send me the report").await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("answer.txt");
    std::fs::write(&file, "the answer file\n".repeat(5))?;
    let image = dir.path().join("chart.png");
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR a chart".repeat(4);
    std::fs::write(&image, &png)?;

    let mut reply = OutboundMessage::reply("weixin", ALICE, "here you go");
    reply.media = vec![file.display().to_string(), image.display().to_string()];
    h.publish(reply).await?;
    let sent = h.fake.wait_sent(3, WITHIN).await?;
    let (f, i, caption) = (&sent[0], &sent[1], &sent[2]);
    assert!(sent.iter().all(|s| s.context_token == ctx_of(&hello)));
    assert_eq!(f.item_type(), Some(4));
    let item = &f.items[0]["file_item"];
    assert_eq!(
        (&item["file_name"], &item["len"]),
        (&json!("answer.txt"), &json!("80"))
    );
    assert_eq!(item["media"]["encrypt_type"], 1);
    let key = STANDARD.decode(item["media"]["aes_key"].as_str().unwrap())?;
    assert_eq!(
        String::from_utf8(key)?,
        f.media[0].aeskey,
        "base64 of the key's hex, as 0.3.5"
    );
    assert_eq!(f.media[0].data, std::fs::read(&file)?, "deciphered by the fake");
    assert_eq!(i.item_type(), Some(2));
    assert_eq!(
        i.items[0]["image_item"]["mid_size"],
        padded_size(png.len() as u64)
    );
    assert_eq!(i.media[0].data, png);
    assert_eq!(caption.text(), Some("here you go"), "files first, then the text");
    let uploads = h.fake.uploads();
    assert_eq!(uploads.iter().map(|u| u.media_type).collect::<Vec<_>>(), [3, 1]);
    let upload_call = h
        .fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/getuploadurl")
        .context("no getuploadurl")?;
    let mut keys: Vec<_> = upload_call.body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "aeskey",
            "base_info",
            "filekey",
            "filesize",
            "media_type",
            "no_need_thumb",
            "rawfilemd5",
            "rawsize",
            "to_user_id"
        ]
    );
    assert_eq!(upload_call.body["filesize"], padded_size(80));
    assert_eq!(upload_call.body["no_need_thumb"], true);
    assert_eq!(upload_call.body["filekey"].as_str().unwrap().len(), 32);

    // The CDN refuses an upload (400): the file is named in a text instead, as 0.3.5 words it.
    h.fake.answer_next("/c2c/upload", Answer::Status(400));
    let mut reply = OutboundMessage::reply("weixin", ALICE, "again");
    reply.media = vec![
        file.display().to_string(),
        dir.path().join("missing.txt").display().to_string(),
    ];
    h.channel.send(&reply).await?;
    let texts: Vec<String> = h.fake.sent()[3..]
        .iter()
        .map(|s| s.text().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        texts,
        [
            "[Failed to send: answer.txt]",
            "[Failed to send: missing.txt]",
            "again"
        ]
    );

    // A CDN outage (503) is the manager's to retry: the same part, the same key and file key, sent once.
    h.fake.answer_next("/c2c/upload", Answer::Status(503));
    let mut reply = OutboundMessage::reply("weixin", ALICE, "third");
    reply.media = vec![file.display().to_string()];
    let err = h.channel.send(&reply).await.unwrap_err();
    assert!(matches!(err, ChannelError::Transient { .. }), "{err:?}");
    let before = h.fake.sent().len();
    h.channel.send(&reply).await?;
    let sent = h.fake.sent();
    assert_eq!(sent.len(), before + 2, "the file and the text");
    assert_eq!(sent[before].item_type(), Some(4));
    let asked: Vec<_> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.path == "/ilink/bot/getuploadurl")
        .map(|c| (c.body["filekey"].clone(), c.body["aeskey"].clone()))
        .collect();
    let n = asked.len();
    assert_eq!(
        asked[n - 1],
        asked[n - 2],
        "the retry reuses the part's file key and AES key"
    );
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn long_answers_are_split_at_1800_characters() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.hello("write a lot").await?;
    let para = |c: &str| format!("{} {}.", c.repeat(4), "word ".repeat(250).trim());
    let long = [para("a"), para("b"), para("c"), para("d")].join("\n\n");
    h.channel
        .send(&OutboundMessage::reply("weixin", ALICE, long.clone()))
        .await?;
    let texts: Vec<String> = h
        .fake
        .sent()
        .iter()
        .map(|s| s.text().unwrap().to_owned())
        .collect();
    assert!(texts.len() >= 2, "{}", texts.len());
    assert!(texts.iter().all(|t| t.chars().count() <= MAX_MESSAGE_CHARS));
    assert_eq!(texts.join("\n\n"), long, "split at the paragraph breaks");

    // Chinese text without breaks is cut after its full stops.
    let han = "这是一个很长的句子。".repeat(400);
    h.channel
        .send(&OutboundMessage::reply("weixin", ALICE, han.clone()))
        .await?;
    let pieces: Vec<String> = h.fake.sent()[texts.len()..]
        .iter()
        .map(|s| s.text().unwrap().to_owned())
        .collect();
    assert!(pieces.len() >= 3);
    assert!(
        pieces
            .iter()
            .all(|p| p.chars().count() <= MAX_MESSAGE_CHARS && p.ends_with('。'))
    );
    assert_eq!(pieces.concat(), han);
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_spent_context_token_keeps_the_reply_for_the_users_next_message() -> Result<()> {
    let h = Harness::start(json!({"contextMessageBudget": 10})).await?;
    h.fake.set_context_quota(1);
    h.hello("hello").await?;
    h.publish(OutboundMessage::reply("weixin", ALICE, "first"))
        .await?;
    h.publish(OutboundMessage::reply("weixin", ALICE, "kept for later"))
        .await?;
    // The second is refused with -2 and kept.
    let calls = h.fake.wait_calls("/ilink/bot/sendmessage", 2, WITHIN).await?;
    assert_eq!(calls[1].answer["ret"], -2);
    assert_eq!(h.fake.sent().len(), 1);

    let again = h.fake.push_text(ALICE, "are you there?");
    let deferred = h.fake.wait_sent(2, WITHIN).await?.pop().unwrap();
    assert_eq!(deferred.text(), Some("kept for later"));
    assert_eq!(
        deferred.context_token,
        ctx_of(&again),
        "sent on the new context token"
    );
    assert_eq!(h.inbound().await?.content, "are you there?");
    let _ = h.stop().await;

    // The local budget: two sends per token here, the third kept without asking the server.
    let h = Harness::start(json!({"contextMessageBudget": 2})).await?;
    h.hello("hello").await?;
    for text in ["one", "two", "three"] {
        h.channel
            .send(&OutboundMessage::reply("weixin", ALICE, text))
            .await?;
    }
    let sends = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.path == "/ilink/bot/sendmessage")
        .count();
    assert_eq!(sends, 2, "the third was never asked for");
    // A chat that never wrote has no context token: kept too.
    h.channel
        .send(&OutboundMessage::reply("weixin", "bob@im.wechat", "cron push"))
        .await?;
    let again = h.fake.push_text(ALICE, "next");
    let sent = h.fake.wait_sent(3, WITHIN).await?;
    assert_eq!(sent[2].text(), Some("three"));
    assert_eq!(sent[2].context_token, ctx_of(&again));
    assert_eq!(h.inbound().await?.content, "next");
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_login_expiring_is_one_clear_error_and_the_state_is_saved() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(WeixinChannel::new(
        WeixinSettings::from_block(&block(&fake, Some(&token), &json!({})))?,
        state.path(),
        media.path(),
    ));
    let bus = Arc::new(InProcessBus::new(8));
    let running = {
        let channel = channel.clone();
        let bus: Arc<dyn Bus> = bus.clone();
        tokio::spawn(async move { channel.run(bus, CancellationToken::new()).await })
    };
    let hello = fake.push_text(ALICE, "hello");
    let inbound = tokio::time::timeout(WITHIN, bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(inbound.content, "hello");
    let mut polls = channel.polls();
    tokio::time::timeout(WITHIN, polls.wait_for(|n| *n >= 1)).await??;

    fake.revoke_tokens();
    let err = tokio::time::timeout(WITHIN, running)
        .await
        .context("run did not end")??
        .unwrap_err();
    assert!(
        matches!(err, ChannelError::Auth { .. }),
        "stops the channel: {err:?}"
    );
    let shown = error_text(&err);
    assert!(
        shown.contains("WeChat login expired. Scan again to reconnect."),
        "{shown}"
    );
    assert!(shown.contains("nanobot channels login weixin"), "{shown}");
    assert!(!shown.contains(&token), "{shown}");

    // Sends are refused at once, without a request.
    let sends = fake
        .calls()
        .into_iter()
        .filter(|c| c.path == "/ilink/bot/sendmessage")
        .count();
    let err = channel
        .send(&OutboundMessage::reply("weixin", ALICE, "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert_eq!(
        fake.calls()
            .into_iter()
            .filter(|c| c.path == "/ilink/bot/sendmessage")
            .count(),
        sends
    );

    // The cursor and the context token are saved as 0.3.5 saves them.
    let account: Value = serde_json::from_str(&std::fs::read_to_string(state.path().join("account.json"))?)?;
    assert_eq!(account["token"], token);
    assert_eq!(account["get_updates_buf"], STANDARD.encode("fakewx:1"));
    assert_eq!(account["context_tokens"], json!({ALICE: hello["context_token"]}));
    assert_eq!(account["base_url"], fake.base_url());
    Ok(())
}

#[tokio::test]
async fn the_server_going_away_and_coming_back_loses_nothing() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.hello("one").await?;
    // The next two polls fail (a gateway error, then an answer that is no JSON object).
    h.fake.answer_next("/ilink/bot/getupdates", Answer::Status(502));
    h.fake.answer_next(
        "/ilink/bot/getupdates",
        Answer::Json(json!(["not", "an", "object"])),
    );
    h.fake.push_text(ALICE, "two");
    assert_eq!(h.inbound().await?.content, "two");
    let mut runs = h.channel.runs();
    tokio::time::timeout(WITHIN, runs.wait_for(|n| *n >= 3))
        .await
        .context("the manager did not start the channel again")??;
    h.fake.push_text(ALICE, "three");
    assert_eq!(h.inbound().await?.content, "three");
    let polls = h.fake.calls();
    let polls: Vec<_> = polls
        .iter()
        .filter(|c| c.path == "/ilink/bot/getupdates")
        .collect();
    let failed: Vec<usize> = polls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.status == 502 || c.answer.is_array())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed.len(), 2, "{polls:?}");
    let before = &polls[failed[0] - 1].answer["get_updates_buf"];
    for poll in &polls[failed[0]..=failed[1] + 1] {
        assert_eq!(
            &poll.body["get_updates_buf"], before,
            "the cursor is kept across the reconnects"
        );
    }
    assert_eq!(h.fake.notifications().0, 3, "notifystart on each connection");
    h.publish(OutboundMessage::reply("weixin", ALICE, "still here"))
        .await?;
    assert_eq!(h.fake.wait_sent(1, WITHIN).await?[0].text(), Some("still here"));
    let _ = h.stop().await;
    Ok(())
}

/// `account.json` as 0.3.5's `nanobot channels login weixin` writes it.
fn account_0_3_5(token: &str, base_url: &str, replaced: Option<&str>) -> String {
    let mut text = format!(
        r#"{{"token": "{token}", "get_updates_buf": "", "context_tokens": {{}}, "typing_tickets": {{}}, "base_url": "{base_url}""#
    );
    if let Some(old) = replaced {
        text.push_str(&format!(
            r#", "replaced_config_token_sha256": "{}""#,
            sha256_hex(old)
        ));
    }
    text.push('}');
    text
}

#[tokio::test]
async fn a_state_written_by_0_3_5s_login_is_read_and_written_back_in_its_format() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    std::fs::write(
        state.path().join("account.json"),
        account_0_3_5(&token, &fake.base_url(), None),
    )?;
    // No token in the config, and a baseUrl that goes nowhere: both come from account.json.
    let mut block = block(&fake, None, &json!({}));
    block["baseUrl"] = json!("http://127.0.0.1:9");
    let h = Harness::with(fake, token.clone(), &block, state).await?;
    let hello = h.hello("hello").await?;
    typing(&h.fake, ALICE, 1).await?;
    h.publish(OutboundMessage::reply("weixin", ALICE, "hi")).await?;
    h.fake.wait_sent(1, WITHIN).await?;
    typing(&h.fake, ALICE, 2).await?;
    let mut polls = h.channel.polls();
    tokio::time::timeout(WITHIN, polls.wait_for(|n| *n >= 1)).await??;
    drop(polls);
    assert_eq!(h.account()?["token"], token);
    let fake = h.fake.clone();
    let state = h.stop().await;
    assert_eq!(fake.notifications().1, 1, "notifystop at the stop");
    let text_after = std::fs::read_to_string(state.path().join("account.json"))?;
    assert!(
        text_after.starts_with(&format!(r#"{{"token": "{token}", "get_updates_buf": ""#)),
        "{text_after}"
    );
    let account: Value = serde_json::from_str(&text_after)?;
    let keys: Vec<&String> = account.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "token",
            "get_updates_buf",
            "context_tokens",
            "typing_tickets",
            "base_url"
        ]
    );
    assert_eq!(account["get_updates_buf"], STANDARD.encode("fakewx:1"));
    assert_eq!(account["context_tokens"], json!({ALICE: hello["context_token"]}));
    let ticket = &account["typing_tickets"][ALICE];
    assert!(!ticket["ticket"].as_str().unwrap().is_empty(), "{ticket}");
    assert_eq!(ticket["ever_succeeded"], true);
    assert!(ticket["next_fetch_at"].as_f64().is_some() && ticket["retry_delay_s"].as_f64().is_some());
    Ok(())
}

#[tokio::test]
async fn a_login_that_replaced_the_configured_token_wins_and_a_manual_token_wins_otherwise() -> Result<()> {
    // 0.3.5's login replaced the configured (now stale) token: account.json says so, and its token is used.
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    std::fs::write(
        state.path().join("account.json"),
        account_0_3_5(&token, &fake.base_url(), Some("stale-config-token")),
    )?;
    let config = block(&fake, Some("stale-config-token"), &json!({}));
    let h = Harness::with(fake, token.clone(), &config, state).await?;
    // (A held poll is recorded once it is answered.)
    h.hello("hello").await?;
    let poll = h
        .fake
        .wait_calls("/ilink/bot/getupdates", 1, WITHIN)
        .await?
        .remove(0);
    assert_eq!(
        poll.header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    let _ = h.stop().await;

    // A configured token account.json does not say was replaced is the user's own edit: it wins.
    let fake = FakeWeixin::start().await?;
    let manual = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    std::fs::write(
        state.path().join("account.json"),
        account_0_3_5("old-token", &fake.base_url(), None),
    )?;
    let config = block(&fake, Some(&manual), &json!({}));
    let h = Harness::with(fake, manual.clone(), &config, state).await?;
    // (A held poll is recorded once it is answered.)
    h.hello("hello").await?;
    let poll = h
        .fake
        .wait_calls("/ilink/bot/getupdates", 1, WITHIN)
        .await?
        .remove(0);
    assert_eq!(
        poll.header("authorization"),
        Some(format!("Bearer {manual}").as_str())
    );
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_a_login_the_channel_says_to_run_the_login() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let state = tempfile::tempdir()?;
    let channel = WeixinChannel::new(
        WeixinSettings::from_block(&block(&fake, None, &json!({})))?,
        state.path(),
        state.path(),
    );
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let err = channel.run(bus, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert!(
        error_text(&err).contains("nanobot channels login weixin"),
        "{err}"
    );
    assert!(fake.calls().is_empty(), "nothing was asked without a token");
    Ok(())
}

#[tokio::test]
async fn tool_hints_are_gathered_and_progress_follows_the_keys() -> Result<()> {
    let h = Harness::start(json!({"sendToolHints": true})).await?;
    h.hello("look it up").await?;
    let of = |kind, text: &str| OutboundMessage::of_kind(kind, "weixin", ALICE, text);
    h.channel.send(&of(OutboundKind::Progress, "thinking…")).await?;
    h.channel
        .send(&of(OutboundKind::ToolHint, "web_search(\"rust\")"))
        .await?;
    h.channel
        .send(&of(OutboundKind::ToolHint, "read_file(\"notes.md\")"))
        .await?;
    assert!(
        h.fake.sent().is_empty(),
        "progress is off by 0.3.5's default; hints wait"
    );
    h.channel.send(&of(OutboundKind::Reply, "done")).await?;
    let texts: Vec<String> = h
        .fake
        .sent()
        .iter()
        .map(|s| s.text().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["web_search(\"rust\")\n\nread_file(\"notes.md\")", "done"]);
    let _ = h.stop().await;

    let h = Harness::start(json!({"replyProgressMessages": true})).await?;
    h.hello("look it up").await?;
    h.channel.send(&of(OutboundKind::Progress, "thinking…")).await?;
    assert_eq!(h.fake.sent()[0].text(), Some("thinking…"));
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn block_streaming_sends_blocks_and_the_rest_at_the_end() -> Result<()> {
    let h = Harness::start(json!({"blockStreaming": true, "blockStreamingMinChars": 200,
        "blockStreamingMaxMessages": 3}))
    .await?;
    assert!(h.channel.supports_streaming());
    h.hello("stream it").await?;
    let sentence = |i: usize| format!("Sentence number {i} of the streamed answer. ");
    let full: String = (0..40).map(sentence).collect();
    let stream = |kind| OutboundMessage::of_kind(kind, "weixin", ALICE, "");
    for i in 0..40 {
        let mut delta = stream(OutboundKind::StreamDelta {
            stream_id: "s1".into(),
        });
        delta.content = sentence(i);
        h.channel.send(&delta).await?;
    }
    let blocks = h.fake.sent();
    assert_eq!(
        blocks.len(),
        2,
        "blockStreamingMaxMessages − 1 blocks, one send left for the end"
    );
    let mut end = stream(OutboundKind::StreamEnd {
        stream_id: "s1".into(),
    });
    end.content = full.clone();
    h.channel.send(&end).await?;
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 3);
    let run = sent[0].run_id.clone().context("blocks carry a run id")?;
    assert!(
        sent.iter().all(|s| s.run_id.as_deref() == Some(run.as_str())),
        "one run id for the answer"
    );
    assert!(sent[..2].iter().all(|s| s.text().unwrap().chars().count() <= 200));
    let words: Vec<String> = sent
        .iter()
        .flat_map(|s| {
            s.text()
                .unwrap()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        words,
        full.split_whitespace().collect::<Vec<_>>(),
        "nothing lost, nothing twice"
    );
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_qr_login_writes_account_and_config_as_0_3_5_does() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    fake.require_verify_code(Some("7351"));
    fake.set_qr_hold(Duration::from_millis(500));
    let home = tempfile::tempdir()?;
    let cfg = home.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"agents": {"defaults": {"model": "m"}}, "channels": {"weixin": {
            "enabled": true, "baseUrl": fake.base_url(), "cdnBaseUrl": fake.cdn_base_url(),
            "allowFrom": [ALICE], "contextMessageBudget": 10}}})
        .to_string(),
    )?;
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&cfg)?)?;
    let settings = WeixinSettings::from_block(&config["channels"]["weixin"])?;
    let state_dir = home.path().join("weixin");
    let mut codes = VecDeque::from(["1111", "7351"]);
    let mut out = Vec::new();
    let login = nanobot_weixin::login(&settings, &state_dir, Some(&cfg), false, &mut out, || {
        let code = codes.pop_front().map(str::to_owned);
        async move { code.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof)) }
    });
    let phone = async {
        let qrs = fake.wait_qrs(1, WITHIN).await?;
        assert_eq!(qrs[0].method, "POST");
        assert!(qrs[0].local_token_list.is_empty(), "no token on this machine yet");
        fake.wait_qr_status("wait", WITHIN).await?;
        fake.scan(ALICE)?;
        let qr = fake.wait_qr_status("scaned", WITHIN).await?;
        assert_eq!(qr.verify_codes[..2], ["1111", "7351"]);
        fake.confirm(ALICE)?.context("no token")
    };
    let (logged_in, token) = tokio::join!(login, phone);
    let (logged_in, token) = (logged_in?, token?);
    assert!(!logged_in.already);
    assert_eq!(logged_in.token.expose(), token);
    assert_eq!(
        (logged_in.user_id.as_str(), logged_in.bot_id.as_str()),
        (ALICE, BOT_ID)
    );
    assert_eq!(logged_in.base_url, fake.base_url());
    let printed = String::from_utf8(out)?;
    assert!(printed.contains("Enter the number shown in WeChat"), "{printed}");
    assert!(printed.contains("The previous code did not match"), "{printed}");
    assert!(
        printed.contains(&fake.qrs()[0].img_content),
        "the QR's URL is shown"
    );
    assert!(!printed.contains(&token), "the token is never printed");
    let qr_call = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/get_bot_qrcode")
        .context("no QR fetch")?;
    assert_eq!(qr_call.query.get("bot_type").map(String::as_str), Some("3"));
    assert_eq!(qr_call.body, json!({"local_token_list": []}));
    assert_eq!(qr_call.header("authorization"), None);
    assert_eq!(qr_call.header("ilink-app-clientversion"), Some("132102"));

    let account = std::fs::read_to_string(state_dir.join("account.json"))?;
    assert_eq!(
        account,
        account_0_3_5(&token, &fake.base_url(), None),
        "byte for byte as 0.3.5 writes it"
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&cfg)?)?;
    assert_eq!(config["channels"]["weixin"]["token"], token);
    assert_eq!(config["channels"]["weixin"]["baseUrl"], fake.base_url());
    assert_eq!(
        config["channels"]["weixin"]["contextMessageBudget"], 10,
        "other keys kept"
    );
    assert_eq!(config["agents"]["defaults"]["model"], "m");

    // Logged in already: nothing is asked.
    let mut out = Vec::new();
    let again = nanobot_weixin::login(&settings, &state_dir, Some(&cfg), false, &mut out, || async {
        Ok::<_, std::io::Error>(String::new())
    })
    .await?;
    assert!(again.already);
    assert_eq!(fake.qrs().len(), 1);

    // Forced, from the config now holding the token: a fresh QR (no local tokens), an expired one replaced, a
    // redirect followed; the new token replaces the configured one, and account.json says so.
    fake.require_verify_code(None);
    let settings = WeixinSettings::from_block(&config["channels"]["weixin"])?;
    let mut out = Vec::new();
    let login = nanobot_weixin::login(&settings, &state_dir, Some(&cfg), true, &mut out, || async {
        Ok::<_, std::io::Error>(String::new())
    });
    let phone = async {
        let qrs = fake.wait_qrs(2, WITHIN).await?;
        assert!(qrs[1].local_token_list.is_empty(), "forced: no local tokens");
        fake.wait_qr_status("wait", WITHIN).await?;
        fake.expire_qr()?;
        fake.wait_qrs(3, WITHIN).await?;
        // The redirect names this fake by another name, so the polls that follow it can be told apart.
        let other_name = fake.base_url().replace("127.0.0.1", "localhost");
        fake.qr_answer_once(json!({"status": "scaned_but_redirect", "redirect_host": other_name}))?;
        fake.wait_calls("/ilink/bot/get_qrcode_status", 1, WITHIN).await?;
        let redirected = |c: &nanobot_testkit::fake_weixin::Call| {
            c.path == "/ilink/bot/get_qrcode_status"
                && c.header("host").is_some_and(|h| h.starts_with("localhost:"))
        };
        while !fake.calls().iter().any(redirected) {
            let n = fake
                .calls()
                .iter()
                .filter(|c| c.path == "/ilink/bot/get_qrcode_status")
                .count();
            fake.wait_calls("/ilink/bot/get_qrcode_status", n + 1, WITHIN)
                .await?;
        }
        fake.wait_qr_status("wait", WITHIN).await?;
        fake.confirm(ALICE)?.context("no token")
    };
    let (logged_in, new_token) = tokio::join!(login, phone);
    let (logged_in, new_token) = (logged_in?, new_token?);
    assert_eq!(logged_in.token.expose(), new_token);
    assert_ne!(new_token, token);
    let account: Value = serde_json::from_str(&std::fs::read_to_string(state_dir.join("account.json"))?)?;
    assert_eq!(account["token"], new_token);
    assert_eq!(account[nanobot_weixin::REPLACED_KEY], sha256_hex(&token));
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&cfg)?)?;
    assert_eq!(config["channels"]["weixin"]["token"], new_token);
    Ok(())
}

#[tokio::test]
async fn a_login_gives_up_after_three_expired_codes() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    fake.set_qr_hold(Duration::from_millis(500));
    let settings = WeixinSettings::from_block(&block(&fake, None, &json!({})))?;
    let state = tempfile::tempdir()?;
    let mut out = Vec::new();
    let login = nanobot_weixin::login(&settings, state.path(), None, false, &mut out, || async {
        Ok::<_, std::io::Error>(String::new())
    });
    let phone = async {
        for n in 1..=4 {
            fake.wait_qrs(n, WITHIN).await?;
            fake.expire_qr()?;
        }
        anyhow::Ok(())
    };
    let (result, phone) = tokio::join!(login, phone);
    phone?;
    let err = result.unwrap_err();
    assert!(err.to_string().contains("expired 3 times"), "{err}");
    assert_eq!(fake.qrs().len(), 4, "the first code and three new ones");
    assert!(!state.path().join("account.json").exists());
    Ok(())
}

#[tokio::test]
async fn a_newer_login_in_account_json_is_taken_up_after_a_stale_token_answer() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let old = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    std::fs::write(
        state.path().join("account.json"),
        account_0_3_5(&old, &fake.base_url(), None),
    )?;
    let config = block(&fake, None, &json!({}));
    let h = Harness::with(fake, old.clone(), &config, state).await?;
    // Another process logs in meanwhile (0.3.5's or nanobot-rs's `channels login weixin`).
    let new = h.fake.issue_token(ALICE);
    std::fs::write(
        h.state.path().join("account.json"),
        account_0_3_5(&new, &h.fake.base_url(), None),
    )?;
    // The running channel handles a message: its save must not write the old token over the new one.
    h.hello("before").await?;
    let mut polls = h.channel.polls();
    tokio::time::timeout(WITHIN, polls.wait_for(|n| *n >= 1)).await??;
    assert_eq!(h.account()?["token"], new, "the newer login is never overwritten");
    // The new login's state (as a runtime on it saved it): its cursor and context tokens, not the old session's.
    std::fs::write(
        h.state.path().join("account.json"),
        json!({"token": new, "get_updates_buf": "", "context_tokens": {"bob@im.wechat": "ctx-bob"},
            "typing_tickets": {}, "base_url": h.fake.base_url()})
        .to_string(),
    )?;
    // The next poll is answered -14 for the old token: the new login is taken up, no restart.
    h.fake.answer_next(
        "/ilink/bot/getupdates",
        Answer::Json(json!({"errcode": -14, "errmsg": "session timeout"})),
    );
    h.fake.push_text(ALICE, "nudge");
    assert_eq!(h.inbound().await?.content, "nudge");
    let after = h.fake.push_text(ALICE, "after");
    assert_eq!(
        h.inbound().await?.content,
        "after",
        "what the new login's cursor brings again is dropped as repeats"
    );
    let polls = h.fake.calls();
    let bearer_new = format!("Bearer {new}");
    let last = polls
        .iter()
        .rfind(|c| c.path == "/ilink/bot/getupdates")
        .context("no poll")?;
    assert_eq!(last.header("authorization"), Some(bearer_new.as_str()));
    let first_new = polls
        .iter()
        .find(|c| c.path == "/ilink/bot/getupdates" && c.header("authorization") == Some(bearer_new.as_str()))
        .context("no poll on the new login")?;
    assert_eq!(
        first_new.body["get_updates_buf"], "",
        "the new login's cursor, not the old session's"
    );
    assert_eq!(
        h.account()?["context_tokens"],
        json!({"bob@im.wechat": "ctx-bob", ALICE: after["context_token"]}),
        "the new login's context tokens, not the old session's"
    );
    assert_eq!(*h.channel.runs().borrow(), 1, "no restart");
    assert_eq!(
        h.fake.notifications().0,
        2,
        "notifystart again with the new login"
    );
    h.publish(OutboundMessage::reply("weixin", ALICE, "on the new login"))
        .await?;
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].text(), Some("on the new login"));
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_message_the_bus_refused_comes_again_and_is_not_dropped_as_a_repeat() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let config = block(&fake, Some(&token), &json!({}));
    let bus = Arc::new(InProcessBus::new(64));
    let front = FrontBus::new(bus.clone());
    front.refuse.store(1, Ordering::SeqCst);
    let h = Harness::with_bus(fake, token, &config, tempfile::tempdir()?, bus, Arc::new(front)).await?;
    h.fake.push_text(ALICE, "hello");
    // The bus refused it: the poll ended before its cursor moved, and the manager started it again.
    let mut runs = h.channel.runs();
    tokio::time::timeout(WITHIN, runs.wait_for(|n| *n >= 2))
        .await
        .context("the manager did not start the channel again")??;
    assert_eq!(h.inbound().await?.content, "hello", "polled again and published");
    h.fake.push_text(ALICE, "next");
    assert_eq!(h.inbound().await?.content, "next", "once");
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_streamed_answers_end_sent_again_sends_only_what_the_blocks_did_not() -> Result<()> {
    let h = Harness::start(json!({"blockStreaming": true, "blockStreamingMinChars": 200,
        "blockStreamingMaxMessages": 3}))
    .await?;
    h.hello("stream it").await?;
    let sentence = |i: usize| format!("Sentence number {i} of the streamed answer. ");
    let full: String = (0..40).map(sentence).collect();
    for i in 0..40 {
        let mut delta = OutboundMessage::of_kind(
            OutboundKind::StreamDelta {
                stream_id: "s1".into(),
            },
            "weixin",
            ALICE,
            "",
        );
        delta.content = sentence(i);
        h.channel.send(&delta).await?;
    }
    assert_eq!(h.fake.sent().len(), 2, "two blocks");
    let end = OutboundMessage::of_kind(
        OutboundKind::StreamEnd {
            stream_id: "s1".into(),
        },
        "weixin",
        ALICE,
        &full,
    );
    // The end fails (a server error); the manager sends it again.
    h.fake.answer_next("/ilink/bot/sendmessage", Answer::Status(503));
    let err = h.channel.send(&end).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    h.channel.send(&end).await?;
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 3, "the blocks and the rest");
    let words: Vec<String> = sent
        .iter()
        .flat_map(|s| {
            s.text()
                .unwrap()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        words,
        full.split_whitespace().collect::<Vec<_>>(),
        "nothing the blocks sent is sent again"
    );
    let run = sent[0].run_id.clone();
    assert!(run.is_some() && sent.iter().all(|s| s.run_id == run));
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_long_poll_answer_over_2_mib_comes_in() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    // 3 MiB of text: over what other answers are read up to.
    let long = "长".repeat(1024 * 1024);
    h.fake.push_text(ALICE, &long);
    let inbound = h.inbound().await?;
    assert!(inbound.content == long, "{} bytes", inbound.content.len());
    h.fake.push_text(ALICE, "after");
    assert_eq!(h.inbound().await?.content, "after");
    assert_eq!(*h.channel.runs().borrow(), 1, "no restart");
    let _ = h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_send_answered_minus_14_ends_the_poll_and_a_newer_login_is_used() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(WeixinChannel::new(
        WeixinSettings::from_block(&block(&fake, Some(&token), &json!({})))?,
        state.path(),
        media.path(),
    ));
    let bus = Arc::new(InProcessBus::new(8));
    let running = {
        let channel = channel.clone();
        let bus: Arc<dyn Bus> = bus.clone();
        tokio::spawn(async move { channel.run(bus, CancellationToken::new()).await })
    };
    let hello = fake.push_text(ALICE, "hello");
    let inbound = tokio::time::timeout(WITHIN, bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(inbound.content, "hello");

    fake.answer_next(
        "/ilink/bot/sendmessage",
        Answer::Json(json!({"errcode": -14, "errmsg": "session timeout"})),
    );
    let err = channel
        .send(&OutboundMessage::reply("weixin", ALICE, "refused"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    // The poll ends with the error too (the manager and the user see it), though getupdates still answers.
    let err = tokio::time::timeout(WITHIN, running)
        .await
        .context("run did not end")??
        .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    let shown = error_text(&err);
    assert!(
        shown.contains("WeChat login expired. Scan again to reconnect.") && shown.contains("session timeout"),
        "{shown}"
    );
    assert!(!shown.contains(&token), "{shown}");

    // Later sends are refused without a request…
    let sends = || {
        fake.calls()
            .into_iter()
            .filter(|c| c.path == "/ilink/bot/sendmessage")
            .collect::<Vec<_>>()
    };
    let before = sends().len();
    let err = channel
        .send(&OutboundMessage::reply("weixin", ALICE, "still refused"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    assert_eq!(sends().len(), before);
    // …until a newer login (one that replaced the configured token) is in account.json: then it is used at once,
    // with its state.
    let new = fake.issue_token(ALICE);
    std::fs::write(
        state.path().join("account.json"),
        json!({"token": new, "get_updates_buf": "", "context_tokens": {ALICE: hello["context_token"]},
            "typing_tickets": {}, "base_url": fake.base_url(), nanobot_weixin::REPLACED_KEY: sha256_hex(&token)})
        .to_string(),
    )?;
    channel
        .send(&OutboundMessage::reply("weixin", ALICE, "on the new login"))
        .await?;
    let last = sends().pop().context("no send")?;
    assert_eq!(
        last.header("authorization"),
        Some(format!("Bearer {new}").as_str())
    );
    assert_eq!(
        last.body["msg"]["item_list"][0]["text_item"]["text"],
        "on the new login"
    );
    Ok(())
}

#[tokio::test]
async fn a_stop_while_a_batch_is_handled_finishes_it_and_saves_the_cursor() -> Result<()> {
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let state = tempfile::tempdir()?;
    let media = tempfile::tempdir()?;
    let settings = WeixinSettings::from_block(&block(&fake, Some(&token), &json!({})))?;
    // One batch of two messages; the stop comes while the first is published.
    fake.push_text(ALICE, "one");
    fake.push_text(ALICE, "two");
    let channel = WeixinChannel::new(settings.clone(), state.path(), media.path());
    let inner = Arc::new(InProcessBus::new(8));
    let stop = CancellationToken::new();
    let mut front = FrontBus::new(inner.clone());
    front.stop = Some(stop.clone());
    tokio::time::timeout(WITHIN, channel.run(Arc::new(front), stop.clone()))
        .await
        .context("run did not end")??;
    assert!(stop.is_cancelled());
    for text in ["one", "two"] {
        let published = tokio::time::timeout(WITHIN, inner.consume_inbound())
            .await
            .with_context(|| format!("{text:?} was not published"))?
            .context("bus closed")?;
        assert_eq!(published.content, text);
    }
    let account: Value = serde_json::from_str(&std::fs::read_to_string(state.path().join("account.json"))?)?;
    assert_eq!(
        account["get_updates_buf"],
        STANDARD.encode("fakewx:2"),
        "the cursor moved past the batch"
    );

    // The next start polls from there: nothing comes twice.
    let channel = Arc::new(WeixinChannel::new(settings, state.path(), media.path()));
    let bus = Arc::new(InProcessBus::new(8));
    let stop = CancellationToken::new();
    let running = {
        let (channel, bus, stop): (_, Arc<dyn Bus>, _) = (channel.clone(), bus.clone(), stop.clone());
        tokio::spawn(async move { channel.run(bus, stop).await })
    };
    fake.push_text(ALICE, "three");
    let next = tokio::time::timeout(WITHIN, bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(next.content, "three");
    stop.cancel();
    tokio::time::timeout(WITHIN, running).await???;
    Ok(())
}
