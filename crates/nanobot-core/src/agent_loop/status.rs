//! The `/status` text: 0.3.5's figures (the session's last request, the session's context as it would be sent
//! now against the input budget), plus what nanobot-rs adds (requests since start, unconsolidated messages).

use nanobot_providers::ChatMessage;
use serde_json::Value;

use super::inner::LoopInner;

/// Kept free of the input budget for the answer's framing, as 0.3.5's consolidation counts it.
const SAFETY_BUFFER_TOKENS: u64 = 1024;

impl LoopInner {
    pub(super) async fn status_text(&self, key: &str) -> String {
        let t = self.kit.usage.totals();
        // The part not yet consolidated, read from the end of the file: `/status` on a long session stays cheap.
        let (count, unconsolidated, metadata) = match self.ledger.store().unconsolidated(key).await {
            Ok(part) => (
                part.start + part.messages.len(),
                part.messages.len(),
                part.metadata,
            ),
            Err(_) => Default::default(),
        };
        // The session's last request, as stored with it (0.3.5's `_last_usage`): right in a fresh process too.
        let last = |names: [&str; 2]| {
            let usage = metadata.get("_last_usage")?;
            names.iter().find_map(|n| usage.get(*n)).and_then(Value::as_u64)
        };
        let last_in = last(["prompt_tokens", "input_tokens"]).unwrap_or(0);
        let last_out = last(["completion_tokens", "output_tokens"]).unwrap_or(0);
        // The session's model (`/model`), not only the agent's default.
        let choice = self.kit.model_choice(&metadata);
        // What the next request would carry before the user's words: the system prompt, the history the turn
        // would replay, the tools. Falls back to the last request's size when the session cannot be read.
        let estimate = match self.ledger.history(key).await {
            Ok(h) => {
                let mut messages = Vec::with_capacity(h.messages.len() + 1);
                messages.push(ChatMessage::system(self.kit.context.system_prompt()));
                messages.extend(h.messages);
                let tools = self.kit.offered_tools();
                crate::budget::TokenEstimator.rough(&messages, &tools) as u64
            }
            Err(_) => last_in,
        };
        let window = u64::from(choice.context_window_tokens);
        let budget = window
            .saturating_sub(u64::from(choice.max_tokens))
            .saturating_sub(SAFETY_BUFFER_TOKENS)
            .max(1);
        let thousands = |n: u64| {
            if n >= 1000 {
                format!("{}k", n / 1000)
            } else {
                n.to_string()
            }
        };
        let secs = self.workers.uptime().as_secs();
        format!(
            "🐈 nanobot status\nModel: {}\nTokens: {} in / {} out (last request; {} requests since start)\n\
             Context: {}/{} ({}% of input budget)\nSession: {} messages ({} unconsolidated)\n\
             Subagents running: {}\nUptime: {}h {}m {}s",
            choice.model,
            last_in,
            last_out,
            t.requests,
            thousands(estimate),
            if window > 0 {
                thousands(window)
            } else {
                "n/a".to_owned()
            },
            (estimate * 100 / budget).min(999),
            count,
            unconsolidated,
            self.kit.subagents.running_for(key),
            secs / 3600,
            (secs % 3600) / 60,
            secs % 60
        )
    }
}
