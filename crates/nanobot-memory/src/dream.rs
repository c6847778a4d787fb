//! [`Dream`]: the periodic curator that folds new history into the memory files, with an undo log.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_tools::builtin::{EditFileTool, ListDirTool, ReadFileTool, WriteFileTool};
use nanobot_tools::sandbox::{Sandbox, normalize, real_path};
use nanobot_tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use nanobot_types::{ChatMessage, ChatRequest, Provider};
use nanobot_util::{ConfinedDir, EntryKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{MemoryError, Result};
use crate::format::truncate;
use crate::fsio;
use crate::scope::{self, SCOPES_DIR, ScopeKey};
use crate::store::{HistoryEntry, MEMORY_DIR, MEMORY_FILE, MemoryStore, now_stamp};

/// Directory of the Dream change records, relative to the workspace (`memory/.dream/<n>.json`).
pub const DREAM_RECORDS_DIR: &str = ".dream";
/// The files (besides everything under `skills/`) Dream may change, relative to the workspace.
pub const DREAM_FILES: [&str; 3] = ["memory/MEMORY.md", "SOUL.md", "USER.md"];
/// The directory Dream may change, relative to the workspace.
pub const DREAM_SKILLS_DIR: &str = "skills";

/// Skill files larger than this are not recorded (nor offered to the model).
const MAX_RECORDED_BYTES: u64 = 1024 * 1024;

/// How [`Dream`] runs.
#[derive(Debug, Clone)]
pub struct DreamSettings {
    /// The model (the main one, or `agents.defaults.dream.modelOverride`).
    pub model: String,
    /// Model ⇄ tool round trips in one run.
    pub max_iterations: usize,
    /// History entries handled in one run (the rest waits for the next run).
    pub max_entries: usize,
    /// Each history entry is cut to this many characters in the prompt.
    pub max_entry_chars: usize,
    /// Output-token limit per model call.
    pub max_tokens: Option<u32>,
}

impl DreamSettings {
    /// Settings for `model` with defaults for the rest.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            max_iterations: 15,
            max_entries: 100,
            max_entry_chars: 4000,
            max_tokens: Some(8192),
        }
    }
}

/// One file changed by a Dream run (or a restore). `None` means the file did not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Path relative to the workspace, `/`-separated.
    pub path: String,
    /// Contents before.
    pub before: Option<String>,
    /// Contents after.
    pub after: Option<String>,
}

impl FileChange {
    /// A unified diff of the change.
    pub fn diff(&self) -> String {
        let before = self.before.as_deref().unwrap_or("");
        let after = self.after.as_deref().unwrap_or("");
        nanobot_util::text_diff::LineDiff::new(before, after).unified(
            2,
            &format!("a/{}", self.path),
            &format!("b/{}", self.path),
        )
    }
}

/// What produced a [`DreamRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RecordKind {
    /// A Dream run.
    Dream,
    /// A `/dream-restore` (itself undoable).
    Restore,
}

/// A versioned record of one change to the memory files: `memory/.dream/<version>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DreamRecord {
    /// 1, 2, 3, …
    pub version: u64,
    /// Dream run or restore.
    pub kind: RecordKind,
    /// When (`YYYY-MM-DD HH:MM`, local time).
    pub timestamp: String,
    /// The history cursors this run read (`(after, up_to]`); `None` for restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursors: Option<(u64, u64)>,
    /// The record a restore undid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<u64>,
    /// The model's summary of the run (or what a restore did).
    #[serde(default)]
    pub summary: String,
    /// The files changed, with their contents before and after.
    pub changes: Vec<FileChange>,
}

impl DreamRecord {
    /// One line for `/dream-log`: `#3 2026-01-02 10:00 dream: 2 files (memory/MEMORY.md, USER.md) — summary`.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            RecordKind::Dream => "dream".to_owned(),
            RecordKind::Restore => format!("restore of #{}", self.restores.unwrap_or_default()),
        };
        let files: Vec<&str> = self.changes.iter().map(|c| c.path.as_str()).collect();
        let mut line = format!(
            "#{} {} {kind}: {} file(s) ({})",
            self.version,
            self.timestamp,
            files.len(),
            files.join(", ")
        );
        let summary = self.summary.lines().next().unwrap_or("").trim();
        if !summary.is_empty() {
            line.push_str(" — ");
            line.push_str(&truncate(summary, 120));
        }
        line
    }
}

/// What one [`Dream::run`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct DreamOutcome {
    /// History entries read.
    pub entries: usize,
    /// `.dream_cursor` after the run.
    pub cursor: u64,
    /// The record of the files changed (`None` when nothing changed or there was nothing new).
    pub record: Option<DreamRecord>,
    /// The model's final answer (empty when there was nothing new).
    pub summary: String,
}

impl DreamOutcome {
    /// A short report for the user (the answer to `/dream`).
    pub fn report(&self) -> String {
        if self.entries == 0 {
            return "Dream: no new history since the last run; nothing to do.".to_owned();
        }
        let mut out = format!(
            "Dream read {} new history entr{}",
            self.entries,
            if self.entries == 1 { "y" } else { "ies" }
        );
        match &self.record {
            Some(r) => {
                let files: Vec<&str> = r.changes.iter().map(|c| c.path.as_str()).collect();
                out.push_str(&format!(
                    " and changed {} (record #{}; `/dream-restore {}` undoes it).",
                    files.join(", "),
                    r.version,
                    r.version
                ));
            }
            None => out.push_str("; no file needed changing."),
        }
        if !self.summary.is_empty() {
            out.push('\n');
            out.push_str(&self.summary);
        }
        out
    }
}

/// What [`Dream::restore`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreOutcome {
    /// The record undone.
    pub restored: u64,
    /// The new record of the restore itself (restore it to redo).
    pub record: DreamRecord,
    /// Files edited after the undone change (their later contents are kept in `record`).
    pub conflicts: Vec<String>,
}

/// Dream: reads the history entries after `.dream_cursor` and the current `MEMORY.md`, `SOUL.md` and `USER.md`,
/// and lets the model edit only those files and `skills/` with restricted `read_file` / `write_file` /
/// `edit_file` / `list_dir` tools; then advances the cursor. Every run that changes files writes a versioned
/// [`DreamRecord`] with the contents before and after, so [`Dream::log`] lists the changes and
/// [`Dream::restore`] undoes one. One run at a time per `Dream` value (clones share the lock).
#[derive(Clone)]
pub struct Dream {
    store: MemoryStore,
    targets: Arc<Targets>,
    provider: Arc<dyn Provider>,
    settings: DreamSettings,
    running: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for Dream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dream")
            .field("memory", &self.store.dir())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Dream {
    /// Dream over `store`'s workspace, asking `provider`.
    pub fn new(store: MemoryStore, provider: Arc<dyn Provider>, settings: DreamSettings) -> Self {
        Self {
            targets: Arc::new(Targets::of(&store)),
            store,
            provider,
            settings,
            running: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Dream over the memory of `scope` (see [`crate::scope`]). The shared memory's Dream keeps `MEMORY.md`,
    /// `SOUL.md`, `USER.md` and `skills/`; a scope's Dream reads that scope's history and may change only that
    /// scope's `MEMORY.md` (the others are everyone's). Each scope has its own cursor and undo log; runs of all
    /// scopes take turns (clones share one lock).
    #[must_use]
    pub fn scoped(&self, scope: &ScopeKey) -> Self {
        self.in_store(self.store.scoped(scope))
    }

    fn in_store(&self, store: MemoryStore) -> Self {
        Self {
            targets: Arc::new(Targets::of(&store)),
            store,
            provider: self.provider.clone(),
            settings: self.settings.clone(),
            running: self.running.clone(),
        }
    }

    /// Runs Dream for the shared memory and then for every scope folder under `memory/scopes/` (see
    /// [`Dream::run`]); returns each one's id (the folder name when it cannot be decoded) and outcome. A scope
    /// whose run fails is reported with its error and the others still run.
    pub async fn run_all(&self) -> Vec<(String, Result<DreamOutcome>)> {
        let shared = self.in_store(self.store.scoped(&ScopeKey::Shared));
        let mut out = vec![(ScopeKey::Shared.id(), shared.run().await)];
        let files = self.store.files().clone();
        let root = Path::new(MEMORY_DIR).join(SCOPES_DIR);
        let listed = {
            let root = root.clone();
            blocking(move || {
                files
                    .read_dir(&root)
                    .map_err(|e| MemoryError::io("listing", files.display_path(&root), e))
            })
            .await
        };
        let folders = match listed {
            Ok(entries) => entries.unwrap_or_default(),
            Err(e) => {
                out.push((root.display().to_string(), Err(e)));
                return out;
            }
        };
        for (name, kind) in folders {
            // Links and files planted among the scope folders are not scopes.
            let (EntryKind::Dir, Some(stem)) = (kind, name.to_str()) else {
                continue;
            };
            let label = scope::from_stem(stem).map_or_else(|| stem.to_owned(), |k| k.id());
            let dream = self.in_store(self.store.in_dir(root.join(stem)));
            out.push((label, dream.run().await));
        }
        out
    }

    /// `<memory folder>/.dream`.
    pub fn records_dir(&self) -> PathBuf {
        self.store.dir().join(DREAM_RECORDS_DIR)
    }

    /// `<memory folder>/.dream`, relative to the workspace.
    fn records_rel(&self) -> PathBuf {
        self.store.rel(DREAM_RECORDS_DIR)
    }

    /// Runs Dream once (waits for a run in progress). Without new history entries the model is not called.
    ///
    /// When the model call fails midway, the changes made so far are still recorded (so they can be undone)
    /// and the cursor stays, so the next run sees the same entries again.
    pub async fn run(&self) -> Result<DreamOutcome> {
        let _running = self.running.lock().await;
        let store = self.store.clone();
        let max = self.settings.max_entries.max(1);
        let (after, entries) = blocking(move || {
            let after = store.dream_cursor()?;
            let mut entries = store.read_history_after(after)?;
            entries.truncate(max);
            Ok((after, entries))
        })
        .await?;
        let Some(last) = entries.last().map(|e| e.cursor) else {
            return Ok(DreamOutcome {
                entries: 0,
                cursor: after,
                record: None,
                summary: String::new(),
            });
        };

        let files = self.store.files().clone();
        let before = blocking({
            let (files, targets) = (files.clone(), self.targets.clone());
            move || snapshot(&files, &targets)
        })
        .await?;
        let result = self.converse(&entries, &before).await;
        let after_snap = blocking({
            let (files, targets) = (files.clone(), self.targets.clone());
            move || snapshot(&files, &targets)
        })
        .await?;
        let changes = diff_snapshots(&before, &after_snap);
        let summary = match &result {
            Ok(s) => s.clone(),
            Err(e) => format!("interrupted: {}", nanobot_util::error_chain(e)),
        };
        let record = if changes.is_empty() {
            None
        } else {
            let dir = self.records_rel();
            let files = files.clone();
            let record = DreamRecord {
                version: 0,
                kind: RecordKind::Dream,
                timestamp: now_stamp(),
                cursors: Some((after, last)),
                restores: None,
                summary: summary.clone(),
                changes,
            };
            Some(blocking(move || write_record(&files, &dir, record)).await?)
        };
        result?;
        let store = self.store.clone();
        blocking(move || store.set_dream_cursor(last)).await?;
        tracing::info!(
            entries = entries.len(),
            cursor = last,
            changed = record.is_some(),
            "Dream finished"
        );
        Ok(DreamOutcome {
            entries: entries.len(),
            cursor: last,
            record,
            summary,
        })
    }

    /// Every record, oldest first (for `/dream-log`).
    pub async fn log(&self) -> Result<Vec<DreamRecord>> {
        let (files, dir) = (self.store.files().clone(), self.records_rel());
        blocking(move || read_records(&files, &dir)).await
    }

    /// Record `version` (for `/dream-log <n>`).
    pub async fn record(&self, version: u64) -> Result<DreamRecord> {
        let (files, dir) = (self.store.files().clone(), self.records_rel());
        blocking(move || read_record(&files, &dir, version)).await
    }

    /// The answer to `/dream-log [n]`: the latest 10 records, one line each; with `n`, record `n` with diffs.
    pub async fn log_text(&self, args: &str) -> Result<String> {
        let args = args.trim();
        if args.is_empty() {
            let log = self.log().await?;
            if log.is_empty() {
                return Ok("No Dream changes yet.".to_owned());
            }
            let lines: Vec<String> = log.iter().rev().take(10).map(DreamRecord::describe).collect();
            return Ok(format!("Dream changes, newest first:\n{}", lines.join("\n")));
        }
        let Some(version) = parse_version(args) else {
            return Ok(format!("Not a record number: `{args}`. Usage: /dream-log [n]"));
        };
        let record = match self.record(version).await {
            Err(MemoryError::NoSuchRecord(v)) => return Ok(format!("There is no Dream record #{v}.")),
            other => other?,
        };
        let mut out = record.describe();
        for c in &record.changes {
            out.push_str("\n\n");
            out.push_str(&c.diff());
        }
        Ok(out)
    }

    /// The answer to `/dream-restore [n]`: undoes record `n` (the newest without `n`) and says what happened.
    pub async fn restore_text(&self, args: &str) -> Result<String> {
        let args = args.trim();
        let version = if args.is_empty() {
            None
        } else {
            match parse_version(args) {
                Some(v) => Some(v),
                None => {
                    return Ok(format!(
                        "Not a record number: `{args}`. Usage: /dream-restore [n]"
                    ));
                }
            }
        };
        let outcome = match self.restore(version).await {
            Err(MemoryError::NoSuchRecord(0)) => return Ok("No Dream changes to restore.".to_owned()),
            Err(MemoryError::NoSuchRecord(v)) => return Ok(format!("There is no Dream record #{v}.")),
            other => other?,
        };
        let files: Vec<&str> = outcome.record.changes.iter().map(|c| c.path.as_str()).collect();
        let mut out = if files.is_empty() {
            format!(
                "Record #{} was already undone; nothing changed.",
                outcome.restored
            )
        } else {
            format!(
                "Restored {} as before record #{} (this restore is record #{}; `/dream-restore {}` redoes it).",
                files.join(", "),
                outcome.restored,
                outcome.record.version,
                outcome.record.version
            )
        };
        if !outcome.conflicts.is_empty() {
            out.push_str(&format!(
                "\nNote: {} had changed since; the replaced text is kept in record #{}.",
                outcome.conflicts.join(", "),
                outcome.record.version
            ));
        }
        Ok(out)
    }

    /// Undoes record `version` (the newest when `None`): every file it changed gets its earlier contents back
    /// (or is deleted if it did not exist). The restore is recorded too, with the contents it replaced, so it
    /// can itself be undone; nothing is lost. The Dream cursor does not move.
    pub async fn restore(&self, version: Option<u64>) -> Result<RestoreOutcome> {
        let _running = self.running.lock().await;
        let (files, dir) = (self.store.files().clone(), self.records_rel());
        blocking(move || {
            let target = match version {
                Some(v) => read_record(&files, &dir, v)?,
                None => read_records(&files, &dir)?
                    .pop()
                    .ok_or(MemoryError::NoSuchRecord(0))?,
            };
            let mut changes = Vec::new();
            let mut conflicts = Vec::new();
            for c in &target.changes {
                let current = fsio::read_optional(&files, Path::new(&c.path))?;
                if current != c.after {
                    conflicts.push(c.path.clone());
                }
                if current != c.before {
                    changes.push(FileChange {
                        path: c.path.clone(),
                        before: current,
                        after: c.before.clone(),
                    });
                }
            }
            let record = DreamRecord {
                version: 0,
                kind: RecordKind::Restore,
                timestamp: now_stamp(),
                cursors: None,
                restores: Some(target.version),
                summary: format!("restored the files of #{}", target.version),
                changes,
            };
            // Record first: if writing a file fails midway, the record still holds what was there.
            let record = write_record(&files, &dir, record)?;
            for c in &record.changes {
                let path = Path::new(&c.path);
                match &c.after {
                    Some(text) => fsio::write_atomic(&files, path, text.as_bytes())?,
                    None => fsio::remove_optional(&files, path)?,
                }
            }
            Ok(RestoreOutcome {
                restored: target.version,
                record,
                conflicts,
            })
        })
        .await
    }

    /// The model ⇄ restricted tools loop; returns the model's final text.
    async fn converse(&self, entries: &[HistoryEntry], before: &Snapshot) -> Result<String> {
        let ws = self.store.workspace().to_owned();
        let registry = restricted_registry(&ws, &self.targets);
        let tools = registry.definitions();
        let ctx = ToolContext::new(&ws);
        let mut messages = vec![
            ChatMessage::system(self.targets.system_prompt(self.store.files())),
            ChatMessage::user(self.prompt(entries, before)),
        ];
        for _ in 0..self.settings.max_iterations.max(1) {
            let mut request =
                ChatRequest::new(self.settings.model.clone(), messages.clone()).with_tools(tools.clone());
            request.max_tokens = self.settings.max_tokens;
            let response = self.provider.chat(request).await?;
            messages.push(response.to_message());
            if !response.has_tool_calls() {
                return Ok(response.content.unwrap_or_default().trim().to_owned());
            }
            for call in &response.tool_calls {
                let output = match &call.arguments_error {
                    Some(e) => ToolOutput::error(format!("Error: invalid JSON arguments ({e})")),
                    None => {
                        registry
                            .execute(
                                &call.name,
                                call.arguments.clone(),
                                &ctx.clone().with_call_id(&call.id),
                            )
                            .await
                    }
                };
                messages.push(ChatMessage::tool_result(&call.id, &call.name, output.text));
            }
        }
        Ok(format!(
            "stopped after {} steps",
            self.settings.max_iterations.max(1)
        ))
    }

    fn prompt(&self, entries: &[HistoryEntry], before: &Snapshot) -> String {
        let mut p = String::from("## New history entries\n");
        for e in entries {
            let session = e
                .session_key
                .as_deref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default();
            p.push_str(&format!(
                "- #{} [{}]{session}: {}\n",
                e.cursor,
                e.timestamp,
                truncate(e.content.trim(), self.settings.max_entry_chars)
            ));
        }
        for file in &self.targets.files {
            let text = before.get(file).cloned().flatten().unwrap_or_default();
            p.push_str(&format!(
                "\n## {file}\n{}\n",
                if text.trim().is_empty() {
                    "(empty)"
                } else {
                    text.trim_end()
                }
            ));
        }
        if !self.targets.skills {
            return p;
        }
        let skills: Vec<&str> = before
            .keys()
            .filter(|k| k.starts_with("skills/"))
            .map(String::as_str)
            .collect();
        p.push_str("\n## Skill files\n");
        if skills.is_empty() {
            p.push_str("(none)\n");
        }
        for s in skills {
            p.push_str(&format!("- {s}\n"));
        }
        p
    }
}

/// The workspace's own instructions for Dream (0.3.5's `prompts/dream.md`): when the file is not empty, it
/// replaces [`DEFAULT_DREAM_PROMPT`] for the shared memory's Dream (a scope's Dream keeps its one-file guide).
pub const DREAM_PROMPT_FILE: &str = "prompts/dream.md";
/// The longest workspace prompt used (longer files are cut, as 0.3.5 cuts them).
pub const WORKSPACE_PROMPT_MAX_CHARS: usize = nanobot_util::WORKSPACE_PROMPT_MAX_CHARS;

/// What the shared memory's Dream is told unless the workspace has [`DREAM_PROMPT_FILE`].
pub const DEFAULT_DREAM_PROMPT: &str = SYSTEM_PROMPT;

/// What the scope's Dream is told (it keeps one memory file; `{file}` is its path).
const SCOPE_SYSTEM_PROMPT: &str = "You are Dream, the memory curator of a personal AI assistant. You read the new \
entries of one conversation's history log and keep that conversation's memory file, {file}, up to date: durable \
facts (about the people in it, their projects, decisions, preferences). Merge new facts, remove duplicates and \
outdated ones, keep it concise and organised. Use read_file, edit_file and write_file; you can only touch that file. \
Do not copy the history into memory: keep what will matter later. When you are done, answer with one or two \
sentences saying what you changed (or that nothing needed changing).";

const SYSTEM_PROMPT: &str = "You are Dream, the memory curator of a personal AI assistant. You read the new entries \
of the conversation history log and keep the assistant's memory files up to date:\n\
- memory/MEMORY.md: durable facts (about the user, their projects, decisions, preferences). Merge new facts, \
remove duplicates and outdated ones, keep it concise and organised.\n\
- USER.md: who the user is and how they like to be helped.\n\
- SOUL.md: the assistant's personality; change it only when the user asked for a different behaviour.\n\
- skills/<name>/SKILL.md: a reusable procedure that came up repeatedly (YAML frontmatter with name and \
description, then instructions).\n\
Use read_file, edit_file, write_file and list_dir; you can only touch these files. Do not copy the history into \
memory: keep what will matter later. When you are done, answer with one or two sentences saying what you \
changed (or that nothing needed changing).";

/// The workspace's Dream instructions ([`DREAM_PROMPT_FILE`], read beneath the workspace handle), cut at
/// [`WORKSPACE_PROMPT_MAX_CHARS`]; `None` when the file is missing, empty, unreadable or not UTF-8.
pub fn workspace_dream_prompt(files: &ConfinedDir) -> Option<String> {
    nanobot_util::workspace_prompt(files, Path::new(DREAM_PROMPT_FILE))
}

/// Relative path → contents (`None`: the file does not exist).
type Snapshot = BTreeMap<String, Option<String>>;

/// The contents of every file Dream may change (read beneath the workspace handle: a link planted in
/// `skills/` that leads out of the workspace is left out, never followed).
fn snapshot(files: &ConfinedDir, targets: &Targets) -> Result<Snapshot> {
    let mut out = Snapshot::new();
    for f in &targets.files {
        out.insert(f.clone(), fsio::read_optional(files, Path::new(f))?);
    }
    let mut stack = if targets.skills {
        vec![PathBuf::from(DREAM_SKILLS_DIR)]
    } else {
        Vec::new()
    };
    while let Some(dir) = stack.pop() {
        let entries = files
            .read_dir(&dir)
            .map_err(|e| MemoryError::io("listing", files.display_path(&dir), e))?
            .unwrap_or_default();
        for (name, kind) in entries {
            let rel = dir.join(name);
            match kind {
                EntryKind::Dir => stack.push(rel),
                EntryKind::File => {
                    let len = files
                        .symlink_metadata(&rel)
                        .ok()
                        .flatten()
                        .map_or(u64::MAX, |m| m.len());
                    if len > MAX_RECORDED_BYTES {
                        continue;
                    }
                    match fsio::read_optional(files, &rel) {
                        Ok(text) => {
                            out.insert(rel_string(&rel), text);
                        }
                        // Binary files are not Dream's business; leave them out of the record.
                        Err(MemoryError::Corrupt { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                // Links, FIFOs and sockets: not Dream's files.
                _ => {}
            }
        }
    }
    Ok(out)
}

fn rel_string(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn diff_snapshots(before: &Snapshot, after: &Snapshot) -> Vec<FileChange> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let b = before.get(k).cloned().flatten();
            let a = after.get(k).cloned().flatten();
            (a != b).then(|| FileChange {
                path: k.clone(),
                before: b,
                after: a,
            })
        })
        .collect()
}

fn record_versions(files: &ConfinedDir, dir: &Path) -> Result<Vec<u64>> {
    let entries = files
        .read_dir(dir)
        .map_err(|e| MemoryError::io("listing", files.display_path(dir), e))?
        .unwrap_or_default();
    let mut versions: Vec<u64> = entries
        .into_iter()
        .filter_map(|(name, _)| {
            name.to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

fn read_record(files: &ConfinedDir, dir: &Path, version: u64) -> Result<DreamRecord> {
    let rel = dir.join(format!("{version}.json"));
    let text = fsio::read_optional(files, &rel)?.ok_or(MemoryError::NoSuchRecord(version))?;
    serde_json::from_str(&text).map_err(|e| MemoryError::Corrupt {
        path: files.display_path(&rel),
        line: e.line(),
        message: e.to_string(),
    })
}

fn read_records(files: &ConfinedDir, dir: &Path) -> Result<Vec<DreamRecord>> {
    record_versions(files, dir)?
        .into_iter()
        .map(|v| read_record(files, dir, v))
        .collect()
}

/// Writes `record` as the next version; returns it with its version set.
fn write_record(files: &ConfinedDir, dir: &Path, mut record: DreamRecord) -> Result<DreamRecord> {
    fsio::ensure_dir(files, dir)?;
    record.version = record_versions(files, dir)?.last().copied().unwrap_or(0) + 1;
    let json = serde_json::to_string_pretty(&record).map_err(|source| MemoryError::Encode {
        what: "a Dream record",
        source,
    })?;
    fsio::write_atomic(
        files,
        &dir.join(format!("{}.json", record.version)),
        json.as_bytes(),
    )?;
    Ok(record)
}

fn parse_version(args: &str) -> Option<u64> {
    args.trim_start_matches('#').parse().ok().filter(|v| *v > 0)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// `read_file`, `write_file`, `edit_file` and `list_dir`, each refusing any path outside Dream's files.
fn restricted_registry(ws: &Path, targets: &Arc<Targets>) -> ToolRegistry {
    let sandbox = Arc::new(Sandbox::new(ws, true));
    let registry = ToolRegistry::default();
    let guard = Arc::new(PathGuard::new(ws, targets.clone()));
    let mut tools: Vec<(Arc<dyn Tool>, bool)> = vec![
        (Arc::new(ReadFileTool::new(sandbox.clone())), false),
        (Arc::new(WriteFileTool::new(sandbox.clone())), false),
        (Arc::new(EditFileTool::new(sandbox.clone())), false),
    ];
    if targets.skills {
        tools.push((Arc::new(ListDirTool::new(sandbox)), true));
    }
    for (inner, dirs) in tools {
        registry.register(Arc::new(Restricted {
            inner,
            guard: guard.clone(),
            dirs,
        }));
    }
    registry
}

/// Decides which paths Dream may touch.
#[derive(Debug)]
pub(crate) struct PathGuard {
    ws: PathBuf,
    ws_real: PathBuf,
    targets: Arc<Targets>,
}

impl PathGuard {
    pub(crate) fn new(ws: &Path, targets: Arc<Targets>) -> Self {
        let ws = normalize(ws);
        let ws_real = real_path(&ws).unwrap_or_else(|_| ws.clone());
        Self { ws, ws_real, targets }
    }

    /// Whether `path` (as the model wrote it) names an allowed file (`dirs`: an allowed directory to list).
    pub(crate) fn allows(&self, path: &str, dirs: bool) -> bool {
        if path.starts_with('~') {
            return false;
        }
        let p = Path::new(path);
        let abs = if p.is_absolute() {
            normalize(p)
        } else {
            normalize(&self.ws.join(p))
        };
        let lexical = abs
            .strip_prefix(&self.ws)
            .or_else(|_| abs.strip_prefix(&self.ws_real))
            .ok()
            .is_some_and(|rel| self.targets.allows(rel, dirs));
        // Symlinks must not lead elsewhere: the resolved path must be allowed too.
        let real = real_path(&abs)
            .ok()
            .and_then(|r| r.strip_prefix(&self.ws_real).ok().map(Path::to_path_buf))
            .is_some_and(|rel| self.targets.allows(&rel, dirs));
        lexical && real
    }
}

/// The files one Dream may change.
#[derive(Debug)]
pub(crate) struct Targets {
    /// Files, relative to the workspace with `/` separators, in prompt order.
    files: Vec<String>,
    /// Whether `skills/` is Dream's too (the shared memory's Dream only).
    skills: bool,
}

impl Targets {
    /// The shared memory's Dream: [`DREAM_FILES`] and `skills/`; a scope's: its own `MEMORY.md`.
    pub(crate) fn of(store: &MemoryStore) -> Self {
        if store.rel_dir() == Path::new(MEMORY_DIR) {
            Self {
                files: DREAM_FILES.iter().map(|f| (*f).to_owned()).collect(),
                skills: true,
            }
        } else {
            Self {
                files: vec![rel_string(&store.rel(MEMORY_FILE))],
                skills: false,
            }
        }
    }

    fn system_prompt(&self, files: &ConfinedDir) -> String {
        match (self.skills, self.files.first()) {
            (false, Some(file)) => SCOPE_SYSTEM_PROMPT.replace("{file}", file),
            _ => workspace_dream_prompt(files).unwrap_or_else(|| SYSTEM_PROMPT.to_owned()),
        }
    }

    /// For error messages: what may be touched.
    fn describe(&self, dirs: bool) -> String {
        match (dirs, self.skills) {
            (true, _) => "directories under skills/".to_owned(),
            (false, true) => format!("{} and files under skills/", self.files.join(", ")),
            (false, false) => self.files.join(", "),
        }
    }

    /// Whether the workspace-relative `rel` is one of the files (`dirs`: a directory Dream may list).
    fn allows(&self, rel: &Path, dirs: bool) -> bool {
        let comps: Vec<&str> = rel
            .components()
            .map(|c| match c {
                Component::Normal(s) => s.to_str().unwrap_or("\u{0}"),
                _ => "\u{0}",
            })
            .collect();
        if comps.is_empty() || comps.contains(&"\u{0}") {
            return false;
        }
        let in_skills = self.skills && comps.first() == Some(&DREAM_SKILLS_DIR);
        if dirs {
            return in_skills;
        }
        let joined = comps.join("/");
        self.files.contains(&joined) || (in_skills && comps.len() >= 2)
    }
}

struct Restricted {
    inner: Arc<dyn Tool>,
    guard: Arc<PathGuard>,
    dirs: bool,
}

#[async_trait]
impl Tool for Restricted {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn effects(&self, args: &Value) -> nanobot_tools::Effects {
        self.inner.effects(args)
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = args
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or(if self.dirs { "skills" } else { "" });
        if !self.guard.allows(path, self.dirs) {
            return Err(ToolError::Failed(format!(
                "Error: `{path}` is outside what Dream may touch; only {} may be",
                self.guard.targets.describe(self.dirs)
            )));
        }
        let mut args = args;
        if self.dirs
            && let Some(obj) = args.as_object_mut()
        {
            obj.entry("path")
                .or_insert_with(|| Value::String(DREAM_SKILLS_DIR.into()));
        }
        self.inner.execute(args, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_allows_only_dream_files() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("skills/x")).unwrap();
        let g = PathGuard::new(ws.path(), Arc::new(Targets::of(&MemoryStore::new(ws.path()))));
        for ok in [
            "memory/MEMORY.md",
            "SOUL.md",
            "./USER.md",
            "skills/x/SKILL.md",
            "skills/new/SKILL.md",
        ] {
            assert!(g.allows(ok, false), "{ok}");
        }
        let abs = ws.path().join("memory/MEMORY.md");
        assert!(g.allows(abs.to_str().unwrap(), false));
        for bad in [
            "AGENTS.md",
            "memory/history.jsonl",
            "memory/.dream_cursor",
            "skills",
            "skills/../AGENTS.md",
            "../SOUL.md",
            "~/SOUL.md",
            "/etc/passwd",
            "memory/MEMORY.md/../x",
        ] {
            assert!(!g.allows(bad, false), "{bad}");
        }
        assert!(g.allows("skills", true));
        assert!(g.allows("skills/x", true));
        assert!(!g.allows(".", true));
    }

    #[cfg(unix)]
    #[test]
    fn guard_refuses_symlinks_out_of_skills() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("skills")).unwrap();
        std::fs::write(ws.path().join("AGENTS.md"), "rules").unwrap();
        std::os::unix::fs::symlink(ws.path().join("AGENTS.md"), ws.path().join("skills/evil.md")).unwrap();
        let g = PathGuard::new(ws.path(), Arc::new(Targets::of(&MemoryStore::new(ws.path()))));
        assert!(!g.allows("skills/evil.md", false));
    }
}
