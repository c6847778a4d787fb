//! Model presets (issue 18): `agents.defaults.modelPreset` picks the model the agent starts with, and `/model`
//! shows and switches one session's preset, as 0.3.5 does.

use std::collections::HashMap;

use nanobot_runtime::Environment;
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

#[tokio::test]
async fn the_active_preset_runs_and_model_switches_one_session() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "base-model", "provider": "custom", "modelPreset": "fast"}},
        "modelPresets": {
            "fast": {"model": "fast-model", "provider": "custom", "maxTokens": 1000},
            "deep": {"model": "deep-model", "provider": "custom", "context_window_tokens": 50000,
                "temperature": 0.7}
        },
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"exec": {"enable": false}, "web": {"enable": false}}
    }))
    .unwrap();
    config.validate().unwrap();
    let env = Environment::new(home.home(), HashMap::new());
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();

    agent.process_direct("hi", "telegram:1").await.unwrap();
    let req = mock.last_request().unwrap();
    assert_eq!(req.model(), Some("fast-model"), "agents.defaults.modelPreset");
    assert_eq!(req.body["max_tokens"], 1000);

    let status = agent.process_direct("/model", "telegram:1").await.unwrap();
    assert!(status.contains("Current model: `fast-model`"), "{status}");
    assert!(
        status.contains("Available presets: `default`, `deep`, `fast`"),
        "{status}"
    );

    let switched = agent.process_direct("/model deep", "telegram:1").await.unwrap();
    assert!(
        switched.starts_with("Switched model preset to `deep`."),
        "{switched}"
    );
    assert!(switched.contains("- Context window: 50000"), "{switched}");
    agent.process_direct("again", "telegram:1").await.unwrap();
    let req = mock.last_request().unwrap();
    assert_eq!(req.model(), Some("deep-model"));
    assert_eq!(req.body["temperature"], 0.7);
    let meta = agent.sessions().metadata("telegram:1").await.unwrap();
    assert_eq!(meta["_nanobot_model_preset"], "deep", "0.3.5's key");

    // Another session keeps the default.
    agent.process_direct("hello", "telegram:2").await.unwrap();
    assert_eq!(mock.last_request().unwrap().model(), Some("fast-model"));

    let refused = agent.process_direct("/model nope", "telegram:1").await.unwrap();
    assert!(refused.starts_with("Could not switch model preset:"), "{refused}");
    assert!(refused.contains("`default`, `deep`, `fast`"), "{refused}");

    let back = agent
        .process_direct("/model default", "telegram:1")
        .await
        .unwrap();
    assert!(back.contains("Model: `fast-model`"), "{back}");
    agent.process_direct("and now", "telegram:1").await.unwrap();
    assert_eq!(mock.last_request().unwrap().model(), Some("fast-model"));
}

#[test]
fn a_preset_that_is_not_there_is_a_config_error_naming_it() {
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"modelPreset": "missing"}},
        "modelPresets": {"fast": {"model": "m"}}
    }))
    .unwrap();
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("agents.defaults.modelPreset") && err.contains("missing"),
        "{err}"
    );
}
