//! [`AgentRunner`]: the model ⇄ tools loop, reusable by the main agent, subagents, Dream and the API.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, ResponseAccumulator,
    StreamEvent, ToolCall, ToolSpec, Usage,
};
use nanobot_tools::{ERROR_HINT, ToolContext, ToolRegistry};
use serde::{Deserialize, Serialize};
use tracing::Instrument;
use tracing::field::Empty;

use crate::budget::ContextBudget;
use crate::hook::{AgentHook, CompositeHook, IterationEnd, IterationStart, ToolBatch};
use crate::text::{StreamThinkFilter, strip_think};

/// How many times a `finish_reason = length` answer is continued.
const MAX_LENGTH_CONTINUATIONS: usize = 3;

/// The answer when the model returns nothing even after a retry.
pub(crate) const EMPTY_FINAL_RESPONSE: &str = "The model gave an empty answer twice (the second time after being asked \
     again), so there is nothing to show. Try rephrasing the request; a very small model may need a larger one.";

const EMPTY_RETRY_PROMPT: &str = "Your previous reply was empty. Please give your final answer to the user now: \
     summarise what you found or did.";
const CONTINUE_PROMPT: &str = "Your answer was cut off by the output limit. Continue exactly where you stopped, \
     without repeating anything.";
const FINAL_CALL_PROMPT: &str = "You have reached the maximum number of tool calls for this turn. Do not call any \
     more tools: give your best final answer now, based on what you already have.";

/// The fixed answer when the iteration cap is reached without a final answer.
pub(crate) fn max_iterations_message(n: usize) -> String {
    format!(
        "I reached the maximum number of tool call iterations ({n}) without completing the task. \
         You can try breaking the task into smaller steps, or raise agents.defaults.maxToolIterations in \
         config.json."
    )
}

/// How many rounds in a row may repeat the very same tool calls (names and arguments) before the run stops: a
/// confused small model otherwise loops until the iteration cap, at tens of seconds a call.
pub(crate) const REPEATED_CALLS_LIMIT: usize = 3;

/// The answer when the model repeated the same tool calls [`REPEATED_CALLS_LIMIT`] times in a row.
pub(crate) fn repeated_calls_message(tool: &str) -> String {
    format!(
        "I stopped because the model called `{tool}` with the same arguments {REPEATED_CALLS_LIMIT} times in a \
         row without getting further. Try rephrasing the request, breaking it into smaller steps, or a larger model."
    )
}

/// Why the tool loop was cut short.
enum Cap {
    Iterations,
    Repeated(String),
}

/// The final answer after a cap: what happened, then the model's own summary when it gave one (never tool-call
/// text it wrote instead of calling a tool).
fn capped_answer(header: String, summary: &str, tools: &[String]) -> String {
    let summary = summary.trim();
    if summary.is_empty() || nanobot_providers::contains_text_tool_call(summary, tools) {
        header
    } else {
        format!("{header}\n\nWhere the model got to:\n\n{summary}")
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model gave a final answer.
    Completed,
    /// The iteration cap was reached.
    MaxIterations,
    /// A model call failed; the content explains it to the user.
    Error,
    /// The run was cancelled (`/stop`, shutdown).
    Cancelled,
}

/// Everything one run needs besides the runner's provider, tools and hook.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The conversation so far: system prompt, history, and the new user message.
    pub messages: Vec<ChatMessage>,
    /// The model to call.
    pub model: String,
    /// Maximum model calls with tools (`agents.defaults.maxToolIterations`).
    pub max_iterations: usize,
    /// Output-token limit.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort for models that support it.
    pub reasoning_effort: Option<String>,
    /// The input budget; `None` sends the conversation as is.
    pub budget: Option<ContextBudget>,
    /// Where tools run; its `cancel` token stops the run.
    pub tool_context: ToolContext,
    /// Registered tools not offered to the model in this run (they cannot work here: the goal tools outside a
    /// goal). A call of one anyway still reaches the tool, which refuses what it cannot do.
    pub hidden_tools: Vec<String>,
}

impl RunSpec {
    /// A spec with these messages and model, 40 iterations, no budget and a context for `workspace`.
    pub fn new(messages: Vec<ChatMessage>, model: impl Into<String>, tool_context: ToolContext) -> Self {
        Self {
            messages,
            model: model.into(),
            max_iterations: 40,
            max_tokens: None,
            temperature: None,
            reasoning_effort: None,
            budget: None,
            tool_context,
            hidden_tools: Vec::new(),
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunResult {
    /// What the user sees: the final answer, or a clear message about why there is none.
    pub content: String,
    /// The whole conversation: the spec's messages followed by everything this run added.
    pub messages: Vec<ChatMessage>,
    /// Index in `messages` of the first message this run added.
    pub turn_start: usize,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// Token usage summed over every model call.
    pub usage: Usage,
    /// The last model call's usage (its prompt size is the context in use).
    pub last_usage: Option<Usage>,
    /// Model calls made.
    pub iterations: usize,
    /// Names of the tools called, in order.
    pub tools_used: Vec<String>,
    /// The provider error that ended the run, if any (for logs; `content` holds the user-facing text).
    pub error: Option<String>,
}

impl RunResult {
    /// The messages this run added (assistant messages and tool results).
    pub fn new_messages(&self) -> &[ChatMessage] {
        &self.messages[self.turn_start.min(self.messages.len())..]
    }
}

/// Where a run is when a checkpoint is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointPhase {
    /// The assistant asked for tools; they are about to run.
    AwaitingTools,
    /// The tools of the last assistant message have all returned.
    ToolsCompleted,
}

/// A snapshot of a run in progress, enough to recover after a crash without re-running any tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCheckpoint {
    /// Where the run was.
    pub phase: CheckpointPhase,
    /// The iteration (0-based).
    pub iteration: usize,
    /// The messages the run added so far (assistant messages and completed tool results).
    pub messages: Vec<ChatMessage>,
}

/// Receives checkpoints (the agent loop stores them beside the session).
#[async_trait]
pub trait CheckpointSink: Send + Sync {
    /// Stores `checkpoint`, replacing the previous one. Failures are the sink's to log.
    async fn save(&self, checkpoint: &RunCheckpoint);
}

/// A user-facing explanation of a failed model call: the cause, the endpoint and what to change (no secrets:
/// provider errors never carry keys, endpoints are shown without credentials).
pub(crate) fn provider_error_message(err: &ProviderError) -> String {
    match err {
        ProviderError::Auth { .. } => format!(
            "Sorry, the AI provider rejected the credentials. Please check the API key in the configuration. ({err})"
        ),
        ProviderError::RateLimited { provider, .. } => {
            format!(
                "Sorry, the AI provider ({provider}) is rate-limiting requests right now. Please try again in a moment."
            )
        }
        ProviderError::QuotaExceeded { provider, .. } => {
            format!("Sorry, the AI provider ({provider}) reports that the quota or credit is exhausted.")
        }
        ProviderError::ContextLengthExceeded { .. } => match err.served_context_window() {
            Some(window) => format!(
                "Sorry, this conversation is too long for the model ({err}). The model's server serves {window} \
                 tokens of context: set agents.defaults.contextWindowTokens to {window} (and maxTokens to a \
                 quarter of it or less) so older history is archived and left out first, or start the server \
                 with a larger context (llama.cpp: -c; llama-cpp-python: --n_ctx). Use /compact or /new to go on \
                 now."
            ),
            None => format!(
                "Sorry, this conversation is too long for the model ({err}). Use /compact or /new and try again. \
                 If even a short conversation fails, the model's context window is smaller than \
                 agents.defaults.contextWindowTokens says: set it to the model's real size (for a local server, \
                 its context option, e.g. llama.cpp's -c), so older history is archived and left out first."
            ),
        },
        ProviderError::Unreachable { .. } => format!("Sorry, I cannot reach the AI provider. {err}"),
        ProviderError::Transient { provider, .. } => {
            format!(
                "Sorry, the AI provider ({provider}) is temporarily unavailable ({err}). Please try again."
            )
        }
        other => format!("Sorry, I could not get an answer from the AI model: {other}"),
    }
}

enum CallError {
    Provider(ProviderError),
    Cancelled,
}

/// Runs the model ⇄ tools loop. Cheap to clone.
///
/// Consecutive concurrency-safe tool calls of one answer run in parallel; any other call runs alone, in order.
/// Results are appended in call order. See [`AgentRunner::run`].
#[derive(Clone)]
pub struct AgentRunner {
    provider: Arc<dyn Provider>,
    tools: Arc<ToolRegistry>,
    hook: Arc<dyn AgentHook>,
    checkpoints: Option<Arc<dyn CheckpointSink>>,
}

impl std::fmt::Debug for AgentRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRunner")
            .field("provider", &self.provider.name())
            .field("tools", &self.tools.names())
            .finish_non_exhaustive()
    }
}

impl AgentRunner {
    /// A runner calling `provider` with `tools`, no hooks and no checkpoints.
    pub fn new(provider: Arc<dyn Provider>, tools: Arc<ToolRegistry>) -> Self {
        Self {
            provider,
            tools,
            hook: Arc::new(CompositeHook::default()),
            checkpoints: None,
        }
    }

    /// Uses `hook` (wrap several in a [`CompositeHook`]).
    #[must_use]
    pub fn with_hook(mut self, hook: Arc<dyn AgentHook>) -> Self {
        self.hook = hook;
        self
    }

    /// Writes checkpoints to `sink` after each assistant message with tool calls and after its tools complete.
    #[must_use]
    pub fn with_checkpoints(mut self, sink: Arc<dyn CheckpointSink>) -> Self {
        self.checkpoints = Some(sink);
        self
    }

    /// The tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Runs until a final answer, the iteration cap, an error or cancellation. Never panics on provider errors:
    /// they end the run with [`StopReason::Error`] and a clear `content`.
    pub async fn run(&self, spec: RunSpec) -> RunResult {
        let RunSpec {
            messages,
            model,
            max_iterations,
            max_tokens,
            temperature,
            reasoning_effort,
            budget,
            tool_context,
            hidden_tools,
        } = spec;
        let turn_start = messages.len();
        // Shared with each request: a call copies a pointer, not the conversation. The request is gone by the
        // time a message is added, so `make_mut` adds it in place.
        let mut messages = Arc::new(messages);
        let cancel = tool_context.cancel.clone();
        let streaming = self.hook.wants_streaming();
        let mut tally = Tally {
            turn_start,
            ..Tally::default()
        };
        let mut extra: Vec<ChatMessage> = Vec::new();
        let mut partial = String::new();
        let mut continuations = 0usize;
        let mut empty_retried = false;
        let max_iterations = max_iterations.max(1);
        let mut cap = Cap::Iterations;
        let mut last_batch: Option<String> = None;
        let mut repeats = 0usize;

        while tally.iterations < max_iterations {
            if cancel.is_cancelled() {
                return tally.finish(messages, String::new(), StopReason::Cancelled, None);
            }
            let mut tool_specs = self.tools.definitions();
            tool_specs.retain(|t| !hidden_tools.contains(&t.name));
            let request_messages = self.request_messages(&messages, &extra, budget.as_ref(), &tool_specs);
            let _ = self
                .hook
                .before_iteration(&IterationStart {
                    iteration: tally.iterations,
                    messages: &request_messages,
                })
                .await;
            let request = ChatRequest {
                model: model.clone(),
                messages: request_messages,
                tools: tool_specs,
                max_tokens,
                temperature,
                reasoning_effort: reasoning_effort.clone(),
                tool_choice: None,
            };
            let response = match self.call_model(request, streaming, &cancel).await {
                Ok(r) => r,
                Err(CallError::Cancelled) => {
                    return tally.finish(messages, String::new(), StopReason::Cancelled, None);
                }
                Err(CallError::Provider(e)) => {
                    tracing::error!(error = %e, "model call failed; ending the turn");
                    let content = provider_error_message(&e);
                    tally.iterations += 1;
                    return tally.finish(messages, content, StopReason::Error, Some(e.to_string()));
                }
            };
            tally.iterations += 1;
            tally.record(response.usage);

            if response.has_tool_calls() {
                extra.clear();
                let text = response
                    .content
                    .as_deref()
                    .map(strip_think)
                    .filter(|t| !t.is_empty());
                let mut assistant = response.to_message();
                if let ChatMessage::Assistant { content, .. } = &mut assistant {
                    *content = text.clone();
                }
                Arc::make_mut(&mut messages).push(assistant);
                self.checkpoint(
                    CheckpointPhase::AwaitingTools,
                    tally.iterations - 1,
                    &messages[turn_start..],
                )
                .await;
                let vetoes = self
                    .hook
                    .before_execute_tools(&ToolBatch {
                        iteration: tally.iterations - 1,
                        assistant_text: text.as_deref(),
                        calls: &response.tool_calls,
                        model: &model,
                        usage: response.usage,
                    })
                    .await
                    .unwrap_or_default();
                tally
                    .tools_used
                    .extend(response.tool_calls.iter().map(|c| c.name.clone()));
                let results = self
                    .execute_tools(&response.tool_calls, &vetoes, &tool_context)
                    .await;
                if cancel.is_cancelled() {
                    return tally.finish(messages, String::new(), StopReason::Cancelled, None);
                }
                let conversation = Arc::make_mut(&mut messages);
                for (call, result) in response.tool_calls.iter().zip(results) {
                    conversation.push(ChatMessage::tool_result(&call.id, &call.name, result));
                }
                let batch: String = response
                    .tool_calls
                    .iter()
                    .map(|c| format!("{}\u{0}{}\u{0}", c.name, c.arguments))
                    .collect();
                repeats = if last_batch.as_deref() == Some(batch.as_str()) {
                    repeats + 1
                } else {
                    1
                };
                last_batch = Some(batch);
                self.checkpoint(
                    CheckpointPhase::ToolsCompleted,
                    tally.iterations - 1,
                    &messages[turn_start..],
                )
                .await;
                let _ = self
                    .hook
                    .after_iteration(&IterationEnd {
                        iteration: tally.iterations - 1,
                        model: &model,
                        usage: response.usage,
                        finish_reason: &response.finish_reason,
                        tool_calls: &response.tool_calls,
                    })
                    .await;
                if repeats >= REPEATED_CALLS_LIMIT {
                    let tool = response.tool_calls[0].name.clone();
                    tracing::warn!(tool = %tool, repeats, "the model repeats the same tool calls; stopping the loop");
                    cap = Cap::Repeated(tool);
                    break;
                }
                continue;
            }

            let _ = self
                .hook
                .after_iteration(&IterationEnd {
                    iteration: tally.iterations - 1,
                    model: &model,
                    usage: response.usage,
                    finish_reason: &response.finish_reason,
                    tool_calls: &response.tool_calls,
                })
                .await;
            let raw = response.content.as_deref().unwrap_or_default();
            if response.finish_reason == FinishReason::Length && continuations < MAX_LENGTH_CONTINUATIONS {
                continuations += 1;
                partial.push_str(raw);
                extra = vec![
                    ChatMessage::assistant(strip_think(&partial)),
                    ChatMessage::user(CONTINUE_PROMPT),
                ];
                continue;
            }
            let mut joined = std::mem::take(&mut partial);
            joined.push_str(raw);
            let full = strip_think(&joined);
            if full.is_empty() && !empty_retried {
                empty_retried = true;
                extra = vec![ChatMessage::user(EMPTY_RETRY_PROMPT)];
                continue;
            }
            let full = if full.trim().is_empty() {
                EMPTY_FINAL_RESPONSE.to_owned()
            } else {
                full
            };
            let content = self.hook.finalize_content(full.clone()).await.unwrap_or(full);
            let mut assistant = response.to_message();
            if let ChatMessage::Assistant { content: c, .. } = &mut assistant {
                *c = Some(content.clone());
            }
            Arc::make_mut(&mut messages).push(assistant);
            return tally.finish(messages, content, StopReason::Completed, None);
        }

        // The cap: one last call without tools.
        if matches!(cap, Cap::Iterations) {
            tracing::warn!(max_iterations, "maximum tool iterations reached");
        }
        let tool_names = self.tools.names();
        let final_prompt = [ChatMessage::user(FINAL_CALL_PROMPT)];
        let no_tools: &[Arc<ToolSpec>] = &[];
        let request_messages = self.request_messages(&messages, &final_prompt, budget.as_ref(), no_tools);
        let request = ChatRequest {
            model: model.clone(),
            messages: request_messages,
            tools: Vec::new(),
            max_tokens,
            temperature,
            reasoning_effort,
            tool_choice: None,
        };
        // Never streamed: what the user sees is the composed answer below, and the model's summary only once it
        // is known not to be tool-call text (offered no tools, a small model writes its call as text, and a
        // stream would put that on the user's screen as it comes).
        let text = match self.call_model(request, false, &cancel).await {
            Ok(r) => {
                tally.record(r.usage);
                // Recorded (and counted by the hooks) like every other call.
                let _ = self
                    .hook
                    .after_iteration(&IterationEnd {
                        iteration: tally.iterations,
                        model: &model,
                        usage: r.usage,
                        finish_reason: &r.finish_reason,
                        tool_calls: &[],
                    })
                    .await;
                strip_think(r.content.as_deref().unwrap_or_default())
            }
            Err(CallError::Cancelled) => {
                return tally.finish(messages, String::new(), StopReason::Cancelled, None);
            }
            Err(CallError::Provider(e)) => {
                tracing::warn!(error = %e, "final call after the iteration cap failed");
                String::new()
            }
        };
        let header = match cap {
            Cap::Iterations => max_iterations_message(max_iterations),
            Cap::Repeated(tool) => repeated_calls_message(&tool),
        };
        let content = capped_answer(header, &text, &tool_names);
        let content = self
            .hook
            .finalize_content(content.clone())
            .await
            .unwrap_or(content);
        Arc::make_mut(&mut messages).push(ChatMessage::assistant(content.clone()));
        tally.iterations += 1;
        tally.finish(messages, content, StopReason::MaxIterations, None)
    }

    /// The messages of a request: the conversation followed by `extra` (a continuation or a retry prompt), fitted
    /// to `budget`. The conversation itself, shared, when nothing is added and it fits by the heuristic (the
    /// usual case); a copy only when something is added or trimmed.
    fn request_messages(
        &self,
        messages: &Arc<Vec<ChatMessage>>,
        extra: &[ChatMessage],
        budget: Option<&ContextBudget>,
        tools: &[Arc<ToolSpec>],
    ) -> Arc<Vec<ChatMessage>> {
        let tools_rough = || {
            if tools.is_empty() {
                0
            } else {
                self.tools.definitions_rough_tokens()
            }
        };
        if extra.is_empty() && budget.is_none_or(|b| b.fits_roughly(messages, tools_rough())) {
            return messages.clone();
        }
        let mut all = Vec::with_capacity(messages.len() + extra.len());
        all.extend(messages.iter().cloned());
        all.extend(extra.iter().cloned());
        Arc::new(match budget {
            Some(b) if !b.fits_roughly(&all, tools_rough()) => {
                b.fit_owned(all, tools, &self.read_only_tools())
            }
            _ => all,
        })
    }

    fn read_only_tools(&self) -> HashSet<String> {
        self.tools
            .names()
            .into_iter()
            .filter(|n| self.tools.get(n).is_some_and(|t| t.read_only()))
            .collect()
    }

    async fn checkpoint(&self, phase: CheckpointPhase, iteration: usize, added: &[ChatMessage]) {
        if let Some(sink) = &self.checkpoints {
            sink.save(&RunCheckpoint {
                phase,
                iteration,
                messages: added.to_vec(),
            })
            .await;
        }
    }

    /// One model call in its span (`chat <model>`, OpenTelemetry's GenAI names): model, tokens, finish reason,
    /// outcome; never the messages.
    async fn call_model(
        &self,
        request: ChatRequest,
        streaming: bool,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<ChatResponse, CallError> {
        let span = crate::model_span::span(&request.model, streaming);
        let result = self
            .call_model_untraced(request, streaming, cancel)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(r) => crate::model_span::record_answer(&span, r),
            Err(CallError::Cancelled) => crate::model_span::record_failure(&span, "cancelled"),
            Err(CallError::Provider(p)) => crate::model_span::record_failure(&span, p.kind()),
        }
        result
    }

    async fn call_model_untraced(
        &self,
        request: ChatRequest,
        streaming: bool,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<ChatResponse, CallError> {
        if !streaming {
            return tokio::select! {
                biased;
                () = cancel.cancelled() => Err(CallError::Cancelled),
                r = self.provider.chat(request) => r.map_err(CallError::Provider),
            };
        }
        let mut stream = self.provider.stream(request);
        let mut acc = ResponseAccumulator::default();
        let mut filter = StreamThinkFilter::default();
        loop {
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(CallError::Cancelled),
                e = stream.next() => e,
            };
            match event {
                None => break,
                Some(Err(e)) => return Err(CallError::Provider(e)),
                Some(Ok(ev)) => {
                    if let StreamEvent::TextDelta(t) = &ev {
                        let visible = filter.push(t);
                        if !visible.is_empty() {
                            let _ = self.hook.on_stream(&visible).await;
                        }
                    }
                    acc.push(ev);
                }
            }
        }
        let rest = filter.finish();
        if !rest.is_empty() {
            let _ = self.hook.on_stream(&rest).await;
        }
        let response = acc.finish();
        let _ = self.hook.on_stream_end(response.has_tool_calls()).await;
        Ok(response)
    }

    /// Runs the calls: consecutive concurrency-safe calls together, anything else alone; results in call order.
    async fn execute_tools(
        &self,
        calls: &[ToolCall],
        vetoes: &[crate::hook::Veto],
        ctx: &ToolContext,
    ) -> Vec<String> {
        let mut results: Vec<Option<String>> = vec![None; calls.len()];
        let mut i = 0;
        while i < calls.len() {
            let safe = |c: &ToolCall| self.tools.get(&c.name).is_some_and(|t| t.concurrency_safe());
            let mut j = i + 1;
            if safe(&calls[i]) {
                while j < calls.len() && safe(&calls[j]) {
                    j += 1;
                }
            }
            let batch = (i..j).map(|k| {
                let call = &calls[k];
                let veto = vetoes
                    .iter()
                    .find(|v| v.call_id == call.id)
                    .map(|v| v.reason.clone());
                async move { (k, self.execute_one(call, veto, ctx).await) }
            });
            for (k, r) in futures::future::join_all(batch).await {
                results[k] = Some(r);
            }
            if ctx.cancel.is_cancelled() {
                break;
            }
            i = j;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| "Error: cancelled before this tool ran.".to_owned()))
            .collect()
    }

    /// One tool call in its span (`execute_tool <name>`): the tool, the call id and the outcome (`ok`, `error`,
    /// `refused`, `invalid_arguments`); never the arguments or the result.
    async fn execute_one(&self, call: &ToolCall, veto: Option<String>, ctx: &ToolContext) -> String {
        let span = tracing::info_span!(
            target: nanobot_util::trace::TARGET,
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.kind = "internal",
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            nanobot.outcome = Empty,
        );
        let outcome = |what: &'static str| {
            span.record("nanobot.outcome", what);
            if what != "ok" {
                span.record("otel.status_code", "ERROR");
            }
        };
        if let Some(reason) = veto {
            outcome("refused");
            return format!("Error: this tool call was refused: {reason}");
        }
        if let Some(err) = &call.arguments_error {
            outcome("invalid_arguments");
            return format!(
                "Error: the arguments for tool '{}' are not valid JSON ({err}).{ERROR_HINT}",
                call.name
            );
        }
        let ctx = ctx.clone().with_call_id(call.id.clone());
        let out = self
            .tools
            .execute(&call.name, call.arguments.clone(), &ctx)
            .instrument(span.clone())
            .await;
        outcome(if out.is_error { "error" } else { "ok" });
        let mut text = out.text;
        for m in out.media {
            text.push_str(&format!("\n[media: {}]", m.display()));
        }
        text
    }
}

/// What a run has counted so far; ends as the tail of its [`RunResult`].
#[derive(Default)]
struct Tally {
    turn_start: usize,
    usage: Usage,
    last_usage: Option<Usage>,
    iterations: usize,
    tools_used: Vec<String>,
}

impl Tally {
    /// Adds one response's usage (and remembers it as the last one).
    fn record(&mut self, usage: Option<Usage>) {
        if let Some(u) = usage {
            add_usage(&mut self.usage, &u);
            self.last_usage = Some(u);
        }
    }

    /// The run's result: what was counted, with the final messages (the conversation itself once no request
    /// holds it any more, as at every return), content and reason.
    fn finish(
        self,
        messages: Arc<Vec<ChatMessage>>,
        content: String,
        stop_reason: StopReason,
        error: Option<String>,
    ) -> RunResult {
        RunResult {
            content,
            messages: Arc::unwrap_or_clone(messages),
            turn_start: self.turn_start,
            stop_reason,
            usage: self.usage,
            last_usage: self.last_usage,
            iterations: self.iterations,
            tools_used: self.tools_used,
            error,
        }
    }
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.total_tokens += u.total_tokens;
    if let Some(c) = u.cache_read_tokens {
        *total.cache_read_tokens.get_or_insert(0) += c;
    }
    if let Some(r) = u.reasoning_tokens {
        *total.reasoning_tokens.get_or_insert(0) += r;
    }
    if let Some(c) = u.cache_write_tokens {
        *total.cache_write_tokens.get_or_insert(0) += c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_sums_usage_keeps_the_last_and_ends_in_the_result() {
        let mut tally = Tally {
            turn_start: 2,
            ..Tally::default()
        };
        let one = Usage {
            prompt_tokens: 10,
            completion_tokens: 1,
            total_tokens: 11,
            ..Usage::default()
        };
        let two = Usage {
            prompt_tokens: 20,
            completion_tokens: 2,
            total_tokens: 22,
            ..Usage::default()
        };
        tally.record(Some(one));
        tally.record(None);
        tally.record(Some(two));
        tally.iterations = 3;
        tally.tools_used.push("exec".into());
        let r = tally.finish(Arc::default(), "done".into(), StopReason::Completed, None);
        assert_eq!(
            (
                r.usage.prompt_tokens,
                r.usage.completion_tokens,
                r.usage.total_tokens
            ),
            (30, 3, 33)
        );
        assert_eq!(r.last_usage.map(|u| u.total_tokens), Some(22));
        assert_eq!((r.turn_start, r.iterations, r.content.as_str()), (2, 3, "done"));
        assert_eq!(r.tools_used, ["exec"]);
        assert_eq!(r.stop_reason, StopReason::Completed);
    }
}
