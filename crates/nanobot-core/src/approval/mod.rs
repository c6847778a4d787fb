//! Asking the user before risky tool calls (`tools.approval`).
//!
//! Before a batch of tool calls runs, [`ApprovalHook`] asks each call's tool what the call does
//! ([`nanobot_tools::Tool::effects`]) and rates those effects against the [`ApprovalPolicy`], never the tool's
//! name: code that runs (a command line the exec guard rates risky, [`nanobot_tools::builtin::guard::risk`], or
//! every one under `always`: `exec`, `run_cli_app`, input written to an exec session; code nanobot cannot read,
//! such as an MCP server's tool, under `always`, or under `risky` when the guard rates one of its string
//! arguments risky), a file write outside the workspace when the file tools are not restricted to it, a write
//! to a control file ([`crate::control`]), judged on the file the write opens (links followed), and under
//! `always` scheduling unattended work. An approved control-file write is not held back from unattended runs.
//! Such a call runs only with the user's yes:
//!
//! - in a chat (the bus path), the question goes to the same chat ([`OutboundMessage`] with an `_approval`
//!   entry in its metadata, which adapters with buttons render as two buttons) and the turn waits up to the
//!   configured timeout; the next message of the same person in that chat that is a yes or a no (or the buttons'
//!   `/approve ID` / `/deny ID`) answers it instead of starting a turn;
//! - where nobody can be asked (cron, heartbeat, the API, a one-shot run) or nobody answered in time, the call
//!   is not run and the model is told that the user can allow exactly this call with `/approve ID`; a later
//!   identical call in the same session then runs once.
//!
//! A refusal is the call's (error) result for the model. This decides when to ask, never what is possible: the
//! boundary is the kernel confinement of `exec` and the file tools' sandbox (`docs/security.md`).

use nanobot_util::lock;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundMessage};
use nanobot_providers::ToolCall;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use nanobot_tools::CodeRun;

use crate::error::BoxError;
use crate::hook::{AgentHook, ToolBatch, Veto};

mod book;

pub(crate) use book::Books;
use book::{Grant, Parked};

/// The longest command or path shown in a question.
const MAX_SHOWN: usize = 1000;

/// When the user is asked (`tools.approval.mode`): the one type, shared with the config.
pub use nanobot_types::ApprovalPolicy;

/// The approval settings of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalSettings {
    /// When to ask.
    pub policy: ApprovalPolicy,
    /// How long a question waits for the answer.
    pub timeout: Duration,
    /// Who may decide besides the person who started the turn (`tools.approval.approvers`): people, each as
    /// `channel:sender id`, who answer the questions and `/approve ID` requests of the chats they are in.
    pub approvers: Vec<String>,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        Self {
            policy: ApprovalPolicy::Off,
            timeout: Duration::from_secs(120),
            approvers: Vec::new(),
        }
    }
}

impl ApprovalSettings {
    /// Settings with `policy` and `timeout`, and no approvers but the asker.
    pub fn new(policy: ApprovalPolicy, timeout: Duration) -> Self {
        Self {
            policy,
            timeout,
            approvers: Vec::new(),
        }
    }

    /// Also lets these people decide (`channel:sender id` each, as in `tools.approval.approvers`).
    #[must_use]
    pub fn with_approvers<I, S>(mut self, approvers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.approvers = approvers.into_iter().map(Into::into).collect();
        self
    }
}

/// People the user named as approvers: `channel:sender id` entries, matched against a message's authenticated
/// channel and sender (the platform's user id; an `id|name` sender matches by its id).
#[derive(Debug, Clone, Default)]
struct Approvers(Vec<(String, String)>);

impl Approvers {
    fn new(entries: &[String]) -> Self {
        Self(
            entries
                .iter()
                .filter_map(|e| e.split_once(':'))
                .map(|(c, id)| (c.trim().to_owned(), id.trim().to_owned()))
                .filter(|(c, id)| !c.is_empty() && !id.is_empty())
                .collect(),
        )
    }

    /// Whether `msg` comes from one of them (a person, never an unattended run).
    fn includes(&self, msg: &InboundMessage) -> bool {
        let id = msg.sender_id.split('|').next().unwrap_or_default();
        msg.speaks_for_person()
            && self
                .0
                .iter()
                .any(|(c, a)| *c == msg.channel && (*a == msg.sender_id || *a == id))
    }
}

/// A question for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// Short id, for `/approve ID` and `/deny ID`.
    pub id: String,
    /// The session the call belongs to.
    pub session_key: String,
    /// The tool's name.
    pub tool: String,
    /// What would be done: the command, or the tool and path.
    pub action: String,
    /// Why it is asked about.
    pub reason: String,
}

impl ApprovalRequest {
    /// The question's text, as chats show it.
    pub fn text(&self, timeout: Duration) -> String {
        format!(
            "🔐 Approval needed ({}):\n`{}`\nReply **yes** to run it or **no** to refuse (/approve {} · /deny {}). \
             Without an answer within {} s it is not run.",
            self.reason,
            self.action,
            self.id,
            self.id,
            timeout.as_secs()
        )
    }
}

/// The user's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalAnswer {
    /// Run it.
    Approve,
    /// Do not run it.
    Deny,
}

/// Who is asked in one turn. The agent asks in the turn's own chat on the bus path; a caller of
/// [`crate::AgentLoop::process_message`] may pass its own (a terminal prompt, a test).
#[async_trait]
pub trait Approver: Send + Sync {
    /// Asks the user; `None` when nobody answered within `timeout`.
    async fn ask(&self, request: &ApprovalRequest, timeout: Duration) -> Option<ApprovalAnswer>;
}

/// What a yes or a no looks like (case and punctuation ignored).
fn parse_answer(text: &str) -> Option<ApprovalAnswer> {
    let t: String = text.trim().trim_end_matches(['.', '!']).to_lowercase();
    match t.as_str() {
        "yes" | "y" | "ok" | "okay" | "approve" | "allow" | "sure" | "ja" | "是" | "好" => {
            Some(ApprovalAnswer::Approve)
        }
        "no" | "n" | "deny" | "refuse" | "stop" | "nein" | "否" | "不" => Some(ApprovalAnswer::Deny),
        _ => None,
    }
}

/// `/approve ID` or `/deny ID` (a bot mention after the command is allowed, as Telegram adds it in groups).
pub(crate) fn parse_command(text: &str) -> Option<(ApprovalAnswer, &str)> {
    let mut words = text.split_whitespace();
    let cmd = words.next()?;
    let cmd = cmd.split('@').next().unwrap_or(cmd);
    let answer = match cmd {
        "/approve" => ApprovalAnswer::Approve,
        "/deny" => ApprovalAnswer::Deny,
        _ => return None,
    };
    Some((answer, words.next().unwrap_or("")))
}

struct Waiter {
    id: String,
    /// Who may answer: the sender of the message that started the turn (and the configured approvers).
    sender: String,
    tx: oneshot::Sender<ApprovalAnswer>,
}

#[derive(Default)]
struct State {
    waiting: HashMap<String, Waiter>,
}

/// The open questions of every session of an agent (in this process: the turn waiting runs here), and the
/// books of unanswered requests and one-time approvals ([`book`]: shared with the other replicas).
pub(crate) struct Approvals {
    state: Mutex<State>,
    books: Books,
    approvers: Approvers,
}

impl Approvals {
    /// Questions and requests that the asker, and the people `settings` names as approvers, decide; the books
    /// kept in `books`.
    pub(crate) fn new(settings: &ApprovalSettings, books: Books) -> Self {
        Self {
            state: Mutex::default(),
            books,
            approvers: Approvers::new(&settings.approvers),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Registers the question `id` of `session`; only `sender` may answer it.
    fn wait(&self, session: &str, id: &str, sender: &str) -> oneshot::Receiver<ApprovalAnswer> {
        let (tx, rx) = oneshot::channel();
        self.state().waiting.insert(
            session.to_owned(),
            Waiter {
                id: id.to_owned(),
                sender: sender.to_owned(),
                tx,
            },
        );
        rx
    }

    fn stop_waiting(&self, session: &str, id: &str) {
        let mut st = self.state();
        if st.waiting.get(session).is_some_and(|w| w.id == id) {
            st.waiting.remove(session);
        }
    }

    /// When `msg` answers the open question of `session`: hands the answer to the waiting turn and returns the
    /// acknowledgement to show. Anything else (another person, another text) is left alone.
    pub(crate) fn try_answer(&self, session: &str, msg: &InboundMessage) -> Option<String> {
        if !msg.speaks_for_person() {
            return None;
        }
        let mut st = self.state();
        let waiter = st.waiting.get(session)?;
        if waiter.sender != msg.sender_id && !self.approvers.includes(msg) {
            return None;
        }
        let answer = match parse_command(&msg.content) {
            Some((a, id)) if id == waiter.id || id.is_empty() => a,
            Some(_) => return None,
            None => parse_answer(&msg.content)?,
        };
        let waiter = st.waiting.remove(session)?;
        let _ = waiter.tx.send(answer);
        Some(match answer {
            ApprovalAnswer::Approve => format!("✓ Approved ({}).", waiter.id),
            ApprovalAnswer::Deny => format!("✗ Refused ({}).", waiter.id),
        })
    }

    /// Records the request `id` of `session` that nobody could answer, for `/approve ID` later.
    fn park(&self, session: &str, id: &str, asker: Option<&str>, call: String, action: &str) {
        let parked = Parked {
            id: id.to_owned(),
            asker: asker.map(str::to_owned),
            call,
            action: action.to_owned(),
            at_ms: book::now_ms(),
        };
        if let Err(e) = self.books.update(session, |entries| {
            entries.parked.push(parked.clone());
            (true, ())
        }) {
            tracing::warn!(session, error = %e, "cannot record an approval request; /approve {id} will not find it");
        }
    }

    /// `/approve ID` or `/deny ID` from `msg` for a request that is no longer waiting: the text of the reply. Only
    /// the person the request belongs to decides it (anyone else, and any unattended run, is told there is no
    /// such request of theirs); an approval lets exactly that call run once, in a turn of that person (or, for a
    /// call an unattended run made, in the next such run or a turn of the approver).
    pub(crate) fn decide_parked(
        &self,
        session: &str,
        answer: ApprovalAnswer,
        id: &str,
        msg: &InboundMessage,
    ) -> String {
        let who = msg.sender_id.as_str();
        let approver = self.approvers.includes(msg);
        let decided = self.books.update(session, |entries| {
            let found = entries.parked.iter().position(|p| {
                p.id == id
                    && msg.speaks_for_person()
                    && (approver || p.asker.as_deref().is_none_or(|a| a == who))
            });
            let Some(pos) = found else {
                return (false, None);
            };
            let parked = entries.parked.remove(pos);
            if answer == ApprovalAnswer::Approve {
                entries.grants.push(Grant {
                    call: parked.call.clone(),
                    asker: parked.asker.clone(),
                    approver: who.to_owned(),
                    at_ms: book::now_ms(),
                });
            }
            (true, Some(parked.action))
        });
        match decided {
            Err(e) => {
                tracing::warn!(session, error = %e, "cannot record an approval decision");
                format!("Cannot record the decision on {id} right now ({e}); please try again.")
            }
            Ok(None) if id.is_empty() => {
                "Usage: /approve ID or /deny ID (the id is in the approval request).".to_owned()
            }
            Ok(None) => format!("No approval request {id} in this chat (requests expire after 10 minutes)."),
            Ok(Some(action)) => match answer {
                ApprovalAnswer::Deny => format!("✗ Refused ({id}): `{action}`."),
                ApprovalAnswer::Approve => format!(
                    "✓ Approved once ({id}): `{action}`. Ask me to go on within 10 minutes and it will run."
                ),
            },
        }
    }

    /// Uses up a one-time approval of exactly `call` in `session` that a turn of `asker` may spend.
    fn take_grant(&self, session: &str, call: &str, asker: Option<&str>) -> bool {
        let taken = self.books.update(session, |entries| {
            match entries
                .grants
                .iter()
                .position(|g| g.call == call && g.usable_by(asker))
            {
                Some(pos) => {
                    entries.grants.remove(pos);
                    (true, true)
                }
                None => (false, false),
            }
        });
        taken.unwrap_or_else(|e| {
            tracing::warn!(session, error = %e, "cannot read the approvals of a session; the call is asked about");
            false
        })
    }
}

/// Asks in the turn's own chat on the bus and waits for the answer routed by [`crate::AgentLoop::submit`].
pub(crate) struct BusApprover {
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) channel: String,
    pub(crate) chat_id: String,
    pub(crate) sender: String,
    pub(crate) metadata: Map<String, Value>,
}

#[async_trait]
impl Approver for BusApprover {
    async fn ask(&self, request: &ApprovalRequest, timeout: Duration) -> Option<ApprovalAnswer> {
        let rx = self
            .approvals
            .wait(&request.session_key, &request.id, &self.sender);
        let mut out = OutboundMessage::reply(&self.channel, &self.chat_id, request.text(timeout));
        out.metadata = self.metadata.clone();
        out.metadata.insert(
            "_approval".into(),
            json!({
                "id": request.id,
                "approve": format!("/approve {}", request.id),
                "deny": format!("/deny {}", request.id),
            }),
        );
        if let Err(e) = self.bus.publish_outbound(out).await {
            tracing::warn!(error = %e, "cannot ask for approval");
            self.approvals.stop_waiting(&request.session_key, &request.id);
            return None;
        }
        let answer = tokio::time::timeout(timeout, rx).await.ok().and_then(Result::ok);
        self.approvals.stop_waiting(&request.session_key, &request.id);
        answer
    }
}

/// The per-turn hook that holds back calls needing the user's yes.
pub(crate) struct ApprovalHook {
    pub(crate) settings: ApprovalSettings,
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) session_key: String,
    /// The turn's tools: the gate asks each what a call does.
    pub(crate) tools: Arc<nanobot_tools::ToolRegistry>,
    /// The person who started the turn; `None` for an unattended run (cron, heartbeat, trigger, subagent).
    pub(crate) asker: Option<String>,
    pub(crate) workspace: PathBuf,
    /// The file tools are confined to the workspace (their sandbox refuses writes outside; nothing to ask).
    pub(crate) restricted: bool,
    /// Control files whose write the user approved in this turn (read by the control-file hook).
    pub(crate) approved_control: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

/// The control file (workspace-relative, `/`-separated) that `path` is, if any. `path` is absolute and normal.
fn control_rel(workspace: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(workspace).ok()?;
    let rel: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let rel = rel.join("/");
    crate::control::is_control_file(&rel).then_some(rel)
}

/// Where a write to `path` (as the model wrote it) lands, judged on the text and on the disk.
struct WriteTarget {
    /// The path as written, normalised; `None` for a `~` path.
    lexical: Option<PathBuf>,
    /// The file actually opened: links followed (a link to a link too, a dangling one included), the missing
    /// rest appended; `None` when it cannot be told.
    on_disk: Option<PathBuf>,
}

impl WriteTarget {
    fn of(workspace: &Path, path: &str) -> Self {
        let lexical = lexical(workspace, path);
        let on_disk = lexical.as_deref().and_then(follow);
        Self { lexical, on_disk }
    }

    /// The control file either path is (a link named like a control file, or a link leading to one).
    fn control(&self, workspace: &Path, real_workspace: Option<&Path>) -> Option<String> {
        self.lexical
            .as_deref()
            .and_then(|p| control_rel(workspace, p))
            .or_else(|| {
                let real = real_workspace?;
                self.on_disk.as_deref().and_then(|p| control_rel(real, p))
            })
    }

    /// Whether the write leaves the workspace by its text or by the file it opens.
    fn outside(&self, workspace: &Path, real_workspace: Option<&Path>) -> bool {
        let lexical_out = self.lexical.as_deref().is_none_or(|p| !p.starts_with(workspace));
        let disk_out = match (&self.on_disk, real_workspace) {
            (Some(p), Some(real)) => !p.starts_with(real),
            _ => false,
        };
        lexical_out || disk_out
    }
}

/// The file a write to the absolute, normal path `p` opens: symlinks followed wherever they stand (a chain, a
/// dangling one, one in a directory of the path; at most 40 per place), an existing file resolved by the kernel,
/// a missing name appended to its resolved directory.
fn follow(p: &Path) -> Option<PathBuf> {
    let mut p = p.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p).ok()?;
                p = nanobot_util::normalize(&p.parent()?.join(target));
            }
            Ok(_) => return std::fs::canonicalize(&p).ok(),
            Err(_) => {
                let name = p.file_name()?.to_owned();
                return Some(follow(p.parent()?)?.join(name));
            }
        }
    }
    None
}

fn shown(s: &str) -> String {
    crate::text::truncate_chars(s, MAX_SHOWN)
}

/// `path` (as the model wrote it) joined to `workspace` and normalised on the text (`..` and `.` applied); `None`
/// for a `~` path.
fn lexical(workspace: &Path, path: &str) -> Option<PathBuf> {
    if path.starts_with('~') {
        return None;
    }
    let p = Path::new(path);
    Some(nanobot_util::normalize(&if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace.join(p)
    }))
}

/// Whether `path` (as the model wrote it) leaves `workspace`, judged on the text.
#[cfg(test)]
fn outside(workspace: &Path, path: &str) -> bool {
    lexical(workspace, path).is_none_or(|p| !p.starts_with(workspace))
}

/// Why a control-file write is asked about.
const CONTROL_REASON: &str = "changes a file that shapes every later turn and the scheduled runs";

/// A call's rating: what it would do and why the user is asked, and the control files it writes.
struct Rating {
    action: String,
    reason: String,
    control: Vec<String>,
}

impl ApprovalHook {
    /// Spends a one-time approval of `exact` (off the async runtime: the books are files).
    async fn take_grant(&self, exact: &str) -> bool {
        let (approvals, session, exact, asker) = (
            self.approvals.clone(),
            self.session_key.clone(),
            exact.to_owned(),
            self.asker.clone(),
        );
        tokio::task::spawn_blocking(move || approvals.take_grant(&session, &exact, asker.as_deref()))
            .await
            .unwrap_or(false)
    }

    /// Parks the request `id` for `exact` (off the async runtime).
    async fn park(&self, id: &str, exact: String, action: &str) {
        let (approvals, session, id, action, asker) = (
            self.approvals.clone(),
            self.session_key.clone(),
            id.to_owned(),
            action.to_owned(),
            self.asker.clone(),
        );
        let parked = tokio::task::spawn_blocking(move || {
            approvals.park(&session, &id, asker.as_deref(), exact, &action);
        })
        .await;
        if let Err(e) = parked {
            tracing::warn!(error = %e, "cannot record an approval request");
        }
    }

    /// What `call` would do and why it needs the user's yes, decided on the effects its tool declares
    /// ([`nanobot_tools::Tool::effects`]), never on its name; `None` when it runs without asking.
    fn rate(&self, call: &ToolCall) -> Option<Rating> {
        let policy = self.settings.policy;
        if policy == ApprovalPolicy::Off {
            return None;
        }
        let effects = self.tools.effects(&call.name, &call.arguments);
        let real_workspace = std::fs::canonicalize(&self.workspace).ok();
        let targets: Vec<(&str, WriteTarget)> = effects
            .writes
            .iter()
            .map(|p| (p.as_str(), WriteTarget::of(&self.workspace, p)))
            .collect();
        let control: Vec<String> = targets
            .iter()
            .filter_map(|(_, t)| t.control(&self.workspace, real_workspace.as_deref()))
            .collect();
        let rating = |action: String, reason: &str| Rating {
            action: shown(&action),
            reason: reason.to_owned(),
            control: control.clone(),
        };
        match (&effects.runs_code, policy) {
            (Some(CodeRun::Command(command)), ApprovalPolicy::Always) => {
                return Some(rating(
                    command.clone(),
                    "every command is asked about: tools.approval.mode is \"always\"",
                ));
            }
            (Some(CodeRun::Command(command)), _) => {
                if let Some(r) = nanobot_tools::builtin::guard::risk(command) {
                    return Some(rating(command.clone(), &r));
                }
            }
            (Some(CodeRun::Opaque(tool)), ApprovalPolicy::Always) => {
                return Some(rating(
                    format!("{tool} {}", call.arguments),
                    "runs code nanobot cannot read (an MCP server not declared readOnly, or a tool that does not \
                     declare its effects): tools.approval.mode is \"always\"",
                ));
            }
            // Under `risky`, what the guard would rate risky in any of its string arguments.
            (Some(CodeRun::Opaque(tool)), _) => {
                if let Some(r) = string_values(&call.arguments).find_map(nanobot_tools::builtin::guard::risk)
                {
                    return Some(rating(format!("{tool} {}", call.arguments), &r));
                }
            }
            // A kind of code this version does not know: asked about wherever code is.
            (Some(_), ApprovalPolicy::Always) => {
                return Some(rating(
                    format!("{} {}", call.name, call.arguments),
                    "runs code: tools.approval.mode is \"always\"",
                ));
            }
            (Some(_) | None, _) => {}
        }
        let writes = || {
            let all: Vec<&str> = targets.iter().map(|(p, _)| *p).collect();
            format!("{} {}", call.name, all.join(", "))
        };
        if !self.restricted
            && targets
                .iter()
                .any(|(_, t)| t.outside(&self.workspace, real_workspace.as_deref()))
        {
            return Some(rating(writes(), "writes outside the workspace"));
        }
        if !control.is_empty() {
            return Some(rating(writes(), CONTROL_REASON));
        }
        if policy == ApprovalPolicy::Always
            && let Some(what) = &effects.schedules
        {
            return Some(rating(
                format!("{} {what}", call.name),
                "schedules work that runs later, unattended: tools.approval.mode is \"always\"",
            ));
        }
        None
    }
}

/// Every string inside `v` (arguments of a tool whose code nanobot cannot read).
fn string_values(v: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match v {
        Value::String(s) => Box::new(std::iter::once(s.as_str())),
        Value::Array(a) => Box::new(a.iter().flat_map(string_values)),
        Value::Object(o) => Box::new(o.values().flat_map(string_values)),
        _ => Box::new(std::iter::empty()),
    }
}

#[async_trait]
impl AgentHook for ApprovalHook {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        let mut vetoes = Vec::new();
        for call in batch.calls {
            let Some(Rating {
                action,
                reason,
                control,
            }) = self.rate(call)
            else {
                continue;
            };
            let exact = format!("{}\u{0}{}", call.name, call.arguments);
            if self.take_grant(&exact).await {
                tracing::info!(tool = %call.name, "running a call the user approved with /approve");
                nanobot_util::lock(&self.approved_control).extend(control);
                continue;
            }
            let id = uuid::Uuid::new_v4().simple().to_string()[..6].to_owned();
            let request = ApprovalRequest {
                id: id.clone(),
                session_key: self.session_key.clone(),
                tool: call.name.clone(),
                action: action.clone(),
                reason: reason.clone(),
            };
            let answer = match &self.approver {
                Some(a) => a.ask(&request, self.settings.timeout).await,
                None => {
                    self.park(&id, exact, &action).await;
                    vetoes.push(Veto::new(
                        &call.id,
                        format!(
                            "Not run: this call needs the user's approval ({reason}) and nobody can be asked in this \
                             turn. The user can allow exactly this call by sending `/approve {id}` in this chat; \
                             then make the same call again. Tell the user what you wanted to run and why."
                        ),
                    ));
                    continue;
                }
            };
            match answer {
                Some(ApprovalAnswer::Approve) => {
                    tracing::info!(tool = %call.name, id, "the user approved a call");
                    nanobot_util::lock(&self.approved_control).extend(control);
                }
                Some(ApprovalAnswer::Deny) => {
                    tracing::info!(tool = %call.name, id, "the user refused a call");
                    vetoes.push(Veto::new(
                        &call.id,
                        "Not run: the user refused this call. Do not try to reach the same result another way; \
                         ask the user what they want instead.",
                    ));
                }
                None => {
                    self.park(&id, exact, &action).await;
                    vetoes.push(Veto::new(
                        &call.id,
                        format!(
                            "Not run: the user did not answer the approval request within {} s. They can still \
                             allow exactly this call with `/approve {id}`; then make the same call again.",
                            self.settings.timeout.as_secs()
                        ),
                    ));
                }
            }
        }
        Ok(vetoes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Approvals keeping their books in a fresh directory (kept alive by the returned guard).
    fn approvals(settings: &ApprovalSettings) -> (tempfile::TempDir, Approvals) {
        let dir = tempfile::tempdir().unwrap();
        let a = Approvals::new(settings, Books::new(dir.path()));
        (dir, a)
    }

    #[test]
    fn answers_and_commands_parse() {
        for t in ["yes", "Yes!", " y ", "OK", "approve"] {
            assert_eq!(parse_answer(t), Some(ApprovalAnswer::Approve), "{t}");
        }
        for t in ["no", "No.", "n", "deny"] {
            assert_eq!(parse_answer(t), Some(ApprovalAnswer::Deny), "{t}");
        }
        for t in ["yes please run rm", "maybe", "", "/approve abc"] {
            assert_eq!(parse_answer(t), None, "{t}");
        }
        assert_eq!(
            parse_command("/approve ab12cd"),
            Some((ApprovalAnswer::Approve, "ab12cd"))
        );
        assert_eq!(
            parse_command("/deny@my_bot ab12cd"),
            Some((ApprovalAnswer::Deny, "ab12cd"))
        );
        assert_eq!(parse_command("/approve"), Some((ApprovalAnswer::Approve, "")));
        assert_eq!(parse_command("/status"), None);
    }

    #[test]
    fn outside_the_workspace_is_judged_after_dot_dot() {
        let ws = Path::new("/home/u/.nanobot/workspace");
        assert!(!outside(ws, "notes.md"));
        assert!(!outside(ws, "a/../b.md"));
        assert!(!outside(ws, "/home/u/.nanobot/workspace/x"));
        assert!(outside(ws, "../config.json"));
        assert!(outside(ws, "a/../../x"));
        assert!(outside(ws, "/etc/passwd"));
        assert!(outside(ws, "~/.bashrc"));
        assert!(outside(ws, "/home/u/.nanobot/workspace2/x"));
    }

    #[test]
    fn only_the_asker_answers_and_grants_are_exact_and_single_use() {
        let (_dir, a) = approvals(&ApprovalSettings::default());
        let mut rx = a.wait("tg:1", "abc123", "alice");
        let from = |who: &str, text: &str| InboundMessage::new("telegram", who, "1", text);
        assert_eq!(a.try_answer("tg:1", &from("bob", "yes")), None);
        assert_eq!(a.try_answer("tg:1", &from("alice", "what is this?")), None);
        assert_eq!(a.try_answer("tg:1", &from("alice", "/approve zzz")), None);
        assert!(a.try_answer("tg:1", &from("alice", "no")).is_some());
        assert_eq!(rx.try_recv(), Ok(ApprovalAnswer::Deny));
        assert_eq!(a.try_answer("tg:1", &from("alice", "yes")), None, "answered once");

        let rm_x = "exec\0{\"command\":\"rm x\"}";
        a.park("tg:1", "p1", Some("alice"), rm_x.into(), "rm x");
        let approve = |session: &str, msg: &InboundMessage| {
            a.decide_parked(session, ApprovalAnswer::Approve, "p1", msg)
        };
        assert!(approve("tg:2", &from("alice", "/approve p1")).starts_with("No approval request"));
        // Another member of the group, and an unattended run speaking with alice's id, decide nothing.
        assert!(approve("tg:1", &from("bob", "/approve p1")).starts_with("No approval request"));
        let cron = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Cron,
            "telegram",
            "alice",
            "1",
            "/approve p1",
        );
        assert!(approve("tg:1", &cron).starts_with("No approval request"));
        assert!(approve("tg:1", &from("alice", "/approve p1")).starts_with("✓ Approved once"));
        assert!(!a.take_grant("tg:1", "exec\0{\"command\":\"rm y\"}", Some("alice")));
        // Spent only by a turn of alice's: not bob's, not an unattended run's.
        assert!(!a.take_grant("tg:1", rm_x, Some("bob")));
        assert!(!a.take_grant("tg:1", rm_x, None));
        assert!(a.take_grant("tg:1", rm_x, Some("alice")));
        assert!(!a.take_grant("tg:1", rm_x, Some("alice")), "single use");
    }

    #[test]
    fn configured_approvers_decide_in_the_chats_they_are_in_and_nobody_else_does() {
        let settings = ApprovalSettings::new(ApprovalPolicy::Always, Duration::from_secs(60))
            .with_approvers(["telegram:carol", "discord:bob"]);
        let (_dir, a) = approvals(&settings);
        let on = |channel: &str, who: &str, text: &str| InboundMessage::new(channel, who, "1", text);
        // A live question: carol (a listed approver) answers it; bob is listed on another platform only.
        let mut rx = a.wait("tg:1", "q1", "alice");
        assert_eq!(a.try_answer("tg:1", &on("telegram", "bob", "yes")), None);
        assert!(
            a.try_answer("tg:1", &on("telegram", "carol|Carol", "yes"))
                .is_some()
        );
        assert_eq!(rx.try_recv(), Ok(ApprovalAnswer::Approve));
        // A parked request: carol decides it; an unattended run speaking as carol does not.
        let call = "exec\0{\"command\":\"rm x\"}";
        a.park("tg:1", "p1", Some("alice"), call.into(), "rm x");
        let cron = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Cron,
            "telegram",
            "carol",
            "1",
            "/approve p1",
        );
        let decide = |msg: &InboundMessage| a.decide_parked("tg:1", ApprovalAnswer::Approve, "p1", msg);
        assert!(decide(&cron).starts_with("No approval request"));
        assert!(decide(&on("telegram", "bob", "/approve p1")).starts_with("No approval request"));
        assert!(decide(&on("telegram", "carol", "/approve p1")).starts_with("✓ Approved once"));
        // The grant is spent by alice's turn (or carol's own), once.
        assert!(a.take_grant("tg:1", call, Some("alice")));
        assert!(!a.take_grant("tg:1", call, Some("carol")));
    }

    #[test]
    fn a_call_an_unattended_run_made_is_decided_by_a_person_of_its_chat_and_spent_once() {
        let (_dir, a) = approvals(&ApprovalSettings::default());
        let from = |who: &str, text: &str| InboundMessage::new("telegram", who, "1", text);
        let call = "exec\0{\"command\":\"ls\"}";
        a.park("cron:j", "c1", None, call.into(), "ls");
        let cron = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Cron,
            "telegram",
            "cron",
            "1",
            "/approve c1",
        );
        assert!(
            a.decide_parked("cron:j", ApprovalAnswer::Approve, "c1", &cron)
                .starts_with("No approval request")
        );
        assert!(
            a.decide_parked(
                "cron:j",
                ApprovalAnswer::Approve,
                "c1",
                &from("carol", "/approve c1")
            )
            .starts_with("✓ Approved once")
        );
        assert!(!a.take_grant("cron:j", call, Some("dave")));
        assert!(a.take_grant("cron:j", call, None), "the next run of the job");
        assert!(!a.take_grant("cron:j", call, Some("carol")), "single use");
    }

    /// Issue 42: a request parked by one replica is decided on another and spent on a third, whether the
    /// replicas share a home or each has its own (a shared store); and it outlives a restart.
    #[test]
    fn requests_and_grants_are_shared_by_replicas_and_outlive_a_restart() {
        let settings = ApprovalSettings::default();
        let from = |who: &str, text: &str| InboundMessage::new("telegram", who, "1", text);
        let call = "exec\0{\"command\":\"rm x\"}";
        let approve = |a: &Approvals| {
            a.decide_parked(
                "tg:1",
                ApprovalAnswer::Approve,
                "p1",
                &from("alice", "/approve p1"),
            )
        };

        // One home, three processes (and a restart: a new process on the same home).
        let home = tempfile::tempdir().unwrap();
        let replica = || Approvals::new(&settings, Books::new(home.path()));
        replica().park("tg:1", "p1", Some("alice"), call.into(), "rm x");
        assert!(approve(&replica()).starts_with("✓ Approved once"));
        assert!(
            approve(&replica()).starts_with("No approval request"),
            "decided once"
        );
        let third = replica();
        assert!(!third.take_grant("tg:1", call, Some("bob")));
        assert!(third.take_grant("tg:1", call, Some("alice")));
        assert!(!replica().take_grant("tg:1", call, Some("alice")), "spent once");
        assert!(
            std::fs::read_dir(home.path().join(book::BOOKS_DIR))
                .unwrap()
                .filter_map(Result::ok)
                .all(|e| e.file_name() == ".lock"),
            "an empty book is deleted"
        );

        // Homes of their own and a shared store.
        let store = nanobot_util::MemorySharedFiles::default();
        let homes: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let replicas: Vec<Approvals> = homes
            .iter()
            .map(|h| {
                Approvals::new(
                    &settings,
                    Books::new(h.path()).with_shared(Arc::new(store.sharing())),
                )
            })
            .collect();
        replicas[0].park("tg:1", "p1", Some("alice"), call.into(), "rm x");
        replicas[0].park("tg:1", "p2", Some("alice"), "exec\0{}".into(), "rm y");
        assert!(approve(&replicas[1]).starts_with("✓ Approved once"));
        let deny = replicas[2].decide_parked("tg:1", ApprovalAnswer::Deny, "p2", &from("alice", "/deny p2"));
        assert!(deny.starts_with("✗ Refused"), "{deny}");
        assert!(
            approve(&replicas[0]).starts_with("No approval request"),
            "decided once"
        );
        assert!(replicas[2].take_grant("tg:1", call, Some("alice")));
        assert!(!replicas[0].take_grant("tg:1", call, Some("alice")), "spent once");
        assert!(
            !replicas[1].take_grant("tg:1", "exec\0{}", Some("alice")),
            "refused, not granted"
        );
    }

    #[test]
    fn requests_expire_and_an_unreadable_book_starts_again() {
        let home = tempfile::tempdir().unwrap();
        let a = Approvals::new(&ApprovalSettings::default(), Books::new(home.path()));
        let from = |text: &str| InboundMessage::new("telegram", "alice", "1", text);
        a.books
            .update("tg:1", |e| {
                e.parked.push(Parked {
                    id: "old".into(),
                    asker: Some("alice".into()),
                    call: "c".into(),
                    action: "a".into(),
                    at_ms: book::now_ms() - i64::try_from(book::PARKED_FOR.as_millis()).unwrap() - 1,
                });
                (true, ())
            })
            .unwrap();
        let old = a.decide_parked("tg:1", ApprovalAnswer::Approve, "old", &from("/approve old"));
        assert!(old.starts_with("No approval request old"), "{old}");
        // A damaged file is nanobot's own: it is started again, and parking works.
        let dir = home.path().join(book::BOOKS_DIR);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            if e.file_name() != ".lock" {
                std::fs::write(e.path(), "{not json").unwrap();
            }
        }
        a.park("tg:1", "p1", Some("alice"), "c".into(), "a");
        let ok = a.decide_parked("tg:1", ApprovalAnswer::Approve, "p1", &from("/approve p1"));
        assert!(ok.starts_with("✓ Approved once"), "{ok}");
    }
}
