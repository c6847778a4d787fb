//! The `websocket` channel inside a real gateway: a plain WebSocket client talks to the agent (MockLlm behind it).

use std::net::SocketAddr;

use futures::{SinkExt as _, StreamExt as _};
use nanobot_gateway::Gateway;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{GUARD, options, sessions, texts};

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(addr: SocketAddr, query: &str) -> Ws {
    let url = format!("ws://{addr}/?{query}");
    tokio::time::timeout(GUARD, tokio_tungstenite::connect_async(url))
        .await
        .unwrap()
        .unwrap()
        .0
}

async fn next_event(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(GUARD, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// Events of `chat` up to and including the one that ends the answer (`stream_end`, or a plain `message`).
async fn answer(ws: &mut Ws) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_event(ws).await;
        let done = ev["event"] == "stream_end" || (ev["event"] == "message" && ev.get("kind").is_none());
        out.push(ev);
        if done {
            return out;
        }
    }
}

#[tokio::test]
async fn a_websocket_client_chats_with_the_agent_through_the_gateway() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let patch = json!({"channels": {"websocket": {"port": 0, "token": "gw-token"}}});
    nanobot_testkit::install_ring();
    let gw = Gateway::start(options(&home, &mock, patch)).await.unwrap();
    let addr = gw.websocket_addr().await.expect("the websocket channel listens");

    let url = format!("ws://{addr}/?client_id=tester");
    let refused = tokio_tungstenite::connect_async(url).await;
    assert!(refused.is_err(), "no token, no connection");

    let mut a = connect(addr, "client_id=tester&token=gw-token").await;
    let mut b = connect(addr, "client_id=other&token=gw-token").await;
    let chat_a = next_event(&mut a).await["chat_id"].as_str().unwrap().to_owned();
    let chat_b = next_event(&mut b).await["chat_id"].as_str().unwrap().to_owned();

    mock.push(MockReply::text("Hello from the gateway, streamed in pieces").chunk_chars(6));
    let send = json!({"type": "message", "chat_id": chat_a, "content": "hi from A"});
    a.send(Message::text(send.to_string())).await.unwrap();
    let events = answer(&mut a).await;
    let deltas: String = events
        .iter()
        .filter(|e| e["event"] == "delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(
        events.iter().filter(|e| e["event"] == "delta").count() > 1,
        "{events:?}"
    );
    assert_eq!(deltas, "Hello from the gateway, streamed in pieces");
    let end = events.last().unwrap();
    assert_eq!(end["event"], "stream_end");
    assert_eq!(end["text"], "Hello from the gateway, streamed in pieces");
    assert!(events.iter().all(|e| e["chat_id"] == chat_a.as_str()));

    // B talks in its own session; a tool call shows up as a tool_hint before the answer.
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})));
    mock.push(MockReply::text("B's answer"));
    let send = json!({"type": "message", "chat_id": chat_b, "content": "hi from B"});
    b.send(Message::text(send.to_string())).await.unwrap();
    let events = answer(&mut b).await;
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "tool_hint" && e["text"].as_str().unwrap().contains("list_dir")),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap()["text"], "B's answer");
    assert!(events.iter().all(|e| e["chat_id"] == chat_b.as_str()));

    // An image travels to the model as an image part.
    mock.push(MockReply::text("a red dot"));
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let send = json!({"type": "message", "chat_id": chat_a, "content": "what is this?", "media": [{"data_url": png, "name": "dot.png"}]});
    a.send(Message::text(send.to_string())).await.unwrap();
    assert_eq!(answer(&mut a).await.last().unwrap()["text"], "a red dot");
    let last = mock.last_request().unwrap();
    let user = last
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .clone();
    let parts = user["content"].as_array().expect("multimodal content");
    assert!(
        parts.iter().any(|p| p["type"] == "image_url"
            && p["image_url"]["url"]
                .as_str()
                .unwrap()
                .starts_with("data:image/png;base64,")),
        "{user}"
    );

    drop((a, b));
    let report = tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(report.drained);
    let s = sessions(&home);
    let msgs_a = &s[&format!("websocket:{chat_a}")];
    assert!(texts(msgs_a, "user")[0].contains("hi from A"));
    assert_eq!(
        texts(msgs_a, "assistant")[0],
        "Hello from the gateway, streamed in pieces"
    );
    let msgs_b = &s[&format!("websocket:{chat_b}")];
    assert!(
        texts(msgs_b, "user").iter().all(|t| !t.contains("hi from A")),
        "sessions kept apart"
    );
}
