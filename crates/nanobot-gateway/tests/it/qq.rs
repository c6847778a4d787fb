//! The QQ channel through the whole gateway: the testkit's fake QQ Bot API (checked by qq-botpy in the testkit)
//! dispatches a C2C message, the agent answers through the scripted mock LLM, and the answer goes out as a
//! passive reply naming the message.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_qq::{FakeQq, c2c_message};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qq_message_is_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from qq", MockReply::text("pong from the agent"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeQq::start("102030", "secret-3", 30_000).await?;
    let patch = json!({"channels": {"qq": {"enabled": true, "appId": "102030", "secret": "secret-3",
        "allowFrom": ["ALICE"], "ackMessage": "", "baseUrl": fake.base_url()}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.ready(1).await?;
    fake.push_event(
        "C2C_MESSAGE_CREATE",
        &c2c_message("q-1", "STRANGER", "ping from qq"),
    );
    fake.push_event("C2C_MESSAGE_CREATE", &c2c_message("q-2", "ALICE", "ping from qq"));
    let sent = fake.sent(2).await?;
    let to_alice: Vec<_> = sent
        .iter()
        .filter(|c| c.path == "/v2/users/ALICE/messages")
        .collect();
    assert_eq!(to_alice.len(), 1, "{sent:?}");
    assert_eq!(to_alice[0].body["content"], "pong from the agent");
    assert_eq!(to_alice[0].body["msg_id"], "q-2");
    // The stranger got a pairing code, never the agent's answer.
    let to_stranger: Vec<_> = sent
        .iter()
        .filter(|c| c.path == "/v2/users/STRANGER/messages")
        .collect();
    assert_eq!(to_stranger.len(), 1, "{sent:?}");
    assert!(
        to_stranger[0].body["content"]
            .as_str()
            .unwrap()
            .contains("pairing code")
    );
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn enabled_qq_and_mochat_blocks_are_validated_at_start() {
    // Raw blocks read by the adapters' own parsers: an enabled one with a missing key stops the start, naming it.
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"qq": {"enabled": true, "appId": "1", "secret": ""}}),
            "channels.qq.secret",
        ),
        (
            json!({"qq": {"enabled": true, "appId": "1", "secret": "s", "msgFormat": "html"}}),
            "channels.qq.msgFormat",
        ),
        (
            json!({"mochat": {"enabled": true, "clawToken": ""}}),
            "channels.mochat.clawToken",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
    // A disabled block is left alone.
    let opts = options(
        &home,
        &mock,
        json!({"channels": {"mochat": {"enabled": false, "clawToken": ""}}}),
    );
    let gw = Gateway::start(opts).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
}
