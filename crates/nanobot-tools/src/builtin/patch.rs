//! `apply_patch`: several exact edits over one or more files, checked together, then written together.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::fs::{blocking, display_path, read_text_to_change};
use crate::error::ToolError;
use crate::sandbox::Sandbox;
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// Most edits one call may carry (0.3.5's bound).
pub const MAX_PATCH_EDITS: usize = 20;
/// Largest file `apply_patch` reads to change.
const PATCH_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// What one edit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchAction {
    /// Replace the one occurrence of old_text with new_text.
    Replace,
    /// Append new_text to the file (creating it when missing).
    Add,
}

/// One edit of `apply_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PatchEdit {
    /// The file to edit (relative to the workspace; absolute paths and `..` obey the workspace policy).
    pub path: String,
    /// replace or add.
    pub action: PatchAction,
    /// The exact text to find (replace only; it must occur once).
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub old_text: Option<String>,
    /// The text to put in its place (replace), or to append (add).
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub new_text: Option<String>,
}

/// Arguments of `apply_patch` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The edits, applied in order (later edits of a file see the earlier ones).
    #[schemars(length(min = 1, max = 20))]
    pub edits: Vec<PatchEdit>,
    /// Check and summarise the patch without writing anything (default false).
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub dry_run: Option<bool>,
}

/// `apply_patch`: every edit is checked against the files (and the edits before it) first; only when all of them
/// apply are the files written, each atomically, and a write that fails puts back the files already written.
#[derive(Debug, Clone)]
pub struct ApplyPatchTool {
    sandbox: Arc<Sandbox>,
}

impl ApplyPatchTool {
    /// An `apply_patch` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

/// A file the patch changes: the contents before (`None`: it did not exist) and after.
struct Planned {
    raw: String,
    before: Option<String>,
    after: String,
}

/// `text` with `\n` line ends, and whether it had `\r\n` ones.
fn normalise(text: &str) -> (String, bool) {
    (text.replace("\r\n", "\n"), text.contains("\r\n"))
}

fn restore_line_ends(text: String, crlf: bool) -> String {
    if crlf { text.replace('\n', "\r\n") } else { text }
}

fn ensure_final_newline(mut text: String) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Checks every edit and computes the files' new contents, in order of first mention.
fn plan(sandbox: &Sandbox, edits: &[PatchEdit]) -> Result<Vec<(PathBuf, Planned)>, ToolError> {
    let mut order: Vec<PathBuf> = Vec::new();
    let mut files: BTreeMap<PathBuf, Planned> = BTreeMap::new();
    for edit in edits {
        let raw = edit.path.trim();
        if raw.is_empty() {
            return Err(ToolError::InvalidArguments("patch path cannot be empty".into()));
        }
        if raw.contains('\0') {
            return Err(ToolError::InvalidArguments(format!(
                "patch path contains a null byte: {raw:?}"
            )));
        }
        let (path, current) = read_text_to_change(sandbox, raw, PATCH_MAX_BYTES, "patch")?;
        let pending = files.get(&path).map(|p| p.after.clone());
        let existing = pending.clone().or(current.clone());
        let after = match edit.action {
            PatchAction::Add => {
                let text = edit.new_text.as_deref().ok_or_else(|| {
                    ToolError::InvalidArguments(format!("new_text required for add: {raw}"))
                })?;
                match &existing {
                    Some(content) => {
                        let (mut base, crlf) = normalise(content);
                        let (extra, _) = normalise(text);
                        if !base.is_empty()
                            && !extra.is_empty()
                            && !base.ends_with('\n')
                            && !extra.starts_with('\n')
                        {
                            base.push('\n');
                        }
                        base.push_str(&extra);
                        restore_line_ends(ensure_final_newline(base), crlf)
                    }
                    None => ensure_final_newline(normalise(text).0),
                }
            }
            PatchAction::Replace => {
                let old = edit
                    .old_text
                    .as_deref()
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        ToolError::InvalidArguments(format!("old_text required for replace: {raw}"))
                    })?;
                let new = edit.new_text.as_deref().ok_or_else(|| {
                    ToolError::InvalidArguments(format!("new_text required for replace: {raw}"))
                })?;
                let content = existing
                    .as_deref()
                    .ok_or_else(|| ToolError::Failed(format!("file to update does not exist: {raw}")))?;
                let (text, crlf) = normalise(content);
                let (old, _) = normalise(old);
                let mut hits = text.match_indices(old.as_str());
                let Some((at, _)) = hits.next() else {
                    return Err(ToolError::Failed(format!("old_text not found in {raw}")));
                };
                if hits.next().is_some() {
                    return Err(ToolError::Failed(format!(
                        "old_text appears multiple times in {raw}; include more context"
                    )));
                }
                let replaced = format!("{}{}{}", &text[..at], normalise(new).0, &text[at + old.len()..]);
                restore_line_ends(ensure_final_newline(replaced), crlf)
            }
        };
        match files.get_mut(&path) {
            Some(p) => p.after = after,
            None => {
                order.push(path.clone());
                files.insert(
                    path,
                    Planned {
                        raw: raw.to_owned(),
                        before: current,
                        after,
                    },
                );
            }
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|p| files.remove(&p).map(|planned| (p, planned)))
        .collect())
}

/// `- add|update <path> (+added/-deleted)`: one file of `apply_patch`'s and `edit_file`'s answer (`before` is
/// `None` for a file that did not exist).
pub(super) fn summary_line(
    sandbox: &Sandbox,
    path: &std::path::Path,
    before: Option<&str>,
    after: &str,
) -> String {
    let (added, deleted) = nanobot_util::text_diff::text_line_counts(before.unwrap_or(""), after);
    let action = if before.is_some() { "update" } else { "add" };
    let stats = if added + deleted > 0 {
        format!(" (+{added}/-{deleted})")
    } else {
        String::new()
    };
    format!("- {action} {}{stats}", display_path(sandbox, path))
}

#[async_trait]
impl TypedTool for ApplyPatchTool {
    type Args = ApplyPatchArgs;

    fn name(&self) -> &str {
        "apply_patch"
    }

    /// Every file its edits name (a dry run writes nothing).
    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        if args.get("dry_run").and_then(serde_json::Value::as_bool) == Some(true) {
            return crate::Effects::none();
        }
        crate::Effects::writes(
            args.get("edits")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(crate::builtin::fs::path_arg),
        )
    }

    fn description(&self) -> &str {
        "Make code edits, across several files in one call: a list of edits, each a file path, an action \
         (replace: swap the one occurrence of old_text for new_text; add: append new_text, creating the file) and \
         the exact text. All edits are checked first; nothing is written unless every one applies. dry_run=true \
         checks and summarises without writing. Use edit_file for a single small replacement."
    }

    async fn call(&self, args: ApplyPatchArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.edits.is_empty() || args.edits.len() > MAX_PATCH_EDITS {
            return Err(ToolError::InvalidArguments(format!(
                "edits must hold 1 to {MAX_PATCH_EDITS} edits"
            )));
        }
        let sandbox = self.sandbox.for_call(ctx);
        let dry_run = args.dry_run.unwrap_or(false);
        blocking(move || {
            let planned = match plan(&sandbox, &args.edits) {
                Ok(p) => p,
                Err(e) => return Ok(ToolOutput::error(format!("Error applying patch: {e}"))),
            };
            let lines: Vec<String> = planned
                .iter()
                .map(|(path, p)| summary_line(&sandbox, path, p.before.as_deref(), &p.after)).collect();
            if dry_run {
                return Ok(ToolOutput::text(format!("Patch dry-run succeeded:\n{}", lines.join("\n"))));
            }
            for (i, (_, p)) in planned.iter().enumerate() {
                if let Err(e) = sandbox.write_atomic(&p.raw, p.after.as_bytes()) {
                    // Put back what this call already wrote.
                    for (_, done) in planned[..i].iter().rev() {
                        let undone = match &done.before {
                            Some(text) => sandbox.write_atomic(&done.raw, text.as_bytes()).map(drop),
                            None => sandbox.remove_file(&done.raw),
                        };
                        if let Err(u) = undone {
                            tracing::warn!(path = %done.raw, error = %u, "apply_patch could not undo a write");
                        }
                    }
                    return Ok(ToolOutput::error(format!(
                        "Error applying patch: writing {}: {e}; no file was changed",
                        p.raw
                    )));
                }
            }
            Ok(ToolOutput::text(format!("Patch applied:\n{}", lines.join("\n"))))
        })
        .await
    }
}
