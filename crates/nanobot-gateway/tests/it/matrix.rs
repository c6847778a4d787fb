//! The Matrix channel through the whole gateway, on a real homeserver (the testkit's synapse, checked there by
//! matrix-nio and by the Python nanobot 0.3.5's own Matrix channel): the owner writes in a direct chat, the agent
//! answers through the scripted mock LLM in Matrix HTML, a stranger gets a pairing code and never reaches the
//! model, and the password login's session is saved where 0.3.5 keeps it.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::synapse::{self, Synapse};
use nanobot_testkit::{MockLlm, MockReply, TempHome, peers};
use serde_json::json;

use crate::common::options;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    if peers::require("matrix-synapse (.ci/.peers/synapse-venv)", synapse::python()).is_none() {
        return Ok(());
    }
    nanobot_testkit::install_ring();
    let hs = Synapse::shared().await?;
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from matrix", MockReply::text("**pong** from nanobot"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let bot = hs.fresh_user("bot").await?;
    let alice = hs.fresh_user("alice").await?;
    let eve = hs.fresh_user("eve").await?;
    // Alice's direct chat exists before the gateway: the bot joins it at its first sync.
    let room = hs
        .create_room(&alice.access_token, "dm", &[bot.user_id.as_str()], true)
        .await?;
    let patch = json!({"channels": {"matrix": {"enabled": true, "homeserver": hs.url(), "userId": bot.user_id,
        "password": bot.password, "allowFrom": [alice.user_id], "e2eeEnabled": false}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    hs.wait_joined(&alice.access_token, &room, &bot.user_id, WITHIN)
        .await?;
    let session = home.nanobot_dir().join("matrix-store/session.json");
    assert!(session.is_file(), "the session is saved where 0.3.5 keeps it");

    let eve_room = hs
        .create_room(&eve.access_token, "dm", &[bot.user_id.as_str()], true)
        .await?;
    hs.wait_joined(&eve.access_token, &eve_room, &bot.user_id, WITHIN)
        .await?;
    let mut eve_seen = hs.timeline(&eve.access_token).await?;
    let mut alice_seen = hs.timeline(&alice.access_token).await?;
    hs.send_text(&eve.access_token, &eve_room, "ping from matrix")
        .await?;
    hs.send_text(&alice.access_token, &room, "ping from matrix")
        .await?;
    let from_bot =
        |e: &serde_json::Value| e["sender"] == bot.user_id.as_str() && e["type"] == "m.room.message";
    let answer = hs
        .wait_event(&alice.access_token, &mut alice_seen, &room, WITHIN, from_bot)
        .await?;
    assert_eq!(answer["content"]["body"], "**pong** from nanobot");
    assert_eq!(
        answer["content"]["formatted_body"],
        "<p><strong>pong</strong> from nanobot</p>"
    );
    let code = hs
        .wait_event(&eve.access_token, &mut eve_seen, &eve_room, WITHIN, from_bot)
        .await?;
    assert!(
        code["content"]["body"]
            .as_str()
            .unwrap_or_default()
            .contains("pairing code"),
        "{code}"
    );
    let asked: Vec<String> = mock
        .completion_requests()
        .iter()
        .map(|r| r.raw_body.clone())
        .collect();
    assert_eq!(asked.len(), 1, "only the owner's message reached the model");
    let _ = tokio::time::timeout(WITHIN, gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_matrix_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"matrix": {"enabled": true, "password": "pw"}}),
            "channels.matrix.userId",
        ),
        (
            json!({"matrix": {"enabled": true, "userId": "@b:h", "accessToken": "t"}}),
            "channels.matrix.deviceId",
        ),
        (
            json!({"matrix": {"enabled": true, "userId": "@b:h", "password": "pw", "groupPolicy": "all"}}),
            "channels.matrix.groupPolicy",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
