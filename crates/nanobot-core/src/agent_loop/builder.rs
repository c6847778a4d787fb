//! [`AgentLoopBuilder`]: assembles the parts of a loop (kit, ledger, gate, memory, routes, workers, schedules)
//! from the host's settings, tools and services.

use std::sync::{Arc, Weak};

use nanobot_bus::Bus;
#[cfg(feature = "cron")]
use nanobot_cron::{CronService, JobStore};
use nanobot_providers::Provider;
use nanobot_sessions::SessionStore;
use nanobot_skills::SkillsLoader;
use nanobot_tools::{Tool, ToolRegistry};

use super::api::AgentLoop;
use super::gate::{Asking, Gate};
use super::inner::LoopInner;
use super::kit::{Kit, McpManager};
use super::ledger::Ledger;
use super::memory_work::MemoryWork;
use super::my::MyTool;
use super::routes::Routes;
#[cfg(feature = "cron")]
use super::schedules::Schedules;
use super::workers::Workers;
use crate::approval::Books;
use crate::context::ContextBuilder;
use crate::control::ControlLedger;
use crate::error::CoreError;
use crate::hook::AgentHook;
use crate::memory::MemoryService;
use crate::presets::{DEFAULT_PRESET, ModelChoice};
use crate::settings::AgentSettings;
use crate::subagent::{SubagentManager, SubagentSettings};
#[cfg(feature = "cron")]
use crate::tools::CronTool;
use crate::tools::{MessageTool, SpawnTool};

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
    usage: Option<Arc<nanobot_usage::UsageLedger>>,
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
    /// around every consolidation and Dream run ([`nanobot_memory::MemorySync`]). The control-file ledger and the
    /// approval requests and grants of every session are kept there too, so any replica decides and spends them.
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

    /// Records every model call in `ledger` (who it was for, the provider's tokens) and holds turns to its
    /// budget: a turn that would start over a limit is refused with a message naming it, and a running one stops
    /// before its next model call once over (default: nothing recorded, nothing limited).
    #[must_use]
    pub fn usage_ledger(mut self, ledger: Arc<nanobot_usage::UsageLedger>) -> Self {
        self.usage = Some(ledger);
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
        let mut ledger = ControlLedger::new(&s.data_dir, &s.workspace);
        let mut books = Books::new(&s.data_dir);
        if let Some(files) = &self.memory_files {
            // The shared memory carries the model's MEMORY.md edits to other replicas: their holds go with them.
            ledger = ledger.with_shared(files.clone());
            // A request parked on one replica is approved on another, and spent on a third.
            books = books.with_shared(files.clone());
        }
        let gate = Arc::new(Gate::new(&s, books, ledger, self.rights));
        // Subagents run unattended: the approval gate refuses (and parks for `/approve ID` in the parent's chat)
        // what would be asked about, and what their tools change in control files is recorded like a turn's.
        // Their model calls are charged to the chat and person of the parent's latest turn.
        let spending = Arc::new(super::spending::Spending::new(self.usage));
        let subagent_hooks: crate::subagent::HookFactory = {
            let (gate, tools, spending) = (gate.clone(), sub_reg.clone(), spending.clone());
            Arc::new(move |parent: &str, cancel| {
                let mut hooks = gate.hooks(
                    parent,
                    &tools,
                    Asking {
                        asker: None,
                        approver: None,
                    },
                );
                let budget = spending.subagent_hook(parent, cancel);
                hooks.extend(budget.clone().map(|b| b as Arc<dyn crate::hook::AgentHook>));
                crate::subagent::SubagentHooks {
                    hooks,
                    budget: budget.map(|b| b as Arc<dyn crate::subagent::BudgetWatch>),
                }
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
        let rights = gate.rights().clone();
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
        let default_model = ModelChoice::new(
            DEFAULT_PRESET,
            &s.model,
            self.provider,
            s.max_tokens,
            s.context_window_tokens,
        )
        .with_temperature(s.temperature)
        .with_reasoning_effort(s.reasoning_effort.clone());
        let memory_sync = self
            .memory_files
            .map(|files| nanobot_memory::MemorySync::new(files, &s.workspace));
        let memory = MemoryWork::new(self.memory, memory_sync);
        let (presets, hooks) = (self.presets, self.hooks);
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
                tools.register(Arc::new(MyTool::new(weak.clone(), s.my_allow_set)));
            }
            #[cfg(feature = "cron")]
            let cron = cron_cfg.map(|(store, tz)| {
                let mut svc =
                    CronService::new(store, super::cron::cron_handler(weak.clone())).with_default_tz(tz);
                if let Some(ledger) = cron_ledger {
                    svc = svc.with_ledger(ledger);
                }
                tools.register(Arc::new(CronTool::new(svc.clone())));
                svc
            });
            LoopInner {
                workers: Workers::new(s.max_concurrent_sessions),
                spending,
                ledger: Ledger::new(sessions, s.max_history_messages),
                kit: Kit::new(default_model, presets, tools, mcp, subagents, context, hooks),
                gate,
                memory,
                routes: Routes::new(bus),
                #[cfg(feature = "cron")]
                schedules: Schedules { cron, triggers },
                settings: s,
            }
        });
        warn_unmatched_selection(&inner.kit.tools);
        Ok(AgentLoop::from_inner(inner))
    }
}

/// `tools.only` entries naming no built-in tool (misspelt, or the tool is disabled) are logged once; entries for
/// MCP tools are left alone (their servers connect later).
fn warn_unmatched_selection(tools: &ToolRegistry) {
    let offered = tools.names();
    let unmatched: Vec<&str> = tools
        .settings()
        .selection
        .unmatched(&offered)
        .into_iter()
        .filter(|entry| !entry.starts_with("mcp_"))
        .collect();
    if !unmatched.is_empty() {
        tracing::warn!(
            entries = %unmatched.join(", "),
            "tools.only names tools that do not exist or are disabled; they are not offered"
        );
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

impl AgentLoop {
    /// A builder for a loop calling `provider` with `settings`.
    pub fn builder(provider: Arc<dyn Provider>, settings: AgentSettings) -> AgentLoopBuilder {
        AgentLoopBuilder::new(provider, settings)
    }

    /// A loop with default tools and sessions under `settings.data_dir`.
    pub fn new(provider: Arc<dyn Provider>, settings: AgentSettings) -> Result<Self, CoreError> {
        Self::builder(provider, settings).build()
    }
}

impl AgentLoopBuilder {
    /// A builder for a loop calling `provider` with `settings` (see [`AgentLoop::builder`]).
    pub(super) fn new(provider: Arc<dyn Provider>, settings: AgentSettings) -> Self {
        Self {
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
            usage: None,
        }
    }
}
