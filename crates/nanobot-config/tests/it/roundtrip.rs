//! load → save keeps every value, including keys this version does not model.

use nanobot_config::{Config, load, save};
use serde_json::json;

use crate::{env, fixture_path, fixture_value, read_json, write_config};

#[test]
fn fixture_round_trip_keeps_every_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("config.json");
    let loaded = load(&fixture_path(), &env(&[])).unwrap();
    loaded.save_to(&out).unwrap();
    assert_eq!(read_json(&out), fixture_value());
}

#[test]
fn unmodelled_keys_survive_a_round_trip_with_changes() {
    let original = json!({
        "agents": {"defaults": {"model": "m", "futureKnob": {"a": [1, 2]}}},
        "channels": {"telegram": {"enabled": true, "token": "t", "futureFlag": false},
                     "email": {"enabled": true, "imapPassword": "pw", "weird": null}},
        "providers": {"bedrock": {"region": "eu-west-1", "apiKey": null}, "myProxy": {"apiBase": "http://x"}},
        "tools": {"mcpServers": {"fs": {"command": "npx", "args": ["-y"], "autoApprove": ["read"]}}}
    });
    let (_dir, path) = write_config(&original.to_string());
    let mut loaded = load(&path, &env(&[])).unwrap();
    loaded.config.agents.defaults.max_tokens = 1000;
    loaded.save().unwrap();
    let saved = read_json(&path);
    assert_eq!(saved["agents"]["defaults"]["futureKnob"], json!({"a": [1, 2]}));
    assert_eq!(saved["agents"]["defaults"]["maxTokens"], 1000);
    assert_eq!(saved["channels"]["telegram"]["futureFlag"], false);
    assert_eq!(saved["channels"]["email"], original["channels"]["email"]);
    assert_eq!(saved["providers"]["bedrock"]["region"], "eu-west-1");
    assert_eq!(saved["providers"]["myProxy"]["apiBase"], "http://x");
    assert_eq!(saved["tools"]["mcpServers"]["fs"]["autoApprove"], json!(["read"]));

    // A second load of the saved file gives the same config.
    let again = load(&path, &env(&[])).unwrap();
    assert_eq!(again.config, loaded.config);
}

#[test]
fn snake_case_files_are_written_camel_case() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"max_tokens": 77}}}"#);
    load(&path, &env(&[])).unwrap().save().unwrap();
    let saved = read_json(&path);
    assert_eq!(saved["agents"]["defaults"]["maxTokens"], 77);
    assert!(saved["agents"]["defaults"].get("max_tokens").is_none());
}

#[test]
fn save_creates_directories_and_writes_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new/.nanobot/config.json");
    save(&path, &Config::default()).unwrap();
    let back = load(&path, &env(&[])).unwrap();
    assert_eq!(back.config, Config::default());
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, ["config.json"], "no temporary file is left behind");
}

#[cfg(unix)]
#[test]
fn saved_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = write_config("{}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    load(&path, &env(&[])).unwrap().save().unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn memory_scope_is_written_only_when_not_shared() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"model": "m"}}}"#);
    let mut loaded = load(&path, &env(&[])).unwrap();
    assert_eq!(
        loaded.config.agents.defaults.memory_scope,
        nanobot_config::MemoryScopeSetting::Shared
    );
    loaded.save().unwrap();
    // The Python nanobot's file stays as it was.
    assert!(
        read_json(&path)["agents"]["defaults"]
            .get("memoryScope")
            .is_none()
    );
    loaded.config.agents.defaults.memory_scope = nanobot_config::MemoryScopeSetting::PerUser;
    loaded.save().unwrap();
    assert_eq!(read_json(&path)["agents"]["defaults"]["memoryScope"], "per-user");
    let back = load(&path, &env(&[])).unwrap();
    assert_eq!(
        back.config.agents.defaults.memory_scope,
        nanobot_config::MemoryScopeSetting::PerUser
    );
    // A value that is not a scope is refused, naming the key.
    let (_d, bad) = write_config(r#"{"agents": {"defaults": {"memoryScope": "per-room"}}}"#);
    let err = load(&bad, &env(&[])).unwrap_err().to_string();
    assert!(
        err.contains("agents.defaults.memoryScope") && err.contains("per-room"),
        "{err}"
    );
}
