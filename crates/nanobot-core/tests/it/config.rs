//! `AgentLoop::from_config`: everything built from a `config.json` and an environment map.

use std::collections::HashMap;

use nanobot_core::{AgentLoop, Environment};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

#[tokio::test]
async fn loop_from_config_uses_provider_tools_skills_and_workspace() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("configured hello"));
    home.write_workspace_file("SOUL.md", "You love cats.");
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model", "timezone": "Europe/Berlin", "botName": "Whiskers",
            "disabledSkills": ["tmux"]}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"exec": {"enable": false}, "web": {"enable": false}}
    }))
    .unwrap();
    let env = Environment::new(
        home.home(),
        HashMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
    );
    let agent = AgentLoop::from_config(&config, &env).unwrap();
    assert_eq!(agent.settings().workspace, home.workspace());
    let tools = agent.tools().names();
    assert!(
        tools.contains(&"read_file".to_owned()) && tools.contains(&"cron".to_owned()),
        "{tools:?}"
    );
    assert!(
        !tools.contains(&"exec".to_owned()) && !tools.contains(&"web_fetch".to_owned()),
        "{tools:?}"
    );
    assert!(agent.cron().is_some());

    let answer = agent.process_direct("hi", "cli:direct").await.unwrap();
    assert_eq!(answer, "configured hello");
    let req = mock.last_request().unwrap();
    assert_eq!(req.model(), Some("local-model"));
    let system = req.system_text().unwrap();
    assert!(system.starts_with("# Whiskers"));
    assert!(system.contains("You love cats."));
    assert!(
        system.contains("<skills>") && system.contains("<name>weather</name>"),
        "built-in skills listed"
    );
    assert!(!system.contains("<name>tmux</name>"), "disabled skill hidden");
    assert!(req.last_user_text().unwrap().contains("(Europe/Berlin)"));
    // Sessions live under the data dir, as the Python nanobot keeps them.
    assert!(
        agent
            .sessions()
            .path_for("cli:direct")
            .starts_with(home.nanobot_dir().join("sessions"))
    );
}

#[test]
fn bad_timezone_is_a_clear_error() {
    let home = TempHome::new();
    let config: nanobot_config::Config =
        serde_json::from_value(json!({"agents": {"defaults": {"timezone": "Mars/Olympus"}}})).unwrap();
    let env = Environment::new(home.home(), HashMap::new());
    let err = nanobot_core::AgentSettings::from_config(&config, &env).unwrap_err();
    assert!(err.to_string().contains("agents.defaults.timezone") && err.to_string().contains("Mars/Olympus"));
}
