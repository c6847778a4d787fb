//! Local triggers end to end: `/trigger` in a chat, a delivery queued as `nanobot trigger` queues it, the runtime's
//! queue runs it as a turn in that chat's session, and the answer goes to the chat.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nanobot_bus::{Bus, InProcessBus, InboundMessage, OutboundMessage};
use nanobot_runtime::{Environment, Runtime, RuntimeOptions};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

const GUARD: Duration = Duration::from_secs(60);

fn config(mock: &MockLlm) -> nanobot_config::Config {
    serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}, "exec": {"enable": false}},
        "gateway": {"heartbeat": {"enabled": false}}
    }))
    .unwrap()
}

async fn next_out(bus: &InProcessBus) -> OutboundMessage {
    tokio::time::timeout(GUARD, bus.consume_outbound())
        .await
        .expect("an outbound message within the guard")
        .expect("the bus is open")
}

#[tokio::test]
async fn a_trigger_made_in_a_chat_answers_its_deliveries_there() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config = config(&mock);
    let (agent, bus, mut rt) =
        crate::start_in_process(&home, &config, RuntimeOptions::default().with_cron(true));
    let env = Environment::new(home.home(), HashMap::new());

    let mut ask = InboundMessage::new("telegram", "7", "42", "/trigger nightly build");
    ask.metadata.insert("message_thread_id".into(), json!(5));
    bus.publish_inbound(ask).await.unwrap();
    let created = next_out(&bus).await;
    assert_eq!(
        (created.channel.as_str(), created.chat_id.as_str()),
        ("telegram", "42")
    );
    let id = created
        .content
        .lines()
        .find_map(|l| l.strip_prefix("ID: "))
        .unwrap_or_else(|| panic!("no id in {:?}", created.content))
        .to_owned();
    assert!(
        created
            .content
            .contains(&format!("nanobot trigger {id} \"message\"")),
        "{}",
        created.content
    );

    // What `nanobot trigger <id> "…"` does: queue a delivery in the data directory.
    let store = nanobot_cron::TriggerStore::new(home.workspace(), env.paths().data_dir().join("triggers"));
    mock.push(MockReply::text("The nightly build failed at step 3."));
    store.enqueue(&id, "build #12 failed").unwrap();
    let answer = next_out(&bus).await;
    assert_eq!(
        (
            answer.channel.as_str(),
            answer.chat_id.as_str(),
            answer.content.as_str()
        ),
        ("telegram", "42", "The nightly build failed at step 3.")
    );
    assert_eq!(
        answer.metadata["message_thread_id"], 5,
        "the answer stays in the chat's thread"
    );
    let asked = mock.last_request().unwrap().last_user_text().unwrap();
    assert!(
        asked.contains("Local trigger received: nightly build") && asked.contains("build #12 failed"),
        "{asked}"
    );
    // It ran in the chat's own session.
    let session = agent.sessions().session("telegram:42").await.unwrap();
    assert!(
        session
            .messages
            .iter()
            .any(|m| m.content_text().is_some_and(|t| t.contains("build #12 failed"))),
        "the delivery is in the chat's session"
    );
    // The answer is published before the queue records the run (as 0.3.5 does: a failed publish is recorded as
    // an error); a graceful stop waits for the running delivery to settle, so the outcome is recorded by then.
    rt.stop_accepting(tokio::time::Instant::now() + GUARD).await;
    assert!(
        rt.drain(tokio::time::Instant::now() + GUARD).await,
        "the delivery settles within the guard"
    );
    let recorded = store.get(&id).unwrap().unwrap();
    assert_eq!(recorded.last_status.as_deref(), Some("ok"));
    assert_eq!(recorded.run_history.len(), 1, "{:?}", recorded.run_history);
    assert_eq!(
        (store.recover(), store.claim().len()),
        (0, 0),
        "the delivery was settled, not left to run again on the next start"
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn the_cli_channel_cannot_make_triggers_and_an_empty_name_gets_the_usage() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let env = Environment::new(home.home(), HashMap::new());
    let config = config(&mock);
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
    let reply = agent.process_direct("/trigger x", "cli:direct").await.unwrap();
    assert!(reply.contains("use /trigger there"), "{reply}");
    let bus = Arc::new(InProcessBus::new(16));
    let mut rt = Runtime::start(agent.clone(), bus.clone(), &config, RuntimeOptions::default()).unwrap();
    bus.publish_inbound(InboundMessage::new("slack", "U1", "C1", "/trigger"))
        .await
        .unwrap();
    assert!(next_out(&bus).await.content.starts_with("Usage: /trigger <name>"));
    assert_eq!(mock.request_count(), 0, "commands never reach the model");
    rt.stop_accepting(tokio::time::Instant::now() + GUARD).await;
    rt.shutdown().await;
}

/// A cron job another program put in the shared `jobs.json` (as the Python nanobot does) is held, not run, and
/// its chat is told why and how to confirm it, once; the job stays in the store as its owner left it.
#[tokio::test]
async fn a_held_cron_job_tells_its_chat_and_is_left_as_it_was() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config = config(&mock);
    // A ledger that trusts nothing: the job below was not made through nanobot-rs.
    std::fs::create_dir_all(home.nanobot_dir().join("cron")).unwrap();
    std::fs::write(home.nanobot_dir().join("cron/trusted.json"), "[]").unwrap();
    let job = json!({
        "id": "py0001", "name": "water", "enabled": true,
        "schedule": {"kind": "every", "atMs": null, "everyMs": 3_600_000, "expr": null, "tz": null},
        "payload": {"kind": "agent_turn", "message": "drink water", "deliver": true, "channel": "telegram",
            "to": "42", "channelMeta": {}, "sessionKey": null, "originChannel": null, "originChatId": null,
            "originMetadata": {}},
        "state": {"nextRunAtMs": 1_000, "lastRunAtMs": null, "lastStatus": null, "lastError": null,
            "runHistory": []},
        "createdAtMs": 1_000, "updatedAtMs": 1_000, "deleteAfterRun": false
    });
    let store = home.workspace().join("cron/jobs.json");
    home.write_workspace_file(
        "cron/jobs.json",
        serde_json::to_string_pretty(&json!({"version": 1, "jobs": [job]})).unwrap(),
    );
    let stored = |store: &std::path::Path| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(store).unwrap()).unwrap();
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == "py0001")
            .cloned()
            .unwrap()
    };
    let (_agent, bus, mut rt) =
        crate::start_in_process(&home, &config, RuntimeOptions::default().with_cron(true));
    let told = next_out(&bus).await;
    assert_eq!((told.channel.as_str(), told.chat_id.as_str()), ("telegram", "42"));
    assert!(
        told.content.contains("\"water\"") && told.content.contains("nanobot cron enable py0001"),
        "{}",
        told.content
    );
    rt.stop_accepting(tokio::time::Instant::now() + GUARD).await;
    assert!(rt.drain(tokio::time::Instant::now() + GUARD).await);
    rt.shutdown().await;
    assert_eq!(mock.request_count(), 0, "the held job never reached the model");
    assert_eq!(bus.outbound_len(), 0, "told once");
    let after = stored(&store);
    assert_eq!(after["enabled"], true);
    assert_eq!(
        after["state"], job["state"],
        "no run recorded, the plan unchanged"
    );
}
