//! [`AgentLoop`]: consumes the bus, one worker per session key, slash commands, session saving, checkpoints and
//! recovery, progress and streaming, `system` routing; also [`AgentLoop::process_direct`] for the CLI and cron.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use async_trait::async_trait;
use chrono::Utc;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage, SYSTEM_CHANNEL};
use nanobot_cron::{CronJob, CronService, JobHandler, JobStore, PAYLOAD_SYSTEM_EVENT};
use nanobot_mcp::McpManager;
use nanobot_providers::{ChatMessage, Content, ContentPart, Provider};
use nanobot_sessions::{INTERRUPTED_TOOL_RESULT, SessionMessage, SessionStore};
use nanobot_skills::SkillsLoader;
use nanobot_tools::{Tool, ToolContext, ToolRegistry};
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::budget::ContextBudget;
use crate::commands::{self, Command, Parsed};
use crate::context::{ContextBuilder, TurnOrigin};
use crate::error::{BoxError, CoreError};
use crate::hook::{AgentHook, CompositeHook, LoggingHook, ToolBatch, UsageHook, Veto};
use crate::memory::{ConsolidationTrigger, MemoryService, raw_archive};
use crate::runner::{AgentRunner, CheckpointSink, RunCheckpoint, RunSpec, StopReason};
use crate::settings::AgentSettings;
use crate::subagent::{SubagentManager, SubagentSettings};
use crate::text::tool_hint;
use crate::tools::{CronTool, MessageTool, SpawnTool, TurnInfo};

/// Tool results longer than this are truncated in the stored session copy (the model saw them whole).
pub const STORED_TOOL_RESULT_MAX_CHARS: usize = 500;
/// What replaces inline images in stored sessions.
pub const IMAGE_PLACEHOLDER: &str = "[image]";
/// The assistant note stored after a user message whose turn was interrupted (`/stop`, shutdown, a killed
/// process) before any answer: the next turn sees the question and that it went unanswered, as in the Python
/// nanobot 0.3.5 (whose note carries the same `_recovery_interrupted` marker).
pub const TURN_INTERRUPTED_NOTE: &str = "Error: the turn was interrupted before an answer was produced.";
/// Messages kept in the prompt after `/compact` without a memory service.
const COMPACT_KEEP_MESSAGES: usize = 8;

/// How a turn is run and delivered.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// A cron-triggered turn (the `cron` tool refuses to add jobs).
    pub is_cron: bool,
    /// Publish progress, tool hints, streams and the reply on the bus (the bus-driven path).
    pub publish: bool,
    /// Receives visible answer text as it streams (CLI streaming).
    pub stream: Option<mpsc::UnboundedSender<String>>,
}

/// What a processed message produced.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnReply {
    /// The answer (or the command's output). Empty when the turn was cancelled.
    pub content: String,
    /// Why the turn ended (`None` for commands, which never call the model).
    pub stop_reason: Option<StopReason>,
    /// True when the `message` tool already delivered to this chat (no separate reply is sent).
    pub delivered_by_tool: bool,
    /// True when the answer was streamed on the bus and closed with a `StreamEnd` (no separate reply is sent).
    pub streamed: bool,
}

impl TurnReply {
    fn command(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            stop_reason: None,
            delivered_by_tool: false,
            streamed: false,
        }
    }
}

struct Job {
    msg: InboundMessage,
    opts: TurnOptions,
    reply: Option<oneshot::Sender<Result<TurnReply, CoreError>>>,
}

struct LoopInner {
    settings: AgentSettings,
    provider: Arc<dyn Provider>,
    tools: Arc<ToolRegistry>,
    sessions: SessionStore,
    context: ContextBuilder,
    hooks: Vec<Arc<dyn AgentHook>>,
    usage: UsageHook,
    memory: Option<Arc<dyn MemoryService>>,
    mcp: Option<McpManager>,
    mcp_registered: Mutex<HashSet<String>>,
    cron: Option<CronService>,
    subagents: SubagentManager,
    bus: RwLock<Option<Arc<dyn Bus>>>,
    workers: Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>,
    running: Mutex<HashMap<String, (u64, CancellationToken)>>,
    turn_seq: AtomicU64,
    permits: Arc<Semaphore>,
    started: Instant,
    shutdown: CancellationToken,
    /// Set by the first [`AgentLoop::shutdown`].
    stopped: std::sync::atomic::AtomicBool,
    /// The chat of the most recent message from a real channel (where the heartbeat reports).
    last_route: Mutex<Option<(String, String)>>,
    /// Memory work started after a turn (archives, consolidation); [`AgentLoop::finish_background`] waits.
    background: tokio_util::task::TaskTracker,
}

/// The agent loop. Cheap to clone; clones share everything.
///
/// Build it with [`AgentLoop::builder`] (the binaries use `nanobot_runtime::build_agent`), then hand it bus
/// messages with [`AgentLoop::submit`] or call [`AgentLoop::process_direct`]; stop it with
/// [`AgentLoop::shutdown`].
#[derive(Clone)]
pub struct AgentLoop {
    inner: Arc<LoopInner>,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("model", &self.inner.settings.model)
            .field("workspace", &self.inner.settings.workspace)
            .field("tools", &self.inner.tools.names())
            .finish_non_exhaustive()
    }
}

/// Builds an [`AgentLoop`].
pub struct AgentLoopBuilder {
    provider: Arc<dyn Provider>,
    settings: AgentSettings,
    sessions: Option<SessionStore>,
    base_tools: Option<Vec<Arc<dyn Tool>>>,
    extra_tools: Vec<Arc<dyn Tool>>,
    registry_settings: nanobot_tools::RegistrySettings,
    skills: Option<SkillsLoader>,
    hooks: Vec<Arc<dyn AgentHook>>,
    memory: Option<Arc<dyn MemoryService>>,
    mcp: Option<McpManager>,
    cron: Option<(JobStore, chrono_tz::Tz)>,
    bus: Option<Arc<dyn Bus>>,
}

impl std::fmt::Debug for AgentLoopBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoopBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AgentLoopBuilder {
    /// Uses this session store (default: `<data_dir>` sessions of the workspace).
    #[must_use]
    pub fn sessions(mut self, store: SessionStore) -> Self {
        self.sessions = Some(store);
        self
    }

    /// The tools shared with subagents (files, exec, web). Default: the file tools and `exec` with default
    /// settings, confined to the workspace.
    #[must_use]
    pub fn base_tools(mut self, tools: Vec<Arc<dyn Tool>>) -> Self {
        self.base_tools = Some(tools);
        self
    }

    /// Adds a tool for the main agent only.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.extra_tools.push(tool);
        self
    }

    /// Registry settings (long-result persistence).
    #[must_use]
    pub fn registry_settings(mut self, settings: nanobot_tools::RegistrySettings) -> Self {
        self.registry_settings = settings;
        self
    }

    /// Adds skills to the system prompt.
    #[must_use]
    pub fn skills(mut self, loader: SkillsLoader) -> Self {
        self.skills = Some(loader);
        self
    }

    /// Adds a hook (run in the order added, before the built-in ones).
    #[must_use]
    pub fn hook(mut self, hook: Arc<dyn AgentHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Uses long-term memory (consolidation, `/new` archiving, `/compact`, `/dream`).
    #[must_use]
    pub fn memory(mut self, memory: Arc<dyn MemoryService>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Connects these MCP servers before turns and offers their tools.
    #[must_use]
    pub fn mcp(mut self, manager: McpManager) -> Self {
        self.mcp = Some(manager);
        self
    }

    /// Enables the `cron` tool and the cron service over `store`, in `default_tz`.
    #[must_use]
    pub fn cron(mut self, store: JobStore, default_tz: chrono_tz::Tz) -> Self {
        self.cron = Some((store, default_tz));
        self
    }

    /// Attaches a bus now (for `message`/`spawn` in [`AgentLoop::process_direct`] and the replies of
    /// [`AgentLoop::submit`]).
    #[must_use]
    pub fn bus(mut self, bus: Arc<dyn Bus>) -> Self {
        self.bus = Some(bus);
        self
    }

    /// Builds the loop.
    pub fn build(self) -> Result<AgentLoop, CoreError> {
        let s = self.settings;
        std::fs::create_dir_all(&s.workspace).map_err(|e| CoreError::io("creating", &s.workspace, e))?;
        let sessions = match self.sessions {
            Some(st) => st,
            None => SessionStore::new(&s.data_dir, &s.workspace)?,
        };
        let base_tools = match self.base_tools {
            Some(t) => t,
            None => default_base_tools(&s)?,
        };
        let sub_reg = Arc::new(ToolRegistry::new(self.registry_settings.clone()));
        for t in &base_tools {
            sub_reg.register(t.clone());
        }
        let subagents = SubagentManager::new(
            self.provider.clone(),
            sub_reg,
            SubagentSettings {
                model: s.model.clone(),
                max_iterations: s.subagent_max_iterations,
                max_concurrent: s.max_concurrent_subagents,
                max_tokens: Some(s.max_tokens),
                temperature: s.temperature,
                workspace: s.workspace.clone(),
            },
        );
        let tools = Arc::new(ToolRegistry::new(self.registry_settings));
        for t in base_tools.into_iter().chain(self.extra_tools) {
            tools.register(t);
        }
        let attachments = nanobot_tools::sandbox::Sandbox::new(&s.workspace, s.restrict_to_workspace)
            .with_home(s.home.clone())
            .with_data_dir(Some(s.data_dir.clone()));
        tools.register(Arc::new(MessageTool::confined(
            attachments,
            s.data_dir.join("media").join("outbox"),
        )));
        tools.register(Arc::new(SpawnTool::new(subagents.clone())));
        let mut context = ContextBuilder::new(&s.workspace)
            .with_bot_name(&s.bot_name)
            .with_timezone(s.timezone);
        if let Some(sk) = self.skills {
            context = context.with_skills(sk);
        }
        let provider = self.provider;
        let hooks = self.hooks;
        let memory = self.memory;
        let mcp = self.mcp;
        let bus = self.bus;
        let cron_cfg = self.cron;
        let inner = Arc::new_cyclic(|weak: &Weak<LoopInner>| {
            let cron = cron_cfg.map(|(store, tz)| {
                let svc = CronService::new(store, cron_handler(weak.clone())).with_default_tz(tz);
                tools.register(Arc::new(CronTool::new(svc.clone())));
                svc
            });
            LoopInner {
                permits: Arc::new(Semaphore::new(s.max_concurrent_sessions.max(1))),
                settings: s,
                provider,
                tools,
                sessions,
                context,
                hooks,
                usage: UsageHook::new(),
                memory,
                mcp,
                mcp_registered: Mutex::default(),
                cron,
                subagents,
                bus: RwLock::new(bus),
                workers: Mutex::default(),
                running: Mutex::default(),
                turn_seq: AtomicU64::new(1),
                started: Instant::now(),
                shutdown: CancellationToken::new(),
                stopped: std::sync::atomic::AtomicBool::new(false),
                last_route: Mutex::default(),
                background: tokio_util::task::TaskTracker::new(),
            }
        });
        Ok(AgentLoop { inner })
    }
}

fn default_base_tools(s: &AgentSettings) -> Result<Vec<Arc<dyn Tool>>, CoreError> {
    let reg = ToolRegistry::default();
    let sandbox = nanobot_tools::sandbox::Sandbox::new(&s.workspace, true);
    nanobot_tools::builtin::register_fs_tools(&reg, &sandbox);
    let exec = nanobot_tools::ExecSettings {
        restrict_to_workspace: true,
        ..nanobot_tools::ExecSettings::default()
    };
    reg.register(Arc::new(nanobot_tools::builtin::ExecTool::new(
        exec,
        Arc::new(sandbox),
    )?));
    Ok(reg.names().into_iter().filter_map(|n| reg.get(&n)).collect())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AgentLoop {
    /// A builder for a loop calling `provider` with `settings`.
    pub fn builder(provider: Arc<dyn Provider>, settings: AgentSettings) -> AgentLoopBuilder {
        AgentLoopBuilder {
            provider,
            settings,
            sessions: None,
            base_tools: None,
            extra_tools: Vec::new(),
            registry_settings: nanobot_tools::RegistrySettings::default(),
            skills: None,
            hooks: Vec::new(),
            memory: None,
            mcp: None,
            cron: None,
            bus: None,
        }
    }

    /// A loop with default tools and sessions under `settings.data_dir`.
    pub fn new(provider: Arc<dyn Provider>, settings: AgentSettings) -> Result<Self, CoreError> {
        Self::builder(provider, settings).build()
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.inner.provider
    }

    /// The attached bus, if any.
    pub fn bus(&self) -> Option<Arc<dyn Bus>> {
        self.inner.bus()
    }

    /// The settings.
    pub fn settings(&self) -> &AgentSettings {
        &self.inner.settings
    }

    /// The main agent's tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.inner.tools
    }

    /// The session store.
    pub fn sessions(&self) -> &SessionStore {
        &self.inner.sessions
    }

    /// The cron service, when cron is enabled (the gateway runs `service.run(cancel)`).
    pub fn cron(&self) -> Option<&CronService> {
        self.inner.cron.as_ref()
    }

    /// The MCP manager, when MCP servers are configured.
    pub fn mcp(&self) -> Option<&McpManager> {
        self.inner.mcp.as_ref()
    }

    /// The long-term memory service, when configured.
    pub(crate) fn memory_service(&self) -> Option<&Arc<dyn MemoryService>> {
        self.inner.memory.as_ref()
    }

    /// The chat of the most recent message from a real channel, if any since start.
    pub(crate) fn last_route(&self) -> Option<(String, String)> {
        lock(&self.inner.last_route).clone()
    }

    /// Token totals since start.
    pub fn usage(&self) -> crate::hook::UsageTotals {
        self.inner.usage.totals()
    }

    /// Attaches a bus (where [`AgentLoop::submit`] publishes, and `message` and `spawn` deliver).
    pub fn set_bus(&self, bus: Arc<dyn Bus>) {
        *self.inner.bus.write().unwrap_or_else(|p| p.into_inner()) = Some(bus);
    }

    /// Hands one bus message to the agent: the one place that decides who answers it. `/stop`, `/help`,
    /// `/status` and unknown commands are answered at once (even while a turn of the session runs); anything
    /// else is queued in its session (turns of one session keep their order, different sessions run
    /// concurrently up to `max_concurrent_sessions`). Every reply, progress message and stream goes out on the
    /// attached bus. The message is queued before this returns; the returned future resolves when its turn is
    /// done (awaiting it is optional).
    pub fn submit(
        &self,
        msg: InboundMessage,
    ) -> impl std::future::Future<Output = Result<TurnReply, CoreError>> + Send + 'static {
        self.inner.note_route(&msg);
        let (tx, rx) = oneshot::channel();
        if self.inner.is_immediate(&msg) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                let content = inner.immediate_command(&msg).await.unwrap_or_default();
                if let Some(bus) = inner.bus()
                    && let Err(e) = bus.publish_outbound(reply_for(&msg, content.clone())).await
                {
                    tracing::warn!(error = %e, "cannot publish a command reply");
                }
                let _ = tx.send(Ok(TurnReply::command(content)));
            });
        } else {
            self.inner.enqueue(Job {
                msg,
                opts: TurnOptions {
                    publish: true,
                    ..TurnOptions::default()
                },
                reply: Some(tx),
            });
        }
        async move { rx.await.map_err(|_| CoreError::Stopped)? }
    }

    /// Stops the agent for good: running turns are cancelled (they still save what they did), queued ones fail
    /// with [`CoreError::Stopped`], MCP servers are shut down. Idempotent.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        if self.inner.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(mcp) = &self.inner.mcp {
            mcp.shutdown().await;
        }
        tracing::info!("agent loop stopped");
    }

    /// True once [`AgentLoop::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Processes `text` in session `session_key` (`channel:chat_id`; `cli:direct` by default in the CLI) and
    /// returns the answer. Commands work too. Turns of one session are serialised with the bus-driven ones.
    pub async fn process_direct(&self, text: &str, session_key: &str) -> Result<String, CoreError> {
        let (channel, chat_id) = match session_key.split_once(':') {
            Some((c, id)) => (c.to_owned(), id.to_owned()),
            None => ("cli".to_owned(), session_key.to_owned()),
        };
        let msg = InboundMessage::new(channel, "user", chat_id, text).with_session_key(session_key);
        Ok(self.process_message(msg, TurnOptions::default()).await?.content)
    }

    /// Processes one message with `opts` (streaming, cron, publishing) and returns the reply.
    pub async fn process_message(
        &self,
        msg: InboundMessage,
        opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        if let Some(reply) = self.inner.immediate_command(&msg).await {
            return Ok(TurnReply::command(reply));
        }
        let (tx, rx) = oneshot::channel();
        self.inner.enqueue(Job {
            msg,
            opts,
            reply: Some(tx),
        });
        rx.await.map_err(|_| CoreError::Stopped)?
    }

    /// Cancels the running turn and the subagents of `session_key`; returns how many tasks were stopped.
    pub fn stop_session(&self, session_key: &str) -> usize {
        self.inner.stop_session(session_key)
    }

    /// Waits up to `limit` for the memory work started after turns (the `/new` archive, consolidation) to
    /// finish. True when nothing is left running; false when `limit` passed first (the work is left as it is:
    /// the session still holds what was not archived).
    pub async fn finish_background(&self, limit: std::time::Duration) -> bool {
        let tracker = &self.inner.background;
        tracker.close();
        let done = tokio::time::timeout(limit, tracker.wait()).await.is_ok();
        tracker.reopen();
        done
    }

    /// Runs a cron job as a turn (what the cron service's handler does); delivers when the job says so.
    pub async fn run_cron_job(&self, job: CronJob) -> Result<String, BoxError> {
        self.inner.clone().run_cron_job(job).await
    }
}

fn reply_for(msg: &InboundMessage, content: String) -> OutboundMessage {
    let mut out = OutboundMessage::reply(&msg.channel, &msg.chat_id, content);
    out.metadata = msg.metadata.clone();
    out
}

fn cron_handler(weak: Weak<LoopInner>) -> JobHandler {
    Arc::new(move |job: CronJob| {
        let weak = weak.clone();
        Box::pin(async move {
            let inner = weak
                .upgrade()
                .ok_or_else(|| -> BoxError { "the agent loop has stopped".into() })?;
            inner.run_cron_job(job).await
        })
    })
}

impl LoopInner {
    pub(crate) fn bus(&self) -> Option<Arc<dyn Bus>> {
        self.bus.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn session_key(&self, msg: &InboundMessage) -> String {
        if msg.session_key_override.is_none()
            && self.settings.unified_session
            && msg.channel != SYSTEM_CHANNEL
        {
            return "unified:default".to_owned();
        }
        msg.session_key()
    }

    /// Remembers the chat of a message from a real channel (not the API, CLI, cron, …).
    fn note_route(&self, msg: &InboundMessage) {
        if !crate::heartbeat::is_internal_channel(&msg.channel) && !msg.chat_id.is_empty() {
            *lock(&self.last_route) = Some((msg.channel.clone(), msg.chat_id.clone()));
        }
    }

    /// Commands answered at once, without waiting for the session's queue.
    fn is_immediate(&self, msg: &InboundMessage) -> bool {
        msg.channel != SYSTEM_CHANNEL
            && matches!(
                commands::parse(&msg.content),
                Some(
                    Parsed::Known(Command::Stop | Command::Help | Command::Status, _)
                        | Parsed::Unknown { .. }
                )
            )
    }

    fn stop_session(&self, key: &str) -> usize {
        let mut n = 0;
        if let Some((_, token)) = lock(&self.running).remove(key) {
            token.cancel();
            n += 1;
        }
        n + self.subagents.cancel_session(key)
    }

    /// Commands answered without waiting for the session's queue; `None` for anything else.
    async fn immediate_command(&self, msg: &InboundMessage) -> Option<String> {
        if msg.channel == SYSTEM_CHANNEL {
            return None;
        }
        let key = self.session_key(msg);
        match commands::parse(&msg.content)? {
            Parsed::Known(Command::Stop, _) => {
                let n = self.stop_session(&key);
                Some(if n == 0 {
                    "No active task to stop.".to_owned()
                } else {
                    format!("⏹ Stopped {n} task(s).")
                })
            }
            Parsed::Known(Command::Help, _) => Some(commands::help_text()),
            Parsed::Known(Command::Status, _) => Some(self.status_text(&key).await),
            Parsed::Unknown { name, suggestion } => Some(commands::unknown_text(&name, suggestion)),
            Parsed::Known(..) => None,
        }
    }

    async fn status_text(&self, key: &str) -> String {
        let t = self.usage.totals();
        let (count, unconsolidated, last) = self
            .sessions
            .with_session(key, |s| {
                let last = s
                    .metadata
                    .get("_last_usage")
                    .and_then(|u| u.get("prompt_tokens").or_else(|| u.get("input_tokens")))
                    .and_then(Value::as_u64);
                (s.messages.len(), s.unconsolidated().len(), last)
            })
            .await
            .unwrap_or((0, 0, None));
        let ctx_used = last.or(t.last.map(|u| u.prompt_tokens)).unwrap_or(0);
        let window = u64::from(self.settings.context_window_tokens.max(1));
        let secs = self.started.elapsed().as_secs();
        format!(
            "🐈 nanobot status\nModel: {}\nTokens: {} in / {} out ({} requests)\nContext: {} / {} tokens ({}%)\n\
             Session: {} messages ({} unconsolidated)\nSubagents running: {}\nUptime: {}h {}m {}s",
            self.settings.model,
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

    fn enqueue(self: &Arc<Self>, job: Job) {
        let key = match job.msg.channel.as_str() {
            SYSTEM_CHANNEL => system_target(&job.msg).2,
            _ => self.session_key(&job.msg),
        };
        let mut workers = lock(&self.workers);
        let job = match workers.get(&key) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // Cannot fail: the receiver is alive.
        let _ = tx.send(job);
        workers.insert(key.clone(), tx);
        drop(workers);
        let this = self.clone();
        tokio::spawn(async move { this.worker(key, rx).await });
    }

    async fn worker(self: Arc<Self>, key: String, mut rx: mpsc::UnboundedReceiver<Job>) {
        loop {
            let job = match rx.try_recv() {
                Ok(job) => job,
                Err(_) => {
                    let mut workers = lock(&self.workers);
                    match rx.try_recv() {
                        Ok(job) => job,
                        Err(_) => {
                            workers.remove(&key);
                            return;
                        }
                    }
                }
            };
            let permit = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => None,
                p = self.permits.clone().acquire_owned() => p.ok(),
            };
            let Some(_permit) = permit else {
                if let Some(tx) = job.reply {
                    let _ = tx.send(Err(CoreError::Stopped));
                }
                continue;
            };
            let Job { msg, opts, reply } = job;
            let publish = opts.publish;
            let result = self.handle(&key, &msg, opts).await;
            if publish && let Some(bus) = self.bus() {
                match &result {
                    Ok(r) => self.publish_reply(&bus, &msg, r).await,
                    Err(e) => {
                        tracing::error!(session = %key, error = %e, "turn failed");
                        let out = reply_for(&msg, format!("Sorry, something went wrong: {e}"));
                        let _ = bus.publish_outbound(out).await;
                    }
                }
            }
            if let Some(tx) = reply {
                let _ = tx.send(result);
            }
        }
    }

    async fn publish_reply(&self, bus: &Arc<dyn Bus>, msg: &InboundMessage, r: &TurnReply) {
        // Streamed finals are closed by the turn itself (StreamEnd); cancelled turns and tool-delivered answers
        // send nothing more.
        if r.delivered_by_tool
            || r.streamed
            || r.stop_reason == Some(StopReason::Cancelled)
            || r.content.is_empty()
        {
            return;
        }
        let (channel, chat_id) = if msg.channel == SYSTEM_CHANNEL {
            let (c, id, _) = system_target(msg);
            (c, id)
        } else {
            (msg.channel.clone(), msg.chat_id.clone())
        };
        let mut out = OutboundMessage::reply(channel, chat_id, r.content.clone());
        if msg.channel != SYSTEM_CHANNEL {
            out.metadata = msg.metadata.clone();
        }
        if let Err(e) = bus.publish_outbound(out).await {
            tracing::warn!(error = %e, "cannot publish a reply");
        }
    }

    async fn handle(
        self: &Arc<Self>,
        key: &str,
        msg: &InboundMessage,
        opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        self.recover_checkpoint(key).await;
        if msg.channel != SYSTEM_CHANNEL
            && let Some(Parsed::Known(cmd, args)) = commands::parse(&msg.content)
        {
            return self.queued_command(key, cmd, &args).await.map(TurnReply::command);
        }
        let (channel, chat_id) = if msg.channel == SYSTEM_CHANNEL {
            let (c, id, _) = system_target(msg);
            (c, id)
        } else {
            (msg.channel.clone(), msg.chat_id.clone())
        };
        self.turn(key, msg, &channel, &chat_id, opts).await
    }

    async fn queued_command(&self, key: &str, cmd: Command, args: &str) -> Result<String, CoreError> {
        match cmd {
            Command::New => {
                if self.memory.is_none() {
                    // Archive first, so a failure never loses the conversation.
                    let current = self.sessions.session(key).await?;
                    if !current.unconsolidated().is_empty() {
                        let ws = self.settings.workspace.clone();
                        let k = key.to_owned();
                        let path = ws.join("memory").join("history.jsonl");
                        tokio::task::spawn_blocking(move || raw_archive(&ws, &k, current.unconsolidated()))
                            .await
                            .map_err(|e| CoreError::Config(format!("archive task failed: {e}")))?
                            .map_err(|e| CoreError::io("appending to", path, e))?;
                    }
                }
                let old = self.sessions.reset(key).await?;
                if let Some(m) = &self.memory
                    && old.messages.len() > old.last_consolidated
                {
                    let m = m.clone();
                    self.background.spawn(async move {
                        if let Err(e) = m.archive_session(old).await {
                            tracing::warn!(error = %e, "archiving the session failed");
                        }
                    });
                }
                Ok("New session started.".to_owned())
            }
            Command::Compact => match &self.memory {
                Some(m) => match m.consolidate(key, ConsolidationTrigger::Compact).await {
                    Ok(r) => Ok(format!(
                        "Compacted: {} messages archived into memory.",
                        r.archived_messages
                    )),
                    Err(e) => Ok(format!("Compaction failed: {e}")),
                },
                None => self.compact_raw(key).await,
            },
            Command::Dream => match &self.memory {
                Some(m) => Ok(m.dream().await.unwrap_or_else(|e| format!("Dream failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            Command::DreamLog => match &self.memory {
                Some(m) => Ok(m
                    .dream_log(args)
                    .await
                    .unwrap_or_else(|e| format!("Dream log failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            Command::DreamRestore => match &self.memory {
                Some(m) => Ok(m
                    .dream_restore(args)
                    .await
                    .unwrap_or_else(|e| format!("Dream restore failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            // Answered before queueing; kept for completeness.
            Command::Help => Ok(commands::help_text()),
            Command::Status => Ok(self.status_text(key).await),
            Command::Stop => Ok("No active task to stop.".to_owned()),
        }
    }

    /// `/compact` without a memory service: archive all but a short tail as raw text and move the pointer.
    async fn compact_raw(&self, key: &str) -> Result<String, CoreError> {
        let session = self.sessions.session(key).await?;
        let start = session.last_consolidated.min(session.messages.len());
        let len = session.messages.len();
        if len.saturating_sub(start) <= COMPACT_KEEP_MESSAGES {
            return Ok("Nothing to compact yet.".to_owned());
        }
        // Keep a tail that starts at a user message.
        let mut keep_from = len - COMPACT_KEEP_MESSAGES;
        while keep_from < len && session.messages[keep_from].role() != Some("user") {
            keep_from += 1;
        }
        if keep_from >= len || keep_from <= start {
            return Ok("Nothing to compact yet.".to_owned());
        }
        let slice = session.messages[start..keep_from].to_vec();
        let ws = self.settings.workspace.clone();
        let k = key.to_owned();
        let n = slice.len();
        tokio::task::spawn_blocking(move || raw_archive(&ws, &k, &slice))
            .await
            .map_err(|e| CoreError::Config(format!("archive task failed: {e}")))?
            .map_err(|e| {
                CoreError::io(
                    "appending to",
                    self.settings.workspace.join("memory/history.jsonl"),
                    e,
                )
            })?;
        self.sessions.set_last_consolidated(key, keep_from).await?;
        Ok(format!(
            "Compacted: {n} older messages archived (raw); the last {} kept.",
            len - keep_from
        ))
    }

    async fn connect_mcp(&self) {
        let Some(mcp) = &self.mcp else { return };
        mcp.connect().await;
        let mut registered = lock(&self.mcp_registered);
        for tool in mcp.tools() {
            if registered.insert(tool.name().to_owned()) {
                self.tools.register(tool);
            }
        }
    }

    async fn history(&self, key: &str) -> Result<Vec<ChatMessage>, CoreError> {
        let stored = self
            .sessions
            .history(key, self.settings.max_history_messages)
            .await?;
        Ok(stored
            .into_iter()
            .filter_map(|m| {
                let mut map = m.into_map();
                if map.get("role").and_then(Value::as_str) == Some("user")
                    && let Some(Value::String(text)) = map.get("content")
                {
                    let clean = crate::context::strip_runtime_context(text);
                    map.insert("content".into(), Value::String(clean));
                }
                serde_json::from_value::<ChatMessage>(Value::Object(map))
                    .map_err(|e| tracing::debug!(error = %e, "history: skipped an unreadable message"))
                    .ok()
            })
            .collect())
    }

    async fn turn(
        self: &Arc<Self>,
        key: &str,
        msg: &InboundMessage,
        channel: &str,
        chat_id: &str,
        opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        self.connect_mcp().await;
        let history = self.history(key).await?;
        let origin = TurnOrigin {
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
        };
        let messages = self.context.build_messages(
            history,
            &msg.content,
            &msg.media,
            &origin,
            msg.timestamp.max(Utc::now()),
        );
        let stored_user = stored_user_message(msg);

        let turn_id = self.turn_seq.fetch_add(1, Ordering::SeqCst);
        let cancel = self.shutdown.child_token();
        lock(&self.running).insert(key.to_owned(), (turn_id, cancel.clone()));

        let bus = self.bus();
        let mut info = TurnInfo::new(bus.clone());
        info.is_cron = opts.is_cron;
        info.metadata = if msg.channel == SYSTEM_CHANNEL {
            Map::new()
        } else {
            msg.metadata.clone()
        };
        let mut ctx = ToolContext::new(&self.settings.workspace)
            .with_session(key)
            .with_route(channel, chat_id)
            .with_cancel(cancel.clone());
        ctx.extensions.insert(info.clone());

        let mut hooks: Vec<Arc<dyn AgentHook>> = self.hooks.clone();
        hooks.push(Arc::new(self.usage.clone()));
        hooks.push(Arc::new(LoggingHook));
        let wants_stream = msg.wants_stream;
        let bus_hook = match (&bus, opts.publish) {
            (Some(b), true) => Some(Arc::new(BusHook::new(
                b.clone(),
                channel,
                chat_id,
                info.metadata.clone(),
                self.settings.tool_hint_max_length,
                wants_stream,
                turn_id,
            ))),
            _ => None,
        };
        if let Some(h) = &bus_hook {
            hooks.push(h.clone());
        }
        if let Some(tx) = &opts.stream {
            hooks.push(Arc::new(ChannelStreamHook(tx.clone())));
        }
        let sink = Arc::new(SessionCheckpoint {
            store: self.sessions.clone(),
            key: key.to_owned(),
            user: stored_user.clone(),
            turn_id,
        });
        // Before the model is asked: a checkpoint holding the user's message, so a turn killed at any point
        // (SIGTERM, a caller's timeout killing the process) keeps the question.
        sink.begin().await;
        let runner = AgentRunner::new(self.provider.clone(), self.tools.clone())
            .with_hook(Arc::new(CompositeHook::new(hooks)))
            .with_checkpoints(sink);
        let s = &self.settings;
        let mut spec = RunSpec::new(messages, &s.model, ctx);
        spec.max_iterations = s.max_tool_iterations;
        spec.max_tokens = Some(s.max_tokens);
        spec.temperature = s.temperature;
        spec.reasoning_effort = s.reasoning_effort.clone();
        spec.budget = Some(ContextBudget::new(
            s.context_window_tokens as usize,
            s.max_tokens as usize,
        ));
        // The turn's deadline: when it passes, the run is cancelled like `/stop` and the user is told why.
        let limit = s.turn_timeout;
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchdog = {
            let (cancel, timed_out) = (cancel.clone(), timed_out.clone());
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                timed_out.store(true, Ordering::SeqCst);
                cancel.cancel();
            })
        };
        let mut result = runner.run(spec).await;
        watchdog.abort();
        if result.stop_reason == StopReason::Cancelled && timed_out.load(Ordering::SeqCst) {
            tracing::warn!(session = %key, ?limit, "turn stopped at its deadline");
            result.stop_reason = StopReason::Error;
            result.content = format!(
                "Sorry, this request took longer than the turn limit of {} and was stopped \
                 (agents.defaults.timeouts.turn).",
                human_duration(limit)
            );
        }

        {
            let mut running = lock(&self.running);
            if running.get(key).is_some_and(|(id, _)| *id == turn_id) {
                running.remove(key);
            }
        }

        // Save the turn: the user's message, then everything the run added (sanitised copies).
        let mut stored = vec![stored_user];
        stored.extend(result.new_messages().iter().map(stored_message));
        if result.stop_reason == StopReason::Cancelled && stored.len() == 1 {
            stored.push(interrupted_note());
        }
        self.sessions.append(key, stored).await?;
        if let Err(e) = self.sessions.clear_checkpoint(key).await {
            tracing::warn!(session = %key, error = %e, "cannot clear the checkpoint");
        }
        if let Some(u) = result.last_usage {
            let usage = json!({
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.total_tokens,
            });
            let _ = self
                .sessions
                .update_header(key, move |h| {
                    h.metadata.insert("_last_usage".into(), usage);
                })
                .await;
        }
        if let Some(m) = &self.memory
            && result.stop_reason != StopReason::Cancelled
        {
            let m = m.clone();
            let k = key.to_owned();
            self.background.spawn(async move {
                if let Err(e) = m.consolidate(&k, ConsolidationTrigger::AfterTurn).await {
                    tracing::warn!(session = %k, error = %e, "background consolidation failed");
                }
            });
        }

        let delivered = info.message_sent.load(Ordering::SeqCst);
        let mut reply = TurnReply {
            content: result.content.clone(),
            stop_reason: Some(result.stop_reason),
            delivered_by_tool: delivered,
            streamed: false,
        };
        if result.stop_reason == StopReason::Cancelled {
            reply.content.clear();
            return Ok(reply);
        }
        // A streamed final answer is closed here (StreamEnd with the final text); nothing else is sent for it.
        if let Some(h) = &bus_hook
            && !delivered
            && let Some(stream_id) = h.final_stream_id()
        {
            let mut out = OutboundMessage::of_kind(
                OutboundKind::StreamEnd { stream_id },
                channel,
                chat_id,
                &reply.content,
            );
            out.metadata = info.metadata.clone();
            if let Err(e) = h.bus.publish_outbound(out).await {
                tracing::warn!(error = %e, "cannot publish the end of a stream");
            }
            reply.streamed = true;
        }
        Ok(reply)
    }

    async fn recover_checkpoint(&self, key: &str) {
        let cp = match self.sessions.read_checkpoint(key).await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %key, error = %e, "unreadable checkpoint ignored");
                let _ = self.sessions.clear_checkpoint(key).await;
                return;
            }
        };
        match recovered_messages(&cp) {
            Some(msgs) => {
                tracing::warn!(session = %key, messages = msgs.len(), "recovering an interrupted turn from its checkpoint");
                if let Err(e) = self.sessions.append(key, msgs).await {
                    tracing::error!(session = %key, error = %e, "cannot restore the checkpoint");
                    return;
                }
            }
            None => tracing::warn!(session = %key, "malformed checkpoint ignored"),
        }
        let _ = self.sessions.clear_checkpoint(key).await;
    }

    async fn run_cron_job(self: Arc<Self>, job: CronJob) -> Result<String, BoxError> {
        if job.payload.kind == PAYLOAD_SYSTEM_EVENT {
            return match crate::system_jobs::SystemJob::from_id(&job.id) {
                Some(system) => AgentLoop { inner: self }.run_system_job(system).await,
                None => {
                    tracing::warn!(job = %job.id, "unknown system job ignored");
                    Ok(String::new())
                }
            };
        }
        let p = &job.payload;
        let channel = p
            .channel
            .clone()
            .or_else(|| p.origin_channel.clone())
            .unwrap_or_else(|| "cron".into());
        let chat =
            p.to.clone()
                .or_else(|| p.origin_chat_id.clone())
                .unwrap_or_else(|| job.id.clone());
        let key = p
            .session_key
            .clone()
            .unwrap_or_else(|| format!("cron:{}", job.id));
        let mut msg = InboundMessage::new(channel.clone(), "cron", chat.clone(), p.message.clone())
            .with_session_key(key);
        msg.metadata = if p.is_bound() {
            p.origin_metadata.clone()
        } else {
            p.channel_meta.clone()
        };
        let (tx, rx) = oneshot::channel();
        self.enqueue(Job {
            msg,
            opts: TurnOptions {
                is_cron: true,
                ..TurnOptions::default()
            },
            reply: Some(tx),
        });
        let reply = rx
            .await
            .map_err(|_| -> BoxError { "the agent loop has stopped".into() })??;
        if (p.deliver || p.is_bound())
            && !reply.delivered_by_tool
            && !reply.content.is_empty()
            && let Some(bus) = self.bus()
        {
            let mut out = OutboundMessage::reply(channel, chat, reply.content.clone());
            out.metadata = if p.is_bound() {
                p.origin_metadata.clone()
            } else {
                p.channel_meta.clone()
            };
            bus.publish_outbound(out).await?;
        }
        Ok(reply.content)
    }
}

/// `(channel, chat_id, session key)` a `system` message is routed back to: `chat_id` is `channel:chat`.
fn system_target(msg: &InboundMessage) -> (String, String, String) {
    let (c, id) = match msg.chat_id.split_once(':') {
        Some((c, id)) => (c.to_owned(), id.to_owned()),
        None => ("cli".to_owned(), msg.chat_id.clone()),
    };
    let key = msg
        .session_key_override
        .clone()
        .unwrap_or_else(|| format!("{c}:{id}"));
    (c, id, key)
}

/// The user's message as stored: the original text (no runtime context), images named, not inlined.
fn stored_user_message(msg: &InboundMessage) -> SessionMessage {
    let mut text = msg.content.clone();
    for m in &msg.media {
        let kind = if crate::context::image_mime(std::path::Path::new(m)).is_some() {
            "image"
        } else {
            "file"
        };
        text.push_str(&format!("\n[{kind}: {m}]"));
    }
    let mut sm = SessionMessage::new("user", text);
    if msg.channel == SYSTEM_CHANNEL {
        sm = sm.with("sender_id", msg.sender_id.clone());
    }
    sm
}

/// A message as stored: tool results over [`STORED_TOOL_RESULT_MAX_CHARS`] truncated, inline images replaced.
pub fn stored_message(m: &ChatMessage) -> SessionMessage {
    let m = match m {
        ChatMessage::Tool {
            tool_call_id,
            name,
            content,
        } => {
            let text = content.text();
            let text = if text.chars().count() > STORED_TOOL_RESULT_MAX_CHARS {
                let head: String = text.chars().take(STORED_TOOL_RESULT_MAX_CHARS).collect();
                format!("{head}\n... (truncated)")
            } else {
                text
            };
            ChatMessage::Tool {
                tool_call_id: tool_call_id.clone(),
                name: name.clone(),
                content: Content::Text(text),
            }
        }
        ChatMessage::User {
            content: Content::Parts(parts),
        } => ChatMessage::User {
            content: Content::Parts(
                parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::ImageUrl { url, .. } if url.starts_with("data:") => {
                            ContentPart::text(IMAGE_PLACEHOLDER)
                        }
                        other => other.clone(),
                    })
                    .collect(),
            ),
        },
        other => other.clone(),
    };
    match serde_json::to_value(&m) {
        Ok(Value::Object(map)) => SessionMessage::from_map(map),
        _ => SessionMessage::new(m.role(), m.text()),
    }
}

/// The note closing a user message whose turn ended without an answer.
fn interrupted_note() -> SessionMessage {
    SessionMessage::new("assistant", TURN_INTERRUPTED_NOTE).with("_recovery_interrupted", true)
}

/// The messages to append for a checkpoint: user message, completed messages, and an "interrupted" result for
/// every call of the last assistant message that has none. A checkpoint written before the model answered
/// (no `run`) gives the user message and [`TURN_INTERRUPTED_NOTE`].
fn recovered_messages(cp: &Value) -> Option<Vec<SessionMessage>> {
    let user: SessionMessage = serde_json::from_value(cp.get("user")?.clone()).ok()?;
    let run: RunCheckpoint = match cp.get("run") {
        Some(v) => serde_json::from_value(v.clone()).ok()?,
        None => return Some(vec![user, interrupted_note()]),
    };
    let mut out = vec![user];
    let mut answered: HashSet<String> = HashSet::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    for m in &run.messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => {
                answered.clear();
                pending = tool_calls
                    .iter()
                    .map(|c| (c.id.clone(), c.name.clone()))
                    .collect();
            }
            ChatMessage::Tool { tool_call_id, .. } => {
                answered.insert(tool_call_id.clone());
            }
            _ => {}
        }
        out.push(stored_message(m));
    }
    for (id, name) in pending {
        if !answered.contains(&id) {
            out.push(stored_message(&ChatMessage::tool_result(
                id,
                name,
                INTERRUPTED_TOOL_RESULT,
            )));
        }
    }
    Some(out)
}

/// Stores run checkpoints beside the session file.
struct SessionCheckpoint {
    store: SessionStore,
    key: String,
    user: SessionMessage,
    turn_id: u64,
}

impl SessionCheckpoint {
    /// The opening checkpoint: the user's message, before the model is asked.
    async fn begin(&self) {
        let payload = json!({"version": 1, "turn": self.turn_id, "user": self.user});
        if let Err(e) = self.store.write_checkpoint(&self.key, &payload).await {
            tracing::warn!(session = %self.key, error = %e, "cannot write the opening checkpoint");
        }
    }
}

#[async_trait]
impl CheckpointSink for SessionCheckpoint {
    async fn save(&self, checkpoint: &RunCheckpoint) {
        let payload = json!({
            "version": 1,
            "turn": self.turn_id,
            "user": self.user,
            "run": checkpoint,
        });
        if let Err(e) = self.store.write_checkpoint(&self.key, &payload).await {
            tracing::warn!(session = %self.key, error = %e, "cannot write a checkpoint");
        }
    }
}

/// Publishes progress text, tool hints and stream deltas of one turn on the bus.
struct BusHook {
    bus: Arc<dyn Bus>,
    channel: String,
    chat_id: String,
    metadata: Map<String, Value>,
    hint_len: usize,
    stream: bool,
    turn_id: u64,
    state: Mutex<StreamState>,
}

#[derive(Default)]
struct StreamState {
    seq: u64,
    current: Option<String>,
    text: String,
    final_id: Option<String>,
}

impl BusHook {
    fn new(
        bus: Arc<dyn Bus>,
        channel: &str,
        chat_id: &str,
        metadata: Map<String, Value>,
        hint_len: usize,
        stream: bool,
        turn_id: u64,
    ) -> Self {
        Self {
            bus,
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
            metadata,
            hint_len,
            stream,
            turn_id,
            state: Mutex::default(),
        }
    }

    fn final_stream_id(&self) -> Option<String> {
        lock(&self.state).final_id.clone()
    }

    async fn send(&self, kind: OutboundKind, content: String) {
        let mut out = OutboundMessage::of_kind(kind, &self.channel, &self.chat_id, content);
        out.metadata = self.metadata.clone();
        if let Err(e) = self.bus.publish_outbound(out).await {
            tracing::debug!(error = %e, "cannot publish progress");
        }
    }
}

#[async_trait]
impl AgentHook for BusHook {
    fn wants_streaming(&self) -> bool {
        self.stream
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        let id = {
            let mut st = lock(&self.state);
            if st.current.is_none() {
                st.seq += 1;
                st.current = Some(format!("t{}-{}", self.turn_id, st.seq));
            }
            st.text.push_str(delta);
            st.current.clone().unwrap_or_default()
        };
        self.send(OutboundKind::StreamDelta { stream_id: id }, delta.to_owned())
            .await;
        Ok(())
    }

    async fn on_stream_end(&self, resuming: bool) -> Result<(), BoxError> {
        let ended = {
            let mut st = lock(&self.state);
            if resuming {
                st.final_id = None;
                st.current.take().map(|id| (id, std::mem::take(&mut st.text)))
            } else {
                st.final_id = st.current.clone();
                None
            }
        };
        if let Some((stream_id, text)) = ended {
            self.send(OutboundKind::StreamEnd { stream_id }, text).await;
        }
        Ok(())
    }

    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        if !self.stream
            && let Some(text) = batch.assistant_text
        {
            self.send(OutboundKind::Progress, text.to_owned()).await;
        }
        let hints: Vec<String> = batch.calls.iter().map(|c| tool_hint(c, self.hint_len)).collect();
        if !hints.is_empty() {
            self.send(OutboundKind::ToolHint, hints.join("\n")).await;
        }
        Ok(Vec::new())
    }
}

/// Forwards visible deltas to a channel (CLI streaming).
struct ChannelStreamHook(mpsc::UnboundedSender<String>);

#[async_trait]
impl AgentHook for ChannelStreamHook {
    fn wants_streaming(&self) -> bool {
        true
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        let _ = self.0.send(delta.to_owned());
        Ok(())
    }
}

/// `90s`, `1m 30s`, `250ms`.
fn human_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else {
        format!("{d:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_providers::ToolCall;

    #[test]
    fn stored_copies_truncate_results_and_drop_inline_images() {
        let long = "x".repeat(1200);
        let m = stored_message(&ChatMessage::tool_result("c1", "read_file", long));
        let text = m.content_text().unwrap();
        assert!(text.starts_with(&"x".repeat(500)) && text.ends_with("... (truncated)"));
        assert!(text.len() < 600);
        let u = stored_message(&ChatMessage::user_parts(vec![
            ContentPart::image_url("data:image/png;base64,AAAA"),
            ContentPart::text("hi"),
        ]));
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(v["content"][0]["text"], IMAGE_PLACEHOLDER);
        assert!(!v.to_string().contains("base64"));
    }

    #[test]
    fn recovery_closes_pending_calls_without_rerunning() {
        let run = RunCheckpoint {
            phase: crate::runner::CheckpointPhase::AwaitingTools,
            iteration: 0,
            messages: vec![
                ChatMessage::assistant_tool_calls(
                    None,
                    vec![
                        ToolCall::new("a", "read_file", json!({})),
                        ToolCall::new("b", "exec", json!({})),
                    ],
                ),
                ChatMessage::tool_result("a", "read_file", "done"),
            ],
        };
        let cp = json!({"user": SessionMessage::new("user", "go"), "run": run});
        let msgs = recovered_messages(&cp).unwrap();
        let roles: Vec<_> = msgs.iter().map(|m| m.role().unwrap().to_owned()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
        assert_eq!(msgs[3].tool_call_id(), Some("b"));
        assert_eq!(msgs[3].content_text().as_deref(), Some(INTERRUPTED_TOOL_RESULT));
    }

    #[test]
    fn system_messages_route_to_their_origin() {
        let m = InboundMessage::new(SYSTEM_CHANNEL, "subagent", "telegram:42", "done");
        assert_eq!(
            system_target(&m),
            ("telegram".into(), "42".into(), "telegram:42".into())
        );
    }
}
