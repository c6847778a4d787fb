//! `edit_file`: replaces text in one file, found exactly or, failing that, by 0.3.5's looser strategies
//! (`matching`); a near miss is answered with the closest region (`near_miss`).

mod matching;
mod near_miss;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::fs::{READ_MAX_BYTES, blocking, display_path, read_text_to_change};
use super::patch::summary_line;
use crate::error::ToolError;
use crate::sandbox::{Opened, Sandbox};
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};
use matching::Span;

/// Arguments of `edit_file` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file path to edit.
    pub path: String,
    /// The text to find and replace; copy it from read_file. Empty: create the file (when missing or empty).
    pub old_text: String,
    /// The replacement text; must differ from old_text for an existing file.
    pub new_text: String,
    /// Replace every occurrence (default false: old_text must be unique).
    #[serde(default)]
    pub replace_all: Option<bool>,
    /// Which occurrence to replace (1-based) when old_text appears more than once.
    #[serde(default)]
    #[schemars(range(min = 1), extend("nullable" = true))]
    pub occurrence: Option<u64>,
    /// A 1-based line number from read_file; the occurrence that covers this line is replaced.
    #[serde(default)]
    #[schemars(range(min = 1), extend("nullable" = true))]
    pub line_hint: Option<u64>,
    /// How many replacements must be made; otherwise nothing is changed.
    #[serde(default)]
    #[schemars(range(min = 1), extend("nullable" = true))]
    pub expected_replacements: Option<u64>,
}

/// `edit_file`: replaces text found exactly or by 0.3.5's looser strategies (indentation and quote style
/// ignored, the new text shaped to the file's); refuses ambiguous matches; shows the closest region as a diff
/// when the text is not found; keeps `\r\n` line endings; an empty `old_text` creates a missing or empty file.
#[derive(Debug, Clone)]
pub struct EditFileTool {
    sandbox: Arc<Sandbox>,
}

impl EditFileTool {
    /// An `edit_file` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for EditFileTool {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        crate::Effects::writes(super::fs::path_arg(args))
    }

    fn description(&self) -> &str {
        "Replace text in one file (read it first). Copy old_text exactly; lines that differ only in indentation or \
         quote style still match, and the new text takes the file's. When old_text occurs more than once, choose \
         one with occurrence or line_hint, or set replace_all=true (the three exclude each other). An empty \
         old_text creates a missing or empty file."
    }

    async fn call(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let sandbox = self.sandbox.for_call(ctx);
        let raw = args.path.clone();
        let (path, current) =
            blocking(move || read_text_to_change(&sandbox, &raw, READ_MAX_BYTES, "edit")).await?;
        let Some(before) = current else {
            if !args.old_text.is_empty() {
                return Err(ToolError::Failed(self.not_found(ctx, &args.path).await));
            }
            let path = self.write(ctx, &args.path, &args.new_text).await?;
            return Ok(self.summary(&path, None, &args.new_text));
        };
        let shown = display_path(&self.sandbox, &path);
        if args.old_text == args.new_text {
            return Ok(ToolOutput::error(format!(
                "Error: new_text must be different from old_text ({shown})."
            )));
        }
        if args.old_text.is_empty() {
            if !before.trim().is_empty() {
                return Ok(ToolOutput::error(format!(
                    "Error: cannot create {shown}: it already exists and is not empty. Give old_text to edit it, \
                     or use write_file to replace it."
                )));
            }
            self.write(ctx, &args.path, &args.new_text).await?;
            return Ok(self.summary(&path, Some(&before), &args.new_text));
        }
        // A file with only `\r\n` line endings is edited as `\n` and written back with `\r\n`; a file with mixed
        // endings is edited as it is, so that lines the edit does not touch keep theirs.
        let crlf = before.contains("\r\n") && before.matches('\n').count() == before.matches("\r\n").count();
        let text: Cow<str> = if crlf {
            Cow::Owned(before.replace("\r\n", "\n"))
        } else {
            Cow::Borrowed(&before)
        };
        let old = args.old_text.replace("\r\n", "\n");
        let (how, spans) = matching::find(&text, &old);
        if !spans.is_empty() && how != matching::Strategy::Exact {
            tracing::debug!(path = %shown, strategy = ?how, "edit_file: old_text matched loosely");
        }
        if spans.is_empty() {
            return Ok(ToolOutput::error(near_miss::not_found_message(
                &text,
                &args.old_text,
                &shown,
            )));
        }
        let selected = match select_matches(&text, &spans, &args) {
            Ok(selected) => selected,
            Err(msg) => return Ok(ToolOutput::error(format!("Error: {msg} ({shown})"))),
        };
        let mut new = args.new_text.replace("\r\n", "\n");
        if !is_markdown(&path) {
            // As 0.3.5: trailing whitespace is dropped from the new lines, except in Markdown (where two
            // trailing spaces break a line).
            new = new.split('\n').map(str::trim_end).collect::<Vec<_>>().join("\n");
        }
        let mut updated = replace_spans(&text, &selected, &old, &new);
        if crlf {
            updated = updated.replace('\n', "\r\n");
        }
        self.write(ctx, &args.path, &updated).await?;
        Ok(self.summary(&path, Some(&before), &updated))
    }
}

impl EditFileTool {
    async fn write(&self, ctx: &ToolContext, raw: &str, content: &str) -> Result<PathBuf, ToolError> {
        let sandbox = self.sandbox.for_call(ctx);
        let (raw, content) = (raw.to_owned(), content.as_bytes().to_vec());
        blocking(move || sandbox.write_atomic(&raw, &content).map_err(ToolError::from)).await
    }

    /// `File not found: PATH`, and, as 0.3.5, up to three files beside it with similar names (`Did you mean: …?`).
    async fn not_found(&self, ctx: &ToolContext, raw: &str) -> String {
        let missing = Path::new(raw);
        let parent = missing.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = missing
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sandbox = self.sandbox.for_call(ctx);
        let dir = if parent.as_os_str().is_empty() {
            ".".to_owned()
        } else {
            parent.to_string_lossy().into_owned()
        };
        let names = blocking(move || {
            let Ok(Opened::Dir(d)) = sandbox.open_dir(&dir) else {
                return Ok(Vec::new());
            };
            let entries = d
                .dir
                .entries()
                .map_err(|e| ToolError::io("listing", &d.logical, e))?;
            let files = entries
                .take(NAMES_READ_MAX)
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned());
            Ok(near_miss::similar_names(&name, files))
        })
        .await
        .unwrap_or_default();
        let mut msg = format!("File not found: {raw}");
        if !names.is_empty() {
            let shown: Vec<String> = names
                .iter()
                .map(|n| parent.join(n).display().to_string())
                .collect();
            msg.push_str(&format!("\nDid you mean: {}?", shown.join(", ")));
        }
        msg
    }

    /// 0.3.5's answer, `apply_patch`'s summary: `Patch applied:` and `- update PATH (+added/-deleted)` (`add` for a
    /// file that did not exist).
    fn summary(&self, path: &Path, before: Option<&str>, after: &str) -> ToolOutput {
        ToolOutput::text(format!(
            "Patch applied:\n{}",
            summary_line(&self.sandbox, path, before, after)
        ))
    }
}

/// At most this many entries of a directory are read for names like a missing file's.
const NAMES_READ_MAX: usize = 10_000;

fn is_markdown(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        ["md", "mdx", "markdown"]
            .iter()
            .any(|m| e.eq_ignore_ascii_case(m))
    })
}

/// `text` with each selected match replaced by `new` shaped to it ([`matching::shape_replacement`]). Deleting
/// whole lines (an empty replacement of a match that starts a line and stops before its break) takes the line
/// break too, so no blank line is left where they were.
fn replace_spans(text: &str, selected: &[Span], old: &str, new: &str) -> String {
    let mut out = String::with_capacity(text.len() + new.len() * selected.len());
    let mut done = 0;
    for span in selected {
        let matched = &text[span.start..span.end];
        let replacement = matching::shape_replacement(old, matched, new);
        let mut end = span.end;
        let starts_line = span.start == 0 || text[..span.start].ends_with('\n');
        if replacement.is_empty() && starts_line && !matched.ends_with('\n') {
            let rest = &text[end..];
            end += if rest.starts_with("\r\n") {
                2
            } else {
                usize::from(rest.starts_with('\n'))
            };
        }
        out.push_str(&text[done..span.start]);
        out.push_str(&replacement);
        done = end;
    }
    out.push_str(&text[done..]);
    out
}

/// The matches (among `spans`, in order and not overlapping) that `edit_file` replaces, by `replace_all`,
/// `occurrence`, `line_hint` and `expected_replacements`; `Err` says why none may be.
fn select_matches(text: &str, spans: &[Span], args: &EditFileArgs) -> Result<Vec<Span>, String> {
    let count = spans.len();
    let replace_all = args.replace_all.unwrap_or(false);
    let preview = || {
        let mut shown: Vec<String> = spans.iter().take(3).map(|s| format!("line {}", s.line)).collect();
        if count > 3 {
            shown.push("...".into());
        }
        shown.join(", ")
    };
    for (name, value) in [
        ("occurrence", args.occurrence),
        ("line_hint", args.line_hint),
        ("expected_replacements", args.expected_replacements),
    ] {
        if value == Some(0) {
            return Err(format!("{name} must be >= 1"));
        }
    }
    let selected = match (replace_all, args.occurrence, args.line_hint) {
        (true, Some(_), _) => return Err("occurrence cannot be used with replace_all=true".into()),
        (true, _, Some(_)) => return Err("line_hint cannot be used with replace_all=true".into()),
        (_, Some(_), Some(_)) => return Err("line_hint cannot be used with occurrence".into()),
        (true, None, None) => spans.to_vec(),
        (false, Some(n), None) => {
            let i = usize::try_from(n).unwrap_or(usize::MAX);
            match spans.get(i - 1) {
                Some(&s) => vec![s],
                None => {
                    return Err(format!(
                        "occurrence {n} is out of range; old_text appears {count} time(s)"
                    ));
                }
            }
        }
        (false, None, Some(line)) => {
            let line = usize::try_from(line).unwrap_or(usize::MAX);
            let hits: Vec<Span> = spans
                .iter()
                .copied()
                .filter(|s| (s.line..=s.last_line(text)).contains(&line))
                .collect();
            match hits.len() {
                0 => {
                    return Err(format!(
                        "line_hint {line} does not match the old_text location; old_text appears at {}. Re-read \
                         the region and copy old_text that covers the target line",
                        preview()
                    ));
                }
                1 => hits,
                n => {
                    return Err(format!(
                        "line_hint {line} is ambiguous; old_text appears {n} times on that line"
                    ));
                }
            }
        }
        (false, None, None) if count > 1 => {
            return Err(format!(
                "old_text appears {count} times (at {}). Provide more surrounding context to make it unique, set \
                 occurrence or line_hint to choose one, or set replace_all=true",
                preview()
            ));
        }
        (false, None, None) => spans.to_vec(),
    };
    match args.expected_replacements {
        Some(n) if usize::try_from(n).ok() != Some(selected.len()) => Err(format!(
            "expected {n} replacements but would make {}; nothing was changed",
            selected.len()
        )),
        _ => Ok(selected),
    }
}
