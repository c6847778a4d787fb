//! The `/status` text.

#[allow(unused_imports)]
use super::*;

impl LoopInner {
    pub(super) async fn status_text(&self, key: &str) -> String {
        let t = self.usage.totals();
        let (count, unconsolidated, last, metadata) = self
            .sessions
            .with_session(key, |s| {
                let last = s
                    .metadata
                    .get("_last_usage")
                    .and_then(|u| u.get("prompt_tokens").or_else(|| u.get("input_tokens")))
                    .and_then(Value::as_u64);
                (
                    s.messages.len(),
                    s.unconsolidated().len(),
                    last,
                    s.metadata.clone(),
                )
            })
            .await
            .unwrap_or_default();
        // The session's model (`/model`), not only the agent's default.
        let choice = self.model_choice(&metadata);
        let ctx_used = last.or(t.last.map(|u| u.prompt_tokens)).unwrap_or(0);
        let window = u64::from(choice.context_window_tokens.max(1));
        let secs = self.started.elapsed().as_secs();
        format!(
            "🐈 nanobot status\nModel: {}\nTokens: {} in / {} out ({} requests)\nContext: {} / {} tokens ({}%)\n\
             Session: {} messages ({} unconsolidated)\nSubagents running: {}\nUptime: {}h {}m {}s",
            choice.model,
            t.prompt_tokens,
            t.completion_tokens,
            t.requests,
            ctx_used,
            window,
            ctx_used * 100 / window,
            count,
            unconsolidated,
            self.subagents.running_for(key),
            secs / 3600,
            (secs % 3600) / 60,
            secs % 60
        )
    }
}
