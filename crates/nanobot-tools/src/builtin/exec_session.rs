//! Exec sessions (nanobot 0.3.5's): `exec` with `yield_time_ms` returns while the command still runs, and the
//! model goes on with it through `exec_session` (send input, wait for output or for exit, terminate) and
//! `list_exec_sessions`.
//!
//! A session is the same confined command as any `exec` call (sandbox, limits, scrubbed environment, its own
//! process group), kept running between calls. Each is bounded: its `exec` timeout still ends it (default 60 s,
//! at most 600 s), at most [`MAX_SESSIONS`] run at once, one nobody polled for [`IDLE_TIMEOUT`] is ended, and
//! its output is kept within [`MAX_OUTPUT_CHARS`] (the start and the most recent part). A session belongs to the
//! conversation that started it: another conversation neither sees nor reaches it; `/stop` ends a conversation's
//! sessions and shutting the agent down ends them all.

use nanobot_util::lock;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::{Notify, watch};

use super::exec::{GroupKill, Spawned};
use crate::error::ToolError;
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// Sessions running at once.
pub const MAX_SESSIONS: usize = 8;
/// A session nobody polled for this long is ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(1800);
/// The most output kept per stream between polls (and returned by one call).
pub const MAX_OUTPUT_CHARS: usize = 50_000;
/// Output returned by one call unless the call says otherwise.
pub const DEFAULT_OUTPUT_CHARS: usize = 10_000;
/// Longest single wait of `exec` with `yield_time_ms` (0.3.5's bound).
pub const MAX_YIELD_MS: u64 = 30_000;
const DEFAULT_YIELD_MS: u64 = 1_000;
const DEFAULT_WAIT_FOR_MS: u64 = 10_000;
const DEFAULT_UNTIL_EXIT_MS: u64 = 600_000;
/// Longest wait of one `exec_session` call.
pub const MAX_WAIT_MS: u64 = 600_000;
/// After the process is done: how long its last output may take to arrive.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// After a short wait: how long to give output that is about to arrive.
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// Keeps the first half and the most recent half of `max` characters of a stream.
#[derive(Debug, Default)]
struct Bounded {
    head: String,
    head_chars: usize,
    tail: String,
    tail_chars: usize,
    total: usize,
}

impl Bounded {
    fn push(&mut self, text: &str, max: usize) {
        let n = text.chars().count();
        self.total += n;
        let head_room = max / 2 - self.head_chars.min(max / 2);
        let (to_head, rest) = if self.tail_chars == 0 && head_room > 0 {
            let cut = text.char_indices().nth(head_room).map_or(text.len(), |(i, _)| i);
            text.split_at(cut)
        } else {
            ("", text)
        };
        self.head.push_str(to_head);
        self.head_chars += to_head.chars().count();
        self.tail.push_str(rest);
        self.tail_chars += rest.chars().count();
        let keep = max - max / 2;
        // Trimmed in batches, so a stream of small writes costs linear time.
        if self.tail_chars > keep * 2 {
            let drop = self.tail_chars - keep;
            let cut = self
                .tail
                .char_indices()
                .nth(drop)
                .map_or(self.tail.len(), |(i, _)| i);
            self.tail.drain(..cut);
            self.tail_chars = keep;
        }
    }

    fn has_output(&self) -> bool {
        self.total > 0
    }

    /// Everything kept, within `max`; and how many characters were left out.
    fn drain(&mut self, max: usize) -> (String, usize) {
        let keep = max - max / 2;
        if self.tail_chars > keep {
            let cut = self
                .tail
                .char_indices()
                .nth(self.tail_chars - keep)
                .map_or(self.tail.len(), |(i, _)| i);
            self.tail.drain(..cut);
            self.tail_chars = keep;
        }
        let out = format!("{}{}", self.head, self.tail);
        let omitted = self.total - self.head_chars - self.tail_chars;
        *self = Self::default();
        (out, omitted)
    }
}

/// The two streams of a session.
#[derive(Debug, Default)]
struct Output {
    stdout: Bounded,
    stderr: Bounded,
}

/// One running command.
struct Session {
    id: String,
    owner: String,
    command: String,
    cwd: PathBuf,
    started: Instant,
    deadline: Instant,
    last_access: Mutex<Instant>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    output: Arc<Mutex<Output>>,
    activity: Arc<Notify>,
    /// The exit code once the process is done (`Some(None)`: killed by a signal).
    exit: watch::Receiver<Option<Option<i32>>>,
    readers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Emptied by the exit watcher as soon as the leader is reaped (its group killed then).
    group: Arc<Mutex<GroupKill>>,
    /// Keeps the spawning thread (bubblewrap's parent) alive while the session runs.
    keep_parent: Mutex<Option<crate::confine::SpawnerThread>>,
    _cgroup: Option<crate::confine::PidsCgroup>,
    /// The session's egress proxy, for as long as it runs.
    egress: Option<crate::egress::EgressProxy>,
    timed_out: AtomicBool,
}

/// What one poll of a session found.
#[derive(Debug)]
struct Poll {
    output: String,
    omitted: usize,
    exit: Option<Option<i32>>,
    elapsed: Duration,
    timed_out: bool,
    terminated: bool,
    stdin_closed: bool,
    /// `Network: …` lines: what the egress proxy refused since the last poll.
    network: Vec<String>,
}

impl Session {
    fn done(&self) -> Option<Option<i32>> {
        *self.exit.borrow()
    }

    /// Kills the process group (and waits for a bubblewrap sandbox to end), then for the exit (bounded).
    async fn kill(&self) {
        let mut group = std::mem::replace(&mut *lock(&self.group), GroupKill::none());
        group.kill_and_wait_namespace().await;
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(DRAIN_GRACE, exit.wait_for(Option::is_some)).await;
        lock(&self.keep_parent).take();
    }

    /// Waits up to `wait` for the process to end, ends it at its deadline, and takes the output so far.
    async fn poll(&self, wait: Duration, max_output: usize, terminated: bool, stdin_closed: bool) -> Poll {
        *lock(&self.last_access) = Instant::now();
        if self.done().is_none() && !wait.is_zero() {
            let wait = wait.min(self.deadline.saturating_duration_since(Instant::now()));
            let mut exit = self.exit.clone();
            let _ = tokio::time::timeout(wait, exit.wait_for(Option::is_some)).await;
        }
        if self.done().is_none() && Instant::now() >= self.deadline {
            self.timed_out.store(true, Ordering::SeqCst);
            self.kill().await;
        }
        if self.done().is_some() {
            // Its last output: the readers end at the end of the pipes (bounded: a descendant that left the
            // group may hold them open).
            let readers: Vec<_> = lock(&self.readers).drain(..).collect();
            for r in readers {
                let _ = tokio::time::timeout(DRAIN_GRACE, r).await;
            }
            lock(&self.keep_parent).take();
        } else if !wait.is_zero() {
            let quiet = {
                let o = lock(&self.output);
                !o.stdout.has_output() && !o.stderr.has_output()
            };
            if quiet {
                let _ = tokio::time::timeout(OUTPUT_GRACE, self.activity.notified()).await;
            }
        }
        let (stdout, stderr) = {
            let mut o = lock(&self.output);
            (o.stdout.drain(MAX_OUTPUT_CHARS), o.stderr.drain(MAX_OUTPUT_CHARS))
        };
        let mut output = stdout.0;
        if !stderr.0.is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str("STDERR:\n");
            output.push_str(&stderr.0);
        }
        let (output, cut) = head_and_tail(&output, max_output);
        let network = self
            .egress
            .as_ref()
            .map(crate::egress::EgressProxy::notes)
            .unwrap_or_default();
        Poll {
            output,
            omitted: stdout.1 + stderr.1 + cut,
            exit: self.done(),
            elapsed: self.started.elapsed(),
            timed_out: self.timed_out.load(Ordering::SeqCst),
            terminated,
            stdin_closed,
            network,
        }
    }
}

/// `text` within `max` characters: its first and last halves; and how many characters were left out.
fn head_and_tail(text: &str, max: usize) -> (String, usize) {
    let n = text.chars().count();
    if n <= max {
        return (text.to_owned(), 0);
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(n - (max - max / 2)).collect();
    (format!("{head}{tail}"), n - max)
}

/// The text a poll answers with (0.3.5's layout).
fn format_poll(id: &str, p: &Poll) -> String {
    let mut parts = Vec::new();
    if !p.output.is_empty() {
        parts.push(p.output.clone());
    }
    if p.omitted > 0 {
        parts.push(format!("({} chars truncated from output)", p.omitted));
    }
    if p.timed_out {
        parts.push("Error: Command timed out; session was terminated.".to_owned());
    }
    if p.terminated && !p.timed_out {
        parts.push("Session terminated.".to_owned());
    }
    if p.stdin_closed {
        parts.push("Stdin closed.".to_owned());
    }
    parts.extend(p.network.iter().cloned());
    match p.exit {
        Some(Some(code)) => parts.push(format!("Exit code: {code}")),
        Some(None) => parts.push("Exit code: killed by a signal".to_owned()),
        None => parts.push(format!("Process running. session_id: {id}")),
    }
    parts.push(format!("Elapsed: {:.1}s", p.elapsed.as_secs_f64()));
    parts.join("\n")
}

fn answer(id: &str, p: &Poll, extra: Option<String>) -> ToolOutput {
    let mut text = format_poll(id, p);
    if let Some(e) = extra {
        text.push('\n');
        text.push_str(&e);
    }
    if p.timed_out {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    }
}

/// The running sessions, shared by `exec`, `exec_session` and `list_exec_sessions` (clones share them).
#[derive(Clone, Default)]
pub struct ExecSessions {
    inner: Arc<Mutex<HashMap<String, Arc<Session>>>>,
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for ExecSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSessions")
            .field("running", &lock(&self.inner).len())
            .finish()
    }
}

impl ExecSessions {
    /// No sessions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions are running.
    pub fn len(&self) -> usize {
        lock(&self.inner).len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends sessions idle for longer than [`IDLE_TIMEOUT`] and forgets finished ones nobody will poll.
    async fn sweep(&self) {
        let stale: Vec<Arc<Session>> = {
            let mut map = lock(&self.inner);
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| lock(&s.last_access).elapsed() > IDLE_TIMEOUT)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in stale {
            tracing::info!(session = %s.id, "exec session ended: idle");
            s.kill().await;
        }
    }

    /// Keeps `spawned` running as a session of conversation `owner`; `Err` when the agent is shutting down or
    /// [`MAX_SESSIONS`] already run (the process is then ended).
    pub(crate) async fn start(
        &self,
        spawned: Spawned,
        owner: &str,
        command: &str,
        cwd: PathBuf,
        timeout: Duration,
    ) -> Result<String, ToolError> {
        self.sweep().await;
        let Spawned {
            mut child,
            group,
            keep_parent,
            _cgroup,
            egress,
        } = spawned;
        let output = Arc::new(Mutex::new(Output::default()));
        let activity = Arc::new(Notify::new());
        let mut readers = Vec::new();
        for (stream, is_err) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
                true,
            ),
        ] {
            let Some(mut stream) = stream else { continue };
            let (output, activity) = (output.clone(), activity.clone());
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut pending: Vec<u8> = Vec::new();
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => 0,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    // Whole UTF-8 characters only, unless the stream ended.
                    let valid = match std::str::from_utf8(&pending) {
                        Ok(_) => pending.len(),
                        Err(e) if n > 0 && e.error_len().is_none() => e.valid_up_to(),
                        Err(_) => pending.len(),
                    };
                    let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
                    pending.drain(..valid);
                    if !text.is_empty() {
                        let mut o = lock(&output);
                        let target = if is_err { &mut o.stderr } else { &mut o.stdout };
                        target.push(&text, MAX_OUTPUT_CHARS);
                        drop(o);
                        activity.notify_waiters();
                    }
                    if n == 0 {
                        break;
                    }
                }
            }));
        }
        let stdin = child.stdin.take();
        let (exit_tx, exit_rx) = watch::channel(None);
        let group = Arc::new(Mutex::new(group));
        {
            let activity = activity.clone();
            let group = Arc::clone(&group);
            tokio::spawn(async move {
                let code = child.wait().await.ok().and_then(|s| s.code());
                // The shell is done: end what it left in its group now, as a one-shot `exec` does. Later (at
                // terminate, `/stop` or eviction) the reaped leader's number may be another process's.
                std::mem::replace(&mut *lock(&group), GroupKill::none()).kill();
                let _ = exit_tx.send(Some(code));
                activity.notify_waiters();
            });
        }
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let now = Instant::now();
        let session = Arc::new(Session {
            id: id.clone(),
            owner: owner.to_owned(),
            command: command.to_owned(),
            cwd,
            started: now,
            deadline: now + timeout,
            last_access: Mutex::new(now),
            stdin: tokio::sync::Mutex::new(stdin),
            output,
            activity,
            exit: exit_rx,
            readers: Mutex::new(readers),
            group,
            keep_parent: Mutex::new(Some(keep_parent)),
            _cgroup,
            egress,
            timed_out: AtomicBool::new(false),
        });
        let refused = {
            let mut map = lock(&self.inner);
            if map.len() >= MAX_SESSIONS {
                // Room is made from sessions whose command has ended (their unread output goes with them).
                let ended: Vec<String> = map
                    .iter()
                    .filter(|(_, s)| s.done().is_some())
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in ended.into_iter().take(map.len() + 1 - MAX_SESSIONS) {
                    map.remove(&id);
                }
            }
            if self.closed.load(Ordering::SeqCst) {
                Some("the agent is shutting down".to_owned())
            } else if map.len() >= MAX_SESSIONS {
                Some(format!(
                    "at most {MAX_SESSIONS} exec sessions run at once: end one with exec_session terminate=true"
                ))
            } else {
                map.insert(id.clone(), session.clone());
                None
            }
        };
        if let Some(reason) = refused {
            session.kill().await;
            return Err(ToolError::Failed(reason));
        }
        Ok(id)
    }

    /// The session `id` if conversation `owner` started it.
    fn get(&self, id: &str, owner: &str) -> Result<Arc<Session>, ToolError> {
        lock(&self.inner)
            .get(id.trim())
            .filter(|s| s.owner == owner)
            .cloned()
            .ok_or_else(|| ToolError::Failed(format!("exec session not found: {:?}", id.trim())))
    }

    fn forget_if_done(&self, s: &Session) {
        if s.done().is_some() {
            lock(&self.inner).remove(&s.id);
        }
    }

    /// The first poll of a session just started by `exec` (waits up to `yield_ms`).
    pub(crate) async fn first_poll(
        &self,
        id: &str,
        owner: &str,
        yield_ms: u64,
        max_output: usize,
    ) -> ToolOutput {
        let Ok(s) = self.get(id, owner) else {
            return ToolOutput::error(format!("Error: exec session not found: {id:?}"));
        };
        let p = s
            .poll(
                Duration::from_millis(yield_ms.min(MAX_YIELD_MS)),
                max_output,
                false,
                false,
            )
            .await;
        self.forget_if_done(&s);
        answer(id, &p, None)
    }

    /// Ends every session of conversation `owner`; how many.
    pub async fn stop_owner(&self, owner: &str) -> usize {
        let victims: Vec<Arc<Session>> = {
            let mut map = lock(&self.inner);
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| s.owner == owner)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in &victims {
            s.kill().await;
        }
        victims.len()
    }

    /// Ends every session and refuses new ones (the agent is shutting down).
    pub async fn close_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let all: Vec<Arc<Session>> = lock(&self.inner).drain().map(|(_, s)| s).collect();
        for s in all {
            s.kill().await;
        }
    }
}

/// Arguments of `exec_session` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExecSessionArgs {
    /// The session id `exec` returned.
    pub session_id: String,
    /// Text to send to the command's stdin; omit to read output.
    #[schemars(extend("nullable" = true))]
    pub input: Option<String>,
    /// Close stdin after sending input.
    #[serde(default)]
    pub close_stdin: bool,
    /// End the session (alone, with no other argument).
    #[serde(default)]
    pub terminate: bool,
    /// Return when this text appears in the output.
    #[schemars(length(min = 1), extend("nullable" = true))]
    pub wait_for: Option<String>,
    /// Wait for the command to exit.
    #[serde(default)]
    pub until_exit: bool,
    /// The longest wait, in milliseconds: 1 s by default, 10 s with wait_for, 10 min with until_exit.
    #[schemars(range(min = 0, max = 600_000), extend("nullable" = true))]
    pub timeout_ms: Option<u64>,
}

/// `exec_session`: sends input to, reads from, waits for or ends a session `exec` started.
#[derive(Debug, Clone)]
pub struct ExecSessionTool {
    sessions: ExecSessions,
}

impl ExecSessionTool {
    /// The tool over `sessions` (those of the `exec` tool: [`crate::builtin::ExecTool::sessions`]).
    pub fn new(sessions: ExecSessions) -> Self {
        Self { sessions }
    }
}

#[async_trait]
impl TypedTool for ExecSessionTool {
    type Args = ExecSessionArgs;

    fn name(&self) -> &str {
        "exec_session"
    }

    /// Input written to a running command is code it runs (`bash -s` reads its commands there); reading,
    /// waiting, closing stdin and ending it are not.
    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        match args.get("input").and_then(serde_json::Value::as_str) {
            Some(text) if !text.is_empty() => crate::Effects::command(text),
            _ => crate::Effects::none(),
        }
    }

    fn description(&self) -> &str {
        "Work with a command exec left running (exec with yield_time_ms returns a session_id): send input, \
         read new output, wait for a text or for the exit, or terminate it."
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn call(&self, args: ExecSessionArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.wait_for.is_some() && args.until_exit {
            return Err(ToolError::InvalidArguments(
                "wait_for and until_exit cannot be used together".into(),
            ));
        }
        let s = self.sessions.get(&args.session_id, &ctx.session_key)?;
        if args.terminate {
            if args.input.is_some()
                || args.close_stdin
                || args.wait_for.is_some()
                || args.until_exit
                || args.timeout_ms.is_some()
            {
                return Err(ToolError::InvalidArguments("terminate must be used alone".into()));
            }
            s.kill().await;
            let p = s.poll(Duration::ZERO, DEFAULT_OUTPUT_CHARS, true, false).await;
            self.sessions.forget_if_done(&s);
            return Ok(answer(&s.id, &p, None));
        }
        if let Some(text) = &args.input {
            let mut stdin = s.stdin.lock().await;
            let Some(pipe) = stdin.as_mut() else {
                return Err(ToolError::Failed("the session's stdin is closed".into()));
            };
            if s.done().is_some() {
                return Err(ToolError::Failed("the session has already exited".into()));
            }
            let written = tokio::time::timeout(Duration::from_secs(10), async {
                pipe.write_all(text.as_bytes()).await?;
                pipe.flush().await
            })
            .await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(ToolError::Failed(format!("cannot write to the session: {e}"))),
                Err(_) => {
                    return Err(ToolError::Failed(
                        "the command did not read its input within 10 s".into(),
                    ));
                }
            }
        }
        let stdin_closed = args.close_stdin && s.stdin.lock().await.take().is_some();
        let default_ms = if args.until_exit {
            DEFAULT_UNTIL_EXIT_MS
        } else if args.wait_for.is_some() {
            DEFAULT_WAIT_FOR_MS
        } else {
            DEFAULT_YIELD_MS
        };
        let budget = Duration::from_millis(args.timeout_ms.unwrap_or(default_ms).min(MAX_WAIT_MS));
        let deadline = Instant::now() + budget;
        // Polls in steps, gathering the output, until: the exit, the awaited text, any output (a plain poll),
        // or the deadline.
        let mut gathered = String::new();
        let mut omitted = 0;
        let mut last;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = if args.until_exit {
                left.min(Duration::from_millis(MAX_YIELD_MS))
            } else {
                left.min(Duration::from_millis(500))
            };
            last = s.poll(step, MAX_OUTPUT_CHARS, false, stdin_closed).await;
            gathered.push_str(&last.output);
            omitted += last.omitted;
            let matched = args.wait_for.as_deref().is_some_and(|w| gathered.contains(w));
            let activity = args.wait_for.is_none() && !args.until_exit && !last.output.is_empty();
            if last.exit.is_some() || matched || activity || Instant::now() >= deadline {
                let (output, cut) = head_and_tail(&gathered, DEFAULT_OUTPUT_CHARS);
                last.output = output;
                last.omitted = omitted + cut;
                let extra = match (&args.wait_for, matched) {
                    (Some(w), false) => Some(format!("Wait target not observed: {w:?}")),
                    _ if args.until_exit && last.exit.is_none() => Some(format!(
                        "Wait timed out after {}s; session remains active.",
                        budget.as_secs_f64()
                    )),
                    _ => None,
                };
                self.sessions.forget_if_done(&s);
                return Ok(answer(&s.id, &last, extra));
            }
        }
    }
}

/// Arguments of `list_exec_sessions` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ListExecSessionsArgs {}

/// `list_exec_sessions`: this conversation's running sessions.
#[derive(Debug, Clone)]
pub struct ListExecSessionsTool {
    sessions: ExecSessions,
}

impl ListExecSessionsTool {
    /// The tool over `sessions`.
    pub fn new(sessions: ExecSessions) -> Self {
        Self { sessions }
    }
}

#[async_trait]
impl TypedTool for ListExecSessionsTool {
    type Args = ListExecSessionsArgs;

    fn name(&self) -> &str {
        "list_exec_sessions"
    }

    fn description(&self) -> &str {
        "List the commands exec left running in this conversation, with their session_id."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, _args: ListExecSessionsArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.sessions.sweep().await;
        let mut mine: Vec<Arc<Session>> = lock(&self.sessions.inner)
            .values()
            .filter(|s| s.owner == ctx.session_key)
            .cloned()
            .collect();
        if mine.is_empty() {
            return Ok(ToolOutput::text("No active exec sessions."));
        }
        mine.sort_by(|a, b| a.id.cmp(&b.id));
        let now = Instant::now();
        let lines: Vec<String> = mine
            .iter()
            .map(|s| {
                let mut command = s.command.split_whitespace().collect::<Vec<_>>().join(" ");
                if command.chars().count() > 120 {
                    command = format!("{}...", command.chars().take(119).collect::<String>());
                }
                format!(
                    "{} | {} | elapsed={:.1}s | idle={:.1}s | remaining={:.1}s | cwd={} | {command}",
                    s.id,
                    if s.done().is_some() { "exited" } else { "running" },
                    s.started.elapsed().as_secs_f64(),
                    lock(&s.last_access).elapsed().as_secs_f64(),
                    s.deadline.saturating_duration_since(now).as_secs_f64(),
                    s.cwd.display()
                )
            })
            .collect();
        Ok(ToolOutput::text(lines.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_output_keeps_the_start_and_the_latest() {
        let mut b = Bounded::default();
        for i in 0..1000 {
            b.push(&format!("{i:04}\n"), 100);
        }
        let (text, omitted) = b.drain(100);
        assert_eq!(text.chars().count(), 100);
        assert!(text.starts_with("0000\n0001\n"), "{text}");
        assert!(text.ends_with("0998\n0999\n"), "{text}");
        assert_eq!(omitted, 5000 - 100);
        assert_eq!(b.drain(100), (String::new(), 0));
        let mut small = Bounded::default();
        small.push("é✓", 100);
        assert_eq!(small.drain(100), ("é✓".to_owned(), 0));
    }

    #[test]
    fn long_answers_keep_both_ends() {
        let (t, cut) = head_and_tail("abcdefghij", 4);
        assert_eq!((t.as_str(), cut), ("abij", 6));
        assert_eq!(head_and_tail("abc", 4), ("abc".to_owned(), 0));
    }
}
