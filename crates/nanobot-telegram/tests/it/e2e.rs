//! End to end against the `telegram-test-api` emulator (through the fixing proxy of `nanobot_testkit::telegram_emulator`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_trait::async_trait;
use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{ChannelManager, ManagerSettings, PairingStore, Transcribe, TranscribeError};
use nanobot_config::{Secret, TelegramConfig, TelegramMode};
use nanobot_telegram::{TelegramChannel, TelegramSettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use nanobot_testkit::telegram_emulator::{BotEvent, Emulator};

const TOKEN: &str = "123456:TEST-token";

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn settings(emu: &Emulator, allow_from: &[&str]) -> TelegramSettings {
    let config = TelegramConfig {
        token: Secret::new(TOKEN),
        allow_from: allow_from.iter().map(|s| s.to_string()).collect(),
        base_url: Some(emu.api_url.clone()),
        ..TelegramConfig::default()
    };
    let mut settings = TelegramSettings::from_config(&config).unwrap();
    settings.poll_timeout = Duration::from_secs(1);
    settings
}

/// Runs `channel` under a ChannelManager on a fresh bus.
struct Running {
    bus: Arc<InProcessBus>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(channel: TelegramChannel) -> Self {
        let bus = Arc::new(InProcessBus::new(64));
        let cancel = CancellationToken::new();
        let mut manager = ChannelManager::new(ManagerSettings::default());
        manager.add(Arc::new(channel));
        let task = tokio::spawn(manager.run(bus.clone(), cancel.clone()));
        Self { bus, cancel, task }
    }

    async fn next_inbound(&self) -> Result<InboundMessage> {
        tokio::time::timeout(Duration::from_secs(20), self.bus.consume_inbound())
            .await
            .context("timed out waiting for an inbound message")?
            .context("bus closed")
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

#[tokio::test]
async fn message_reaches_the_bus_and_the_reply_appears_in_the_chat() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let channel = TelegramChannel::new(settings(&emu, &["42"]), media.path())?;
    let run = Running::start(channel);
    emu.wait_until_polling().await?;
    let commands: Vec<_> = emu
        .registered_commands()
        .iter()
        .map(|c| c["command"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        commands,
        [
            "start",
            "new",
            "compact",
            "stop",
            "restart",
            "status",
            "history",
            "goal",
            "trigger",
            "pairing",
            "model",
            "skill",
            "dream",
            "dream_log",
            "dream_restore",
            "dream_prompt",
            "evaluator_prompt",
            "help"
        ],
        "0.3.5's menu"
    );

    emu.user_says(TOKEN, 42, "alice", "hello bot").await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(inbound.channel, "telegram");
    assert_eq!(inbound.sender_id, "42|alice");
    assert_eq!(inbound.chat_id, "42");
    assert_eq!(inbound.content, "hello bot");
    assert!(inbound.metadata["message_id"].as_i64().is_some());
    assert_eq!(inbound.metadata["is_group"], json!(false));
    // The typing indicator starts while the agent works.
    let action = emu
        .wait_for(|e| match e {
            BotEvent::ChatAction { chat_id: 42, action } => Some(action.clone()),
            _ => None,
        })
        .await?;
    assert_eq!(action, "typing");

    run.bus
        .publish_outbound(OutboundMessage::reply(
            "telegram",
            "42",
            "**Hi** alice, `my_var` & snake_case_name <3",
        ))
        .await?;
    let sent = emu.next_sent().await?;
    assert_eq!(sent["chat_id"], json!(42));
    assert_eq!(sent["parse_mode"], json!("HTML"));
    assert_eq!(
        sent["text"],
        json!("<b>Hi</b> alice, <code>my_var</code> &amp; snake_case_name &lt;3")
    );

    let chat = emu.chat_messages(TOKEN, 42).await?;
    assert_eq!(chat.len(), 1, "{chat:?}");
    assert_eq!(chat[0]["text"], sent["text"]);
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_5000_character_reply_arrives_as_two_messages() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let run = Running::start(TelegramChannel::new(settings(&emu, &["*"]), media.path())?);
    emu.wait_until_polling().await?;

    let words: Vec<String> = (0..1000).map(|i| format!("w{i:03}")).collect();
    let long = words.join(" ");
    assert_eq!(long.len(), 4999);
    run.bus
        .publish_outbound(OutboundMessage::reply("telegram", "7", long.clone()))
        .await?;
    let first = emu.next_sent().await?;
    let second = emu.next_sent().await?;

    let chat = emu.chat_messages(TOKEN, 7).await?;
    assert_eq!(chat.len(), 2, "{chat:?}");
    let texts: Vec<&str> = chat
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        [first["text"].as_str().unwrap(), second["text"].as_str().unwrap()]
    );
    for text in &texts {
        assert!(text.chars().count() <= 4096);
    }
    let rejoined: Vec<&str> = texts.iter().flat_map(|t| t.split(' ')).collect();
    assert_eq!(
        rejoined,
        words.iter().map(String::as_str).collect::<Vec<_>>(),
        "nothing lost or reordered"
    );
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_burst_of_replies_to_one_chat_is_paced_within_telegrams_limits() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let run = Running::start(TelegramChannel::new(settings(&emu, &["*"]), media.path())?);
    emu.wait_until_polling().await?;

    // Five replies at once: Telegram (and the emulator's proxy) refuses a chat's third message within a second.
    for i in 0..5 {
        run.bus
            .publish_outbound(OutboundMessage::reply("telegram", "9", format!("reply {i}")))
            .await?;
    }
    for _ in 0..5 {
        emu.next_sent().await?;
    }
    let chat = emu.chat_messages(TOKEN, 9).await?;
    let texts: Vec<&str> = chat
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["reply 0", "reply 1", "reply 2", "reply 3", "reply 4"]);
    assert_eq!(emu.flood_waits(), 0, "the sends were queued, not refused");
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_denied_user_gets_a_pairing_code_the_owner_can_approve() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let home = tempfile::tempdir()?;
    let store = Arc::new(PairingStore::in_config_dir(home.path())?);
    let channel = TelegramChannel::new(settings(&emu, &["1|owner"]), home.path().join("media"))?
        .with_pairing(store.clone());
    let run = Running::start(channel);
    emu.wait_until_polling().await?;

    emu.user_says(TOKEN, 99, "mallory", "let me in").await?;
    let reply = emu.next_sent().await?;
    assert_eq!(reply["chat_id"], json!(99));
    let text = reply["text"].as_str().unwrap_or_default().to_string();
    let code = text
        .split_whitespace()
        .find(|w| {
            w.len() == 9
                && w.as_bytes()[4] == b'-'
                && w.chars().all(|c| c == '-' || c.is_ascii_alphanumeric())
        })
        .with_context(|| format!("no XXXX-XXXX code in {text:?}"))?
        .to_string();
    assert_eq!(
        run.bus.inbound_len(),
        0,
        "a denied message never reaches the agent"
    );
    assert!(
        !emu.chat_messages(TOKEN, 99).await?.is_empty(),
        "the code is visible in mallory's chat"
    );

    emu.user_says(TOKEN, 1, "owner", &format!("/pairing approve {code}"))
        .await?;
    let approved = emu.next_sent().await?;
    assert_eq!(approved["chat_id"], json!(1));
    assert!(
        approved["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Approved 99|mallory"),
        "{approved}"
    );
    assert!(store.is_approved("telegram", "99"));
    assert_eq!(
        run.bus.inbound_len(),
        0,
        "the owner's /pairing command is not forwarded"
    );

    emu.user_says(TOKEN, 99, "mallory", "thanks").await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.content.as_str()),
        ("99|mallory", "thanks")
    );
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn streaming_edits_one_message_then_finalises_it() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let mut s = settings(&emu, &["*"]);
    s.stream_edit_interval = Duration::ZERO;
    let run = Running::start(TelegramChannel::new(s, media.path())?);
    emu.wait_until_polling().await?;

    let sid = || "s1".to_string();
    for delta in ["Hel", "lo **wor"] {
        let msg = OutboundMessage::of_kind(
            OutboundKind::StreamDelta { stream_id: sid() },
            "telegram",
            "5",
            delta,
        );
        run.bus.publish_outbound(msg).await?;
    }
    let end = OutboundMessage::of_kind(
        OutboundKind::StreamEnd { stream_id: sid() },
        "telegram",
        "5",
        "Hello **world**",
    );
    run.bus.publish_outbound(end).await?;

    let first = emu.next_sent().await?;
    assert_eq!(first["text"], json!("Hel"));
    let edit1 = emu
        .wait_for(|e| {
            if let BotEvent::Edited(b) = e {
                Some(b.clone())
            } else {
                None
            }
        })
        .await?;
    assert_eq!(edit1["text"], json!("Hello **wor"));
    let last = emu
        .wait_for(|e| {
            if let BotEvent::Edited(b) = e {
                Some(b.clone())
            } else {
                None
            }
        })
        .await?;
    assert_eq!(last["text"], json!("Hello <b>world</b>"));
    assert_eq!(last["parse_mode"], json!("HTML"));
    assert_eq!(last["message_id"], edit1["message_id"]);
    run.stop().await;
    Ok(())
}

struct FakeTranscriber;

#[async_trait]
impl Transcribe for FakeTranscriber {
    async fn transcribe(&self, path: &Path) -> Result<String, TranscribeError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| TranscribeError(Box::new(e)))?;
        Ok(format!("{} bytes of speech", bytes.len()))
    }
}

#[tokio::test]
async fn photos_and_voice_notes_are_downloaded_and_transcribed() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let channel = TelegramChannel::new(settings(&emu, &["42"]), media.path())?
        .with_transcriber(Arc::new(FakeTranscriber));
    let run = Running::start(channel);
    emu.wait_until_polling().await?;

    emu.add_file("PHOTOBIG", "photos/file_1.jpg", b"\xFF\xD8jpeg-bytes");
    emu.add_file("VOICE1", "voice/file_2.oga", b"OggS-voice");
    let photo = json!({
        "caption": "look at this",
        "photo": [
            { "file_id": "PHOTOSMALL", "file_unique_id": "s", "width": 90, "height": 90 },
            { "file_id": "PHOTOBIG", "file_unique_id": "b", "width": 800, "height": 600 },
        ],
    });
    emu.user_sends(TOKEN, 42, "alice", photo).await?;
    let inbound = run.next_inbound().await?;
    let saved = media.path().join("PHOTOBIG.jpg");
    assert_eq!(inbound.media, [saved.display().to_string()]);
    assert_eq!(
        inbound.content,
        format!("look at this\n[image: {}]", saved.display())
    );
    assert_eq!(std::fs::read(&saved)?, b"\xFF\xD8jpeg-bytes");

    let voice = json!({ "voice": { "file_id": "VOICE1", "file_unique_id": "v", "duration": 2, "mime_type": "audio/ogg" } });
    emu.user_sends(TOKEN, 42, "alice", voice).await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(inbound.content, "[transcription: 10 bytes of speech]");
    assert_eq!(std::fs::read(media.path().join("VOICE1.ogg"))?, b"OggS-voice");
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn webhook_mode_receives_updates_pushed_by_the_server() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let port = nanobot_testkit::peers::free_port()?;
    let config = TelegramConfig {
        token: Secret::new(TOKEN),
        allow_from: vec!["42".into()],
        base_url: Some(emu.api_url.clone()),
        mode: TelegramMode::Webhook,
        webhook_url: format!("http://127.0.0.1:{port}/tg-hook"),
        webhook_listen_port: port,
        webhook_path: "/tg-hook".into(),
        ..TelegramConfig::default()
    };
    let media = tempfile::tempdir()?;
    let run = Running::start(TelegramChannel::new(
        TelegramSettings::from_config(&config)?,
        media.path(),
    )?);
    let url = emu
        .wait_for(|e| match e {
            BotEvent::SetWebhook(url) => Some(url.clone()),
            _ => None,
        })
        .await?;
    assert_eq!(url, Some(format!("http://127.0.0.1:{port}/tg-hook")));
    nanobot_testkit::peers::wait_for_port(&format!("127.0.0.1:{port}"), Duration::from_secs(10)).await?;

    emu.user_says(TOKEN, 42, "alice", "via webhook").await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(
        (inbound.sender_id.as_str(), inbound.content.as_str()),
        ("42|alice", "via webhook")
    );
    run.stop().await;
    Ok(())
}

/// The webhook's local server is bounded like every listener nanobot opens: clients that never finish a request
/// head are closed after the head timeout, more connections from one address than allowed get `503`, and the
/// server keeps receiving updates.
#[tokio::test]
async fn webhook_listener_closes_slow_clients_and_caps_one_address() -> Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let port = nanobot_testkit::peers::free_port()?;
    let config = TelegramConfig {
        token: Secret::new(TOKEN),
        allow_from: vec!["42".into()],
        base_url: Some(emu.api_url.clone()),
        mode: TelegramMode::Webhook,
        webhook_url: format!("http://127.0.0.1:{port}/tg-hook"),
        webhook_listen_port: port,
        webhook_path: "/tg-hook".into(),
        webhook_max_connections: 2,
        webhook_header_read_timeout_s: Some(0.3),
        ..TelegramConfig::default()
    };
    let settings = TelegramSettings::from_config(&config)?;
    let media = tempfile::tempdir()?;
    let refusals = Arc::new(CountRefusals::default());
    let run =
        Running::start(TelegramChannel::new(settings, media.path())?.with_refusal_observer(refusals.clone()));
    emu.wait_for(|e| match e {
        BotEvent::SetWebhook(url) => Some(url.clone()),
        _ => None,
    })
    .await?;
    let addr = format!("127.0.0.1:{port}");
    nanobot_testkit::peers::wait_for_port(&addr, Duration::from_secs(10)).await?;

    // Ten connections that start a head and never finish it: 2 + 8 are allowed, then the 11th is refused.
    let mut slow = Vec::new();
    for _ in 0..10 {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await?;
        tcp.write_all(b"POST /tg-hook HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await?;
        slow.push(tcp);
    }
    let mut over = tokio::net::TcpStream::connect(&addr).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), over.read_to_end(&mut answer)).await??;
    assert!(
        answer.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    for mut tcp in slow {
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "a slow-header connection stayed open");
    }
    // The refusals reached the observer (the gateway's metrics), named by their cause (the cap may also have
    // turned away a connection of the port probe above).
    let capped = refusals.count("telegram-webhook", "per_client_cap");
    let slow = refusals.count("telegram-webhook", "header_timeout");
    assert!(
        capped >= 1 && slow >= 1 && capped + slow >= 11,
        "capped {capped}, slow {slow}"
    );

    emu.user_says(TOKEN, 42, "alice", "still here").await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(inbound.content, "still here");
    run.stop().await;
    Ok(())
}

/// Counts refusals by server and cause, as the gateway's metrics do.
#[derive(Default)]
struct CountRefusals(std::sync::Mutex<std::collections::HashMap<(&'static str, &'static str), u64>>);

impl CountRefusals {
    fn count(&self, server: &'static str, kind: &'static str) -> u64 {
        self.0.lock().unwrap().get(&(server, kind)).copied().unwrap_or(0)
    }
}

impl nanobot_http::RefusalObserver for CountRefusals {
    fn refused(&self, server: &'static str, kind: &'static str) {
        *self.0.lock().unwrap().entry((server, kind)).or_default() += 1;
    }
}

#[tokio::test]
async fn webhook_rejects_requests_without_the_secret_token() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let port = nanobot_testkit::peers::free_port()?;
    let config = TelegramConfig {
        token: Secret::new(TOKEN),
        allow_from: vec!["42".into()],
        base_url: Some(emu.api_url.clone()),
        mode: TelegramMode::Webhook,
        webhook_url: format!("http://127.0.0.1:{port}/hook"),
        webhook_listen_port: port,
        webhook_path: "/hook".into(),
        webhook_secret_token: Secret::new("s3cret"),
        ..TelegramConfig::default()
    };
    let media = tempfile::tempdir()?;
    let run = Running::start(TelegramChannel::new(
        TelegramSettings::from_config(&config)?,
        media.path(),
    )?);
    emu.wait_for(|e| matches!(e, BotEvent::SetWebhook(_)).then_some(()))
        .await?;

    let update = json!({
        "update_id": 500,
        "message": {
            "message_id": 9, "date": 1_700_000_000,
            "from": { "id": 42, "is_bot": false, "first_name": "alice", "username": "alice" },
            "chat": { "id": 42, "type": "private", "first_name": "alice" },
            "text": "signed",
        },
    });
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/hook");
    let denied = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "wrong")
        .json(&update)
        .send()
        .await?;
    assert_eq!(denied.status().as_u16(), 401);
    let missing = http.post(&url).json(&update).send().await?;
    assert_eq!(missing.status().as_u16(), 401);
    assert_eq!(run.bus.inbound_len(), 0);
    let accepted = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "s3cret")
        .json(&update)
        .send()
        .await?;
    assert_eq!(accepted.status().as_u16(), 200);
    let inbound = run.next_inbound().await?;
    assert_eq!(inbound.content, "signed");
    run.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_approval_request_has_buttons_and_a_press_answers_it_for_allowed_users_only() -> Result<()> {
    init_logs();
    let Some(mut emu) = Emulator::start().await? else {
        return Ok(());
    };
    let media = tempfile::tempdir()?;
    let channel = TelegramChannel::new(settings(&emu, &["42"]), media.path())?;
    let run = Running::start(channel);
    emu.wait_until_polling().await?;

    let mut question =
        OutboundMessage::reply("telegram", "42", "🔐 Approval needed (deletes files):\n`rm x`");
    question.metadata.insert(
        "_approval".into(),
        json!({"id": "ab12cd", "approve": "/approve ab12cd", "deny": "/deny ab12cd"}),
    );
    run.bus.publish_outbound(question).await?;
    let sent = emu.next_sent().await?;
    let buttons = &sent["reply_markup"]["inline_keyboard"][0];
    assert_eq!(buttons[0]["callback_data"], json!("/approve ab12cd"), "{sent}");
    assert_eq!(buttons[1]["callback_data"], json!("/deny ab12cd"), "{sent}");
    assert!(
        sent["text"].as_str().unwrap().contains("<code>rm x</code>"),
        "{sent}"
    );

    // A stranger's press (someone the message was forwarded to) is refused and never reaches the agent.
    emu.user_presses(TOKEN, 99, "mallory", 1, "/approve ab12cd")
        .await?;
    // Alice's press reaches the agent as her command.
    emu.user_presses(TOKEN, 42, "alice", 1, "/deny ab12cd").await?;
    let inbound = run.next_inbound().await?;
    assert_eq!(
        (
            inbound.sender_id.as_str(),
            inbound.chat_id.as_str(),
            inbound.content.as_str()
        ),
        ("42|alice", "42", "/deny ab12cd")
    );
    // A command that is not an answer is ignored.
    emu.user_presses(TOKEN, 42, "alice", 1, "/new").await?;
    emu.user_says(TOKEN, 42, "alice", "after").await?;
    assert_eq!(run.next_inbound().await?.content, "after");

    // The `message` tool's buttons (0.3.5's): a keyboard whose press sends the label back.
    let mut offer = OutboundMessage::reply("telegram", "42", "Which one?");
    offer.metadata.insert(
        nanobot_bus::META_BUTTONS.into(),
        json!([["Tea", "Coffee"], ["Neither"]]),
    );
    run.bus.publish_outbound(offer).await?;
    let sent = emu.next_sent().await?;
    let rows = &sent["reply_markup"]["inline_keyboard"];
    assert_eq!(rows[0][1]["text"], json!("Coffee"), "{sent}");
    assert_eq!(rows[1][0]["callback_data"], json!("Neither"), "{sent}");
    assert_eq!(
        sent["text"],
        json!("Which one?"),
        "the labels are buttons, not text: {sent}"
    );
    emu.user_presses(TOKEN, 42, "alice", 2, "Coffee").await?;
    assert_eq!(run.next_inbound().await?.content, "Coffee");
    run.stop().await;
    Ok(())
}
