//! The schema against the Python-written fixture.

use nanobot_config::Config;
use serde_json::Value;

/// `shared/fixtures/python-nanobot/config.json`, found in an ancestor of the crate (`shared/` sits beside the
/// repository).
pub(crate) fn fixture_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/fixtures/python-nanobot/config.json"))
        .find(|p| p.is_file())
        .expect("shared/fixtures/python-nanobot/config.json next to the repository")
}

fn fixture_value() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap()
}

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
