//! The testkit's real Matrix homeserver (synapse, one per test binary) proven by real clients: matrix-nio playing a
//! human against a bot played with the raw client-server API, and the Python nanobot 0.3.5's own Matrix channel.

use std::process::Stdio;
use std::time::Duration;

use nanobot_testkit::peers::{self, ChildGuard};
use nanobot_testkit::synapse::{self, MatrixUser, Synapse, Timeline};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

/// A 1x1 RGBA PNG.
const PNG: [u8; 70] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00,
    0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05,
    0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42,
    0x60, 0x82,
];

const WAIT: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures")
        .join(name)
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The shared synapse, or `None` (skipped) when it is not installed and CI is not set.
async fn homeserver() -> Option<&'static Synapse> {
    peers::require("matrix-synapse (.ci/.peers/synapse-venv)", synapse::python())?;
    Some(Synapse::shared().await.expect("starting synapse"))
}

/// Reads the probe's JSON lines until one parses (bounded).
async fn json_line(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                return v;
            }
        }
        panic!("the probe ended without printing its result");
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the probe printed nothing in time")
}

fn is_text(event: &Value, body: &str) -> bool {
    event["type"] == "m.room.message" && event["content"]["body"] == body
}

#[tokio::test]
async fn synapse_starts_and_serves_the_client_server_api() {
    let Some(hs) = homeserver().await else { return };
    let versions: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/_matrix/client/versions", hs.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        versions["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "v1.11"),
        "{versions}"
    );
    assert_eq!(hs.server_name(), "nanobot.test");

    let a = hs.fresh_user("alice").await.unwrap();
    let b = hs.fresh_user("bob").await.unwrap();
    assert!(
        a.user_id.starts_with("@alice-") && a.user_id.ends_with(":nanobot.test"),
        "{a:?}"
    );
    assert!(!a.device_id.is_empty() && !a.access_token.is_empty());
    // A second login is another device of the same user.
    let a2 = hs.login(&a.localpart, &a.password).await.unwrap();
    assert_eq!(a2.user_id, a.user_id);
    assert_ne!(a2.device_id, a.device_id);
    // Wrong password: refused with Matrix's error.
    let err = hs.login(&a.localpart, "wrong").await.unwrap_err().to_string();
    assert!(err.contains("M_FORBIDDEN"), "{err}");

    let room = hs
        .create_room(&a.access_token, "a and b", &[&b.user_id], true)
        .await
        .unwrap();
    assert_eq!(
        hs.membership(&a.access_token, &room, &b.user_id)
            .await
            .unwrap()
            .as_deref(),
        Some("invite")
    );
    let mut since = hs.timeline(&b.access_token).await.unwrap();
    assert_eq!(hs.join(&b.access_token, &room).await.unwrap(), room);
    hs.wait_joined(&a.access_token, &room, &b.user_id, WAIT)
        .await
        .unwrap();
    let sent = hs.send_text(&a.access_token, &room, "ping").await.unwrap();
    let got = hs
        .wait_event(&b.access_token, &mut since, &room, WAIT, |e| is_text(e, "ping"))
        .await
        .unwrap();
    assert_eq!(got["event_id"], sent.as_str());
    assert_eq!(got["sender"], a.user_id.as_str());

    let mxc = hs
        .upload(&b.access_token, PNG.to_vec(), "image/png", "dot.png")
        .await
        .unwrap();
    assert!(mxc.starts_with("mxc://nanobot.test/"), "{mxc}");
    assert_eq!(hs.download(&a.access_token, &mxc).await.unwrap(), PNG);
    hs.send_text(&b.access_token, &room, "pong").await.unwrap();
    let history = hs.messages(&a.access_token, &room).await.unwrap();
    let texts: Vec<_> = history
        .iter()
        .filter(|e| e["type"] == "m.room.message")
        .map(|e| e["content"]["body"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["ping", "pong"]);
    // The access log names each request and its user.
    assert!(
        hs.requests()
            .iter()
            .any(|(m, p, u)| m == "PUT" && p.contains("/send/m.room.message/") && *u == b.user_id),
        "{:?}",
        hs.requests()
    );
}

#[tokio::test]
async fn an_own_synapse_is_stopped_and_removed_on_drop() {
    if peers::require("matrix-synapse (.ci/.peers/synapse-venv)", synapse::python()).is_none() {
        return;
    }
    let hs = Synapse::start().await.unwrap();
    let url = format!("{}/_matrix/client/versions", hs.url());
    let dir = hs.dir().to_path_buf();
    assert!(dir.join("homeserver.db").exists());
    let user = hs.register("solo", "solo-password", true).await.unwrap();
    assert_eq!(user.user_id, "@solo:nanobot.test");
    drop(hs);
    assert!(!dir.exists(), "its directory is removed");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(client.get(&url).send().await.is_err(), "it no longer answers");
}

#[tokio::test]
async fn matrix_nio_human_talks_to_a_raw_api_bot() {
    let Some(hs) = homeserver().await else { return };
    let Some(python) = peers::require("matrix-nio (.ci/.peers/synapse-venv)", synapse::python()) else {
        return;
    };
    let human = hs.fresh_user("human").await.unwrap();
    let bot = hs.fresh_user("bot").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("dot.png");
    std::fs::write(&image, PNG).unwrap();
    let mut since = hs.sync_token(&bot.access_token).await.unwrap();

    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("matrix_nio_human.py"))
        .args([hs.url().as_str(), &human.localpart, &human.password, &bot.user_id])
        .arg(&image)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("matrix-nio human", &mut cmd).unwrap();
    let mut lines = BufReader::new(child.tokio_child_mut().unwrap().stdout.take().unwrap()).lines();
    let created = json_line(&mut lines).await;
    let room = created["room_id"].as_str().unwrap().to_string();
    assert_eq!(created["user_id"], human.user_id.as_str());

    // The bot sees the invite (a DM: is_direct on its membership event) and joins.
    let invite = hs
        .wait_sync(&bot.access_token, &mut since, WAIT, |r| {
            r["rooms"]["invite"][room.as_str()]["invite_state"]["events"]
                .as_array()
                .and_then(|evs| {
                    evs.iter()
                        .find(|e| e["type"] == "m.room.member" && e["state_key"] == bot.user_id.as_str())
                        .cloned()
                })
        })
        .await
        .unwrap();
    assert_eq!(invite["content"]["membership"], "invite");
    assert_eq!(invite["content"]["is_direct"], true);
    assert_eq!(invite["sender"], human.user_id.as_str());
    let mut since = Timeline::new(since);
    hs.join(&bot.access_token, &room).await.unwrap();

    let sent = json_line(&mut lines).await;
    let text = hs
        .wait_event(&bot.access_token, &mut since, &room, WAIT, |e| {
            is_text(e, "hello bot")
        })
        .await
        .unwrap();
    assert_eq!(text["sender"], human.user_id.as_str());
    assert_eq!(text["event_id"], sent["text_event"]);
    let img = hs
        .wait_event(&bot.access_token, &mut since, &room, WAIT, |e| {
            e["content"]["msgtype"] == "m.image"
        })
        .await
        .unwrap();
    assert_eq!(img["event_id"], sent["image_event"]);
    assert_eq!(img["content"]["body"], "dot.png");
    assert_eq!(img["content"]["info"]["mimetype"], "image/png");
    let mxc = img["content"]["url"].as_str().unwrap();
    assert_eq!(mxc, sent["mxc"].as_str().unwrap());
    assert_eq!(
        hs.download(&bot.access_token, mxc).await.unwrap(),
        PNG,
        "nio uploaded the image"
    );

    // The bot answers in HTML, replying to the text, and with an image of its own.
    let reply = json!({
        "msgtype": "m.text",
        "body": "**got** it",
        "format": "org.matrix.custom.html",
        "formatted_body": "<strong>got</strong> it",
        "m.relates_to": {"m.in_reply_to": {"event_id": text["event_id"]}},
    });
    hs.send_event(&bot.access_token, &room, "m.room.message", &reply)
        .await
        .unwrap();
    let back: Vec<u8> = PNG.iter().rev().copied().collect();
    let bot_mxc = hs
        .upload(&bot.access_token, back.clone(), "image/png", "back.png")
        .await
        .unwrap();
    let image_msg = json!({"msgtype": "m.image", "body": "back.png", "url": bot_mxc,
                           "info": {"mimetype": "image/png", "size": back.len()}});
    hs.send_event(&bot.access_token, &room, "m.room.message", &image_msg)
        .await
        .unwrap();

    let first = json_line(&mut lines).await;
    assert_eq!(first["sender"], bot.user_id.as_str(), "{first}");
    assert_eq!(first["body"], "**got** it");
    assert_eq!(first["format"], "org.matrix.custom.html");
    assert_eq!(first["formatted_body"], "<strong>got</strong> it");
    assert_eq!(first["relates_to"]["m.in_reply_to"]["event_id"], text["event_id"]);
    let second = json_line(&mut lines).await;
    assert_eq!(second["msgtype"], "m.image", "{second}");
    assert_eq!(second["downloaded_len"], back.len());
    assert_eq!(second["downloaded_sha256"], sha256_hex(&back));
    assert_eq!(json_line(&mut lines).await["done"], true);
}

/// The 0.3.5 channel running in its probe: inbound lines are read from its stdout, commands written to its stdin.
struct Probe {
    _child: ChildGuard,
    lines: Lines<BufReader<ChildStdout>>,
    stdin: ChildStdin,
    _home: tempfile::TempDir,
}

impl Probe {
    async fn start(python: &std::path::Path, config: Value) -> (Self, Value) {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg(fixture("matrix_035_probe.py"))
            .arg(config.to_string())
            .env("HOME", home.path())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = ChildGuard::spawn_tokio("matrix 0.3.5 probe", &mut cmd).unwrap();
        let proc = child.tokio_child_mut().unwrap();
        let lines = BufReader::new(proc.stdout.take().unwrap()).lines();
        let stdin = proc.stdin.take().unwrap();
        let mut probe = Self {
            _child: child,
            lines,
            stdin,
            _home: home,
        };
        let started = probe.line().await;
        assert_eq!(started["started"], true, "{started}");
        assert_eq!(probe.line().await["synced"], true);
        (probe, started)
    }

    async fn line(&mut self) -> Value {
        json_line(&mut self.lines).await
    }

    /// The next message the channel published on 0.3.5's bus.
    async fn inbound(&mut self) -> Value {
        let line = self.line().await;
        assert!(
            line.get("inbound").is_some(),
            "expected an inbound message, got {line}"
        );
        line["inbound"].clone()
    }

    async fn command(&mut self, cmd: Value) {
        let mut line = cmd.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        if cmd.get("stop").is_some() {
            assert_eq!(self.line().await["stopped"], true);
            return;
        }
        let done = self.line().await;
        assert!(done.get("done").is_some(), "{cmd} answered {done}");
    }
}

fn mention(text: &str, users: &[&str]) -> Value {
    json!({"msgtype": "m.text", "body": text, "m.mentions": {"user_ids": users}})
}

#[tokio::test]
async fn python_nanobot_matrix_channel_works_against_synapse() {
    let Some(hs) = homeserver().await else { return };
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let human = hs.fresh_user("human").await.unwrap();
    let bot = hs.fresh_user("bot").await.unwrap();
    let stranger = hs.fresh_user("stranger").await.unwrap();
    let h = human.access_token.as_str();
    let s = stranger.access_token.as_str();

    // Before the channel starts: the human's DM and a group room invite the bot (it joins on its first sync);
    // the stranger invites it too (never joined), and shares a DM with it that the test joins for the bot.
    let dm = hs
        .create_room(h, "human dm", &[&bot.user_id], true)
        .await
        .unwrap();
    let group = hs
        .create_room(h, "Team Room", &[&bot.user_id, &stranger.user_id], false)
        .await
        .unwrap();
    hs.join(s, &group).await.unwrap();
    let stranger_invite = hs
        .create_room(s, "stranger invite", &[&bot.user_id], true)
        .await
        .unwrap();
    let stranger_dm = hs
        .create_room(s, "stranger dm", &[&bot.user_id], true)
        .await
        .unwrap();
    let bot_elsewhere = hs.login(&bot.localpart, &bot.password).await.unwrap();
    hs.join(&bot_elsewhere.access_token, &stranger_dm).await.unwrap();

    let config = json!({
        "homeserver": hs.url(), "userId": bot.user_id, "password": bot.password,
        "allowFrom": [human.user_id], "groupPolicy": "mention", "e2eeEnabled": false, "streaming": true,
    });
    let (mut probe, started) = Probe::start(&python, config).await;
    assert_eq!(started["user_id"], bot.user_id.as_str());
    assert_ne!(
        started["device_id"],
        bot.device_id.as_str(),
        "a password login is a new device"
    );
    assert_eq!(started["supports_streaming"], true);
    hs.wait_joined(h, &dm, &bot.user_id, WAIT).await.unwrap();
    hs.wait_joined(h, &group, &bot.user_id, WAIT).await.unwrap();
    assert_eq!(
        hs.membership(s, &stranger_invite, &bot.user_id)
            .await
            .unwrap()
            .as_deref(),
        Some("invite"),
        "a stranger's invite is not accepted"
    );

    // A stranger's DM is dropped (no pairing reply either); the human's is published.
    hs.send_text(s, &stranger_dm, "let me in").await.unwrap();
    let hello = hs.send_text(h, &dm, "hello **bot**").await.unwrap();
    let first = probe.inbound().await;
    assert_eq!(first["channel"], "matrix");
    assert_eq!(first["chat_id"], dm.as_str(), "the chat id is the room id");
    assert_eq!(first["sender_id"], human.user_id.as_str());
    assert_eq!(
        first["content"], "hello **bot**",
        "the plain body, not formatted_body"
    );
    assert_eq!(first["session_key"], format!("matrix:{dm}"));
    assert_eq!(
        first["metadata"],
        json!({"room": "human dm", "event_id": hello, "_wants_stream": true})
    );

    // An image: downloaded through the authenticated media API into the media dir.
    let mxc = hs.upload(h, PNG.to_vec(), "image/png", "dot.png").await.unwrap();
    let image_event = hs
        .send_event(
            h,
            &dm,
            "m.room.message",
            &json!({"msgtype": "m.image", "body": "dot.png", "url": mxc,
                                                      "info": {"mimetype": "image/png", "size": PNG.len()}}),
        )
        .await
        .unwrap();
    let pic = probe.inbound().await;
    let attachment = &pic["metadata"]["attachments"][0];
    let path = attachment["path"].as_str().unwrap();
    assert_eq!(pic["content"], format!("dot.png\n[attachment: {path}]"), "{pic}");
    assert!(path.contains("/.nanobot/media/matrix/"), "{path}");
    let stored = std::path::Path::new(path)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        stored,
        format!("{}_dot.png", &image_event[1..25]),
        "event id (no $, 24 chars) _ file name"
    );
    assert_eq!(pic["media"], json!([[stored, sha256_hex(&PNG)]]));
    assert_eq!(
        attachment,
        &json!({"type": "image", "mime": "image/png", "filename": "dot.png", "event_id": image_event,
                "encrypted": false, "size_bytes": PNG.len(), "path": path, "mxc_url": mxc})
    );

    // The group room ("mention" policy, 3 members): no mention, a stranger's mention and an @room mention are
    // dropped; the human's m.mentions naming the bot is published, and so is a thread reply that mentions it.
    hs.send_text(h, &group, "just chatting").await.unwrap();
    hs.send_event(s, &group, "m.room.message", &mention("bot?", &[&bot.user_id]))
        .await
        .unwrap();
    let at_room = json!({"msgtype": "m.text", "body": "@room hi", "m.mentions": {"room": true}});
    hs.send_event(h, &group, "m.room.message", &at_room)
        .await
        .unwrap();
    hs.send_text(h, &group, &format!("{} plain-text mention", bot.user_id))
        .await
        .unwrap();
    let asked = hs
        .send_event(
            h,
            &group,
            "m.room.message",
            &mention("bot: what's up", &[&bot.user_id]),
        )
        .await
        .unwrap();
    let second = probe.inbound().await;
    assert_eq!(second["chat_id"], group.as_str(), "{second}");
    assert_eq!(second["content"], "bot: what's up", "the mention is not stripped");
    assert_eq!(second["session_key"], format!("matrix:{group}"));
    assert_eq!(
        second["metadata"],
        json!({"room": "Team Room", "event_id": asked, "_wants_stream": true})
    );
    let mut in_thread = mention("and in the thread", &[&bot.user_id]);
    in_thread["m.relates_to"] = json!({"rel_type": "m.thread", "event_id": asked,
                                       "is_falling_back": true, "m.in_reply_to": {"event_id": asked}});
    let threaded = hs
        .send_event(h, &group, "m.room.message", &in_thread)
        .await
        .unwrap();
    let third = probe.inbound().await;
    assert_eq!(
        third["session_key"],
        format!("matrix:{group}:thread:{asked}"),
        "{third}"
    );
    assert_eq!(
        third["metadata"],
        json!({"room": "Team Room", "event_id": threaded, "thread_root_event_id": asked,
               "thread_reply_to_event_id": threaded, "_wants_stream": true})
    );

    // Replies: Markdown becomes Matrix HTML; a thread's metadata puts the reply in the thread; media is uploaded.
    let mut since = hs.timeline(h).await.unwrap();
    probe
        .command(json!({"send": {"chat_id": dm, "content": "**Hi** there, see `code`", "metadata": first["metadata"]}}))
        .await;
    let reply = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        reply["content"],
        json!({"msgtype": "m.text", "body": "**Hi** there, see `code`", "m.mentions": {},
               "format": "org.matrix.custom.html",
               "formatted_body": "<p><strong>Hi</strong> there, see <code>code</code></p>"}),
        "no reply relation outside threads"
    );
    probe
        .command(json!({"send": {"chat_id": dm, "content": "plain words"}}))
        .await;
    let plain = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        plain["content"],
        json!({"msgtype": "m.text", "body": "plain words", "m.mentions": {}}),
        "no formatted_body for a plain paragraph"
    );

    let mut group_since = hs.timeline(h).await.unwrap();
    probe
        .command(
            json!({"send": {"chat_id": group, "content": "threaded answer", "metadata": third["metadata"]}}),
        )
        .await;
    let threaded_reply = hs
        .wait_event(h, &mut group_since, &group, WAIT, |e| {
            e["sender"] == bot.user_id.as_str()
        })
        .await
        .unwrap();
    assert_eq!(
        threaded_reply["content"]["m.relates_to"],
        json!({"rel_type": "m.thread", "event_id": asked, "m.in_reply_to": {"event_id": threaded},
               "is_falling_back": true})
    );

    let dir = tempfile::tempdir().unwrap();
    let out_png = dir.path().join("chart.png");
    std::fs::write(&out_png, PNG).unwrap();
    probe
        .command(json!({"send": {"chat_id": dm, "content": "", "media": [out_png]}}))
        .await;
    let media = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    let url = media["content"]["url"].as_str().unwrap().to_string();
    assert_eq!(
        media["content"],
        json!({"msgtype": "m.image", "body": "chart.png", "filename": "chart.png",
               "info": {"mimetype": "image/png", "size": PNG.len()}, "m.mentions": {}, "url": url})
    );
    assert_eq!(hs.download(h, &url).await.unwrap(), PNG);

    // Streaming: the first delta is a new message, later ones within 2 s are buffered, the end edits it (m.replace).
    let meta = first["metadata"].clone();
    for (delta, end) in [("Hel", false), ("lo **wor", false), ("ld**", false), ("", true)] {
        probe
            .command(
                json!({"delta": {"chat_id": dm, "delta": delta, "metadata": meta, "stream_id": "s1",
                                      "stream_end": end}}),
            )
            .await;
    }
    let start = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        start["content"],
        json!({"msgtype": "m.text", "body": "Hel", "m.mentions": {}})
    );
    let edit = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        edit["content"],
        json!({"msgtype": "m.text", "body": "Hello **world**", "m.mentions": {},
               "format": "org.matrix.custom.html", "formatted_body": "<p>Hello <strong>world</strong></p>",
               "m.new_content": {"body": "Hello **world**", "msgtype": "m.text"},
               "m.relates_to": {"rel_type": "m.replace", "event_id": start["event_id"]}})
    );

    // Nothing reached the stranger's DM (no pairing code), and the typing notice was set and cleared.
    let to_stranger = hs.messages(s, &stranger_dm).await.unwrap();
    assert!(
        to_stranger
            .iter()
            .all(|e| !(e["type"] == "m.room.message" && e["sender"] == bot.user_id.as_str())),
        "{to_stranger:?}"
    );
    probe.command(json!({"stop": true})).await;
    let by_bot: Vec<(String, String)> = hs
        .requests()
        .into_iter()
        .filter(|(_, _, u)| *u == bot.user_id)
        .map(|(m, p, _)| (m, p))
        .collect();
    let typing: Vec<_> = by_bot.iter().filter(|(_, p)| p.contains("/typing/")).collect();
    assert!(typing.len() >= 2, "{by_bot:?}");
    assert!(
        by_bot
            .iter()
            .all(|(_, p)| !p.contains("/receipt/") && !p.contains("/read_markers")),
        "0.3.5 sends no read receipts: {by_bot:?}"
    );
    eprintln!("requests by the 0.3.5 channel: {by_bot:#?}");
}

#[tokio::test]
async fn python_nanobot_matrix_channel_logs_in_with_an_access_token_and_e2ee() {
    let Some(hs) = homeserver().await else { return };
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let human = hs.fresh_user("human").await.unwrap();
    let bot: MatrixUser = hs.fresh_user("bot").await.unwrap();
    let h = human.access_token.as_str();
    let dm = hs
        .create_room(h, "token dm", &[&bot.user_id], true)
        .await
        .unwrap();

    // No e2eeEnabled: MatrixConfig's own default (true off Windows) applies, not the manifest's false.
    let config = json!({
        "homeserver": hs.url(), "userId": bot.user_id, "accessToken": bot.access_token,
        "deviceId": bot.device_id, "allowFrom": [human.user_id],
    });
    let (mut probe, started) = Probe::start(&python, config).await;
    assert_eq!(
        started["device_id"],
        bot.device_id.as_str(),
        "the given device is used"
    );
    assert_eq!(started["supports_streaming"], false);
    hs.wait_joined(h, &dm, &bot.user_id, WAIT).await.unwrap();
    let hello = hs.send_text(h, &dm, "hi with a token").await.unwrap();
    let msg = probe.inbound().await;
    assert_eq!(msg["chat_id"], dm.as_str());
    assert_eq!(
        msg["metadata"],
        json!({"room": "token dm", "event_id": hello}),
        "no _wants_stream"
    );
    let mut since = hs.timeline(h).await.unwrap();
    probe
        .command(json!({"send": {"chat_id": dm, "content": "# Title"}}))
        .await;
    let reply = hs
        .wait_event(h, &mut since, &dm, WAIT, |e| e["sender"] == bot.user_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        reply["type"], "m.room.message",
        "an unencrypted room gets plaintext even with E2EE on"
    );
    assert_eq!(reply["content"]["formatted_body"], "<h1>Title</h1>");
    probe.command(json!({"stop": true})).await;
    let by_bot: Vec<_> = hs
        .requests()
        .into_iter()
        .filter(|(_, _, u)| *u == bot.user_id)
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    assert!(
        by_bot
            .iter()
            .any(|r| r.starts_with("POST /_matrix/client/r0/keys/upload")
                || r.starts_with("POST /_matrix/client/v3/keys/upload")),
        "with E2EE on, nio uploads device keys: {by_bot:#?}"
    );
    assert!(
        !by_bot.iter().any(|r| r.contains("/login")),
        "no login with a token: {by_bot:#?}"
    );
}
