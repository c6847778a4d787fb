//! The channel end to end against the real bridge.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use nanobot_bus::OutboundMessage;
use nanobot_channels::{Channel, ChannelError, Transcribe, TranscribeError};
use nanobot_whatsapp::LinkState;
use serde_json::json;

use crate::{ALICE, Control, GROUP, ME, ME_LID, Running, STRANGER, WAIT, alive};

fn block(policy: &str) -> serde_json::Value {
    json!({"enabled": true, "allowFrom": ["+49 1555 0000002"], "groupPolicy": policy})
}

#[tokio::test]
async fn an_allowed_user_is_answered_and_read_receipts_sent() -> Result<()> {
    let Some(mut r) = Running::start(block("open"), false).await? else {
        return Ok(());
    };
    r.control
        .message(
            json!({"id": "MSG1", "chat": ALICE, "sender": ALICE, "text": "hello bot", "pushName": "Alice"}),
        )
        .await?;
    let m = r.inbound().await?;
    assert_eq!(m.channel, "whatsapp");
    assert_eq!(m.sender_id, "4915550000002", "allowFrom matches the phone number");
    assert_eq!(m.chat_id, ALICE);
    assert_eq!(m.content, "hello bot");
    assert_eq!(m.metadata["message_id"], "MSG1");
    assert_eq!(m.metadata["is_group"], false);
    assert_eq!(m.metadata["push_name"], "Alice");
    let read = r.control.next_of("read").await?;
    assert_eq!(read["id"], "MSG1");
    assert_eq!(read["chat"], ALICE);

    // The same message delivered again is handled once: the next thing on the bus is the next message.
    r.control
        .message(json!({"id": "MSG1", "chat": ALICE, "sender": ALICE, "text": "hello bot"}))
        .await?;
    r.control
        .message(json!({"id": "MSG2", "chat": ALICE, "sender": ALICE, "text": "second"}))
        .await?;
    assert_eq!(r.inbound().await?.content, "second");

    // The reply goes through the bridge to the chat.
    r.channel
        .send(&OutboundMessage::reply("whatsapp", ALICE, "hi **Alice**"))
        .await?;
    let sent = r.control.next_of("sent").await?;
    assert_eq!(sent["to"], ALICE);
    assert_eq!(sent["kind"], "text");
    assert_eq!(sent["text"], "hi **Alice**");

    // A phone number as chat id is addressed as a user JID.
    r.channel
        .send(&OutboundMessage::reply("whatsapp", "+4915550000002", "by number"))
        .await?;
    assert_eq!(r.control.next_of("sent").await?["to"], ALICE);

    // A refused send is an error of the send, not a silent loss.
    r.control.cmd(json!({"failSends": true})).await?;
    r.control.next_of("configured").await?;
    let err = r
        .channel
        .send(&OutboundMessage::reply("whatsapp", ALICE, "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Rejected { .. }), "{err:?}");
    assert!(format!("{:?}", err).contains("scripted send failure"), "{err:?}");
    let err = r
        .channel
        .send(&OutboundMessage::reply("whatsapp", "not a jid", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::InvalidChatId { .. }), "{err:?}");
    assert!(r.stop().await?.is_ok());
    Ok(())
}

#[tokio::test]
async fn a_stranger_is_not_served_but_gets_a_pairing_code() -> Result<()> {
    let Some(mut r) = Running::start(block("open"), true).await? else {
        return Ok(());
    };
    r.control
        .message(json!({"chat": STRANGER, "sender": STRANGER, "text": "let me in"}))
        .await?;
    let sent = r.control.next_of("sent").await?;
    assert_eq!(sent["to"], STRANGER);
    assert!(
        sent["text"].as_str().unwrap_or_default().contains("pairing code"),
        "{sent}"
    );
    // A stranger in a group gets nothing, and nothing of theirs reaches the agent: the next message on the bus is
    // Alice's, sent after both.
    r.control
        .message(json!({"chat": GROUP, "sender": STRANGER, "isGroup": true, "text": "group hello"}))
        .await?;
    r.control
        .message(json!({"chat": ALICE, "sender": ALICE, "text": "from alice"}))
        .await?;
    let m = r.inbound().await?;
    assert_eq!(m.content, "from alice");
    assert!(r.stop().await?.is_ok());
    Ok(())
}

#[tokio::test]
async fn group_policy_mention_needs_a_mention_or_a_reply() -> Result<()> {
    let Some(mut r) = Running::start(block("mention"), false).await? else {
        return Ok(());
    };
    let group = |text: &str| json!({"chat": GROUP, "sender": ALICE, "isGroup": true, "text": text});
    r.control.message(group("not for the bot")).await?;
    let mut mentioned = group("@bot what time is it");
    mentioned["mentions"] = json!([ME]);
    r.control.message(mentioned).await?;
    let m = r.inbound().await?;
    assert_eq!(
        m.content, "@bot what time is it",
        "the unmentioned message was skipped"
    );
    assert_eq!(m.chat_id, GROUP);
    assert_eq!(m.metadata["is_group"], true);
    assert_eq!(m.metadata["participant"], ALICE);

    // A reply to one of the bot's messages counts; so does a mention of its LID.
    let mut reply = group("replying to you");
    reply["quotedParticipant"] = json!(ME_LID);
    r.control.message(reply).await?;
    let m = r.inbound().await?;
    assert_eq!(m.content, "replying to you");
    assert_eq!(m.metadata["is_reply_to_bot"], true);

    // A LID-only sender is named by phone once the bridge reported both ids for them.
    r.control
        .message(
            json!({"chat": GROUP, "sender": "12345@lid", "senderAlt": ALICE, "isGroup": true,
                        "text": "@bot via lid", "mentions": [ME]}),
        )
        .await?;
    assert_eq!(r.inbound().await?.sender_id, "4915550000002");
    assert!(r.stop().await?.is_ok());
    Ok(())
}

#[tokio::test]
async fn group_policy_open_and_allowed_groups() -> Result<()> {
    let cfg = json!({"allowFrom": ["4915550000002", GROUP], "groupPolicy": "open"});
    let Some(mut r) = Running::start(cfg, false).await? else {
        return Ok(());
    };
    r.control
        .message(json!({"chat": GROUP, "sender": ALICE, "isGroup": true, "text": "no mention needed"}))
        .await?;
    assert_eq!(r.inbound().await?.content, "no mention needed");
    // The group is on allowFrom: its other members are served too.
    r.control
        .message(json!({"chat": GROUP, "sender": STRANGER, "isGroup": true, "text": "member"}))
        .await?;
    let m = r.inbound().await?;
    assert_eq!(
        (m.content.as_str(), m.sender_id.as_str()),
        ("member", "4915550000666")
    );
    // Our own messages and status broadcasts are never taken as input.
    r.control
        .message(json!({"chat": GROUP, "sender": ALICE, "isGroup": true, "fromMe": true, "text": "mine"}))
        .await?;
    r.control
        .message(json!({"chat": "status@broadcast", "sender": ALICE, "text": "status"}))
        .await?;
    r.control
        .message(json!({"chat": GROUP, "sender": ALICE, "isGroup": true, "text": "last"}))
        .await?;
    assert_eq!(r.inbound().await?.content, "last");
    assert!(r.stop().await?.is_ok());
    Ok(())
}

/// Transcribes by reading the file, so the test proves the saved voice note is what was sent.
#[derive(Debug)]
struct ReadsFile;

#[async_trait]
impl Transcribe for ReadsFile {
    async fn transcribe(&self, path: &Path) -> Result<String, TranscribeError> {
        let bytes = std::fs::read(path).map_err(|e| TranscribeError(Box::new(e)))?;
        Ok(format!("voice said: {}", String::from_utf8_lossy(&bytes)))
    }
}

#[tokio::test]
async fn images_documents_and_voice_notes() -> Result<()> {
    let Some(mut r) =
        Running::start_with(block("open"), false, |c| c.with_transcriber(Arc::new(ReadsFile))).await?
    else {
        return Ok(());
    };
    let png = b"\x89PNG\r\n\x1a\nnot really an image";
    r.control
        .message(
            json!({"id": "IMG/../1", "chat": ALICE, "sender": ALICE, "text": "look at this",
            "media": {"kind": "image", "mimetype": "image/png", "data": B64.encode(png)}}),
        )
        .await?;
    let m = r.inbound().await?;
    assert_eq!(m.media.len(), 1);
    let saved = Path::new(&m.media[0]);
    assert_eq!(std::fs::read(saved)?, png);
    assert!(
        saved.starts_with(r.home.path().join("media/whatsapp")),
        "{saved:?}"
    );
    assert!(m.media[0].ends_with(".png"), "{m:?}");
    assert_eq!(m.content, format!("look at this\n[image: {}]", m.media[0]));

    r.control
        .message(
            json!({"chat": ALICE, "sender": ALICE, "media": {"kind": "document",
            "mimetype": "application/pdf", "fileName": "../../report.pdf", "data": B64.encode(b"%PDF-1.4")}}),
        )
        .await?;
    let m = r.inbound().await?;
    assert!(m.media[0].ends_with(".pdf"), "{m:?}");
    assert!(Path::new(&m.media[0]).starts_with(r.home.path().join("media/whatsapp")));
    assert_eq!(m.content, format!("[file: {}]", m.media[0]));

    // A voice note is transcribed: the text replaces the audio (as in nanobot 0.3.5).
    r.control
        .message(json!({"chat": ALICE, "sender": ALICE, "media": {"kind": "audio",
            "mimetype": "audio/ogg; codecs=opus", "voice": true, "data": B64.encode(b"turn on the lights")}}))
        .await?;
    let m = r.inbound().await?;
    assert_eq!(m.content, "voice said: turn on the lights");
    assert!(m.media.is_empty());
    // A music file is not a voice note: it is passed on as audio.
    r.control
        .message(json!({"chat": ALICE, "sender": ALICE, "media": {"kind": "audio",
            "mimetype": "audio/mpeg", "data": B64.encode(b"ID3")}}))
        .await?;
    let m = r.inbound().await?;
    assert!(
        m.content.starts_with("[audio: ") && m.media[0].ends_with(".mp3"),
        "{m:?}"
    );

    // Files go out typed by their extension, bytes intact.
    let dir = tempfile::tempdir()?;
    let (img, doc) = (dir.path().join("chart.png"), dir.path().join("notes.txt"));
    std::fs::write(&img, png)?;
    std::fs::write(&doc, "plain notes")?;
    let mut out = OutboundMessage::reply("whatsapp", ALICE, "");
    out.media = vec![img.display().to_string(), doc.display().to_string()];
    r.channel.send(&out).await?;
    let sent = r.control.next_of("sent").await?;
    assert_eq!(
        (sent["kind"].as_str(), sent["mimetype"].as_str()),
        (Some("image"), Some("image/png"))
    );
    assert_eq!(B64.decode(sent["data"].as_str().unwrap_or_default())?, png);
    let sent = r.control.next_of("sent").await?;
    assert_eq!(sent["kind"], "document");
    assert_eq!(sent["fileName"], "notes.txt");
    assert_eq!(
        B64.decode(sent["data"].as_str().unwrap_or_default())?,
        b"plain notes"
    );
    // A missing file is an error naming it.
    out.media = vec![dir.path().join("gone.pdf").display().to_string()];
    let err = r.channel.send(&out).await.unwrap_err();
    assert!(err.to_string().contains("gone.pdf"), "{err}");
    assert!(r.stop().await?.is_ok());
    Ok(())
}

#[tokio::test]
async fn a_crashed_bridge_is_restarted_and_a_stopped_channel_leaves_no_process() -> Result<()> {
    let Some(mut r) = Running::start(block("open"), false).await? else {
        return Ok(());
    };
    let first = r.control.hello["pid"].as_u64().unwrap_or_default() as u32;
    assert!(alive(first));
    r.control.cmd(json!({"crash": true})).await?;
    // A new bridge comes up and connects to WhatsApp again.
    let mut again = Control::accept(&r.listener).await?;
    let second = again.hello["pid"].as_u64().unwrap_or_default() as u32;
    assert_ne!(first, second);
    assert!(!alive(first), "the crashed bridge was reaped");
    let mut starts = r.channel.bridge_starts();
    let n = *tokio::time::timeout(WAIT, starts.wait_for(|n| *n >= 2)).await??;
    assert_eq!(n, 2, "one restart");
    again.open().await?;
    again
        .message(json!({"chat": ALICE, "sender": ALICE, "text": "after the crash"}))
        .await?;
    assert_eq!(r.inbound().await?.content, "after the crash");
    r.channel
        .send(&OutboundMessage::reply("whatsapp", ALICE, "still here"))
        .await?;
    assert_eq!(again.next_of("sent").await?["text"], "still here");

    let channel = r.channel.clone();
    assert!(r.stop().await?.is_ok());
    assert!(!alive(second), "stopping the channel stops its bridge");
    assert_eq!(channel.bridge_pid(), None);
    assert_eq!(*channel.link_state().borrow(), LinkState::Stopped);
    Ok(())
}

#[tokio::test]
async fn a_logged_out_device_is_reported_and_not_retried() -> Result<()> {
    let Some(mut r) = Running::start(block("open"), false).await? else {
        return Ok(());
    };
    let pid = r.control.hello["pid"].as_u64().unwrap_or_default() as u32;
    r.control
        .cmd(json!({"emit": "closed", "loggedOut": true, "reason": "Stream Errored (conflict)"}))
        .await?;
    let ended = tokio::time::timeout(WAIT, &mut r.task).await??;
    let err = ended.unwrap_err();
    assert!(
        matches!(err, ChannelError::Auth { .. }),
        "fatal for the supervisor: {err:?}"
    );
    let chain = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(chain.contains("logged this device out"), "{chain}");
    assert!(chain.contains("nanobot channels login whatsapp"), "{chain}");
    assert_eq!(*r.channel.link_state().borrow(), LinkState::LoggedOut);
    assert!(!alive(pid));
    assert_eq!(
        *r.channel.bridge_starts().borrow(),
        1,
        "a logged-out device is not retried"
    );
    Ok(())
}

#[tokio::test]
async fn an_unlinked_device_says_to_log_in() -> Result<()> {
    let home = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let Some(s) = crate::settings(block("open"), home.path(), &listener.local_addr()?.to_string()) else {
        return Ok(());
    };
    let channel = Arc::new(nanobot_whatsapp::WhatsAppChannel::new(s));
    let bus = Arc::new(nanobot_bus::InProcessBus::new(8));
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = {
        let (channel, cancel) = (channel.clone(), cancel.clone());
        tokio::spawn(async move { channel.run(bus, cancel).await })
    };
    let mut control = Control::accept(&listener).await?;
    assert_eq!(control.hello["mode"], "run");
    control.cmd(json!({"emit": "qr", "qr": "2@unlinked"})).await?;
    let err = tokio::time::timeout(WAIT, task).await??.unwrap_err();
    assert!(matches!(err, ChannelError::Auth { .. }), "{err:?}");
    let source = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(source.contains("nanobot channels login whatsapp"), "{source}");
    assert_eq!(*channel.link_state().borrow(), LinkState::NotLinked);
    Ok(())
}

#[tokio::test]
async fn send_without_a_connection_is_transient() -> Result<()> {
    let home = tempfile::tempdir()?;
    let Some(s) = crate::settings(block("open"), home.path(), "127.0.0.1:9") else {
        return Ok(());
    };
    let channel = nanobot_whatsapp::WhatsAppChannel::new(s);
    let err = channel
        .send(&OutboundMessage::reply("whatsapp", ALICE, "x"))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let _ = ME;
    Ok(())
}
