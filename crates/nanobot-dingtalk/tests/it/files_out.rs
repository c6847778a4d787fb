//! Files out: attachments of outbound messages are uploaded through the legacy API (`/media/upload`) and sent as
//! pictures or files; a file that cannot go leaves a visible note; the access token (in the upload URL) never
//! reaches an error or a log line.

use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nanobot_bus::{Bus as _, OutboundMessage};
use nanobot_channels::Channel as _;
use nanobot_channels::download::SsrfGuard;
use nanobot_config::Secret;
use nanobot_dingtalk::{DingTalkChannel, DingTalkSettings};
use nanobot_testkit::fake_dingtalk::{DingTalkCall, FakeDingTalk, UploadFault};
use nanobot_testkit::file_server::{Answer, FileServer};
use nanobot_testkit::secrets::{Echo, EchoServer, LogCapture, error_text};
use serde_json::json;

use crate::e2e::{ALICE, Harness, param};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot really a picture";
const PDF: &[u8] = b"%PDF-1.4 a report";
const MIB: u64 = 1024 * 1024;

/// A channel (not running: sends only) against `fake`, with `edit` applied to its settings.
fn channel(
    fake: &FakeDingTalk,
    media: &Path,
    edit: impl FnOnce(&mut DingTalkSettings),
) -> Result<DingTalkChannel> {
    let mut settings = DingTalkSettings::new("ding_test", Secret::new("secret-2"));
    settings.api_url = fake.base_url().to_string();
    settings.oapi_url = fake.base_url().to_string();
    edit(&mut settings);
    Ok(DingTalkChannel::new(settings, media)?)
}

fn with_media(chat: &str, text: &str, media: &[String]) -> OutboundMessage {
    let mut msg = OutboundMessage::reply("dingtalk", chat, text);
    msg.media = media.to_vec();
    msg
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, bytes)?;
    Ok(path.display().to_string())
}

/// Sends with a bound (every wait is bounded).
async fn send(channel: &DingTalkChannel, msg: &OutboundMessage) -> Result<()> {
    tokio::time::timeout(Duration::from_secs(60), channel.send(msg))
        .await
        .context("send did not finish within 60 s")??;
    Ok(())
}

fn keys(sent: &[DingTalkCall]) -> Vec<String> {
    sent.iter()
        .map(|c| c.body["msgKey"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn texts(sent: &[DingTalkCall]) -> Vec<String> {
    sent.iter()
        .filter(|c| c.body["msgKey"] == "sampleMarkdown")
        .map(|c| param(c)["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn pictures_and_files_are_uploaded_and_sent_to_users_and_groups() -> Result<()> {
    let h = Harness::start(|_| {}).await?;
    let dir = tempfile::tempdir()?;
    let png = write(dir.path(), "photo.png", PNG)?;
    let pdf = write(dir.path(), "report.pdf", PDF)?;
    // To a user, through the bus: the text first, then each attachment.
    h.bus
        .publish_outbound(with_media(ALICE, "here you are", &[png.clone(), pdf]))
        .await?;
    let sent = h.fake.sent(3).await?;
    assert_eq!(keys(&sent), ["sampleMarkdown", "sampleImageMsg", "sampleFile"]);
    assert_eq!(param(&sent[0])["text"], "here you are");
    let uploads = h.fake.uploaded(2).await?;
    assert_eq!(
        (
            uploads[0].media_type.as_str(),
            uploads[0].file_name.as_str(),
            uploads[0].content_type.as_deref()
        ),
        ("image", "photo.png", Some("image/png"))
    );
    assert_eq!(uploads[0].bytes, PNG);
    assert_eq!(
        (
            uploads[1].media_type.as_str(),
            uploads[1].file_name.as_str(),
            uploads[1].content_type.as_deref()
        ),
        ("file", "report.pdf", Some("application/pdf"))
    );
    assert_eq!(uploads[1].bytes, PDF);
    assert_eq!(uploads[0].token, "at-1", "the Open API's access token");
    for call in &sent[1..] {
        assert_eq!(call.path, "/v1.0/robot/oToMessages/batchSend");
        assert_eq!(call.body["userIds"], json!([ALICE]));
        assert_eq!(call.body["robotCode"], "ding_test");
    }
    assert_eq!(param(&sent[1]), json!({"photoURL": uploads[0].media_id}));
    assert_eq!(
        param(&sent[2]),
        json!({"mediaId": uploads[1].media_id, "fileName": "report.pdf", "fileType": "pdf"})
    );
    // To a group, a file:// URL, no text: only the picture.
    let url = format!("file://{png}");
    send(&h.channel, &with_media("group:cid-g", "", &[url])).await?;
    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[3].path, "/v1.0/robot/groupMessages/send");
    assert_eq!(sent[3].body["openConversationId"], "cid-g");
    assert_eq!(sent[3].body["msgKey"], "sampleImageMsg");
    let uploads = h.fake.uploads();
    assert_eq!(uploads.len(), 3);
    assert_eq!(param(&sent[3]), json!({"photoURL": uploads[2].media_id}));
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn html_is_uploaded_as_a_zip_of_the_page() -> Result<()> {
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let ch = channel(&fake, dir.path(), |_| {})?;
    let page = b"<!doctype html><h1>Report</h1><p>numbers</p>".repeat(20);
    let html = write(dir.path(), "Weekly Report.HTML", &page)?;
    send(&ch, &with_media(ALICE, "", &[html])).await?;
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    let up = &uploads[0];
    assert_eq!(
        (
            up.media_type.as_str(),
            up.file_name.as_str(),
            up.content_type.as_deref()
        ),
        ("file", "Weekly Report.zip", Some("application/zip"))
    );
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(up.bytes.clone()))?;
    assert_eq!(archive.len(), 1);
    let mut entry = archive.by_index(0)?;
    assert_eq!(entry.name()?, "Weekly Report.HTML");
    let mut unzipped = Vec::new();
    entry.read_to_end(&mut unzipped)?;
    assert_eq!(unzipped, page, "the archive holds the page as it was");
    assert!(up.bytes.len() < page.len(), "deflated");
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent), ["sampleFile"]);
    assert_eq!(
        param(&sent[0]),
        json!({"mediaId": up.media_id, "fileName": "Weekly Report.zip", "fileType": "zip"})
    );
    Ok(())
}

#[tokio::test]
async fn an_image_url_is_sent_as_is_and_internal_urls_are_not_fetched() -> Result<()> {
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let ch = channel(&fake, dir.path(), |_| {})?;
    let image = "https://img.example.com/pics/cat.JPG?size=large";
    let doc = format!("{}/files/report.pdf", fake.base_url());
    send(&ch, &with_media("group:cid-g", "", &[image.into(), doc])).await?;
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent), ["sampleImageMsg", "sampleMarkdown"]);
    assert_eq!(param(&sent[0]), json!({"photoURL": image}));
    assert_eq!(sent[0].body["openConversationId"], "cid-g");
    assert_eq!(texts(&sent), ["[Attachment send failed: report.pdf]"]);
    assert!(fake.uploads().is_empty(), "nothing was uploaded");
    assert!(
        !fake.calls().iter().any(|c| c.path.starts_with("/files/")),
        "the remote file was not fetched"
    );
    Ok(())
}

#[tokio::test]
async fn files_that_cannot_go_leave_a_note_and_the_rest_still_go() -> Result<()> {
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let ch = channel(&fake, dir.path(), |_| {})?;
    let missing = dir.path().join("missing.pdf").display().to_string();
    // Over DingTalk's limits: 20 MB for a picture, 2 MB for a voice file (sparse files: nothing is written).
    let big = dir.path().join("big.png");
    std::fs::File::create(&big)?.set_len(20 * MIB + 1)?;
    let voice = dir.path().join("voice.mp3");
    std::fs::File::create(&voice)?.set_len(2 * MIB + 1)?;
    let folder = dir.path().join("folder.pdf");
    std::fs::create_dir(&folder)?;
    let fine_voice = dir.path().join("ok.mp3");
    std::fs::File::create(&fine_voice)?.set_len(2 * MIB)?;
    let notes = write(dir.path(), "notes.txt", b"last one")?;
    let media = [
        missing,
        big.display().to_string(),
        voice.display().to_string(),
        folder.display().to_string(),
        "  ".to_string(),
        fine_voice.display().to_string(),
        notes,
    ];
    send(&ch, &with_media(ALICE, "files:", &media)).await?;
    let sent = fake.sent_messages();
    assert_eq!(
        texts(&sent),
        [
            "files:",
            "[Attachment send failed: missing.pdf]",
            "[Attachment send failed: big.png]",
            "[Attachment send failed: voice.mp3]",
            "[Attachment send failed: folder.pdf]",
        ]
    );
    assert_eq!(
        keys(&sent)[5..],
        ["sampleFile", "sampleFile"],
        "the empty entry is skipped, the later files go"
    );
    let uploads = fake.uploads();
    let names: Vec<_> = uploads
        .iter()
        .map(|u| (u.media_type.as_str(), u.file_name.as_str(), u.bytes.len()))
        .collect();
    assert_eq!(
        names,
        [("voice", "ok.mp3", 2 * MIB as usize), ("file", "notes.txt", 8)],
        "only the files that could go were uploaded"
    );
    assert_eq!(param(&sent[6])["fileType"], "txt");
    Ok(())
}

#[tokio::test]
async fn an_upload_with_an_expired_token_renews_it_once() -> Result<()> {
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let ch = channel(&fake, dir.path(), |_| {})?;
    let pdf = write(dir.path(), "a.pdf", PDF)?;
    send(&ch, &with_media(ALICE, "hi", &[])).await?;
    assert_eq!(fake.tokens_issued(), 1);
    // errcode 42001 (HTTP 200): renewed, and the upload goes with the new token.
    fake.fail_uploads([UploadFault::ExpiredToken]);
    send(&ch, &with_media(ALICE, "", std::slice::from_ref(&pdf))).await?;
    assert_eq!(fake.tokens_issued(), 2);
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].token, "at-2");
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent), ["sampleMarkdown", "sampleFile"]);
    assert_eq!(sent[1].token.as_deref(), Some("at-2"));
    // A token the server dropped (errcode 40014): the same.
    fake.expire_tokens();
    send(&ch, &with_media(ALICE, "", std::slice::from_ref(&pdf))).await?;
    assert_eq!(fake.tokens_issued(), 3);
    assert_eq!(fake.uploads().len(), 2);
    assert_eq!(fake.uploads()[1].token, "at-3");
    // Refused again after the renewal: renewed once only, and the file is reported as not sent.
    fake.fail_uploads([UploadFault::ExpiredToken, UploadFault::ExpiredToken]);
    send(&ch, &with_media(ALICE, "", std::slice::from_ref(&pdf))).await?;
    assert_eq!(fake.tokens_issued(), 4);
    assert_eq!(fake.uploads().len(), 2);
    let sent = fake.sent_messages();
    assert_eq!(
        texts(&sent).last().map(String::as_str),
        Some("[Attachment send failed: a.pdf]")
    );
    Ok(())
}

#[tokio::test]
async fn refusals_fall_back_and_the_access_token_stays_private() -> Result<()> {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    // This test's runtime runs every task on this thread, so a thread-local subscriber sees them all.
    let _logs = tracing::subscriber::set_default(subscriber);
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let ch = channel(&fake, dir.path(), |_| {})?;
    let png = write(dir.path(), "p.png", PNG)?;
    let pdf = write(dir.path(), "a.pdf", PDF)?;
    // DingTalk refuses the picture message: the image goes as a file.
    fake.refuse_messages("sampleImageMsg", 1);
    send(&ch, &with_media(ALICE, "", std::slice::from_ref(&png))).await?;
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent), ["sampleImageMsg", "sampleFile"]);
    let media_id = &fake.uploads()[0].media_id;
    assert_eq!(
        param(&sent[1]),
        json!({"mediaId": media_id, "fileName": "p.png", "fileType": "png"})
    );
    // A refused upload (its errmsg quotes the URL, token included): a note, and the next file still goes.
    fake.fail_uploads([UploadFault::Refuse]);
    send(&ch, &with_media(ALICE, "", &[pdf.clone(), png.clone()])).await?;
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent)[2..], ["sampleMarkdown", "sampleImageMsg"]);
    assert_eq!(param(&sent[2])["text"], "[Attachment send failed: a.pdf]");
    // The note itself refused: that error is returned.
    fake.fail_uploads([UploadFault::Refuse]);
    fake.refuse_messages("sampleMarkdown", 1);
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        ch.send(&with_media(ALICE, "", std::slice::from_ref(&pdf))),
    )
    .await?
    .err()
    .context("the refused note is an error")?;
    let mut errors = error_text(&err);
    tracing::warn!(error = %errors, "send failed");
    // Legacy API servers that fail in other ways: errors quoting the request, an HTML page, a hang-up.
    for echo in [Echo::Json(200), Echo::Json(500), Echo::Html, Echo::Hangup] {
        let server = EchoServer::start(echo).await;
        let ch = channel(&fake, dir.path(), |s| s.oapi_url = server.base.clone())?;
        let before = fake.sent_messages().len();
        send(&ch, &with_media(ALICE, "", std::slice::from_ref(&pdf))).await?;
        let sent = fake.sent_messages();
        assert_eq!(
            texts(&sent[before..]),
            ["[Attachment send failed: a.pdf]"],
            "{echo:?}"
        );
    }
    let issued = fake.tokens_issued();
    assert!(issued >= 2);
    let logs = capture.text();
    assert!(
        logs.contains("attachment not sent"),
        "the failures were logged: {logs}"
    );
    errors.push_str(&logs);
    for n in 1..=issued {
        let token = format!("at-{n}");
        assert!(!errors.contains(&token), "the token {token} leaked:\n{errors}");
    }
    assert!(
        errors.contains("access_token=[REDACTED]"),
        "the quoted URL was cleaned, not dropped"
    );
    Ok(())
}

/// The fake's upload endpoint cannot be checked against the DingTalk SDK (it has no upload call), so its
/// strictness is checked here: what it refuses, it refuses as the legacy API does (HTTP 200 with an errcode).
#[tokio::test]
async fn the_fake_upload_endpoint_is_strict() -> Result<()> {
    use reqwest::multipart::{Form, Part};
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let base = fake.base_url();
    let token: serde_json::Value = http
        .post(format!("{base}/v1.0/oauth2/accessToken"))
        .json(&json!({"appKey": "ding_test", "appSecret": "secret-2"}))
        .send()
        .await?
        .json()
        .await?;
    let token = token["accessToken"].as_str().context("a token")?.to_string();
    let media = || Form::new().part("media", Part::bytes(PDF).file_name("a.pdf"));
    let errcode = |query: String, form: Option<Form>| {
        let http = http.clone();
        async move {
            let req = http.post(format!("{base}/media/upload{query}"));
            let req = match form {
                Some(form) => req.multipart(form),
                None => req.body("media=raw"),
            };
            let answer: serde_json::Value = req.send().await?.json().await?;
            anyhow::Ok(answer["errcode"].as_i64().unwrap_or(-1))
        }
    };
    assert_eq!(
        errcode("?type=file".into(), Some(media())).await?,
        40014,
        "no token"
    );
    assert_eq!(
        errcode("?access_token=nope&type=file".into(), Some(media())).await?,
        40014,
        "wrong token"
    );
    assert_eq!(
        errcode(format!("?access_token={token}"), Some(media())).await?,
        40035,
        "no type"
    );
    assert_eq!(
        errcode(format!("?access_token={token}&type=pdf"), Some(media())).await?,
        40004,
        "bad type"
    );
    let q = format!("?access_token={token}&type=file");
    assert_eq!(errcode(q.clone(), None).await?, 43008, "not multipart");
    let other = Form::new().part("file", Part::bytes(PDF).file_name("a.pdf"));
    assert_eq!(errcode(q.clone(), Some(other)).await?, 41005, "no media part");
    let unnamed = Form::new().part("media", Part::bytes(PDF));
    assert_eq!(errcode(q.clone(), Some(unnamed)).await?, 41005, "no file name");
    assert!(fake.uploads().is_empty(), "nothing refused was recorded");
    assert_eq!(errcode(q, Some(media())).await?, 0);
    let uploads = fake.uploaded(1).await?;
    assert_eq!(
        (uploads[0].file_name.as_str(), uploads[0].bytes.as_slice()),
        ("a.pdf", PDF)
    );
    Ok(())
}

#[tokio::test]
async fn remote_files_are_fetched_behind_the_ssrf_guard_with_the_redirect_rules() -> Result<()> {
    let fake = FakeDingTalk::start("ding_test", "secret-2").await?;
    let dir = tempfile::tempdir()?;
    let other = FileServer::start_on(
        "127.0.0.2:0",
        vec![(
            "/elsewhere.pdf",
            Answer::file(b"%PDF elsewhere", "application/pdf"),
        )],
    )
    .await;
    let files = FileServer::start(vec![
        (
            "/docs/report.pdf",
            Answer::file(b"%PDF remote", "application/pdf"),
        ),
        ("/moved.pdf", Answer::redirect("/docs/report.pdf")),
        ("/away.pdf", Answer::redirect(&other.url("/elsewhere.pdf"))),
    ])
    .await;
    let loopback = || SsrfGuard::from_cidrs(&["127.0.0.0/8"]);
    let media = [
        files.url("/docs/report.pdf"),
        files.url("/moved.pdf"),
        files.url("/away.pdf"),
    ];

    // Redirects off (the default): the file itself goes, both redirects are refused.
    let ch = channel(&fake, dir.path(), |_| {})?.with_ssrf_guard(loopback()?);
    send(&ch, &with_media("staff1", "", &media)).await?;
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(
        (
            uploads[0].media_type.as_str(),
            uploads[0].file_name.as_str(),
            uploads[0].bytes.as_slice()
        ),
        ("file", "report.pdf", &b"%PDF remote"[..])
    );
    let sent = fake.sent_messages();
    assert_eq!(keys(&sent), ["sampleFile", "sampleMarkdown", "sampleMarkdown"]);
    assert_eq!(
        texts(&sent),
        [
            "[Attachment send failed: moved.pdf]",
            "[Attachment send failed: away.pdf]"
        ]
    );

    // allowRemoteMediaRedirects: the same host is followed; another host only when listed.
    let ch =
        channel(&fake, dir.path(), |s| s.allow_remote_media_redirects = true)?.with_ssrf_guard(loopback()?);
    send(&ch, &with_media("staff1", "", &media[1..])).await?;
    assert_eq!(fake.uploads().len(), 2);
    assert_eq!(other.hits("/elsewhere.pdf"), 0, "the other host was not asked");
    let ch = channel(&fake, dir.path(), |s| {
        s.allow_remote_media_redirects = true;
        s.remote_media_redirect_allowed_hosts = vec!["127.0.0.2".into()];
    })?
    .with_ssrf_guard(loopback()?);
    send(&ch, &with_media("staff1", "", &media[2..])).await?;
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 3);
    assert_eq!(uploads[2].bytes, b"%PDF elsewhere");
    Ok(())
}
