//! The model → provider matching table: one row per rule.

use nanobot_util::EnvMap;

use nanobot_config::ProvidersConfig;
use nanobot_providers::registry::{MatchInput, match_provider};
use serde_json::{Value, json};

struct Row {
    what: &'static str,
    providers: Value,
    forced: &'static str,
    env: &'static [(&'static str, &'static str)],
    model: &'static str,
    expect: Option<(&'static str, &'static str)>,
}

#[test]
fn matching_table() {
    let rows = [
        Row {
            what: "explicit agents.defaults.provider wins over keywords",
            providers: json!({"openrouter": {"apiKey": "sk-or-1"}, "anthropic": {"apiKey": "sk-ant"}}),
            forced: "openrouter",
            env: &[],
            model: "claude-opus-4-5",
            expect: Some(("openrouter", "forced")),
        },
        Row {
            what: "forced custom provider name",
            providers: json!({"myProxy": {"apiBase": "http://localhost:9000/v1"}}),
            forced: "myProxy",
            env: &[],
            model: "anything",
            expect: Some(("myProxy", "forced")),
        },
        Row {
            what: "prefix names a provider with a key",
            providers: json!({"deepseek": {"apiKey": "k"}, "openrouter": {"apiKey": "sk-or-1"}}),
            forced: "auto",
            env: &[],
            model: "deepseek/deepseek-chat",
            expect: Some(("deepseek", "prefix")),
        },
        Row {
            what: "ollama/… works without a key",
            providers: json!({}),
            forced: "auto",
            env: &[],
            model: "ollama/llama3.2",
            expect: Some(("ollama", "prefix")),
        },
        Row {
            what: "cloud nvidia/nemotron is not captured by Ollama's nemotron keyword",
            providers: json!({"nvidia": {"apiKey": "nvapi-1"}, "ollama": {"apiBase": "http://localhost:11434/v1"}}),
            forced: "auto",
            env: &[],
            model: "nvidia/llama-3.1-nemotron-70b-instruct",
            expect: Some(("nvidia", "prefix")),
        },
        Row {
            what: "nvidia/nemotron without an nvidia key still is not Ollama's (goes to the keyed gateway)",
            providers: json!({"openrouter": {"apiKey": "sk-or-1"}}),
            forced: "auto",
            env: &[],
            model: "nvidia/llama-3.1-nemotron-70b-instruct",
            expect: Some(("openrouter", "first-key")),
        },
        Row {
            what: "plain nemotron goes to local Ollama by keyword",
            providers: json!({}),
            forced: "auto",
            env: &[],
            model: "nemotron-mini",
            expect: Some(("ollama", "keyword")),
        },
        Row {
            what: "an sk-or- key under providers.openai stays with openai",
            providers: json!({"openai": {"apiKey": "sk-or-v1-abc"}}),
            forced: "auto",
            env: &[],
            model: "gpt-4o",
            expect: Some(("openai", "keyword")),
        },
        Row {
            what: "keywords in registry order (claude → anthropic)",
            providers: json!({"anthropic": {"apiKey": "sk-ant"}, "openai": {"apiKey": "sk-1"}}),
            forced: "auto",
            env: &[],
            model: "claude-opus-4-5",
            expect: Some(("anthropic", "keyword")),
        },
        Row {
            what: "keyword with hyphen/underscore normalisation (lm-studio)",
            providers: json!({}),
            forced: "auto",
            env: &[],
            model: "lm_studio-qwen",
            expect: Some(("lm_studio", "keyword")),
        },
        Row {
            what: "environment variable supplies the key",
            providers: json!({}),
            forced: "auto",
            env: &[("ANTHROPIC_API_KEY", "sk-ant-env")],
            model: "anthropic/claude-opus-4-5",
            expect: Some(("anthropic", "prefix")),
        },
        Row {
            what: "a configured local provider by its base URL",
            providers: json!({"vllm": {"apiBase": "http://gpu:8000/v1"}, "lmStudio": {"apiBase": "http://localhost:1234/v1"}}),
            forced: "auto",
            env: &[],
            model: "my-finetune",
            expect: Some(("lm_studio", "local")),
        },
        Row {
            what: "first configured local provider when no base keyword matches",
            providers: json!({"vllm": {"apiBase": "http://gpu:8000/v1"}}),
            forced: "auto",
            env: &[],
            model: "my-finetune",
            expect: Some(("vllm", "local")),
        },
        Row {
            what: "first provider with a key (registry order)",
            providers: json!({"groq": {"apiKey": "gsk"}, "openrouter": {"apiKey": "sk-or-1"}}),
            forced: "auto",
            env: &[],
            model: "some-unknown-model",
            expect: Some(("openrouter", "first-key")),
        },
        Row {
            what: "gateway fallback for a vendor prefix without a key",
            providers: json!({"openrouter": {"apiKey": "sk-or-1"}}),
            forced: "auto",
            env: &[],
            model: "anthropic/claude-opus-4-5",
            expect: Some(("openrouter", "first-key")),
        },
        Row {
            what: "custom provider with a base URL",
            providers: json!({"custom": {"apiBase": "http://127.0.0.1:8080/v1"}}),
            forced: "auto",
            env: &[],
            model: "whatever",
            expect: Some(("custom", "custom")),
        },
        Row {
            what: "unknown key under providers is a custom provider (by prefix)",
            providers: json!({"myProxy": {"apiKey": "k", "apiBase": "http://127.0.0.1:9/v1"}, "openai": {"apiKey": "sk"}}),
            forced: "auto",
            env: &[],
            model: "my-proxy/some-model",
            expect: Some(("myProxy", "prefix")),
        },
        Row {
            what: "nothing configured",
            providers: json!({}),
            forced: "auto",
            env: &[],
            model: "gpt-4o",
            expect: None,
        },
    ];
    for row in rows {
        let providers: ProvidersConfig = serde_json::from_value(row.providers.clone()).unwrap();
        let env: EnvMap = row
            .env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let input = MatchInput {
            providers: &providers,
            forced: row.forced,
            env: &env,
        };
        let got = match_provider(&input, row.model).map(|m| (m.name, m.rule));
        let want = row.expect.map(|(n, r)| (n.to_owned(), r));
        assert_eq!(got, want, "{}", row.what);
    }
}
