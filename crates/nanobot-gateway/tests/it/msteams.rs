//! The Microsoft Teams channel through the whole gateway: the testkit's fake Microsoft services (checked in the
//! testkit by Microsoft's Bot Framework SDK and by the Python nanobot 0.3.5's own Teams channel) deliver
//! messages to the channel's webhook with the Bot Framework's tokens, the agent answers through the scripted mock
//! LLM, and the answers go out through the fake Bot Connector; the conversation references land in the
//! workspace's `state/` as 0.3.5 keeps them.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_msteams::{APP_ID, APP_PASSWORD, FakeTeams, TENANT_ID, TeamsUser};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from teams", MockReply::text("pong from nanobot"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await?;
    let alice = TeamsUser::new("alice");
    let eve = TeamsUser::new("eve");
    let patch = json!({"channels": {"msteams": {"enabled": true, "appId": APP_ID, "appPassword": APP_PASSWORD,
        "tenantId": TENANT_ID, "host": "127.0.0.1", "port": 0, "allowFrom": [alice.aad_object_id],
        "trustedServiceUrlHosts": ["127.0.0.1"], "openIdMetadata": fake.openid_config_url(),
        "loginEndpoint": fake.base_url()}}});
    let mut opts = options(&home, &mock, patch);
    opts.env
        .vars
        .insert("SSL_CERT_FILE", fake.ca_file().display().to_string());
    let gw = Gateway::start(opts).await?;
    let addr = gw
        .channel_addr("msteams")
        .await
        .expect("the Teams webhook listens");
    assert!(
        gw.channel_addr("websocket").await.is_none(),
        "only webhook channels have an address"
    );
    let webhook = format!("http://{addr}/api/messages");
    let stranger = fake.message(
        &eve,
        &eve.personal_conversation_id(),
        "personal",
        "ping from teams",
    );
    assert_eq!(
        fake.deliver(&webhook, &stranger, Some(&fake.valid_token()))
            .await?,
        200
    );
    let forged = fake.message(
        &alice,
        &alice.personal_conversation_id(),
        "personal",
        "ping from teams",
    );
    assert_eq!(
        fake.deliver(&webhook, &forged, Some("forged.token.value"))
            .await?,
        401
    );
    let owner = fake.message(
        &alice,
        &alice.personal_conversation_id(),
        "personal",
        "<at>nanobot</at> ping from teams",
    );
    assert_eq!(
        fake.deliver(&webhook, &owner, Some(&fake.valid_token())).await?,
        200
    );
    let sent = fake.wait_sent(2, Duration::from_secs(60)).await?;
    let to = |user: &TeamsUser| {
        sent.iter()
            .filter(|s| s.conversation_id == user.personal_conversation_id())
            .collect::<Vec<_>>()
    };
    let eve_got = to(&eve);
    assert_eq!(eve_got.len(), 1, "{sent:?}");
    assert!(
        eve_got[0].body["text"].as_str().unwrap().contains("pairing code"),
        "{sent:?}"
    );
    let alice_got = to(&alice);
    assert_eq!(alice_got.len(), 1, "{sent:?}");
    assert_eq!(alice_got[0].body["text"], "pong from nanobot");
    assert_eq!(alice_got[0].body["replyToId"], owner["id"]);
    let refs = home.workspace().join("state").join("msteams_conversations.json");
    let refs: serde_json::Value = serde_json::from_slice(&std::fs::read(refs)?)?;
    assert_eq!(
        refs[alice.personal_conversation_id()]["service_url"],
        fake.service_url()
    );
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_msteams_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"msteams": {"enabled": true, "appPassword": "pw"}}),
            "channels.msteams.appId",
        ),
        (
            json!({"msteams": {"enabled": true, "appId": "app"}}),
            "channels.msteams.appPassword",
        ),
        (
            json!({"msteams": {"enabled": true, "appId": "app", "appPassword": "pw", "path": "messages"}}),
            "channels.msteams.path",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
