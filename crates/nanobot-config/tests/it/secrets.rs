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

/// The Debug and Display of an error, and its source chain: every way it can reach a user or a log.
fn every_rendering(err: &nanobot_config::ConfigError) -> String {
    let mut out = format!("{err}\n{err:?}\n{err:#?}");
    let mut src = std::error::Error::source(err);
    while let Some(s) = src {
        out.push_str(&format!("\n{s}\n{s:?}"));
        src = s.source();
    }
    out
}

/// A wrong value in (or in place of) every secret-bearing field of the schema is reported by path, never by value.
#[test]
fn bad_secret_values_are_never_echoed() {
    use serde_json::json;
    const K: &str = "SEKRIT-2c9d";
    let n: u64 = 9_876_543_210_123;
    let cases: Vec<(String, &str)> = vec![
        // a secret field with the wrong type (number, bool, list, object)
        (
            json!({"providers": {"openai": {"apiKey": n}}}).to_string(),
            "providers.openai.apiKey",
        ),
        (
            json!({"providers": {"openai": {"apiKey": [K]}}}).to_string(),
            "providers.openai.apiKey",
        ),
        (
            json!({"providers": {"openai": {"apiKey": {"k": K}}}}).to_string(),
            "providers.openai.apiKey",
        ),
        (
            json!({"providers": {"openai": {"extraHeaders": K}}}).to_string(),
            "providers.openai.extraHeaders",
        ),
        (
            json!({"providers": {"openai": {"extraHeaders": {"X": n}}}}).to_string(),
            "providers.openai.extraHeaders.X",
        ),
        (
            json!({"providers": {"openai": {"extraHeaders": [K]}}}).to_string(),
            "providers.openai.extraHeaders",
        ),
        (
            json!({"channels": {"telegram": {"token": n}}}).to_string(),
            "channels.telegram.token",
        ),
        (
            json!({"channels": {"telegram": {"token": [K]}}}).to_string(),
            "channels.telegram.token",
        ),
        (
            json!({"channels": {"telegram": {"webhookSecretToken": n}}}).to_string(),
            "channels.telegram.webhookSecretToken",
        ),
        (
            json!({"channels": {"discord": {"token": n}}}).to_string(),
            "channels.discord.token",
        ),
        (
            json!({"channels": {"discord": {"proxyPassword": n}}}).to_string(),
            "channels.discord.proxyPassword",
        ),
        (
            json!({"channels": {"slack": {"botToken": n}}}).to_string(),
            "channels.slack.botToken",
        ),
        (
            json!({"channels": {"slack": {"appToken": true}}}).to_string(),
            "channels.slack.appToken",
        ),
        (
            json!({"channels": {"slack": {"signingSecret": n}}}).to_string(),
            "channels.slack.signingSecret",
        ),
        (json!({"api": {"apiKey": n}}).to_string(), "api.apiKey"),
        (
            json!({"tools": {"web": {"search": {"apiKey": n}}}}).to_string(),
            "tools.web.search.apiKey",
        ),
        (
            json!({"tools": {"mcpServers": {"gh": {"env": {"TOKEN": n}}}}}).to_string(),
            "tools.mcpServers.gh.env.TOKEN",
        ),
        (
            json!({"tools": {"mcpServers": {"gh": {"env": K}}}}).to_string(),
            "tools.mcpServers.gh.env",
        ),
        (
            json!({"tools": {"mcpServers": {"gh": {"headers": K}}}}).to_string(),
            "tools.mcpServers.gh.headers",
        ),
        (
            json!({"tools": {"mcpServers": {"gh": {"headers": {"Authorization": [K]}}}}}).to_string(),
            "tools.mcpServers.gh.headers.Authorization",
        ),
        // a secret-bearing block given as a plain value
        (
            json!({"providers": {"custom": K}}).to_string(),
            "providers.custom",
        ),
        (
            json!({"providers": {"custom": n}}).to_string(),
            "providers.custom",
        ),
        (json!({"providers": K}).to_string(), "providers"),
        (
            json!({"channels": {"telegram": K}}).to_string(),
            "channels.telegram",
        ),
        (json!({"channels": {"slack": n}}).to_string(), "channels.slack"),
        (
            json!({"tools": {"web": {"search": K}}}).to_string(),
            "tools.web.search",
        ),
        (
            json!({"tools": {"mcpServers": {"gh": K}}}).to_string(),
            "tools.mcpServers.gh",
        ),
        (json!({"api": K}).to_string(), "api"),
        // interpolation failures next to secrets
        (
            json!({"providers": {"openai": {"apiKey": format!("${{{K}")}}}).to_string(),
            "providers.openai.apiKey",
        ),
        (
            json!({"providers": {"openai": {"apiKey": format!("${{{K}}}")}}}).to_string(),
            "providers.openai.apiKey",
        ),
    ];
    let n = n.to_string();
    let n = n.as_str();
    for (json, field) in &cases {
        let err = load_str(json, "c.json".as_ref(), &env(&[])).expect_err(json);
        let text = every_rendering(&err);
        assert!(
            text.contains(field),
            "{json}: the error does not name {field}: {text}"
        );
        for leaked in [K, n] {
            assert!(
                !text.contains(leaked),
                "{json}: the error shows the value: {text}"
            );
        }
    }
}

/// Ordinary bad values are shown as written: only the schema's secrets are hidden.
#[test]
fn ordinary_bad_values_are_shown() {
    let cases = [
        (r#"{"agents": {"defaults": {"maxTokens": "lots"}}}"#, "lots"),
        (r#"{"agents": {"defaults": {"temperature": "warm"}}}"#, "warm"),
        (r#"{"gateway": {"port": "eighty"}}"#, "eighty"),
        (
            r#"{"channels": {"telegram": {"enabled": "yes please"}}}"#,
            "yes please",
        ),
        (r#"{"tools": {"exec": {"timeout": "forever"}}}"#, "forever"),
        (r#"{"providers": {"openai": {"apiBase": 12345}}}"#, "12345"),
        (r#"{"channels": {"slack": {"mode": 4242}}}"#, "4242"),
    ];
    for (json, shown) in cases {
        let err = load_str(json, "c.json".as_ref(), &env(&[])).expect_err(json);
        let text = err.to_string();
        assert!(text.contains(shown), "{json}: {text}");
        assert!(!text.contains("REDACTED"), "{json}: {text}");
    }
}
