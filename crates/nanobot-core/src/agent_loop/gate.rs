//! The gate part: who may do what. It owns the approval questions, parked requests and one-time grants
//! ([`crate::approval`]), the ledger of control files the model changed ([`crate::control`]) and the rights of
//! chats beyond their own ([`crate::rights`]), and builds the hooks that guard every run (a turn's, a
//! subagent's) from them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nanobot_bus::{Bus, InboundMessage};
use nanobot_tools::ToolRegistry;
use nanobot_util::lock;
use serde_json::{Map, Value};

use crate::approval::{ApprovalHook, Approvals, Books, BusApprover};
use crate::control::{ControlFilesHook, ControlLedger, HeldFile};
use crate::hook::AgentHook;
use crate::rights::ChatRights;
use crate::settings::AgentSettings;
use crate::{ApprovalAnswer, ApprovalPolicy, ApprovalSettings, Approver};

/// The gate of one loop.
pub(super) struct Gate {
    settings: ApprovalSettings,
    approvals: Arc<Approvals>,
    control: Arc<ControlLedger>,
    /// The last "scheduled runs are paused" notice sent (sent once per held set).
    held_notified: Mutex<Option<String>>,
    rights: ChatRights,
    workspace: PathBuf,
    /// The file tools are confined to the workspace.
    restricted: bool,
}

/// Who is behind a run, for its gate: the person who started it (`None`: an unattended run) and who is asked.
pub(super) struct Asking {
    pub(super) asker: Option<String>,
    pub(super) approver: Option<Arc<dyn Approver>>,
}

impl Gate {
    pub(super) fn new(
        settings: &AgentSettings,
        books: Books,
        control: ControlLedger,
        rights: ChatRights,
    ) -> Self {
        Self {
            approvals: Arc::new(Approvals::new(&settings.approval, books)),
            settings: settings.approval.clone(),
            control: Arc::new(control),
            held_notified: Mutex::default(),
            rights,
            workspace: settings.workspace.clone(),
            restricted: settings.restrict_to_workspace,
        }
    }

    /// The control files ledger.
    pub(super) fn control(&self) -> &Arc<ControlLedger> {
        &self.control
    }

    /// What turns may reach beyond their own chat.
    pub(super) fn rights(&self) -> &ChatRights {
        &self.rights
    }

    /// Whether any call is asked about.
    pub(super) fn asks(&self) -> bool {
        self.settings.policy != ApprovalPolicy::Off
    }

    /// When `msg` answers the open question of `session` (from the asker or a listed approver): hands the
    /// answer to the waiting run and returns the acknowledgement to show.
    pub(super) fn try_answer(&self, session: &str, msg: &InboundMessage) -> Option<String> {
        self.approvals.try_answer(session, msg)
    }

    /// `/approve ID` or `/deny ID` from `msg` for a parked request of `session`: the text of the reply.
    pub(super) async fn decide(
        &self,
        session: &str,
        answer: ApprovalAnswer,
        id: &str,
        msg: &InboundMessage,
    ) -> String {
        let (approvals, session, id, msg) = (
            self.approvals.clone(),
            session.to_owned(),
            id.to_owned(),
            msg.clone(),
        );
        tokio::task::spawn_blocking(move || approvals.decide_parked(&session, answer, &id, &msg))
            .await
            .unwrap_or_else(|e| format!("Cannot decide right now ({e}); please try again."))
    }

    /// Who a turn asks in its own chat on the bus, waiting for `sender`'s answer there.
    pub(super) fn ask_in_chat(
        &self,
        bus: Arc<dyn Bus>,
        channel: &str,
        chat_id: &str,
        sender: &str,
        metadata: Map<String, Value>,
    ) -> Arc<dyn Approver> {
        Arc::new(BusApprover {
            bus,
            approvals: self.approvals.clone(),
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
            sender: sender.to_owned(),
            metadata,
        })
    }

    /// The hooks that guard one run in `session` with `tools`: the approval gate (when a policy asks), then the
    /// record of control files the run changes (after the gate, so a write the user approved is not held).
    pub(super) fn hooks(
        &self,
        session: &str,
        tools: &Arc<ToolRegistry>,
        asking: Asking,
    ) -> Vec<Arc<dyn AgentHook>> {
        // Control files written with the user's yes in this run are not held (shared by the two hooks).
        let approved = Arc::new(Mutex::new(BTreeSet::new()));
        let mut hooks: Vec<Arc<dyn AgentHook>> = Vec::new();
        if self.asks() {
            hooks.push(Arc::new(ApprovalHook {
                settings: self.settings.clone(),
                approvals: self.approvals.clone(),
                approver: asking.approver,
                session_key: session.to_owned(),
                tools: tools.clone(),
                asker: asking.asker,
                workspace: self.workspace.clone(),
                restricted: self.restricted,
                approved_control: approved.clone(),
            }));
        }
        hooks.push(Arc::new(ControlFilesHook::new(
            self.control.clone(),
            session,
            approved,
        )));
        hooks
    }

    /// The control files that hold unattended runs, read off the async runtime.
    pub(super) async fn held(&self) -> Vec<HeldFile> {
        let ledger = self.control.clone();
        tokio::task::spawn_blocking(move || ledger.held())
            .await
            .unwrap_or_default()
    }

    /// Whether `notice` (about the held files) was not the last one told: it is recorded as told.
    pub(super) fn first_time_told(&self, notice: &str) -> bool {
        let mut last = lock(&self.held_notified);
        let first = last.as_deref() != Some(notice);
        *last = Some(notice.to_owned());
        first
    }

    /// `/confirm-files [yes]`: what holds scheduled runs back, or (with `yes`) confirm it.
    pub(super) async fn confirm_files(&self, args: &str) -> String {
        let ledger = self.control.clone();
        let confirm = matches!(args.trim().to_lowercase().as_str(), "yes" | "y");
        let result = tokio::task::spawn_blocking(move || {
            if confirm {
                ledger.confirm()
            } else {
                Ok(ledger.held())
            }
        })
        .await;
        let held = match result {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => return format!("Could not confirm the files: {e}"),
            Err(e) => return format!("Could not read the held files: {e}"),
        };
        let list = held
            .iter()
            .map(|h| {
                let what = if h.version.is_none() { "deleted" } else { "changed" };
                format!("- {} ({what} in {} at {})", h.path, h.session, h.at)
            })
            .collect::<Vec<_>>()
            .join("\n");
        match (confirm, held.is_empty()) {
            (_, true) => "No files are held: scheduled runs are not paused.".to_owned(),
            (true, false) => format!("Confirmed; scheduled runs resume:\n{list}"),
            (false, false) => format!(
                "These files were changed by the assistant and pause scheduled runs (cron jobs, the heartbeat, \
                 Dream) until you confirm them:\n{list}\nReview them (or edit them), then send /confirm-files yes."
            ),
        }
    }
}
