//! Loading files: the fixture, snake_case, migrations, unknown keys, a missing file.

use nanobot_config::{Config, ConfigError, WarningKind, load};

use crate::{env, fixture_path, fixture_value, write_config};

#[test]
fn the_python_fixture_loads_unchanged_without_warnings() {
    let loaded = load(&fixture_path(), &env(&[])).unwrap();
    assert!(loaded.file_found);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let direct: Config = serde_json::from_value(fixture_value()).unwrap();
    assert_eq!(loaded.config, direct);
    assert_eq!(loaded.config.agents.defaults.max_tokens, 8192);
    assert_eq!(loaded.config.tools.exec.timeout, 60);
    assert_eq!(loaded.config.channels.discord.intents, 37377);
    assert_eq!(
        loaded.config.api.api_key.as_ref().map(|k| k.is_empty()),
        Some(true)
    );
}

#[test]
fn snake_case_keys_are_accepted() {
    let (_dir, path) = write_config(
        r#"{
          "agents": {"defaults": {"max_tokens": 1234, "max_tool_iterations": 7, "dream": {"interval_h": 5}}},
          "channels": {"send_tool_hints": false, "telegram": {"allow_from": ["1", 2], "reply_to_message": true}},
          "providers": {"azure_openai": {"api_key": "k", "api_base": "https://a.example", "extra_headers": {"X-A": "1"}}},
          "gateway": {"heartbeat": {"interval_s": 60}},
          "tools": {"restrict_to_workspace": true, "mcp_servers": {"fs": {"command": "npx", "tool_timeout": 9}}}
        }"#,
    );
    let loaded = load(&path, &env(&[])).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = &loaded.config;
    assert_eq!(c.agents.defaults.max_tokens, 1234);
    assert_eq!(c.agents.defaults.max_tool_iterations, 7);
    assert_eq!(c.agents.defaults.dream.interval_h, 5);
    assert!(!c.channels.send_tool_hints);
    assert_eq!(c.channels.telegram.allow_from, ["1", "2"]);
    assert!(c.channels.telegram.reply_to_message);
    let azure = c.providers.get("azureOpenai").unwrap();
    assert_eq!(azure.api_key.as_ref().unwrap().expose(), "k");
    assert_eq!(azure.headers().collect::<Vec<_>>(), [("X-A", "1")]);
    assert_eq!(c.gateway.heartbeat.interval_s, 60);
    assert!(c.tools.restrict_to_workspace);
    assert_eq!(c.tools.mcp_servers["fs"].tool_timeout, 9);
    assert_eq!(
        c.tools.mcp_servers["fs"].enabled_tools,
        ["*"],
        "default kept for missing keys"
    );
}

#[test]
fn old_restrict_to_workspace_is_migrated_and_reported() {
    let (_dir, path) = write_config(r#"{"tools": {"exec": {"restrictToWorkspace": true, "timeout": 5}}}"#);
    let loaded = load(&path, &env(&[])).unwrap();
    assert!(loaded.config.tools.restrict_to_workspace);
    assert_eq!(loaded.config.tools.exec.timeout, 5);
    let w = loaded
        .warnings
        .iter()
        .find(|w| w.kind == WarningKind::Migrated)
        .expect("a migration warning");
    assert!(
        w.message.contains("tools.exec.restrictToWorkspace")
            && w.message.contains("tools.restrictToWorkspace")
    );
    assert!(
        loaded.config.unknown_keys().is_empty(),
        "the old key does not linger as unknown"
    );

    loaded.save().unwrap();
    let saved = crate::read_json(&path);
    assert_eq!(saved["tools"]["restrictToWorkspace"], true);
    assert!(saved["tools"]["exec"].get("restrictToWorkspace").is_none());
}

#[test]
fn an_unknown_top_level_key_is_an_error_naming_it_and_the_file() {
    // As in nanobot 0.3.5 ("Unknown setting."): its root model forbids extra keys.
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"model": "m"}}, "brandNewSection": {}}"#);
    let err = load(&path, &env(&[])).unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnknownSetting { key, .. } if key == "brandNewSection"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("`brandNewSection`"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    // Both spellings 0.3.5 accepts for the presets are settings; a variable naming an unknown top-level key
    // is ignored there, so it is only a warning here.
    let (_dir, path) = write_config(r#"{"model_presets": {}}"#);
    load(&path, &env(&[])).unwrap();
    let loaded = load(&path, &env(&[("NANOBOT_BRANDNEW", "1")])).unwrap();
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::UnknownKey && w.field == "brandnew"),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn unknown_nested_keys_warn_by_name_and_do_not_fail() {
    let (_dir, path) = write_config(
        r#"{
          "agents": {"defaults": {"model": "m", "fancyNewOption": 3}},
          "channels": {"sendProgres": true, "telegram": {"tokn": "x"}, "myPlugin": {"enabled": true}},
          "providers": {"bedrock": {"region": "eu-west-1", "profile": "p", "oddity": 1}},
          "tools": {"mcpServers": {"fs": {"command": "x", "autoApprove": []}}}
        }"#,
    );
    let loaded = load(&path, &env(&[])).unwrap();
    let mut unknown: Vec<&str> = loaded
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::UnknownKey)
        .map(|w| w.field.as_str())
        .collect();
    unknown.sort_unstable();
    assert_eq!(
        unknown,
        [
            "agents.defaults.fancyNewOption",
            "channels.sendProgres",
            "channels.telegram.tokn",
            "providers.bedrock.oddity",
            "tools.mcpServers.fs.autoApprove",
        ]
    );
    let w = loaded
        .warnings
        .iter()
        .find(|w| w.field == "channels.sendProgres")
        .unwrap();
    assert!(
        w.to_string()
            .contains("unknown config key `channels.sendProgres`"),
        "{w}"
    );
    assert_eq!(loaded.config.agents.defaults.model, "m");
    assert_eq!(
        loaded
            .config
            .providers
            .get("bedrock")
            .unwrap()
            .extra_str("region"),
        Some("eu-west-1")
    );
    assert!(
        loaded.config.channels.other.is_enabled("myPlugin"),
        "plugin channel blocks are not unknown"
    );
}

#[test]
fn a_missing_file_gives_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(&dir.path().join("config.json"), &env(&[])).unwrap();
    assert!(!loaded.file_found);
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn budgets_and_prices_load_and_a_typo_or_a_negative_amount_is_refused_by_name() {
    let (_dir, path) = write_config(
        r#"{"agents": {"defaults": {
            "budget": {"perChat": {"daily": {"tokens": 50000}}, "overall": {"monthly": {"cost": 20}}},
            "prices": {"qwen3:8b": {"input": 0, "output": 0}, "gpt-4o": {"input": 2, "output": 8, "cachedInput": 1}}
        }}}"#,
    );
    let loaded = load(&path, &env(&[])).unwrap();
    let d = &loaded.config.agents.defaults;
    assert_eq!(d.budget.per_chat.daily.tokens, Some(50_000));
    assert_eq!(d.budget.overall.monthly.cost, Some(20.0));
    assert!(d.budget.per_person.is_unlimited());
    assert_eq!(d.prices["gpt-4o"].cached_input, Some(1.0));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    // Written back as read; an unset budget is not written at all.
    let saved = serde_json::to_value(&loaded.config).unwrap();
    assert_eq!(
        saved["agents"]["defaults"]["budget"]["perChat"]["daily"]["tokens"],
        50_000
    );
    let plain = serde_json::to_value(Config::default()).unwrap();
    assert!(plain["agents"]["defaults"].get("budget").is_none());
    assert!(plain["agents"]["defaults"].get("prices").is_none());

    for (bad, named) in [
        (r#"{"perUser": {"daily": {"tokens": 1}}}"#, "perUser"),
        (r#"{"perChat": {"weekly": {"tokens": 1}}}"#, "weekly"),
        (r#"{"perChat": {"daily": {"token": 1}}}"#, "token"),
        (r#"{"perChat": {"daily": {"tokens": -1}}}"#, "budget"),
        (
            r#"{"overall": {"daily": {"cost": -0.5}}}"#,
            "agents.defaults.budget.overall.daily.cost",
        ),
    ] {
        let (_dir, path) = write_config(&format!(r#"{{"agents": {{"defaults": {{"budget": {bad}}}}}}}"#));
        let err = load(&path, &env(&[])).unwrap_err().to_string();
        assert!(err.contains(named), "{bad}: {err}");
    }
    let (_dir, path) =
        write_config(r#"{"agents": {"defaults": {"prices": {"m": {"input": -1, "output": 1}}}}}"#);
    let err = load(&path, &env(&[])).unwrap_err().to_string();
    assert!(err.contains("agents.defaults.prices.m.input"), "{err}");
}
