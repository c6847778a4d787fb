//! The personal WeChat channel through the whole gateway: the testkit's fake of the iLink bot API (checked in the
//! testkit by the Python nanobot 0.3.5's own `weixin` channel and login, and by the PyPI client `weixin-ilink`)
//! delivers messages by its long poll, the agent answers through the scripted mock LLM on the sender's context
//! token, and a stranger gets a pairing code and never reaches the model.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_weixin::FakeWeixin;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

const WITHIN: Duration = Duration::from_secs(60);
const ALICE: &str = "alice@im.wechat";
const MALLORY: &str = "mallory@im.wechat";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weixin_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from weixin", MockReply::text("pong from nanobot"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeWeixin::start().await?;
    let token = fake.issue_token(ALICE);
    let patch = json!({"channels": {"weixin": {"enabled": true, "token": token, "baseUrl": fake.base_url(),
        "cdnBaseUrl": fake.cdn_base_url(), "allowFrom": [ALICE]}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.push_text(MALLORY, "ping from weixin");
    let asked = fake.push_text(ALICE, "ping from weixin");
    let sent = fake.wait_sent(2, WITHIN).await?;
    let to = |user: &str| sent.iter().filter(|s| s.to_user_id == user).collect::<Vec<_>>();
    let pairing = to(MALLORY);
    assert_eq!(pairing.len(), 1, "{sent:?}");
    assert!(
        pairing[0].text().unwrap_or_default().contains("pairing code"),
        "{sent:?}"
    );
    let answer = to(ALICE);
    assert_eq!(answer.len(), 1, "{sent:?}");
    assert_eq!(answer[0].text(), Some("pong from nanobot"));
    assert_eq!(
        answer[0].context_token,
        asked["context_token"].as_str().unwrap_or_default(),
        "answered on the message's context token"
    );
    assert_eq!(
        mock.completion_requests().len(),
        1,
        "only the owner reached the model"
    );
    let _ = tokio::time::timeout(WITHIN, gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_weixin_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let err = crate::common::start_error(
        &home,
        &mock,
        json!({"weixin": {"enabled": true, "pollTimeout": "soon"}}),
    )
    .await;
    assert!(err.contains("channels.weixin.pollTimeout"), "{err}");
}
