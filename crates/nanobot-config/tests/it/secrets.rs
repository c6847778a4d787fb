//! Secrets never appear in Debug/Display output.

use nanobot_config::{Secret, load_str};

use crate::env;

#[test]
fn debug_of_a_full_config_shows_no_secret() {
    let secrets = [
        "sk-provider-key-1",
        "hdr-secret-2",
        "tg-token-3",
        "slack-bot-4",
        "discord-5",
        "imap-pw-6",
        "search-key-7",
        "api-key-8",
        "mcp-env-9",
        "mcp-hdr-10",
        "unknown-11",
        "webhook-12",
    ];
    let text = format!(
        r#"{{
          "providers": {{"openai": {{"apiKey": "{}", "extraHeaders": {{"X-Key": "{}"}}}}}},
          "channels": {{"telegram": {{"token": "{}", "webhookSecretToken": "{}"}}, "slack": {{"botToken": "{}"}},
                        "discord": {{"token": "{}"}}, "email": {{"imapPassword": "{}"}}}},
          "tools": {{"web": {{"search": {{"apiKey": "{}"}}}},
                     "mcpServers": {{"gh": {{"command": "x", "env": {{"GITHUB_TOKEN": "{}"}},
                                             "headers": {{"Authorization": "{}"}}}}}}}},
          "api": {{"apiKey": "{}"}},
          "agents": {{"defaults": {{"someToken": "{}"}}}}
        }}"#,
        secrets[0],
        secrets[1],
        secrets[2],
        secrets[11],
        secrets[3],
        secrets[4],
        secrets[5],
        secrets[6],
        secrets[8],
        secrets[9],
        secrets[7],
        secrets[10],
    );
    let loaded = load_str(&text, "c.json".as_ref(), &env(&[])).unwrap();
    let dumps = [
        format!("{:?}", loaded.config),
        format!("{:#?}", loaded),
        format!("{:?}", loaded.warnings),
    ];
    for dump in &dumps {
        for s in secrets {
            assert!(!dump.contains(s), "secret {s} leaked into {dump}");
        }
    }
    assert!(dumps[0].contains("[REDACTED]"));
    // The values are still there for the code that needs them.
    assert_eq!(loaded.config.channels.telegram.token.expose(), "tg-token-3");
    assert_eq!(
        loaded.config.tools.mcp_servers["gh"].env.get("GITHUB_TOKEN"),
        Some("mcp-env-9")
    );
}

#[test]
fn debug_of_a_loaded_config_hides_interpolated_and_env_values() {
    let loaded = load_str(
        r#"{"providers": {"openai": {"apiKey": "${OPENAI_KEY}"}}}"#,
        "c.json".as_ref(),
        &env(&[
            ("OPENAI_KEY", "sk-from-var"),
            ("NANOBOT_PROVIDERS__ANTHROPIC__API_KEY", "sk-from-env"),
        ]),
    )
    .unwrap();
    let dump = format!("{loaded:?}");
    assert!(
        !dump.contains("sk-from-var") && !dump.contains("sk-from-env"),
        "{dump}"
    );
    assert!(
        dump.contains("providers.openai.apiKey"),
        "the field paths are shown: {dump}"
    );
}

#[test]
fn display_of_secret_is_redacted() {
    assert_eq!(Secret::new("abc").to_string(), "[REDACTED]");
}
