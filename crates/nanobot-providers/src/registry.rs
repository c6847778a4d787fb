//! The provider registry: a data table of [`ProviderSpec`]s (mirroring the Python nanobot's
//! `providers/registry.py`) and the rules that match a model to a provider.

use nanobot_config::{ProviderConfig, ProvidersConfig, normalize_name};
use nanobot_util::EnvMap;

use crate::ProviderError;
use crate::shaping::ThinkingStyle;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// OpenAI chat completions (and compatibles).
    OpenAiCompat,
    /// Anthropic Messages API.
    Anthropic,
    /// GitHub Copilot: OpenAI chat completions with Copilot API tokens from a GitHub OAuth login
    /// ([`crate::copilot`]).
    GithubCopilot,
    /// OpenAI Codex: the Codex Responses API with a ChatGPT OAuth login ([`crate::codex`]).
    OpenAiCodex,
    /// xAI Grok: xAI's Responses API with an xAI OAuth login ([`crate::grok`]).
    XaiGrok,
}

/// A per-model parameter override: when the model name contains `pattern`, force these values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelOverride {
    /// Substring of the (lowercased) model name.
    pub pattern: &'static str,
    /// Forced temperature.
    pub temperature: Option<f64>,
}

/// Static facts about one provider.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProviderSpec {
    /// Registry name (`snake_case`; the config key is its camelCase form).
    pub name: &'static str,
    /// Human name.
    pub display_name: &'static str,
    /// Lowercase substrings of model names that select this provider (in registry order).
    pub keywords: &'static [&'static str],
    /// Environment variables that supply the key when the config has none (first wins).
    pub env_keys: &'static [&'static str],
    /// Wire format.
    pub backend: Backend,
    /// Default base URL (empty: the config must give `apiBase`).
    pub default_api_base: &'static str,
    /// Routes many vendors' models (`openrouter`, `aihubmix`, …).
    pub is_gateway: bool,
    /// Runs on the user's machine; no key needed.
    pub is_local: bool,
    /// Talks to the vendor directly with user-given endpoint (custom, Azure).
    pub is_direct: bool,
    /// Keys starting with this belong to this gateway (used only for `custom`/unknown blocks).
    pub detect_by_key_prefix: &'static str,
    /// A base URL containing this belongs to this provider.
    pub detect_by_base_keyword: &'static str,
    /// Send only the last `/` segment of the model name (`anthropic/claude-x` → `claude-x`).
    pub strip_model_prefix: bool,
    /// Send `max_completion_tokens` instead of `max_tokens`.
    pub supports_max_completion_tokens: bool,
    /// Put `cache_control` markers on the system prompt, tools and recent messages.
    pub supports_prompt_caching: bool,
    /// Send `reasoning_content` of earlier assistant messages back (DeepSeek thinking mode, Kimi).
    pub sends_reasoning_content: bool,
    /// Marks providers usually backed by local models. Informational since text tool calls are read on every
    /// OpenAI-compatible provider whenever tools are offered.
    pub parse_text_tool_calls: bool,
    /// Assistant messages with tool calls carry `"content": ""` instead of `null` (llama.cpp and friends).
    pub empty_string_tool_content: bool,
    /// Per-model overrides.
    pub model_overrides: &'static [ModelOverride],
    /// The provider's own thinking switch, sent when a reasoning effort is configured.
    pub thinking_style: ThinkingStyle,
    /// A gateway that takes `"reasoning": {"effort": …}` for models with a thinking switch (OpenRouter).
    pub gateway_reasoning_effort: bool,
    /// `reasoning_effort` values this provider spells differently (`from`, `to`; an empty `to` leaves it out).
    pub reasoning_effort_remap: &'static [(&'static str, &'static str)],
    /// Substrings of models that always reason and reject `reasoning_effort`.
    pub implicit_reasoning_models: &'static [&'static str],
    /// Signs in with OAuth (`nanobot provider login <name>`) instead of an API key; chosen only by a model prefix,
    /// a keyword or `agents.defaults.provider`, never as "the first provider with a key".
    pub is_oauth: bool,
}

const BASE: ProviderSpec = ProviderSpec {
    name: "",
    display_name: "",
    keywords: &[],
    env_keys: &[],
    backend: Backend::OpenAiCompat,
    default_api_base: "",
    is_gateway: false,
    is_local: false,
    is_direct: false,
    detect_by_key_prefix: "",
    detect_by_base_keyword: "",
    strip_model_prefix: false,
    supports_max_completion_tokens: false,
    supports_prompt_caching: false,
    sends_reasoning_content: false,
    parse_text_tool_calls: false,
    empty_string_tool_content: false,
    model_overrides: &[],
    thinking_style: ThinkingStyle::None,
    gateway_reasoning_effort: false,
    reasoning_effort_remap: &[],
    implicit_reasoning_models: &[],
    is_oauth: false,
};

const LOCAL: ProviderSpec = ProviderSpec {
    is_local: true,
    parse_text_tool_calls: true,
    empty_string_tool_content: true,
    ..BASE
};

/// Every provider nanobot knows, in matching order.
pub static PROVIDERS: &[ProviderSpec] = &[
    ProviderSpec {
        name: "custom",
        display_name: "Custom (OpenAI-compatible)",
        is_direct: true,
        empty_string_tool_content: true,
        ..BASE
    },
    ProviderSpec {
        name: "azure_openai",
        display_name: "Azure OpenAI",
        keywords: &["azure", "azure-openai"],
        env_keys: &["AZURE_OPENAI_API_KEY"],
        is_direct: true,
        supports_max_completion_tokens: true,
        ..BASE
    },
    ProviderSpec {
        name: "openrouter",
        display_name: "OpenRouter",
        keywords: &["openrouter"],
        env_keys: &["OPENROUTER_API_KEY"],
        default_api_base: "https://openrouter.ai/api/v1",
        is_gateway: true,
        detect_by_key_prefix: "sk-or-",
        detect_by_base_keyword: "openrouter",
        supports_prompt_caching: true,
        gateway_reasoning_effort: true,
        ..BASE
    },
    ProviderSpec {
        name: "aihubmix",
        display_name: "AiHubMix",
        keywords: &["aihubmix"],
        env_keys: &["AIHUBMIX_API_KEY"],
        default_api_base: "https://aihubmix.com/v1",
        is_gateway: true,
        detect_by_base_keyword: "aihubmix",
        strip_model_prefix: true,
        ..BASE
    },
    ProviderSpec {
        name: "siliconflow",
        display_name: "SiliconFlow",
        keywords: &["siliconflow"],
        env_keys: &["SILICONFLOW_API_KEY"],
        default_api_base: "https://api.siliconflow.cn/v1",
        is_gateway: true,
        detect_by_base_keyword: "siliconflow",
        ..BASE
    },
    ProviderSpec {
        name: "volcengine",
        display_name: "VolcEngine",
        keywords: &["volcengine", "volces", "ark"],
        env_keys: &["ARK_API_KEY", "VOLCENGINE_API_KEY"],
        default_api_base: "https://ark.cn-beijing.volces.com/api/v3",
        is_gateway: true,
        detect_by_base_keyword: "volces",
        supports_max_completion_tokens: true,
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "volcengine_coding_plan",
        display_name: "VolcEngine Coding Plan",
        env_keys: &["ARK_API_KEY", "VOLCENGINE_API_KEY"],
        default_api_base: "https://ark.cn-beijing.volces.com/api/coding/v3",
        is_gateway: true,
        supports_max_completion_tokens: true,
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "byteplus",
        display_name: "BytePlus",
        keywords: &["byteplus"],
        env_keys: &["BYTEPLUS_API_KEY"],
        default_api_base: "https://ark.ap-southeast.bytepluses.com/api/v3",
        is_gateway: true,
        detect_by_base_keyword: "bytepluses",
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "byteplus_coding_plan",
        display_name: "BytePlus Coding Plan",
        env_keys: &["BYTEPLUS_API_KEY"],
        default_api_base: "https://ark.ap-southeast.bytepluses.com/api/coding/v3",
        is_gateway: true,
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "novita",
        display_name: "Novita AI",
        keywords: &["novita"],
        env_keys: &["NOVITA_API_KEY"],
        default_api_base: "https://api.novita.ai/openai",
        is_gateway: true,
        detect_by_base_keyword: "novita",
        ..BASE
    },
    ProviderSpec {
        name: "anthropic",
        display_name: "Anthropic",
        keywords: &["anthropic", "claude"],
        env_keys: &["ANTHROPIC_API_KEY"],
        backend: Backend::Anthropic,
        default_api_base: "https://api.anthropic.com",
        supports_prompt_caching: true,
        ..BASE
    },
    ProviderSpec {
        name: "openai",
        display_name: "OpenAI",
        keywords: &["openai", "gpt"],
        env_keys: &["OPENAI_API_KEY"],
        default_api_base: "https://api.openai.com/v1",
        supports_max_completion_tokens: true,
        ..BASE
    },
    ProviderSpec {
        name: "openai_codex",
        display_name: "OpenAI Codex",
        keywords: &["openai-codex"],
        backend: Backend::OpenAiCodex,
        default_api_base: crate::codex::DEFAULT_BASE_URL,
        detect_by_base_keyword: "codex",
        is_oauth: true,
        ..BASE
    },
    ProviderSpec {
        name: "xai_grok",
        display_name: "xAI Grok",
        keywords: &["xai-grok", "xai_grok"],
        backend: Backend::XaiGrok,
        default_api_base: crate::grok::DEFAULT_BASE_URL,
        is_oauth: true,
        ..BASE
    },
    ProviderSpec {
        name: "github_copilot",
        display_name: "Github Copilot",
        keywords: &["github_copilot", "copilot"],
        backend: Backend::GithubCopilot,
        default_api_base: crate::copilot::DEFAULT_BASE_URL,
        strip_model_prefix: true,
        supports_max_completion_tokens: true,
        is_oauth: true,
        ..BASE
    },
    ProviderSpec {
        name: "deepseek",
        display_name: "DeepSeek",
        keywords: &["deepseek"],
        env_keys: &["DEEPSEEK_API_KEY"],
        default_api_base: "https://api.deepseek.com",
        sends_reasoning_content: true,
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "gemini",
        display_name: "Gemini",
        keywords: &["gemini"],
        env_keys: &["GEMINI_API_KEY"],
        default_api_base: "https://generativelanguage.googleapis.com/v1beta/openai",
        ..BASE
    },
    ProviderSpec {
        name: "zhipu",
        display_name: "Zhipu AI",
        keywords: &["zhipu", "glm", "zai"],
        env_keys: &["ZAI_API_KEY", "ZHIPUAI_API_KEY"],
        default_api_base: "https://open.bigmodel.cn/api/paas/v4",
        ..BASE
    },
    ProviderSpec {
        name: "dashscope",
        display_name: "DashScope",
        keywords: &["qwen", "dashscope"],
        env_keys: &["DASHSCOPE_API_KEY"],
        default_api_base: "https://dashscope.aliyuncs.com/compatible-mode/v1",
        thinking_style: ThinkingStyle::EnableThinking,
        ..BASE
    },
    ProviderSpec {
        name: "moonshot",
        display_name: "Moonshot",
        keywords: &["moonshot", "kimi"],
        env_keys: &["MOONSHOT_API_KEY"],
        default_api_base: "https://api.moonshot.ai/v1",
        sends_reasoning_content: true,
        // Kimi K2.7 models require temperature 1.0 (K2.5/K2.6 get none: see `shaping`).
        model_overrides: &[ModelOverride {
            pattern: "kimi-k2.7",
            temperature: Some(1.0),
        }],
        ..BASE
    },
    ProviderSpec {
        name: "minimax",
        display_name: "MiniMax",
        keywords: &["minimax"],
        env_keys: &["MINIMAX_API_KEY"],
        default_api_base: "https://api.minimax.io/v1",
        thinking_style: ThinkingStyle::ReasoningSplit,
        ..BASE
    },
    ProviderSpec {
        name: "mistral",
        display_name: "Mistral",
        keywords: &["mistral"],
        env_keys: &["MISTRAL_API_KEY"],
        default_api_base: "https://api.mistral.ai/v1",
        reasoning_effort_remap: &[
            ("minimal", "none"),
            ("low", "none"),
            ("medium", "high"),
            ("high", "high"),
            ("none", "none"),
        ],
        implicit_reasoning_models: &["magistral"],
        ..BASE
    },
    ProviderSpec {
        name: "stepfun",
        display_name: "StepFun",
        keywords: &["stepfun", "step-"],
        env_keys: &["STEPFUN_API_KEY"],
        default_api_base: "https://api.stepfun.com/v1",
        ..BASE
    },
    ProviderSpec {
        name: "minimax_anthropic",
        display_name: "MiniMax (Anthropic API)",
        env_keys: &["MINIMAX_API_KEY"],
        backend: Backend::Anthropic,
        default_api_base: "https://api.minimax.io/anthropic",
        ..BASE
    },
    ProviderSpec {
        name: "kimi_coding",
        display_name: "Kimi Coding",
        env_keys: &["KIMI_API_KEY"],
        backend: Backend::Anthropic,
        default_api_base: "https://api.kimi.com/coding",
        ..BASE
    },
    ProviderSpec {
        name: "qianfan",
        display_name: "Baidu Qianfan",
        keywords: &["qianfan", "ernie"],
        env_keys: &["QIANFAN_API_KEY"],
        default_api_base: "https://qianfan.baidubce.com/v2",
        ..BASE
    },
    ProviderSpec {
        name: "xiaomi_mimo",
        display_name: "Xiaomi MiMo",
        keywords: &["mimo"],
        env_keys: &["XIAOMI_MIMO_API_KEY"],
        default_api_base: "https://api.xiaomimimo.com/v1",
        thinking_style: ThinkingStyle::ThinkingType,
        ..BASE
    },
    ProviderSpec {
        name: "longcat",
        display_name: "LongCat",
        keywords: &["longcat"],
        env_keys: &["LONGCAT_API_KEY"],
        default_api_base: "https://api.longcat.chat/openai",
        ..BASE
    },
    ProviderSpec {
        name: "groq",
        display_name: "Groq",
        keywords: &["groq"],
        env_keys: &["GROQ_API_KEY"],
        default_api_base: "https://api.groq.com/openai/v1",
        ..BASE
    },
    ProviderSpec {
        name: "nvidia",
        display_name: "NVIDIA NIM",
        keywords: &["nvidia"],
        env_keys: &["NVIDIA_API_KEY"],
        default_api_base: "https://integrate.api.nvidia.com/v1",
        ..BASE
    },
    ProviderSpec {
        name: "vllm",
        display_name: "vLLM",
        keywords: &["vllm"],
        env_keys: &["HOSTED_VLLM_API_KEY"],
        ..LOCAL
    },
    ProviderSpec {
        name: "ollama",
        display_name: "Ollama",
        keywords: &["ollama", "nemotron"],
        env_keys: &["OLLAMA_API_KEY"],
        default_api_base: "http://localhost:11434/v1",
        detect_by_base_keyword: "11434",
        ..LOCAL
    },
    ProviderSpec {
        name: "lm_studio",
        display_name: "LM Studio",
        keywords: &["lm-studio", "lmstudio"],
        env_keys: &["LM_STUDIO_API_KEY"],
        default_api_base: "http://localhost:1234/v1",
        detect_by_base_keyword: "1234",
        ..LOCAL
    },
];

/// The spec named `name` (any spelling: `lmStudio`, `lm_studio`, `lm-studio`).
pub fn find_spec(name: &str) -> Option<&'static ProviderSpec> {
    let wanted = normalize_name(name);
    PROVIDERS.iter().find(|s| normalize_name(s.name) == wanted)
}

/// The camelCase config key of a registry name (`lm_studio` → `lmStudio`).
pub fn config_key(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' || c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The outcome of matching a model: which provider, and its settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderMatch {
    /// The provider's name: the registry name, or the config key of a custom provider.
    pub name: String,
    /// The registry spec; custom (unknown) providers get the `custom` spec.
    pub spec: &'static ProviderSpec,
    /// The config block, when the config has one.
    pub config: Option<ProviderConfig>,
    /// Which rule decided (for `/status` and debugging): `forced`, `prefix`, `keyword`, `local`, `first-key`,
    /// `custom`.
    pub rule: &'static str,
}

/// The inputs of matching: the `providers` block, `agents.defaults.provider`, and the environment map.
#[derive(Debug, Clone, Copy)]
pub struct MatchInput<'a> {
    /// `providers`.
    pub providers: &'a ProvidersConfig,
    /// `agents.defaults.provider` (`"auto"` or empty: match by model).
    pub forced: &'a str,
    /// The environment (for `OPENAI_API_KEY` and friends).
    pub env: &'a EnvMap,
}

impl MatchInput<'_> {
    fn block(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.get(name)
    }

    /// The key for a provider: from the config, else from its environment variables.
    pub fn api_key(&self, name: &str, spec: Option<&ProviderSpec>) -> Option<String> {
        if let Some(k) = self
            .block(name)
            .and_then(|b| b.api_key.as_ref())
            .filter(|k| !k.is_empty())
        {
            return Some(k.expose().to_owned());
        }
        let spec = spec?;
        spec.env_keys
            .iter()
            .find_map(|v| self.env.non_empty(v).map(str::to_owned))
    }

    fn has_key(&self, spec: &ProviderSpec) -> bool {
        self.api_key(spec.name, Some(spec)).is_some()
    }

    fn usable(&self, spec: &ProviderSpec) -> bool {
        spec.is_local || spec.is_oauth || self.has_key(spec)
    }

    fn found(&self, name: &str, spec: &'static ProviderSpec, rule: &'static str) -> ProviderMatch {
        ProviderMatch {
            name: name.to_owned(),
            spec,
            config: self.block(name).cloned(),
            rule,
        }
    }

    /// Custom (unknown-name) provider blocks in file order.
    fn customs(&self) -> impl Iterator<Item = (&str, &ProviderConfig)> {
        self.providers.iter().filter(|(k, _)| find_spec(k).is_none())
    }
}

fn custom_spec() -> &'static ProviderSpec {
    &PROVIDERS[0]
}

/// The spec a custom block's endpoint really is (an OpenRouter key or URL under `custom` gets OpenRouter's
/// flags), else the `custom` spec.
fn detect_gateway(block: &ProviderConfig) -> &'static ProviderSpec {
    let key = block.api_key.as_ref().map(|k| k.expose()).unwrap_or_default();
    let base = block.api_base.as_deref().unwrap_or_default();
    PROVIDERS
        .iter()
        .find(|s| {
            (!s.detect_by_key_prefix.is_empty() && key.starts_with(s.detect_by_key_prefix) && base.is_empty())
                || (s.is_gateway
                    && !s.detect_by_base_keyword.is_empty()
                    && base.contains(s.detect_by_base_keyword))
        })
        .unwrap_or_else(custom_spec)
}

/// Matches `model` to a provider, as the Python nanobot does:
/// 1. an explicit `agents.defaults.provider`;
/// 2. a `prefix/model` whose prefix names a provider that has a key (or is local), or a custom block;
/// 3. keywords, in registry order (a local provider's keyword never captures a model whose prefix names
///    another known provider: `nvidia/nemotron…` is not Ollama's);
/// 4. a configured local provider, preferring the one whose base URL matches;
/// 5. the first provider (registry order, then custom blocks) with a key;
/// 6. a custom provider with a base URL.
///
/// A key set in the config or in the provider's environment variable counts. `None` when nothing matches.
pub fn match_provider(input: &MatchInput<'_>, model: &str) -> Option<ProviderMatch> {
    let forced = input.forced.trim();
    if !forced.is_empty() && !forced.eq_ignore_ascii_case("auto") {
        return match find_spec(forced) {
            Some(spec) => Some(input.found(spec.name, spec, "forced")),
            None => input.block(forced).map(|b| ProviderMatch {
                name: forced.to_owned(),
                spec: detect_gateway(b),
                config: Some(b.clone()),
                rule: "forced",
            }),
        };
    }
    let lower = model.to_lowercase();
    let normalized = lower.replace('-', "_");
    let prefix = lower.split_once('/').map(|(p, _)| p).unwrap_or_default();
    let prefix_spec = (!prefix.is_empty()).then(|| find_spec(prefix)).flatten();

    if let Some(spec) = prefix_spec
        && input.usable(spec)
    {
        return Some(input.found(spec.name, spec, "prefix"));
    }
    if !prefix.is_empty()
        && prefix_spec.is_none()
        && let Some((name, block)) = input
            .customs()
            .find(|(k, _)| normalize_name(k) == normalize_name(prefix))
    {
        return Some(ProviderMatch {
            name: name.to_owned(),
            spec: detect_gateway(block),
            config: Some(block.clone()),
            rule: "prefix",
        });
    }

    let kw_matches = |kw: &str| {
        let kw = kw.to_lowercase();
        lower.contains(&kw) || normalized.contains(&kw.replace('-', "_"))
    };
    for spec in PROVIDERS {
        if spec.is_local && prefix_spec.is_some_and(|p| p.name != spec.name) {
            continue;
        }
        if spec.keywords.iter().any(|k| kw_matches(k)) && input.usable(spec) {
            return Some(input.found(spec.name, spec, "keyword"));
        }
    }

    let mut local_fallback = None;
    for spec in PROVIDERS.iter().filter(|s| s.is_local) {
        let Some(base) = input
            .block(spec.name)
            .and_then(|b| b.api_base.as_deref())
            .filter(|b| !b.is_empty())
        else {
            continue;
        };
        if !spec.detect_by_base_keyword.is_empty() && base.contains(spec.detect_by_base_keyword) {
            return Some(input.found(spec.name, spec, "local"));
        }
        local_fallback.get_or_insert(spec);
    }
    if let Some(spec) = local_fallback {
        return Some(input.found(spec.name, spec, "local"));
    }

    for spec in PROVIDERS.iter().filter(|s| s.name != "custom" && !s.is_oauth) {
        if input.has_key(spec) && !spec.is_local {
            return Some(input.found(spec.name, spec, "first-key"));
        }
    }
    if let Some((name, block)) = input.customs().find(|(_, b)| b.has_api_key()) {
        return Some(ProviderMatch {
            name: name.to_owned(),
            spec: detect_gateway(block),
            config: Some(block.clone()),
            rule: "first-key",
        });
    }
    let custom_with_base = std::iter::once("custom")
        .filter_map(|n| input.block(n).map(|b| (n, b)))
        .chain(input.customs())
        .find(|(_, b)| b.api_base.as_deref().is_some_and(|u| !u.is_empty()));
    custom_with_base.map(|(name, block)| ProviderMatch {
        name: name.to_owned(),
        spec: detect_gateway(block),
        config: Some(block.clone()),
        rule: "custom",
    })
}

/// The error for "no provider could be found for `model`": names the provider the model points at (by prefix
/// or keyword) and the exact key or environment variable to set.
pub fn no_provider_error(model: &str) -> ProviderError {
    let lower = model.to_lowercase();
    let prefix = lower.split_once('/').map(|(p, _)| p).unwrap_or_default();
    let guess = find_spec(prefix).filter(|_| !prefix.is_empty()).or_else(|| {
        PROVIDERS
            .iter()
            .find(|s| !s.is_local && s.keywords.iter().any(|k| lower.contains(k)))
    });
    match guess {
        Some(spec) => missing_key(spec, model),
        None => ProviderError::Config(format!(
            "no provider configured for model `{model}`: set an API key under `providers.<name>.apiKey` in \
             config.json (for example providers.openrouter.apiKey, or the environment variable \
             OPENROUTER_API_KEY), or `providers.custom.apiBase` for an OpenAI-compatible endpoint"
        )),
    }
}

/// The "no key" error for `spec`.
pub fn missing_key(spec: &ProviderSpec, model: &str) -> ProviderError {
    ProviderError::MissingApiKey {
        provider: spec.name.to_owned(),
        model: model.to_owned(),
        config_key: config_key(spec.name),
        env_var: spec.env_keys.first().map(|s| (*s).to_owned()),
    }
}

/// The model id to send to `spec`'s endpoint: gateways with `strip_model_prefix` get the last segment; a
/// leading segment naming the provider itself (`deepseek/`, `ollama/`, or a custom block's name) is removed.
pub fn wire_model(spec: &ProviderSpec, provider_name: &str, model: &str) -> String {
    if spec.strip_model_prefix {
        return model.rsplit('/').next().unwrap_or(model).to_owned();
    }
    if let Some((prefix, rest)) = model.split_once('/') {
        let p = normalize_name(prefix);
        if p == normalize_name(spec.name) || p == normalize_name(provider_name) {
            return rest.to_owned();
        }
    }
    model.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_the_required_providers() {
        for name in [
            "custom",
            "openrouter",
            "aihubmix",
            "siliconflow",
            "volcengine",
            "anthropic",
            "openai",
            "deepseek",
            "gemini",
            "zhipu",
            "dashscope",
            "moonshot",
            "minimax",
            "mistral",
            "groq",
            "vllm",
            "ollama",
            "lm_studio",
            "nvidia",
        ] {
            assert!(find_spec(name).is_some(), "{name}");
        }
        assert_eq!(find_spec("lmStudio").map(|s| s.name), Some("lm_studio"));
        assert_eq!(config_key("lm_studio"), "lmStudio");
        assert_eq!(config_key("azure_openai"), "azureOpenai");
    }

    #[test]
    fn wire_model_names() {
        let s = |n| find_spec(n).unwrap();
        assert_eq!(
            wire_model(s("deepseek"), "deepseek", "deepseek/deepseek-chat"),
            "deepseek-chat"
        );
        assert_eq!(
            wire_model(s("openrouter"), "openrouter", "anthropic/claude-3"),
            "anthropic/claude-3"
        );
        assert_eq!(
            wire_model(s("aihubmix"), "aihubmix", "anthropic/claude-3"),
            "claude-3"
        );
        assert_eq!(wire_model(s("ollama"), "ollama", "ollama/llama3.2"), "llama3.2");
        assert_eq!(wire_model(s("custom"), "myProxy", "my-proxy/x"), "x");
    }
}
