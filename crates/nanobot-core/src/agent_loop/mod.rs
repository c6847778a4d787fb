//! [`AgentLoop`]: its types, builder and public API ([`AgentLoop::submit`] for bus messages,
//! [`AgentLoop::process_direct`] for the CLI and cron, [`AgentLoop::shutdown`]). The concerns live in submodules:
//! `worker` (the per-session worker pool), `slash` (slash commands), `status` (the `/status` text), `turn`
//! (turn assembly and the run), `persist` (stored copies, checkpoints, recovery), `publish` (replies, progress and
//! streams on the bus), `cron` (cron jobs as turns; the `cron` feature), `unattended` (what holds unattended runs).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use async_trait::async_trait;
use chrono::Utc;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
#[cfg(feature = "cron")]
use nanobot_cron::{CronJob, CronService, JobHandler, JobStore, PAYLOAD_SYSTEM_EVENT};
#[cfg(feature = "mcp")]
use nanobot_mcp::McpManager;

/// Without the `mcp` feature there is no MCP manager: an uninhabited stand-in keeps the loop's code the same.
#[cfg(not(feature = "mcp"))]
#[derive(Debug, Clone)]
enum McpManager {}

#[cfg(not(feature = "mcp"))]
impl McpManager {
    async fn connect(&self) {
        match *self {}
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        match *self {}
    }

    async fn shutdown(&self) {
        match *self {}
    }
}
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
#[cfg(feature = "cron")]
use crate::tools::CronTool;
use crate::tools::{MessageTool, SpawnTool, TurnInfo};

/// Tool results longer than this are truncated in the stored session copy (the model saw them whole).
pub const STORED_TOOL_RESULT_MAX_CHARS: usize = 500;
/// What replaces inline images in stored sessions.
pub const IMAGE_PLACEHOLDER: &str = "[image]";
/// The assistant note stored after a user message whose turn was interrupted (`/stop`, shutdown, a killed
/// process) before any answer: the next turn sees the question and that it went unanswered, as in the Python
/// nanobot 0.3.5 (whose note carries the same `_recovery_interrupted` marker).
pub const TURN_INTERRUPTED_NOTE: &str = "Error: the turn was interrupted before an answer was produced.";

/// The chat that asked for a restart (`/restart`): the host tells it when the new process is up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RestartRequest {
    /// Its channel.
    pub channel: String,
    /// Its chat id.
    pub chat_id: String,
    /// The metadata of the `/restart` message (thread ids, for the notice).
    pub metadata: Map<String, Value>,
}

/// What `/restart` calls ([`AgentLoop::set_restart_handler`]).
pub type RestartHandler = Arc<dyn Fn(RestartRequest) + Send + Sync>;

/// How a turn is run and delivered.
#[derive(Clone, Default)]
pub struct TurnOptions {
    /// A cron-triggered turn (the `cron` tool refuses to add jobs).
    pub is_cron: bool,
    /// Publish progress, tool hints, streams and the reply on the bus (the bus-driven path).
    pub publish: bool,
    /// Receives visible answer text as it streams (CLI streaming).
    pub stream: Option<mpsc::UnboundedSender<String>>,
    /// Who is asked before a call that needs the user's yes (`tools.exec.approval`). `None`: on the bus path
    /// ([`TurnOptions::publish`]) the turn's own chat, elsewhere nobody (such calls are then refused, and the
    /// user can allow one with `/approve ID`).
    pub approver: Option<Arc<dyn crate::Approver>>,
    /// The user started this turn with `/goal <task>`: it may record (or replace) the session's sustained goal.
    pub goal: bool,
}

impl std::fmt::Debug for TurnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnOptions")
            .field("is_cron", &self.is_cron)
            .field("publish", &self.publish)
            .field("stream", &self.stream.is_some())
            .field("approver", &self.approver.is_some())
            .field("goal", &self.goal)
            .finish()
    }
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
    /// Tokens used by every model call of the turn, as the provider reported them (zero for commands).
    pub usage: nanobot_providers::Usage,
    /// True when the message had been answered before (delivered again, or an API request retried with the same
    /// `Idempotency-Key`): no turn ran, `content` is the earlier answer as the session holds it (empty when it is
    /// not there any more), and nothing is sent to the chat again.
    pub replayed: bool,
}

impl TurnReply {
    fn command(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            stop_reason: None,
            delivered_by_tool: false,
            streamed: false,
            usage: nanobot_providers::Usage::default(),
            replayed: false,
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
    presets: Option<Arc<dyn crate::presets::ModelPresets>>,
    tools: Arc<ToolRegistry>,
    sessions: SessionStore,
    context: ContextBuilder,
    hooks: Vec<Arc<dyn AgentHook>>,
    usage: UsageHook,
    memory: Option<Arc<dyn MemoryService>>,
    /// The memory files shared with other replicas (synchronised around turns and memory jobs).
    memory_sync: Option<nanobot_memory::MemorySync>,
    mcp: Option<McpManager>,
    mcp_registered: Mutex<HashSet<String>>,
    #[cfg(feature = "cron")]
    cron: Option<CronService>,
    /// Local triggers (`/trigger`), kept beside the cron store.
    #[cfg(feature = "cron")]
    triggers: Option<nanobot_cron::TriggerStore>,
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
    /// Open approval questions, unanswered requests and one-time approvals.
    approvals: Arc<crate::approval::Approvals>,
    /// Control files the model changed and the user has not confirmed (hold unattended runs).
    control: Arc<crate::control::ControlLedger>,
    /// The last "scheduled runs are paused" notice sent (sent once per held set).
    held_notified: Mutex<Option<String>>,
    /// What `/restart` calls (set by the host that can restart the process: the gateway).
    restart: RwLock<Option<RestartHandler>>,
    /// Who may do what beyond their own chat (owners for `/restart`).
    rights: crate::rights::ChatRights,
    /// The chat of the most recent message from a real channel (where the heartbeat reports).
    last_route: Mutex<Option<(String, String)>>,
    /// The most recent of those chats that its channel says is private (where notices about the owner's files go).
    last_private_route: Mutex<Option<(String, String)>>,
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
    memory_files: Option<Arc<dyn nanobot_util::SharedFiles>>,
    mcp: Option<McpManager>,
    #[cfg(feature = "cron")]
    cron: Option<(JobStore, chrono_tz::Tz)>,
    bus: Option<Arc<dyn Bus>>,
    rights: crate::rights::ChatRights,
    presets: Option<Arc<dyn crate::presets::ModelPresets>>,
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

    /// Keeps the memory files (`memory/MEMORY.md`, `history.jsonl`, `.dream_cursor`, and each memory scope's) in
    /// `files` too, shared with other replicas: pulled before each turn builds its prompt, published after it and
    /// around every consolidation and Dream run ([`nanobot_memory::MemorySync`]).
    #[must_use]
    pub fn memory_files(mut self, files: Arc<dyn nanobot_util::SharedFiles>) -> Self {
        self.memory_files = Some(files);
        self
    }

    /// Connects these MCP servers before turns and offers their tools.
    #[must_use]
    #[cfg(feature = "mcp")]
    pub fn mcp(mut self, manager: McpManager) -> Self {
        self.mcp = Some(manager);
        self
    }

    /// Enables the `cron` tool and the cron service over `store`, in `default_tz`.
    #[must_use]
    #[cfg(feature = "cron")]
    pub fn cron(mut self, store: JobStore, default_tz: chrono_tz::Tz) -> Self {
        self.cron = Some((store, default_tz));
        self
    }

    /// What turns may reach beyond their own chat (default: nothing; see [`crate::rights`]).
    #[must_use]
    pub fn chat_rights(mut self, rights: crate::rights::ChatRights) -> Self {
        self.rights = rights;
        self
    }

    /// The model presets a session can switch to with `/model` (default: none but `default`).
    #[must_use]
    pub fn model_presets(mut self, presets: Arc<dyn crate::presets::ModelPresets>) -> Self {
        self.presets = Some(presets);
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
        let approvals = Arc::new(crate::approval::Approvals::new(&s.approval));
        let mut ledger = crate::control::ControlLedger::new(&s.data_dir, &s.workspace);
        if let Some(files) = &self.memory_files {
            // The shared memory carries the model's MEMORY.md edits to other replicas: their holds go with them.
            ledger = ledger.with_shared(files.clone());
        }
        let control = Arc::new(ledger);
        // Subagents run unattended: the approval gate refuses (and parks for `/approve ID` in the parent's chat)
        // what would be asked about, and what their tools change in control files is recorded like a turn's.
        let subagent_hooks: crate::subagent::HookFactory = {
            let (approval, approvals, control) = (s.approval.clone(), approvals.clone(), control.clone());
            let tools = sub_reg.clone();
            let (workspace, restricted) = (s.workspace.clone(), s.restrict_to_workspace);
            Arc::new(move |parent: &str| {
                let approved = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
                let mut hooks: Vec<Arc<dyn AgentHook>> = Vec::new();
                if approval.policy != crate::ApprovalPolicy::Off {
                    hooks.push(Arc::new(crate::approval::ApprovalHook {
                        settings: approval.clone(),
                        approvals: approvals.clone(),
                        approver: None,
                        session_key: parent.to_owned(),
                        tools: tools.clone(),
                        asker: None,
                        workspace: workspace.clone(),
                        restricted,
                        approved_control: approved.clone(),
                    }));
                }
                hooks.push(Arc::new(crate::control::ControlFilesHook::new(
                    control.clone(),
                    parent,
                    approved,
                )));
                hooks
            })
        };
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
        )
        .with_hooks(subagent_hooks);
        let tools = Arc::new(ToolRegistry::new(self.registry_settings));
        for t in base_tools.into_iter().chain(self.extra_tools) {
            tools.register(t);
        }
        // Attachments come only from the workspace, whatever `restrictToWorkspace` says (issue 28): a chat
        // must not mail out files from elsewhere on the machine.
        let attachments = nanobot_tools::sandbox::Sandbox::new(&s.workspace, true)
            .with_home(s.home.clone())
            .with_data_dir(Some(s.data_dir.clone()));
        let outbox = s.data_dir.join("media").join("outbox");
        // Copies left by an earlier run (sent long ago, or never) go at start-up.
        crate::tools::sweep_outbox(&outbox, crate::tools::OUTBOX_KEEP);
        let rights = self.rights;
        let access = crate::tools::SessionAccess::new(sessions.clone(), rights.clone());
        tools.register(Arc::new(crate::tools::ListSessionsTool(access.clone())));
        tools.register(Arc::new(crate::tools::ReadSessionTool(access.clone())));
        tools.register(Arc::new(crate::tools::SearchSessionsTool(access.clone())));
        tools.register(Arc::new(crate::tools::SendSessionMessageTool::new(
            access,
            s.max_session_messages_per_minute,
        )));
        let goals = crate::tools::GoalTools::new(sessions.clone());
        tools.register(Arc::new(crate::tools::CreateGoalTool(goals.clone())));
        tools.register(Arc::new(crate::tools::UpdateGoalTool(goals)));
        tools.register(Arc::new(
            MessageTool::confined(attachments, outbox).with_rights(rights.clone()),
        ));
        tools.register(Arc::new(SpawnTool::new(subagents.clone())));
        let mut context = ContextBuilder::new(&s.workspace)
            .with_bot_name(&s.bot_name)
            .with_timezone(s.timezone);
        if let Some(sk) = self.skills {
            context = context.with_skills(sk);
        }
        let provider = self.provider;
        let presets = self.presets;
        let hooks = self.hooks;
        let memory_sync = self
            .memory_files
            .map(|files| nanobot_memory::MemorySync::new(files, &s.workspace));
        let memory = match (&memory_sync, self.memory) {
            (Some(sync), Some(inner)) => Some(Arc::new(crate::memory::SyncedMemory {
                inner,
                sync: sync.clone(),
            }) as Arc<dyn MemoryService>),
            (_, memory) => memory,
        };
        let mcp = self.mcp;
        let bus = self.bus;
        #[cfg(feature = "cron")]
        let cron_cfg = self.cron;
        // Jobs not created through the tool or the CLI are held (nanobot_cron::trust); on the first start
        // with a ledger, the jobs already scheduled are trusted once.
        #[cfg(feature = "cron")]
        let cron_ledger = match &cron_cfg {
            Some((store, _)) => {
                let ledger = nanobot_cron::TrustLedger::new(s.data_dir.join("cron").join("trusted.json"));
                ledger.baseline_if_missing(store)?;
                Some(ledger)
            }
            None => None,
        };
        #[cfg(feature = "cron")]
        let triggers = cron_cfg
            .as_ref()
            .map(|_| nanobot_cron::TriggerStore::new(&s.workspace, s.data_dir.join("triggers")));
        let inner = Arc::new_cyclic(|weak: &Weak<LoopInner>| {
            // The cron handler and `my` hold the loop weakly.
            if s.my_enabled {
                tools.register(Arc::new(my::MyTool::new(weak.clone(), s.my_allow_set)));
            }
            #[cfg(feature = "cron")]
            let cron = cron_cfg.map(|(store, tz)| {
                let mut svc = CronService::new(store, cron_handler(weak.clone())).with_default_tz(tz);
                if let Some(ledger) = cron_ledger {
                    svc = svc.with_ledger(ledger);
                }
                tools.register(Arc::new(CronTool::new(svc.clone())));
                svc
            });
            LoopInner {
                permits: Arc::new(Semaphore::new(s.max_concurrent_sessions.max(1))),
                settings: s,
                provider,
                presets,
                tools,
                sessions,
                context,
                hooks,
                usage: UsageHook::new(),
                memory,
                memory_sync,
                mcp,
                mcp_registered: Mutex::default(),
                #[cfg(feature = "cron")]
                cron,
                #[cfg(feature = "cron")]
                triggers,
                subagents,
                bus: RwLock::new(bus),
                workers: Mutex::default(),
                running: Mutex::default(),
                turn_seq: AtomicU64::new(1),
                started: Instant::now(),
                shutdown: CancellationToken::new(),
                stopped: std::sync::atomic::AtomicBool::new(false),
                approvals,
                control,
                held_notified: Mutex::default(),
                restart: RwLock::new(None),
                rights,
                last_route: Mutex::default(),
                last_private_route: Mutex::default(),
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
    nanobot_tools::builtin::register_exec(
        &reg,
        nanobot_tools::builtin::ExecTool::new(exec, Arc::new(sandbox))?,
    );
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
            memory_files: None,
            mcp: None,
            #[cfg(feature = "cron")]
            cron: None,
            bus: None,
            rights: crate::rights::ChatRights::default(),
            presets: None,
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

    /// The control files the model changed and the user has not confirmed ([`crate::control`]).
    pub fn control_files(&self) -> &crate::control::ControlLedger {
        &self.inner.control
    }

    /// The session store.
    pub fn sessions(&self) -> &SessionStore {
        &self.inner.sessions
    }

    /// The cron service, when cron is enabled (the gateway runs `service.run(cancel)`).
    #[cfg(feature = "cron")]
    pub fn cron(&self) -> Option<&CronService> {
        self.inner.cron.as_ref()
    }

    /// Tells the chat of a cron job the scheduler holds ([`nanobot_cron::status::HELD`]) why it did not run and
    /// how to let it; the runtime calls it for each hold the cron service reports. Returns whether it was sent.
    #[cfg(feature = "cron")]
    pub async fn tell_held_cron_job(&self, job: &nanobot_cron::CronJob) -> bool {
        self.inner.tell_held_cron_job(job).await
    }

    /// The local triggers (`/trigger`), when cron is enabled: the gateway runs their delivery queue
    /// ([`nanobot_cron::TriggerQueue`]) with [`AgentLoop::run_trigger`] as its handler.
    #[cfg(feature = "cron")]
    pub fn triggers(&self) -> Option<&nanobot_cron::TriggerStore> {
        self.inner.triggers.as_ref()
    }

    /// The MCP manager, when MCP servers are configured.
    #[cfg(feature = "mcp")]
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

    /// The most recent private chat from a real channel (a chat whose adapter does not say it is private counts
    /// as a group), if any since start.
    pub(crate) fn last_private_route(&self) -> Option<(String, String)> {
        lock(&self.inner.last_private_route).clone()
    }

    /// Token totals since start.
    pub fn usage(&self) -> crate::hook::UsageTotals {
        self.inner.usage.totals()
    }

    /// Attaches a bus (where [`AgentLoop::submit`] publishes, and `message` and `spawn` deliver).
    pub fn set_bus(&self, bus: Arc<dyn Bus>) {
        *self.inner.bus.write().unwrap_or_else(|p| p.into_inner()) = Some(bus);
    }

    /// Lets `/restart` restart the process: `handler` is called with the chat that asked (the host shuts down
    /// gracefully and starts again, then tells that chat). Without one, `/restart` answers that it is not
    /// available.
    pub fn set_restart_handler(&self, handler: RestartHandler) {
        *self.inner.restart.write().unwrap_or_else(|p| p.into_inner()) = Some(handler);
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
        // An answer to the approval question a running turn of this chat is waiting for: it goes to that turn,
        // not into the queue behind it.
        let key = self.inner.session_key(&msg);
        if let Some(ack) = self.inner.approvals.try_answer(&key, &msg) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                if let Some(bus) = inner.bus()
                    && let Err(e) = bus.publish_outbound(reply_for(&msg, ack.clone())).await
                {
                    tracing::warn!(error = %e, "cannot publish an approval acknowledgement");
                }
                let _ = tx.send(Ok(TurnReply::command(ack)));
            });
        } else if self.inner.is_immediate(&msg) {
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
        // What tools keep running between calls (exec sessions) ends with the agent.
        self.inner.tools.shutdown().await;
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

    /// Cancels the running turn and the subagents of `session_key`; returns how many tasks were stopped. What its
    /// tools left running (exec sessions) is ended in the background.
    pub fn stop_session(&self, session_key: &str) -> usize {
        let n = self.inner.stop_session(session_key);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (tools, key) = (self.inner.tools.clone(), session_key.to_owned());
            rt.spawn(async move { tools.stop_session(&key).await });
        }
        n
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
    #[cfg(feature = "cron")]
    pub async fn run_cron_job(&self, job: CronJob) -> Result<String, BoxError> {
        self.inner.clone().run_cron_job(job).await
    }

    /// Runs one delivery of a local trigger as a turn in the trigger's session and answers in its chat (what the
    /// trigger queue's handler does). Held while control files hold unconfirmed changes, like cron jobs.
    #[cfg(feature = "cron")]
    pub async fn run_trigger(
        &self,
        trigger: nanobot_cron::LocalTrigger,
        delivery: nanobot_cron::TriggerDelivery,
    ) -> Result<String, nanobot_cron::triggers::DeliveryFailure> {
        self.inner.clone().run_trigger(trigger, delivery).await
    }
}

fn reply_for(msg: &InboundMessage, content: String) -> OutboundMessage {
    let mut out = OutboundMessage::reply(&msg.channel, &msg.chat_id, content);
    out.metadata = msg.metadata.clone();
    out
}

#[cfg(feature = "cron")]
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
        msg.turn_session_key(self.settings.unified_session)
    }

    /// Remembers the chat of a message from a real channel (not the API, CLI, cron, …).
    fn note_route(&self, msg: &InboundMessage) {
        if !crate::heartbeat::is_internal_channel(&msg.channel) && !msg.chat_id.is_empty() {
            let route = (msg.channel.clone(), msg.chat_id.clone());
            if msg.is_group() == Some(false) {
                *lock(&self.last_private_route) = Some(route.clone());
            }
            *lock(&self.last_route) = Some(route);
        }
    }

    /// The agent's own model settings, as a choice named `default`.
    fn default_choice(&self) -> crate::presets::ModelChoice {
        let s = &self.settings;
        crate::presets::ModelChoice::new(
            crate::presets::DEFAULT_PRESET,
            &s.model,
            self.provider.clone(),
            s.max_tokens,
            s.context_window_tokens,
        )
        .with_temperature(s.temperature)
        .with_reasoning_effort(s.reasoning_effort.clone())
    }

    /// The model a session's turns run on: the preset its metadata names (`/model`), else the agent's own. A
    /// preset that can no longer be built (removed from the config, its key gone) falls back with a warning.
    fn model_choice(&self, metadata: &Map<String, Value>) -> crate::presets::ModelChoice {
        let name = match crate::presets::session_preset(metadata) {
            Some(n) if n != crate::presets::DEFAULT_PRESET => n,
            _ => return self.default_choice(),
        };
        match self.presets.as_ref().map(|p| p.choose(name)) {
            Some(Ok(choice)) => choice,
            Some(Err(e)) => {
                tracing::warn!(preset = %name, error = %e, "the session's model preset is unavailable; using the default");
                self.default_choice()
            }
            None => {
                tracing::warn!(preset = %name, "the session names a model preset but none are configured; using the default");
                self.default_choice()
            }
        }
    }

    fn stop_session(&self, key: &str) -> usize {
        let mut n = 0;
        if let Some((_, token)) = lock(&self.running).remove(key) {
            token.cancel();
            n += 1;
        }
        n + self.subagents.cancel_session(key)
    }
}

#[cfg(feature = "cron")]
mod cron;
mod memory_scope;
pub use memory_scope::MEMORY_SCOPE_KEY;
mod my;
mod persist;
mod publish;
mod redelivery;
pub use redelivery::DELIVERIES_KEY;
mod slash;
mod status;
mod turn;
mod unattended;
mod worker;

pub use persist::stored_message;
use persist::*;
use publish::*;

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
        let m = InboundMessage::system_report("subagent", "telegram", "42", "done");
        assert_eq!(
            system_target(&m),
            Some(("telegram".into(), "42".into(), "telegram:42".into()))
        );
        let m = InboundMessage::system_report("subagent", "matrix", "!room:example.org", "done");
        assert_eq!(reply_route(&m), ("matrix".into(), "!room:example.org".into()));
        assert_eq!(
            system_target(&InboundMessage::new("telegram", "u", "1", "hi")),
            None
        );
    }
}
