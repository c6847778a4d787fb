//! The NapCat channel through the whole gateway: the testkit's fake OneBot v11 server (checked in the testkit by
//! nonebot2's OneBot adapter and by the Python nanobot 0.3.5's own NapCat channel) delivers a private and a group
//! message, the agent answers through the scripted mock LLM, and the answers go out with `send_msg`.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_onebot::{FakeOneBot, SELF_ID, group_message, private_message};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::common::options;

fn text_of(params: &Value) -> String {
    params["message"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["data"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn napcat_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from napcat", MockReply::text("pong from the agent"));
    mock.when_last_user_contains("Alice: group ping", MockReply::text("pong to the group"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeOneBot::start(Some("gw-token")).await?;
    let patch = json!({"channels": {"napcat": {"enabled": true, "wsUrl": fake.ws_url(), "accessToken": "gw-token",
        "allowFrom": ["20002"]}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.wait_actions("get_login_info", 1).await?;
    fake.push_event(&private_message(1, 30003, "ping from napcat"));
    fake.push_event(&private_message(2, 20002, "ping from napcat"));
    let at_bot = json!({"type": "at", "data": {"qq": SELF_ID.to_string()}});
    fake.push_event(&group_message(
        3,
        55555,
        20002,
        "Alice",
        json!([at_bot, {"type": "text", "data": {"text": " group ping"}}]),
    ));
    let sent: Vec<Value> = fake
        .wait_actions("send_msg", 3)
        .await?
        .into_iter()
        .map(|a| a.params)
        .collect();
    let to = |key: &str, id: i64| sent.iter().filter(|p| p[key] == json!(id)).collect::<Vec<_>>();
    let alice = to("user_id", 20002);
    assert_eq!(alice.len(), 1, "{sent:?}");
    assert_eq!(text_of(alice[0]), "pong from the agent");
    let group = to("group_id", 55555);
    assert_eq!(group.len(), 1, "{sent:?}");
    assert_eq!(text_of(group[0]), "pong to the group");
    // The stranger got a pairing code, never the agent's answer.
    let stranger = to("user_id", 30003);
    assert_eq!(stranger.len(), 1, "{sent:?}");
    assert!(text_of(stranger[0]).contains("pairing code"), "{sent:?}");
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_napcat_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"napcat": {"enabled": true, "wsUrl": "http://127.0.0.1:3001"}}),
            "channels.napcat.wsUrl",
        ),
        (
            json!({"napcat": {"enabled": true, "groupPolicy": "allowlist"}}),
            "channels.napcat.groupPolicy",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
