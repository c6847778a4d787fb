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
    let Some(python) = peers::require(
        "the Python nanobot 0.3.5's venv",
        peers::peers_dir()
            .map(|d| d.join("nanobot-venv/bin/python"))
            .filter(|p| p.exists()),
    ) else {
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
