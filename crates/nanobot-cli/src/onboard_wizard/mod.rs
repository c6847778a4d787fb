//! `nanobot onboard --wizard`: 0.3.5's interactive set-up. A main menu offers Quick Start (provider, API key,
//! endpoint, model, then the WebSocket channel for the local WebUI with its password) and Advanced Settings
//! (each provider, model presets, chat channels, channel-wide options, agent defaults, API server, gateway,
//! tools, a summary). Nothing is written until the user saves: then the config is saved once, atomically,
//! through [`nanobot_config::LoadedConfig::save`] (every value the user did not change is kept, `${VAR}`
//! references included), and the workspace templates are added as `onboard` does. Ctrl-C or Ctrl-D at any
//! question leaves the old file as it was.

mod ask;
mod edit;

use std::io::Write;

use nanobot_config::{Config, LoadedConfig, ModelPreset, ProviderConfig};
use serde_json::{Map, Value};

use crate::args::OnboardArgs;
use crate::error::CliError;
use crate::setup::CliEnv;
use ask::{Ask, Terminal, confirm, pause, required_secret, required_text, select};

/// The model Quick Start proposes for OpenAI Codex (0.3.5's first built-in model of the provider).
const CODEX_DEFAULT_MODEL: &str = "openai-codex/gpt-5.6-sol";

/// The name of the preset Quick Start writes and selects (0.3.5's).
const QUICK_START_PRESET: &str = "primary";

/// The label of `custom` in the Quick Start list.
const CUSTOM_LABEL: &str = "Other OpenAI-compatible";

/// The providers Quick Start offers, in 0.3.5's order (those this build can run; of the OAuth ones only OpenAI
/// Codex, and no transcription-only one, as in 0.3.5), `custom` last.
const QUICK_START_PROVIDERS: &[&str] = &[
    "azure_openai",
    "openrouter",
    "aihubmix",
    "siliconflow",
    "novita",
    "volcengine",
    "volcengine_coding_plan",
    "byteplus",
    "byteplus_coding_plan",
    "anthropic",
    "openai",
    "openai_codex",
    "deepseek",
    "gemini",
    "zhipu",
    "dashscope",
    "moonshot",
    "kimi_coding",
    "minimax",
    "minimax_anthropic",
    "mistral",
    "stepfun",
    "xiaomi_mimo",
    "longcat",
    "vllm",
    "ollama",
    "lm_studio",
    "nvidia",
    "groq",
    "qianfan",
    "custom",
];

/// Providers with more than one endpoint: Quick Start asks which (label, base URL), as 0.3.5 does.
const ENDPOINT_CHOICES: &[(&str, &[(&str, &str)])] = &[
    (
        "zhipu",
        &[
            ("Standard API", "https://open.bigmodel.cn/api/paas/v4"),
            ("Coding Plan", "https://open.bigmodel.cn/api/coding/paas/v4"),
        ],
    ),
    (
        "minimax",
        &[
            ("Global API", "https://api.minimax.io/v1"),
            ("Mainland China Token Plan", "https://api.minimaxi.com/v1"),
        ],
    ),
    (
        "minimax_anthropic",
        &[
            ("Global Anthropic API", "https://api.minimax.io/anthropic"),
            (
                "Mainland China Anthropic Token Plan",
                "https://api.minimaxi.com/anthropic",
            ),
        ],
    ),
    (
        "stepfun",
        &[
            ("Standard API", "https://api.stepfun.com/v1"),
            ("Step Plan", "https://api.stepfun.ai/step_plan/v1"),
        ],
    ),
    (
        "xiaomi_mimo",
        &[
            ("Standard API", "https://api.xiaomimimo.com/v1"),
            ("Token Plan", "https://token-plan-sgp.xiaomimimo.com/v1"),
        ],
    ),
];

/// The keys 0.3.5 writes in `channels.websocket` when Quick Start enables it, with its defaults (a key the
/// block already has keeps its value).
fn websocket_defaults() -> Map<String, Value> {
    let defaults = serde_json::json!({
        "enabled": true,
        "host": "127.0.0.1",
        "port": nanobot_websocket::DEFAULT_PORT,
        "unixSocketPath": "",
        "path": "/",
        "publicWsUrl": "",
        "token": "",
        "tokenIssuePath": "",
        "tokenIssueSecret": "",
        "tokenTtlS": nanobot_websocket::DEFAULT_TOKEN_TTL_S,
        "websocketRequiresToken": true,
        "allowFrom": ["*"],
        "streaming": true,
        "maxMessageBytes": nanobot_websocket::DEFAULT_MAX_MESSAGE_BYTES,
        "pingIntervalS": 20.0,
        "pingTimeoutS": 20.0,
        "sslCertfile": "",
        "sslKeyfile": ""
    });
    match defaults {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// `nanobot onboard --wizard`. Refused (usage error) when stdin or stdout is not a terminal.
pub(crate) fn run(env: &CliEnv, a: &OnboardArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if !env.stdin_tty || !env.stdout_tty {
        let which = if env.stdin_tty { "stdout" } else { "stdin" };
        return Err(CliError::Usage(format!(
            "`nanobot onboard --wizard` asks questions and needs a terminal, but {which} is not one; \
             in a script use `nanobot onboard` (or `nanobot onboard --refresh`) and edit config.json"
        )));
    }
    let (paths, explicit) = env.paths(a.config.config.as_deref());
    let mut setup = crate::setup::load(env, &a.config, false)?;
    let mut term = Terminal::new(out)?;
    // An OAuth provider is usable when its login (`nanobot provider login`) is kept where the provider reads it.
    let signed_in = |provider: &str| match provider {
        "openai_codex" => nanobot_providers::codex::token_store(&env.vars)
            .ok()
            .and_then(|store| store.load())
            .is_some(),
        _ => false,
    };
    match wizard(&mut term, &setup.loaded, &signed_in) {
        Ok(Some(config)) => {
            setup.loaded.config = config;
            crate::onboard::add_default_blocks(&mut setup.loaded.config);
            setup.loaded.save().map_err(|e| CliError::from_config(e, None))?;
            let workspace = paths.workspace(&setup.loaded.config.agents.defaults.workspace);
            let written = crate::onboard::write_templates(&workspace)?;
            let mut text = format!("✓ Config saved at {}\n", setup.loaded.path.display());
            text.push_str(&format!("✓ Workspace ready at {}\n", workspace.display()));
            for f in written {
                text.push_str(&format!("  created {f}\n"));
            }
            let mut webui = "nanobot webui".to_owned();
            if explicit {
                webui.push_str(&format!(" -c \"{}\"", setup.loaded.path.display()));
            }
            text.push_str(&format!("\n✓ nanobot is ready. Run: {webui}\n"));
            term.say(&text)
        }
        Ok(None) => term.say("Configuration discarded. No changes were saved.\n"),
        Err(CliError::Interrupted) => {
            term.say("\nConfiguration discarded. No changes were saved.\n")?;
            Err(CliError::Interrupted)
        }
        Err(e) => Err(e),
    }
}

/// The main menu. `Some(config)` to save, `None` to leave without saving.
/// `signed_in` tells whether an OAuth provider has a login.
fn wizard(
    ask: &mut dyn Ask,
    loaded: &LoadedConfig,
    signed_in: &dyn Fn(&str) -> bool,
) -> Result<Option<Config>, CliError> {
    let original = loaded.config.clone();
    let mut config = loaded.config.clone();
    loop {
        ask.say(&format!(
            "\n🐈 nanobot v{}: Setup Wizard\n\
             Quick Start asks for the provider, credentials, and model.\n\
             Use Advanced later for chat apps, tools, or provider-specific details.\n",
            env!("CARGO_PKG_VERSION")
        ))?;
        let dirty = changed(&original, &config);
        let mut choices = vec!["Quick Start".to_owned(), "Advanced Settings".to_owned()];
        if dirty {
            choices.push("Save and Exit".to_owned());
            choices.push("Exit Without Saving".to_owned());
        } else {
            choices.push("Exit".to_owned());
        }
        match select(ask, "What would you like to do?", &choices, None)? {
            0 => {
                let mut draft = config.clone();
                if quick_start(ask, &mut draft, signed_in)? {
                    return Ok(Some(draft));
                }
            }
            1 => advanced(ask, &mut config)?,
            2 if dirty => return Ok(Some(config)),
            _ => return Ok(None),
        }
    }
}

/// Whether `now` differs from `before` in anything that would be written.
fn changed(before: &Config, now: &Config) -> bool {
    serde_json::to_value(before).ok() != serde_json::to_value(now).ok()
}

/// One Quick Start provider: registry name and menu label.
fn quick_start_choices() -> Vec<(&'static nanobot_providers::registry::ProviderSpec, String)> {
    QUICK_START_PROVIDERS
        .iter()
        .filter_map(|name| nanobot_providers::registry::find_spec(name))
        .map(|spec| {
            let label = if spec.name == "custom" {
                CUSTOM_LABEL.to_owned()
            } else {
                spec.display_name.to_owned()
            };
            (spec, label)
        })
        .collect()
}

/// Whether Quick Start must ask for the base URL: `custom`, and providers without a default endpoint that
/// the user runs or rents themselves (Azure, vLLM).
fn needs_base_url(spec: &nanobot_providers::registry::ProviderSpec) -> bool {
    spec.name == "custom" || (spec.default_api_base.is_empty() && (spec.is_direct || spec.is_local))
}

/// Quick Start on `config` (a draft): true when the user finished it and asked to save.
fn quick_start(
    ask: &mut dyn Ask,
    config: &mut Config,
    signed_in: &dyn Fn(&str) -> bool,
) -> Result<bool, CliError> {
    ask.say(
        "\n── Quick Start ──\n\
         Choose provider endpoint, add credentials and model, then enable the local WebUI channel.\n",
    )?;
    let providers = quick_start_choices();
    let (spec, label, api_base, base_chosen, api_key, model) = loop {
        ask.say("\n  [1. Provider setup]  ->  2. WebSocket channel  ->  3. Review\n")?;
        let mut labels: Vec<String> = providers.iter().map(|(_, l)| l.clone()).collect();
        labels.push("<- Back".to_owned());
        let i = select(ask, "Which provider do you want to use?", &labels, None)?;
        let Some((spec, label)) = providers.get(i) else {
            return Ok(false);
        };
        // 0.3.5 signs in here; this wizard leaves that to `nanobot provider login` (a browser sign-in of its
        // own), and goes on when the login is there.
        if spec.is_oauth && !signed_in(spec.name) {
            let command = spec.name.replace('_', "-");
            ask.say(&format!(
                "! {label} signs in with OAuth, not an API key: run `nanobot provider login {command}`, then                  `nanobot onboard --wizard` again.\n"
            ))?;
            pause(ask, "Press Enter to continue...")?;
            return Ok(false);
        }
        let mut api_base = spec.default_api_base.to_owned();
        let mut base_chosen = false;
        if let Some((_, endpoints)) = ENDPOINT_CHOICES.iter().find(|(n, _)| *n == spec.name) {
            let mut labels: Vec<String> = endpoints.iter().map(|(l, _)| (*l).to_owned()).collect();
            labels.push("<- Back".to_owned());
            let j = select(
                ask,
                &format!("Which {label} endpoint should Quick Start use?"),
                &labels,
                Some(0),
            )?;
            let Some((_, url)) = endpoints.get(j) else {
                continue;
            };
            api_base = (*url).to_owned();
            base_chosen = true;
        }
        let api_key = if spec.is_local || spec.is_oauth {
            None
        } else {
            Some(required_secret(
                ask,
                &format!("{label} API key"),
                "An API key is required for Quick Start.",
            )?)
        };
        if needs_base_url(spec) {
            let url = required_text(
                ask,
                "Provider base URL",
                spec.default_api_base,
                "A base URL is required for this provider.",
            )?;
            api_base = url.trim_end_matches('/').to_owned();
            base_chosen = true;
        }
        let default_model = if spec.name == "openai_codex" {
            CODEX_DEFAULT_MODEL
        } else {
            ""
        };
        let model = required_text(
            ask,
            "Model ID",
            default_model,
            "A model ID is required for Quick Start.",
        )?;
        break (spec, label.clone(), api_base, base_chosen, api_key, model);
    };

    let key = nanobot_providers::registry::config_key(spec.name);
    // An OAuth provider's block is not written (0.3.5 leaves it out of the file): its login is elsewhere.
    if !spec.is_oauth && config.providers.get(&key).is_none() {
        config.providers.insert(key.clone(), ProviderConfig::default());
    }
    if let Some(p) = config.providers.get_mut(&key).filter(|_| !spec.is_oauth) {
        if let Some(k) = api_key {
            p.api_key = Some(nanobot_config::Secret::new(k));
        }
        let unset = p.api_base.as_deref().is_none_or(|b| b.trim().is_empty());
        if !api_base.is_empty() && (base_chosen || unset) {
            p.api_base = Some(api_base);
        }
    }
    let mut preset = ModelPreset::from_defaults(&nanobot_config::AgentDefaults::default());
    preset.model = model;
    preset.provider = spec.name.to_owned();
    preset.reasoning_effort = None;
    let preset = serde_json::to_value(&preset).map_err(|e| CliError::Usage(e.to_string()))?;
    config.model_presets.insert(QUICK_START_PRESET.to_owned(), preset);
    config.agents.defaults.model_preset = Some(QUICK_START_PRESET.to_owned());

    ask.say(
        "\n  1. Provider setup  ->  [2. WebSocket channel]  ->  3. Review\n\
         Quick Start will enable the WebSocket channel for the local WebUI.\n\
         This lets the browser UI at http://127.0.0.1:8765 connect to nanobot.\n",
    )?;
    if !confirm(ask, "Enable WebSocket channel now?", true)? {
        ask.say("! Quick Start needs the WebSocket channel for the local WebUI; nothing was kept.\n")?;
        pause(ask, "Press Enter to continue...")?;
        return Ok(false);
    }
    let password = required_secret(
        ask,
        "Set a WebUI password",
        "A WebUI password is required when enabling WebSocket.",
    )?;
    let mut block = match config.channels.other.get("websocket") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (k, v) in websocket_defaults() {
        block.entry(k).or_insert(v);
    }
    block.insert("enabled".into(), Value::Bool(true));
    block.insert("tokenIssueSecret".into(), Value::String(password));
    block.insert("websocketRequiresToken".into(), Value::Bool(true));
    config
        .channels
        .other
        .0
        .insert("websocket".into(), Value::Object(block));
    config.validate().map_err(|e| CliError::from_config(e, None))?;

    ask.say(&format!(
        "\n  1. Provider setup  ->  2. WebSocket channel  ->  [3. Review]\n\
         ── Quick Start ──\n  Status             Ready\n  Provider           {label}\n  \
         Model              {}\n  WebSocket channel  enabled\n",
        config
            .model_presets
            .get(QUICK_START_PRESET)
            .and_then(|p| p.get("model"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    ))?;
    pause(ask, "Press Enter to save and exit...")?;
    Ok(true)
}

/// The Advanced Settings menu; edits go into `config` (saved later from the main menu).
fn advanced(ask: &mut dyn Ask, config: &mut Config) -> Result<(), CliError> {
    let choices: Vec<String> = [
        "LLM Provider",
        "Model Presets",
        "Chat Channel",
        "Channel Common",
        "Agent Settings",
        "API Server",
        "Gateway",
        "Tools",
        "View Configuration Summary",
        "<- Back",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut last = None;
    loop {
        ask.say("\n── Advanced Settings ──\nUse these when the default API-key setup is not enough.\n")?;
        let i = select(ask, "What would you like to configure?", &choices, last)?;
        last = Some(i);
        match i {
            0 => providers(ask, config)?,
            1 => edit::presets(ask, config)?,
            2 => channels(ask, config)?,
            3 => {
                let blocks: Vec<String> = channel_block_names(config);
                let skip: Vec<&str> = blocks.iter().map(String::as_str).collect();
                edit::section(ask, config, "Channel Common", "/channels", &skip)?;
            }
            4 => edit::section(ask, config, "Agent Defaults", "/agents/defaults", &[])?,
            5 => edit::section(ask, config, "API Server", "/api", &[])?,
            6 => edit::section(ask, config, "Gateway Settings", "/gateway", &[])?,
            7 => edit::section(ask, config, "Tools Settings", "/tools", &["mcpServers"])?,
            8 => {
                ask.say(&summary(config))?;
                pause(ask, "Press Enter to continue...")?;
            }
            _ => return Ok(()),
        }
    }
}

/// The chat channel blocks in `config` (the typed ones and those kept as JSON).
fn channel_block_names(config: &Config) -> Vec<String> {
    let mut names: Vec<String> = ["telegram", "discord", "slack"].map(str::to_owned).to_vec();
    names.extend(config.channels.other.names().map(str::to_owned));
    names
}

/// The channels Advanced → Chat Channel offers: every block in the config, then the channels this build has
/// that have none yet.
fn channel_choices(config: &Config) -> Vec<String> {
    let mut names = channel_block_names(config);
    for built in nanobot_gateway::BUILT_CHANNELS {
        if !names.iter().any(|n| n == built) {
            names.push((*built).to_owned());
        }
    }
    names
}

/// The providers set up with an API key or an endpoint (OAuth ones sign in with `nanobot provider login`), in
/// registry order, as 0.3.5's provider lists.
pub(crate) fn api_key_providers() -> Vec<&'static nanobot_providers::registry::ProviderSpec> {
    nanobot_providers::registry::PROVIDERS
        .iter()
        .filter(|s| !s.is_oauth)
        .collect()
}

/// Advanced → LLM Provider: pick one (those with a key are starred), then edit its block.
fn providers(ask: &mut dyn Ask, config: &mut Config) -> Result<(), CliError> {
    let mut last = None;
    loop {
        let specs = api_key_providers();
        let mut labels: Vec<String> = specs
            .iter()
            .map(|s| {
                let has_key = config
                    .providers
                    .get(s.name)
                    .and_then(|p| p.api_key.as_ref())
                    .is_some_and(|k| !k.expose().is_empty());
                if has_key {
                    format!("{} *", s.display_name)
                } else {
                    s.display_name.to_owned()
                }
            })
            .collect();
        labels.push("<- Back".to_owned());
        ask.say("\n── LLM Providers ──\nSelect a provider to configure API key and endpoint.\n")?;
        let i = select(ask, "Select provider:", &labels, last)?;
        let Some(spec) = specs.get(i) else {
            return Ok(());
        };
        last = Some(i);
        let key = nanobot_providers::registry::config_key(spec.name);
        if config.providers.get(&key).is_none() {
            config.providers.insert(key.clone(), ProviderConfig::default());
        }
        // As 0.3.5: the provider's default endpoint is filled in when none is set.
        if let Some(p) = config.providers.get_mut(&key)
            && p.api_base.as_deref().is_none_or(str::is_empty)
            && !spec.default_api_base.is_empty()
        {
            p.api_base = Some(spec.default_api_base.to_owned());
        }
        edit::section(
            ask,
            config,
            spec.display_name,
            &format!("/providers/{}", edit::pointer_escape(&key)),
            &[],
        )?;
    }
}

/// Advanced → Chat Channel: pick a channel block, then edit it.
fn channels(ask: &mut dyn Ask, config: &mut Config) -> Result<(), CliError> {
    let mut last = None;
    loop {
        let names = channel_choices(config);
        let mut labels = names.clone();
        labels.push("<- Back".to_owned());
        ask.say("\n── Chat Channels ──\nSelect a channel to configure connection settings.\n")?;
        let i = select(ask, "Select channel:", &labels, last)?;
        let Some(name) = names.get(i) else {
            return Ok(());
        };
        last = Some(i);
        let fresh = !channel_block_names(config).contains(name);
        let before = fresh.then(|| config.clone());
        if fresh {
            // A channel without a block starts from its defaults (0.3.5's for the WebSocket channel; the
            // others from `enabled: false`, their keys added with "Add a setting").
            config
                .channels
                .other
                .0
                .insert(name.clone(), Value::Object(fresh_block(name)));
        }
        edit::section_with(
            ask,
            config,
            name,
            &format!("/channels/{}", edit::pointer_escape(name)),
            &[],
            true,
        )?;
        // Only looked at: the new block is not kept.
        if let Some(before) = before
            && config.channels.other.get(name) == Some(&Value::Object(fresh_block(name)))
        {
            *config = before;
        }
    }
}

/// The block a channel without one starts from.
fn fresh_block(name: &str) -> Map<String, Value> {
    let mut block = if name == "websocket" {
        websocket_defaults()
    } else {
        Map::new()
    };
    block.insert("enabled".into(), Value::Bool(false));
    block
}

/// The configuration summary (Advanced → View): providers with a key, channels, presets, agent defaults.
fn summary(config: &Config) -> String {
    let mut out = String::from("\n── LLM Providers ──\n");
    for spec in api_key_providers() {
        let configured = config
            .providers
            .get(spec.name)
            .and_then(|p| p.api_key.as_ref())
            .is_some_and(|k| !k.expose().is_empty());
        out.push_str(&format!(
            "  {:<28} {}\n",
            spec.display_name,
            if configured {
                "configured"
            } else {
                "not configured"
            }
        ));
    }
    out.push_str("── Chat Channels ──\n");
    let value = serde_json::to_value(&config.channels).unwrap_or_default();
    for name in channel_block_names(config) {
        let enabled = value
            .get(&name)
            .and_then(|b| b.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        out.push_str(&format!(
            "  {name:<28} {}\n",
            if enabled { "enabled" } else { "disabled" }
        ));
    }
    if !config.model_presets.is_empty() {
        out.push_str("── Model Presets ──\n");
        for (name, p) in &config.model_presets {
            let model = p.get("model").and_then(Value::as_str).unwrap_or_default();
            let ctx = p
                .get("contextWindowTokens")
                .map(Value::to_string)
                .unwrap_or_default();
            out.push_str(&format!("  {name:<28} {model} - ctx {ctx}\n"));
        }
    }
    let d = &config.agents.defaults;
    out.push_str("── Agent Settings ──\n");
    out.push_str(&format!("  {:<28} {}\n", "workspace", d.workspace));
    if let Some(p) = &d.model_preset {
        out.push_str(&format!("  {:<28} {p}\n", "modelPreset"));
    }
    out.push_str(&format!("  {:<28} {}\n", "model", d.model));
    out.push_str(&format!("  {:<28} {}\n", "provider", d.provider));
    out.push_str("── Gateway ──\n");
    out.push_str(&format!(
        "  {:<28} {}:{}\n",
        "address", config.gateway.host, config.gateway.port
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ask::script::Script;

    fn loaded(json: &str) -> LoadedConfig {
        nanobot_config::load_str(
            json,
            std::path::Path::new("/x/config.json"),
            &nanobot_util::EnvMap::new(),
        )
        .unwrap()
    }

    #[test]
    fn quick_start_with_openrouter_writes_the_key_the_preset_and_the_websocket_block() {
        let l = loaded("{}");
        // Quick Start, OpenRouter, key, model, yes, password, Enter.
        let mut s = Script::new(&["1", "OpenRouter", "sk-or-1", "anthropic/claude-x", "", "pw", ""]);
        let c = wizard(&mut s, &l, &|_| false).unwrap().unwrap();
        let p = c.providers.get("openrouter").unwrap();
        assert_eq!(p.api_key.as_ref().unwrap().expose(), "sk-or-1");
        assert_eq!(p.api_base.as_deref(), Some("https://openrouter.ai/api/v1"));
        assert_eq!(c.agents.defaults.model_preset.as_deref(), Some("primary"));
        let preset = &c.model_presets["primary"];
        assert_eq!(preset["model"], "anthropic/claude-x");
        assert_eq!(preset["provider"], "openrouter");
        assert_eq!(preset["maxTokens"], 8192);
        let ws = c.channels.other.get("websocket").unwrap();
        assert_eq!(ws["tokenIssueSecret"], "pw");
        assert_eq!(ws["enabled"], true);
        assert_eq!(ws["port"], 8765);
        assert!(!s.said.contains("sk-or-1"), "{}", s.said);
        assert!(!s.said.contains("pw\n"), "{}", s.said);
    }

    #[test]
    fn empty_answers_are_asked_again_and_a_bad_choice_is_named() {
        let l = loaded("{}");
        let mut s = Script::new(&[
            "9",
            "Quick Start",
            "Other OpenAI-compatible",
            "",
            "sk-1",
            "",
            "http://h:1/v1/",
            "",
            "m",
            "y",
            "pw",
            "",
        ]);
        let c = wizard(&mut s, &l, &|_| false).unwrap().unwrap();
        assert!(s.said.contains("\"9\" is not one of the choices"), "{}", s.said);
        assert!(s.said.contains("An API key is required"), "{}", s.said);
        assert!(s.said.contains("A base URL is required"), "{}", s.said);
        assert!(s.said.contains("A model ID is required"), "{}", s.said);
        assert_eq!(
            c.providers.get("custom").unwrap().api_base.as_deref(),
            Some("http://h:1/v1")
        );
    }

    #[test]
    fn a_channel_block_is_kept_only_when_changed_and_settings_can_be_added() {
        let l = loaded("{}");
        // Look at the WebSocket channel and leave: nothing to save (the menu offers plain Exit).
        let mut s = Script::new(&[
            "Advanced Settings",
            "Chat Channel",
            "websocket",
            "[Done]",
            "<- Back",
            "<- Back",
            "Exit",
        ]);
        assert!(wizard(&mut s, &l, &|_| false).unwrap().is_none(), "{}", s.said);

        let mut answers = vec![
            "Advanced Settings",
            "Chat Channel",
            "websocket",
            "enabled: false",
            "y",
            "[Done]",
        ];
        if nanobot_gateway::BUILT_CHANNELS.contains(&"email") {
            answers.extend([
                "email",
                "[+] Add a setting",
                "imapHost",
                "imap.example.com",
                "[+] Add a setting",
                "imapPassword",
                "imap-pass-31",
                "[Done]",
            ]);
        }
        answers.extend(["<- Back", "<- Back", "Save and Exit"]);
        let mut s = Script::new(&answers);
        let c = wizard(&mut s, &l, &|_| false).unwrap().unwrap();
        let ws = c.channels.other.get("websocket").unwrap();
        assert_eq!(ws["enabled"], true);
        assert_eq!(ws["port"], 8765);
        if nanobot_gateway::BUILT_CHANNELS.contains(&"email") {
            let email = c.channels.other.get("email").unwrap();
            assert_eq!(email["imapHost"], "imap.example.com");
            assert_eq!(email["imapPassword"], "imap-pass-31");
            assert_eq!(email["enabled"], false);
            assert!(s.said.contains("imapPassword: [set, hidden]"), "{}", s.said);
            assert!(!s.said.contains("imap-pass-31"), "{}", s.said);
        }
    }

    #[test]
    fn openai_codex_needs_its_login_first_and_then_takes_the_default_model() {
        let l = loaded("{}");
        let mut s = Script::new(&["Quick Start", "OpenAI Codex", "", "Exit"]);
        assert!(wizard(&mut s, &l, &|_| false).unwrap().is_none());
        assert!(
            s.said.contains("run `nanobot provider login openai-codex`"),
            "{}",
            s.said
        );
        assert!(!s.said.contains("Codex API key:"), "{}", s.said);

        let mut s = Script::new(&["Quick Start", "OpenAI Codex", "", "", "pw", ""]);
        let c = wizard(&mut s, &l, &|p| p == "openai_codex").unwrap().unwrap();
        assert!(!s.said.contains("Codex API key:"), "{}", s.said);
        let preset = &c.model_presets["primary"];
        assert_eq!(preset["model"], CODEX_DEFAULT_MODEL);
        assert_eq!(preset["provider"], "openai_codex");
        assert!(
            c.providers.get("openai_codex").is_none(),
            "as 0.3.5, no block written"
        );
    }

    #[test]
    fn exit_without_changes_saves_nothing_and_running_out_is_an_interrupt() {
        let l = loaded("{}");
        let mut s = Script::new(&["3"]);
        assert!(wizard(&mut s, &l, &|_| false).unwrap().is_none());
        let mut s = Script::new(&["1", "2"]);
        assert!(matches!(
            wizard(&mut s, &l, &|_| false),
            Err(CliError::Interrupted)
        ));
    }
}
