//! The heartbeat inside a real gateway: one owner (the runtime's system job), one model call per tick, the
//! report delivered once to the last active chat; slash commands answered by the one dispatcher, once.

use std::net::SocketAddr;

use futures::{SinkExt as _, StreamExt as _};
use nanobot_gateway::Gateway;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{GUARD, options, sessions, texts};

const TASKS: &str = "# Heartbeat Tasks\n\n## Active Tasks\n- [ ] Check the weather in Paris and tell me\n";

async fn gateway(home: &TempHome, mock: &MockLlm, patch: Value) -> Gateway {
    nanobot_testkit::install_ring();
    let mut patch = patch;
    patch["gateway"] = json!({"heartbeat": {"enabled": true, "intervalS": 3600}});
    Gateway::start(options(home, mock, patch)).await.unwrap()
}

async fn tick(gw: &Gateway) -> Option<String> {
    let cron = gw.agent().cron().unwrap().clone();
    tokio::time::timeout(GUARD, cron.run_now("heartbeat", true))
        .await
        .unwrap()
        .unwrap()
        .output
}

async fn metrics(gw: &Gateway) -> String {
    let url = format!("http://{}/metrics", gw.http_addr().unwrap());
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn gateway_registers_protected_system_jobs_and_no_tasks_means_no_model_call() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = gateway(&home, &mock, json!({})).await;
    let cron = gw.agent().cron().unwrap().clone();
    let jobs = cron.list().unwrap();
    for id in ["dream", "heartbeat"] {
        let job = jobs
            .iter()
            .find(|j| j.id == id)
            .unwrap_or_else(|| panic!("{id} missing: {jobs:?}"));
        assert!(job.is_protected());
    }
    assert!(cron.remove("heartbeat").is_err(), "protected from removal");
    assert_eq!(tick(&gw).await.as_deref(), Some("empty"), "no file");
    home.write_workspace_file(
        "HEARTBEAT.md",
        "# Heartbeat Tasks\n\n<!-- examples\n- do x\n-->\n## Active Tasks\n",
    );
    assert_eq!(tick(&gw).await.as_deref(), Some("empty"));
    assert_eq!(mock.request_count(), 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn each_tick_is_exactly_one_model_call_and_skip_sends_nothing() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::tool_call("heartbeat", json!({"action": "skip"})));
    let gw = gateway(&home, &mock, json!({})).await;
    for n in 1..=3 {
        assert_eq!(tick(&gw).await.as_deref(), Some("skip"));
        assert_eq!(mock.request_count(), n, "one model call per heartbeat tick");
    }
    let reqs = mock.requests();
    assert_eq!(reqs[0].body["tools"][0]["function"]["name"], "heartbeat");
    assert!(
        reqs[0]
            .last_user_text()
            .unwrap()
            .contains("Check the weather in Paris")
    );
    assert!(!sessions(&home).contains_key("heartbeat"));
    // The runtime observes each run once (through the cron broadcast): wait, bounded, until all three show.
    let want = "nanobot_heartbeats_total{decision=\"skip\"} 3";
    let m = tokio::time::timeout(GUARD, async {
        loop {
            let m = metrics(&gw).await;
            if m.contains(want) {
                return m;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("three heartbeat observations");
    assert!(
        !m.contains("decision=\"skip\"} 4") && !m.contains("decision=\"skip\"} 6"),
        "{m}"
    );
    gw.shutdown().await;
    assert_eq!(mock.request_count(), 3);
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(addr: SocketAddr) -> Ws {
    let url = format!("ws://{addr}/?client_id=tester&token=hb-token");
    tokio::time::timeout(GUARD, tokio_tungstenite::connect_async(url))
        .await
        .unwrap()
        .unwrap()
        .0
}

/// The next event that ends an answer (a final `message`, or the `stream_end` of a streamed one).
async fn next_message(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(GUARD, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            let ev: Value = serde_json::from_str(t.as_str()).unwrap();
            if ev["event"] == "stream_end" || (ev["event"] == "message" && ev.get("kind").is_none()) {
                return ev;
            }
        }
    }
}

#[tokio::test]
async fn slash_commands_get_one_reply_and_the_heartbeat_reports_once_to_the_last_chat() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    let patch = json!({"channels": {"websocket": {"port": 0, "token": "hb-token"}}});
    let gw = gateway(&home, &mock, patch).await;
    let addr = gw.websocket_addr().await.expect("the websocket channel listens");
    let mut ws = connect(addr).await;
    let ready = tokio::time::timeout(GUARD, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ready: Value = serde_json::from_str(ready.to_text().unwrap()).unwrap();
    let chat = ready["chat_id"].as_str().unwrap().to_owned();
    let say =
        |text: &str| Message::text(json!({"type": "message", "chat_id": chat, "content": text}).to_string());

    // A slash command through a channel: answered by the one dispatcher, exactly once, without the model.
    ws.send(say("/help")).await.unwrap();
    let help = next_message(&mut ws).await;
    assert!(help["text"].as_str().unwrap().contains("/new"), "{help}");
    mock.push(MockReply::text("hello there"));
    ws.send(say("hi")).await.unwrap();
    let next = next_message(&mut ws).await;
    assert_eq!(
        next["text"], "hello there",
        "the command had exactly one reply before this"
    );
    assert_eq!(mock.request_count(), 1);

    // The heartbeat decides to run: one decision call, one turn, one report to this chat.
    mock.push(MockReply::tool_call(
        "heartbeat",
        json!({"action": "run", "tasks": "Check the weather in Paris"}),
    ));
    mock.push(MockReply::text("Rain in Paris today: take an umbrella."));
    mock.push(MockReply::tool_call(
        "evaluate_notification",
        json!({"should_notify": true, "reason": "weather warning"}),
    ));
    assert_eq!(tick(&gw).await.as_deref(), Some("run"));
    assert_eq!(
        mock.request_count(),
        4,
        "one decision + one turn + the notification gate"
    );
    let report = next_message(&mut ws).await;
    assert_eq!(report["chat_id"], chat.as_str());
    assert_eq!(report["text"], "Rain in Paris today: take an umbrella.");
    let s = sessions(&home);
    assert_eq!(
        texts(&s["heartbeat"], "assistant"),
        ["Rain in Paris today: take an umbrella."]
    );

    // Nothing to report: silent (the next message this chat sees is the answer to its next question).
    mock.push(MockReply::tool_call(
        "heartbeat",
        json!({"action": "run", "tasks": "check"}),
    ));
    mock.push(MockReply::text("HEARTBEAT_OK"));
    assert_eq!(tick(&gw).await.as_deref(), Some("run"));
    mock.push(MockReply::text("still here"));
    ws.send(say("ping")).await.unwrap();
    assert_eq!(next_message(&mut ws).await["text"], "still here");
    assert_eq!(mock.request_count(), 7, "HEARTBEAT_OK needs no gate");
    gw.shutdown().await;
}
