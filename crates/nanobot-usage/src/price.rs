//! Prices per model.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::UsageRecord;

/// What a model's tokens cost, per million, in the table's currency (US dollars for the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Input tokens served from the prompt cache (the input price when not given).
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "cached_input")]
    pub cached_input: Option<f64>,
}

impl Price {
    /// A price of `input` and `output` per million tokens, cached input at the input price.
    pub const fn new(input: f64, output: f64) -> Self {
        Self {
            input,
            output,
            cached_input: None,
        }
    }

    /// With cached input at `cached` per million.
    pub const fn cached(mut self, cached: f64) -> Self {
        self.cached_input = Some(cached);
        self
    }

    /// The cost of one call.
    pub fn cost(&self, record: &UsageRecord) -> f64 {
        self.cost_of(record.input, record.cached, record.output)
    }

    /// The cost of `input` tokens (of which `cached` came from the cache) and `output` tokens.
    pub fn cost_of(&self, input: u64, cached: u64, output: u64) -> f64 {
        let cached = cached.min(input);
        let fresh = input - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + output as f64 * self.output)
            / 1_000_000.0
    }
}

/// List prices (US dollars per million tokens) of well-known models, as their makers published them in 2025.
/// They change: `agents.defaults.prices` overrides any of them, and a model not listed has no price.
const DEFAULTS: &[(&str, Price)] = &[
    ("gpt-5", Price::new(1.25, 10.0).cached(0.125)),
    ("gpt-5-mini", Price::new(0.25, 2.0).cached(0.025)),
    ("gpt-5-nano", Price::new(0.05, 0.40).cached(0.005)),
    ("gpt-4.1", Price::new(2.0, 8.0).cached(0.50)),
    ("gpt-4.1-mini", Price::new(0.40, 1.60).cached(0.10)),
    ("gpt-4.1-nano", Price::new(0.10, 0.40).cached(0.025)),
    ("gpt-4o", Price::new(2.50, 10.0).cached(1.25)),
    ("gpt-4o-mini", Price::new(0.15, 0.60).cached(0.075)),
    ("o3", Price::new(2.0, 8.0).cached(0.50)),
    ("o4-mini", Price::new(1.10, 4.40).cached(0.275)),
    ("claude-opus-4-5", Price::new(5.0, 25.0).cached(0.50)),
    ("claude-opus-4-1", Price::new(15.0, 75.0).cached(1.50)),
    ("claude-opus-4", Price::new(15.0, 75.0).cached(1.50)),
    ("claude-sonnet-4-5", Price::new(3.0, 15.0).cached(0.30)),
    ("claude-sonnet-4", Price::new(3.0, 15.0).cached(0.30)),
    ("claude-haiku-4-5", Price::new(1.0, 5.0).cached(0.10)),
    ("claude-3-5-haiku", Price::new(0.80, 4.0).cached(0.08)),
    ("gemini-2.5-pro", Price::new(1.25, 10.0).cached(0.31)),
    ("gemini-2.5-flash", Price::new(0.30, 2.50).cached(0.075)),
];

/// Prices by model name. A model is looked up as written, then without its provider prefix (`openrouter/`,
/// `anthropic/`), then by the longest listed name it extends with a dated or versioned suffix
/// (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`). Names compare without regard to case.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

impl Default for PriceTable {
    /// The well-known defaults.
    fn default() -> Self {
        Self::empty().with_overrides(DEFAULTS.iter().map(|(m, p)| ((*m).to_owned(), *p)))
    }
}

impl PriceTable {
    /// A table with no price at all.
    pub fn empty() -> Self {
        Self {
            prices: BTreeMap::new(),
        }
    }

    /// The table with `prices` added, replacing those of the same models.
    pub fn with_overrides(mut self, prices: impl IntoIterator<Item = (String, Price)>) -> Self {
        for (model, price) in prices {
            self.prices.insert(model.to_ascii_lowercase(), price);
        }
        self
    }

    /// The price of `model`, if it has one.
    pub fn price(&self, model: &str) -> Option<&Price> {
        let model = model.to_ascii_lowercase();
        let bare = model.rsplit('/').next().unwrap_or(&model);
        for name in [model.as_str(), bare] {
            if let Some(p) = self.prices.get(name) {
                return Some(p);
            }
        }
        // The longest listed name that `bare` extends at a `-` followed by a digit (a date or a version).
        self.prices
            .iter()
            .filter(|(name, _)| {
                bare.strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| p)
    }

    /// The cost of one call, `None` when its model has no price.
    pub fn cost(&self, record: &UsageRecord) -> Option<f64> {
        self.price(&record.model).map(|p| p.cost(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(model: &str, input: u64, cached: u64, output: u64) -> UsageRecord {
        UsageRecord {
            ts: chrono::Utc::now(),
            session: "s".into(),
            chat: "cli:direct".into(),
            person: None,
            run: None,
            model: model.into(),
            input,
            output,
            cached,
            reasoning: 0,
        }
    }

    #[test]
    fn a_call_costs_fresh_cached_and_output_tokens_at_their_prices() {
        let t = PriceTable::default();
        // gpt-4o: 2.50 in, 1.25 cached, 10 out per million.
        let c = t.cost(&call("gpt-4o", 1_000_000, 400_000, 100_000)).unwrap();
        assert!((c - (0.6 * 2.5 + 0.4 * 1.25 + 0.1 * 10.0)).abs() < 1e-9, "{c}");
        // Without a cached price, cached input is input.
        let t = PriceTable::empty().with_overrides([("m".to_owned(), Price::new(1.0, 2.0))]);
        let c = t.cost(&call("m", 1_000_000, 500_000, 0)).unwrap();
        assert!((c - 1.0).abs() < 1e-9, "{c}");
    }

    #[test]
    fn models_are_found_with_a_provider_prefix_a_dated_suffix_or_another_case() {
        let t = PriceTable::default();
        let sonnet = t.price("claude-sonnet-4-5").copied();
        assert!(sonnet.is_some());
        assert_eq!(t.price("anthropic/claude-sonnet-4-5-20250929").copied(), sonnet);
        assert_eq!(t.price("openrouter/anthropic/Claude-Sonnet-4-5").copied(), sonnet);
        // The longest listed name wins: gpt-4o-mini is not gpt-4o.
        assert_eq!(
            t.price("gpt-4o-mini-2024-07-18").copied(),
            t.price("gpt-4o-mini").copied()
        );
        assert_ne!(t.price("gpt-4o-mini").copied(), t.price("gpt-4o").copied());
    }

    #[test]
    fn an_unknown_model_has_no_price_rather_than_a_zero_one() {
        let t = PriceTable::default();
        for m in [
            "llama3.2:3b",
            "gpt-4oo",
            "my-gpt-4o",
            "gpt-4o-turbo",
            "claude-sonnet",
        ] {
            assert_eq!(t.price(m), None, "{m}");
            assert_eq!(t.cost(&call(m, 10, 0, 10)), None, "{m}");
        }
    }

    #[test]
    fn a_users_price_replaces_the_default_and_adds_new_models() {
        let t = PriceTable::default().with_overrides([
            ("GPT-4o".to_owned(), Price::new(1.0, 1.0)),
            ("qwen3:8b".to_owned(), Price::new(0.0, 0.0)),
        ]);
        assert_eq!(t.price("gpt-4o"), Some(&Price::new(1.0, 1.0)));
        assert_eq!(t.cost(&call("ollama/qwen3:8b", 100, 0, 100)), Some(0.0));
    }
}
