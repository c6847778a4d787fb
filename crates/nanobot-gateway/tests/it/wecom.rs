//! The WeCom channel through the whole gateway: the testkit's fake of WeCom's AI-bot long connection (checked in
//! the testkit by wecom-aibot-sdk-python and by the Python nanobot 0.3.5's own WeCom channel) delivers a message,
//! the agent answers through the scripted mock LLM, and the answer goes back as a finished stream on the
//! message's callback; a stranger gets a pairing code and never reaches the model.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_wecom::FakeWecom;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wecom_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from wecom", MockReply::text("**pong** from nanobot"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeWecom::start("aib-gw-1", "SEKRIT-gw").await?;
    let patch = json!({"channels": {"wecom": {"enabled": true, "botId": "aib-gw-1", "secret": "SEKRIT-gw",
        "allowFrom": ["alice"], "wsUrl": fake.url()}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.wait_subscribed(1, WITHIN).await?;
    let stranger = fake.deliver_text("mallory", "ping from wecom");
    let owner = fake.deliver_text("alice", "ping from wecom");
    let sent = fake.wait_sent(2, WITHIN).await?;
    let to = |frame: &serde_json::Value| {
        let id = frame["headers"]["req_id"].as_str().unwrap_or_default().to_owned();
        sent.iter().filter(|s| s.req_id == id).collect::<Vec<_>>()
    };
    let pairing = to(&stranger);
    assert_eq!(pairing.len(), 1, "{sent:?}");
    assert!(
        pairing[0].content().unwrap_or_default().contains("pairing code"),
        "{sent:?}"
    );
    let answer = to(&owner);
    assert_eq!(answer.len(), 1, "{sent:?}");
    assert_eq!(answer[0].cmd, "aibot_respond_msg");
    assert_eq!(answer[0].content(), Some("**pong** from nanobot"));
    assert_eq!(answer[0].finish(), Some(true));
    assert_eq!(
        mock.completion_requests().len(),
        1,
        "only the owner reached the model"
    );
    let _ = tokio::time::timeout(WITHIN, gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_wecom_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"wecom": {"enabled": true, "secret": "s"}}),
            "channels.wecom.botId",
        ),
        (
            json!({"wecom": {"enabled": true, "botId": "b"}}),
            "channels.wecom.secret",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
