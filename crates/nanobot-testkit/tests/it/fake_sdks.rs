//! The channel fakes, checked by the platforms' official Python SDKs (real peers): a fake is only as good as
//! its fidelity.

use std::process::Stdio;
use std::time::Duration;

use nanobot_testkit::fake_feishu::{BOT_OPEN_ID, FakeFeishu, message_event};
use nanobot_testkit::peers::{self, ChildGuard};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures")
        .join(name)
}

/// Reads JSON lines from the probe until one parses (bounded).
async fn json_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> Value {
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                return v;
            }
        }
        panic!("the probe ended without printing its result");
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("no result from the probe within 60 s")
}

#[tokio::test]
async fn lark_oapi_sdk_accepts_the_feishu_fake() {
    let Some(python) = peers::require("python venv (lark-oapi SDK)", peers::python()) else {
        return;
    };
    let fake = FakeFeishu::start("cli_test", "secret-1").await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("lark_sdk_probe.py"))
        .args([fake.base_url(), "cli_test", "secret-1"])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("lark probe", &mut cmd).unwrap();
    fake.connected(1).await.unwrap();
    // The SDK discovered the endpoint with the app's credentials and pings at once.
    let discovery = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/callback/ws/endpoint")
        .unwrap();
    assert_eq!(
        discovery.body,
        json!({"AppID": "cli_test", "AppSecret": "secret-1"})
    );

    let event = message_event(
        "ev-1",
        "om_1",
        "ou_alice",
        "oc_group",
        "group",
        "@_user_1 hi",
        &[("@_user_1", BOT_OPEN_ID, "bot")],
    );
    let frame = fake.push_event(&event).unwrap();
    let ack = fake.acked(&frame).await.unwrap();
    assert_eq!(ack.payload["code"], 200, "{:?}", ack.payload);
    assert!(ack.has_biz_rt);

    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;
    assert_eq!(out["event_id"], "ev-1");
    assert_eq!(out["message_id"], "om_1");
    assert_eq!(out["sender"], "ou_alice");
    assert_eq!(out["text"], "@_user_1 hi");
    assert_eq!(out["mention"], BOT_OPEN_ID);
    assert_eq!(out["sent_ok"], true, "{out}");
    // The SDK's API client got a tenant token and sent with it.
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].query, "receive_id_type=chat_id");
    assert_eq!(sent[0].body["receive_id"], "oc_group");
    assert_eq!(sent[0].token.as_deref(), Some("t-1"));
    fake.pinged().await.unwrap();
}

#[tokio::test]
async fn lark_oapi_sdk_reads_the_feishu_fakes_cards_uploads_and_messages() {
    use nanobot_testkit::fake_feishu::{CODE_BAD_SEQUENCE, CODE_NOT_FOUND, CardOp};
    let Some(python) = peers::require("python venv (lark-oapi SDK)", peers::python()) else {
        return;
    };
    let fake = FakeFeishu::start("cli_test", "secret-1").await.unwrap();
    fake.add_message("om_parent", "text", r#"{"text":"the quoted words"}"#);
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("pic.png");
    let file = dir.path().join("report.pdf");
    std::fs::write(&image, b"\x89PNG\r\n\x1a\n fake image bytes").unwrap();
    // Bytes that look like a multipart boundary line must survive as data.
    std::fs::write(&file, b"%PDF-1.4\r\n--not-a-boundary\r\n\x00\xff end").unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("lark_sdk_probe.py"))
        .args([fake.base_url(), "cli_test", "secret-1", "api"])
        .arg(&image)
        .arg(&file)
        .arg("om_parent")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("lark api probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;

    // CardKit: the SDK parsed the card id, the update and the settings call; a repeated sequence is refused
    // with the code the SDK reports.
    assert_eq!(out["card_ok"], true, "{out}");
    let cards = fake.cards();
    assert_eq!(cards.len(), 1);
    assert_eq!(out["card_id"], cards[0].card_id.as_str());
    assert_eq!(out["content_ok"], true, "{out}");
    assert_eq!(out["stale_ok"], false, "{out}");
    assert_eq!(out["stale_code"], CODE_BAD_SEQUENCE);
    assert_eq!(out["settings_ok"], true, "{out}");
    assert_eq!(
        cards[0].ops,
        [
            CardOp {
                sequence: 1,
                content: Some("Hello from the SDK".into()),
                streaming_mode: None
            },
            CardOp {
                sequence: 2,
                content: None,
                streaming_mode: Some(false)
            },
        ]
    );
    assert_eq!(cards[0].card["schema"], "2.0");

    // Uploads: the SDK's multipart bodies were parsed; it read the keys back.
    assert_eq!(out["image_ok"], true, "{out}");
    assert_eq!(out["file_ok"], true, "{out}");
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 2);
    assert_eq!(out["image_key"], uploads[0].key.as_str());
    assert_eq!(uploads[0].kind, "image");
    assert_eq!(uploads[0].fields["image_type"], "message");
    assert_eq!(uploads[0].bytes, std::fs::read(&image).unwrap());
    assert_eq!(out["file_key"], uploads[1].key.as_str());
    assert_eq!(uploads[1].kind, "file");
    assert_eq!(uploads[1].fields["file_type"], "pdf");
    assert_eq!(uploads[1].fields["file_name"], "report.pdf");
    assert_eq!(uploads[1].bytes, std::fs::read(&file).unwrap());

    // A message read by id, and one that does not exist.
    assert_eq!(out["get_ok"], true, "{out}");
    assert_eq!(out["get_msg_type"], "text");
    assert_eq!(out["get_content"], r#"{"text":"the quoted words"}"#);
    assert_eq!(out["missing_ok"], false);
    assert_eq!(out["missing_code"], CODE_NOT_FOUND);
    // Every call carried the tenant token the fake issued.
    assert!(
        fake.calls()
            .iter()
            .filter(|c| c.path.starts_with("/open-apis/cardkit") || c.path.starts_with("/open-apis/im"))
            .all(|c| c.token.as_deref() == Some("t-1"))
    );
}

#[tokio::test]
async fn dingtalk_stream_sdk_accepts_the_dingtalk_fake() {
    use nanobot_testkit::fake_dingtalk::{FakeDingTalk, text_message};
    let Some(python) = peers::require("python venv (dingtalk-stream SDK)", peers::python()) else {
        return;
    };
    let fake = FakeDingTalk::start("ding_test", "secret-2").await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("dingtalk_sdk_probe.py"))
        .args(["ding_test", "secret-2"])
        .env("DINGTALK_OPENAPI_ENDPOINT", fake.base_url())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("dingtalk probe", &mut cmd).unwrap();
    fake.connected(1).await.unwrap();
    let open = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/v1.0/gateway/connections/open")
        .unwrap();
    assert_eq!(open.body["clientId"], "ding_test");
    assert_eq!(
        open.body["subscriptions"],
        json!([{"type": "CALLBACK", "topic": "/v1.0/im/bot/messages/get"}])
    );

    // A system ping is acknowledged with its data echoed.
    let ping = fake.push_system("ping", &json!({"opaque": "p-1"})).unwrap();
    let ack = fake.acked(&ping).await.unwrap();
    assert_eq!(ack.frame["code"], 200);
    assert_eq!(
        serde_json::from_str::<Value>(ack.frame["data"].as_str().unwrap()).unwrap(),
        json!({"opaque": "p-1"})
    );

    let frame = fake
        .push_message(&text_message("msg-1", "staff-1", "1", "cid-1", "hello", false))
        .unwrap();
    let ack = fake.acked(&frame).await.unwrap();
    assert_eq!(ack.frame["code"], 200, "{}", ack.frame);
    assert_eq!(ack.frame["headers"]["messageId"], frame.as_str());

    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;
    assert_eq!(out["message_id"], frame.as_str());
    assert_eq!(out["msg_id"], "msg-1");
    assert_eq!(out["sender"], "staff-1");
    assert_eq!(out["text"], "hello");
    assert_eq!(
        out["token"], "at-1",
        "the SDK fetched an access token from the fake"
    );
}

#[tokio::test]
async fn qq_botpy_sdk_accepts_the_qq_fake() {
    use nanobot_testkit::fake_qq::{FakeQq, SESSION_ID, c2c_message};
    let Some(python) = peers::require("python venv (qq-botpy SDK)", peers::python()) else {
        return;
    };
    let fake = FakeQq::start("102030", "secret-3", 30_000).await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("qq_sdk_probe.py"))
        .args(["102030", "secret-3", fake.base_url()])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("qq probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let ready = json_line(&mut lines).await;
    assert_eq!(
        ready["ready"], "fake-bot",
        "the SDK read /users/@me and got READY"
    );
    fake.ready(1).await.unwrap();
    let identify = fake.frame(2, 0).await.unwrap();
    assert_eq!(
        identify["d"]["token"], "QQBot qqtoken-1",
        "the SDK used the fake's token"
    );
    assert_eq!(identify["d"]["shard"], json!([0, 1]));
    // botpy's public_messages (1<<25) and direct_message (1<<12)
    assert_eq!(identify["d"]["intents"], (1 << 25) | (1 << 12));
    assert!(
        fake.calls().iter().any(|c| c.path == "/gateway/bot"),
        "the SDK found the gateway through /gateway/bot"
    );

    fake.push_event(
        "C2C_MESSAGE_CREATE",
        &c2c_message("msg-1", "USER_OPENID_1", "ping"),
    );
    let out = json_line(&mut lines).await;
    assert_eq!(out["id"], "msg-1");
    assert_eq!(out["openid"], "USER_OPENID_1");
    assert_eq!(out["content"], "ping");
    assert_eq!(
        out["reply_id"].as_str().map(|s| s.starts_with("sent-")),
        Some(true)
    );
    let sent = fake.sent(1).await.unwrap();
    assert_eq!(sent[0].path, "/v2/users/USER_OPENID_1/messages");
    assert_eq!(
        sent[0].body["msg_id"], "msg-1",
        "a passive reply names the message"
    );
    assert_eq!(sent[0].body["content"], "pong: ping");
    assert_eq!(sent[0].authorization.as_deref(), Some("QQBot qqtoken-1"));
    let _ = SESSION_ID;
}

#[tokio::test]
async fn onebot_sdk_accepts_the_onebot_fake() {
    use nanobot_testkit::fake_onebot::{FakeOneBot, SELF_ID, private_message};
    let Some(python) = peers::require("python venv (nonebot2 OneBot v11 adapter)", peers::python()) else {
        return;
    };
    let fake = FakeOneBot::start(Some("tok-1")).await.unwrap();
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(fixture("onebot_sdk_probe.py"))
        .args([fake.ws_url().as_str(), "tok-1", "serve"])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("onebot probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    // The adapter registered the bot on the lifecycle/connect frame and read the login info.
    let login = json_line(&mut lines).await;
    assert_eq!(login["self_id"], SELF_ID.to_string(), "{login}");
    assert_eq!(
        login["login"],
        json!({"user_id": SELF_ID, "nickname": "nanobot-test"})
    );
    fake.connected(1).await.unwrap();
    assert_eq!(fake.refused(), 0);

    fake.push_event(&private_message(71, 424242, "ping"));
    let out = json_line(&mut lines).await;
    assert_eq!(out["user_id"], 424242);
    assert_eq!(out["message_id"], 71);
    assert_eq!(out["text"], "ping");
    assert_eq!(out["nickname"], "user-424242");
    assert_eq!(out["sent"], json!({"message_id": 5000}), "{out}");
    let sent = fake.wait_actions("send_msg", 1).await.unwrap();
    assert_eq!(sent[0].params["message_type"], "private");
    assert_eq!(sent[0].params["user_id"], 424242);
    assert_eq!(
        sent[0].params["message"],
        json!([{"type": "text", "data": {"text": "pong: ping"}}])
    );
    assert!(!sent[0].echo.is_null(), "the library matches answers by echo");
    drop(child);

    // A wrong token: the upgrade is refused and the library reports it.
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(fixture("onebot_sdk_probe.py"))
        .args([fake.ws_url().as_str(), "wrong", "refused"])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("onebot refused probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;
    assert_eq!(out["refused"], true, "{out}");
    assert!(out["error"].as_str().unwrap().contains("401"), "{out}");
    assert!(fake.refused() >= 1);
    assert_eq!(fake.wait_actions("get_login_info", 1).await.unwrap().len(), 1);
}

#[tokio::test]
async fn python_nanobot_napcat_channel_accepts_the_onebot_fake() {
    use nanobot_testkit::fake_onebot::{FakeOneBot, SELF_ID, group_message, private_message};
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let fake = FakeOneBot::start(Some("tok-2")).await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("napcat_035_probe.py"))
        .args([fake.ws_url().as_str(), "tok-2", "424242", "777"])
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("napcat 0.3.5 probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(json_line(&mut lines).await["started"], true);
    // It logged in (with the Bearer token) before anything else.
    let login = fake.wait_actions("get_login_info", 1).await.unwrap();
    assert_eq!(login[0].params, json!({}));
    assert!(login[0].echo.is_string(), "0.3.5 echoes a uuid hex string");
    assert_eq!(fake.refused(), 0);

    let at_bot = json!([{"type": "at", "data": {"qq": SELF_ID.to_string()}}, {"type": "text", "data": {"text": " hi there"}}]);
    let no_mention = json!([{"type": "text", "data": {"text": "just chatting"}}]);
    fake.push_event(&private_message(1, 424242, "hello bot"));
    fake.push_event(&group_message(2, 777, 555, "alice", at_bot));
    fake.push_event(&group_message(3, 777, 556, "bob", no_mention));
    fake.push_event(&private_message(4, 424242, "last"));

    let first = json_line(&mut lines).await;
    assert_eq!(first["chat_id"], "private:424242", "{first}");
    assert_eq!(first["sender_id"], "424242");
    assert_eq!(first["content"], "hello bot");
    assert_eq!(first["metadata"]["message_id"], 1);
    assert_eq!(first["metadata"]["is_group"], false);
    assert_eq!(first["metadata"]["nickname"], "user-424242");
    let second = json_line(&mut lines).await;
    assert_eq!(second["chat_id"], "group:777", "{second}");
    assert_eq!(second["sender_id"], "555");
    assert_eq!(
        second["content"], "alice: hi there",
        "the @ of the bot is dropped, the nickname labels the text"
    );
    assert_eq!(second["metadata"]["is_group"], true);
    // The group message without the mention was not delivered: the next one is the private marker.
    let third = json_line(&mut lines).await;
    assert_eq!(third["chat_id"], "private:424242", "{third}");
    assert_eq!(third["content"], "last");

    assert_eq!(json_line(&mut lines).await["sent"], true);
    let sent = fake.wait_actions("send_msg", 2).await.unwrap();
    assert_eq!(
        sent[0].params,
        json!({"message": [{"type": "text", "data": {"text": "pong private"}}], "message_type": "private", "user_id": 424242})
    );
    assert_eq!(
        sent[1].params,
        json!({"message": [{"type": "text", "data": {"text": "pong group"}}], "message_type": "group", "group_id": 777})
    );
    assert!(sent[0].params["user_id"].is_i64() && sent[1].params["group_id"].is_i64());
    let names: Vec<_> = fake.actions().into_iter().map(|a| a.action).collect();
    assert_eq!(names, ["get_login_info", "send_msg", "send_msg"]);
}

/// The next text frame as JSON (bounded).
async fn ws_json(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Value {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// The fake's own controls (no peer needed): the token rule, the lifecycle frame, an unsupported action,
/// `drop_connections` and reconnection, and the files it serves.
#[tokio::test]
async fn onebot_fake_checks_tokens_answers_and_drops() {
    use futures::{SinkExt, StreamExt};
    use nanobot_testkit::fake_onebot::{FakeOneBot, SELF_ID, member_joined};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let fake = FakeOneBot::start(Some("tok-3")).await.unwrap();
    // No token, then a wrong one: 401.
    let err = tokio_tungstenite::connect_async(fake.ws_url()).await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    let mut req = fake.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(req).await.is_err());
    assert_eq!(fake.refused(), 2);
    // The token in the query is accepted; the lifecycle frame comes first.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}?access_token=tok-3", fake.ws_url()))
        .await
        .unwrap();
    let hello = ws_json(&mut ws).await;
    assert_eq!(hello["post_type"], "meta_event");
    assert_eq!(hello["meta_event_type"], "lifecycle");
    assert_eq!(hello["sub_type"], "connect");
    assert_eq!(hello["self_id"], SELF_ID);
    fake.connected(1).await.unwrap();
    ws.send(Message::text("not json")).await.unwrap();
    ws.send(Message::text(
        json!({"action": "set_friend_add_request", "params": {}, "echo": 7}).to_string(),
    ))
    .await
    .unwrap();
    let failed = ws_json(&mut ws).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["retcode"], 1404);
    assert_eq!(failed["echo"], 7);
    ws.send(Message::text(
        json!({"action": "get_group_member_info", "params": {"group_id": 9, "user_id": 8}, "echo": "e"})
            .to_string(),
    ))
    .await
    .unwrap();
    let member = ws_json(&mut ws).await;
    assert_eq!(member["data"]["nickname"], "member-8");
    assert_eq!(member["echo"], "e");
    fake.push_event(&member_joined(9, 8));
    let notice = ws_json(&mut ws).await;
    assert_eq!(notice["notice_type"], "group_increase");
    assert_eq!(fake.actions().len(), 2);

    // The peer restarts: the connection ends; a new one is accepted.
    fake.drop_connections();
    let end = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap();
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    let mut req = fake.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer tok-3".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(ws_json(&mut ws).await["meta_event_type"], "lifecycle");
    fake.connected(2).await.unwrap();

    nanobot_testkit::install_ring();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let png = client
        .get(format!("{}/files/cat.png", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(png.headers()["content-type"], "image/png");
    assert_eq!(png.text().await.unwrap(), "content of cat.png");
    let big = client
        .get(format!("{}/files/big-3000", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(big.bytes().await.unwrap().len(), 3000);
}

#[tokio::test]
async fn mattermost_driver_accepts_the_mattermost_fake() {
    use nanobot_testkit::fake_mattermost::{BOT_USER_ID, BOT_USERNAME, FakeMattermost, TEAM_ID};
    let Some(python) = peers::require("python venv (mattermostdriver)", peers::python()) else {
        return;
    };
    let fake = FakeMattermost::start("mm-token-1").await.unwrap();
    fake.add_channel("townsquarechannel000000001", "O", TEAM_ID);
    fake.add_user("aliceuser00000000000000001", "alice", "alice@example.com");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.txt");
    // Bytes that look like a multipart boundary line must survive as data.
    std::fs::write(&file, b"line one\r\n--not-a-boundary\r\n\x00\xff end").unwrap();
    let port = fake.port().to_string();
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(fixture("mattermost_sdk_probe.py"))
        .args([port.as_str(), "mm-token-1", "townsquarechannel000000001"])
        .arg(&file)
        .arg("serve")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("mattermostdriver probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;
    // What the driver saw.
    assert_eq!(out["login"], BOT_USERNAME, "{out}");
    assert_eq!(out["login_id"], BOT_USER_ID);
    assert_eq!(out["client_userid"], BOT_USER_ID);
    assert_eq!(out["is_bot"], true);
    assert_eq!(out["post_user"], BOT_USER_ID);
    assert_eq!(out["post_message"], "hello from the driver");
    assert_eq!(out["file_name"], "report.txt");
    assert_eq!(out["file_size"], 34);
    assert_eq!(out["reply_root"], out["post_id"]);
    assert_eq!(out["reply_files"], json!([out["file_id"]]));
    assert_eq!(out["reaction"], "thumbsup");
    assert_eq!(
        out["thread_messages"],
        json!(["a reply", "hello from the driver"]),
        "the thread, newest first"
    );
    assert_eq!(out["info_name"], "report.txt");
    assert_eq!(out["content_ok"], true, "the file's bytes read back");
    assert_eq!(out["too_long"]["kind"], "InvalidOrMissingParameters", "{out}");
    assert!(
        out["too_long"]["error"]
            .as_str()
            .unwrap()
            .contains("16384 characters"),
        "{out}"
    );

    // What the fake recorded.
    let posts = fake.wait_calls("POST", "/api/v4/posts", 3).await.unwrap();
    assert_eq!(
        posts[0].body,
        json!({"channel_id": "townsquarechannel000000001", "message": "hello from the driver"})
    );
    assert_eq!(posts[1].body["root_id"], out["post_id"]);
    let upload = fake.wait_calls("POST", "/api/v4/files", 1).await.unwrap();
    assert_eq!(
        upload[0].body,
        json!({"channel_id": "townsquarechannel000000001", "files": [{"name": "report.txt", "size": 34}]})
    );
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer mm-token-1")),
        "every request carried the Bearer token"
    );
    assert_eq!(fake.calls()[0].path, "/api/v4/users/me");

    // The driver's WebSocket authenticates with the challenge (no header), gets hello, then the event.
    let hello = json_line(&mut lines).await;
    assert_eq!(hello["seq"], 0, "{hello}");
    fake.connected(1).await.unwrap();
    let id = fake.post_event(
        "aliceuser00000000000000001",
        "townsquarechannel000000001",
        "hi @nanobot",
        None,
        &[],
    );
    let event = json_line(&mut lines).await;
    assert_eq!(event["event"], "posted", "{event}");
    assert_eq!(event["post"]["id"], id.as_str());
    assert_eq!(event["post"]["message"], "hi @nanobot");
    assert_eq!(event["post"]["user_id"], "aliceuser00000000000000001");
    assert_eq!(event["channel_type"], "O");
    assert_eq!(event["team_id"], TEAM_ID);
    assert_eq!(event["broadcast"]["channel_id"], "townsquarechannel000000001");
    assert!(event["seq"].as_u64().unwrap() >= 1);
    assert_eq!(json_line(&mut lines).await["done"], true);
    assert_eq!(fake.refused(), 0);
    drop(child);

    // A wrong token is refused, and the driver reports it.
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(fixture("mattermost_sdk_probe.py"))
        .args([port.as_str(), "wrong", "townsquarechannel000000001"])
        .arg(&file)
        .arg("refused")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("mattermostdriver refused probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let out = json_line(&mut lines).await;
    assert_eq!(out["refused"], true, "{out}");
    assert_eq!(out["kind"], "NoAccessTokenProvided", "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("Invalid or expired session"),
        "{out}"
    );
    assert_eq!(fake.refused(), 1);
}

#[tokio::test]
async fn python_nanobot_mattermost_channel_accepts_the_mattermost_fake() {
    use nanobot_testkit::fake_mattermost::{BOT_USER_ID, FakeMattermost, TEAM_ID};
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    const DM: &str = "directchannel0000000000001";
    const TOWN: &str = "townsquarechannel000000001";
    const ALICE: &str = "aliceuser00000000000000001";
    const BOB: &str = "bobuser0000000000000000001";
    let home = tempfile::tempdir().unwrap();
    let fake = FakeMattermost::start("mm-token-2").await.unwrap();
    fake.add_user(ALICE, "alice", "alice@example.com");
    fake.add_user(BOB, "bob", "bob@example.com");
    fake.add_channel(DM, "D", "");
    fake.add_channel(TOWN, "O", TEAM_ID);
    fake.add_file("notesfile00000000000000001", "notes.txt", b"the notes".to_vec());
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("mattermost_035_probe.py"))
        .args([fake.url().as_str(), "mm-token-2", TEAM_ID, "3"])
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("mattermost 0.3.5 probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(json_line(&mut lines).await["started"], true);
    fake.connected(1).await.unwrap();
    // It identified itself first, with the Bearer token, and its WebSocket carried the header.
    let me = fake.wait_calls("GET", "/api/v4/users/me", 1).await.unwrap();
    assert_eq!(me[0].authorization.as_deref(), Some("Bearer mm-token-2"));
    assert_eq!(fake.refused(), 0);

    let dm = fake.post_event(ALICE, DM, "hello bot", None, &["notesfile00000000000000001"]);
    let mention = fake.post_event(BOB, TOWN, "@nanobot what's up", None, &[]);
    fake.post_event(BOB, TOWN, "just chatting", None, &[]);
    fake.post_event(ALICE, TOWN, "earlier words", Some(&mention), &[]);
    let in_thread = fake.post_event(BOB, TOWN, "@nanobot and more", Some(&mention), &[]);

    let first = json_line(&mut lines).await;
    assert_eq!(first["channel"], "mattermost", "{first}");
    assert_eq!(first["chat_id"], DM);
    assert_eq!(first["sender_id"], ALICE);
    assert_eq!(first["content"], "hello bot");
    assert_eq!(
        first["session_key"],
        format!("mattermost:{DM}"),
        "a DM has no thread session"
    );
    assert_eq!(
        first["metadata"]["mattermost"],
        json!({"post_id": dm, "root_id": "", "channel_type": "dm"})
    );
    assert_eq!(first["metadata"]["message_id"], dm.as_str());
    assert_eq!(
        first["media"],
        json!([["notesfile00000000000000001_notes.txt", "the notes"]]),
        "the attachment was downloaded"
    );

    let second = json_line(&mut lines).await;
    assert_eq!(second["chat_id"], TOWN, "{second}");
    assert_eq!(second["sender_id"], BOB);
    assert_eq!(second["content"], "what's up", "the mention is stripped");
    assert_eq!(second["session_key"], format!("mattermost:{TOWN}:{mention}"));
    assert_eq!(
        second["metadata"]["mattermost"],
        json!({"post_id": mention, "root_id": "", "channel_type": "public", "thread_ts": mention})
    );
    // The post without the mention, and the thread reply without it, were not delivered: next is the mention in
    // the thread, with the thread read for context (newest first, the current post included).
    let third = json_line(&mut lines).await;
    assert_eq!(third["metadata"]["message_id"], in_thread.as_str(), "{third}");
    assert_eq!(third["session_key"], format!("mattermost:{TOWN}:{mention}"));
    assert_eq!(
        third["content"],
        format!(
            "Mattermost thread context before this mention:\n- <{BOB}>: @nanobot and more\n- <{ALICE}>: earlier words\n\nCurrent message:\nand more"
        )
    );
    let threads = fake.wait_calls("GET", "/api/v4/posts/", 1).await.unwrap();
    assert_eq!(threads[0].path, format!("/api/v4/posts/{mention}/thread"));
    assert_eq!(threads[0].query, "perPage=20");
    // The team was checked through the channel (broadcast.team_id is empty on `posted`), once.
    let channels = fake.wait_calls("GET", "/api/v4/channels/", 1).await.unwrap();
    assert_eq!(channels.len(), 1);
    assert_eq!(channels[0].path, format!("/api/v4/channels/{TOWN}"));

    assert_eq!(json_line(&mut lines).await["sent"], true);
    let posts = fake.wait_calls("POST", "/api/v4/posts", 2).await.unwrap();
    assert_eq!(posts[0].body, json!({"channel_id": DM, "message": "pong 0"}));
    assert_eq!(
        posts[1].body,
        json!({"channel_id": TOWN, "message": "pong 1", "root_id": mention}),
        "the reply goes into the thread"
    );
    let added = fake.wait_calls("POST", "/api/v4/reactions", 5).await.unwrap();
    let added: Vec<_> = added
        .iter()
        .map(|c| {
            (
                c.body["post_id"].as_str().unwrap().to_string(),
                c.body["emoji_name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let pair = |p: &str, e: &str| (p.to_string(), e.to_string());
    assert_eq!(
        added,
        [
            pair(&dm, "eyes"),
            pair(&mention, "eyes"),
            pair(&in_thread, "eyes"),
            pair(&dm, "white_check_mark"),
            pair(&mention, "white_check_mark"),
        ]
    );
    let removed = fake.wait_calls("DELETE", "/api/v4/users/", 2).await.unwrap();
    assert_eq!(
        removed.iter().map(|c| c.path.clone()).collect::<Vec<_>>(),
        [
            format!("/api/v4/users/{BOT_USER_ID}/posts/{dm}/reactions/eyes"),
            format!("/api/v4/users/{BOT_USER_ID}/posts/{mention}/reactions/eyes"),
        ]
    );
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer mm-token-2"))
    );
    assert_eq!(fake.refused(), 0);
}

/// The Mattermost fake's own controls (no peer needed): the token rule on REST and on the WebSocket (header and
/// challenge), per-connection `seq`, `drop_connections` and reconnection, errors in Mattermost's shape.
#[tokio::test]
async fn mattermost_fake_checks_tokens_sequences_and_drops() {
    use futures::{SinkExt, StreamExt};
    use nanobot_testkit::fake_mattermost::{FakeMattermost, TEAM_ID};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let fake = FakeMattermost::start("tok-mm").await.unwrap();
    fake.add_channel("chan", "O", TEAM_ID);
    let ws_url = format!("{}/api/v4/websocket", fake.url().replace("http://", "ws://"));
    nanobot_testkit::install_ring();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |path: &str, token: Option<&str>| {
        let mut req = client.get(format!("{}{path}", fake.url()));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let refused = get("/api/v4/users/me", Some("nope")).await.unwrap();
    assert_eq!(refused.status(), 401);
    let err: Value = refused.json().await.unwrap();
    assert_eq!(err["id"], "api.context.session_expired.app_error");
    assert_eq!(err["status_code"], 401);
    assert_eq!(get("/api/v4/channels/chan", None).await.unwrap().status(), 401);
    assert_eq!(fake.refused(), 2);
    let ping: Value = get("/api/v4/system/ping", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ping["status"], "OK");
    let missing = get("/api/v4/channels/other", Some("tok-mm")).await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["id"],
        "app.channel.get.existing.app_error"
    );
    let too_long = client
        .post(format!("{}/api/v4/posts", fake.url()))
        .bearer_auth("tok-mm")
        .json(&json!({"channel_id": "chan", "message": "é".repeat(16384)}))
        .send()
        .await
        .unwrap();
    assert_eq!(too_long.status(), 400);
    assert_eq!(
        too_long.json::<Value>().await.unwrap()["id"],
        "model.post.is_valid.message_length.app_error"
    );
    let created = client
        .post(format!("{}/api/v4/posts", fake.url()))
        .bearer_auth("tok-mm")
        .json(&json!({"channel_id": "chan", "message": "é".repeat(16383)}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "16383 characters fit");
    let post: Value = created.json().await.unwrap();
    assert_eq!(post["id"].as_str().unwrap().len(), 26);
    let patched: Value = client
        .put(format!(
            "{}/api/v4/posts/{}/patch",
            fake.url(),
            post["id"].as_str().unwrap()
        ))
        .bearer_auth("tok-mm")
        .json(&json!({"message": "edited"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(patched["message"], "edited");
    assert!(patched["edit_at"].as_i64().unwrap() > 0);

    // A wrong Bearer header on the upgrade: 401. A wrong challenge token: the socket is closed.
    let mut req = ws_url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap();
    ws.send(Message::text(
        json!({"seq": 1, "action": "user_typing", "data": {"channel_id": "chan"}}).to_string(),
    ))
    .await
    .unwrap();
    let fail = ws_json(&mut ws).await;
    assert_eq!(fail["status"], "FAIL");
    assert_eq!(fail["seq_reply"], 1);
    ws.send(Message::text(
        json!({"seq": 2, "action": "authentication_challenge", "data": {"token": "nope"}}).to_string(),
    ))
    .await
    .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap();
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert_eq!(fake.refused(), 4);

    // The challenge with the right token: hello (seq 0), then the OK; events count up from 1.
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap();
    ws.send(Message::text(
        json!({"seq": 1, "action": "authentication_challenge", "data": {"token": "tok-mm"}}).to_string(),
    ))
    .await
    .unwrap();
    let hello = ws_json(&mut ws).await;
    assert_eq!(hello["event"], "hello");
    assert_eq!(hello["seq"], 0);
    assert_eq!(ws_json(&mut ws).await, json!({"status": "OK", "seq_reply": 1}));
    fake.connected(1).await.unwrap();
    let first = fake.post_event("someone", "chan", "one", None, &[]);
    fake.post_event("someone", "chan", "two", Some(&first), &[]);
    let one = ws_json(&mut ws).await;
    assert_eq!(one["seq"], 1);
    assert_eq!(one["data"]["channel_type"], "O");
    assert_eq!(one["broadcast"]["team_id"], "");
    let two = ws_json(&mut ws).await;
    assert_eq!(two["seq"], 2);
    let post: Value = serde_json::from_str(two["data"]["post"].as_str().unwrap()).unwrap();
    assert_eq!(post["root_id"], first.as_str());
    fake.push_event(&json!({"event": "custom", "data": {}}));
    assert_eq!(ws_json(&mut ws).await["event"], "custom");

    // The server restarts: the connection ends; a header-authenticated one gets hello at once.
    fake.drop_connections();
    let end = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap();
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    let mut req = ws_url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer tok-mm".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(ws_json(&mut ws).await["event"], "hello");
    fake.connected(2).await.unwrap();
    assert_eq!(fake.refused(), 4);
}

/// The Teams fake's tokens, checked by Microsoft's Bot Framework SDK for Python (`botframework-connector`): its
/// channel validation (OpenID metadata → JWKS → RS256, issuer, audience = app id, `serviceurl` = the activity's,
/// endorsements naming the channel) accepts the fake's token and refuses broken ones, each for its own reason.
#[tokio::test]
async fn bot_framework_sdk_validates_the_teams_fakes_tokens() {
    use nanobot_testkit::fake_msteams::{APP_ID, APP_PASSWORD, FakeTeams, InboundToken};
    let Some(python) = peers::require("python venv (botframework-connector SDK)", peers::python()) else {
        return;
    };
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await.unwrap();
    let service = fake.service_url();
    let valid = InboundToken::for_app(APP_ID, &service);
    let cases = [
        ("valid", fake.token(&valid), "msteams", service.clone()),
        (
            "forged",
            fake.token(&InboundToken {
                forged: true,
                ..valid.clone()
            }),
            "msteams",
            service.clone(),
        ),
        (
            // The SDK allows 5 minutes of clock skew: an hour ago is expired for everyone.
            "expired",
            fake.token(&InboundToken {
                lifetime_secs: -3600,
                ..valid.clone()
            }),
            "msteams",
            service.clone(),
        ),
        (
            "other_audience",
            fake.token(&InboundToken::for_app(
                "0e9d8c7b-6a5f-4e3d-9c2b-1a0f9e8d7c6b",
                &service,
            )),
            "msteams",
            service.clone(),
        ),
        (
            "other_issuer",
            fake.token(&InboundToken {
                issuer: "https://sts.windows.net/evil/".into(),
                ..valid.clone()
            }),
            "msteams",
            service.clone(),
        ),
        (
            "service_url_mismatch",
            fake.token(&valid),
            "msteams",
            "https://smba.trafficmanager.net/amer/".to_string(),
        ),
        // The key's endorsements name msteams only: a token for another channel is refused.
        ("not_endorsed", fake.token(&valid), "slack", service.clone()),
    ];
    let cases: Vec<Value> = cases
        .into_iter()
        .map(|(name, token, channel, url)| {
            json!({"name": name, "token": token, "channel_id": channel, "service_url": url})
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let cases_file = dir.path().join("cases.json");
    std::fs::write(&cases_file, serde_json::to_vec(&cases).unwrap()).unwrap();

    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(fixture("msteams_sdk_probe.py"))
        .args(["inbound", fake.openid_config_url().as_str(), APP_ID])
        .arg(&cases_file)
        .env("REQUESTS_CA_BUNDLE", fake.ca_file())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("botframework inbound probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut results = std::collections::BTreeMap::new();
    for _ in 0..cases.len() {
        let line = json_line(&mut lines).await;
        results.insert(line["case"].as_str().unwrap().to_string(), line);
    }
    let ok = &results["valid"];
    assert_eq!(ok["ok"], true, "{ok}");
    assert_eq!(ok["authenticated"], true);
    assert_eq!(ok["aud"], APP_ID);
    assert_eq!(ok["serviceurl"], service.as_str());
    let refused = |case: &str, needle: &str| {
        let r = &results[case];
        assert_eq!(r["ok"], false, "{case}: {r}");
        let said = format!("{} {}", r["kind"].as_str().unwrap(), r["error"].as_str().unwrap());
        assert!(said.contains(needle), "{case}: expected {needle:?} in {said:?}");
    };
    refused("forged", "InvalidSignatureError");
    refused("expired", "ExpiredSignatureError");
    refused("other_audience", "Invalid AppId");
    refused("other_issuer", "No valid identity");
    refused("service_url_mismatch", "service_url claim do not match");
    refused("not_endorsed", "Could not validate endorsement key");
    // The SDK found the keys through the fake's OpenID configuration, once (it caches them).
    let paths: Vec<String> = fake.calls().into_iter().map(|c| c.path).collect();
    assert_eq!(
        paths,
        ["/v1/.well-known/openidconfiguration", "/v1/.well-known/keys"]
    );
}

/// The Teams fake's Azure AD and Bot Connector, used by Microsoft's Bot Framework SDK for Python: msal's tenant
/// discovery and client credentials get a token, `ConnectorClient` sends, replies and updates with it; a wrong
/// password gets AAD's `invalid_client`, which the SDK reports without the secret.
#[tokio::test]
async fn bot_framework_sdk_sends_through_the_teams_fake() {
    use nanobot_testkit::fake_msteams::{
        APP_ID, APP_PASSWORD, BOT_FRAMEWORK_SCOPE, FakeTeams, TENANT_ID, TeamsUser,
    };
    let Some(python) = peers::require("python venv (botframework-connector SDK)", peers::python()) else {
        return;
    };
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await.unwrap();
    let alice = TeamsUser::new("Alice");
    let conversation = alice.personal_conversation_id();
    let inbound = fake.message(&alice, &conversation, "personal", "hi");
    let activity_id = inbound["id"].as_str().unwrap().to_string();
    let run = |password: &str| {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(fixture("msteams_sdk_probe.py"))
            .arg("outbound")
            .args([
                fake.base_url(),
                fake.service_url(),
                APP_ID.into(),
                password.into(),
            ])
            .args([TENANT_ID, conversation.as_str(), activity_id.as_str()])
            .env("REQUESTS_CA_BUNDLE", fake.ca_file())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdout(Stdio::piped());
        ChildGuard::spawn_tokio("botframework outbound probe", &mut cmd).unwrap()
    };
    let mut child = run(APP_PASSWORD);
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let out = json_line(&mut BufReader::new(stdout).lines()).await;
    assert!(out["error"].is_null(), "{out}");

    let sent = fake.wait_sent(3, Duration::from_secs(10)).await.unwrap();
    assert_eq!(out["sent_id"], sent[0].id.as_str(), "{out}");
    assert_eq!(out["reply_id"], sent[1].id.as_str());
    assert_eq!(out["updated_id"], sent[1].id.as_str());
    assert_eq!(
        (sent[0].method.as_str(), sent[0].reply_to.as_deref()),
        ("POST", None)
    );
    assert_eq!(
        (sent[1].method.as_str(), sent[1].reply_to.as_deref()),
        ("POST", Some(activity_id.as_str()))
    );
    assert_eq!(
        (sent[2].method.as_str(), sent[2].reply_to.as_deref()),
        ("PUT", Some(sent[1].id.as_str()))
    );
    for s in &sent {
        assert_eq!(
            s.conversation_id, conversation,
            "the `a:1…` id was percent-decoded"
        );
        assert_eq!(s.token, sent[0].token, "one token for all three");
    }
    assert_eq!(sent[0].body["type"], "message");
    assert_eq!(sent[0].body["text"], "hello from the SDK");
    assert_eq!(sent[0].body["from"]["id"], format!("28:{APP_ID}"));
    assert_eq!(sent[1].body["replyToId"], activity_id.as_str());
    assert_eq!(sent[2].body["text"], "an edited reply");
    // msal read the tenant's OpenID configuration, then asked for one token with the app's credentials.
    assert_eq!(fake.tokens_issued(), 1);
    let asked = fake.token_requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tenant, TENANT_ID);
    assert_eq!(asked[0].client_id, APP_ID);
    assert_eq!(asked[0].grant_type, "client_credentials");
    assert_eq!(asked[0].scope, BOT_FRAMEWORK_SCOPE);
    assert!(asked[0].granted);
    let paths: Vec<(String, String)> = fake.calls().into_iter().map(|c| (c.method, c.path)).collect();
    assert_eq!(
        paths[..2],
        [
            (
                "GET".to_string(),
                format!("/{TENANT_ID}/v2.0/.well-known/openid-configuration")
            ),
            ("POST".to_string(), format!("/{TENANT_ID}/oauth2/v2.0/token")),
        ]
    );
    assert!(
        paths[2].1.starts_with("/amer/v3/conversations/a%3A1"),
        "msrest percent-encodes the id: {paths:?}"
    );
    assert_eq!(fake.refused_auth(), 0);
    drop(child);

    // A wrong password: AAD's 401 invalid_client, the SDK's PermissionError; nothing reaches the connector.
    let mut child = run("not-the-secret");
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let out = json_line(&mut BufReader::new(stdout).lines()).await;
    assert_eq!(out["kind"], "PermissionError", "{out}");
    let error = out["error"].as_str().unwrap();
    assert!(
        error.contains("invalid_client") && error.contains("AADSTS7000215"),
        "{error}"
    );
    assert!(error.contains(APP_ID), "AAD names the app: {error}");
    assert!(!error.contains("not-the-secret"), "never the secret: {error}");
    assert_eq!(fake.refused_auth(), 1);
    assert_eq!(fake.tokens_issued(), 1);
    assert_eq!(fake.sent().len(), 3);
}

/// The Python nanobot 0.3.5's own Teams channel against the Teams fake: it validates the fake's inbound tokens
/// through the fake's OpenID configuration and JWKS (a valid one passes; forged, expired and missing ones are
/// 401), publishes only the allowed user's personal messages, and replies with a token from the fake's Azure AD.
#[tokio::test]
async fn python_nanobot_msteams_channel_accepts_the_teams_fake() {
    use nanobot_testkit::fake_msteams::{
        APP_ID, APP_PASSWORD, BOT_FRAMEWORK_SCOPE, FakeTeams, InboundToken, TENANT_ID, TeamsUser,
    };
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await.unwrap();
    let alice = TeamsUser::new("Alice");
    let mallory = TeamsUser::new("Mallory");
    let port = peers::free_port().unwrap();
    let webhook = format!("http://127.0.0.1:{port}/api/messages");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("msteams_035_probe.py"))
        .args([
            fake.base_url(),
            fake.openid_config_url(),
            APP_ID.into(),
            APP_PASSWORD.into(),
        ])
        .args([
            TENANT_ID.into(),
            port.to_string(),
            alice.aad_object_id.clone(),
            "2".into(),
        ])
        .env("HOME", home.path())
        .env("SSL_CERT_FILE", fake.ca_file())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("msteams 0.3.5 probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let ready = json_line(&mut lines).await;
    assert_eq!(ready["listening"], port, "{ready}");

    let dm = alice.personal_conversation_id();
    let first = fake.message(&alice, &dm, "personal", "hello bot");
    let first_id = first["id"].as_str().unwrap().to_string();
    let token = fake.valid_token();
    assert_eq!(fake.deliver(&webhook, &first, Some(&token)).await.unwrap(), 200);
    let published = json_line(&mut lines).await;
    assert_eq!(published["channel"], "msteams", "{published}");
    assert_eq!(
        published["chat_id"],
        dm.as_str(),
        "the conversation id is the chat id"
    );
    assert_eq!(
        published["sender_id"],
        alice.aad_object_id.as_str(),
        "the AAD object id is the sender"
    );
    assert_eq!(published["content"], "hello bot");
    assert_eq!(
        published["metadata"]["msteams"],
        json!({"activity_id": first_id, "conversation_id": dm, "conversation_type": "personal",
               "from_name": "Alice"})
    );
    // It found the keys through the fake's OpenID configuration.
    let fetched: Vec<String> = fake.calls().into_iter().map(|c| c.path).collect();
    assert_eq!(
        fetched,
        ["/v1/.well-known/openidconfiguration", "/v1/.well-known/keys"]
    );

    // Refused (401): a forged token, an expired one, none at all.
    let other = fake.message(&alice, &dm, "personal", "must not arrive");
    let valid = InboundToken::for_app(APP_ID, &fake.service_url());
    let forged = fake.token(&InboundToken {
        forged: true,
        ..valid.clone()
    });
    let expired = fake.token(&InboundToken {
        lifetime_secs: -3600,
        ..valid.clone()
    });
    assert_eq!(fake.deliver(&webhook, &other, Some(&forged)).await.unwrap(), 401);
    assert_eq!(fake.deliver(&webhook, &other, Some(&expired)).await.unwrap(), 401);
    assert_eq!(fake.deliver(&webhook, &other, None).await.unwrap(), 401);
    // Accepted (200) but not published: a stranger's DM, and a group chat (0.3.5 answers DMs only).
    let stranger = fake.message(
        &mallory,
        &mallory.personal_conversation_id(),
        "personal",
        "let me in",
    );
    assert_eq!(
        fake.deliver(&webhook, &stranger, Some(&token)).await.unwrap(),
        200
    );
    let group = fake.message(&alice, "19:abc123def456@thread.v2", "groupChat", "in a group");
    assert_eq!(fake.deliver(&webhook, &group, Some(&token)).await.unwrap(), 200);
    // The next published message is this marker, in another conversation: nothing else got through.
    let marker = fake.message(&alice, "a:1another-conversation", "personal", "marker");
    assert_eq!(fake.deliver(&webhook, &marker, Some(&token)).await.unwrap(), 200);
    let published = json_line(&mut lines).await;
    assert_eq!(published["content"], "marker", "{published}");
    assert_eq!(published["chat_id"], "a:1another-conversation");

    // channel.send: a token from the fake's Azure AD (the app's tenant), then the reply in the first
    // conversation, threaded to its activity.
    let done = json_line(&mut lines).await;
    assert_eq!(done["sent"], true, "{done}");
    let sent = fake.wait_sent(1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].method, "POST");
    assert_eq!(sent[0].conversation_id, dm);
    assert_eq!(
        sent[0].reply_to, None,
        "0.3.5 posts to …/activities with replyToId in the body"
    );
    assert_eq!(
        sent[0].body,
        json!({"type": "message", "text": "hello back", "replyToId": first_id})
    );
    assert_eq!(fake.tokens_issued(), 1);
    let asked = fake.token_requests();
    assert_eq!(
        (
            asked[0].tenant.as_str(),
            asked[0].client_id.as_str(),
            asked[0].grant_type.as_str(),
            asked[0].scope.as_str()
        ),
        (TENANT_ID, APP_ID, "client_credentials", BOT_FRAMEWORK_SCOPE)
    );
    assert_eq!(fake.refused_auth(), 0);
    // 0.3.5 stored the conversation refs under the workspace (the allowed user's two conversations only).
    let refs = done["refs"].as_object().unwrap();
    let mut keys: Vec<&str> = refs.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["a:1another-conversation", dm.as_str()]);
    assert_eq!(
        refs[dm.as_str()],
        json!({"service_url": fake.service_url(), "conversation_id": dm, "bot_id": fake.bot_id(),
               "activity_id": first_id, "conversation_type": "personal", "tenant_id": TENANT_ID})
    );
}

/// `application/x-www-form-urlencoded` (reqwest's `form` feature is off here).
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    char::from(b).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The Teams fake's own rules (no peer needed): the token endpoint's AAD errors (never echoing the secret), the
/// connector's bearer rule, percent-decoded ids, replies and updates, its 400/404/405 answers, outages, expired
/// tokens, and the shape of what it mints.
#[tokio::test]
async fn teams_fake_checks_credentials_tokens_and_outages() {
    use base64::Engine as _;
    use nanobot_testkit::fake_msteams::{
        APP_ID, APP_PASSWORD, BOT_FRAMEWORK_ISSUER, BOT_FRAMEWORK_SCOPE, BOT_ID, FakeTeams, InboundToken,
        TENANT_ID, TeamsUser,
    };
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await.unwrap();
    assert_eq!(BOT_ID, format!("28:{APP_ID}"));
    assert_eq!(fake.bot_id(), BOT_ID);
    let http = fake.client().unwrap();
    let token_url = fake.token_url(TENANT_ID);
    let ask = |secret: &str| {
        http.post(&token_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[
                ("grant_type", "client_credentials"),
                ("client_id", APP_ID),
                ("client_secret", secret),
                ("scope", BOT_FRAMEWORK_SCOPE),
            ]))
    };
    // A wrong secret: 401 invalid_client naming the app, never the secret.
    let resp = ask("wrong secret+&=").send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    assert_eq!(body["error_codes"], json!([7000215]));
    let text = body.to_string();
    assert!(text.contains("AADSTS7000215") && text.contains(APP_ID), "{text}");
    assert!(!text.contains("wrong secret"), "{text}");
    // Unknown client, missing parameter, another grant, a scope without /.default.
    let resp = http
        .post(&token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "someone-else"),
            ("client_secret", APP_PASSWORD),
            ("scope", BOT_FRAMEWORK_SCOPE),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "unauthorized_client"
    );
    let resp = http
        .post(&token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("grant_type", "client_credentials")]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("'client_id'"),
        "{body}"
    );
    let resp = http
        .post(&token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "password"),
            ("client_id", APP_ID),
            ("scope", BOT_FRAMEWORK_SCOPE),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "unsupported_grant_type"
    );
    let resp = http
        .post(&token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "client_credentials"),
            ("client_id", APP_ID),
            ("client_secret", APP_PASSWORD),
            ("scope", "https://api.botframework.com"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.json::<Value>().await.unwrap()["error"], "invalid_scope");
    assert_eq!(fake.refused_auth(), 2);
    assert_eq!(fake.tokens_issued(), 0);

    // The right credentials (in the body; HTTP Basic works too).
    let resp = ask(APP_PASSWORD).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3599);
    let access = body["access_token"].as_str().unwrap().to_string();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(access.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], "https://api.botframework.com");
    assert_eq!(claims["appid"], APP_ID);
    assert_eq!(claims["tid"], TENANT_ID);
    let resp = http
        .post(fake.token_url("botframework.com"))
        .basic_auth(APP_ID, Some(APP_PASSWORD))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "client_credentials"),
            ("scope", BOT_FRAMEWORK_SCOPE),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(fake.tokens_issued(), 2);
    assert_eq!(fake.token_requests().last().unwrap().tenant, "botframework.com");

    // The connector: the bearer rule, percent-decoding, send/reply/update, bad bodies.
    let conv = "19:abc@thread.tacv2;messageid=1700000000000";
    let encoded = "19%3Aabc%40thread.tacv2%3Bmessageid%3D1700000000000";
    let activities = format!("{}v3/conversations/{encoded}/activities", fake.service_url());
    let msg = json!({"type": "message", "text": "hi"});
    let resp = http.post(&activities).json(&msg).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["message"],
        "Authorization has been denied for this request."
    );
    let resp = http
        .post(&activities)
        .bearer_auth("made-up")
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(fake.refused_auth(), 4);
    let resp = http
        .post(&activities)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let one = format!("{activities}/{id}");
    let resp = http
        .post(&one)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let reply_id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(reply_id, id);
    let resp = http
        .put(format!("{activities}/{reply_id}"))
        .bearer_auth(&access)
        .json(&json!({"type": "message", "text": "edited"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap(), json!({"id": reply_id}));
    let sent = fake.wait_sent(3, Duration::from_secs(5)).await.unwrap();
    assert!(
        sent.iter()
            .all(|s| s.conversation_id == conv && s.token == access)
    );
    assert_eq!(sent[0].reply_to, None);
    assert_eq!(sent[1].reply_to.as_deref(), Some(id.as_str()));
    assert_eq!(
        (sent[2].method.as_str(), sent[2].reply_to.as_deref()),
        ("PUT", Some(reply_id.as_str()))
    );
    for (body, what) in [
        ("not json", "valid JSON"),
        ("[1]", "JSON object"),
        ("{\"text\":\"x\"}", "type is required"),
    ] {
        let resp = http
            .post(&activities)
            .bearer_auth(&access)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], "BadArgument");
        assert!(err["error"]["message"].as_str().unwrap().contains(what), "{err}");
    }
    let root = format!("{}/v3/conversations/{encoded}/activities", fake.base_url());
    let resp = http
        .post(&root)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        404,
        "the connector lives under the service URL's path"
    );
    let resp = http.get(&activities).bearer_auth(&access).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    let resp = http
        .post(format!("{activities}%zz"))
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // A token for another resource does not open the connector.
    let resp = http
        .post(&token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "client_credentials"),
            ("client_id", APP_ID),
            ("client_secret", APP_PASSWORD),
            ("scope", "https://graph.microsoft.com/.default"),
        ]))
        .send()
        .await
        .unwrap();
    let graph = resp.json::<Value>().await.unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = http
        .post(&activities)
        .bearer_auth(&graph)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);

    // Outage: 503 (and 429 with Retry-After), nothing recorded; then back.
    fake.fail_connector(Some(503));
    let resp = http
        .post(&activities)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    fake.fail_connector(Some(429));
    let resp = http
        .post(&activities)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    fake.fail_connector(None);
    assert_eq!(fake.sent().len(), 3);
    // Expired tokens: refused until a new one is fetched.
    fake.expire_tokens();
    let resp = http
        .post(&activities)
        .bearer_auth(&access)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let fresh = ask(APP_PASSWORD)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let resp = http
        .post(&activities)
        .bearer_auth(fresh["access_token"].as_str().unwrap())
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert!(
        fake.wait_sent(5, Duration::from_millis(200)).await.is_err(),
        "a bounded wait fails"
    );

    // Discovery documents.
    let config: Value = http
        .get(fake.openid_config_url())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["issuer"], BOT_FRAMEWORK_ISSUER);
    assert_eq!(config["jwks_uri"], fake.jwks_url());
    let jwks: Value = http
        .get(fake.jwks_url())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = &jwks["keys"][0];
    assert_eq!(
        (key["kty"].as_str(), key["kid"].as_str()),
        (Some("RSA"), Some(fake.kid()))
    );
    assert_eq!(key["e"], "AQAB");
    assert_eq!(key["endorsements"], json!(["msteams"]));
    assert!(
        !key["n"].as_str().unwrap().contains('='),
        "base64url without padding"
    );
    let tenant: Value = http
        .get(format!(
            "{}/{TENANT_ID}/v2.0/.well-known/openid-configuration",
            fake.base_url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tenant["token_endpoint"], token_url);

    // What it mints: the header names the published key; the claims are the Bot Framework's.
    let part = |jwt: &str, i: usize| -> Value {
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(jwt.split('.').nth(i).unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let token = fake.valid_token();
    assert_eq!(
        part(&token, 0),
        json!({"typ": "JWT", "alg": "RS256", "kid": fake.kid(), "x5t": fake.kid()})
    );
    let claims = part(&token, 1);
    assert_eq!(claims["iss"], BOT_FRAMEWORK_ISSUER);
    assert_eq!(claims["aud"], APP_ID);
    assert_eq!(claims["serviceurl"], fake.service_url());
    assert!(claims["nbf"].as_i64().unwrap() < claims["exp"].as_i64().unwrap());
    let odd = fake.token(&InboundToken {
        kid: Some("unknown-kid".into()),
        service_url: None,
        ..InboundToken::for_app(APP_ID, "")
    });
    assert_eq!(part(&odd, 0)["kid"], "unknown-kid");
    assert!(part(&odd, 1).get("serviceurl").is_none());

    // A Teams message activity.
    let alice = TeamsUser::new("Alice");
    assert_eq!(alice, TeamsUser::new("Alice"));
    assert!(alice.id.starts_with("29:1") && alice.personal_conversation_id().starts_with("a:1"));
    let activity = fake.message(&alice, conv, "channel", "hello");
    assert_eq!(activity["channelId"], "msteams");
    assert_eq!(activity["serviceUrl"], fake.service_url());
    assert_eq!(activity["recipient"]["id"], BOT_ID);
    assert_eq!(activity["from"]["aadObjectId"], alice.aad_object_id.as_str());
    assert_eq!(activity["conversation"]["isGroup"], true);
    assert_eq!(activity["channelData"]["teamsChannelId"], "19:abc@thread.tacv2");
    assert_eq!(activity["channelData"]["tenant"]["id"], TENANT_ID);
    assert!(activity["timestamp"].as_str().unwrap().ends_with('Z'));
    let later = fake.message(&alice, conv, "channel", "again");
    assert!(
        later["id"].as_str().unwrap().parse::<u64>().unwrap()
            > activity["id"].as_str().unwrap().parse::<u64>().unwrap()
    );
}

// ---------------------------------------------------------------------------------------------------------
// signal-cli daemon (HTTP mode)

const SIGNAL_ACCOUNT: &str = "+15550000001";

/// POSTs `body` to the fake's JSON-RPC endpoint as `application/json`; the status and the body (`Null` when empty).
async fn signal_rpc(client: &reqwest::Client, url: &str, body: &str) -> (u16, Value) {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (status, value)
}

/// Reads raw bytes from an event stream until they end with a blank line (or the stream ends).
async fn signal_raw_event(resp: &mut reqwest::Response) -> String {
    let read = async {
        let mut buf = String::new();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            if buf.ends_with("\n\n") || buf == ":\n" {
                break;
            }
        }
        buf
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no event within 10 s")
}

/// The signal-cli fake's own rules (no peer needed): the HTTP endpoints' statuses, JSON-RPC framing and errors
/// as the daemon answers them, the commands' results and errors, SSE framing for several listeners, stored
/// attachments, restarts and outages.
#[tokio::test]
async fn signal_fake_answers_like_the_daemon() {
    use nanobot_testkit::fake_signal::{
        FakeSignal, Receipt, RpcFailure, SIGNAL_CLI_VERSION, SignalUser, codes, group_id_for, with_quote,
    };
    let fake = FakeSignal::start(SIGNAL_ACCOUNT).await.unwrap();
    let alice = SignalUser::new("Alice", "+15550000002");
    let carol = SignalUser::hidden_number("Carol");
    fake.add_contact(&alice);
    fake.add_contact(&carol);
    let team = fake.add_group("Team", &[&alice]);
    assert_eq!(team, group_id_for("Team"));
    assert_eq!(team.len(), 44);
    nanobot_testkit::install_ring();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = fake.rpc_url();
    let call = |body: Value| {
        let client = client.clone();
        let url = url.clone();
        async move { signal_rpc(&client, &url, &body.to_string()).await }
    };

    // The HTTP layer.
    let check = client
        .get(format!("{}/api/v1/check", fake.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(check.status(), 200);
    assert!(check.bytes().await.unwrap().is_empty());
    assert_eq!(fake.checks(), 1);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 405);
    let no_type = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(no_type.status(), 415);
    let text_plain = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(text_plain.status(), 415);
    let misdirected = client
        .post(&url)
        .header("host", "signal.example:8080")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(misdirected.status(), 421, "the daemon pins the Host header");
    let localhost = client
        .post(&url)
        .header("host", format!("localhost:{}", fake.port()))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","method":"version","id":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(localhost.status(), 200);
    let nowhere = client
        .get(format!("{}/api/v2/nothing", fake.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(nowhere.status(), 404);
    assert!(nowhere.text().await.unwrap().contains("No context found"));

    // JSON-RPC framing.
    let (status, parse) = signal_rpc(&client, &url, "{nope").await;
    assert_eq!(status, 200);
    assert_eq!(parse["error"]["code"], codes::PARSE_ERROR);
    assert_eq!(parse["id"], Value::Null);
    assert_eq!(
        call(json!({"jsonrpc": "2.0"})).await,
        (
            200,
            json!({"jsonrpc":"2.0","error":{"code":-32600,"message":"method field must be set","data":null},"id":null})
        ),
        "the man page's example"
    );
    assert_eq!(
        call(json!({"jsonrpc": "1.0", "method": "version", "id": 7}))
            .await
            .1,
        json!({"jsonrpc":"2.0","error":{"code":-32600,"message":"only jsonrpc version 2.0 is supported","data":null},"id":7})
    );
    let (_, unknown_field) = call(json!({"jsonrpc": "2.0", "method": "version", "id": 2, "extra": 1})).await;
    assert_eq!(unknown_field["error"]["code"], codes::INVALID_REQUEST);
    assert!(
        unknown_field["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Unrecognized field \"extra\""),
        "{unknown_field}"
    );
    assert_eq!(
        call(json!({"jsonrpc": "2.0", "method": "frobnicate", "id": "x"})).await,
        (
            200,
            json!({"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not implemented","data":null},"id":"x"})
        )
    );
    let (_, subscribe) = call(json!({"jsonrpc": "2.0", "method": "subscribeReceive", "id": 3})).await;
    assert_eq!(
        subscribe["error"]["code"],
        codes::METHOD_NOT_FOUND,
        "socket mode only"
    );
    assert_eq!(
        call(json!({"jsonrpc": "2.0", "method": "version", "id": 4}))
            .await
            .1,
        json!({"jsonrpc": "2.0", "result": {"version": SIGNAL_CLI_VERSION}, "id": 4})
    );
    assert_eq!(
        call(json!({"jsonrpc": "2.0", "method": "version"})).await,
        (201, Value::Null),
        "a notification gets no answer"
    );
    let (status, batch) = call(json!([
        {"jsonrpc": "2.0", "method": "version", "id": 1},
        {"jsonrpc": "2.0", "method": "version"},
        {"jsonrpc": "2.0", "id": 3},
    ]))
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        batch,
        json!([
            {"jsonrpc": "2.0", "result": {"version": SIGNAL_CLI_VERSION}, "id": 1},
            {"jsonrpc":"2.0","error":{"code":-32600,"message":"method field must be set","data":null},"id":3},
        ])
    );
    assert_eq!(call(json!([])).await.1["error"]["message"], "invalid request");
    assert_eq!(
        signal_rpc(&client, &url, "5").await.1["error"]["message"],
        "unexpected type: NUMBER"
    );
    assert_eq!(
        signal_rpc(&client, &url, "").await.1["error"]["message"],
        "unexpected type: MISSING"
    );
    assert_eq!(
        call(json!({"jsonrpc": "2.0", "method": "version", "params": [1], "id": 5}))
            .await
            .1["error"]["code"],
        codes::INVALID_REQUEST
    );

    // send: results, and the daemon's errors.
    let send = |params: Value| call(json!({"jsonrpc": "2.0", "method": "send", "params": params, "id": 9}));
    let notes = tempfile::tempdir().unwrap();
    let notes_path = notes.path().join("notes.txt");
    std::fs::write(&notes_path, "the notes").unwrap();
    let notes_path = notes_path.to_str().unwrap().to_string();
    let (_, direct) = send(json!({
        "recipient": ["+1 (555) 000-0002"], "message": "hi", "textStyle": "0:2:BOLD",
        "attachments": ["data:text/plain;filename=n.txt;base64,aGk=", notes_path], "account": "+19999999999",
    }))
    .await;
    let first_ts = direct["result"]["timestamp"].as_i64().unwrap();
    assert_eq!(
        direct["result"]["results"],
        json!([{"recipientAddress": {"uuid": alice.uuid, "number": "+15550000002", "username": null},
                "type": "SUCCESS"}])
    );
    let (_, to_group) = send(json!({"groupId": team, "message": "all"})).await;
    assert_eq!(
        to_group["result"]["results"],
        json!([{"recipientAddress": {"uuid": alice.uuid, "number": "+15550000002", "username": null},
                "groupId": team, "type": "SUCCESS"}]),
        "one result per member but the account"
    );
    let (_, to_uuid) = send(json!({"recipients": [carol.uuid.to_uppercase()], "message": "psst"})).await;
    assert_eq!(
        to_uuid["result"]["results"][0]["recipientAddress"],
        json!({"uuid": carol.uuid, "number": null, "username": null})
    );
    let (_, unregistered) = send(json!({"recipient": "+15559999999", "message": "x"})).await;
    assert_eq!(unregistered["error"]["code"], codes::USER_ERROR);
    assert_eq!(unregistered["error"]["message"], "Failed to send message");
    assert_eq!(
        unregistered["error"]["data"]["response"]["results"],
        json!([{"recipientAddress": {"uuid": null, "number": "+15559999999", "username": null},
                "type": "UNREGISTERED_FAILURE"}])
    );
    let error_of = |answer: &Value| {
        (
            answer["error"]["code"].as_i64().unwrap(),
            answer["error"]["message"].as_str().unwrap().to_string(),
        )
    };
    let nope = group_id_for("Nope");
    assert_eq!(
        error_of(&send(json!({"groupId": nope, "message": "x"})).await.1),
        (-1, format!("Group not found: {nope}"))
    );
    let (code, message) = error_of(&send(json!({"groupId": "abc", "message": "x"})).await.1);
    assert_eq!(code, -1);
    assert!(
        message.starts_with("Invalid group id: Failed to decode groupId (must be base64) \"abc\": "),
        "{message}"
    );
    assert_eq!(
        error_of(
            &send(json!({"recipient": alice.id(), "message": "x", "textStyle": ["0:1:LOUD"]}))
                .await
                .1
        ),
        (-1, "Invalid style: LOUD".into())
    );
    assert_eq!(
        error_of(&send(json!({"recipient": alice.id()})).await.1),
        (
            -1,
            "Sending empty message is not allowed, either a message, attachment or sticker must be given."
                .into()
        )
    );
    assert_eq!(
        error_of(&send(json!({"message": "x"})).await.1),
        (-1, "No recipients given".into())
    );
    assert_eq!(
        error_of(&send(json!({"recipient": "not a number", "message": "x"})).await.1),
        (
            -1,
            "Invalid phone number 'not a number': No valid characters found.".into()
        )
    );
    assert_eq!(
        error_of(
            &send(json!({"recipient": alice.id(), "message": "x", "quoteTimestamp": 1_700_000_000_000_i64}))
                .await
                .1
        ),
        (-1, "Quote author parameter is missing".into())
    );
    let missing = "/nonexistent/photo.png";
    assert_eq!(
        error_of(
            &send(json!({"recipient": alice.id(), "attachment": missing}))
                .await
                .1
        ),
        (
            codes::INTERNAL_ERROR,
            format!(
                "Failed to send message: {missing}: {missing} (No such file or directory) (AttachmentInvalidException) (UnexpectedErrorException)"
            )
        )
    );
    let inside = fake.data_dir().join("secret");
    std::fs::write(&inside, "account keys").unwrap();
    let (code, message) = error_of(
        &send(json!({"recipient": alice.id(), "attachment": inside.to_str().unwrap()}))
            .await
            .1,
    );
    assert_eq!(code, codes::INTERNAL_ERROR);
    assert!(
        message.contains("Attaching files from the signal-cli data directory is not allowed"),
        "{message}"
    );
    let (code, message) = error_of(
        &send(json!({"recipient": alice.id(), "message": "x", "viewOnce": "yes"}))
            .await
            .1,
    );
    assert_eq!(code, codes::INTERNAL_ERROR);
    assert!(
        message.starts_with("class java.lang.String cannot be cast to class java.lang.Boolean"),
        "{message}"
    );

    // What was accepted, decoded.
    let sent = fake.sent();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert_eq!(sent[0].timestamp, first_ts);
    assert_eq!(sent[0].recipients, ["+15550000002"]);
    assert_eq!(sent[0].message, "hi");
    assert_eq!(sent[0].text_styles, ["0:2:BOLD"]);
    let files: Vec<_> = sent[0]
        .attachments
        .iter()
        .map(|a| {
            (
                a.filename.as_deref().unwrap(),
                a.content_type.as_str(),
                a.bytes.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("n.txt", "text/plain", &b"hi"[..]),
            ("notes.txt", "text/plain", &b"the notes"[..])
        ]
    );
    assert_eq!(sent[1].group_ids, [team.as_str()]);
    assert_eq!(sent[2].recipients, [carol.uuid.as_str()]);
    assert!(sent[0].timestamp < sent[1].timestamp && sent[1].timestamp < sent[2].timestamp);

    // The other commands.
    let method = |name: &str, params: Value| {
        call(json!({"jsonrpc": "2.0", "method": name, "params": params, "id": name}))
    };
    let (_, typing) = method("sendTyping", json!({"recipient": alice.id()})).await;
    assert_eq!(typing["result"]["results"][0]["type"], "SUCCESS", "{typing}");
    let (_, typing) = method("sendTyping", json!({"groupId": team, "stop": true})).await;
    assert_eq!(typing["result"]["results"][0]["groupId"], team.as_str());
    let (_, receipt) = method(
        "sendReceipt",
        json!({"recipient": alice.id(), "targetTimestamp": [first_ts]}),
    )
    .await;
    assert_eq!(receipt["result"]["results"][0]["type"], "SUCCESS", "{receipt}");
    assert_eq!(
        method(
            "sendReceipt",
            json!({"recipient": alice.id(), "targetTimestamp": first_ts, "type": "seen"})
        )
        .await
        .1["error"]["message"],
        "Unknown receipt type: seen"
    );
    let (_, groups) = method("listGroups", Value::Null).await;
    assert_eq!(groups["result"][0]["id"], team.as_str());
    assert_eq!(groups["result"][0]["name"], "Team");
    assert_eq!(
        groups["result"][0]["members"],
        json!([{"number": SIGNAL_ACCOUNT, "uuid": fake.me().uuid, "isAdmin": true},
               {"number": "+15550000002", "uuid": alice.uuid, "isAdmin": false}])
    );
    let (_, status) = method(
        "getUserStatus",
        json!({"recipient": ["+15550000002", "+15559999999"]}),
    )
    .await;
    assert_eq!(
        status["result"],
        json!([{"recipient": "+15550000002", "number": "+15550000002", "uuid": alice.uuid, "isRegistered": true},
               {"recipient": "+15559999999", "number": "+15559999999", "uuid": null, "isRegistered": false}])
    );
    assert_eq!(
        method("updateConfiguration", json!({"typingIndicators": true}))
            .await
            .1["result"],
        json!({})
    );

    // The event stream: two listeners get the same frames, framed as the daemon frames them.
    let mut a = client.get(fake.events_url()).send().await.unwrap();
    assert_eq!(a.status(), 200);
    assert_eq!(a.headers()["content-type"], "text/event-stream");
    let mut b = client.get(fake.events_url()).send().await.unwrap();
    fake.wait_listeners(2).await.unwrap();
    assert_eq!(fake.listeners(), 2);
    let envelope = fake.direct_message(&alice, "hello");
    assert_eq!(fake.deliver(&envelope), 2);
    let expected = json!({"envelope": envelope, "account": SIGNAL_ACCOUNT});
    assert_eq!(
        signal_raw_event(&mut b).await,
        format!("event:receive\ndata:{expected}\n\n")
    );
    let frames = nanobot_testkit::sse::read_frames(&mut a, 1).await.unwrap();
    assert_eq!(frames[0].event.as_deref(), Some("receive"));
    assert_eq!(frames[0].json(), expected);
    assert_eq!(envelope["source"], "+15550000002");
    assert_eq!(envelope["sourceUuid"], alice.uuid.as_str());
    assert_eq!(envelope["sourceName"], "Alice");
    assert_eq!(envelope["dataMessage"]["message"], "hello");
    assert_eq!(envelope["dataMessage"]["timestamp"], envelope["timestamp"]);
    assert!(envelope["timestamp"].as_i64().unwrap() > first_ts);
    // An attachment is a file in the attachments directory, named by the envelope's id.
    let with_photo = fake
        .deliver_with_attachment(&alice, "", Some("photo.png"), "image/png", b"png bytes")
        .unwrap();
    let attachment = &with_photo["dataMessage"]["attachments"][0];
    let id = attachment["id"].as_str().unwrap();
    assert!(id.ends_with(".png"), "{id}");
    assert_eq!(attachment["contentType"], "image/png");
    assert_eq!(attachment["filename"], "photo.png");
    assert_eq!(attachment["size"], 9);
    assert_eq!(with_photo["dataMessage"]["message"], Value::Null);
    assert_eq!(
        std::fs::read(fake.attachments_dir().join(id)).unwrap(),
        b"png bytes"
    );
    assert!(signal_raw_event(&mut b).await.contains(id));
    let (_, data) = method("getAttachment", json!({"id": id, "recipient": alice.id()})).await;
    assert_eq!(data["result"]["data"], "cG5nIGJ5dGVz");
    // The other envelopes the daemon writes.
    let typing = fake.typing_message(&alice, true, Some(&team));
    assert_eq!(
        typing["typingMessage"],
        json!({"action": "STARTED", "timestamp": typing["timestamp"], "groupId": team})
    );
    let receipt = fake.receipt_message(&alice, Receipt::Read, &[first_ts]);
    assert_eq!(
        receipt["receiptMessage"],
        json!({"when": receipt["timestamp"], "isDelivery": false, "isRead": true, "isViewed": false,
               "timestamps": [first_ts]})
    );
    let sync = fake.sync_sent_message(&alice, "from my phone");
    assert_eq!(sync["sourceNumber"], SIGNAL_ACCOUNT);
    assert_eq!(sync["sourceDevice"], 2);
    let sent_message = &sync["syncMessage"]["sentMessage"];
    assert_eq!(sent_message["destinationNumber"], alice.id());
    assert_eq!(sent_message["destinationUuid"], alice.uuid.as_str());
    assert_eq!(sent_message["message"], "from my phone");
    let mut quoting = fake.direct_message(&carol, "yes");
    with_quote(&mut quoting, first_ts, &fake.me(), "hi");
    assert_eq!(quoting["source"], carol.uuid.as_str(), "no number: the UUID");
    assert_eq!(quoting["sourceNumber"], Value::Null);
    assert_eq!(
        quoting["dataMessage"]["quote"],
        json!({"id": first_ts, "author": SIGNAL_ACCOUNT, "authorNumber": SIGNAL_ACCOUNT,
               "authorUuid": fake.me().uuid, "text": "hi", "attachments": []})
    );
    assert_eq!(fake.keep_alive(), 2);
    assert_eq!(signal_raw_event(&mut b).await, ":\n");
    // The daemon restarting: every stream ends.
    fake.restart_events();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while b.chunk().await.unwrap().is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end");
    assert_eq!(fake.listeners(), 0);
    assert_eq!(fake.streams_opened(), 2);

    // Outages.
    fake.fail_rpc(Some(RpcFailure::Http(503)));
    assert_eq!(method("listGroups", Value::Null).await, (503, Value::Null));
    assert_eq!(fake.calls().last().unwrap().status, 503);
    fake.fail_rpc(Some(RpcFailure::Internal));
    assert_eq!(
        method("listGroups", Value::Null).await.1,
        json!({"jsonrpc":"2.0","error":{"code":-32603,"message":"An internal server error has occurred.","data":null},"id":null})
    );
    fake.fail_rpc(Some(RpcFailure::Network));
    let (_, down) = send(json!({"recipient": alice.id(), "message": "x"})).await;
    assert_eq!(down["error"]["message"], "Failed to send message");
    assert_eq!(
        down["error"]["data"]["response"]["results"][0]["type"],
        "NETWORK_FAILURE"
    );
    assert!(
        method("listGroups", Value::Null).await.1["result"].is_array(),
        "only sends fail"
    );
    fake.fail_rpc(Some(RpcFailure::RateLimit { retry_after_secs: 30 }));
    let (_, limited) = send(json!({"recipient": alice.id(), "message": "x"})).await;
    assert_eq!(limited["error"]["code"], codes::RATELIMIT_ERROR);
    assert_eq!(
        limited["error"]["data"]["response"]["results"][0]["retryAfterSeconds"],
        30
    );
    fake.fail_rpc(None);
    assert!(send(json!({"recipient": alice.id(), "message": "x"})).await.1["result"]["timestamp"].is_i64());
    assert_eq!(fake.sent().len(), 4);
}

/// pysignalclijsonrpc (a client of signal-cli's JSON-RPC over HTTP) against the fake: listGroups, getUserStatus,
/// sends with file and bytes attachments (as data URIs) to a contact and a group, and the daemon's errors.
#[tokio::test]
async fn pysignalclijsonrpc_talks_to_the_signal_fake() {
    use nanobot_testkit::fake_signal::{FakeSignal, SIGNAL_CLI_VERSION, SignalUser, codes};
    let Some(python) = peers::require("python venv (pysignalclijsonrpc)", peers::python()) else {
        return;
    };
    let fake = FakeSignal::start(SIGNAL_ACCOUNT).await.unwrap();
    let alice = SignalUser::new("Alice", "+15550000002");
    let bob = SignalUser::new("Bob", "+15550000003");
    fake.add_contact(&alice);
    let team = fake.add_group("Team", &[&alice, &bob]);
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "the notes\n").unwrap();
    let unknown = "+15559999999";
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("signal_sdk_probe.py"))
        .args([
            fake.rpc_url().as_str(),
            SIGNAL_ACCOUNT,
            alice.id(),
            team.as_str(),
            notes.to_str().unwrap(),
            unknown,
        ])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("pysignalclijsonrpc probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let out = json_line(&mut BufReader::new(stdout).lines()).await;

    assert_eq!(out["version"], SIGNAL_CLI_VERSION, "{out}");
    assert_eq!(out["groups"][0]["id"], team.as_str());
    assert_eq!(out["group"][0]["name"], "Team");
    assert_eq!(
        out["status"],
        json!([{"recipient": alice.id(), "number": alice.id(), "uuid": alice.uuid, "isRegistered": true},
               {"recipient": unknown, "number": unknown, "uuid": null, "isRegistered": false}])
    );
    let sent = fake.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0].recipients, [alice.id()]);
    assert_eq!(sent[0].message, "hello from pysignalclijsonrpc");
    assert_eq!(sent[0].attachments.len(), 1);
    assert_eq!(sent[0].attachments[0].content_type, "text/plain");
    assert_eq!(sent[0].attachments[0].bytes, b"the notes\n");
    assert!(
        sent[0].attachments[0]
            .source
            .starts_with("data:text/plain;base64,")
    );
    assert_eq!(
        sent[0].params["account"], SIGNAL_ACCOUNT,
        "ignored in single-account mode"
    );
    assert_eq!(
        out["direct"],
        json!({"timestamps": {sent[0].timestamp.to_string(): {"recipients": [alice.id()]}}}),
        "it reads the timestamp and the recipients' numbers from the result"
    );
    assert_eq!(sent[1].group_ids, [team.as_str()]);
    assert_eq!(sent[1].message, "hello group");
    assert_eq!(sent[1].attachments[0].content_type, "image/png");
    assert!(sent[1].attachments[0].bytes.starts_with(b"\x89PNG"));
    assert_eq!(
        out["to_group"],
        json!({"timestamps": {sent[1].timestamp.to_string(): {"recipients": [team]}}})
    );
    // getUserStatus answers the unregistered number too (with `isRegistered` false, but the client only looks for
    // the number), so the client sends, and gets the daemon's error.
    let unregistered = out["to_unknown_error"].as_str().unwrap();
    assert!(unregistered.contains("Failed to send message"), "{unregistered}");
    assert_eq!(out["profile"], true);
    let reaction = out["reaction_error"].as_str().unwrap();
    assert!(reaction.contains("Failed to send message"), "{reaction}");
    let register = out["register_error"].as_str().unwrap();
    assert!(register.contains("Method not implemented"), "{register}");
    let calls = fake.calls();
    let code_of = |m: &str| calls.iter().find(|c| c.method == m).unwrap().error_code();
    assert_eq!(code_of("sendReaction"), Some(codes::USER_ERROR));
    let refused = calls.iter().filter(|c| c.method == "send").nth(2).unwrap();
    assert_eq!(refused.params["recipient"], json!([unknown]));
    assert_eq!(
        refused.response.as_ref().unwrap()["error"]["data"]["response"]["results"][0]["type"],
        "UNREGISTERED_FAILURE"
    );
    assert_eq!(code_of("register"), Some(codes::METHOD_NOT_FOUND));
    assert_eq!(code_of("getUserStatus"), None);
    assert!(calls.iter().all(|c| c.id.as_ref().is_some_and(Value::is_string)));
}

/// The Python nanobot 0.3.5's own Signal channel against the fake daemon: its start-up calls, a DM from an
/// allowed number (published, with a typing indicator), a stranger's (a pairing reply, not published), group
/// messages with and without a mention of the bot and in a group off the allowlist, an attachment (copied from
/// signal-cli's default attachments directory), a DM from a UUID-only sender; its replies with text styles, to a
/// group with a file; and its reconnection when the event stream ends.
#[tokio::test]
async fn python_nanobot_signal_channel_accepts_the_signal_fake() {
    use nanobot_testkit::fake_signal::{FakeSignal, MENTION_PLACEHOLDER, Receipt, SignalUser, with_quote};
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let fake = FakeSignal::start_with_data_dir(SIGNAL_ACCOUNT, &home.path().join(".local/share/signal-cli"))
        .await
        .unwrap();
    let me = fake.me();
    let alice = SignalUser::new("Alice", "+15550000002");
    let bob = SignalUser::new("Bob", "+15550000003");
    let mallory = SignalUser::new("Mallory", "+15550000666");
    let carol = SignalUser::hidden_number("Carol");
    fake.add_contact(&alice);
    fake.add_contact(&mallory);
    fake.add_contact(&carol);
    let team = fake.add_group("Team", &[&alice, &bob]);
    let elsewhere = fake.add_group("Elsewhere", &[&bob]);
    let reply_file = home.path().join("reply.txt");
    std::fs::write(&reply_file, "the reply file").unwrap();
    let port = fake.port().to_string();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("signal_035_probe.py"))
        .args([fake.host(), port.as_str(), SIGNAL_ACCOUNT, alice.id()])
        .args([
            carol.uuid.as_str(),
            team.as_str(),
            "4",
            reply_file.to_str().unwrap(),
        ])
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("signal 0.3.5 probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(json_line(&mut lines).await["started"], true);
    fake.wait_listeners(1).await.unwrap();
    // Start-up: the check, then typing indicators switched on, then the event stream.
    assert_eq!(fake.checks(), 1);
    let config = fake
        .wait_calls("updateConfiguration", 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(config[0].params, json!({"typingIndicators": true}));
    assert_eq!(config[0].result(), Some(&json!({})));

    let dm = fake.deliver_direct(&alice, "hello bot");
    let first = json_line(&mut lines).await;
    assert_eq!(first["channel"], "signal", "{first}");
    assert_eq!(first["chat_id"], alice.id(), "a number's chat id is the number");
    assert_eq!(
        first["sender_id"],
        format!("{}|{}", alice.id(), alice.uuid),
        "the sender is every id of the envelope, joined"
    );
    assert_eq!(first["content"], "hello bot");
    assert_eq!(
        first["metadata"],
        json!({"timestamp": dm["dataMessage"]["timestamp"], "sender_name": "Alice", "sender_number": alice.id(),
               "is_group": false, "group_id": null})
    );
    assert_eq!(first["media"], json!([]));

    // Not published: a stranger's DM (answered with a pairing code), a group message without a mention
    // (kept as context), a mention in a group off the allowlist.
    fake.deliver_direct(&mallory, "let me in");
    fake.deliver_group(&bob, &team, "just chatting", &[]);
    let mention = fake.deliver_group(
        &bob,
        &team,
        &format!("{MENTION_PLACEHOLDER} what's up"),
        &[(&me, 0, 1)],
    );
    fake.deliver_group(
        &bob,
        &elsewhere,
        &format!("{MENTION_PLACEHOLDER} over here"),
        &[(&me, 0, 1)],
    );
    let second = json_line(&mut lines).await;
    assert_eq!(second["chat_id"], team.as_str(), "{second}");
    assert_eq!(second["sender_id"], format!("{}|{}", bob.id(), bob.uuid));
    assert_eq!(
        second["content"], "[Recent group messages for context:]\nBob: just chatting\n---\n[Bob]: what's up",
        "the mention is stripped, the earlier message given as context"
    );
    assert_eq!(
        second["metadata"],
        json!({"timestamp": mention["dataMessage"]["timestamp"], "sender_name": "Bob", "sender_number": bob.id(),
               "is_group": true, "group_id": team})
    );

    let photo = fake
        .deliver_with_attachment(
            &alice,
            "see this",
            Some("photo.png"),
            "image/png",
            b"not really a png",
        )
        .unwrap();
    let third = json_line(&mut lines).await;
    assert_eq!(third["chat_id"], alice.id(), "{third}");
    assert_eq!(
        third["media"],
        json!([["signal_photo.png", "not really a png"]]),
        "copied from ~/.local/share/signal-cli/attachments/<id>"
    );
    let content = third["content"].as_str().unwrap();
    assert!(
        content.starts_with("see this\n[image: ") && content.ends_with("signal_photo.png]"),
        "{content}"
    );
    assert_eq!(third["metadata"]["timestamp"], photo["dataMessage"]["timestamp"]);

    // Ignored: a typing indicator, a read receipt, a sync message from the account's phone; a quote is not read.
    fake.deliver(&fake.typing_message(&alice, true, None));
    fake.deliver(&fake.receipt_message(&alice, Receipt::Read, &[1_700_000_000_000]));
    fake.deliver(&fake.sync_sent_message(&alice, "sent from my phone"));
    let mut from_carol = fake.direct_message(&carol, "from carol");
    with_quote(&mut from_carol, 1_700_000_000_000, &me, "earlier");
    assert_eq!(fake.deliver(&from_carol), 1);
    let fourth = json_line(&mut lines).await;
    assert_eq!(
        fourth["chat_id"],
        carol.uuid.as_str(),
        "a UUID-only sender's chat id is the UUID"
    );
    assert_eq!(fourth["sender_id"], carol.uuid.as_str());
    assert_eq!(fourth["metadata"]["sender_number"], carol.uuid.as_str());

    let done = json_line(&mut lines).await;
    assert_eq!(done["sent"], true, "{done}");
    let sent = fake.wait_sent(4, Duration::from_secs(10)).await.unwrap();
    assert_eq!(sent.len(), 4, "{sent:#?}");
    assert_eq!(sent[0].recipients, [mallory.id()], "the pairing reply");
    assert!(
        sent[0].message.contains("Your pairing code is: "),
        "{}",
        sent[0].message
    );
    // Its two `code` spans (the code, the approve command) are MONOSPACE ranges.
    assert_eq!(sent[0].text_styles.len(), 2, "{:?}", sent[0].text_styles);
    assert!(
        sent[0].text_styles[0].ends_with(":9:MONOSPACE") && sent[0].text_styles[1].ends_with(":MONOSPACE"),
        "{:?}",
        sent[0].text_styles
    );
    assert_eq!(
        sent[1].params,
        json!({"message": "bold reply", "textStyle": ["0:4:BOLD"], "recipient": [alice.id()]}),
        "markdown becomes text styles"
    );
    assert_eq!(
        sent[2].params,
        json!({"message": "bold reply to the group", "textStyle": ["0:4:BOLD", "18:5:ITALIC"], "groupId": team,
               "attachments": [reply_file.to_str().unwrap()]})
    );
    assert_eq!(sent[2].group_ids, [team.as_str()]);
    assert_eq!(sent[2].attachments.len(), 1);
    assert_eq!(sent[2].attachments[0].filename.as_deref(), Some("reply.txt"));
    assert_eq!(sent[2].attachments[0].content_type, "text/plain");
    assert_eq!(sent[2].attachments[0].bytes, b"the reply file");
    assert_eq!(sent[3].recipients, [carol.uuid.as_str()]);
    assert_eq!(sent[3].message, "hi carol");
    // A typing indicator for each published message (the string form first, which the daemon takes), none
    // stopped by the replies.
    let typing: Vec<Value> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method == "sendTyping")
        .map(|c| c.params)
        .take(4)
        .collect();
    assert_eq!(
        typing,
        [
            json!({"recipient": alice.id()}),
            json!({"groupId": team}),
            json!({"recipient": alice.id()}),
            json!({"recipient": carol.uuid}),
        ]
    );
    let failed: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.error_code().is_some())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");

    // The daemon restarts: 0.3.5 reconnects (check, configuration, events) and receives again.
    fake.restart_events();
    fake.wait_listeners(2).await.unwrap();
    assert_eq!(fake.checks(), 2);
    fake.deliver_direct(&alice, "back again");
    let fifth = json_line(&mut lines).await;
    assert_eq!(fifth["content"], "back again", "{fifth}");
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|c| c.method == "updateConfiguration")
            .count(),
        2
    );
}

// ---------------------------------------------------------------------------------------------------------
// WeCom AI-bot long connection
// ---------------------------------------------------------------------------------------------------------

/// Lowercase hex SHA-256.
fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A small PNG-looking payload (the signature, then bytes; the length is no multiple of 32).
fn wecom_png() -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..1000u32).map(|i| (i * 7 % 251) as u8));
    png
}

/// wecom-aibot-sdk-python's `WSClient` against the fake: a wrong secret is refused (the SDK logs the server's
/// error and never fires `authenticated`); the right one subscribes, sends heartbeats, gets single and group
/// texts, an image and a file it downloads and decrypts, a voice and a mixed message and `enter_chat` through its
/// callbacks, replies (streamed, markdown, welcome), reconnects when the server drops, uploads a file in three
/// steps and replies with it, sends proactively, and stays away once kicked by `disconnected_event`.
#[tokio::test]
async fn wecom_aibot_sdk_accepts_the_wecom_fake() {
    use nanobot_testkit::fake_wecom::{BOT_NAME, ERR_INVALID_CREDENTIALS, FakeWecom, MixedPart};
    let Some(python) = peers::require("python venv (wecom-aibot-sdk-python)", peers::python()) else {
        return;
    };
    let within = Duration::from_secs(30);
    let dir = tempfile::tempdir().unwrap();
    let upload = dir.path().join("reply.txt");
    std::fs::write(&upload, "the uploaded reply").unwrap();
    let fake = FakeWecom::start("aibot-test-1", "s3cret").await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("wecom_sdk_probe.py"))
        .args([
            fake.url().as_str(),
            "aibot-test-1",
            "s3cret",
            upload.to_str().unwrap(),
        ])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("wecom sdk probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();

    // The wrong secret: the server's error frame, logged by the SDK; no `authenticated`.
    let refused = json_line(&mut lines).await;
    assert_eq!(
        refused["auth_error"], "Authentication failed: invalid bot_id or secret",
        "{refused}"
    );
    assert_eq!(refused["authenticated"], false);
    assert!(fake.refused() >= 1);
    let sub = &fake.wait_frames("aibot_subscribe", 1, within).await.unwrap()[0];
    assert!(sub.req_id.starts_with("aibot_subscribe_"), "{sub:?}");
    assert_eq!(
        sub.body,
        json!({"bot_id": "aibot-test-1", "secret": "wrong-s3cret"})
    );
    assert_eq!(sub.errcode, ERR_INVALID_CREDENTIALS);

    // The right one subscribes and pings (every 300 ms here), each acked.
    assert_eq!(json_line(&mut lines).await["authenticated"], 1);
    assert_eq!(fake.subscribed(), 1);
    fake.wait_pings(2, within).await.unwrap();
    let pings = fake.wait_frames("ping", 2, within).await.unwrap();
    assert!(
        pings
            .iter()
            .all(|p| p.req_id.starts_with("ping_") && p.errcode == 0 && p.body.is_null())
    );

    // A single-chat text: a stream of two frames on the callback's req_id, the last one finishing.
    let hello = fake.deliver_text("alice", "hello");
    let seen = json_line(&mut lines).await;
    assert_eq!(seen["text"], "hello");
    assert_eq!(seen["chattype"], "single");
    assert_eq!(seen["chatid"], Value::Null, "single chats carry no chatid");
    assert_eq!(seen["from"], "alice");
    assert_eq!(seen["req_id"], hello["headers"]["req_id"]);
    let streamed = json_line(&mut lines).await;
    assert_eq!(streamed["streamed"], json!([0, 0]), "{streamed}");
    let sent = fake.wait_sent(2, within).await.unwrap();
    assert!(
        sent.iter()
            .all(|s| s.cmd == "aibot_respond_msg" && s.req_id == hello["headers"]["req_id"])
    );
    assert_eq!(sent[0].msgtype(), Some("stream"));
    assert_eq!(sent[0].stream_id(), streamed["stream_id"].as_str());
    assert_eq!(sent[1].stream_id(), sent[0].stream_id());
    assert_eq!(
        (sent[0].content(), sent[0].finish()),
        (Some("thinking…"), Some(false))
    );
    assert_eq!(
        (sent[1].content(), sent[1].finish()),
        (Some("echo: hello"), Some(true))
    );

    // A group text @-mentioning the bot: a markdown reply.
    let group = fake.deliver_group_text("group-1", "bob", "hi all");
    let seen = json_line(&mut lines).await;
    assert_eq!(seen["text"], format!("@{BOT_NAME} hi all"));
    assert_eq!(
        (&seen["chattype"], &seen["chatid"], &seen["from"]),
        (&json!("group"), &json!("group-1"), &json!("bob"))
    );
    assert_eq!(json_line(&mut lines).await["replied"], 0);
    let sent = fake.wait_sent(3, within).await.unwrap();
    assert_eq!(sent[2].req_id, group["headers"]["req_id"].as_str().unwrap());
    assert_eq!(
        sent[2].body,
        json!({"msgtype": "markdown", "markdown": {"content": "group reply"}})
    );

    // Media: downloaded from the fake and decrypted with the message's aeskey (unpadded base64).
    let png = wecom_png();
    let image = fake.deliver_image("alice", &png);
    assert_eq!(image["body"]["image"]["aeskey"].as_str().unwrap().len(), 43);
    let seen = json_line(&mut lines).await;
    assert_eq!(seen["image"]["size"], png.len(), "{seen}");
    assert_eq!(seen["image"]["sha256"], sha256_hex(&png));
    assert_eq!(
        seen["image"]["name"],
        Value::Null,
        "images come without a file name"
    );
    let doc = "年度报告: numbers, 1 2 3\n".repeat(5);
    fake.deliver_file("alice", "report 2024 年.txt", doc.as_bytes());
    let seen = json_line(&mut lines).await;
    assert_eq!(seen["file"]["sha256"], sha256_hex(doc.as_bytes()), "{seen}");
    assert_eq!(seen["file"]["name"], "report 2024 年.txt");
    assert_eq!(fake.downloads().len(), 2);
    fake.deliver(&fake.voice("alice", "transcribed words"));
    assert_eq!(json_line(&mut lines).await["voice"], "transcribed words");
    fake.deliver(&fake.mixed(
        Some("group-1"),
        "bob",
        &[MixedPart::Text("look"), MixedPart::Image(&png)],
    ));
    assert_eq!(json_line(&mut lines).await["mixed"], json!(["text", "image"]));

    // enter_chat: a welcome on its req_id.
    let enter = fake.deliver_enter_chat("carol");
    assert_eq!(json_line(&mut lines).await["enter_chat"], "carol");
    assert_eq!(json_line(&mut lines).await["welcomed"], 0);
    let sent = fake.wait_sent(4, within).await.unwrap();
    assert_eq!(sent[3].cmd, "aibot_respond_welcome_msg");
    assert_eq!(sent[3].req_id, enter["headers"]["req_id"].as_str().unwrap());
    assert_eq!(
        sent[3].body,
        json!({"msgtype": "text", "text": {"content": "welcome!"}})
    );

    // The server goes away: the SDK reconnects and subscribes again.
    fake.drop_connections();
    assert_eq!(json_line(&mut lines).await["authenticated"], 2);
    assert_eq!(fake.subscribed(), 2);
    assert!(fake.connections() >= 3);

    // An upload in three steps, the reply with its media_id, a proactive markdown.
    let up = fake.deliver_text("alice", "upload");
    assert_eq!(json_line(&mut lines).await["text"], "upload");
    let done = json_line(&mut lines).await;
    assert_eq!(done, json!({"uploaded": 0, "proactive": 0}));
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].data, b"the uploaded reply");
    assert_eq!(
        (uploads[0].filename.as_str(), uploads[0].media_type.as_str()),
        ("reply.txt", "file")
    );
    assert_eq!(uploads[0].md5.len(), 32);
    let sent = fake.wait_sent(6, within).await.unwrap();
    assert_eq!(sent[4].req_id, up["headers"]["req_id"].as_str().unwrap());
    assert_eq!(
        sent[4].body,
        json!({"msgtype": "file", "file": {"media_id": uploads[0].media_id}})
    );
    assert_eq!(sent[5].cmd, "aibot_send_msg");
    assert!(sent[5].req_id.starts_with("aibot_send_msg_"));
    assert_eq!(
        sent[5].body,
        json!({"chatid": "group-1", "msgtype": "markdown", "markdown": {"content": "**hi group**"}})
    );
    for (cmd, n) in [
        ("aibot_upload_media_init", 1),
        ("aibot_upload_media_chunk", 1),
        ("aibot_upload_media_finish", 1),
    ] {
        let f = fake.wait_frames(cmd, n, within).await.unwrap();
        assert!(f.iter().all(|f| f.errcode == 0), "{f:?}");
    }

    // Kicked (another connection of the bot subscribed): the SDK stays disconnected.
    fake.kick_connections();
    assert_eq!(json_line(&mut lines).await["kicked"], true);
    let end = json_line(&mut lines).await;
    assert_eq!(
        end,
        json!({"done": true, "connected": false, "authentications": 2})
    );
    assert_eq!(fake.subscribed(), 2);
    // Nothing else was refused, but for a ping of the old heartbeat task that may reach the new connection
    // before its subscription (the SDK keeps its heartbeat across reconnects).
    let refused: Vec<_> = fake.frames().into_iter().filter(|f| f.errcode > 0).collect();
    assert!(
        refused.iter().all(
            |f| f.cmd == "aibot_subscribe" || (f.cmd == "ping" && f.errmsg.starts_with("not subscribed"))
        ),
        "{refused:?}"
    );
}

/// The Python nanobot 0.3.5's own WeCom channel against the fake (its `WSClient` given the fake's `ws_url`, the
/// one patch): its client options; `enter_chat` as the server sends it (no `chatid`: 0.3.5 sends no welcome), with
/// a `chatid` added (a welcome) and from a stranger (none); messages from the allowed user (text, a duplicate
/// dropped, image and file downloaded and decrypted into its media dir, voice), a stranger's (dropped), group
/// messages (chat id = the group); then its sends: progress and final answers as separate streams on the chat's
/// last callback, a group answer, a proactive markdown to an unknown chat, a file uploaded and replied; and its
/// reconnection when the server drops.
#[tokio::test]
async fn python_nanobot_wecom_channel_accepts_the_wecom_fake() {
    use nanobot_testkit::fake_wecom::{BOT_NAME, FakeWecom, MixedPart};
    let Some(python) = peers::require_nanobot_python() else {
        return;
    };
    let within = Duration::from_secs(30);
    let home = tempfile::tempdir().unwrap();
    let reply_file = home.path().join("answer.txt");
    std::fs::write(&reply_file, "the answer file").unwrap();
    let fake = FakeWecom::start("aibot-035", "sec-035").await.unwrap();
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("wecom_035_probe.py"))
        .args([
            fake.url().as_str(),
            "aibot-035",
            "sec-035",
            "alice",
            "6",
            reply_file.to_str().unwrap(),
        ])
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("wecom 0.3.5 probe", &mut cmd).unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(json_line(&mut lines).await["started"], true);
    let options = json_line(&mut lines).await;
    assert_eq!(
        options,
        json!({"options": {"bot_id": "aibot-035", "reconnect_interval": 1000, "max_reconnect_attempts": -1,
                           "heartbeat_interval": 30000}, "secret_given": true})
    );
    fake.wait_subscribed(1, within).await.unwrap();

    // enter_chat as WeCom sends it has no chatid: 0.3.5 does not welcome. With one added: it does, for the
    // allowed user only.
    let plain_enter = fake.deliver_enter_chat("alice");
    let mut stranger_enter = fake.enter_chat("mallory");
    stranger_enter["body"]["chatid"] = json!("mallory");
    fake.deliver(&stranger_enter);
    let mut enter = fake.enter_chat("alice");
    enter["body"]["chatid"] = json!("alice");
    fake.deliver(&enter);
    let sent = fake.wait_sent(1, within).await.unwrap();
    assert_eq!(sent[0].cmd, "aibot_respond_welcome_msg");
    assert_eq!(sent[0].req_id, enter["headers"]["req_id"].as_str().unwrap());
    assert_eq!(
        sent[0].body,
        json!({"msgtype": "text", "text": {"content": "Welcome to nanobot!"}})
    );

    let hello = fake.text("alice", "hello");
    fake.deliver(&hello);
    fake.deliver(&hello); // the same msgid again: dropped
    fake.deliver_text("mallory", "let me in");
    let group = fake.deliver_group_text("group-1", "alice", "hi all");
    let png = wecom_png();
    let image = fake.deliver_image("alice", &png);
    let file = fake.deliver_file("alice", "notes 1.txt", b"some notes");
    let voice = fake.voice("alice", "spoken words");
    fake.deliver(&voice);
    let mixed = fake.mixed(
        Some("group-1"),
        "alice",
        &[MixedPart::Text("see"), MixedPart::Image(&png)],
    );
    fake.deliver(&mixed);
    let req = |f: &Value| f["headers"]["req_id"].as_str().unwrap().to_string();
    // 0.3.5 answers on the callback of the chat it finished handling last (downloads finish later).
    let alice_reqs = [req(&hello), req(&image), req(&file), req(&voice)];
    let group_reqs = [req(&group), req(&mixed)];

    // The SDK runs each callback in its own task: media downloads finish later, so match by type.
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(json_line(&mut lines).await);
    }
    let by = |msg_type: &str, chat: &str| -> Value {
        got.iter()
            .find(|m| m["metadata"]["msg_type"] == msg_type && m["chat_id"] == chat)
            .cloned()
            .unwrap_or_else(|| panic!("no {msg_type} message in {chat}: {got:?}"))
    };
    let m = by("text", "alice");
    assert_eq!(
        (&m["channel"], &m["sender_id"], &m["content"]),
        (&json!("wecom"), &json!("alice"), &json!("hello")),
        "{m}"
    );
    assert_eq!(
        m["metadata"],
        json!({"message_id": hello["body"]["msgid"], "msg_type": "text", "chat_type": "single"})
    );
    assert_eq!(
        got.iter().filter(|m| m["content"] == "hello").count(),
        1,
        "the duplicate is dropped"
    );
    assert!(
        got.iter().all(|m| m["sender_id"] == "alice"),
        "the stranger's is dropped"
    );
    let m = by("text", "group-1");
    assert_eq!(
        m["content"],
        format!("@{BOT_NAME} hi all"),
        "0.3.5 keeps the mention"
    );
    assert_eq!(m["metadata"]["chat_type"], "group");
    assert_eq!(m["metadata"]["message_id"], group["body"]["msgid"]);
    let m = by("image", "alice");
    let name = m["media"][0][0].as_str().unwrap();
    assert!(
        name.starts_with("image_"),
        "no file name comes with images: {name}"
    );
    assert_eq!(m["content"], format!("[image: {name}]"));
    assert_eq!(m["media"][0][1], sha256_hex(&png), "decrypted");
    let m = by("file", "alice");
    assert_eq!(m["content"], "[file: notes_1.txt]", "{m}");
    assert_eq!(m["media"], json!([["notes_1.txt", sha256_hex(b"some notes")]]));
    let m = by("voice", "alice");
    assert_eq!(m["content"], "[voice] spoken words", "{m}");
    let m = by("mixed", "group-1");
    assert_eq!(m["metadata"]["chat_type"], "group");
    let content = m["content"].as_str().unwrap();
    assert!(
        content.starts_with(&format!("@{BOT_NAME} see\n[image: image_")),
        "{content}"
    );
    assert_eq!(fake.downloads().len(), 3);

    // The sends.
    let end = json_line(&mut lines).await;
    assert_eq!(end["sent"], true, "{end}");
    let sent = fake.wait_sent(6, within).await.unwrap();
    let (progress, last) = (&sent[1], &sent[2]);
    assert_eq!(progress.cmd, "aibot_respond_msg");
    assert!(
        alice_reqs.contains(&progress.req_id),
        "one of alice's callbacks: {progress:?}"
    );
    assert_eq!(
        (progress.content(), progress.finish()),
        (Some("working…"), Some(false))
    );
    assert_eq!(last.req_id, progress.req_id);
    assert_eq!(
        (last.content(), last.finish()),
        (Some("final answer"), Some(true))
    );
    assert_ne!(
        progress.stream_id(),
        last.stream_id(),
        "each send is its own stream"
    );
    assert!(last.stream_id().unwrap().starts_with("stream_"));
    assert_eq!(sent[3].cmd, "aibot_respond_msg");
    assert!(
        group_reqs.contains(&sent[3].req_id),
        "one of the group's callbacks: {:?}",
        sent[3]
    );
    assert_eq!(
        (sent[3].content(), sent[3].finish()),
        (Some("group answer"), Some(true))
    );
    assert_eq!(sent[4].cmd, "aibot_send_msg");
    assert_eq!(
        sent[4].body,
        json!({"chatid": "nobody-chat", "msgtype": "markdown", "markdown": {"content": "cron push"}})
    );
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(
        (uploads[0].filename.as_str(), uploads[0].data.as_slice()),
        ("answer.txt", b"the answer file".as_slice())
    );
    assert_eq!(
        (sent[5].cmd.as_str(), sent[5].req_id.as_str()),
        ("aibot_respond_msg", progress.req_id.as_str())
    );
    assert_eq!(
        sent[5].body,
        json!({"msgtype": "file", "file": {"media_id": uploads[0].media_id}})
    );
    // Only the one welcome: none for the enter_chat without chatid, none for the stranger.
    let welcomes: Vec<_> = sent
        .iter()
        .filter(|s| s.cmd == "aibot_respond_welcome_msg")
        .collect();
    assert_eq!(welcomes.len(), 1);
    assert!(
        sent.iter()
            .all(|s| s.req_id != plain_enter["headers"]["req_id"].as_str().unwrap()
                && s.req_id != stranger_enter["headers"]["req_id"].as_str().unwrap())
    );

    // The server drops: the SDK reconnects (after 1 s) and the channel goes on.
    fake.drop_connections();
    fake.wait_subscribed(2, within).await.unwrap();
    fake.deliver_text("alice", "after reconnect");
    let m = json_line(&mut lines).await;
    assert_eq!(m["content"], "after reconnect", "{m}");
    assert!(
        fake.frames().iter().all(|f| f.errcode <= 0 || f.cmd == "ping"),
        "{:?}",
        fake.frames()
    );
}

/// The WeCom fake's own rules (no peer needed): frames before the subscription, bad JSON ignored, wrong
/// credentials answered 853000 and closed, replies only to its callbacks, finished streams, welcomes, unknown
/// media ids and commands refused with 40058, uploads checked, a second subscription kicking the first, pings
/// left unanswered on demand, media served encrypted (and 404 for unknown ids).
#[tokio::test]
async fn wecom_fake_checks_frames_and_refusals() {
    use futures::{SinkExt, StreamExt};
    use nanobot_testkit::fake_wecom::{ERR_INVALID_CREDENTIALS, ERR_INVALID_PARAMETER, FakeWecom};
    use tokio_tungstenite::tungstenite::Message;
    let within = Duration::from_secs(10);
    let fake = FakeWecom::start("bot-r", "sec-r").await.unwrap();
    let frame = |cmd: &str, req: &str, body: Value| {
        Message::text(json!({"cmd": cmd, "headers": {"req_id": req}, "body": body}).to_string())
    };

    // Wrong credentials: the error frame, then the server closes.
    let (mut bad, _) = tokio_tungstenite::connect_async(fake.url()).await.unwrap();
    bad.send(frame(
        "aibot_subscribe",
        "s0",
        json!({"bot_id": "bot-r", "secret": "nope"}),
    ))
    .await
    .unwrap();
    let ack = ws_json(&mut bad).await;
    assert_eq!(
        ack,
        json!({"headers": {"req_id": "s0"}, "errcode": ERR_INVALID_CREDENTIALS, "errmsg": "invalid bot_id or secret"})
    );
    let end = tokio::time::timeout(within, bad.next()).await.unwrap();
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert_eq!(fake.refused(), 1);

    let (mut ws, _) = tokio_tungstenite::connect_async(fake.url()).await.unwrap();
    ws.send(Message::text("not json")).await.unwrap();
    ws.send(frame("ping", "p0", Value::Null)).await.unwrap();
    let ack = ws_json(&mut ws).await;
    assert_eq!(
        (ack["headers"]["req_id"].as_str(), ack["errcode"].as_i64()),
        (Some("p0"), Some(ERR_INVALID_PARAMETER))
    );
    ws.send(frame(
        "aibot_subscribe",
        "s1",
        json!({"bot_id": "bot-r", "secret": "sec-r"}),
    ))
    .await
    .unwrap();
    assert_eq!(
        ws_json(&mut ws).await,
        json!({"headers": {"req_id": "s1"}, "errcode": 0, "errmsg": "ok"})
    );
    fake.wait_subscribed(1, within).await.unwrap();
    ws.send(frame("ping", "p1", Value::Null)).await.unwrap();
    assert_eq!(ws_json(&mut ws).await["errcode"], 0);

    // Replies: only to a pushed callback; a stream ends once.
    let msg = fake.deliver_text("alice", "hi");
    let pushed = ws_json(&mut ws).await;
    assert_eq!(pushed, msg);
    assert_eq!(pushed["cmd"], "aibot_msg_callback");
    let req = msg["headers"]["req_id"].as_str().unwrap();
    let stream = |content: &str, finish: bool| json!({"msgtype": "stream", "stream": {"id": "st-1", "content": content, "finish": finish}});
    for (cmd, req_id, body, code) in [
        (
            "aibot_respond_msg",
            "nope",
            stream("x", false),
            ERR_INVALID_PARAMETER,
        ),
        ("aibot_respond_msg", req, stream("part", false), 0),
        ("aibot_respond_msg", req, stream("all", true), 0),
        (
            "aibot_respond_msg",
            req,
            stream("more", true),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_respond_msg",
            req,
            json!({"msgtype": "stream", "stream": {"id": "st-2", "content": "x".repeat(20481)}}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_respond_msg",
            req,
            json!({"msgtype": "file", "file": {"media_id": "m-unknown"}}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_respond_msg",
            req,
            json!({"msgtype": "weird"}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_respond_welcome_msg",
            req,
            json!({"msgtype": "text", "text": {"content": "hi"}}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_send_msg",
            "x1",
            json!({"msgtype": "markdown", "markdown": {"content": "no chat"}}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_send_msg",
            "x2",
            json!({"chatid": "c", "msgtype": "text", "text": {"content": "t"}}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_send_msg",
            "x3",
            json!({"chatid": "c", "msgtype": "markdown", "markdown": {"content": "ok"}}),
            0,
        ),
        ("aibot_frobnicate", "x4", json!({}), ERR_INVALID_PARAMETER),
        (
            "aibot_upload_media_init",
            "u0",
            json!({"filename": "a.bin", "type": "file", "total_size": 3, "total_chunks": 101}),
            ERR_INVALID_PARAMETER,
        ),
        (
            "aibot_upload_media_chunk",
            "u1",
            json!({"upload_id": "nope", "chunk_index": 0, "base64_data": "YWJj"}),
            ERR_INVALID_PARAMETER,
        ),
    ] {
        ws.send(frame(cmd, req_id, body)).await.unwrap();
        let ack = ws_json(&mut ws).await;
        assert_eq!(ack["headers"]["req_id"], req_id);
        assert_eq!(ack["errcode"], code, "{cmd} {req_id}: {ack}");
    }
    // The welcome: only to enter_chat, once.
    let enter = fake.deliver_enter_chat("alice");
    assert_eq!(ws_json(&mut ws).await["body"]["event"]["eventtype"], "enter_chat");
    let ereq = enter["headers"]["req_id"].as_str().unwrap();
    for code in [0, ERR_INVALID_PARAMETER] {
        ws.send(frame(
            "aibot_respond_welcome_msg",
            ereq,
            json!({"msgtype": "text", "text": {"content": "hi"}}),
        ))
        .await
        .unwrap();
        assert_eq!(ws_json(&mut ws).await["errcode"], code);
    }
    // An upload: init, the chunks, finish before and after all arrived.
    ws.send(frame(
        "aibot_upload_media_init",
        "u2",
        json!({"filename": "a.bin", "type": "file", "total_size": 6, "total_chunks": 2, "md5": "x"}),
    ))
    .await
    .unwrap();
    let init = ws_json(&mut ws).await;
    let upload_id = init["body"]["upload_id"].as_str().unwrap().to_string();
    ws.send(frame(
        "aibot_upload_media_chunk",
        "u3",
        json!({"upload_id": upload_id, "chunk_index": 1, "base64_data": "ZGVm"}),
    ))
    .await
    .unwrap();
    assert_eq!(ws_json(&mut ws).await["errcode"], 0);
    ws.send(frame(
        "aibot_upload_media_finish",
        "u4",
        json!({"upload_id": upload_id}),
    ))
    .await
    .unwrap();
    assert_eq!(ws_json(&mut ws).await["errcode"], ERR_INVALID_PARAMETER);
    ws.send(frame(
        "aibot_upload_media_chunk",
        "u5",
        json!({"upload_id": upload_id, "chunk_index": 0, "base64_data": "YWJj"}),
    ))
    .await
    .unwrap();
    assert_eq!(ws_json(&mut ws).await["errcode"], 0);
    ws.send(frame(
        "aibot_upload_media_finish",
        "u6",
        json!({"upload_id": upload_id}),
    ))
    .await
    .unwrap();
    let done = ws_json(&mut ws).await;
    let media_id = done["body"]["media_id"].as_str().unwrap().to_string();
    assert_eq!(fake.uploads()[0].data, b"abcdef");
    ws.send(frame(
        "aibot_respond_msg",
        req,
        json!({"msgtype": "image", "image": {"media_id": media_id}}),
    ))
    .await
    .unwrap();
    assert_eq!(ws_json(&mut ws).await["errcode"], 0);
    let sent = fake.sent();
    let cmds: Vec<_> = sent.iter().map(|s| s.cmd.as_str()).collect();
    assert_eq!(
        cmds,
        [
            "aibot_respond_msg",
            "aibot_respond_msg",
            "aibot_send_msg",
            "aibot_respond_welcome_msg",
            "aibot_respond_msg"
        ]
    );

    // Pings unanswered on demand.
    fake.answer_pings(false);
    ws.send(frame("ping", "p2", Value::Null)).await.unwrap();
    let pings = fake.wait_frames("ping", 3, within).await.unwrap();
    assert_eq!(
        (pings[2].req_id.as_str(), pings[2].errcode),
        ("p2", -1),
        "recorded, not answered"
    );
    fake.answer_pings(true);
    ws.send(frame("ping", "p3", Value::Null)).await.unwrap();
    assert_eq!(ws_json(&mut ws).await["headers"]["req_id"], "p3");

    // A second subscription kicks the first: disconnected_event, then the close.
    let (mut ws2, _) = tokio_tungstenite::connect_async(fake.url()).await.unwrap();
    ws2.send(frame(
        "aibot_subscribe",
        "s2",
        json!({"bot_id": "bot-r", "secret": "sec-r"}),
    ))
    .await
    .unwrap();
    assert_eq!(ws_json(&mut ws2).await["errcode"], 0);
    let kicked = ws_json(&mut ws).await;
    assert_eq!(kicked["cmd"], "aibot_event_callback");
    assert_eq!(kicked["body"]["event"]["eventtype"], "disconnected_event");
    let end = tokio::time::timeout(within, ws.next()).await.unwrap();
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert!(fake.deliver(&fake.text("bob", "to the new one")));
    assert_eq!(ws_json(&mut ws2).await["body"]["from"]["userid"], "bob");
    fake.drop_connections();
    assert!(!fake.deliver(&fake.text("bob", "nobody")));

    // Media: encrypted (PKCS#7 to 32 bytes), named; unknown ids 404.
    nanobot_testkit::install_ring();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let file = fake.file("alice", "a b.txt", b"hello");
    let resp = client
        .get(file["body"]["file"]["url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-disposition"],
        "attachment; filename=\"a_b.txt\"; filename*=UTF-8''a%20b.txt"
    );
    let body = resp.bytes().await.unwrap();
    assert_eq!(body.len(), 32);
    assert_ne!(&body[..5], b"hello");
    let missing = client
        .get(format!("{}/media/nope", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

// ---------------------------------------------------------------------------------------------------------
// Personal WeChat (the iLink bot API and its CDN)

const WX_ALICE: &str = "alice@im.wechat";

/// A small JPEG-looking payload (its length is no multiple of 16).
fn weixin_jpeg() -> Vec<u8> {
    let mut jpg = b"\xff\xd8\xff\xe0\0\x10JFIF\0".to_vec();
    jpg.extend((0..777u32).map(|i| (i * 13 % 251) as u8));
    jpg
}

/// Waits (bounded) until a guarded process exits; its status.
async fn exit_of(child: &mut ChildGuard, within: Duration) -> std::process::ExitStatus {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.exit_status() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} did not exit within {within:?}",
            child.name()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The PyPI iLink client `weixin-ilink` against the fake, with nothing patched: its QR login (the older `GET`
/// form), the long poll (a text and an image), typing, a text reply, the image downloaded through the `full_url`
/// the fake gives and decrypted, a file uploaded through `upload_full_url` and sent with a caption; after the
/// token is revoked its next poll gets `-14` as the real server answers.
#[tokio::test]
async fn weixin_ilink_sdk_accepts_the_weixin_fake() {
    use nanobot_testkit::fake_weixin::{BOT_ID, FakeWeixin, parse_aes_key};
    use tokio::io::AsyncWriteExt as _;
    let Some(python) = peers::require("python venv (weixin-ilink)", peers::python()) else {
        return;
    };
    let within = Duration::from_secs(30);
    let dir = tempfile::tempdir().unwrap();
    let upload = dir.path().join("notes.txt");
    let notes = "the notes, 年 2024\n".repeat(3);
    std::fs::write(&upload, &notes).unwrap();
    let fake = FakeWeixin::start().await.unwrap();
    fake.set_full_urls(true);
    fake.set_poll_hold(Duration::from_secs(2));
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("weixin_sdk_probe.py"))
        .args([fake.base_url().as_str(), upload.to_str().unwrap()])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("weixin-ilink probe", &mut cmd).unwrap();
    let mut stdin = child.tokio_child_mut().unwrap().stdin.take().unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();

    // The QR login: fetched by GET without a body, scanned and confirmed on the "phone".
    let qr = json_line(&mut lines).await;
    let qrs = fake.wait_qrs(1, within).await.unwrap();
    assert_eq!(qr["qr"], qrs[0].img_content);
    assert_eq!(qrs[0].method, "GET");
    assert!(qrs[0].local_token_list.is_empty());
    assert_eq!(json_line(&mut lines).await["login_status"], "waiting");
    fake.scan(WX_ALICE).unwrap();
    assert_eq!(json_line(&mut lines).await["login_status"], "scanned");
    let token = fake.confirm(WX_ALICE).unwrap().unwrap();
    assert_eq!(
        json_line(&mut lines).await["creds"],
        json!({"bot_token": token, "account_id": BOT_ID, "base_url": fake.base_url(), "user_id": WX_ALICE})
    );

    // The long poll: a text and an image.
    let text = fake.push_text(WX_ALICE, "hello sdk");
    let jpg = weixin_jpeg();
    let image = fake.push_image(WX_ALICE, &jpg);
    assert_eq!(
        json_line(&mut lines).await["received"],
        json!([
            {"from": WX_ALICE, "text": "hello sdk", "types": [1], "context_token": text["context_token"]},
            {"from": WX_ALICE, "text": "", "types": [2], "context_token": image["context_token"]},
        ])
    );
    assert_eq!(
        json_line(&mut lines).await["image"],
        json!({"size": jpg.len(), "sha256": sha256_hex(&jpg)}),
        "downloaded through full_url and decrypted"
    );
    assert_eq!(json_line(&mut lines).await["sent"], true);
    assert_eq!(fake.downloads().len(), 1);
    let sent = fake.wait_sent(3, within).await.unwrap();
    assert_eq!(
        (
            sent[0].to_user_id.as_str(),
            sent[0].text(),
            sent[0].context_token.as_str()
        ),
        (
            WX_ALICE,
            Some("echo: hello sdk"),
            text["context_token"].as_str().unwrap()
        )
    );
    assert_eq!((sent[0].message_type, sent[0].message_state), (2, 2));
    assert!(sent[0].client_id.starts_with("ilink-"), "{:?}", sent[0]);
    assert_eq!(sent[1].text(), Some("your file"));
    assert_eq!(sent[2].item_type(), Some(4));
    assert_eq!(sent[2].context_token, image["context_token"].as_str().unwrap());
    let item = &sent[2].items[0]["file_item"];
    assert_eq!(
        (&item["file_name"], &item["len"]),
        (&json!("notes.txt"), &json!(notes.len().to_string()))
    );
    let key = parse_aes_key(item["media"]["aes_key"].as_str().unwrap()).unwrap();
    assert_eq!(sent[2].media.len(), 1);
    assert_eq!(
        sent[2].media[0].data,
        notes.as_bytes(),
        "uploaded, decrypted by the fake"
    );
    assert_eq!(
        sent[2].media[0].aeskey,
        key.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    assert_eq!(sent[2].media[0].media_type, 3);
    // Typing: getconfig's ticket, status 1.
    let typing = fake.typing();
    assert_eq!(typing.len(), 1);
    assert_eq!((typing[0].user.as_str(), typing[0].status), (WX_ALICE, 1));
    // Every bot call carried the token and the iLink headers.
    let calls: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.path.starts_with("/ilink/bot/") && !c.path.contains("qrcode"))
        .collect();
    assert!(!calls.is_empty());
    for c in &calls {
        assert_eq!(
            c.header("authorization"),
            Some(format!("Bearer {token}").as_str()),
            "{c:?}"
        );
        assert_eq!(c.header("authorizationtype"), Some("ilink_bot_token"));
        assert_eq!(c.header("ilink-app-id"), Some("bot"));
        assert!(c.body["base_info"]["channel_version"].is_string(), "{c:?}");
        assert_eq!(c.answer.get("errcode"), None, "{c:?}");
    }
    let upload_call = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/c2c/upload")
        .unwrap();
    assert_eq!(upload_call.status, 200);
    assert_eq!(
        upload_call.header("content-type"),
        Some("application/octet-stream")
    );

    // The session ends: the next poll is answered -14.
    fake.revoke_tokens();
    stdin.write_all(b"go\n").await.unwrap();
    assert_eq!(
        json_line(&mut lines).await["after_revoke"],
        json!({"errcode": -14, "errmsg": "session timeout"})
    );
}

/// The Python nanobot 0.3.5's own weixin channel against the fake, nothing patched: `nanobot channels login
/// weixin` (QR fetched by POST with its token list, scanned, a wrong and then the right verification number typed
/// in, confirmed: `account.json` and `config.json` written); a made-up token (the poll's `-14` ends `start()` with
/// "WeChat login expired", sends refused); then the logged-in channel: notifystart, the long poll, messages from
/// the allowed user (text, a duplicate dropped, the bot's own skipped, image, file and video downloaded and
/// decrypted into its media dir, a voice's transcript, a quote) and a stranger's (a pairing-code reply, nothing on
/// the bus), typing through getconfig/sendtyping; its sends (a text, a long text split at 1800 characters, a file
/// and an image uploaded to the CDN and sent before their text, a refused upload turned into `[Failed to send:
/// …]`), all on the user's latest context token; a reply refused for the token's quota (`-2`) kept and sent on the
/// user's next message; and the session expiring (revoked token: start() ends, sends refused, the cursor and
/// context tokens saved).
#[tokio::test]
async fn python_nanobot_weixin_channel_accepts_the_weixin_fake() {
    use base64::Engine as _;
    use nanobot_testkit::fake_weixin::{Answer, BOT_ID, FakeWeixin, padded_size, with_ref};
    use tokio::io::AsyncWriteExt as _;
    let Some(venv) = peers::require(
        "the Python nanobot 0.3.5's venv",
        peers::peers_dir()
            .map(|d| d.join("nanobot-venv/bin"))
            .filter(|p| p.join("python").exists()),
    ) else {
        return;
    };
    let within = Duration::from_secs(30);
    let home = tempfile::tempdir().unwrap();
    let cfg_dir = home.path().join("nb");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let cfg = cfg_dir.join("config.json");
    let reply_file = home.path().join("answer.txt");
    std::fs::write(&reply_file, "the answer file\n".repeat(5)).unwrap();
    let reply_image = home.path().join("chart.png");
    let png = wecom_png();
    std::fs::write(&reply_image, &png).unwrap();
    let bogus_dir = home.path().join("bogus-state");
    let fake = FakeWeixin::start().await.unwrap();
    std::fs::write(
        &cfg,
        json!({"channels": {"weixin": {
            "enabled": true, "baseUrl": fake.base_url(), "cdnBaseUrl": fake.cdn_base_url(),
            "allowFrom": [WX_ALICE], "contextMessageBudget": 10,
        }}})
        .to_string(),
    )
    .unwrap();

    // `nanobot channels login weixin`: the QR, a scan asking for the number (a wrong one typed first).
    fake.require_verify_code(Some("7351"));
    fake.set_qr_hold(Duration::from_secs(1));
    let mut login = tokio::process::Command::new(venv.join("nanobot"));
    login
        .args(["channels", "login", "weixin", "--config"])
        .arg(&cfg)
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let mut cli = ChildGuard::spawn_tokio("nanobot channels login weixin", &mut login).unwrap();
    let mut cli_in = cli.tokio_child_mut().unwrap().stdin.take().unwrap();
    let qrs = fake.wait_qrs(1, within).await.unwrap();
    assert_eq!(qrs[0].method, "POST");
    let qr_call = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/get_bot_qrcode")
        .unwrap();
    assert_eq!(qr_call.query.get("bot_type").map(String::as_str), Some("3"));
    assert_eq!(
        qr_call.body,
        json!({"local_token_list": []}),
        "no token on this machine yet"
    );
    assert_eq!(qr_call.header("authorization"), None);
    assert_eq!(qr_call.header("ilink-app-id"), Some("bot"));
    assert_eq!(
        qr_call.header("ilink-app-clientversion"),
        Some("132102"),
        "2.4.6 as 0x00MMNNPP"
    );
    fake.wait_qr_status("wait", within).await.unwrap();
    fake.scan(WX_ALICE).unwrap();
    cli_in.write_all(b"1111\n7351\n").await.unwrap();
    let qr = fake.wait_qr_status("scaned", within).await.unwrap();
    assert_eq!(qr.verify_codes[..2], ["1111", "7351"]);
    let token = fake.confirm(WX_ALICE).unwrap().unwrap();
    assert!(exit_of(&mut cli, within).await.success());
    let account: Value =
        serde_json::from_str(&std::fs::read_to_string(cfg_dir.join("weixin/account.json")).unwrap()).unwrap();
    assert_eq!(
        account,
        json!({"token": token, "get_updates_buf": "", "context_tokens": {}, "typing_tickets": {},
               "base_url": fake.base_url()})
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    assert_eq!(config["channels"]["weixin"]["token"], token);
    assert_eq!(config["channels"]["weixin"]["baseUrl"], fake.base_url());

    let mut cmd = tokio::process::Command::new(venv.join("python"));
    cmd.arg(fixture("weixin_035_probe.py"))
        .arg(&cfg)
        .args([WX_ALICE, "6"])
        .args([&reply_file, &reply_image, &bogus_dir])
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = ChildGuard::spawn_tokio("weixin 0.3.5 probe", &mut cmd).unwrap();
    let mut stdin = child.tokio_child_mut().unwrap().stdin.take().unwrap();
    let stdout = child.tokio_child_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();

    // A made-up token: -14 on every call; start() ends with 0.3.5's "login expired", a send is refused.
    let bogus = json_line(&mut lines).await;
    assert_eq!(bogus["bogus_error"], "WeixinAuthError", "{bogus}");
    assert_eq!(bogus["message"], "WeChat login expired. Scan again to reconnect.");
    assert_eq!(json_line(&mut lines).await["bogus_send"], "WeixinAuthError");
    let refused: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.header("authorization") == Some("Bearer made-up-token"))
        .collect();
    assert!(
        refused.iter().any(|c| c.path == "/ilink/bot/getupdates"),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .all(|c| c.answer == json!({"errcode": -14, "errmsg": "session timeout"}))
    );
    assert_eq!(fake.polls(), 0);

    // The logged-in channel: notifystart, then the long poll.
    assert_eq!(json_line(&mut lines).await["started"], true);
    fake.wait_polls(1, within).await.unwrap();
    assert_eq!(fake.notifications().0, 1);
    let notify = fake
        .wait_calls("/ilink/bot/msg/notifystart", 2, within)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        notify.header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    assert_eq!(notify.header("authorizationtype"), Some("ilink_bot_token"));
    let uin = notify.header("x-wechat-uin").unwrap();
    let uin = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(uin).unwrap()).unwrap();
    assert!(uin.parse::<u32>().is_ok(), "a decimal uint32: {uin}");
    assert_eq!(
        notify.body,
        json!({"base_info": {"channel_version": "2.4.6", "bot_agent": "nanobot/0.3.5 (python)"}})
    );

    let hello = fake.text(WX_ALICE, "hello");
    fake.push(&hello);
    fake.push(&hello); // the same message_id: dropped
    let mut own = fake.text(BOT_ID, "the bot's own echo");
    own["message_type"] = json!(2);
    fake.push(&own);
    let stranger = fake.push_text("mallory@im.wechat", "let me in");
    let jpg = weixin_jpeg();
    fake.push_image(WX_ALICE, &jpg);
    let doc = "年度报告 numbers 1 2 3\n".repeat(7);
    fake.push_file(WX_ALICE, "report 年.txt", doc.as_bytes());
    fake.push(&fake.voice(WX_ALICE, b"#!SILK_V3 bytes", Some("spoken words")));
    let mut quote = fake.text(WX_ALICE, "what about this");
    with_ref(
        &mut quote,
        "earlier",
        json!({"type": 1, "text_item": {"text": "the quoted line"}}),
    );
    fake.push(&quote);
    let video = b"\0\0\0\x18ftypmp42 video bytes ".repeat(9);
    let last = fake.push(&fake.video(WX_ALICE, &video));

    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(json_line(&mut lines).await);
    }
    for m in &got {
        assert_eq!(
            (&m["channel"], &m["sender_id"], &m["chat_id"]),
            (&json!("weixin"), &json!(WX_ALICE), &json!(WX_ALICE)),
            "{m}"
        );
    }
    assert_eq!(got[0]["content"], "hello");
    assert_eq!(
        got[0]["metadata"],
        json!({"message_id": hello["message_id"].to_string(), "_wants_stream": true})
    );
    assert_eq!(got[0]["media"], json!([]));
    let content = got[1]["content"].as_str().unwrap();
    assert!(content.starts_with("[image]\n[Image: source: "), "{content}");
    let name = got[1]["media"][0][0].as_str().unwrap();
    assert!(name.starts_with("image_") && name.ends_with(".jpg"), "{name}");
    assert!(content.ends_with(&format!("/media/weixin/{name}]")), "{content}");
    assert_eq!(got[1]["media"][0][1], sha256_hex(&jpg), "decrypted");
    let content = got[2]["content"].as_str().unwrap();
    assert!(
        content.starts_with("[file: report 年.txt]\n[File: source: ")
            && content.ends_with("/media/weixin/report 年.txt]"),
        "{content}"
    );
    assert_eq!(
        got[2]["media"],
        json!([["report 年.txt", sha256_hex(doc.as_bytes())]])
    );
    assert_eq!(got[3]["content"], "[voice] spoken words");
    assert_eq!(
        got[3]["media"],
        json!([]),
        "the transcript is used, nothing downloaded"
    );
    assert_eq!(
        got[4]["content"],
        "[引用: earlier | the quoted line]\nwhat about this"
    );
    let content = got[5]["content"].as_str().unwrap();
    assert!(content.starts_with("[video]\n[Video: source: "), "{content}");
    assert!(got[5]["media"][0][0].as_str().unwrap().ends_with(".mp4"));
    assert_eq!(got[5]["media"][0][1], sha256_hex(&video));
    assert_eq!(fake.downloads().len(), 3, "image, file, video");

    // The stranger got a pairing code on their own context token, and nothing reached the bus.
    let sent = fake.wait_sent(1, within).await.unwrap();
    let pairing = sent.iter().find(|s| s.to_user_id == "mallory@im.wechat").unwrap();
    assert_eq!(pairing.context_token, stranger["context_token"].as_str().unwrap());
    assert!(
        pairing.text().unwrap().contains("Your pairing code is:"),
        "{pairing:?}"
    );

    // The sends, all on alice's latest context token.
    let end = json_line(&mut lines).await;
    assert_eq!(end["sent"], true, "{end}");
    let long = end["long"].as_str().unwrap();
    let ctx = last["context_token"].as_str().unwrap();
    let sent: Vec<_> = fake
        .sent()
        .into_iter()
        .filter(|s| s.to_user_id == WX_ALICE)
        .collect();
    assert!(sent.iter().all(|s| s.context_token == ctx), "{sent:?}");
    assert!(sent.iter().all(|s| {
        s.client_id.starts_with("nanobot-")
            && s.client_id.len() == 28
            && (s.message_type, s.message_state) == (2, 2)
    }));
    assert_eq!(sent[0].text(), Some("final answer"), "stripped");
    assert_eq!(sent[0].body["msg"]["from_user_id"], "");
    assert_eq!(sent[0].body["base_info"]["channel_version"], "2.4.6");
    let chunks: Vec<&str> = sent[1..4].iter().map(|s| s.text().unwrap()).collect();
    assert!(chunks.iter().all(|c| c.chars().count() <= 1800), "{chunks:?}");
    assert_eq!(chunks.join("\n\n"), long, "split at paragraph breaks");
    let (file, image, caption) = (&sent[4], &sent[5], &sent[6]);
    assert_eq!(file.item_type(), Some(4));
    let item = &file.items[0]["file_item"];
    assert_eq!(
        (&item["file_name"], &item["len"]),
        (&json!("answer.txt"), &json!("80"))
    );
    let aes_key = base64::engine::general_purpose::STANDARD
        .decode(item["media"]["aes_key"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        String::from_utf8(aes_key).unwrap(),
        file.media[0].aeskey,
        "0.3.5 sends base64 of the key's hex"
    );
    assert_eq!(item["media"]["encrypt_type"], 1);
    assert_eq!(
        file.media[0].data,
        std::fs::read(&reply_file).unwrap(),
        "decrypted by the fake"
    );
    assert_eq!(image.item_type(), Some(2));
    assert_eq!(
        image.items[0]["image_item"]["mid_size"],
        padded_size(png.len() as u64)
    );
    assert_eq!(image.media[0].data, png);
    assert_eq!(caption.text(), Some("here you go"), "media first, then the text");
    let uploads = fake.uploads();
    assert_eq!(uploads.iter().map(|u| u.media_type).collect::<Vec<_>>(), [3, 1]);
    let upload_call = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/getuploadurl")
        .unwrap();
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
    assert_eq!(upload_call.body["no_need_thumb"], true);
    assert_eq!(upload_call.body["filesize"], padded_size(80));

    // Typing: the ticket from getconfig, on (1) when a message arrives, off (2) around each send.
    let config_call = fake
        .calls()
        .into_iter()
        .find(|c| c.path == "/ilink/bot/getconfig" && c.body["ilink_user_id"] == WX_ALICE)
        .unwrap();
    assert_eq!(config_call.body["context_token"], hello["context_token"]);
    let ticket = config_call.answer["typing_ticket"].as_str().unwrap().to_string();
    let typing: Vec<_> = fake.typing().into_iter().filter(|t| t.user == WX_ALICE).collect();
    assert!(typing.iter().all(|t| t.ticket == ticket));
    assert!(typing.iter().any(|t| t.status == 1) && typing.iter().any(|t| t.status == 2));

    // A refused upload: 0.3.5 says so in a text instead.
    fake.answer_next("/c2c/upload", Answer::Status(400));
    stdin.write_all(b"go\n").await.unwrap();
    assert_eq!(json_line(&mut lines).await["fallback_sent"], true);
    let last_sent = fake.sent().pop().unwrap();
    assert_eq!(last_sent.text(), Some("[Failed to send: answer.txt]"));

    // The context token is out of sends (-2): 0.3.5 keeps the reply and sends it on the user's next message.
    let sends = fake.sent().len();
    fake.set_context_quota(fake.sent().iter().filter(|s| s.context_token == ctx).count());
    stdin.write_all(b"go\n").await.unwrap();
    assert_eq!(json_line(&mut lines).await["quota_error"], "WeixinQuotaError");
    assert_eq!(fake.sent().len(), sends);
    let again = fake.push_text(WX_ALICE, "are you there?");
    assert_eq!(json_line(&mut lines).await["content"], "are you there?");
    let deferred = fake.wait_sent(sends + 1, within).await.unwrap().pop().unwrap();
    assert_eq!(deferred.text(), Some("deferred answer"));
    assert_eq!(deferred.context_token, again["context_token"].as_str().unwrap());

    // The session expires: start() ends with the auth error, sends are refused locally.
    let sends = fake.sent().len();
    fake.revoke_tokens();
    let expired = json_line(&mut lines).await;
    assert_eq!(expired["auth_error"], "WeixinAuthError", "{expired}");
    assert_eq!(
        expired["message"],
        "WeChat login expired. Scan again to reconnect."
    );
    assert_eq!(
        json_line(&mut lines).await["send_after_expiry"],
        "WeixinAuthError"
    );
    assert_eq!(fake.sent().len(), sends);
    let state = json_line(&mut lines).await["state"].clone();
    assert_eq!(state["token"], token);
    assert_eq!(state["base_url"], fake.base_url());
    assert_eq!(
        state["get_updates_buf"],
        base64::engine::general_purpose::STANDARD.encode("fakewx:10"),
        "the cursor after the 10 messages"
    );
    let mut kept = json!({});
    kept[WX_ALICE] = again["context_token"].clone();
    assert_eq!(state["context_tokens"], kept, "the stranger's is not kept");
    assert_eq!(state["typing_tickets"][WX_ALICE]["ticket"], ticket);
}

/// The weixin fake's own rules (no peer needed): QR fetches (bot type, token lists) and statuses (hold, the
/// verification number, a one-off redirect, confirmation revoking older tokens, `binded_redirect`, expiry, unknown
/// codes), `-14` without a valid token, the long poll's hold and cursor, sends checked against context tokens,
/// their quota and item rules, typing tickets, uploads checked on the CDN (filekey, size, padding, MD5) and media
/// items checked against them, downloads, forced answers, bad requests.
#[tokio::test]
async fn weixin_fake_checks_logins_tokens_polls_and_media() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use nanobot_testkit::fake_weixin::{
        Answer, BOT_ID, ERR_CONTEXT, ERR_INVALID, FakeWeixin, MAX_TEXT_BYTES, ecb, md5, padded_size,
    };
    nanobot_testkit::install_ring();
    let within = Duration::from_secs(10);
    let fake = FakeWeixin::start().await.unwrap();
    fake.set_qr_hold(Duration::from_millis(200));
    fake.set_poll_hold(Duration::from_millis(300));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = fake.base_url();
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut req = http.post(format!("{base}/ilink/bot/{path}")).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.json::<Value>().await.unwrap()
        }
    };
    let status = |code: &str, verify: Option<&str>| {
        let mut url = format!("{base}/ilink/bot/get_qrcode_status?qrcode={code}");
        if let Some(v) = verify {
            url.push_str(&format!("&verify_code={v}"));
        }
        let req = http.get(url);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };

    // QR fetches.
    assert_eq!(
        post("get_bot_qrcode?bot_type=2", None, json!({})).await["ret"],
        ERR_INVALID
    );
    let old = fake.issue_token("someone@im.wechat");
    assert_eq!(
        post(
            "get_bot_qrcode?bot_type=3",
            None,
            json!({"local_token_list": ["never-issued"]})
        )
        .await["errcode"],
        ERR_INVALID
    );
    let qr = post("get_bot_qrcode?bot_type=3", None, json!({"local_token_list": []})).await;
    assert_eq!(qr["ret"], 0);
    let code = qr["qrcode"].as_str().unwrap().to_string();
    assert!(qr["qrcode_img_content"].as_str().unwrap().contains(&code));
    // Held, then unchanged; unknown codes have expired.
    let started = std::time::Instant::now();
    assert_eq!(status(&code, None).await, json!({"status": "wait"}));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(status("nope", None).await, json!({"status": "expired"}));
    // A scan asking for the number: wrong, then right; a one-off redirect; the confirmation.
    fake.require_verify_code(Some("42"));
    fake.scan(WX_ALICE).unwrap();
    assert_eq!(status(&code, None).await["status"], "need_verifycode");
    assert_eq!(status(&code, Some("41")).await["status"], "need_verifycode");
    assert_eq!(status(&code, Some("42")).await["status"], "scaned");
    assert!(fake.confirm("bob@im.wechat").is_err(), "alice scanned it");
    fake.qr_answer_once(json!({"status": "scaned_but_redirect", "redirect_host": "127.0.0.1"}))
        .unwrap();
    assert_eq!(status(&code, None).await["status"], "scaned_but_redirect");
    let token = fake.confirm(WX_ALICE).unwrap().unwrap();
    assert_eq!(
        status(&code, None).await,
        json!({"status": "confirmed", "bot_token": token, "ilink_bot_id": BOT_ID, "baseurl": base,
               "ilink_user_id": WX_ALICE})
    );
    assert!(
        fake.token_valid(&token) && !fake.token_valid(&old),
        "older tokens revoked"
    );
    // Already bound: a QR fetched with a valid token confirms as binded_redirect, without a new token.
    fake.require_verify_code(None);
    let qr2 = post("get_bot_qrcode", None, json!({})).await;
    assert_eq!(qr2["ret"], ERR_INVALID, "no bot_type");
    let qr2 = post(
        "get_bot_qrcode?bot_type=3",
        None,
        json!({"local_token_list": [token]}),
    )
    .await;
    assert_eq!(fake.confirm(WX_ALICE).unwrap(), None);
    assert_eq!(
        status(qr2["qrcode"].as_str().unwrap(), None).await,
        json!({"status": "binded_redirect"})
    );
    assert!(fake.token_valid(&token));
    let qr3 = http
        .get(format!("{base}/ilink/bot/get_bot_qrcode?bot_type=3"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    fake.expire_qr().unwrap();
    assert_eq!(
        status(qr3["qrcode"].as_str().unwrap(), None).await["status"],
        "expired"
    );
    assert_eq!(fake.qrs()[2].method, "GET");

    // No token, a wrong one: -14, HTTP 200.
    let timeout = json!({"errcode": -14, "errmsg": "session timeout"});
    for t in [None, Some("wrong")] {
        for ep in [
            "getupdates",
            "sendmessage",
            "getconfig",
            "sendtyping",
            "getuploadurl",
            "msg/notifystart",
        ] {
            assert_eq!(post(ep, t, json!({})).await, timeout, "{ep} {t:?}");
        }
    }

    // The long poll: held, then empty; messages from the cursor on; a push wakes a held poll.
    let t = Some(token.as_str());
    let started = std::time::Instant::now();
    let empty = post("getupdates", t, json!({"get_updates_buf": ""})).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        empty,
        json!({"ret": 0, "msgs": [], "get_updates_buf": STANDARD.encode("fakewx:0"), "longpolling_timeout_ms": 300})
    );
    let hello = fake.push_text(WX_ALICE, "hello");
    let got = post("getupdates", t, json!({"get_updates_buf": ""})).await;
    assert_eq!(got["msgs"], json!([hello]));
    assert_eq!(got["msgs"][0]["seq"], 1);
    assert_eq!(got["msgs"][0]["to_user_id"], BOT_ID);
    let cursor = got["get_updates_buf"].clone();
    fake.set_poll_hold(Duration::from_secs(5));
    let held = tokio::spawn(post("getupdates", t, json!({"get_updates_buf": cursor})));
    fake.wait_polls(3, within).await.unwrap();
    let jpg = weixin_jpeg();
    let image = fake.push_image(WX_ALICE, &jpg);
    let got = tokio::time::timeout(within, held).await.unwrap().unwrap();
    assert_eq!(got["msgs"], json!([image]));
    assert_eq!(got["get_updates_buf"], STANDARD.encode("fakewx:2"));
    fake.set_poll_hold(Duration::from_millis(300));

    // Inbound media: the ciphertext, decrypted with image_item.aeskey (hex) or media.aes_key (base64).
    let item = &image["item_list"][0]["image_item"];
    let param = item["media"]["encrypt_query_param"].as_str().unwrap();
    let url = reqwest::Url::parse_with_params(
        &format!("{}/download", fake.cdn_base_url()),
        [("encrypted_query_param", param)],
    )
    .unwrap();
    let resp = http.get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let cipher = resp.bytes().await.unwrap();
    assert_eq!(cipher.len() as u64, padded_size(jpg.len() as u64));
    let key: [u8; 16] = STANDARD
        .decode(item["media"]["aes_key"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        item["aeskey"],
        key.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    assert_eq!(ecb::decrypt(&key, &cipher).unwrap(), jpg);
    let missing = http
        .get(format!(
            "{}/download?encrypted_query_param=nope",
            fake.cdn_base_url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.headers().contains_key("x-error-message"));
    assert_eq!(fake.downloads(), [param]);

    // Sends: a context token of that user, within its quota; item rules.
    let ctx = hello["context_token"].as_str().unwrap();
    let msg = |to: &str, ctx: Option<&str>, items: Value| {
        let mut m = json!({"from_user_id": "", "to_user_id": to, "client_id": "c-1", "message_type": 2,
                           "message_state": 2, "item_list": items});
        if let Some(c) = ctx {
            m["context_token"] = json!(c);
        }
        json!({"msg": m, "base_info": {"channel_version": "test"}})
    };
    let text = |s: &str| json!([{"type": 1, "text_item": {"text": s}}]);
    fake.set_context_quota(2);
    for (body, code) in [
        (msg(WX_ALICE, None, text("hi")), ERR_CONTEXT),
        (msg(WX_ALICE, Some("unknown"), text("hi")), ERR_CONTEXT),
        (msg("bob@im.wechat", Some(ctx), text("hi")), ERR_CONTEXT),
        (msg(WX_ALICE, Some(ctx), json!([])), ERR_INVALID),
        (
            msg(WX_ALICE, Some(ctx), text(&"x".repeat(MAX_TEXT_BYTES + 1))),
            ERR_INVALID,
        ),
        (msg(WX_ALICE, Some(ctx), json!([{"type": 9}])), ERR_INVALID),
        (
            json!({"msg": {"to_user_id": WX_ALICE, "message_type": 1, "context_token": ctx, "item_list": text("hi")}}),
            ERR_INVALID,
        ),
    ] {
        let answer = post("sendmessage", t, body).await;
        assert_eq!(answer["errcode"], code, "{answer}");
        assert_eq!(answer["ret"], code);
    }
    assert_eq!(
        post("sendmessage", t, msg(WX_ALICE, Some(ctx), text("one"))).await,
        json!({})
    );
    assert_eq!(
        post("sendmessage", t, msg(WX_ALICE, Some(ctx), text("two"))).await,
        json!({})
    );
    let over = post("sendmessage", t, msg(WX_ALICE, Some(ctx), text("three"))).await;
    assert_eq!(over["errcode"], ERR_CONTEXT, "{over}");
    assert!(over["errmsg"].as_str().unwrap().contains("quota"));
    assert_eq!(
        fake.sent().iter().map(|s| s.text().unwrap()).collect::<Vec<_>>(),
        ["one", "two"]
    );

    // Typing tickets.
    let cfg = post(
        "getconfig",
        t,
        json!({"ilink_user_id": WX_ALICE, "context_token": ctx}),
    )
    .await;
    let ticket = cfg["typing_ticket"].as_str().unwrap();
    assert_eq!(cfg, json!({"ret": 0, "typing_ticket": ticket}));
    let typing = |ticket: &str, status: i64| json!({"ilink_user_id": WX_ALICE, "typing_ticket": ticket, "status": status});
    assert_eq!(
        post("sendtyping", t, typing("forged", 1)).await["ret"],
        ERR_INVALID
    );
    assert_eq!(post("sendtyping", t, typing(ticket, 3)).await["ret"], ERR_INVALID);
    assert_eq!(post("sendtyping", t, typing(ticket, 1)).await, json!({"ret": 0}));
    assert_eq!(post("msg/notifystart", t, json!({})).await, json!({"ret": 0}));
    assert_eq!(fake.notifications(), (1, 0));

    // Uploads: getuploadurl, then the ciphertext on the CDN (checked), then a media item naming it.
    let data = b"an uploaded file".repeat(3);
    let key: [u8; 16] = std::array::from_fn(|i| i as u8 + 1);
    let key_hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let data_md5: String = md5::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
    let ask = |filesize: u64, md5: &str| {
        json!({"filekey": "fk-1", "media_type": 3, "to_user_id": WX_ALICE, "rawsize": data.len(),
               "rawfilemd5": md5, "filesize": filesize, "no_need_thumb": true, "aeskey": key_hex})
    };
    assert_eq!(
        post("getuploadurl", t, ask(data.len() as u64, &data_md5)).await["ret"],
        ERR_INVALID
    );
    let bad_md5 = post(
        "getuploadurl",
        t,
        ask(padded_size(data.len() as u64), &"0".repeat(32)),
    )
    .await;
    let up = post("getuploadurl", t, ask(padded_size(data.len() as u64), &data_md5)).await;
    assert_eq!(up["upload_full_url"], Value::Null, "full URLs are off");
    let param = up["upload_param"].as_str().unwrap();
    let cdn_post = |param: &str, filekey: &str, body: Vec<u8>| {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/upload", fake.cdn_base_url()),
            [("encrypted_query_param", param), ("filekey", filekey)],
        )
        .unwrap();
        let req = http
            .post(url)
            .header("content-type", "application/octet-stream")
            .body(body);
        async move { req.send().await.unwrap() }
    };
    let cipher = ecb::encrypt(&key, &data);
    for (p, fk, body) in [
        (param, "other", cipher.clone()),
        (param, "fk-1", cipher[..cipher.len() - 16].to_vec()),
        (param, "fk-1", ecb::encrypt(&[9; 16], &data)),
        (bad_md5["upload_param"].as_str().unwrap(), "fk-1", cipher.clone()),
        ("unknown", "fk-1", cipher.clone()),
    ] {
        let resp = cdn_post(p, fk, body).await;
        assert_eq!(resp.status(), 400);
        assert!(resp.headers().contains_key("x-error-message"), "{resp:?}");
    }
    let resp = cdn_post(param, "fk-1", cipher.clone()).await;
    assert_eq!(resp.status(), 200);
    let download = resp.headers()["x-encrypted-param"].to_str().unwrap().to_string();
    assert_eq!(
        cdn_post(param, "fk-1", cipher.clone()).await.status(),
        400,
        "used"
    );
    assert_eq!(fake.uploads()[0].data, data);
    let media =
        |aes_key: String| json!({"encrypt_query_param": download, "aes_key": aes_key, "encrypt_type": 1});
    let ctx2 = image["context_token"].as_str().unwrap();
    for (items, why) in [
        (
            json!([{"type": 2, "image_item": {"media": media(STANDARD.encode(key))}}]),
            "an image item naming a file",
        ),
        (
            json!([{"type": 4, "file_item": {"media": media(STANDARD.encode([7u8; 16]))}}]),
            "another key",
        ),
        (
            json!([{"type": 4, "file_item": {"media": {"encrypt_query_param": "x", "aes_key": STANDARD.encode(key)}}}]),
            "an unknown param",
        ),
    ] {
        assert_eq!(
            post("sendmessage", t, msg(WX_ALICE, Some(ctx2), items)).await["ret"],
            ERR_INVALID,
            "{why}"
        );
    }
    for aes_key in [STANDARD.encode(key), STANDARD.encode(&key_hex)] {
        let items =
            json!([{"type": 4, "file_item": {"media": media(aes_key), "file_name": "a.bin", "len": "48"}}]);
        assert_eq!(
            post("sendmessage", t, msg(WX_ALICE, Some(ctx2), items)).await,
            json!({})
        );
    }
    assert_eq!(fake.sent().last().unwrap().media[0].data, data);
    fake.expire_context_tokens();
    assert_eq!(
        post("sendmessage", t, msg(WX_ALICE, Some(ctx2), text("late"))).await["errcode"],
        ERR_CONTEXT
    );

    // Forced answers, bad requests.
    fake.answer_next("/ilink/bot/getconfig", Answer::Status(502));
    fake.answer_next("/ilink/bot/getconfig", Answer::Json(json!({"ret": -1})));
    let resp = http
        .post(format!("{base}/ilink/bot/getconfig"))
        .bearer_auth(&token)
        .json(&json!({"ilink_user_id": WX_ALICE}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(
        post("getconfig", t, json!({"ilink_user_id": WX_ALICE})).await,
        json!({"ret": -1})
    );
    let resp = http
        .post(format!("{base}/ilink/bot/getupdates"))
        .bearer_auth(&token)
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = http
        .get(format!("{base}/ilink/bot/getupdates"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let resp = http
        .post(format!("{base}/ilink/bot/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // Revoking ends a held poll at once.
    fake.set_poll_hold(Duration::from_secs(30));
    let polls = fake.polls();
    let held = tokio::spawn(post(
        "getupdates",
        t,
        json!({"get_updates_buf": STANDARD.encode("fakewx:99")}),
    ));
    fake.wait_polls(polls + 1, within).await.unwrap();
    fake.revoke_tokens();
    let got = tokio::time::timeout(within, held).await.unwrap().unwrap();
    assert_eq!(got, timeout);
}
