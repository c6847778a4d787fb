//! `nanobot eval --trace FILE`: replays a scripted conversation through the real agent loop and tools, with
//! the model's answers taken from the trace, and checks expectations.
//!
//! A trace (JSON; unknown keys are errors, so typos do not pass silently):
//!
//! ```json
//! {
//!   "name": "read a file",
//!   "config": {"tools": {"restrictToWorkspace": true}},
//!   "files": {"notes.md": "The launch is on Friday."},
//!   "turns": [{
//!     "user": "When is the launch?",
//!     "model": [
//!       {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
//!       {"content": "The launch is on Friday."}
//!     ],
//!     "expect": {
//!       "response_contains": ["Friday"],
//!       "tools_used": ["read_file"],
//!       "tools_not_used": ["exec"],
//!       "max_tool_calls": 1,
//!       "tool_results_contain": {"read_file": "Friday"},
//!       "files": {"notes.md": "launch"}
//!     }
//!   }]
//! }
//! ```
//!
//! Each turn's `model` answers are served in order by an in-process scripted [`Provider`]; the tools are the
//! real ones, in a fresh temporary workspace and home (or `-w`). Every turn also checks that its scripted
//! answers were all used.

use nanobot_util::lock;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream;
use nanobot_core::{AgentHook, BoxError, ToolBatch, TurnOptions};
use nanobot_providers::{
    ChatMessage, ChatRequest, EventStream, FinishReason, Provider, ProviderError, StreamEvent, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::args::{ConfigArgs, EvalArgs};
use crate::error::CliError;
use crate::setup::{self, CliEnv};

/// A scripted conversation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// A short name (shown in the report).
    #[serde(default)]
    pub name: String,
    /// What the trace is about.
    #[serde(default)]
    pub description: String,
    /// Config values merged over the defaults (camelCase, as in config.json).
    #[serde(default)]
    pub config: Value,
    /// Files to create in the workspace before the first turn (relative path → contents).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Session key for the turns (default `cli:eval`).
    #[serde(default)]
    pub session: Option<String>,
    /// The turns, in order.
    pub turns: Vec<TraceTurn>,
}

/// One user message, the model's scripted answers, and what must hold afterwards.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceTurn {
    /// What the user says.
    pub user: String,
    /// The model's answers for this turn, in order (none for slash commands).
    #[serde(default)]
    pub model: Vec<ScriptedResponse>,
    /// Expectations.
    #[serde(default)]
    pub expect: Expect,
}

/// One scripted model answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedResponse {
    /// Answer text.
    #[serde(default)]
    pub content: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// Tool name.
    pub name: String,
    /// Arguments (an object).
    #[serde(default)]
    pub arguments: Value,
}

/// What must hold after a turn.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Substrings the final response must contain.
    #[serde(default)]
    pub response_contains: Vec<String>,
    /// Substrings the final response must not contain.
    #[serde(default)]
    pub response_not_contains: Vec<String>,
    /// Tools that must have run.
    #[serde(default)]
    pub tools_used: Vec<String>,
    /// Tools that must not have run.
    #[serde(default)]
    pub tools_not_used: Vec<String>,
    /// At most this many tool calls in the turn.
    #[serde(default)]
    pub max_tool_calls: Option<usize>,
    /// Tool name → a substring (or a list of substrings) that one of its results (as sent back to the model)
    /// must contain.
    #[serde(default)]
    pub tool_results_contain: BTreeMap<String, OneOrMany>,
    /// Workspace file → a substring it must contain after the turn.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Workspace files that must not exist after the turn.
    #[serde(default)]
    pub files_absent: Vec<String>,
}

/// One string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// One checked expectation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectationResult {
    /// 1-based turn number.
    pub turn: usize,
    /// What was expected.
    pub what: String,
    /// Whether it held.
    pub passed: bool,
    /// What was found instead (when it failed).
    pub detail: String,
}

/// The outcome of one trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceReport {
    /// The trace file.
    pub file: PathBuf,
    /// The trace's name.
    pub name: String,
    /// Every expectation.
    pub results: Vec<ExpectationResult>,
}

impl TraceReport {
    /// Failed expectations.
    pub fn failed(&self) -> usize {
        self.results.iter().filter(|r| !r.passed).count()
    }
}

impl Trace {
    /// Reads and checks a trace file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<Trace, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Trace(format!("cannot read trace {}: {e}", path.display())))?;
        Self::parse(&text, path)
    }

    /// Parses trace text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Trace, CliError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let trace: Trace = serde_path_to_error::deserialize(de).map_err(|e| {
            let inner = e.inner();
            CliError::Trace(format!(
                "invalid trace {} (line {}, field `{}`): {inner}",
                path.display(),
                inner.line(),
                e.path()
            ))
        })?;
        if !(trace.config.is_null() || trace.config.is_object()) {
            return Err(CliError::Trace(format!(
                "invalid trace {}: `config` must be an object (config.json keys)",
                path.display()
            )));
        }
        if trace.turns.is_empty() {
            return Err(CliError::Trace(format!("trace {} has no turns", path.display())));
        }
        for (i, t) in trace.turns.iter().enumerate() {
            for (j, r) in t.model.iter().enumerate() {
                for c in &r.tool_calls {
                    if !(c.arguments.is_object() || c.arguments.is_null()) {
                        return Err(CliError::Trace(format!(
                            "invalid trace {}: turns[{i}].model[{j}] tool call `{}`: arguments must be an object",
                            path.display(),
                            c.name
                        )));
                    }
                }
            }
        }
        Ok(trace)
    }
}

#[derive(Default)]
struct ScriptState {
    queue: VecDeque<ScriptedResponse>,
    turn: usize,
    counter: usize,
    /// Tool call id → tool name, for this turn's calls.
    call_names: HashMap<String, String>,
    /// Tool results seen in requests: (tool name, content).
    results: Vec<(String, String)>,
    seen_results: std::collections::HashSet<String>,
}

/// A [`Provider`] that answers from the trace's script and records the tool results it is sent.
#[derive(Clone, Default)]
struct ScriptedProvider {
    state: Arc<Mutex<ScriptState>>,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedProvider")
    }
}

impl ScriptedProvider {
    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        lock(&self.state)
    }

    fn start_turn(&self, turn: usize, script: Vec<ScriptedResponse>) {
        let mut s = self.lock();
        s.queue = script.into();
        s.turn = turn;
        s.counter = 0;
        s.call_names.clear();
        s.results.clear();
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let mut s = self.lock();
        for m in request.messages.iter() {
            if let ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } = m
                && let Some(name) = s.call_names.get(tool_call_id).cloned()
                && s.seen_results.insert(tool_call_id.clone())
            {
                s.results.push((name, content.text()));
            }
        }
        let Some(resp) = s.queue.pop_front() else {
            return Box::pin(stream::iter(vec![Err(ProviderError::InvalidRequest {
                provider: "scripted".into(),
                status: 400,
                message: "the trace has no scripted model answer left for this turn".into(),
            })]));
        };
        let mut events = Vec::new();
        if let Some(text) = resp.content.filter(|t| !t.is_empty()) {
            events.push(Ok(StreamEvent::TextDelta(text)));
        }
        let calls = !resp.tool_calls.is_empty();
        for (index, call) in resp.tool_calls.into_iter().enumerate() {
            s.counter += 1;
            let id = format!("call_t{}_{}", s.turn, s.counter);
            s.call_names.insert(id.clone(), call.name.clone());
            let args = if call.arguments.is_null() {
                "{}".to_owned()
            } else {
                call.arguments.to_string()
            };
            events.push(Ok(StreamEvent::ToolCallDelta {
                index,
                id: Some(id),
                name: Some(call.name),
                arguments: args,
            }));
        }
        events.push(Ok(StreamEvent::Usage(Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
            ..Usage::default()
        })));
        events.push(Ok(StreamEvent::Done(if calls {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        })));
        Box::pin(stream::iter(events))
    }
}

/// Records the names of the tools the runner is about to execute.
#[derive(Default)]
struct ToolRecorder {
    calls: Mutex<Vec<String>>,
}

#[async_trait]
impl AgentHook for ToolRecorder {
    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<nanobot_core::Veto>, BoxError> {
        let mut calls = lock(&self.calls);
        calls.extend(batch.calls.iter().map(|c| c.name.clone()));
        Ok(Vec::new())
    }
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Runs one trace in `workspace` with a home at `home`.
pub(crate) async fn run_trace(
    env: &CliEnv,
    trace: &Trace,
    file: &Path,
    home: &Path,
    workspace: &Path,
) -> Result<TraceReport, CliError> {
    let mut config = serde_json::json!({
        "agents": {"defaults": {"model": "scripted/eval", "workspace": workspace.display().to_string()}}
    });
    if trace.config.is_object() {
        merge(&mut config, &trace.config);
    }
    if let Some(d) = config.pointer_mut("/agents/defaults") {
        d["workspace"] = Value::String(workspace.display().to_string());
    }
    let config_path = home.join(".nanobot").join("config.json");
    if let Some(dir) = config_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CliError::io("create", dir, e))?;
    }
    let text = serde_json::to_string_pretty(&config).unwrap_or_default();
    std::fs::write(&config_path, text).map_err(|e| CliError::io("write", &config_path, e))?;
    let mut eval_env = env.clone();
    eval_env.home = home.to_path_buf();
    let s = setup::load(&eval_env, &ConfigArgs::default(), true)?;
    crate::onboard::write_templates(workspace)?;
    for (rel, body) in &trace.files {
        let p = workspace.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| CliError::io("create", dir, e))?;
        }
        std::fs::write(&p, body).map_err(|e| CliError::io("write", &p, e))?;
    }

    let provider = ScriptedProvider::default();
    let recorder = Arc::new(ToolRecorder::default());
    let agent = crate::agent::build_loop(
        &eval_env,
        &s,
        Some(Arc::new(provider.clone())),
        vec![recorder.clone() as Arc<dyn AgentHook>],
    )?;
    let session = trace.session.clone().unwrap_or_else(|| "cli:eval".to_owned());
    let mut results = Vec::new();
    for (i, turn) in trace.turns.iter().enumerate() {
        let n = i + 1;
        provider.start_turn(n, turn.model.clone());
        lock(&recorder.calls).clear();
        let chat_id = session.split_once(':').map_or(session.as_str(), |(_, id)| id);
        let msg = nanobot_bus::InboundMessage::new("cli", "user", chat_id, turn.user.clone())
            .with_session_key(session.clone());
        let reply = agent.process_message(msg, TurnOptions::default()).await?;
        let used = lock(&recorder.calls).clone();
        let (left, tool_results) = {
            let st = provider.lock();
            (st.queue.len(), st.results.clone())
        };
        check_turn(
            n,
            &turn.expect,
            &reply.content,
            &used,
            &tool_results,
            left,
            workspace,
            &mut results,
        );
    }
    if let Some(m) = agent.mcp() {
        m.shutdown().await;
    }
    Ok(TraceReport {
        file: file.to_path_buf(),
        name: if trace.name.is_empty() {
            file.display().to_string()
        } else {
            trace.name.clone()
        },
        results,
    })
}

#[expect(
    clippy::too_many_arguments,
    reason = "one flat check over everything a turn produced"
)]
fn check_turn(
    turn: usize,
    e: &Expect,
    response: &str,
    used: &[String],
    tool_results: &[(String, String)],
    script_left: usize,
    workspace: &Path,
    out: &mut Vec<ExpectationResult>,
) {
    let mut push = |what: String, passed: bool, detail: String| {
        out.push(ExpectationResult {
            turn,
            what,
            passed,
            detail: if passed { String::new() } else { detail },
        });
    };
    let short = |s: &str| crate::eval::shorten(s, 200);
    for needle in &e.response_contains {
        push(
            format!("response contains {needle:?}"),
            response.contains(needle.as_str()),
            format!("response was {:?}", short(response)),
        );
    }
    for needle in &e.response_not_contains {
        push(
            format!("response does not contain {needle:?}"),
            !response.contains(needle.as_str()),
            format!("response was {:?}", short(response)),
        );
    }
    for t in &e.tools_used {
        push(
            format!("tool {t} used"),
            used.iter().any(|u| u == t),
            format!("tools used: {used:?}"),
        );
    }
    for t in &e.tools_not_used {
        push(
            format!("tool {t} not used"),
            !used.iter().any(|u| u == t),
            format!("tools used: {used:?}"),
        );
    }
    if let Some(max) = e.max_tool_calls {
        push(
            format!("at most {max} tool call(s)"),
            used.len() <= max,
            format!("{} tool calls: {used:?}", used.len()),
        );
    }
    for (tool, needles) in &e.tool_results_contain {
        let found: Vec<&String> = tool_results
            .iter()
            .filter(|(n, _)| n == tool)
            .map(|(_, c)| c)
            .collect();
        for needle in needles.items() {
            push(
                format!("{tool} result contains {needle:?}"),
                found.iter().any(|c| c.contains(needle)),
                if found.is_empty() {
                    format!("no {tool} result was sent to the model")
                } else {
                    format!(
                        "{tool} results: {:?}",
                        found.iter().map(|c| short(c)).collect::<Vec<_>>()
                    )
                },
            );
        }
    }
    for (rel, needle) in &e.files {
        let text = std::fs::read_to_string(workspace.join(rel));
        let detail = match &text {
            Ok(t) => format!("{rel} is {:?}", short(t)),
            Err(err) => format!("cannot read {rel}: {err}"),
        };
        push(
            format!("file {rel} contains {needle:?}"),
            text.as_ref().is_ok_and(|t| t.contains(needle.as_str())),
            detail,
        );
    }
    for rel in &e.files_absent {
        push(
            format!("file {rel} does not exist"),
            !workspace.join(rel).exists(),
            format!("{rel} exists"),
        );
    }
    push(
        "every scripted model answer was used".to_owned(),
        script_left == 0,
        format!("{script_left} scripted answer(s) left unused"),
    );
}

pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// Renders a report as text.
pub(crate) fn render_report(r: &TraceReport) -> String {
    let mut out = format!("trace {} — {}\n", r.file.display(), r.name);
    let mut last_turn = 0;
    for x in &r.results {
        if x.turn != last_turn {
            let _ = writeln!(out, "  turn {}", x.turn);
            last_turn = x.turn;
        }
        if x.passed {
            let _ = writeln!(out, "    ✓ {}", x.what);
        } else {
            let _ = writeln!(out, "    ✗ {} — {}", x.what, x.detail);
        }
    }
    let total = r.results.len();
    let failed = r.failed();
    let _ = writeln!(
        out,
        "  {}: {}/{} expectations passed",
        if failed == 0 { "PASS" } else { "FAIL" },
        total - failed,
        total
    );
    out
}

/// `nanobot eval`.
pub(crate) async fn run(env: &CliEnv, a: &EvalArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let mut failed = 0;
    let mut total = 0;
    for file in &a.trace {
        let file = env.absolute(file);
        let trace = Trace::load(&file)?;
        let home = tempfile::tempdir().map_err(|e| CliError::io("create", "a temporary directory", e))?;
        let workspace = match &a.workspace {
            Some(w) => env.absolute(w),
            None => home.path().join("workspace"),
        };
        let report = run_trace(env, &trace, &file, home.path(), &workspace).await?;
        failed += report.failed();
        total += report.results.len();
        let text = if a.json {
            let mut s = String::new();
            for r in &report.results {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["trace"] = Value::String(report.name.clone());
                let _ = writeln!(s, "{v}");
            }
            s
        } else {
            render_report(&report)
        };
        out.write_all(text.as_bytes())
            .map_err(|e| CliError::io("write", "stdout", e))?;
    }
    out.flush().map_err(|e| CliError::io("write", "stdout", e))?;
    if failed > 0 {
        return Err(CliError::EvalFailed { failed, total });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_trace_keys_are_errors_with_the_field() {
        let err = Trace::parse(
            r#"{"turns":[{"user":"hi","expect":{"response_contain":["x"]}}]}"#,
            Path::new("t.json"),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("t.json") && text.contains("turns[0].expect"),
            "{text}"
        );
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
    }

    #[test]
    fn merge_overrides_nested_values() {
        let mut a = serde_json::json!({"a": {"b": 1, "c": 2}});
        merge(&mut a, &serde_json::json!({"a": {"c": 3, "d": 4}}));
        assert_eq!(a, serde_json::json!({"a": {"b": 1, "c": 3, "d": 4}}));
    }

    #[tokio::test]
    async fn a_failed_expectation_is_reported() {
        let trace = Trace::parse(
            r#"{"name":"t","files":{"a.txt":"alpha"},"turns":[{"user":"read a.txt","model":[
                {"tool_calls":[{"name":"read_file","arguments":{"path":"a.txt"}}]},
                {"content":"It says alpha."}],
                "expect":{"response_contains":["alpha","beta"],"tools_used":["read_file"],
                          "tool_results_contain":{"read_file":"alpha"},"max_tool_calls":1}}]}"#,
            Path::new("t.json"),
        )
        .unwrap();
        let home = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(home.path(), nanobot_util::EnvMap::new());
        let ws = home.path().join("ws");
        let r = run_trace(&env, &trace, Path::new("t.json"), home.path(), &ws)
            .await
            .unwrap();
        let text = render_report(&r);
        assert_eq!(r.failed(), 1, "{text}");
        assert!(text.contains("✗ response contains \"beta\""), "{text}");
        assert!(text.contains("✓ read_file result contains \"alpha\""), "{text}");
    }
}
