//! The embedding API: [`Agent::builder`] → [`Agent::run`] / [`Agent::run_streaming`], with no config file, bus or
//! session store. The agent keeps its conversation in memory.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_providers::{ChatMessage, Provider, Usage};
use nanobot_tools::{Tool, ToolContext, ToolRegistry};
use tokio::sync::{Mutex, mpsc};

use crate::budget::ContextBudget;
use crate::context::{ContextBuilder, TurnOrigin};
use crate::error::{BoxError, CoreError};
use crate::hook::{AgentHook, CompositeHook};
use crate::runner::{AgentRunner, RunSpec, StopReason};

/// The answer of one [`Agent::run`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentResponse {
    /// The final answer (or a clear message about why there is none).
    pub content: String,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// Token usage summed over the run.
    pub usage: Usage,
    /// Tools called, in order.
    pub tools_used: Vec<String>,
    /// The provider error that ended the run, if any.
    pub error: Option<String>,
}

/// Builds an [`Agent`]. Only the provider is required.
pub struct AgentBuilder {
    provider: Option<Arc<dyn Provider>>,
    workspace: Option<PathBuf>,
    model: String,
    tools: Vec<Arc<dyn Tool>>,
    file_tools: bool,
    exec: bool,
    hooks: Vec<Arc<dyn AgentHook>>,
    instructions: Option<String>,
    bot_name: String,
    max_iterations: usize,
    max_tokens: u32,
    temperature: Option<f64>,
    context_window_tokens: usize,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("workspace", &self.workspace)
            .field("model", &self.model)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl Default for AgentBuilder {
    fn default() -> Self {
        Self {
            provider: None,
            workspace: None,
            model: String::new(),
            tools: Vec::new(),
            file_tools: true,
            exec: false,
            hooks: Vec::new(),
            instructions: None,
            bot_name: "nanobot".into(),
            max_iterations: 40,
            max_tokens: 8192,
            temperature: None,
            context_window_tokens: 200_000,
        }
    }
}

impl AgentBuilder {
    /// The model provider (required).
    #[must_use]
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The workspace (default: the current directory). File tools are confined to it.
    #[must_use]
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// The model name sent to the provider.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Adds a tool.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Whether the built-in file tools are offered (default: yes, confined to the workspace).
    #[must_use]
    pub fn file_tools(mut self, on: bool) -> Self {
        self.file_tools = on;
        self
    }

    /// Whether `exec` is offered (default: no).
    #[must_use]
    pub fn exec(mut self, on: bool) -> Self {
        self.exec = on;
        self
    }

    /// Adds a hook (run in the order added).
    #[must_use]
    pub fn hook(mut self, hook: Arc<dyn AgentHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Extra instructions appended to the system prompt.
    #[must_use]
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// The agent's name in its system prompt.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.bot_name = name.into();
        self
    }

    /// Maximum tool iterations per run (default 40).
    #[must_use]
    pub fn max_iterations(mut self, n: usize) -> Self {
        self.max_iterations = n.max(1);
        self
    }

    /// Output-token limit (default 8192).
    #[must_use]
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// Sampling temperature.
    #[must_use]
    pub fn temperature(mut self, t: f64) -> Self {
        self.temperature = Some(t);
        self
    }

    /// The model's context window (default 200,000 tokens).
    #[must_use]
    pub fn context_window(mut self, tokens: usize) -> Self {
        self.context_window_tokens = tokens;
        self
    }

    /// Builds the agent.
    pub fn build(self) -> Result<Agent, CoreError> {
        let provider = self
            .provider
            .ok_or_else(|| CoreError::Builder("a provider is required: call .provider(..)".into()))?;
        let workspace = match self.workspace {
            Some(w) => w,
            None => {
                std::env::current_dir().map_err(|e| CoreError::io("reading the current directory", ".", e))?
            }
        };
        let tools = Arc::new(ToolRegistry::default());
        let sandbox = nanobot_tools::sandbox::Sandbox::new(&workspace, true);
        if self.file_tools {
            nanobot_tools::builtin::register_fs_tools(&tools, &sandbox);
        }
        if self.exec {
            let settings = nanobot_tools::ExecSettings {
                restrict_to_workspace: true,
                ..nanobot_tools::ExecSettings::default()
            };
            tools.register(Arc::new(nanobot_tools::builtin::ExecTool::new(
                settings,
                Arc::new(sandbox),
            )?));
        }
        for t in self.tools {
            tools.register(t);
        }
        let mut context = ContextBuilder::new(&workspace).with_bot_name(self.bot_name);
        if let Some(i) = self.instructions {
            context = context.with_instructions(i);
        }
        Ok(Agent {
            inner: Arc::new(Inner {
                provider,
                tools,
                hooks: self.hooks,
                context,
                workspace,
                model: self.model,
                max_iterations: self.max_iterations,
                max_tokens: self.max_tokens,
                temperature: self.temperature,
                budget: ContextBudget::new(self.context_window_tokens, self.max_tokens as usize),
                history: Mutex::new(Vec::new()),
            }),
        })
    }
}

struct Inner {
    provider: Arc<dyn Provider>,
    tools: Arc<ToolRegistry>,
    hooks: Vec<Arc<dyn AgentHook>>,
    context: ContextBuilder,
    workspace: PathBuf,
    model: String,
    max_iterations: usize,
    max_tokens: u32,
    temperature: Option<f64>,
    budget: ContextBudget,
    history: Mutex<Vec<ChatMessage>>,
}

/// An embeddable agent: a provider, a workspace, tools and hooks, and an in-memory conversation. Cheap to clone;
/// runs of one agent are serialised.
///
/// ```no_run
/// # async fn demo(provider: std::sync::Arc<dyn nanobot_providers::Provider>) -> Result<(), nanobot_core::CoreError> {
/// let agent = nanobot_core::Agent::builder().provider(provider).workspace("/tmp/ws").model("gpt-4o-mini").build()?;
/// let answer = agent.run("List the files in the workspace").await?;
/// println!("{}", answer.content);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.inner.model)
            .field("workspace", &self.inner.workspace)
            .field("tools", &self.inner.tools.names())
            .finish_non_exhaustive()
    }
}

struct DeltaHook(mpsc::UnboundedSender<String>);

#[async_trait]
impl AgentHook for DeltaHook {
    fn wants_streaming(&self) -> bool {
        true
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        let _ = self.0.send(delta.to_owned());
        Ok(())
    }
}

impl Agent {
    /// A builder.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    /// The tools the agent has.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.inner.tools
    }

    /// Forgets the conversation.
    pub async fn reset(&self) {
        self.inner.history.lock().await.clear();
    }

    /// Runs one turn and returns the answer. A failing model call gives `Ok` with
    /// [`StopReason::Error`] and an explanation in `content`.
    pub async fn run(&self, text: &str) -> Result<AgentResponse, CoreError> {
        self.run_inner(text, None).await
    }

    /// Like [`Agent::run`], calling `on_delta` with each piece of visible answer text as it streams.
    pub async fn run_streaming<F>(&self, text: &str, mut on_delta: F) -> Result<AgentResponse, CoreError>
    where
        F: FnMut(&str) + Send,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let run = self.run_inner(text, Some(tx));
        tokio::pin!(run);
        loop {
            tokio::select! {
                biased;
                Some(delta) = rx.recv() => on_delta(&delta),
                result = &mut run => {
                    while let Ok(delta) = rx.try_recv() {
                        on_delta(&delta);
                    }
                    return result;
                }
            }
        }
    }

    async fn run_inner(
        &self,
        text: &str,
        stream: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<AgentResponse, CoreError> {
        let inner = &self.inner;
        let mut history = inner.history.lock().await;
        let origin = TurnOrigin {
            channel: "api".into(),
            ..TurnOrigin::default()
        };
        let messages = inner
            .context
            .build_messages(history.clone(), text, &[], &origin, chrono::Utc::now());
        let mut hooks = inner.hooks.clone();
        if let Some(tx) = stream {
            hooks.push(Arc::new(DeltaHook(tx)));
        }
        let runner = AgentRunner::new(inner.provider.clone(), inner.tools.clone())
            .with_hook(Arc::new(CompositeHook::new(hooks)));
        let ctx = ToolContext::new(&inner.workspace)
            .with_session("api:embedded")
            .with_route("api", "embedded");
        let mut spec = RunSpec::new(messages, &inner.model, ctx);
        spec.max_iterations = inner.max_iterations;
        spec.max_tokens = Some(inner.max_tokens);
        spec.temperature = inner.temperature;
        spec.budget = Some(inner.budget);
        let result = runner.run(spec).await;
        history.push(ChatMessage::user(text));
        history.extend(result.new_messages().iter().cloned());
        Ok(AgentResponse {
            content: result.content,
            stop_reason: result.stop_reason,
            usage: result.usage,
            tools_used: result.tools_used,
            error: result.error,
        })
    }
}
