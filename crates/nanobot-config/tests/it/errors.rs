//! Errors say what and where.

use nanobot_config::{ConfigError, load, load_str};

use crate::{env, write_config};

#[test]
fn invalid_json_reports_file_line_and_column() {
    let (_dir, path) = write_config("{\n  \"agents\": {\n    \"defaults\": {\"model\": \"m\",}\n  }\n}\n");
    let err = load(&path, &env(&[])).unwrap_err();
    match &err {
        ConfigError::Json {
            line,
            column,
            path: p,
            ..
        } => {
            assert_eq!(*line, 3);
            assert!(*column > 20, "column {column}");
            assert_eq!(p, &path);
        }
        other => panic!("unexpected error {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("line 3") && msg.contains("column") && msg.contains("config.json"),
        "{msg}"
    );
}

#[test]
fn wrong_type_reports_the_dotted_path() {
    let (_dir, path) = write_config(r#"{"agents": {"defaults": {"maxTokens": "lots"}}}"#);
    let err = load(&path, &env(&[])).unwrap_err();
    match &err {
        ConfigError::InvalidValue { field, origin, .. } => {
            assert_eq!(field, "agents.defaults.maxTokens");
            assert!(origin.ends_with("config.json"), "{origin}");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(err.to_string().contains("agents.defaults.maxTokens"));
}

#[test]
fn wrong_type_inside_lists_and_maps_has_the_full_path() {
    let err = load_str(
        r#"{"tools": {"mcpServers": {"fs": {"command": "npx", "args": ["-y", {"x": 1}]}}}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidValue { field, .. } if field == "tools.mcpServers.fs.args[1]"),
        "{err}"
    );

    let err = load_str(
        r#"{"channels": {"telegram": {"groupPolicy": "everyone"}}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("channels.telegram.groupPolicy") && msg.contains("mention"),
        "{msg}"
    );
}

#[test]
fn a_wrongly_typed_secret_is_not_echoed() {
    let err = load_str(
        r#"{"providers": {"openai": {"apiKey": 987654321}}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("providers.openai.apiKey"), "{msg}");
    assert!(!msg.contains("987654321"), "{msg}");
}

#[test]
fn range_violations_fail_validation() {
    let err = load_str(
        r#"{"channels": {"sendMaxRetries": 50}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Validation { field, .. } if field == "channels.sendMaxRetries"),
        "{err}"
    );
}

#[test]
fn a_non_object_file_is_rejected_clearly() {
    let err = load_str("[1, 2]", "c.json".as_ref(), &env(&[])).unwrap_err();
    assert!(err.to_string().contains("must be a JSON object"), "{err}");
}

#[test]
fn the_replicas_store_is_read_and_a_wrong_one_is_named() {
    let loaded = load_str(
        r#"{"gateway": {"bus": {"kind": "nats", "nats": {"store": "jetstream"}}}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap();
    assert_eq!(
        loaded.config.gateway.bus.nats.store,
        nanobot_config::StoreKind::Jetstream
    );
    let back = serde_json::to_value(&loaded.config).unwrap();
    assert_eq!(back["gateway"]["bus"]["nats"]["store"], "jetstream");
    let default: nanobot_config::Config = serde_json::from_str("{}").unwrap();
    assert_eq!(
        default.gateway.bus.nats.store,
        nanobot_config::StoreKind::Directory
    );

    let err = load_str(
        r#"{"gateway": {"bus": {"nats": {"store": "s3"}}}}"#,
        "c.json".as_ref(),
        &env(&[]),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("gateway.bus.nats.store") && msg.contains("jetstream"),
        "{msg}"
    );
}
