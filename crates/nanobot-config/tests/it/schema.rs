//! The schema against the Python-written fixture.

use nanobot_config::Config;
use serde_json::{Map, Value};

use crate::fixture_value;

#[test]
fn fixture_deserialises_and_serialises_to_the_same_json() {
    let raw = fixture_value();
    let config: Config = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(config.gateway.port, 18790);
    assert_eq!(config.agents.defaults.model, "anthropic/claude-opus-4-5");
    assert_eq!(
        config.providers.len(),
        raw["providers"].as_object().unwrap().len()
    );
    let back = serde_json::to_value(&config).unwrap();
    assert_eq!(back, raw);
}

#[test]
fn defaults_match_the_fixture_for_modelled_blocks() {
    let raw = fixture_value();
    let defaults = serde_json::to_value(Config::default()).unwrap();
    for key in ["agents", "transcription", "api", "gateway", "tools"] {
        assert_eq!(
            defaults[key], raw[key],
            "defaults of `{key}` differ from what Python onboard writes"
        );
    }
    for key in ["telegram", "discord", "slack"] {
        assert_eq!(
            defaults["channels"][key], raw["channels"][key],
            "defaults of channels.{key}"
        );
    }
}

fn snake(key: &str) -> String {
    let mut out = String::new();
    for ch in key.chars() {
        if ch.is_ascii_uppercase() {
            out.push('_');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Renames every key to snake_case, except names chosen by the user (`keep_names`) and raw blocks (`raw`).
fn snake_keys(v: &Value, keep_names: bool, raw: bool) -> Value {
    match v {
        Value::Object(map) if !raw => {
            let mut out = Map::new();
            for (k, child) in map {
                let name = if keep_names { k.clone() } else { snake(k) };
                let (child_keep, child_raw) = match k.as_str() {
                    "providers" | "mcpServers" | "headers" | "env" | "modelPresets" => (true, false),
                    "email" | "feishu" | "dingtalk" | "matrix" | "mattermost" | "mochat" | "msteams"
                    | "napcat" | "qq" | "signal" | "websocket" | "wecom" | "weixin" | "whatsapp" => {
                        (false, true)
                    }
                    _ => (false, false),
                };
                out.insert(name, snake_keys(child, child_keep, child_raw));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[test]
fn every_camel_case_key_of_the_fixture_has_a_snake_case_alias() {
    let raw = fixture_value();
    let snaked = snake_keys(&raw, false, false);
    assert_ne!(snaked, raw, "the conversion changed something");
    assert!(snaked["agents"]["defaults"].get("max_tokens").is_some());
    let from_snake: Config = serde_json::from_value(snaked).unwrap();
    assert_eq!(from_snake.unknown_keys(), Vec::<String>::new());
    let from_camel: Config = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(from_snake, from_camel);
    // … and it is written back camelCase.
    assert_eq!(serde_json::to_value(&from_snake).unwrap(), raw);
}

#[test]
fn provider_order_and_lookup_by_any_spelling() {
    let config: Config = serde_json::from_value(fixture_value()).unwrap();
    let names: Vec<&str> = config.providers.iter().map(|(n, _)| n).take(3).collect();
    assert_eq!(names, ["custom", "azureOpenai", "bedrock"]);
    assert!(config.providers.get("azure_openai").is_some());
    assert!(config.providers.get("AZURE-OPENAI").is_some());
    assert!(
        config.providers.first_with_key().is_none(),
        "the fixture has no keys"
    );
}

#[test]
fn raw_channel_blocks_are_kept_in_file_order() {
    let config: Config = serde_json::from_value(fixture_value()).unwrap();
    let names: Vec<&str> = config.channels.other.names().collect();
    assert_eq!(names.first(), Some(&"dingtalk"));
    assert!(names.contains(&"email") && names.contains(&"whatsapp") && !names.contains(&"telegram"));
    assert!(config.channels.other.is_enabled("websocket"));
    assert_eq!(config.channels.other.get("email").unwrap()["imapPort"], 993);
}
