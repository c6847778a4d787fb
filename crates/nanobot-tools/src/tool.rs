//! The [`Tool`] trait and what flows in and out of a call.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_types::ToolSpec;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;

/// Something the agent can do: a name, a description and a JSON Schema for the model, and an
/// async `execute`.
///
/// Implementations are registered once behind `Arc<dyn Tool>` in a
/// [`ToolRegistry`](crate::ToolRegistry). Arguments reach `execute` already cast to their schema
/// types and validated. For a typed tool whose schema comes from an args struct, implement
/// [`TypedTool`](crate::TypedTool) instead.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls the tool by (`read_file`, `mcp_github_search`).
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema (an `object` schema) of the arguments.
    fn parameters(&self) -> Value;

    /// True when the tool has no side effects (reads only).
    fn read_only(&self) -> bool {
        false
    }

    /// What a call with `args` does ([`Effects`]), for the approval gate, which decides on effects and never on
    /// names. `args` are the model's, before casting; a tool reads what it needs leniently. The default: nothing
    /// for a [`Tool::read_only`] tool, else [`Effects::opaque`] (it may run code nanobot cannot see), so a tool
    /// that does not say is asked about wherever running code is.
    fn effects(&self, args: &Value) -> Effects {
        let _ = args;
        if self.read_only() {
            Effects::none()
        } else {
            Effects::opaque(self.name())
        }
    }

    /// True when the tool must run alone, never beside another tool call (like `exec`).
    fn exclusive(&self) -> bool {
        false
    }

    /// True when the tool may run concurrently with other concurrency-safe calls.
    fn concurrency_safe(&self) -> bool {
        self.read_only() && !self.exclusive()
    }

    /// Runs the tool. `args` is a JSON object that passed the schema.
    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// Ends what the tool keeps running for session `session_key` beyond a call (the user sent `/stop`); returns
    /// how many things it ended. Default: nothing.
    async fn stop_session(&self, _session_key: &str) -> usize {
        0
    }

    /// Ends everything the tool keeps running beyond a call (the agent shuts down). Default: nothing.
    async fn shutdown(&self) {}

    /// The tool as a provider sees it.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

/// Where and for whom a tool call runs.
///
/// Cheap to clone. The agent core builds one per turn and sets [`ToolContext::call_id`] per call.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The agent's workspace; relative paths resolve against it.
    pub workspace: PathBuf,
    /// The session key (`telegram:12345`).
    pub session_key: String,
    /// The channel of the message being answered.
    pub channel: String,
    /// The chat id of the message being answered.
    pub chat_id: String,
    /// The provider's id of this tool call, when known (names persisted large results).
    pub call_id: Option<String>,
    /// Cancelled when the turn is stopped; long-running tools watch it.
    pub cancel: CancellationToken,
    /// Typed values for tools that need more (a bus handle, a cron service, …).
    pub extensions: Extensions,
}

impl ToolContext {
    /// A context for `workspace` with empty routing and a fresh cancellation token.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            session_key: String::new(),
            channel: String::new(),
            chat_id: String::new(),
            call_id: None,
            cancel: CancellationToken::new(),
            extensions: Extensions::default(),
        }
    }

    /// Sets the session key.
    pub fn with_session(mut self, session_key: impl Into<String>) -> Self {
        self.session_key = session_key.into();
        self
    }

    /// Sets the channel and chat id.
    pub fn with_route(mut self, channel: impl Into<String>, chat_id: impl Into<String>) -> Self {
        self.channel = channel.into();
        self.chat_id = chat_id.into();
        self
    }

    /// Sets the tool-call id.
    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = Some(call_id.into());
        self
    }

    /// Uses `cancel` as the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }
}

/// A type map for values a tool needs beyond the basic context.
#[derive(Clone, Default)]
pub struct Extensions(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Extensions {
    /// Stores `value`, replacing a previous value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The stored value of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref::<T>())
    }

    /// Number of stored values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions").field("len", &self.0.len()).finish()
    }
}

/// The result of a tool call: text for the model plus media files (images) to attach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// What the model reads.
    pub text: String,
    /// Files (images) that go to the model as media.
    pub media: Vec<PathBuf>,
    /// True when this is an error result (the text starts with `Error` and ends with the hint).
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// An error result with exactly this text (the registry appends [`crate::ERROR_HINT`]).
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            media: Vec::new(),
            is_error: true,
        }
    }

    /// Adds a media file.
    pub fn with_media(mut self, path: impl Into<PathBuf>) -> Self {
        self.media.push(path.into());
        self
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self::text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        Self::text(text)
    }
}

/// What one tool call does, as its tool declares it ([`Tool::effects`]). Built with the constructors and the
/// `with_*` methods; each part is a fact the approval policy can name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Effects {
    /// Code runs: the command or program as the user would read it, when the tool can show it.
    pub runs_code: Option<CodeRun>,
    /// Files it writes, as the model named them (the gate resolves them on disk).
    pub writes: Vec<String>,
    /// It reaches the network (a fetch, a search; commands are judged by their code).
    pub network: bool,
    /// It schedules unattended work (a cron job, a trigger): what, as the user would read it.
    pub schedules: Option<String>,
    /// It sends a message to a chat.
    pub sends: bool,
    /// It starts another agent (a subagent).
    pub starts_agent: bool,
}

/// Code a call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodeRun {
    /// A command line, shown to the user and rated by the guard.
    Command(String),
    /// Code nanobot cannot read (an MCP server's tool, a tool that does not declare its effects), named by the tool.
    Opaque(String),
}

impl Effects {
    /// A call that changes nothing and reaches nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// A call that runs the command line `command`.
    pub fn command(command: impl Into<String>) -> Self {
        Self {
            runs_code: Some(CodeRun::Command(command.into())),
            ..Self::default()
        }
    }

    /// A call that may run code nanobot cannot read, by the tool `tool`.
    pub fn opaque(tool: impl Into<String>) -> Self {
        Self {
            runs_code: Some(CodeRun::Opaque(tool.into())),
            ..Self::default()
        }
    }

    /// A call that writes the files `paths`.
    pub fn writes<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            writes: paths.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// These effects, reaching the network too.
    pub fn with_network(mut self) -> Self {
        self.network = true;
        self
    }

    /// These effects, scheduling `what` to run unattended too.
    pub fn with_schedule(mut self, what: impl Into<String>) -> Self {
        self.schedules = Some(what.into());
        self
    }

    /// These effects, sending a message too.
    pub fn with_send(mut self) -> Self {
        self.sends = true;
        self
    }

    /// These effects, starting another agent too.
    pub fn with_agent(mut self) -> Self {
        self.starts_agent = true;
        self
    }

    /// True when the call changes nothing and reaches nothing.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

/// Folders one call must not reach, and folders inside them it may: a [`ToolContext`] extension the agent sets
/// per turn (under a divided memory scope, `memory/scopes/` is hidden and the turn's own scope shown). The file
/// tools refuse paths into a hidden folder and their walks skip it ([`crate::sandbox::Sandbox::for_call`]);
/// `exec` covers it with an empty tmpfs and binds the shown folders back (under the namespace sandbox; Landlock
/// cannot hide a folder inside the workspace it grants). Absolute paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HiddenPaths {
    /// Folders the call must not reach.
    pub hidden: Vec<PathBuf>,
    /// Folders inside them it may reach.
    pub shown: Vec<PathBuf>,
}

impl HiddenPaths {
    /// `hidden` folders, with `shown` ones inside them reachable.
    pub fn new(hidden: Vec<PathBuf>, shown: Vec<PathBuf>) -> Self {
        Self { hidden, shown }
    }
}
