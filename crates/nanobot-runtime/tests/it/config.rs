//! `build_agent`: everything built from a `config.json` and an environment map.

use std::collections::HashMap;

use nanobot_runtime::Environment;
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
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
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
    let err = nanobot_runtime::agent_settings(&config, &env).unwrap_err();
    assert!(err.to_string().contains("agents.defaults.timezone") && err.to_string().contains("Mars/Olympus"));
}

#[tokio::test]
async fn memory_is_wired_compact_summarises_and_memory_reaches_the_prompt() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}}
    }))
    .unwrap();
    let env = Environment::new(home.home(), HashMap::new());
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
    assert!(agent.tools().contains("memory_search"));

    mock.set_fallback(MockReply::text("ok"));
    for i in 0..6 {
        agent
            .process_direct(&format!("fact {i}: my dog is called Rex"), "cli:mem")
            .await
            .unwrap();
    }
    mock.clear_fallback();
    mock.when(
        |r| {
            r.last_user_text()
                .is_some_and(|t| t.ends_with(nanobot_memory::ARCHIVE_PROMPT))
        },
        MockReply::text("- [permanent] The user's dog is called Rex."),
    );
    let out = agent.process_direct("/compact", "cli:mem").await.unwrap();
    assert!(out.starts_with("Compacted"), "{out}");
    let history = std::fs::read_to_string(home.workspace().join("memory/history.jsonl")).unwrap();
    assert!(history.contains("Rex"), "{history}");
    assert!(
        !home.workspace().join("memory/MEMORY.md").exists()
            || !std::fs::read_to_string(home.workspace().join("memory/MEMORY.md"))
                .unwrap()
                .contains("Rex"),
        "only Dream edits MEMORY.md"
    );
    let session = agent.sessions().session("cli:mem").await.unwrap();
    assert!(session.last_consolidated > 0);

    // Dream (not the archive) moves facts into MEMORY.md; written here as it would.
    std::fs::write(
        home.workspace().join("memory/MEMORY.md"),
        "# Memory\n- The user's dog is called Rex.\n",
    )
    .unwrap();
    mock.clear_rules();
    mock.push(MockReply::text("Rex!"));
    agent
        .process_direct("what's my dog's name?", "cli:mem")
        .await
        .unwrap();
    let req = mock.last_request().unwrap();
    assert!(
        req.system_text()
            .unwrap()
            .contains("The user's dog is called Rex."),
        "MEMORY.md in the system prompt"
    );
}
