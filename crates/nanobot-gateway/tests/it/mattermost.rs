//! The Mattermost channel through the whole gateway: the testkit's fake Mattermost server (checked in the testkit
//! by mattermostdriver and by the Python nanobot 0.3.5's own Mattermost channel) delivers a direct message and a
//! channel mention, the agent answers through the scripted mock LLM, and the answers go out as posts (the
//! channel's in a thread under the mention).

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_mattermost::{BOT_USERNAME, FakeMattermost, TEAM_ID};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

fn id(name: &str) -> String {
    format!("{name:0<26}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mattermost_posts_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from a dm", MockReply::text("pong in the dm"));
    mock.when_last_user_contains("ping from the channel", MockReply::text("pong in the thread"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeMattermost::start("gw-token").await?;
    fake.add_user(&id("alice"), "alice", "alice@example.com");
    fake.add_user(&id("eve"), "eve", "eve@example.com");
    fake.add_channel(&id("dmalice"), "D", "");
    fake.add_channel(&id("dmeve"), "D", "");
    fake.add_channel(&id("town"), "O", TEAM_ID);
    let patch = json!({"channels": {"mattermost": {"enabled": true, "serverUrl": fake.url(), "token": "gw-token",
        "teamId": TEAM_ID, "allowFrom": [id("alice")]}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.connected(1).await?;
    fake.post_event(&id("eve"), &id("dmeve"), "ping from a dm", None, &[]);
    fake.post_event(&id("alice"), &id("dmalice"), "ping from a dm", None, &[]);
    let mention = fake.post_event(
        &id("alice"),
        &id("town"),
        &format!("@{BOT_USERNAME} ping from the channel"),
        None,
        &[],
    );
    let created: Vec<_> = fake
        .wait_calls("POST", "/api/v4/posts", 3)
        .await?
        .into_iter()
        .map(|c| c.body)
        .collect();
    let in_chat = |chat: &str| {
        created
            .iter()
            .filter(|b| b["channel_id"] == chat)
            .collect::<Vec<_>>()
    };
    let dm = in_chat(&id("dmalice"));
    assert_eq!(dm.len(), 1, "{created:?}");
    assert_eq!(dm[0]["message"], "pong in the dm");
    let town = in_chat(&id("town"));
    assert_eq!(town.len(), 1, "{created:?}");
    assert_eq!(town[0]["message"], "pong in the thread");
    assert_eq!(
        town[0]["root_id"], mention,
        "answered in a thread under the mention"
    );
    let eve = in_chat(&id("dmeve"));
    assert_eq!(eve.len(), 1, "{created:?}");
    assert!(
        eve[0]["message"].as_str().unwrap().contains("pairing code"),
        "{created:?}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_mattermost_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"mattermost": {"enabled": true, "token": "t"}}),
            "channels.mattermost.serverUrl",
        ),
        (
            json!({"mattermost": {"enabled": true, "serverUrl": "https://chat.example.com"}}),
            "channels.mattermost.token",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
