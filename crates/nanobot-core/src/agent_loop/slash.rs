//! Slash commands: the ones answered at once (`/stop`, `/help`, `/status`, unknown ones) and the queued ones
//! (`/new`, `/compact`, `/dream…`).

use nanobot_bus::InboundMessage;
use nanobot_memory::ScopeKey;
use serde_json::Value;

use super::inner::LoopInner;
use crate::commands::{self, Command, Parsed};
use crate::error::CoreError;
use crate::memory::{ConsolidationTrigger, raw_archive};

/// A prompt the workspace may replace (`prompts/<name>.md`) and how its command speaks of it.
pub(super) struct WorkspacePrompt {
    command: &'static str,
    file: &'static str,
    default: &'static str,
    /// Capitalised, as a status line starts.
    title: &'static str,
    /// "exist" or "exists", after the title.
    exist_verb: &'static str,
    /// The title within a sentence.
    created_name: &'static str,
    /// What to do with the new file.
    created_help: &'static str,
}

const DREAM_PROMPT: WorkspacePrompt = WorkspacePrompt {
    command: "/dream-prompt",
    file: nanobot_memory::DREAM_PROMPT_FILE,
    default: nanobot_memory::DEFAULT_DREAM_PROMPT,
    title: "Dream memory instructions",
    exist_verb: "exist",
    created_name: "Dream memory instructions",
    created_help: "Edit that file to teach Dream how to organize memory. It fully replaces nanobot's default Dream \
                   guide for this workspace.",
};

const EVALUATOR_PROMPT: WorkspacePrompt = WorkspacePrompt {
    command: "/evaluator-prompt",
    file: crate::control::EVALUATOR_PROMPT_FILE,
    default: crate::heartbeat::DEFAULT_EVALUATOR_PROMPT,
    title: "Heartbeat evaluator prompt",
    exist_verb: "exists",
    created_name: "heartbeat evaluator prompt",
    created_help: "Edit that file to control when the heartbeat's notification gate speaks. It must still tell the \
                   model to call the `evaluate_notification` tool, otherwise the gate fails closed and stays silent.",
};

/// The answer to `/goal` without a task.
pub(super) const GOAL_USAGE: &str = "Usage: /goal <long-running task description>";

/// Messages kept in the prompt after `/compact` without a memory service.
const COMPACT_KEEP_MESSAGES: usize = 8;

impl LoopInner {
    /// The `/usage` answer for the chat and person of `msg`.
    async fn usage_text(&self, msg: &InboundMessage) -> String {
        let payer = super::spending::Payer::of(msg, &msg.channel, &msg.chat_id);
        self.spending.usage_text(&payer).await
    }

    /// Commands answered at once, without waiting for the session's queue.
    pub(super) fn is_immediate(&self, msg: &InboundMessage) -> bool {
        msg.speaks_for_person()
            && matches!(
                commands::parse(&msg.content),
                Some(
                    Parsed::Known(
                        Command::Stop
                            | Command::Restart
                            | Command::Trigger
                            | Command::Help
                            | Command::Skill
                            | Command::Status
                            | Command::Usage
                            | Command::Approve
                            | Command::Deny
                            | Command::ConfirmFiles,
                        _
                    ) | Parsed::Unknown { .. }
                )
            )
    }

    /// Commands answered without waiting for the session's queue; `None` for anything else.
    pub(super) async fn immediate_command(&self, msg: &InboundMessage) -> Option<String> {
        if !msg.speaks_for_person() {
            return None;
        }
        let key = self.session_key(msg);
        match commands::parse(&msg.content)? {
            Parsed::Known(Command::Stop, _) => {
                // The turn, its subagents, and what its tools left running (exec sessions).
                let n = self.stop_session(&key) + self.kit.tools.stop_session(&key).await;
                Some(if n == 0 {
                    "No active task to stop.".to_owned()
                } else {
                    format!("⏹ Stopped {n} task(s).")
                })
            }
            Parsed::Known(Command::Help, _) => Some(commands::help_text()),
            Parsed::Known(Command::Skill, _) => Some(self.skills_text()),
            Parsed::Known(cmd @ (Command::Approve | Command::Deny), id) => {
                let answer = if cmd == Command::Approve {
                    crate::ApprovalAnswer::Approve
                } else {
                    crate::ApprovalAnswer::Deny
                };
                Some(self.gate.decide(&key, answer, &id, msg).await)
            }
            Parsed::Known(Command::Status, _) => Some(self.status_text(&key).await),
            Parsed::Known(Command::Usage, _) => Some(self.usage_text(msg).await),
            Parsed::Known(Command::ConfirmFiles, args) => Some(self.gate.confirm_files(&args).await),
            Parsed::Known(Command::Restart, _) => Some(self.restart(msg)),
            Parsed::Known(Command::Trigger, name) => Some(self.create_trigger(msg, &key, &name).await),
            Parsed::Unknown { name, suggestion } => Some(commands::unknown_text(&name, suggestion)),
            Parsed::Known(..) => None,
        }
    }

    pub(super) async fn queued_command(
        &self,
        key: &str,
        msg: &InboundMessage,
        cmd: Command,
        args: &str,
        scope: &ScopeKey,
    ) -> Result<String, CoreError> {
        match cmd {
            Command::New => {
                if self.memory.service().is_none() {
                    // Archive first, so a failure never loses the conversation.
                    let current = self.ledger.store().session(key).await?;
                    if !current.unconsolidated().is_empty() {
                        let ws = self.settings.workspace.clone();
                        let (k, s) = (key.to_owned(), scope.clone());
                        let path = ws.join(scope.dir()).join("history.jsonl");
                        tokio::task::spawn_blocking(move || {
                            raw_archive(&ws, &s, &k, current.unconsolidated())
                        })
                        .await
                        .map_err(|e| CoreError::Config(format!("archive task failed: {e}")))?
                        .map_err(|e| CoreError::io("appending to", path, e))?;
                    }
                }
                let old = self.ledger.store().reset(key).await?;
                if let Some(m) = self.memory.service()
                    && old.messages.len() > old.last_consolidated
                {
                    let (m, scope) = (m.clone(), scope.clone());
                    self.memory.spawn(async move {
                        if let Err(e) = m.archive_session(old, &scope).await {
                            tracing::warn!(error = %e, "archiving the session failed");
                        }
                    });
                }
                Ok("New session started.".to_owned())
            }
            Command::Compact => match self.memory.service() {
                Some(m) => match m.consolidate(key, scope, ConsolidationTrigger::Compact).await {
                    Ok(r) => Ok(format!(
                        "Compacted: {} messages archived into memory.",
                        r.archived_messages
                    )),
                    Err(e) => Ok(format!("Compaction failed: {e}")),
                },
                None => self.compact_raw(key, scope).await,
            },
            Command::Dream => match self.memory.service() {
                Some(m) => Ok(m
                    .dream(scope)
                    .await
                    .unwrap_or_else(|e| format!("Dream failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            Command::DreamLog => match self.memory.service() {
                Some(m) => Ok(m
                    .dream_log(scope, args)
                    .await
                    .unwrap_or_else(|e| format!("Dream log failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            Command::DreamRestore => match self.memory.service() {
                Some(m) => Ok(m
                    .dream_restore(scope, args)
                    .await
                    .unwrap_or_else(|e| format!("Dream restore failed: {e}"))),
                None => Ok("Dream is not available: long-term memory is not configured.".to_owned()),
            },
            // Answered before queueing; kept for completeness.
            Command::Help => Ok(commands::help_text()),
            Command::Status => Ok(self.status_text(key).await),
            Command::Usage => Ok(self.usage_text(msg).await),
            Command::History => self.history_text(key, args).await,
            Command::Skill => Ok(self.skills_text()),
            Command::Stop => Ok("No active task to stop.".to_owned()),
            Command::Approve => Ok(self
                .gate
                .decide(key, crate::ApprovalAnswer::Approve, args, msg)
                .await),
            Command::Deny => Ok(self
                .gate
                .decide(key, crate::ApprovalAnswer::Deny, args, msg)
                .await),
            Command::ConfirmFiles => Ok(self.gate.confirm_files(args).await),
            // `/goal <task>` runs as a turn (worker); only its empty form gets here.
            Command::Goal => Ok(GOAL_USAGE.to_owned()),
            // Answered at once (`immediate_command`).
            Command::Restart | Command::Trigger => {
                Ok("This command is answered at once, not queued.".to_owned())
            }
            Command::Model => self.model_command(key, args).await,
            Command::DreamPrompt => Ok(self.workspace_prompt_command(&DREAM_PROMPT, args).await),
            Command::EvaluatorPrompt => Ok(self.workspace_prompt_command(&EVALUATOR_PROMPT, args).await),
        }
    }

    /// `/model [preset]`: the session's model and the presets, or switch the session to `preset` (0.3.5's
    /// answers). The choice is recorded in the session's metadata; `default` goes back to the agent's settings.
    pub(super) async fn model_command(&self, key: &str, args: &str) -> Result<String, CoreError> {
        use crate::presets::{DEFAULT_PRESET, SESSION_PRESET_KEY, format_names};
        let names = self.kit.preset_names();
        let name = args.trim();
        if name.is_empty() {
            let metadata = self.ledger.store().metadata(key).await?;
            let choice = self.kit.model_choice(&metadata);
            return Ok(format!(
                "## Model\n- Current model: `{}`\n- Current preset: `{}`\n- Available presets: {}",
                choice.model,
                choice.name,
                format_names(&names)
            ));
        }
        let chosen = if name == DEFAULT_PRESET {
            Ok(self.kit.default_model.clone())
        } else {
            match &self.kit.presets {
                Some(p) => p.choose(name),
                None => Err(format!("no preset named {name:?} (modelPresets is empty)")),
            }
        };
        let choice = match chosen {
            Ok(c) => c,
            Err(e) => {
                return Ok(format!(
                    "Could not switch model preset: {e}\n\nAvailable presets: {}",
                    format_names(&names)
                ));
            }
        };
        let value = Value::String(choice.name.clone());
        self.ledger
            .store()
            .update_header(key, move |h| {
                h.metadata.insert(SESSION_PRESET_KEY.into(), value);
            })
            .await?;
        Ok(format!(
            "Switched model preset to `{}`.\n- Scope: current session\n- Model: `{}`\n- Context window: {}\n- Max \
             output tokens: {}",
            choice.name, choice.model, choice.context_window_tokens, choice.max_tokens
        ))
    }

    /// `/trigger <name>`: creates a local trigger bound to this chat's session (0.3.5's answer).
    async fn create_trigger(&self, msg: &InboundMessage, key: &str, name: &str) -> String {
        #[cfg(feature = "cron")]
        {
            let name = name.trim();
            if name.is_empty() {
                return "Usage: /trigger <name>\n\nCreate a named local trigger bound to this chat session."
                    .to_owned();
            }
            if nanobot_bus::is_internal_channel(&msg.channel) {
                return "Local triggers answer in a chat app (Telegram, Slack, the WebUI…): use /trigger there."
                    .to_owned();
            }
            let Some(store) = self.schedules.triggers.clone() else {
                return "Local triggers are not available here (cron is off).".to_owned();
            };
            let (name, channel, chat, key) = (
                name.to_owned(),
                msg.channel.clone(),
                msg.chat_id.clone(),
                key.to_owned(),
            );
            let mut metadata = msg.metadata.clone();
            metadata.remove(nanobot_bus::META_BUTTONS);
            let created =
                tokio::task::spawn_blocking(move || store.create(&name, &channel, &chat, &key, metadata))
                    .await;
            match created {
                Ok(Ok(t)) => format!(
                    "Trigger created: {}\nID: {}\n\nCommand:\nnanobot trigger {} \"message\"",
                    t.name, t.id, t.id
                ),
                Ok(Err(e)) => format!("Could not create the trigger: {e}"),
                Err(e) => format!("Could not create the trigger: {e}"),
            }
        }
        #[cfg(not(feature = "cron"))]
        {
            let _ = (msg, key, name);
            "Local triggers are not available in this build.".to_owned()
        }
    }

    /// `/restart`: asks the host to restart, when the sender is an owner and the host can.
    fn restart(&self, msg: &InboundMessage) -> String {
        if !self.gate.rights().is_owner(&msg.channel, &msg.sender_id) {
            return format!(
                "Only an owner can restart nanobot (a sender named in channels.{}.allowFrom).",
                msg.channel
            );
        }
        let handler = self.routes.restart_handler();
        match handler {
            Some(h) => {
                tracing::warn!(channel = %msg.channel, sender = %msg.sender_id, "restart requested");
                h(crate::RestartRequest {
                    channel: msg.channel.clone(),
                    chat_id: msg.chat_id.clone(),
                    metadata: msg.metadata.clone(),
                });
                "Restarting...".to_owned()
            }
            None => "Restart is not available here: only the gateway can restart.".to_owned(),
        }
    }

    /// `/dream-prompt [init]` and `/evaluator-prompt [init]` (0.3.5's answers): whether the workspace's own
    /// instructions replace the built-in ones; `init` writes the default there when the file is missing or empty,
    /// never over the user's text.
    pub(super) async fn workspace_prompt_command(&self, prompt: &WorkspacePrompt, args: &str) -> String {
        let (file, command) = (prompt.file, prompt.command);
        let arg = args.trim().to_lowercase();
        if !arg.is_empty() && arg != "init" {
            return format!("Usage: {command} [init]");
        }
        let files = nanobot_util::ConfinedDir::new(&self.settings.workspace);
        let default = prompt.default;
        let result = tokio::task::spawn_blocking(move || -> std::io::Result<(bool, bool)> {
            let rel = std::path::Path::new(file);
            let custom = nanobot_util::workspace_prompt(&files, rel).is_some();
            if arg != "init" || custom {
                return Ok((custom, false));
            }
            if let Some(dir) = rel.parent() {
                files.create_dir_all(dir)?;
            }
            files.write_atomic(rel, format!("{default}\n").as_bytes())?;
            Ok((custom, true))
        })
        .await;
        let (custom, created) = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return format!("Could not write `{file}`: {e}"),
            Err(e) => return format!("Could not read `{file}`: {e}"),
        };
        let title = prompt.title;
        match (args.trim().is_empty(), custom, created) {
            (false, _, true) => format!(
                "Created {} at `{file}`.\n\n{} Delete or empty it to return to nanobot's default.",
                prompt.created_name, prompt.created_help
            ),
            (false, _, false) => format!(
                "{title} already {} at `{file}`.\n\nEdit that file, or delete/empty it to return to nanobot's \
                 default.",
                prompt.exist_verb
            ),
            (true, true, _) => format!(
                "{title}: custom for this workspace\n\n- Path: `{file}`\n- Delete or empty this file to return to \
                 nanobot's default."
            ),
            (true, false, _) => format!(
                "{title}: nanobot default\n\n- Editable file: `{file}`\n- Run `{command} init` to create an \
                 editable copy."
            ),
        }
    }

    /// `/skill`: every skill the agent has (disabled ones left out), with its description, as 0.3.5 lists them.
    pub(super) fn skills_text(&self) -> String {
        let Some(loader) = self.kit.context.skills() else {
            return "No skills available.".to_owned();
        };
        let set = loader.load_cached();
        let skills = set.skills();
        if skills.is_empty() {
            return "No skills available.".to_owned();
        }
        let mut out = format!("Available skills ({}):\n", skills.len());
        for s in skills {
            out.push_str(&format!("\n- **{}** — {}", s.name, s.description));
        }
        out
    }

    /// `/history [n]`: the last `n` user and assistant messages of the session (default 10, at most 50), each cut
    /// to 200 characters, as 0.3.5 shows them.
    pub(super) async fn history_text(&self, key: &str, args: &str) -> Result<String, CoreError> {
        const DEFAULT: usize = 10;
        const MAX: usize = 50;
        const MAX_CHARS: usize = 200;
        let count = match args.trim() {
            "" => DEFAULT,
            n => match n.parse::<i64>() {
                Ok(n) => usize::try_from(n.max(1)).unwrap_or(1).min(MAX),
                Err(_) => {
                    return Ok(format!(
                        "Usage: /history [count] — e.g. /history 5 (default: {DEFAULT}, max: {MAX})"
                    ));
                }
            },
        };
        let history = self
            .ledger
            .store()
            .history(key, self.settings.max_history_messages)
            .await?;
        let visible: Vec<String> = history
            .iter()
            .filter(|m| !m.is_command())
            .filter_map(|m| {
                let label = match m.role()? {
                    "user" => "👤 You",
                    "assistant" => "🤖 Bot",
                    _ => return None,
                };
                let text = crate::context::strip_runtime_context(&m.content_text()?);
                let text = text.trim();
                if text.is_empty() {
                    return None;
                }
                let shown = if text.chars().count() > MAX_CHARS {
                    format!("{}…", text.chars().take(MAX_CHARS).collect::<String>())
                } else {
                    text.to_owned()
                };
                Some(format!("{label}: {shown}"))
            })
            .collect();
        let recent = &visible[visible.len().saturating_sub(count)..];
        if recent.is_empty() {
            return Ok("No conversation history yet.".to_owned());
        }
        Ok(format!(
            "Last {} message(s):\n{}",
            recent.len(),
            recent.join("\n")
        ))
    }

    /// `/compact` without a memory service: archive all but a short tail as raw text and move the pointer.
    pub(super) async fn compact_raw(&self, key: &str, scope: &ScopeKey) -> Result<String, CoreError> {
        let session = self.ledger.store().session(key).await?;
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
        let (k, s) = (key.to_owned(), scope.clone());
        let n = slice.len();
        tokio::task::spawn_blocking(move || raw_archive(&ws, &s, &k, &slice))
            .await
            .map_err(|e| CoreError::Config(format!("archive task failed: {e}")))?
            .map_err(|e| {
                CoreError::io(
                    "appending to",
                    self.settings.workspace.join(scope.dir()).join("history.jsonl"),
                    e,
                )
            })?;
        self.ledger.store().set_last_consolidated(key, keep_from).await?;
        Ok(format!(
            "Compacted: {n} older messages archived (raw); the last {} kept.",
            len - keep_from
        ))
    }
}
