//! Model-aware request shaping for OpenAI-compatible providers: which output-token field, whether a
//! temperature, which `reasoning_effort` and thinking controls a chat-completions body carries.
//!
//! The rules follow the Python nanobot 0.3.5 (`openai_compat_provider.py`), chosen by the model name the
//! request goes out with (after the provider's prefix handling) and, where the provider matters, by its
//! [`ProviderSpec`]:
//!
//! - **Token field**: `max_completion_tokens` for the GPT-5 family, the `o1`/`o3`/`o4` reasoning models and
//!   Kimi K3 (judged by the last `/` segment, so `openai/o3-mini` counts), or when the provider always wants it;
//!   `max_tokens` otherwise.
//! - **Temperature**: left out for Kimi K3, whenever a reasoning effort other than `none` is set, and for any
//!   model whose name contains `gpt-5`, `o1`, `o3` or `o4`; a provider's per-model override wins after that,
//!   and Moonshot's Kimi K2.5/K2.6 never get one (the server picks it from the thinking mode).
//! - **Reasoning effort**: sent as configured unless it is `none`; `minimum` means `minimal`; Kimi K3 only
//!   takes `max`; DashScope spells `minimal` as `minimum`; providers may remap it (Mistral) or refuse it for
//!   models that always reason (Magistral). With an explicit effort, providers and models that have their own
//!   thinking switch get it in the body as well (`thinking`, `enable_thinking`, `reasoning_split`, or
//!   OpenRouter's `reasoning.effort`).
//!
//! ```
//! use nanobot_providers::shaping::{TokenField, shape};
//! use nanobot_providers::registry::find_spec;
//!
//! let spec = find_spec("custom").unwrap();
//! let s = shape(spec, "openai/o3-mini", Some(0.7), Some("high"));
//! assert_eq!(s.token_field, TokenField::MaxCompletionTokens);
//! assert_eq!(s.temperature, None);
//! assert_eq!(s.reasoning_effort.as_deref(), Some("high"));
//! ```

use serde_json::{Map, Value, json};

use crate::registry::ProviderSpec;

/// The name of the output-token limit field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenField {
    /// `max_tokens`: the classic chat-completions field.
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models and the GPT-5 family.
    MaxCompletionTokens,
}

impl TokenField {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// How a provider (or a model family) switches thinking on and off in the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThinkingStyle {
    /// No switch of its own.
    #[default]
    None,
    /// `"thinking": {"type": "enabled" | "disabled"}` (VolcEngine, BytePlus, DeepSeek, Kimi, MiMo).
    ThinkingType,
    /// `"enable_thinking": bool` (DashScope, ModelScope, Qwen).
    EnableThinking,
    /// `"reasoning_split": bool` (MiniMax).
    ReasoningSplit,
}

impl ThinkingStyle {
    fn fields(self, on: bool) -> Option<(&'static str, Value)> {
        match self {
            Self::None => None,
            Self::ThinkingType => Some((
                "thinking",
                json!({"type": if on { "enabled" } else { "disabled" }}),
            )),
            Self::EnableThinking => Some(("enable_thinking", json!(on))),
            Self::ReasoningSplit => Some(("reasoning_split", json!(on))),
        }
    }
}

/// What [`shape`] decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Shaping {
    /// Which field carries the output-token limit.
    pub token_field: TokenField,
    /// The temperature to send, if any.
    pub temperature: Option<f64>,
    /// The `reasoning_effort` to send, if any (already in the provider's vocabulary).
    pub reasoning_effort: Option<String>,
    /// Extra top-level body fields: thinking switches (merged before the user's `extraBody`).
    pub extra: Map<String, Value>,
}

const KIMI_K3: &str = "kimi-k3";
const KIMI_THINKING: &[&str] = &[
    "kimi-k2.5",
    "kimi-k2.6",
    "kimi-k2.7",
    "kimi-k2.7-code",
    "kimi-k2.7-code-highspeed",
    "k2.6-code-preview",
];
const KIMI_ALWAYS_THINKING: &[&str] = &["kimi-k2.7-code", "kimi-k2.7-code-highspeed"];
const KIMI_SERVER_TEMPERATURE: &[&str] = &["kimi-k2.5", "kimi-k2.6"];
const MIMO_THINKING: &[&str] = &["mimo-v2.5-pro", "mimo-v2.5", "mimo-v2-pro", "mimo-v2-omni"];
const QWEN_THINKING: &[&str] = &[
    "qwen3.7-max",
    "qwen3.7-plus",
    "qwen3.6-max-preview",
    "qwen3.6-plus",
    "qwen3.6-flash",
    "qwen3.5-plus",
    "qwen3.5-flash",
];
/// Substrings of model names that mark OpenAI's reasoning models and the GPT-5 family.
const REASONING_TOKENS: &[&str] = &["gpt-5", "o1", "o3", "o4"];

/// The model's own name: the last `/` segment, lowercased (`openai/o3-mini` → `o3-mini`).
pub fn model_slug(model: &str) -> String {
    model.rsplit('/').next().unwrap_or(model).to_lowercase()
}

/// Whether the model needs `max_completion_tokens` whatever the provider: the GPT-5 family, `o1`/`o3`/`o4`
/// (exactly, or followed by `-` or `.`), Kimi K3.
pub fn requires_max_completion_tokens(model: &str) -> bool {
    let slug = model_slug(model);
    slug == KIMI_K3
        || slug.contains("gpt-5")
        || ["o1", "o3", "o4"].iter().any(|p| {
            slug.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.']))
        })
}

/// Whether the model takes a temperature with this reasoning effort: not Kimi K3, not with an effort other
/// than `none`, and not when the name contains `gpt-5`, `o1`, `o3` or `o4` (a substring test on the whole
/// name, as the Python nanobot does).
pub fn supports_temperature(model: &str, reasoning_effort: Option<&str>) -> bool {
    if model_slug(model) == KIMI_K3 {
        return false;
    }
    if reasoning_effort.is_some_and(|e| !e.is_empty() && !e.eq_ignore_ascii_case("none")) {
        return false;
    }
    let name = model.to_lowercase();
    !REASONING_TOKENS.iter().any(|t| name.contains(t))
}

fn model_thinking_style(slug: &str) -> ThinkingStyle {
    if KIMI_THINKING.contains(&slug) || MIMO_THINKING.contains(&slug) {
        ThinkingStyle::ThinkingType
    } else if QWEN_THINKING.contains(&slug) {
        ThinkingStyle::EnableThinking
    } else {
        ThinkingStyle::None
    }
}

/// Decides the token field, temperature, reasoning effort and thinking switches for a request to `spec` with
/// `wire_model` (the model name as sent), the configured `temperature` and `reasoning_effort`.
pub fn shape(
    spec: &ProviderSpec,
    wire_model: &str,
    temperature: Option<f64>,
    reasoning_effort: Option<&str>,
) -> Shaping {
    let slug = model_slug(wire_model);
    let lower = wire_model.to_lowercase();
    let token_field = if spec.supports_max_completion_tokens || requires_max_completion_tokens(wire_model) {
        TokenField::MaxCompletionTokens
    } else {
        TokenField::MaxTokens
    };

    let mut temperature = temperature.filter(|_| supports_temperature(wire_model, reasoning_effort));
    if let Some(t) = spec
        .model_overrides
        .iter()
        .find(|o| lower.contains(o.pattern))
        .and_then(|o| o.temperature)
    {
        temperature = Some(t);
    }
    if spec.name == "moonshot" && KIMI_SERVER_TEMPERATURE.contains(&slug.as_str()) {
        temperature = None;
    }

    // The effort in OpenAI's words (for decisions) and in the provider's (on the wire).
    let mut semantic = reasoning_effort.map(|e| match e.to_lowercase().as_str() {
        "minimum" => "minimal".to_owned(),
        other => other.to_owned(),
    });
    let mut wire = reasoning_effort.map(str::to_owned);
    if slug == KIMI_K3 && semantic.is_some() {
        if matches!(semantic.as_deref(), Some("none" | "minimal")) {
            wire = None;
        } else {
            semantic = Some("max".into());
            wire = Some("max".into());
        }
    }
    if spec.name == "dashscope" && semantic.as_deref() == Some("minimal") {
        wire = Some("minimum".into());
    }
    let implicit = spec.implicit_reasoning_models.iter().any(|p| lower.contains(p));
    if !implicit
        && let Some(s) = semantic.as_deref()
        && let Some((_, mapped)) = spec.reasoning_effort_remap.iter().find(|(from, _)| *from == s)
    {
        wire = (!mapped.is_empty()).then(|| (*mapped).to_owned());
        semantic = Some(if mapped.is_empty() { "none" } else { mapped }.to_owned());
    }
    let mut effort = if implicit {
        None
    } else {
        wire.filter(|w| !w.is_empty() && semantic.as_deref() != Some("none"))
    };

    let mut extra = Map::new();
    if reasoning_effort.is_some() {
        let on = !matches!(semantic.as_deref(), Some("none" | "minimal"));
        let always_thinking = KIMI_ALWAYS_THINKING.contains(&slug.as_str());
        let model_style = model_thinking_style(&slug);
        let mut styles = vec![spec.thinking_style];
        if model_style != spec.thinking_style {
            styles.push(model_style);
        }
        for style in styles {
            if !on && always_thinking {
                continue;
            }
            if let Some((k, v)) = style.fields(on) {
                extra.insert(k.into(), v);
            }
        }
        if spec.gateway_reasoning_effort
            && model_style != ThinkingStyle::None
            && (on || !always_thinking)
            && let Some(s) = semantic.as_deref().filter(|s| !s.is_empty())
        {
            extra.insert("reasoning".into(), json!({"effort": s}));
        }
        // Kimi takes the thinking switch and rejects `reasoning_effort` beside it.
        if KIMI_THINKING.contains(&slug.as_str()) {
            effort = None;
        }
    }

    Shaping {
        token_field,
        temperature,
        reasoning_effort: effort,
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::find_spec;

    fn spec(name: &str) -> &'static ProviderSpec {
        find_spec(name).unwrap()
    }

    /// (model, needs max_completion_tokens, takes a temperature with no effort)
    const MODELS: &[(&str, bool, bool)] = &[
        ("gpt-5", true, false),
        ("gpt-5-mini", true, false),
        ("gpt-5.1", true, false),
        ("openai/gpt-5-nano", true, false),
        ("GPT-5", true, false),
        ("o1", true, false),
        ("o1-mini", true, false),
        ("o1-preview", true, false),
        ("o3", true, false),
        ("o3-mini", true, false),
        ("openai/o3-mini", true, false),
        ("O3-Mini", true, false),
        ("o4-mini", true, false),
        ("openai/o4-mini-2025-04-16", true, false),
        ("o3.5", true, false),
        ("kimi-k3", true, false),
        ("moonshot/kimi-k3", true, false),
        ("gpt-4o", false, true),
        ("openai/gpt-4o-mini", false, true),
        ("gpt-4.1", false, true),
        ("anthropic/claude-sonnet-4-5", false, true),
        ("deepseek-chat", false, true),
        ("llama3.2", false, true),
        ("qwen3.5-plus", false, true),
        // Not the family: the token field needs the name to start with o1/o3/o4 and a separator ...
        ("o3mini", false, false),
        ("o10", false, false),
        ("foo-o1", false, false),
        // ... judged on the last segment ...
        ("meta/o1-like-llama", true, false),
        // ... while the temperature test is a substring test on the whole name, as in the Python nanobot.
        ("o4-labs/llama3", false, false),
        ("zo4", false, false),
    ];

    #[test]
    fn token_field_and_temperature_by_model_name() {
        for &(model, completion, temp) in MODELS {
            assert_eq!(
                requires_max_completion_tokens(model),
                completion,
                "{model}: token field"
            );
            assert_eq!(supports_temperature(model, None), temp, "{model}: temperature");
            let s = shape(spec("custom"), model, Some(0.5), None);
            let want = if completion {
                TokenField::MaxCompletionTokens
            } else {
                TokenField::MaxTokens
            };
            assert_eq!(s.token_field, want, "{model} via custom");
            assert_eq!(s.temperature.is_some(), temp, "{model} via custom");
            assert_eq!(s.reasoning_effort, None, "{model}");
            assert!(s.extra.is_empty(), "{model}: no effort, no thinking switch");
        }
    }

    #[test]
    fn providers_that_always_want_max_completion_tokens() {
        for p in ["openai", "azure_openai", "volcengine", "volcengine_coding_plan"] {
            assert_eq!(
                shape(spec(p), "gpt-4o", Some(0.1), None).token_field,
                TokenField::MaxCompletionTokens,
                "{p}"
            );
        }
        let s = shape(spec("openai"), "gpt-4o", Some(0.1), None);
        assert_eq!(s.temperature, Some(0.1), "gpt-4o keeps its temperature");
    }

    #[test]
    fn an_effort_drops_the_temperature_and_none_sends_nothing() {
        let s = shape(spec("custom"), "gpt-4o", Some(0.1), Some("low"));
        assert_eq!(
            (s.temperature, s.reasoning_effort.as_deref()),
            (None, Some("low"))
        );
        let s = shape(spec("custom"), "gpt-4o", Some(0.1), Some("none"));
        assert_eq!((s.temperature, s.reasoning_effort), (Some(0.1), None));
        let s = shape(spec("custom"), "gpt-5", Some(0.1), Some("NONE"));
        assert_eq!((s.temperature, s.reasoning_effort), (None, None));
        let s = shape(spec("custom"), "o3", Some(0.1), Some("high"));
        assert_eq!(
            (s.temperature, s.reasoning_effort.as_deref()),
            (None, Some("high"))
        );
    }

    #[test]
    fn provider_vocabularies_for_the_effort() {
        // DashScope spells minimal as minimum, and gets its thinking switch.
        let s = shape(spec("dashscope"), "qwen-max", None, Some("minimal"));
        assert_eq!(s.reasoning_effort.as_deref(), Some("minimum"));
        assert_eq!(s.extra["enable_thinking"], json!(false));
        // Mistral takes only high/none; Magistral refuses the field.
        let m = spec("mistral");
        assert_eq!(
            shape(m, "mistral-medium-3-5", None, Some("low")).reasoning_effort,
            None
        );
        assert_eq!(
            shape(m, "mistral-medium-3-5", None, Some("medium"))
                .reasoning_effort
                .as_deref(),
            Some("high")
        );
        assert_eq!(
            shape(m, "magistral-medium", None, Some("high")).reasoning_effort,
            None
        );
        // Kimi K3 takes only max; none/minimal leave it out.
        let k = spec("moonshot");
        assert_eq!(
            shape(k, "kimi-k3", Some(0.6), Some("low"))
                .reasoning_effort
                .as_deref(),
            Some("max")
        );
        assert_eq!(
            shape(k, "kimi-k3", Some(0.6), Some("none")).reasoning_effort,
            None
        );
        assert_eq!(shape(k, "kimi-k3", Some(0.6), None).temperature, None);
    }

    #[test]
    fn kimi_thinking_switch_and_server_managed_temperature() {
        let k = spec("moonshot");
        let s = shape(k, "kimi-k2.6", Some(0.6), Some("high"));
        assert_eq!(
            s.reasoning_effort, None,
            "Kimi rejects reasoning_effort beside thinking"
        );
        assert_eq!(s.extra["thinking"], json!({"type": "enabled"}));
        assert_eq!(shape(k, "kimi-k2.5", Some(0.6), None).temperature, None);
        assert_eq!(shape(k, "kimi-k2.7", Some(0.6), None).temperature, Some(1.0));
        // Always-thinking models never get a "disabled" switch.
        assert!(shape(k, "kimi-k2.7-code", None, Some("none")).extra.is_empty());
        // Through OpenRouter: the model's own switch plus the gateway's reasoning object.
        let s = shape(spec("openrouter"), "moonshotai/kimi-k2.6", None, Some("low"));
        assert_eq!(s.extra["thinking"], json!({"type": "enabled"}));
        assert_eq!(s.extra["reasoning"], json!({"effort": "low"}));
        // A model without a switch gets nothing extra through OpenRouter.
        assert!(
            shape(spec("openrouter"), "openai/o3", None, Some("low"))
                .extra
                .is_empty()
        );
    }
}
