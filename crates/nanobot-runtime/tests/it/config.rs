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
    assert!(
        system.starts_with("You are Whiskers, a helpful AI assistant."),
        "{system}"
    );
    assert!(system.contains("You love cats."));
    assert!(
        system.contains("### Built-in skills (") && system.contains("- **weather** — "),
        "built-in skills listed"
    );
    assert!(!system.contains("- **tmux** — "), "disabled skill hidden");
    // The configured zone: the day in the system prompt's Runtime section (the message itself is as typed).
    assert!(system.contains("time zone Europe/Berlin."), "{system}");
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

/// Issue 41: a workspace that would put config.json (the keys) or another chat's sessions in the tools' reach is
/// refused at start, naming the key and the fix; the default layout and a workspace containing the data
/// directory are fine.
#[test]
fn a_workspace_that_would_expose_the_data_directory_is_refused() {
    let home = TempHome::new();
    let data = home.nanobot_dir();
    std::fs::create_dir_all(data.join("sessions")).unwrap();
    std::os::unix::fs::symlink(&data, home.home().join("link-to-data")).unwrap();
    let env = Environment::new(home.home(), HashMap::new());
    let settings = |ws: &str| {
        let config: nanobot_config::Config =
            serde_json::from_value(json!({"agents": {"defaults": {"workspace": ws}}})).unwrap();
        nanobot_runtime::agent_settings(&config, &env)
    };
    for ws in [
        "~/.nanobot",
        "~/.nanobot/",
        "~/.nanobot/workspace/..",
        "~/link-to-data",
        "~/.nanobot/sessions/x",
    ] {
        let err = settings(ws).unwrap_err().to_string();
        assert!(err.contains("agents.defaults.workspace"), "{ws}: {err}");
        assert!(err.contains(".nanobot/workspace (the default)"), "{ws}: {err}");
    }
    for ws in [
        "",
        "~/.nanobot/workspace",
        "~/.nanobot/my-notes",
        "~",
        "~/elsewhere",
    ] {
        assert!(settings(ws).is_ok(), "{ws}: {:?}", settings(ws).err());
    }
}

#[tokio::test]
async fn memory_is_wired_compact_summarises_and_memory_reaches_the_prompt() {
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model", "timezone": "UTC"}},
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
    // The archive's model call is in the usage ledger, as the unattended `memory` run.
    let ledger = nanobot_usage::UsageLedger::new(&home.nanobot_dir(), "UTC".parse().unwrap());
    let (memory, _) = ledger
        .totals(&nanobot_usage::Scope::Chat("system:memory".into()))
        .unwrap();
    assert_eq!(memory.calls, 1, "one archive call");
    let (chat, _) = ledger
        .totals(&nanobot_usage::Scope::Chat("cli:mem".into()))
        .unwrap();
    assert_eq!(chat.calls, 6, "the six turns");

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

#[test]
fn python_max_concurrent_requests_bounds_the_turns_run_at_once() {
    let home = TempHome::new();
    let config = nanobot_config::Config::default();
    let settings = |value: Option<&str>| {
        let mut vars = HashMap::new();
        if let Some(v) = value {
            vars.insert("NANOBOT_MAX_CONCURRENT_REQUESTS".to_owned(), v.to_owned());
        }
        nanobot_runtime::agent_settings(&config, &Environment::new(home.home(), vars))
            .unwrap()
            .max_concurrent_sessions
    };
    let default = settings(None);
    assert_eq!(settings(Some("2")), 2);
    assert_eq!(settings(Some(" 1 ")), 1);
    // 0.3.5: unset or ≤ 0 means no limit of its own; here the default bound stays. Nonsense is ignored.
    assert_eq!(settings(Some("0")), default);
    assert_eq!(settings(Some("-3")), default);
    assert_eq!(settings(Some("many")), default);
}

#[tokio::test]
async fn history_over_the_budget_is_archived_before_the_request_leaves_it_out() {
    // A session another process left over its budget (or a one-shot run): the turn archives the old part
    // first, then asks the model without it; nothing is left out of the request unsaved.
    nanobot_providers::install_ring();
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let config: nanobot_config::Config = serde_json::from_value(json!({
        "agents": {"defaults": {"model": "local-model", "contextWindowTokens": 10000, "maxTokens": 1000}},
        "providers": {"custom": {"apiBase": mock.openai_base_url()}},
        "tools": {"web": {"enable": false}, "exec": {"enable": false}}
    }))
    .unwrap();
    let env = Environment::new(home.home(), HashMap::new());
    let agent = nanobot_runtime::build_agent(&config, &env).unwrap();
    let filler = "lorem ipsum ".repeat(100);
    let mut old = Vec::new();
    for i in 0..8 {
        old.push(nanobot_sessions::SessionMessage::new(
            "user",
            format!("old question {i}: {filler}"),
        ));
        old.push(nanobot_sessions::SessionMessage::new(
            "assistant",
            format!("old answer {i}"),
        ));
    }
    agent.sessions().append("cli:big", old).await.unwrap();

    mock.when(
        |r| {
            r.last_user_text()
                .is_some_and(|t| t.ends_with(nanobot_memory::ARCHIVE_PROMPT))
        },
        MockReply::text("- [ephemeral] The user asked eight old questions."),
    );
    mock.set_fallback(MockReply::text("fresh answer"));
    let out = agent.process_direct("new question", "cli:big").await.unwrap();
    assert_eq!(out, "fresh answer");

    let requests = mock.completion_requests();
    let archive = requests
        .iter()
        .position(|r| {
            r.last_user_text()
                .is_some_and(|t| t.ends_with(nanobot_memory::ARCHIVE_PROMPT))
        })
        .expect("an archive request");
    let turn = requests
        .iter()
        .position(|r| r.last_user_text().is_some_and(|t| t.contains("new question")))
        .expect("the turn's request");
    assert!(archive < turn, "archived before the turn's request");
    assert!(
        requests[archive]
            .last_user_text()
            .unwrap()
            .contains("old question 0"),
        "the oldest turn is in the archive"
    );
    assert!(
        !requests[turn].messages().iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("old question 0"))),
        "the archived turn is not replayed"
    );
    let history = std::fs::read_to_string(home.workspace().join("memory/history.jsonl")).unwrap();
    assert!(history.contains("eight old questions"), "{history}");
    assert!(
        agent
            .sessions()
            .session("cli:big")
            .await
            .unwrap()
            .last_consolidated
            > 0
    );
}

#[test]
fn a_model_on_a_local_server_gets_lower_caps_unless_the_config_sets_them() {
    let home = TempHome::new();
    let env = Environment::new(home.home(), HashMap::new());
    let settings = |v: serde_json::Value| {
        let config: nanobot_config::Config = serde_json::from_value(v).unwrap();
        nanobot_runtime::agent_settings(&config, &env).unwrap()
    };
    let local = settings(json!({
        "agents": {"defaults": {"model": "qwen", "provider": "custom"}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:8080/v1"}}
    }));
    assert_eq!(
        local.max_tool_iterations,
        nanobot_runtime::LOCAL_MAX_TOOL_ITERATIONS
    );
    assert_eq!(local.turn_timeout, nanobot_runtime::LOCAL_TURN_TIMEOUT);
    assert_eq!(local.max_tokens, nanobot_runtime::LOCAL_MAX_TOKENS);
    // On a small window, a quarter of it.
    let small = settings(json!({
        "agents": {"defaults": {"model": "qwen", "provider": "custom", "contextWindowTokens": 4096}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:8080/v1"}}
    }));
    assert_eq!(small.max_tokens, 1024);
    let ollama = settings(json!({"agents": {"defaults": {"model": "ollama/llama3.2"}}}));
    assert_eq!(
        ollama.max_tool_iterations,
        nanobot_runtime::LOCAL_MAX_TOOL_ITERATIONS
    );

    // Set by the user: kept, even when it equals nothing special.
    let chosen = settings(json!({
        "agents": {"defaults": {"model": "qwen", "provider": "custom", "maxToolIterations": 80,
                                "timeouts": {"turn": 7200}}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:8080/v1"}}
    }));
    assert_eq!(chosen.max_tool_iterations, 80);
    let chosen_tokens = settings(json!({
        "agents": {"defaults": {"model": "qwen", "provider": "custom", "maxTokens": 6000}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:8080/v1"}}
    }));
    assert_eq!(chosen_tokens.max_tokens, 6000);
    assert_eq!(chosen.turn_timeout, std::time::Duration::from_secs(7200));

    // A cloud model keeps the defaults.
    let cloud = settings(json!({
        "agents": {"defaults": {"model": "openai/gpt-4o"}},
        "providers": {"openai": {"apiKey": "sk-test"}}
    }));
    assert_eq!(cloud.max_tool_iterations, 200);
    assert_eq!(cloud.max_tokens, 8192);
    assert_eq!(cloud.turn_timeout, std::time::Duration::from_secs(3600));
}

#[test]
fn the_approval_keys_reach_the_agent_from_either_place_and_are_not_written_when_default() {
    let home = TempHome::new();
    let env = Environment::new(home.home(), HashMap::new());
    let want = nanobot_core::ApprovalSettings::new(
        nanobot_core::ApprovalPolicy::Risky,
        std::time::Duration::from_secs(45),
    )
    .with_approvers(["telegram:7".to_owned()]);
    let path = home.home().join("config.json");
    for text in [
        r#"{"tools": {"approval": {"mode": "risky", "timeoutS": 45, "approvers": ["telegram:7"]}}}"#,
        // Where older nanobot-rs files have them: moved when read, and written in the new place.
        r#"{"tools": {"exec": {"approval": "Risky", "approvalTimeout": 45, "approvers": ["telegram:7"]}}}"#,
    ] {
        let loaded = nanobot_config::load_str(text, &path, &nanobot_util::EnvMap::new()).unwrap();
        let s = nanobot_runtime::agent_settings(&loaded.config, &env).unwrap();
        assert_eq!(s.approval, want, "{text}");
        let saved = loaded.to_file_value().unwrap();
        assert_eq!(saved["tools"]["approval"]["mode"], "risky", "{saved}");
        assert!(saved["tools"]["exec"].get("approval").is_none(), "{saved}");
    }

    // Defaults: off, and nothing written that the Python nanobot would not write.
    let plain = nanobot_config::Config::default();
    let s = nanobot_runtime::agent_settings(&plain, &env).unwrap();
    assert_eq!(s.approval.policy, nanobot_core::ApprovalPolicy::Off);
    let saved = serde_json::to_value(&plain).unwrap();
    assert!(saved["tools"].get("approval").is_none(), "{saved}");
    assert!(saved["tools"]["exec"].get("approval").is_none(), "{saved}");
}
