//! One model call, and sums of them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One model call, as a line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// When the call ended.
    pub ts: DateTime<Utc>,
    /// The session the call worked for (`telegram:12345`, `cron:abc`, …).
    pub session: String,
    /// The chat the turn answers in, as `channel:chat_id`.
    pub chat: String,
    /// The person the turn acts for, as `channel:user_id`; absent for unattended work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    /// The unattended run the call belongs to (`cron`, `heartbeat`, `trigger`, `report`, `subagent`, `dream`), if
    /// any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The model that answered.
    pub model: String,
    /// Input tokens (the cached ones included).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached: u64,
    /// Output tokens spent on reasoning (part of `output`), when the provider reports them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl UsageRecord {
    /// A call ending now in `session` and `chat` on `model`, with no tokens yet and nobody to charge but the chat.
    pub fn now(session: impl Into<String>, chat: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            ts: Utc::now(),
            session: session.into(),
            chat: chat.into(),
            person: None,
            run: None,
            model: model.into(),
            input: 0,
            output: 0,
            cached: 0,
            reasoning: 0,
        }
    }

    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// A sum of calls: tokens, and the cost of those whose model has a price.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    /// Model calls.
    pub calls: u64,
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens served from the cache.
    pub cached: u64,
    /// Output tokens spent on reasoning (part of `output`).
    pub reasoning: u64,
    /// The cost of the priced calls, in the price table's currency (US dollars by default).
    pub cost: f64,
    /// Tokens of calls whose model has no price: while not zero, [`Tally::cost`] is a lower bound.
    pub unpriced_tokens: u64,
}

impl Tally {
    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// The cost, when every call in it had a price.
    pub fn known_cost(&self) -> Option<f64> {
        (self.unpriced_tokens == 0).then_some(self.cost)
    }

    /// Adds one call of the given cost (`None`: its model has no price).
    pub fn add(&mut self, record: &UsageRecord, cost: Option<f64>) {
        self.calls += 1;
        self.input = self.input.saturating_add(record.input);
        self.output = self.output.saturating_add(record.output);
        self.cached = self.cached.saturating_add(record.cached);
        self.reasoning = self.reasoning.saturating_add(record.reasoning);
        match cost {
            Some(c) => self.cost += c,
            None => self.unpriced_tokens = self.unpriced_tokens.saturating_add(record.tokens()),
        }
    }

    /// The cost for people: `$0.0123`, or `unknown` / `at least $0.01 (some models have no price)`.
    pub fn cost_text(&self) -> String {
        match (self.known_cost(), self.cost > 0.0) {
            (Some(c), _) => format!("${c:.4}"),
            (None, false) => "unknown (no price for the model)".to_owned(),
            (None, true) => format!("at least ${:.4} (some models have no price)", self.cost),
        }
    }
}
