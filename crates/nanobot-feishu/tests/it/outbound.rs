//! What goes out besides plain replies: streamed answers as CardKit cards, tool hints inside them, files and
//! images, and the quoted message a user replied to.

use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{META_STREAM_RESUMING, OutboundKind, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{Channel, GroupPolicy};
use nanobot_feishu::FeishuChannel;
use nanobot_feishu::{FeishuSettings, MAX_FILE_UPLOAD_BYTES, MAX_IMAGE_UPLOAD_BYTES};
use nanobot_testkit::fake_feishu::{FakeCard, FeishuCall, message_event};
use nanobot_testkit::file_server::{Answer, FileServer};
use serde_json::{Map, Value, json};

use crate::e2e::{ALICE, GROUP, Harness, dm};

/// Feishu's "missing permission scope" code.
const NO_SCOPE: i64 = 99_991_672;

/// Every card update is written (no throttling), so the recorded updates are the same on every run.
fn unthrottled(s: &mut FeishuSettings) {
    s.stream_edit_interval = Duration::ZERO;
}

fn out(kind: OutboundKind, content: &str, metadata: &Map<String, Value>) -> OutboundMessage {
    let mut m = OutboundMessage::of_kind(kind, "feishu", ALICE, content);
    m.metadata = metadata.clone();
    m
}

fn delta(id: &str, text: &str, metadata: &Map<String, Value>) -> OutboundMessage {
    out(OutboundKind::StreamDelta { stream_id: id.into() }, text, metadata)
}

fn end(id: &str, text: &str, metadata: &Map<String, Value>) -> OutboundMessage {
    out(OutboundKind::StreamEnd { stream_id: id.into() }, text, metadata)
}

fn resuming(metadata: &Map<String, Value>) -> Map<String, Value> {
    let mut m = metadata.clone();
    m.insert(META_STREAM_RESUMING.into(), json!(true));
    m
}

/// The metadata of the received message `om_1` from Alice.
fn from_alice() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("message_id".into(), json!("om_1"));
    m.insert("chat_type".into(), json!("p2p"));
    m
}

/// The JSON content of a sent message.
fn content(call: &FeishuCall) -> Value {
    call.body["content"]
        .as_str()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null)
}

/// Checks what every streaming card must satisfy: strictly increasing sequences, streaming mode off at the end.
fn assert_closed(card: &FakeCard) {
    let sequences: Vec<u64> = card.ops.iter().map(|op| op.sequence).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "sequences not increasing: {sequences:?}"
    );
    assert_eq!(
        card.ops.last().and_then(|op| op.streaming_mode),
        Some(false),
        "{:?}",
        card.ops
    );
    assert!(!card.streaming);
}

fn reactions_of(h: &Harness, emoji: &str) -> usize {
    h.fake
        .calls()
        .iter()
        .filter(|c| {
            c.method == "POST"
                && c.path.ends_with("/reactions")
                && c.body["reaction_type"]["emoji_type"] == emoji
        })
        .count()
}

#[tokio::test]
async fn a_streamed_answer_is_one_card_updated_and_closed() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    assert!(h.channel.supports_streaming());
    let meta = from_alice();
    for piece in ["", "Hel", "lo ", "**world**"] {
        h.channel.send(&delta("s1", piece, &meta)).await?;
    }
    h.channel.send(&end("s1", "Hello **world**!", &meta)).await?;

    let cards = h.fake.cards();
    assert_eq!(cards.len(), 1, "one card for the whole answer");
    let card = &cards[0];
    assert_eq!(card.card["schema"], "2.0");
    assert_eq!(card.card["config"]["streaming_mode"], true);
    assert_eq!(card.card["config"]["update_multi"], true);
    let element = &card.card["body"]["elements"][0];
    assert_eq!(
        (element["tag"].as_str(), element["content"].as_str()),
        (Some("markdown"), Some("Hel")),
        "created with the first visible text"
    );
    assert!(element["element_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(card.content, "Hello **world**!", "the final text is the answer");
    assert_closed(card);
    let texts: Vec<&str> = card.ops.iter().filter_map(|op| op.content.as_deref()).collect();
    assert_eq!(texts, ["Hello", "Hello **world**", "Hello **world**!"]);

    // The card went to the chat once, by reference; nothing else was sent.
    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].body["msg_type"], "interactive");
    assert_eq!(sent[0].body["receive_id"], ALICE);
    assert_eq!(
        content(&sent[0]),
        json!({"type": "card", "data": {"card_id": card.card_id}})
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn updates_are_throttled_but_the_end_always_writes_the_whole_answer() -> Result<()> {
    // A long interval: after the card is created, no delta may update it; the end still does.
    let h = Harness::start_tuned(GroupPolicy::Mention, |s| {
        s.stream_edit_interval = Duration::from_secs(3600);
    })
    .await?;
    let meta = from_alice();
    for piece in ["one", " two", " three"] {
        h.channel.send(&delta("s1", piece, &meta)).await?;
    }
    h.channel.send(&end("s1", "one two three.", &meta)).await?;
    let card = &h.fake.cards()[0];
    let texts: Vec<&str> = card.ops.iter().filter_map(|op| op.content.as_deref()).collect();
    assert_eq!(texts, ["one two three."]);
    assert_closed(card);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn only_the_end_of_the_turn_swaps_the_reaction() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    h.push(&dm("ev1", "om_1", ALICE, "check the weather")).await?;
    let inbound = h.inbound().await?;
    assert!(inbound.wants_stream, "the channel asks for streamed answers");
    let meta = inbound.metadata.clone();
    h.fake
        .call_where("the received reaction", |c| c.path.ends_with("om_1/reactions"))
        .await?;

    // The first piece ends because the model calls a tool: the turn goes on.
    h.channel.send(&delta("t1-1", "Let me check.", &meta)).await?;
    h.channel
        .send(&end("t1-1", "Let me check.", &resuming(&meta)))
        .await?;
    assert_eq!(
        reactions_of(&h, "DONE"),
        0,
        "a resuming stream end is not the end"
    );
    assert!(!h.fake.calls().iter().any(|c| c.method == "DELETE"));
    assert_closed(&h.fake.cards()[0]);

    h.channel.send(&delta("t1-2", "Sunny, 21°C.", &meta)).await?;
    h.channel.send(&end("t1-2", "Sunny, 21 °C.", &meta)).await?;
    let cards = h.fake.cards();
    assert_eq!(cards.len(), 2, "each piece of the turn is its own card");
    assert_eq!(cards[1].content, "Sunny, 21 °C.");
    assert_closed(&cards[1]);
    assert_eq!(reactions_of(&h, "DONE"), 1);
    assert!(
        h.fake
            .calls()
            .iter()
            .any(|c| c.method == "DELETE" && c.path.contains("om_1/reactions/"))
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_resuming_reply_from_a_channel_without_streaming_keeps_the_reaction() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, |s| s.streaming = false).await?;
    assert!(!h.channel.supports_streaming());
    h.push(&dm("ev1", "om_1", ALICE, "hi")).await?;
    let inbound = h.inbound().await?;
    assert!(!inbound.wants_stream);
    // The manager turns stream ends into replies for channels that do not stream; the mark stays on them.
    h.channel
        .send(&out(
            OutboundKind::Reply,
            "Working on it.",
            &resuming(&inbound.metadata),
        ))
        .await?;
    assert_eq!(reactions_of(&h, "DONE"), 0);
    // Deltas are ignored; the end is a regular message.
    h.channel.send(&delta("s1", "ignored", &inbound.metadata)).await?;
    h.channel.send(&end("s1", "Done.", &inbound.metadata)).await?;
    assert!(h.fake.cards().is_empty());
    let sent = h.fake.sent_messages();
    assert_eq!(
        sent.iter()
            .map(|c| content(c)["text"].clone())
            .collect::<Vec<_>>(),
        [json!("Working on it."), json!("Done.")]
    );
    assert_eq!(reactions_of(&h, "DONE"), 1);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_a_card_the_answer_goes_out_as_a_message() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    let meta = from_alice();
    // The app lacks the CardKit scope: creation fails once, and is not tried again for this stream.
    h.fake.fail_next("/open-apis/cardkit/v1/cards", 1, NO_SCOPE);
    for piece in ["Plain", " answer", " here"] {
        h.channel.send(&delta("s1", piece, &meta)).await?;
    }
    h.channel.send(&end("s1", "Plain answer here.", &meta)).await?;
    let creates = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.path == "/open-apis/cardkit/v1/cards")
        .count();
    assert_eq!(creates, 1);
    assert!(h.fake.cards().is_empty());
    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["msg_type"], "text");
    assert_eq!(content(&sent[0]), json!({"text": "Plain answer here."}));

    // The card is created but cannot be shown in the chat: the same fallback, for the next stream.
    h.fake.fail_next("/open-apis/im/v1/messages", 1, 230_002);
    h.channel.send(&delta("s2", "Second", &meta)).await?;
    h.channel.send(&end("s2", "Second **answer**.", &meta)).await?;
    let sent = h.fake.sent_messages();
    let last = sent.last().context("a message")?;
    assert_eq!(
        last.body["msg_type"], "interactive",
        "Markdown goes out as a regular card"
    );
    assert_eq!(content(last)["elements"][0]["content"], "Second **answer**.");

    // A stream end without any delta before it (the stream was never seen) is a regular message too.
    h.channel.send(&end("s3", "Just this.", &meta)).await?;
    assert_eq!(
        content(h.fake.sent_messages().last().context("a message")?),
        json!({"text": "Just this."})
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_card_that_left_streaming_mode_is_reopened_for_the_update() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    let meta = from_alice();
    h.channel.send(&delta("s1", "Thinking", &meta)).await?;
    let card_id = h.fake.cards()[0].card_id.clone();
    // Feishu closes streaming mode on its own after a while; the next update reopens it once.
    h.fake.end_streaming(&card_id);
    h.channel.send(&end("s1", "Thinking done.", &meta)).await?;
    let card = &h.fake.cards()[0];
    assert_eq!(card.content, "Thinking done.");
    assert_closed(card);
    let modes: Vec<Option<bool>> = card.ops.iter().map(|op| op.streaming_mode).collect();
    assert_eq!(modes, [Some(true), None, Some(false)], "{:?}", card.ops);
    assert_eq!(h.fake.sent_messages().len(), 1, "no fallback message");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_card_that_cannot_take_the_final_text_is_closed_and_the_answer_sent() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    let meta = from_alice();
    h.channel.send(&delta("s1", "Partial", &meta)).await?;
    // Both the update and its retry after reopening fail.
    h.fake.fail_next("/elements/", 2, 300_309);
    h.channel
        .send(&end("s1", "Partial, then complete.", &meta))
        .await?;
    let card = &h.fake.cards()[0];
    assert_eq!(card.content, "Partial", "the card kept what it showed");
    assert_closed(card);
    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 2);
    assert_eq!(content(&sent[1]), json!({"text": "Partial, then complete."}));

    // Failing updates while streaming are only logged; the end repairs the card.
    h.channel.send(&delta("s2", "abc", &meta)).await?;
    h.fake.fail_next("/elements/", 2, 300_309);
    h.channel.send(&delta("s2", "def", &meta)).await?;
    h.channel.send(&end("s2", "abcdef", &meta)).await?;
    let card = &h.fake.cards()[1];
    assert_eq!(card.content, "abcdef");
    assert_closed(card);
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn tool_hints_go_into_the_streaming_card() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    let meta = from_alice();
    // No card open: a hint is a message of its own.
    h.channel
        .send(&out(OutboundKind::ToolHint, "list_dir(\".\")", &meta))
        .await?;
    assert_eq!(
        content(&h.fake.sent_messages()[0]),
        json!({"text": "list_dir(\".\")"})
    );

    h.channel.send(&delta("s1", "Looking.", &meta)).await?;
    h.channel
        .send(&out(
            OutboundKind::ToolHint,
            "read_file(\"a.txt\")\nweb_search(\"rust\")",
            &meta,
        ))
        .await?;
    let card = &h.fake.cards()[0];
    assert_eq!(
        card.content, "Looking.\n\n\u{1f527} read_file(\"a.txt\")\n\u{1f527} web_search(\"rust\")",
        "the hint shows in the card at once"
    );
    h.channel.send(&delta("s1", " Found it.", &meta)).await?;
    h.channel.send(&end("s1", "Looking. Found it.", &meta)).await?;
    let card = &h.fake.cards()[0];
    assert_eq!(
        card.content,
        "Looking.\n\n\u{1f527} read_file(\"a.txt\")\n\u{1f527} web_search(\"rust\")\n\n Found it."
    );
    assert_closed(card);
    assert_eq!(h.fake.sent_messages().len(), 2, "the first hint and the card");

    // A hint for another chat does not go into this one's card.
    h.channel.send(&delta("s2", "Other.", &meta)).await?;
    let mut elsewhere = out(OutboundKind::ToolHint, "exec(\"ls\")", &Map::new());
    elsewhere.chat_id = GROUP.into();
    h.channel.send(&elsewhere).await?;
    let sent = h.fake.sent_messages();
    let last = sent.last().context("a message")?;
    assert_eq!(last.body["receive_id"], GROUP);
    assert_eq!(content(last), json!({"text": "exec(\"ls\")"}));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_streaming_card_in_a_topic_is_a_reply() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Open, unthrottled).await?;
    let mut meta = from_alice();
    meta.insert("thread_id".into(), json!("omt_1"));
    let mut first = delta("s1", "In the topic", &meta);
    first.chat_id = GROUP.into();
    h.channel.send(&first).await?;
    let mut last = end("s1", "In the topic.", &meta);
    last.chat_id = GROUP.into();
    h.channel.send(&last).await?;
    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/open-apis/im/v1/messages/om_1/reply");
    assert_eq!(sent[0].body["reply_in_thread"], true);
    assert_eq!(content(&sent[0])["type"], "card");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_long_streamed_answer_goes_on_in_messages() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, unthrottled).await?;
    let meta = from_alice();
    let long = "word ".repeat(3000);
    h.channel.send(&delta("s1", &long, &meta)).await?;
    h.channel.send(&end("s1", &long, &meta)).await?;
    let card = &h.fake.cards()[0];
    assert_closed(card);
    let sent = h.fake.sent_messages();
    assert!(sent.len() >= 2, "the rest follows the card");
    // The rest is long Markdown-free text: regular cards of up to 4000 characters.
    let rest: String = sent[1..]
        .iter()
        .map(|c| {
            let v = content(c);
            v["text"]
                .as_str()
                .or_else(|| v["elements"][0]["content"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join(" ");
    let shown = format!("{} {rest}", card.content);
    assert_eq!(shown.split_whitespace().count(), 3000, "every word is shown once");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_reply_shows_the_quoted_message() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let with_parent = |event_id: &str, message_id: &str, parent: &str| {
        let mut e = dm(event_id, message_id, ALICE, "and times 3?");
        e["event"]["message"]["parent_id"] = json!(parent);
        e
    };
    h.fake.add_message("om_p1", "text", r#"{"text":"what is 2+2?"}"#);
    h.push(&with_parent("ev1", "om_1", "om_p1")).await?;
    let msg = h.inbound().await?;
    assert_eq!(msg.content, "[Reply to: what is 2+2?]\nand times 3?");
    assert_eq!(msg.metadata["parent_id"], "om_p1");

    // A long quote is cut at 200 characters.
    let long = "ab".repeat(150);
    h.fake
        .add_message("om_p2", "text", &json!({ "text": long }).to_string());
    h.push(&with_parent("ev2", "om_2", "om_p2")).await?;
    let msg = h.inbound().await?;
    assert_eq!(
        msg.content,
        format!("[Reply to: {}...]\nand times 3?", &long[..200])
    );

    // A post is quoted by its text; an image, a missing message and a failing API add nothing.
    let post = json!({"title": "Plan", "content": [[{"tag": "text", "text": "step one"}]]});
    h.fake.add_message("om_p3", "post", &post.to_string());
    h.push(&with_parent("ev3", "om_3", "om_p3")).await?;
    assert_eq!(
        h.inbound().await?.content,
        "[Reply to: Plan\nstep one]\nand times 3?"
    );
    h.fake.add_message("om_p4", "image", r#"{"image_key":"img_1"}"#);
    h.push(&with_parent("ev4", "om_4", "om_p4")).await?;
    assert_eq!(h.inbound().await?.content, "and times 3?");
    h.push(&with_parent("ev5", "om_5", "om_nowhere")).await?;
    assert_eq!(h.inbound().await?.content, "and times 3?");
    h.fake.fail_next("/open-apis/im/v1/messages/om_p1", 1, NO_SCOPE);
    h.push(&with_parent("ev6", "om_6", "om_p1")).await?;
    assert_eq!(h.inbound().await?.content, "and times 3?");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_and_images_are_uploaded_and_sent_before_the_text() -> Result<()> {
    let h = Harness::start_tuned(GroupPolicy::Mention, |s| s.reply_to_message = true).await?;
    let dir = h.media.path();
    let image = dir.join("chart.PNG");
    let pdf = dir.join("report.pdf");
    let voice = dir.join("note.opus");
    let video = dir.join("clip.mp4");
    let other = dir.join("data.csv");
    std::fs::write(&image, b"\x89PNG fake")?;
    std::fs::write(&pdf, b"%PDF fake")?;
    std::fs::write(&voice, b"OggS fake")?;
    std::fs::write(&video, b"mp4 fake")?;
    std::fs::write(&other, b"a,b\n1,2\n")?;
    let mut reply = out(OutboundKind::Reply, "Here you go.", &from_alice());
    reply.media = [&image, &pdf, &voice, &video, &other]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    h.channel.send(&reply).await?;

    let uploads = h.fake.uploads();
    assert_eq!(uploads.len(), 5);
    assert_eq!(uploads[0].kind, "image");
    assert_eq!(uploads[0].fields["image_type"], "message");
    assert_eq!(uploads[0].bytes, b"\x89PNG fake");
    let files: Vec<(&str, &str)> = uploads[1..]
        .iter()
        .map(|u| (u.fields["file_type"].as_str(), u.fields["file_name"].as_str()))
        .collect();
    assert_eq!(
        files,
        [
            ("pdf", "report.pdf"),
            ("opus", "note.opus"),
            ("mp4", "clip.mp4"),
            ("stream", "data.csv")
        ]
    );
    assert_eq!(uploads[4].bytes, b"a,b\n1,2\n");
    assert_eq!(uploads[4].file_name.as_deref(), Some("data.csv"));

    let sent = h.fake.sent_messages();
    let kinds: Vec<&str> = sent.iter().filter_map(|c| c.body["msg_type"].as_str()).collect();
    assert_eq!(kinds, ["image", "file", "audio", "media", "file", "text"]);
    assert_eq!(content(&sent[0]), json!({"image_key": uploads[0].key}));
    assert_eq!(content(&sent[1]), json!({"file_key": uploads[1].key}));
    assert_eq!(content(&sent[5]), json!({"text": "Here you go."}));
    // replyToMessage: the first message (the image) quotes the user's; the rest are plain.
    assert_eq!(sent[0].path, "/open-apis/im/v1/messages/om_1/reply");
    assert!(sent[1..].iter().all(|c| c.path == "/open-apis/im/v1/messages"));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn files_that_cannot_go_out_leave_a_note_and_are_not_uploaded() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let dir = h.media.path();
    let big_file = dir.join("huge.bin");
    std::fs::File::create(&big_file)?.set_len(MAX_FILE_UPLOAD_BYTES + 1)?;
    let big_image = dir.join("huge.png");
    std::fs::File::create(&big_image)?.set_len(MAX_IMAGE_UPLOAD_BYTES + 1)?;
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, b"")?;
    let mut msg = out(OutboundKind::Reply, "", &from_alice());
    msg.media = vec![
        dir.join("missing.txt").display().to_string(),
        dir.display().to_string(),
        big_file.display().to_string(),
        big_image.display().to_string(),
        empty.display().to_string(),
        "https://127.0.0.1:9/files/a.pdf?token=SECRET123".into(),
    ];
    h.channel.send(&msg).await?;
    assert!(h.fake.uploads().is_empty());
    assert!(
        !h.fake
            .calls()
            .iter()
            .any(|c| c.path.ends_with("/images") || c.path.ends_with("/files"))
    );
    let notes: Vec<String> = h
        .fake
        .sent_messages()
        .iter()
        .map(|c| content(c)["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let dir_name = dir.file_name().context("name")?.to_string_lossy().into_owned();
    assert_eq!(
        notes,
        [
            "[file not sent: missing.txt]".to_owned(),
            format!("[file not sent: {dir_name}]"),
            "[file not sent: huge.bin]".into(),
            "[file not sent: huge.png]".into(),
            "[file not sent: empty.txt]".into(),
            "[file not sent: https://127.0.0.1/files/a.pdf]".into(),
        ]
    );
    assert!(
        !notes.iter().any(|n| n.contains("SECRET123")),
        "the link's query is not echoed"
    );
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_refused_upload_leaves_a_note_and_a_stale_token_is_renewed_for_uploads() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let file = h.media.path().join("notes.txt");
    std::fs::write(&file, b"remember the milk")?;
    let mut msg = out(OutboundKind::Reply, "", &from_alice());
    msg.media = vec![file.display().to_string()];

    h.fake.fail_next("/open-apis/im/v1/files", 1, NO_SCOPE);
    h.channel.send(&msg).await?;
    assert!(h.fake.uploads().is_empty());
    assert_eq!(
        content(&h.fake.sent_messages()[0]),
        json!({"text": "[file not sent: notes.txt]"})
    );

    // The token expires: the upload is rejected once, the token renewed and the form sent again.
    h.fake.expire_tokens();
    h.channel.send(&msg).await?;
    let uploads = h.fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].bytes, b"remember the milk");
    let upload_calls: Vec<Option<String>> = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.path == "/open-apis/im/v1/files")
        .map(|c| c.token.clone())
        .collect();
    assert_eq!(upload_calls.last().cloned().flatten().as_deref(), Some("t-2"));
    let sent = h.fake.sent_messages();
    let last = sent.last().context("a message")?;
    assert_eq!(last.body["msg_type"], "file");
    assert_eq!(content(last), json!({"file_key": uploads[0].key}));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn group_messages_with_a_quote_keep_their_session() -> Result<()> {
    // The quote is added to the text only: routing and metadata are those of the message itself.
    let h = Harness::start(GroupPolicy::Open).await?;
    h.fake.add_message("om_p", "text", r#"{"text":"earlier"}"#);
    let mut e = message_event("ev1", "om_1", ALICE, GROUP, "group", "reply", &[]);
    e["event"]["message"]["parent_id"] = json!("om_p");
    e["event"]["message"]["root_id"] = json!("om_p");
    h.push(&e).await?;
    let msg = h.inbound().await?;
    assert_eq!(msg.content, "[Reply to: earlier]\nreply");
    assert_eq!(msg.session_key(), "feishu:oc_group1:om_p");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn remote_files_are_fetched_behind_the_ssrf_guard_and_uploaded() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    let files = FileServer::start(vec![
        (
            "/docs/report.pdf",
            Answer::file(b"%PDF remote", "application/pdf"),
        ),
        ("/pics/cat.png", Answer::ok(b"\x89PNG remote")),
        ("/moved.pdf", Answer::redirect("/docs/report.pdf")),
    ])
    .await;
    let mut msg = out(OutboundKind::Reply, "", &Map::new());
    msg.media = vec![
        files.url("/docs/report.pdf"),
        files.url("/pics/cat.png"),
        files.url("/moved.pdf"),
    ];
    // The harness's channel has the default guard: loopback is internal, so nothing is fetched.
    h.channel.send(&msg).await?;
    assert_eq!(files.hits("/docs/report.pdf") + files.hits("/pics/cat.png"), 0);
    assert!(h.fake.uploads().is_empty());
    let notes: Vec<String> = h
        .fake
        .sent_messages()
        .iter()
        .map(|c| content(c)["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(notes.len(), 3);
    assert!(
        notes[0].starts_with("[file not sent: http://127.0.0.1/docs/report.pdf"),
        "{notes:?}"
    );

    // With loopback whitelisted (`tools.ssrfWhitelist`), they are fetched and uploaded; a redirect is not followed.
    let settings = FeishuSettings::from_config(&nanobot_config::FeishuConfig {
        app_id: "cli_test".into(),
        app_secret: nanobot_config::Secret::new("secret-1"),
        allow_from: vec![ALICE.into()],
        base_url: Some(h.fake.base_url().to_string()),
        ..nanobot_config::FeishuConfig::default()
    })?;
    let open = FeishuChannel::new(settings, h.media.path())?
        .with_ssrf_guard(SsrfGuard::from_cidrs(&["127.0.0.0/8"])?);
    open.send(&msg).await?;
    let uploads = h.fake.uploads();
    let got: Vec<(&str, &[u8])> = uploads
        .iter()
        .map(|u| (u.kind.as_str(), u.bytes.as_slice()))
        .collect();
    assert_eq!(
        got,
        [("file", &b"%PDF remote"[..]), ("image", &b"\x89PNG remote"[..])]
    );
    assert_eq!(uploads[0].fields["file_type"], "pdf");
    assert_eq!(uploads[0].fields["file_name"], "report.pdf");
    let sent = h.fake.sent_messages();
    let kinds: Vec<&str> = sent[3..]
        .iter()
        .filter_map(|c| c.body["msg_type"].as_str())
        .collect();
    assert_eq!(kinds, ["file", "image", "text"]);
    assert_eq!(
        content(&sent[5])["text"],
        format!(
            "[file not sent: {}]",
            files.url("/moved.pdf").replace(&format!(":{}", port(&files)), "")
        )
    );
    h.stop().await;
    Ok(())
}

fn port(files: &FileServer) -> u16 {
    url::Url::parse(&files.url("/"))
        .ok()
        .and_then(|u| u.port())
        .unwrap_or_default()
}

#[tokio::test]
async fn links_go_out_as_posts_and_short_plain_text_as_text() -> Result<()> {
    let h = Harness::start(GroupPolicy::Mention).await?;
    h.channel
        .send(&out(
            OutboundKind::Reply,
            "Read [the guide](https://example.com/g).",
            &Map::new(),
        ))
        .await?;
    h.channel
        .send(&out(OutboundKind::Reply, "Done.", &Map::new()))
        .await?;
    let sent = h.fake.sent_messages();
    let kinds: Vec<&str> = sent.iter().filter_map(|c| c.body["msg_type"].as_str()).collect();
    assert_eq!(kinds, ["post", "text"]);
    assert_eq!(
        content(&sent[0])["zh_cn"]["content"][0][1],
        json!({"tag": "a", "text": "the guide", "href": "https://example.com/g"})
    );
    h.stop().await;
    Ok(())
}
