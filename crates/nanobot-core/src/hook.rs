//! Lifecycle hooks: [`AgentHook`] (one method per event, no-op defaults), [`CompositeHook`] (runs hooks in order,
//! isolates failures), and the built-in [`LoggingHook`] and [`UsageHook`].

use nanobot_util::lock;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::FutureExt;
use nanobot_providers::{ChatMessage, FinishReason, ToolCall, Usage};

use crate::error::BoxError;

/// What a hook sees before each model call.
#[derive(Debug)]
#[non_exhaustive]
pub struct IterationStart<'a> {
    /// 0-based iteration number.
    pub iteration: usize,
    /// The conversation as it will be sent (after budget trimming).
    pub messages: &'a [ChatMessage],
}

/// What a hook sees before tools run.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolBatch<'a> {
    /// 0-based iteration number.
    pub iteration: usize,
    /// Text the model wrote before calling the tools (think-stripped), if any.
    pub assistant_text: Option<&'a str>,
    /// The calls, in the model's order.
    pub calls: &'a [ToolCall],
    /// The model that asked for them.
    pub model: &'a str,
    /// Token usage of the call that asked for them, when the provider reported it (also in the
    /// [`IterationEnd`] that follows the tools).
    pub usage: Option<Usage>,
}

/// A refusal to run one tool call; the model receives `reason` as the call's (error) result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veto {
    /// The vetoed call's id.
    pub call_id: String,
    /// Why, for the model.
    pub reason: String,
}

impl Veto {
    /// A veto of `call_id`.
    pub fn new(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            reason: reason.into(),
        }
    }
}

/// What a hook sees after each model call (and its tools, if any).
#[derive(Debug)]
#[non_exhaustive]
pub struct IterationEnd<'a> {
    /// 0-based iteration number.
    pub iteration: usize,
    /// The model that answered.
    pub model: &'a str,
    /// Token usage of this call, when the provider reported it.
    pub usage: Option<Usage>,
    /// Why the model stopped.
    pub finish_reason: &'a FinishReason,
    /// Tool calls made in this iteration (empty on a final answer).
    pub tool_calls: &'a [ToolCall],
}

/// Extension points of an agent run. Every method has a no-op default; implement what you need.
///
/// Errors returned by a hook are logged and otherwise ignored (see [`CompositeHook`]); a hook can never break a
/// turn, except deliberately by vetoing tool calls.
#[async_trait]
pub trait AgentHook: Send + Sync {
    /// True when this hook wants [`AgentHook::on_stream`] deltas (the runner then streams the model call).
    fn wants_streaming(&self) -> bool {
        false
    }

    /// Before each model call.
    async fn before_iteration(&self, _ctx: &IterationStart<'_>) -> Result<(), BoxError> {
        Ok(())
    }

    /// A piece of visible answer text (think blocks already removed). Only when streaming.
    async fn on_stream(&self, _delta: &str) -> Result<(), BoxError> {
        Ok(())
    }

    /// The model call's stream ended; `resuming` is true when tool calls follow (more text will come later).
    async fn on_stream_end(&self, _resuming: bool) -> Result<(), BoxError> {
        Ok(())
    }

    /// Before tools run: return vetoes for calls that must not run (the model sees the reason).
    async fn before_execute_tools(&self, _batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        Ok(Vec::new())
    }

    /// After each iteration, with its usage.
    async fn after_iteration(&self, _ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        Ok(())
    }

    /// Post-processes the final answer (a pipeline: each hook gets the previous hook's output).
    async fn finalize_content(&self, content: String) -> Result<String, BoxError> {
        Ok(content)
    }
}

/// Runs several hooks in order. A hook that fails (error or panic) is logged and skipped; the others still run.
/// Streams when any hook wants streaming.
#[derive(Clone, Default)]
pub struct CompositeHook {
    hooks: Vec<Arc<dyn AgentHook>>,
}

impl std::fmt::Debug for CompositeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeHook")
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl CompositeHook {
    /// A composite of `hooks`, run in this order.
    pub fn new(hooks: Vec<Arc<dyn AgentHook>>) -> Self {
        Self { hooks }
    }

    /// Adds a hook at the end.
    pub fn push(&mut self, hook: Arc<dyn AgentHook>) {
        self.hooks.push(hook);
    }

    /// Number of hooks.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// True when there are no hooks.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }
}

async fn isolated<T, F>(event: &'static str, index: usize, fut: F) -> Option<T>
where
    F: std::future::Future<Output = Result<T, BoxError>> + Send,
{
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::error!(hook = index, event, error = %e, "agent hook failed");
            None
        }
        Err(_) => {
            tracing::error!(hook = index, event, "agent hook panicked");
            None
        }
    }
}

#[async_trait]
impl AgentHook for CompositeHook {
    fn wants_streaming(&self) -> bool {
        self.hooks.iter().any(|h| h.wants_streaming())
    }

    async fn before_iteration(&self, ctx: &IterationStart<'_>) -> Result<(), BoxError> {
        for (i, h) in self.hooks.iter().enumerate() {
            isolated("before_iteration", i, h.before_iteration(ctx)).await;
        }
        Ok(())
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        for (i, h) in self.hooks.iter().enumerate() {
            if h.wants_streaming() {
                isolated("on_stream", i, h.on_stream(delta)).await;
            }
        }
        Ok(())
    }

    async fn on_stream_end(&self, resuming: bool) -> Result<(), BoxError> {
        for (i, h) in self.hooks.iter().enumerate() {
            if h.wants_streaming() {
                isolated("on_stream_end", i, h.on_stream_end(resuming)).await;
            }
        }
        Ok(())
    }

    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        let mut vetoes: Vec<Veto> = Vec::new();
        for (i, h) in self.hooks.iter().enumerate() {
            if let Some(v) = isolated("before_execute_tools", i, h.before_execute_tools(batch)).await {
                for veto in v {
                    if !vetoes.iter().any(|x| x.call_id == veto.call_id) {
                        vetoes.push(veto);
                    }
                }
            }
        }
        Ok(vetoes)
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        for (i, h) in self.hooks.iter().enumerate() {
            isolated("after_iteration", i, h.after_iteration(ctx)).await;
        }
        Ok(())
    }

    async fn finalize_content(&self, content: String) -> Result<String, BoxError> {
        let mut current = content;
        for (i, h) in self.hooks.iter().enumerate() {
            if let Some(next) = isolated("finalize_content", i, h.finalize_content(current.clone())).await {
                current = next;
            }
        }
        Ok(current)
    }
}

/// Logs tool calls and usage with `tracing` (target `nanobot_core::hook`).
#[derive(Debug, Default, Clone, Copy)]
pub struct LoggingHook;

#[async_trait]
impl AgentHook for LoggingHook {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        for call in batch.calls {
            let args = crate::text::truncate_chars(&call.arguments_json(), 200);
            tracing::info!(iteration = batch.iteration, tool = %call.name, args = %args, "tool call");
        }
        Ok(Vec::new())
    }

    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        if let Some(u) = ctx.usage {
            tracing::info!(
                iteration = ctx.iteration,
                model = ctx.model,
                prompt_tokens = u.prompt_tokens,
                completion_tokens = u.completion_tokens,
                finish = %ctx.finish_reason,
                "model call"
            );
        }
        Ok(())
    }
}

/// Token totals collected by a [`UsageHook`] (shown by `/status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    /// Model calls counted.
    pub requests: u64,
    /// Input tokens, summed.
    pub prompt_tokens: u64,
    /// Output tokens, summed.
    pub completion_tokens: u64,
    /// Input tokens served from the prompt cache, summed.
    pub cache_read_tokens: u64,
    /// The last call's usage (its prompt size is the current context use).
    pub last: Option<Usage>,
}

/// Sums token usage over every model call it sees. Cheap to clone; clones share the totals.
#[derive(Debug, Clone, Default)]
pub struct UsageHook {
    totals: Arc<Mutex<UsageTotals>>,
}

impl UsageHook {
    /// A hook with zero totals.
    pub fn new() -> Self {
        Self::default()
    }

    /// The totals so far.
    pub fn totals(&self) -> UsageTotals {
        *lock(&self.totals)
    }

    /// Adds one call's usage.
    pub fn record(&self, usage: Option<Usage>) {
        let mut t = lock(&self.totals);
        t.requests += 1;
        if let Some(u) = usage {
            t.prompt_tokens += u.prompt_tokens;
            t.completion_tokens += u.completion_tokens;
            t.cache_read_tokens += u.cache_read_tokens.unwrap_or(0);
            t.last = Some(u);
        }
    }
}

#[async_trait]
impl AgentHook for UsageHook {
    async fn after_iteration(&self, ctx: &IterationEnd<'_>) -> Result<(), BoxError> {
        self.record(ctx.usage);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Failing;
    #[async_trait]
    impl AgentHook for Failing {
        async fn before_iteration(&self, _: &IterationStart<'_>) -> Result<(), BoxError> {
            Err("boom".into())
        }
        async fn finalize_content(&self, _: String) -> Result<String, BoxError> {
            panic!("hook panic")
        }
    }

    struct Counting(Arc<AtomicUsize>);
    #[async_trait]
    impl AgentHook for Counting {
        async fn before_iteration(&self, _: &IterationStart<'_>) -> Result<(), BoxError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        async fn finalize_content(&self, c: String) -> Result<String, BoxError> {
            Ok(format!("{c}!"))
        }
        async fn before_execute_tools(&self, b: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
            Ok(b.calls.iter().map(|c| Veto::new(&c.id, "no")).collect())
        }
    }

    #[tokio::test]
    async fn composite_isolates_failures_and_pipes_finalize() {
        let n = Arc::new(AtomicUsize::new(0));
        let hook = CompositeHook::new(vec![
            Arc::new(Failing),
            Arc::new(Counting(n.clone())),
            Arc::new(Counting(n.clone())),
        ]);
        hook.before_iteration(&IterationStart {
            iteration: 0,
            messages: &[],
        })
        .await
        .unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert_eq!(hook.finalize_content("a".into()).await.unwrap(), "a!!");
        let calls = [ToolCall::new("c1", "exec", serde_json::json!({}))];
        let v = hook
            .before_execute_tools(&ToolBatch {
                iteration: 0,
                assistant_text: None,
                calls: &calls,
                model: "m",
                usage: None,
            })
            .await
            .unwrap();
        assert_eq!(v, vec![Veto::new("c1", "no")], "duplicate vetoes are merged");
        assert!(!hook.wants_streaming());
    }

    #[tokio::test]
    async fn usage_hook_sums() {
        let h = UsageHook::new();
        let u = Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
            ..Usage::default()
        };
        h.record(Some(u));
        h.record(Some(u));
        h.record(None);
        let t = h.totals();
        assert_eq!((t.requests, t.prompt_tokens, t.completion_tokens), (3, 20, 10));
        assert_eq!(t.last, Some(u));
    }
}
