//! `NANOBOT_…__…` overrides and `${VAR}` references, with the environment passed as a map.

use nanobot_config::{ConfigError, WarningKind, load};

use crate::{env, fixture_path, read_json, write_config};

#[test]
fn the_file_wins_over_env_as_in_0_3_5() {
    // An onboarded file (0.3.5 writes every key) leaves nothing for the environment to fill: in 0.3.5 the
    // values a file passes to pydantic-settings win over NANOBOT_ variables. Each one is reported.
    let vars = [
        ("NANOBOT_AGENTS__DEFAULTS__MODEL", "openai/gpt-4o"),
        ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "4096"),
        ("NANOBOT_AGENTS__DEFAULTS__DREAM__INTERVAL_H", "6"),
        ("NANOBOT_CHANNELS__TELEGRAM__ALLOW_FROM", r#"["42","43"]"#),
        ("NANOBOT_CHANNELS__TELEGRAM__ENABLED", "true"),
        ("NANOBOT_PROVIDERS__AZURE_OPENAI__API_KEY", "12345"),
        ("NANOBOT_GATEWAY__PORT", "9000"),
    ];
    let mut all = vars.to_vec();
    all.extend([("NANOBOT_LOG", "debug"), ("PATH", "/usr/bin")]);
    let loaded = load(&fixture_path(), &env(&all)).unwrap();
    let from_file = load(&fixture_path(), &env(&[])).unwrap();
    assert_eq!(loaded.config, from_file.config, "the file's values are kept");
    let c = &loaded.config;
    assert_eq!(c.agents.defaults.model, "anthropic/claude-opus-4-5");
    assert_eq!(c.gateway.port, 18790);
    assert!(loaded.env_overrides().is_empty());
    let shadowed: Vec<&str> = loaded
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::ShadowedEnvVar)
        .map(|w| w.field.as_str())
        .collect();
    let mut expected: Vec<&str> = vars.iter().map(|(k, _)| *k).collect();
    expected.sort_unstable();
    assert_eq!(shadowed, expected);
    let model = loaded
        .warnings
        .iter()
        .find(|w| w.field == "NANOBOT_AGENTS__DEFAULTS__MODEL")
        .unwrap();
    assert!(
        model.message.contains("agents.defaults.model") && model.message.contains("file wins"),
        "{}",
        model.message
    );
    assert_eq!(loaded.warnings.len(), vars.len(), "{:?}", loaded.warnings);
}

#[test]
fn env_fills_nested_keys_the_file_leaves_out_typed_by_key() {
    // The run of 0.3.5 this mirrors: file `model: file-model`, env MODEL=env-model and MAX_TOKENS=1234 →
    // file-model and 1234.
    let (_dir, path) = write_config(
        r#"{"agents": {"defaults": {"model": "file-model"}}, "channels": {"telegram": {"token": "t"}}}"#,
    );
    let loaded = load(
        &path,
        &env(&[
            ("NANOBOT_AGENTS__DEFAULTS__MODEL", "env-model"),
            ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234"),
            ("NANOBOT_AGENTS__DEFAULTS__DREAM__INTERVAL_H", "6"),
            ("NANOBOT_CHANNELS__TELEGRAM__ALLOW_FROM", r#"["42","43"]"#),
            ("NANOBOT_CHANNELS__TELEGRAM__ENABLED", "true"),
            ("NANOBOT_PROVIDERS__AZURE_OPENAI__API_KEY", "12345"),
            ("NANOBOT_GATEWAY__PORT", "9000"),
        ]),
    )
    .unwrap();
    let c = &loaded.config;
    assert_eq!(c.agents.defaults.model, "file-model");
    assert_eq!(c.agents.defaults.max_tokens, 1234);
    assert_eq!(c.agents.defaults.dream.interval_h, 6);
    assert_eq!(c.channels.telegram.allow_from, ["42", "43"]);
    assert!(c.channels.telegram.enabled);
    assert_eq!(c.channels.telegram.token.expose(), "t");
    assert_eq!(
        c.providers
            .get("azureOpenai")
            .unwrap()
            .api_key
            .as_ref()
            .unwrap()
            .expose(),
        "12345",
        "an all-digit key stays a string: typed by its key"
    );
    assert_eq!(c.gateway.port, 9000);
    assert!(loaded.env_overrides().contains(&(
        "agents.defaults.maxTokens".to_owned(),
        "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS".to_owned()
    )));
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert_eq!(loaded.warnings[0].kind, WarningKind::ShadowedEnvVar);
}

#[test]
fn env_fills_keys_the_file_leaves_out_and_adds_providers() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"temperature": 0.5}}}"#);
    let loaded = load(
        &path,
        &env(&[
            ("NANOBOT_PROVIDERS__MY_LLM__API_KEY", "sk-x"),
            ("NANOBOT_PROVIDERS__MY_LLM__API_BASE", "http://127.0.0.1:1/v1"),
            ("NANOBOT_TOOLS__MCP_SERVERS__FS__COMMAND", "npx"),
        ]),
    )
    .unwrap();
    let c = &loaded.config;
    assert_eq!(c.agents.defaults.temperature, 0.5, "the file's value is kept");
    let p = c.providers.get("my_llm").unwrap();
    assert_eq!(p.api_base.as_deref(), Some("http://127.0.0.1:1/v1"));
    assert_eq!(c.providers.first_with_key().map(|(n, _)| n), Some("myLlm"));
    assert_eq!(c.tools.mcp_servers["fs"].command, "npx");
}

#[test]
fn object_variables_meet_single_keys_and_the_file_in_any_spelling_and_are_not_saved() {
    let text = r#"{"channels": {"telegram": {"token": "file-token"}}}"#;
    let (_dir, path) = write_config(text);
    let loaded = load(
        &path,
        &env(&[
            // One block from two variables: a JSON object in snake_case and a single key.
            (
                "NANOBOT_PROVIDERS__MY_LLM",
                r#"{"api_base": "http://127.0.0.1:1/v1"}"#,
            ),
            ("NANOBOT_PROVIDERS__MY_LLM__API_KEY", "sk-x"),
            // An object over a block the file sets in part: it fills only what the file leaves out.
            (
                "NANOBOT_CHANNELS__TELEGRAM",
                r#"{"enabled": true, "token": "env-token", "allow_from": ["7"]}"#,
            ),
        ]),
    )
    .unwrap();
    let c = &loaded.config;
    let p = c.providers.get("myLlm").unwrap();
    assert_eq!(p.api_base.as_deref(), Some("http://127.0.0.1:1/v1"));
    assert_eq!(c.providers.first_with_key().map(|(n, _)| n), Some("myLlm"));
    let telegram = serde_json::to_value(&c.channels).unwrap()["telegram"].clone();
    assert_eq!(telegram["enabled"], true);
    assert_eq!(telegram["token"], "file-token", "the file wins");
    assert_eq!(telegram["allowFrom"], serde_json::json!(["7"]));
    loaded.save().unwrap();
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(!saved.contains("sk-x") && !saved.contains("myLlm"), "{saved}");
    assert!(
        !saved.contains("\"7\""),
        "the environment's list is not saved: {saved}"
    );
    assert_eq!(read_json(&path)["channels"]["telegram"]["token"], "file-token");
}

#[test]
fn env_overrides_are_not_written_back_on_save() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"model": "file-model"}}}"#);
    let loaded = load(
        &path,
        &env(&[
            ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234"),
            ("NANOBOT_PROVIDERS__OPENAI__API_KEY", "sk-env"),
        ]),
    )
    .unwrap();
    assert_eq!(loaded.config.agents.defaults.max_tokens, 1234);
    loaded.save().unwrap();
    let saved = read_json(&path);
    assert_eq!(saved["agents"]["defaults"]["model"], "file-model");
    assert_eq!(
        saved["agents"]["defaults"]["maxTokens"],
        serde_json::json!(8192),
        "the default is written, not the environment's value"
    );
    assert!(
        saved["providers"].get("openai").is_none(),
        "a provider that exists only in the env is not saved"
    );
    assert!(!std::fs::read_to_string(&path).unwrap().contains("sk-env"));
}

#[test]
fn a_changed_value_is_saved_even_if_env_had_set_it() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"model": "file-model"}}}"#);
    let mut loaded = load(&path, &env(&[("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234")])).unwrap();
    assert_eq!(loaded.config.agents.defaults.max_tokens, 1234);
    loaded.config.agents.defaults.max_tokens = 2048;
    loaded.save().unwrap();
    assert_eq!(read_json(&path)["agents"]["defaults"]["maxTokens"], 2048);
}

#[test]
fn bad_env_value_names_variable_and_field() {
    let err = load(
        &fixture_path(),
        &env(&[("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "lots")]),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::InvalidValue { .. }));
    assert!(
        msg.contains("agents.defaults.maxTokens") && msg.contains("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS"),
        "{msg}"
    );
}

#[test]
fn unknown_env_keys_warn_and_are_not_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::copy(fixture_path(), &path).unwrap();
    let loaded = load(
        &path,
        &env(&[("NANOBOT_AGENTS__DEFAULTS__MODLE", "x"), ("NANOBOT_A____B", "y")]),
    )
    .unwrap();
    loaded.save().unwrap();
    assert_eq!(
        read_json(&path),
        crate::fixture_value(),
        "nothing from the environment reaches the file"
    );
    let unknown = loaded
        .warnings
        .iter()
        .find(|w| w.kind == WarningKind::UnknownKey)
        .unwrap();
    assert_eq!(unknown.field, "agents.defaults.modle");
    assert!(
        unknown.message.contains("NANOBOT_AGENTS__DEFAULTS__MODLE"),
        "{}",
        unknown.message
    );
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::IgnoredEnvVar && w.field == "NANOBOT_A____B")
    );
}

#[test]
fn var_references_are_resolved_from_the_map() {
    let (_dir, path) = write_config(
        r#"{"providers": {"openai": {"apiKey": "${OPENAI_API_KEY}", "apiBase": "https://${HOST}/v1"}},
            "channels": {"telegram": {"token": "${TG_TOKEN}"}}}"#,
    );
    let loaded = load(
        &path,
        &env(&[
            ("OPENAI_API_KEY", "sk-abc"),
            ("HOST", "llm.example"),
            ("TG_TOKEN", "123:tok"),
        ]),
    )
    .unwrap();
    let openai = loaded.config.providers.get("openai").unwrap();
    assert_eq!(openai.api_key.as_ref().unwrap().expose(), "sk-abc");
    assert_eq!(openai.api_base.as_deref(), Some("https://llm.example/v1"));
    assert_eq!(loaded.config.channels.telegram.token.expose(), "123:tok");
    assert_eq!(loaded.interpolated_fields().len(), 3);

    // The save keeps the references, not the secrets.
    loaded.save().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("${OPENAI_API_KEY}")
            && text.contains("https://${HOST}/v1")
            && text.contains("${TG_TOKEN}")
    );
    assert!(!text.contains("sk-abc") && !text.contains("123:tok"));
}

#[test]
fn missing_variable_is_an_error_naming_the_field() {
    let (_dir, path) = write_config(r#"{"providers": {"openai": {"apiKey": "${OPENAI_API_KEY}"}}}"#);
    let err = load(&path, &env(&[("OTHER_SECRET", "do-not-print")])).unwrap_err();
    match &err {
        ConfigError::MissingEnvVar { field, var, .. } => {
            assert_eq!(field, "providers.openai.apiKey");
            assert_eq!(var, "OPENAI_API_KEY");
        }
        other => panic!("unexpected error {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("providers.openai.apiKey") && msg.contains("OPENAI_API_KEY"),
        "{msg}"
    );
    assert!(!msg.contains("do-not-print"));
}

#[test]
fn a_value_refused_after_layering_names_the_variable_from_figments_metadata() {
    // `70000` parses as a number (the key's type) but does not fit a port: the error comes from typing the
    // merged document, and figment's metadata says which layer the field came from.
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"model": "m"}}}"#);
    let err = load(&path, &env(&[("NANOBOT_GATEWAY__PORT", "70000")])).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("gateway.port") && msg.contains("environment variable NANOBOT_GATEWAY__PORT"),
        "{msg}"
    );
    let (_dir, path) = write_config(r#"{"gateway": {"port": 70000}}"#);
    let msg = load(&path, &env(&[])).unwrap_err().to_string();
    assert!(
        msg.contains("gateway.port") && msg.contains("config.json") && !msg.contains("environment"),
        "{msg}"
    );
}

/// A `NANOBOT_` variable the file names in `${…}` (the bus key of docs/scaling.md) is that value only: it does
/// not also land on a config key of its own (`busKey`), and nothing warns about it.
#[test]
fn a_variable_the_file_references_is_not_also_an_override() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let file =
        serde_json::json!({"gateway": {"bus": {"kind": "nats", "nats": {"key": "${NANOBOT_BUS_KEY}"}}}});
    std::fs::write(&path, file.to_string()).unwrap();
    let key = "the replicas' shared deployment key, 32+ characters";
    let loaded = load(
        &path,
        &env(&[("NANOBOT_BUS_KEY", key), ("NANOBOT_BUS_KEYS", "x")]),
    )
    .unwrap();
    let unknown: Vec<&str> = loaded
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::UnknownKey)
        .map(|w| w.field.as_str())
        .collect();
    // The variable the file does not name is still an (unknown) override.
    assert_eq!(unknown, ["busKeys"], "{:?}", loaded.warnings);
    let json = serde_json::to_value(&loaded.config).unwrap();
    assert_eq!(json["gateway"]["bus"]["nats"]["key"], key);
}
