//! Heartbeat: empty file, skip and run paths with MockLlm, and the protected cron job.

use std::collections::BTreeMap;

use nanobot_bus::Bus;
use nanobot_core::AgentLoop;
use nanobot_gateway::{Gateway, GatewayBus, HeartbeatOutcome, HeartbeatService, Route};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{GUARD, config_json, options, sessions, texts};

const TASKS: &str = "# Heartbeat Tasks\n\n## Active Tasks\n- [ ] Check the weather in Paris and tell me\n";

fn service(home: &TempHome, mock: &MockLlm) -> (HeartbeatService, GatewayBus) {
    nanobot_testkit::install_ring();
    let cfg = config_json(home, mock, json!({}));
    let path = home.write_config(&cfg);
    let vars: BTreeMap<String, String> = home.env().into_iter().collect();
    let config = nanobot_config::load_str(&cfg.to_string(), &path, &vars)
        .unwrap()
        .config;
    let env = nanobot_core::Environment::new(home.home(), home.env());
    let provider = nanobot_providers::resolve_provider(&config, "", &env.vars).unwrap();
    let bus = GatewayBus::new(16);
    let agent = AgentLoop::builder_from_config(&config, &env, provider.clone())
        .unwrap()
        .bus(std::sync::Arc::new(bus.clone()))
        .build()
        .unwrap();
    let hb = HeartbeatService::new(agent, provider, "mock-model", home.workspace(), bus.clone());
    (hb, bus)
}

#[tokio::test]
async fn no_tasks_means_no_model_call() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let (hb, _bus) = service(&home, &mock);
    assert_eq!(hb.tick().await.unwrap(), HeartbeatOutcome::NoTasks, "no file");
    home.write_workspace_file(
        "HEARTBEAT.md",
        "# Heartbeat Tasks\n\n<!-- examples\n- do x\n-->\n## Active Tasks\n",
    );
    assert_eq!(hb.tick().await.unwrap(), HeartbeatOutcome::NoTasks);
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn skip_decision_runs_nothing_and_sends_nothing() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("heartbeat", json!({"action": "skip"})));
    let (hb, bus) = service(&home, &mock);
    bus.set_last_route(Route {
        channel: "telegram".into(),
        chat_id: "42".into(),
    });
    assert_eq!(hb.tick().await.unwrap(), HeartbeatOutcome::Skipped);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["tools"][0]["function"]["name"], "heartbeat");
    assert!(
        reqs[0]
            .last_user_text()
            .unwrap()
            .contains("Check the weather in Paris")
    );
    assert_eq!(bus.outbound_len(), 0);
    assert!(!sessions(&home).contains_key("heartbeat"));
}

#[tokio::test]
async fn run_decision_runs_a_turn_and_delivers_to_the_last_active_chat() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "heartbeat",
        json!({"action": "run", "tasks": "Check the weather in Paris"}),
    ));
    mock.push(MockReply::text("Rain in Paris today: take an umbrella."));
    let (hb, bus) = service(&home, &mock);
    bus.set_last_route(Route {
        channel: "telegram".into(),
        chat_id: "42".into(),
    });
    let outcome = hb.tick().await.unwrap();
    let HeartbeatOutcome::Ran {
        tasks,
        response,
        delivered_to,
    } = outcome
    else {
        panic!("expected a run, got {outcome:?}");
    };
    assert_eq!(tasks, "Check the weather in Paris");
    assert_eq!(response, "Rain in Paris today: take an umbrella.");
    assert_eq!(delivered_to.unwrap().chat_id, "42");
    let out = bus.consume_outbound().await.unwrap();
    assert_eq!((out.channel.as_str(), out.chat_id.as_str()), ("telegram", "42"));
    assert_eq!(out.content, "Rain in Paris today: take an umbrella.");
    assert!(
        mock.requests()[1]
            .last_user_text()
            .unwrap()
            .contains("Check the weather in Paris")
    );
    let s = sessions(&home);
    assert_eq!(
        texts(&s["heartbeat"], "assistant"),
        ["Rain in Paris today: take an umbrella."]
    );
}

#[tokio::test]
async fn nothing_to_report_stays_silent() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "heartbeat",
        json!({"action": "run", "tasks": "check"}),
    ));
    mock.push(MockReply::text("HEARTBEAT_OK"));
    let (hb, bus) = service(&home, &mock);
    bus.set_last_route(Route {
        channel: "telegram".into(),
        chat_id: "42".into(),
    });
    let outcome = hb.tick().await.unwrap();
    assert!(
        matches!(
            outcome,
            HeartbeatOutcome::Ran {
                delivered_to: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(bus.outbound_len(), 0);
}

#[tokio::test]
async fn gateway_registers_protected_system_jobs_and_runs_the_heartbeat_job() {
    let home = TempHome::new();
    home.write_workspace_file("HEARTBEAT.md", TASKS);
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("heartbeat", json!({"action": "skip"})));
    let opts = options(
        &home,
        &mock,
        json!({"gateway": {"heartbeat": {"enabled": true, "intervalS": 3600}}}),
    );
    let gw = Gateway::start(opts).await.unwrap();
    let cron = gw.agent().cron().unwrap().clone();
    let jobs = cron.list().unwrap();
    for id in ["dream", "heartbeat"] {
        let job = jobs
            .iter()
            .find(|j| j.id == id)
            .unwrap_or_else(|| panic!("{id} missing: {jobs:?}"));
        assert!(job.is_protected());
    }
    assert!(cron.remove("heartbeat").is_err(), "protected from removal");
    cron.run_now("heartbeat", true).await.unwrap();
    let reqs = tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    assert_eq!(reqs[0].body["tools"][0]["function"]["name"], "heartbeat");
    gw.shutdown().await;
}
