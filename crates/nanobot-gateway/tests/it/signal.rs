//! The Signal channel through the whole gateway: the testkit's fake signal-cli daemon (checked in the testkit by
//! pysignalclijsonrpc and by the Python nanobot 0.3.5's own Signal channel) delivers a direct message, the agent
//! answers through the scripted mock LLM, and the answer goes out through the daemon's JSON-RPC with its styles.

use std::time::Duration;

use nanobot_gateway::Gateway;
use nanobot_testkit::fake_signal::{FakeSignal, SignalUser};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_messages_are_answered_from_the_gateway_config() -> anyhow::Result<()> {
    nanobot_testkit::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("ping from signal", MockReply::text("**pong** from nanobot"));
    mock.set_fallback(MockReply::text("UNEXPECTED"));
    let fake = FakeSignal::start("+15550001000").await?;
    let alice = SignalUser::new("alice", "+15550002000");
    let eve = SignalUser::new("eve", "+15550003000");
    fake.add_contact(&alice);
    fake.add_contact(&eve);
    let patch = json!({"channels": {"signal": {"enabled": true, "phoneNumber": "+15550001000",
        "daemonHost": fake.host(), "daemonPort": fake.port(), "attachmentsDir": fake.attachments_dir(),
        "dm": {"allowFrom": ["+15550002000"]}}}});
    let gw = Gateway::start(options(&home, &mock, patch)).await?;
    fake.wait_listeners(1).await?;
    fake.deliver_direct(&eve, "ping from signal");
    fake.deliver_direct(&alice, "ping from signal");
    let sent = fake.wait_sent(2, Duration::from_secs(60)).await?;
    let to = |u: &SignalUser| {
        sent.iter()
            .filter(|s| s.recipients == [u.id()])
            .collect::<Vec<_>>()
    };
    let eve_got = to(&eve);
    assert_eq!(eve_got.len(), 1, "{sent:?}");
    assert!(eve_got[0].message.contains("pairing code"), "{sent:?}");
    let alice_got = to(&alice);
    assert_eq!(alice_got.len(), 1, "{sent:?}");
    assert_eq!(alice_got[0].message, "pong from nanobot");
    assert_eq!(alice_got[0].text_styles, ["0:4:BOLD"]);
    let _ = tokio::time::timeout(Duration::from_secs(60), gw.shutdown()).await;
    Ok(())
}

#[tokio::test]
async fn an_enabled_signal_block_is_validated_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    for (block, key) in [
        (
            json!({"signal": {"enabled": true}}),
            "channels.signal.phoneNumber",
        ),
        (
            json!({"signal": {"enabled": true, "phoneNumber": "+1", "dm": {"policy": "friends"}}}),
            "channels.signal.dm.policy",
        ),
    ] {
        let err = crate::common::start_error(&home, &mock, block).await;
        assert!(err.contains(key), "{key}: {err}");
    }
}
