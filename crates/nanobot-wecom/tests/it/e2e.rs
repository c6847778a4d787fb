use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use md5::{Digest, Md5};
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{
    Channel, ChannelError, ChannelManager, ManagerSettings, PairingStore, RunningManager, SupervisorSettings,
};
use nanobot_testkit::fake_wecom::{BOT_NAME, FakeWecom, MixedPart};
use nanobot_testkit::secrets::error_text;
use nanobot_wecom::{MAX_STREAM_BYTES, UPLOAD_CHUNK_BYTES, WecomChannel, WecomSettings};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const BOT: &str = "aib-test-1";
const SECRET: &str = "SEKRIT-wecom-0123456789";
const WITHIN: Duration = Duration::from_secs(30);

/// A small PNG's first bytes (the channel names an image by its signature).
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake image body";

fn req_id(frame: &Value) -> String {
    frame["headers"]["req_id"].as_str().unwrap().to_owned()
}

fn msgid(frame: &Value) -> String {
    frame["body"]["msgid"].as_str().unwrap().to_owned()
}

/// The block the tests start from: the fake's address, alice allowed.
fn block(fake: &FakeWecom, secret: &str, extra: &Value) -> Value {
    let mut block = json!({"enabled": true, "botId": BOT, "secret": secret, "allowFrom": ["alice"],
        "wsUrl": fake.url()});
    if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    block
}

/// A channel on the fake, media from loopback allowed (the fake serves them there).
fn channel(block: &Value, media: &std::path::Path) -> Result<WecomChannel> {
    Ok(WecomChannel::new(WecomSettings::from_block(block)?, media)
        .with_ssrf_guard(SsrfGuard::from_cidrs(&["127.0.0.1/32"])?))
}

async fn subscribed(channel: &WecomChannel, n: u64) -> Result<()> {
    let mut c = channel.connections();
    tokio::time::timeout(WITHIN, c.wait_for(|x| *x >= n))
        .await
        .context("no subscription within 30 s")??;
    Ok(())
}

struct Harness {
    fake: FakeWecom,
    channel: Arc<WecomChannel>,
    bus: Arc<InProcessBus>,
    manager: RunningManager,
    media: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Harness {
    async fn start(extra: Value) -> Result<Self> {
        let fake = FakeWecom::start(BOT, SECRET).await?;
        let media = tempfile::tempdir()?;
        let data = tempfile::tempdir()?;
        let pairing = Arc::new(PairingStore::open(data.path().join("pairing.json"))?);
        let channel = Arc::new(channel(&block(&fake, SECRET, &extra), media.path())?.with_pairing(pairing));
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
        subscribed(&h.channel, 1).await?;
        Ok(h)
    }

    async fn inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(WITHIN, self.bus.consume_inbound())
            .await
            .context("no inbound message within 30 s")?
            .context("bus closed")
    }

    async fn publish(&self, kind: OutboundKind, chat: &str, text: &str) -> Result<()> {
        self.bus
            .publish_outbound(OutboundMessage::of_kind(kind, "wecom", chat, text))
            .await?;
        Ok(())
    }

    async fn stop(self) {
        assert!(
            self.manager.stop(WITHIN).await,
            "the channel did not stop when cancelled"
        );
    }
}

#[tokio::test]
async fn the_owner_is_answered_on_the_callback_and_a_stranger_gets_a_pairing_code() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let subscribe = &h.fake.wait_frames("aibot_subscribe", 1, WITHIN).await?[0];
    assert_eq!(subscribe.body, json!({"bot_id": BOT, "secret": SECRET}));
    assert_eq!(subscribe.errcode, 0);

    let stranger = h.fake.deliver_text("mallory", "let me in");
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent[0].cmd, "aibot_respond_msg");
    assert_eq!(sent[0].req_id, req_id(&stranger));
    assert_eq!(sent[0].finish(), Some(true));
    assert!(
        sent[0].content().unwrap().contains("pairing code"),
        "{:?}",
        sent[0]
    );

    let hello = h.fake.deliver_text("alice", "hello");
    let inbound = h.inbound().await?;
    assert_eq!(
        (
            inbound.channel.as_str(),
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str()
        ),
        ("wecom", "alice", "alice")
    );
    assert_eq!(
        inbound.content, "hello",
        "the stranger's message never reached the bus"
    );
    assert_eq!(inbound.metadata["message_id"], json!(msgid(&hello)));
    assert_eq!(inbound.metadata["msg_type"], "text");
    assert_eq!(inbound.metadata["chat_type"], "single");
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], false);

    // Progress, then the answer: each its own stream on the chat's callback, as 0.3.5 sends them.
    h.publish(OutboundKind::Progress, "alice", "working…").await?;
    h.publish(OutboundKind::Reply, "alice", "final answer").await?;
    let sent = h.fake.wait_sent(3, WITHIN).await?;
    let (progress, answer) = (&sent[1], &sent[2]);
    for s in [progress, answer] {
        assert_eq!(
            (s.cmd.as_str(), s.req_id.as_str(), s.msgtype()),
            ("aibot_respond_msg", req_id(&hello).as_str(), Some("stream"))
        );
    }
    assert_eq!(
        (progress.content(), progress.finish()),
        (Some("working…"), Some(false))
    );
    assert_eq!(
        (answer.content(), answer.finish()),
        (Some("final answer"), Some(true))
    );
    assert_ne!(progress.stream_id(), answer.stream_id());
    assert!(answer.stream_id().unwrap().starts_with("stream_"));
    assert!(
        h.fake.frames().iter().all(|f| f.errcode <= 0),
        "every frame was accepted: {:?}",
        h.fake.frames()
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn groups_take_allowed_members_and_repeated_messages_are_dropped() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let outsider = h.fake.deliver_group_text("group-1", "mallory", "me too");
    let hello = h.fake.text("alice", "hello");
    h.fake.deliver(&hello);
    h.fake.deliver(&hello);
    let group = h.fake.deliver_group_text("group-1", "alice", "hi all");

    assert_eq!(h.inbound().await?.content, "hello");
    let inbound = h.inbound().await?;
    assert_eq!(
        inbound.content,
        format!("@{BOT_NAME} hi all"),
        "the repeated msgid was dropped; the mention stays, as in 0.3.5"
    );
    assert_eq!(
        (inbound.chat_id.as_str(), inbound.sender_id.as_str()),
        ("group-1", "alice")
    );
    assert_eq!(inbound.metadata["chat_type"], "group");
    assert_eq!(inbound.metadata[nanobot_bus::META_IS_GROUP], true);
    assert_eq!(inbound.metadata["message_id"], json!(msgid(&group)));

    h.publish(OutboundKind::Reply, "group-1", "hello group").await?;
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent.len(), 1, "no pairing code in a group: {sent:?}");
    assert_eq!(sent[0].req_id, req_id(&group));
    assert_ne!(sent[0].req_id, req_id(&outsider));
    assert_eq!(
        (sent[0].content(), sent[0].finish()),
        (Some("hello group"), Some(true))
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn media_come_in_decrypted_and_files_go_out_in_three_steps() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let wecom_dir = h.media.path().join("wecom");

    h.fake.deliver_image("alice", PNG);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.metadata["msg_type"], "image");
    assert_eq!(inbound.media.len(), 1);
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(saved.starts_with(&wecom_dir), "{saved:?}");
    assert!(saved.to_string_lossy().ends_with(".png"), "{saved:?}");
    assert_eq!(std::fs::read(saved)?, PNG, "decrypted");
    assert_eq!(inbound.content, format!("[image: {}]", saved.display()));

    h.fake.deliver_file("alice", "notes 1.txt", b"some notes");
    let inbound = h.inbound().await?;
    let saved = std::path::Path::new(&inbound.media[0]);
    assert!(
        saved.to_string_lossy().ends_with("_notes_1.txt"),
        "the name served with the file: {saved:?}"
    );
    assert_eq!(std::fs::read(saved)?, b"some notes");
    assert_eq!(inbound.content, format!("[file: {}]", saved.display()));

    h.fake.deliver(&h.fake.voice("alice", "spoken words"));
    let inbound = h.inbound().await?;
    assert_eq!(
        (inbound.content.as_str(), inbound.metadata["msg_type"].as_str()),
        ("[voice] spoken words", Some("voice"))
    );

    let mixed = h
        .fake
        .mixed(None, "alice", &[MixedPart::Text("see"), MixedPart::Image(PNG)]);
    h.fake.deliver(&mixed);
    let inbound = h.inbound().await?;
    assert_eq!(inbound.media.len(), 1);
    assert_eq!(std::fs::read(&inbound.media[0])?, PNG);
    assert_eq!(inbound.content, format!("see\n[image: {}]", inbound.media[0]));
    assert_eq!(h.fake.downloads().len(), 3);

    // A file of two chunks goes out, then the text, both on the chat's last callback.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("report.pdf");
    let bytes: Vec<u8> = (0..UPLOAD_CHUNK_BYTES + 1000).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &bytes)?;
    let mut reply = OutboundMessage::reply("wecom", "alice", "here it is");
    reply.media = vec![file.display().to_string()];
    h.channel.send(&reply).await?;
    let uploads = h.fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(
        (uploads[0].filename.as_str(), uploads[0].media_type.as_str()),
        ("report.pdf", "file")
    );
    assert_eq!(uploads[0].data, bytes);
    assert_eq!(uploads[0].md5, format!("{:x}", Md5::digest(&bytes)));
    let steps: Vec<String> = h
        .fake
        .frames()
        .into_iter()
        .filter(|f| f.cmd.starts_with("aibot_upload_media"))
        .map(|f| f.cmd)
        .collect();
    assert_eq!(
        steps,
        [
            "aibot_upload_media_init",
            "aibot_upload_media_chunk",
            "aibot_upload_media_chunk",
            "aibot_upload_media_finish"
        ]
    );
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        (sent[0].cmd.as_str(), sent[0].req_id.as_str()),
        ("aibot_respond_msg", req_id(&mixed).as_str())
    );
    assert_eq!(
        sent[0].body,
        json!({"msgtype": "file", "file": {"media_id": uploads[0].media_id}})
    );
    assert_eq!(
        (sent[1].content(), sent[1].req_id.as_str()),
        (Some("here it is"), req_id(&mixed).as_str())
    );

    // A file that cannot be read is named in the text instead.
    let mut reply = OutboundMessage::reply("wecom", "alice", "and this");
    reply.media = vec![dir.path().join("missing.txt").display().to_string()];
    h.channel.send(&reply).await?;
    let sent = h.fake.wait_sent(3, WITHIN).await?;
    assert_eq!(
        sent[2].content(),
        Some("and this\n[file upload failed: missing.txt]")
    );
    h.stop().await;
    Ok(())
}

/// The head of an HTTP request or answer read from `tcp` (up to the blank line), and what came after it.
async fn read_head(tcp: &mut TcpStream) -> Result<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            return Ok((head, data[end + 4..].to_vec()));
        }
        let n = tcp.read(&mut buf).await?;
        anyhow::ensure!(n > 0, "the connection ended inside the head");
        data.extend_from_slice(&buf[..n]);
    }
}

/// The body the fake serves at `url` (a media file, still encrypted), with a plain HTTP/1.1 GET.
async fn raw_get(url: &str) -> Result<Vec<u8>> {
    let rest = url.strip_prefix("http://").context("not http")?;
    let (host, path) = rest.split_once('/').context("no path")?;
    let mut tcp = TcpStream::connect(host).await?;
    tcp.write_all(format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let (head, mut body) = read_head(&mut tcp).await?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    tcp.read_to_end(&mut body).await?;
    Ok(body)
}

/// A media server on loopback that takes one download and holds it until `release` gives the body: `requested`
/// fires once the request has arrived.
struct HeldDownload {
    url: String,
    requested: oneshot::Receiver<()>,
    release: oneshot::Sender<Vec<u8>>,
}

impl HeldDownload {
    async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/media/held", listener.local_addr()?);
        let (requested_tx, requested) = oneshot::channel();
        let (release, released) = oneshot::channel::<Vec<u8>>();
        tokio::spawn(async move {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            if read_head(&mut tcp).await.is_err() {
                return;
            }
            let _ = requested_tx.send(());
            let Ok(body) = released.await else { return };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: \
                 close\r\n\r\n",
                body.len()
            );
            let _ = tcp.write_all(head.as_bytes()).await;
            let _ = tcp.write_all(&body).await;
            let _ = tcp.shutdown().await;
        });
        Ok(Self {
            url,
            requested,
            release,
        })
    }
}

#[tokio::test]
async fn a_slow_download_holds_up_neither_a_welcome_nor_other_chats() -> Result<()> {
    let h = Harness::start(json!({"allowFrom": ["alice", "bob"], "welcomeMessage": "Welcome!"})).await?;
    let held = HeldDownload::start().await?;
    let mut image = h.fake.image("alice", PNG);
    let sealed = raw_get(image["body"]["image"]["url"].as_str().context("no url")?).await?;
    image["body"]["image"]["url"] = json!(held.url);
    h.fake.deliver(&image);
    tokio::time::timeout(WITHIN, held.requested)
        .await
        .context("the download did not start")??;

    // While alice's image is downloading: her next message, bob opening the chat, and bob's message.
    let later = h.fake.deliver_text("alice", "and this");
    let enter = h.fake.deliver_enter_chat("bob");
    h.fake.deliver_text("bob", "hi from bob");
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(
        (sent[0].cmd.as_str(), sent[0].req_id.as_str()),
        ("aibot_respond_welcome_msg", req_id(&enter).as_str()),
        "welcomed at once"
    );
    let bob = h.inbound().await?;
    assert_eq!(
        (bob.chat_id.as_str(), bob.content.as_str()),
        ("bob", "hi from bob"),
        "another chat goes first"
    );

    held.release.send(sealed).ok().context("the download went away")?;
    let first = h.inbound().await?;
    assert_eq!(first.chat_id, "alice");
    assert_eq!(first.metadata["message_id"], json!(msgid(&image)));
    assert_eq!(std::fs::read(&first.media[0])?, PNG, "decrypted");
    let second = h.inbound().await?;
    assert_eq!(
        (second.chat_id.as_str(), second.content.as_str()),
        ("alice", "and this"),
        "alice's messages in the order she sent them"
    );
    // Answers go on alice's last message.
    h.publish(OutboundKind::Reply, "alice", "got both").await?;
    let sent = h.fake.wait_sent(2, WITHIN).await?;
    assert_eq!(sent[1].content(), Some("got both"));
    assert_eq!(sent[1].req_id, req_id(&later));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_of_messages_with_alike_ids_are_kept_apart() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let mut first = h.fake.file("alice", "notes.txt", b"first notes");
    let mut second = h.fake.file("alice", "notes.txt", b"second notes");
    // The same first 16 alphanumerics, the same file name.
    first["body"]["msgid"] = json!("0123456789abcdef-first");
    second["body"]["msgid"] = json!("0123456789abcdef-second");
    h.fake.deliver(&first);
    let a = h.inbound().await?;
    h.fake.deliver(&second);
    let b = h.inbound().await?;
    assert_ne!(a.media[0], b.media[0]);
    assert!(a.media[0].ends_with("_notes.txt"), "{:?}", a.media);
    assert_eq!(std::fs::read(&a.media[0])?, b"first notes", "not overwritten");
    assert_eq!(std::fs::read(&b.media[0])?, b"second notes");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn long_answers_are_split_and_a_chat_without_a_callback_gets_markdown() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    let hello = h.fake.deliver_text("alice", "write a lot");
    h.inbound().await?;
    let long = format!("{} {}", "word ".repeat(5000), "字".repeat(8000));
    h.channel
        .send(&OutboundMessage::reply("wecom", "alice", long.clone()))
        .await?;
    let sent = h.fake.sent();
    assert!(sent.len() >= 2, "{}", sent.len());
    for s in &sent {
        assert_eq!(s.req_id, req_id(&hello));
        assert_eq!(s.finish(), Some(true), "each piece is a finished stream");
        assert!(s.content().unwrap().len() <= MAX_STREAM_BYTES);
    }
    let joined: String = sent.iter().filter_map(|s| s.content()).collect();
    assert_eq!(
        joined.chars().filter(|c| *c == '字').count(),
        8000,
        "nothing is lost"
    );
    assert_eq!(joined.matches("word").count(), 5000);

    // No callback for bob (a scheduled message): a proactive markdown message.
    h.channel
        .send(&OutboundMessage::reply("wecom", "bob", "cron push"))
        .await?;
    let last = h.fake.sent().pop().context("nothing sent")?;
    assert_eq!(last.cmd, "aibot_send_msg");
    assert_eq!(
        last.body,
        json!({"chatid": "bob", "msgtype": "markdown", "markdown": {"content": "cron push"}})
    );
    let err = h
        .channel
        .send(&OutboundMessage::reply("wecom", "", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::InvalidChatId { .. }), "{err:?}");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_allowed_user_entering_the_chat_is_welcomed_by_userid() -> Result<()> {
    let h = Harness::start(json!({"welcomeMessage": "Welcome to nanobot!"})).await?;
    let stranger = h.fake.deliver_enter_chat("mallory");
    let enter = h.fake.deliver_enter_chat("alice");
    assert!(
        enter["body"].get("chatid").is_none(),
        "the real event has no chatid"
    );
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(sent.len(), 1, "no welcome for the stranger: {sent:?}");
    assert_eq!(sent[0].cmd, "aibot_respond_welcome_msg");
    assert_eq!(sent[0].req_id, req_id(&enter));
    assert_ne!(sent[0].req_id, req_id(&stranger));
    assert_eq!(
        sent[0].body,
        json!({"msgtype": "text", "text": {"content": "Welcome to nanobot!"}})
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_channel_comes_back_after_the_server_goes_away() -> Result<()> {
    let h = Harness::start(json!({})).await?;
    h.fake.drop_connections();
    subscribed(&h.channel, 2).await?;
    h.fake.wait_subscribed(2, WITHIN).await?;
    let hello = h.fake.deliver_text("alice", "still there?");
    assert_eq!(h.inbound().await?.content, "still there?");
    h.publish(OutboundKind::Reply, "alice", "yes").await?;
    let sent = h.fake.wait_sent(1, WITHIN).await?;
    assert_eq!(
        (sent[0].req_id.as_str(), sent[0].connection, sent[0].content()),
        (req_id(&hello).as_str(), 2, Some("yes"))
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_wrong_secret_is_one_clear_error_that_never_shows_it() -> Result<()> {
    let fake = FakeWecom::start(BOT, SECRET).await?;
    let media = tempfile::tempdir()?;
    let wrong = "SEKRIT-the-wrong-one";
    let channel = channel(&block(&fake, wrong, &json!({})), media.path())?;
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let err = tokio::time::timeout(WITHIN, channel.run(bus, CancellationToken::new()))
        .await
        .context("run did not end")?
        .unwrap_err();
    assert!(
        matches!(err, ChannelError::Auth { .. }),
        "stops the channel: {err:?}"
    );
    let shown = error_text(&err);
    assert!(shown.contains("WeCom refused botId/secret"), "{shown}");
    assert!(
        shown.contains("channels.wecom.secret") && shown.contains(BOT),
        "{shown}"
    );
    assert!(!shown.contains("SEKRIT"), "{shown}");
    assert_eq!(fake.refused(), 1);
    assert_eq!(fake.subscribed(), 0);
    let err = channel
        .send(&OutboundMessage::reply("wecom", "alice", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ChannelError::Transient { .. }),
        "not connected: {err:?}"
    );
    Ok(())
}

#[tokio::test]
async fn another_connection_taking_the_bot_over_stops_the_channel() -> Result<()> {
    let fake = FakeWecom::start(BOT, SECRET).await?;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(channel(&block(&fake, SECRET, &json!({})), media.path())?);
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(8));
    let running = {
        let channel = channel.clone();
        tokio::spawn(async move { channel.run(bus, CancellationToken::new()).await })
    };
    subscribed(&channel, 1).await?;
    fake.kick_connections();
    let err = tokio::time::timeout(WITHIN, running)
        .await
        .context("run did not end")??
        .unwrap_err();
    assert!(
        matches!(err, ChannelError::Auth { .. }),
        "not reconnecting: {err:?}"
    );
    let shown = error_text(&err);
    assert!(
        shown.contains("another connection") && shown.contains("took over the bot"),
        "{shown}"
    );
    assert!(!shown.contains("SEKRIT"), "{shown}");
    assert_eq!(fake.connections(), 1);
    Ok(())
}

#[tokio::test]
async fn answered_pings_keep_the_connection_and_unanswered_ones_end_it() -> Result<()> {
    let fake = FakeWecom::start(BOT, SECRET).await?;
    let media = tempfile::tempdir()?;
    let channel = Arc::new(
        channel(&block(&fake, SECRET, &json!({})), media.path())?
            .with_ping_interval(Duration::from_millis(200)),
    );
    let bus = Arc::new(InProcessBus::new(8));
    let running = {
        let channel = channel.clone();
        let bus: Arc<dyn Bus> = bus.clone();
        tokio::spawn(async move { channel.run(bus, CancellationToken::new()).await })
    };
    subscribed(&channel, 1).await?;
    // More pings than the two that may go unanswered: answered, they keep the connection.
    fake.wait_pings(4, WITHIN).await?;
    fake.deliver_text("alice", "still here");
    let inbound = tokio::time::timeout(WITHIN, bus.consume_inbound())
        .await?
        .context("bus closed")?;
    assert_eq!(inbound.content, "still here");
    assert!(!running.is_finished());

    fake.answer_pings(false);
    let err = tokio::time::timeout(WITHIN, running)
        .await
        .context("run did not end")??
        .unwrap_err();
    assert!(
        matches!(err, ChannelError::Transient { .. }),
        "the manager reconnects: {err:?}"
    );
    let shown = error_text(&err);
    assert!(shown.contains("answered none of the last 2 pings"), "{shown}");
    let unanswered = fake
        .frames()
        .into_iter()
        .filter(|f| f.cmd == "ping" && f.errcode == -1)
        .count();
    assert!(unanswered >= 2, "{unanswered}");
    assert_eq!(fake.connections(), 1);
    Ok(())
}
