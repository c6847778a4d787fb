//! `read_file`, `write_file`, `edit_file`, `list_dir`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::ToolError;
use crate::sandbox::{Opened, OpenedDir, Sandbox, SandboxError, open_child_dir};
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// Most characters `read_file` returns in one call.
pub const READ_MAX_CHARS: usize = 128_000;
/// Default number of lines `read_file` returns.
pub const READ_DEFAULT_LIMIT: usize = 2_000;
/// Largest text file `read_file` opens.
pub const READ_MAX_BYTES: u64 = 50 * 1024 * 1024;
/// Largest image `read_file` attaches.
pub const IMAGE_MAX_BYTES: u64 = 20 * 1024 * 1024;

const BLOCKED_DEVICES: &[&str] = &[
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/full",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
    "/dev/console",
    "/dev/null",
];

/// Shows `path` relative to the workspace when it is inside it.
pub(crate) fn display_path(sandbox: &Sandbox, path: &Path) -> String {
    match path.strip_prefix(sandbox.workspace_real()) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        Ok(_) => ".".to_owned(),
        Err(_) => path.display().to_string(),
    }
}

fn is_blocked_device(raw: &str) -> bool {
    let p = raw.trim();
    BLOCKED_DEVICES.contains(&p)
        || p.starts_with("/dev/fd/")
        || p.starts_with("/proc/self/fd/")
        || p.starts_with("/dev/tty")
}

fn image_mime(path: &Path, head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some("image/png");
    }
    if head.starts_with(&[0xff, 0xd8, 0xff]) {
        return Some("image/jpeg");
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return Some("image/gif");
    }
    if head.len() >= 12 && &head[0..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "bmp" if head.starts_with(b"BM") => Some("image/bmp"),
        _ => None,
    }
}

/// Arguments of `read_file` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file path to read (relative to the workspace or absolute).
    pub path: String,
    /// Line number to start reading from (1-indexed, default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Maximum number of lines to read (default 2000).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// PDF page number or range, e.g. '7' or '1-5' (PDFs cannot be read yet: the call says so).
    #[serde(default)]
    pub pages: Option<String>,
    /// Return a range again even when it has not changed since it was last read (ranges are always returned).
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub force: Option<bool>,
}

/// `read_file`: line-numbered text with paging; images returned as media.
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    sandbox: Arc<Sandbox>,
}

impl ReadFileTool {
    /// A `read_file` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for ReadFileTool {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a file. Text comes back with line numbers as `N| text`; use offset/limit to page \
         through large files. Images (png, jpeg, gif, webp) are attached so you can see them."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.pages.is_some() {
            return Ok(ToolOutput::error(
                "Error: reading PDF pages is not supported here yet; convert the document to text with exec (for \
                 example `pdftotext`) and read the result.",
            ));
        }
        if is_blocked_device(&args.path) {
            return Err(ToolError::Failed(format!(
                "Reading {} is blocked (device file)",
                args.path
            )));
        }
        let sandbox = self.sandbox.for_call(ctx);
        let raw = args.path.clone();
        let read = blocking(move || read_blocking(&sandbox, &raw)).await?;
        let (bytes, len) = match read {
            Read::Image { mime, len, logical } => {
                return Ok(ToolOutput::text(format!(
                    "[Image: {} ({mime}, {len} bytes)]",
                    display_path(&self.sandbox, &logical)
                ))
                .with_media(logical));
            }
            Read::Text { bytes, len } => (bytes, len),
        };
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Err(ToolError::Failed(format!(
                "{} looks like a binary file ({len} bytes); it cannot be shown as text",
                args.path
            )));
        }
        let text = String::from_utf8_lossy(&bytes);
        if text.is_empty() {
            return Ok(ToolOutput::text(format!("(empty file: {})", args.path)));
        }
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let offset = args.offset.unwrap_or(1).max(1) as usize;
        if offset > total {
            return Err(ToolError::Failed(format!(
                "offset {offset} is beyond the end of the file ({total} lines)"
            )));
        }
        let limit = args.limit.map_or(READ_DEFAULT_LIMIT, |l| l as usize);
        let mut out = String::new();
        let mut last = offset - 1;
        for (i, line) in lines.iter().enumerate().skip(offset - 1).take(limit) {
            let entry = format!("{}| {}\n", i + 1, line);
            if out.len() + entry.len() > READ_MAX_CHARS && last >= offset {
                break;
            }
            out.push_str(&entry);
            last = i + 1;
        }
        if last < total {
            out.push_str(&format!(
                "\n(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
                last + 1
            ));
        } else if offset > 1 {
            out.push_str(&format!("\n(End of file — {total} lines total)"));
        }
        Ok(ToolOutput::text(out.trim_end_matches('\n').to_owned()))
    }
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file path to write to.
    pub path: String,
    /// The content to write.
    pub content: String,
}

/// `write_file`: writes a whole file, creating parent directories.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    sandbox: Arc<Sandbox>,
}

impl WriteFileTool {
    /// A `write_file` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

/// Writes through the sandbox's handle-based atomic write (temp file, fsync, rename in the same
/// directory handle); returns the path as resolved.
async fn write_atomic(sandbox: &Arc<Sandbox>, raw: &str, content: Vec<u8>) -> Result<PathBuf, ToolError> {
    let sandbox = sandbox.clone();
    let raw = raw.to_owned();
    blocking(move || sandbox.write_atomic(&raw, &content).map_err(ToolError::from)).await
}

/// Runs blocking file-system work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::Failed(format!("file task failed: {e}")))?
}

/// A sandbox error as the model reads it: a missing path says so plainly.
pub(crate) fn not_found_or(raw: &str, what: &str, e: SandboxError) -> ToolError {
    if e.is_not_found() {
        ToolError::Failed(format!("{what} not found: {raw}"))
    } else {
        ToolError::Sandbox(e)
    }
}

enum Read {
    Image {
        mime: &'static str,
        len: u64,
        logical: PathBuf,
    },
    Text {
        bytes: Vec<u8>,
        len: u64,
    },
}

fn read_blocking(sandbox: &Sandbox, raw: &str) -> Result<Read, ToolError> {
    use std::io::Read as _;
    let opened = sandbox.open_read(raw).map_err(|e| not_found_or(raw, "File", e))?;
    let mut f = match opened {
        Opened::Dir(_) => {
            return Err(ToolError::Failed(format!("{raw} is a directory; use list_dir")));
        }
        Opened::File(f) => f,
    };
    if !f.meta.is_file() {
        return Err(ToolError::Failed(format!(
            "Reading {raw} is blocked (not a regular file)"
        )));
    }
    let len = f.meta.len();
    let mut head = [0u8; 16];
    let n = f
        .file
        .read(&mut head)
        .map_err(|e| ToolError::io("reading", &f.logical, e))?;
    if let Some(mime) = image_mime(&f.logical, &head[..n]) {
        if len > IMAGE_MAX_BYTES {
            return Err(ToolError::Failed(format!(
                "Image {raw} is too large ({len} bytes, max {IMAGE_MAX_BYTES})"
            )));
        }
        return Ok(Read::Image {
            mime,
            len,
            logical: f.logical,
        });
    }
    if len > READ_MAX_BYTES {
        return Err(ToolError::Failed(format!(
            "File {raw} is too large ({len} bytes, max {READ_MAX_BYTES}); use grep or exec with head/tail"
        )));
    }
    let mut bytes = head[..n].to_vec();
    f.file
        .by_ref()
        .take(READ_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::io("reading", &f.logical, e))?;
    Ok(Read::Text { bytes, len })
}

#[async_trait]
impl TypedTool for WriteFileTool {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        crate::Effects::writes(path_arg(args))
    }

    fn description(&self) -> &str {
        "Write content to a file at the given path. Creates parent directories if needed and \
         replaces the whole file."
    }

    async fn call(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let len = args.content.len();
        let path = write_atomic(&self.sandbox.for_call(ctx), &args.path, args.content.into_bytes()).await?;
        Ok(ToolOutput::text(format!(
            "Successfully wrote {len} bytes to {}",
            display_path(&self.sandbox, &path)
        )))
    }
}

/// Arguments of `edit_file` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file path to edit.
    pub path: String,
    /// The exact text to find and replace; copy it from read_file.
    pub old_text: String,
    /// The text to put in its place.
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

/// `edit_file`: replaces exact text; refuses ambiguous matches; shows the closest region as a
/// diff when the text is not found.
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

/// Why `old_text` may differ from the closest `region` of the file, in 0.3.5's words: letter case, whitespace
/// within lines, or quote style (curly for straight) alone. Line endings (`\r\n`) and trailing line breaks are
/// not differences.
fn likely_causes(old_text: &str, region: &str) -> Vec<&'static str> {
    let old = old_text.replace("\r\n", "\n");
    let (old, actual) = (old.trim_end_matches('\n'), region.trim_end_matches('\n'));
    if old == actual {
        return Vec::new();
    }
    let collapse = |s: &str| {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    let straight = |s: &str| {
        s.replace(['\u{2018}', '\u{2019}'], "'")
            .replace(['\u{201c}', '\u{201d}'], "\"")
    };
    let mut causes = Vec::new();
    if old.to_lowercase() == actual.to_lowercase() {
        causes.push("letter case differs");
    }
    if collapse(old) == collapse(actual) {
        causes.push("whitespace differs");
    }
    if straight(old) == straight(actual) {
        causes.push("quote style differs");
    }
    causes
}

/// The pairs of neighbouring characters in `line` between two line breaks, each as one number. The breaks make
/// a line's first and last characters count as much as the others, which matters for short lines.
fn line_bigrams(line: &str) -> impl Iterator<Item = u64> + '_ {
    let chars = std::iter::once('\n').chain(line.chars()).chain(['\n']);
    chars
        .clone()
        .zip(chars.skip(1))
        .map(|(a, b)| (u64::from(a) << 32) | u64::from(b))
}

/// The pairs of neighbouring characters in a sliding window of lines, against those of the text looked for.
struct Overlap {
    /// The looked-for text's pairs, with how often each occurs.
    wanted: HashMap<u64, i64>,
    wanted_total: i64,
    /// How often each wanted pair occurs in the window.
    held: HashMap<u64, i64>,
    /// The pairs both have: `min(held, wanted)` summed over the wanted pairs.
    shared: i64,
    /// All the window's pairs.
    total: i64,
}

impl Overlap {
    /// Adds (`sign` 1) or removes (`sign` -1) a line of the window.
    fn slide(&mut self, line: &str, sign: i64) {
        for pair in line_bigrams(line) {
            self.total += sign;
            let Some(&want) = self.wanted.get(&pair) else {
                continue;
            };
            let count = self.held.entry(pair).or_default();
            let before = (*count).min(want);
            *count += sign;
            self.shared += (*count).min(want) - before;
        }
    }

    /// The Dice coefficient of the two multisets of pairs.
    fn similarity(&self) -> f32 {
        let all = self.wanted_total + self.total;
        if all == 0 {
            0.0
        } else {
            (2 * self.shared) as f32 / all as f32
        }
    }
}

/// The region of `content` most like `needle`: of the windows of as many lines as `needle` has, the one whose
/// pairs of neighbouring characters overlap most with the needle's, as `(first line 1-based, similarity, region)`.
/// The similarity is the Dice coefficient of the two multisets of pairs (twice the shared pairs over all pairs,
/// 0.0 to 1.0): a typo or a changed indent costs a few pairs, not the line. Linear in the size of `content`: each
/// line's pairs enter and leave the sliding window once (a character diff per window took seconds for a 40-line
/// `old_text` in a 2,000-line file).
pub(crate) fn closest_region(content: &str, needle: &str) -> Option<(usize, f32, String)> {
    let lines: Vec<&str> = content.lines().collect();
    if lines.is_empty() {
        return None;
    }
    let window = needle.lines().count().clamp(1, lines.len());
    let mut wanted: HashMap<u64, i64> = HashMap::new();
    for pair in needle.lines().flat_map(line_bigrams) {
        *wanted.entry(pair).or_default() += 1;
    }
    let mut overlap = Overlap {
        wanted_total: wanted.values().sum(),
        wanted,
        held: HashMap::new(),
        shared: 0,
        total: 0,
    };
    let mut best: Option<(usize, f32)> = None;
    for end in 0..lines.len() {
        overlap.slide(lines[end], 1);
        if end >= window {
            overlap.slide(lines[end - window], -1);
        }
        if end + 1 >= window {
            let similarity = overlap.similarity();
            if best.is_none_or(|(_, b)| similarity > b) {
                best = Some((end + 2 - window, similarity));
            }
        }
    }
    let (first, similarity) = best?;
    Some((first, similarity, lines[first - 1..first - 1 + window].join("\n")))
}

#[async_trait]
impl TypedTool for EditFileTool {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        crate::Effects::writes(path_arg(args))
    }

    fn description(&self) -> &str {
        "Replace exact text in one file (read it first). old_text must match exactly; when it occurs more than \
         once, choose one with occurrence or line_hint, or set replace_all=true (the three exclude each other)."
    }

    async fn call(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.old_text.is_empty() {
            return Err(ToolError::InvalidArguments("old_text must not be empty".into()));
        }
        let sandbox = self.sandbox.for_call(ctx);
        let raw = args.path.clone();
        let (content, path) = blocking(move || {
            use std::io::Read as _;
            let mut f = match sandbox.open_for_edit(&raw) {
                Ok(Opened::File(f)) if f.meta.is_file() => f,
                Ok(Opened::File(_)) => {
                    return Err(ToolError::Failed(format!("{raw} is not a regular file")));
                }
                Ok(Opened::Dir(_)) => return Err(ToolError::Failed(format!("{raw} is a directory"))),
                Err(e) => return Err(not_found_or(&raw, "File", e)),
            };
            if f.meta.len() > READ_MAX_BYTES {
                return Err(ToolError::Failed(format!(
                    "File {raw} is too large to edit ({} bytes, max {READ_MAX_BYTES})",
                    f.meta.len()
                )));
            }
            let mut content = String::new();
            f.file
                .read_to_string(&mut content)
                .map_err(|e| ToolError::io("reading", &f.logical, e))?;
            Ok((content, f.logical))
        })
        .await?;
        let count = content.matches(args.old_text.as_str()).count();
        let shown = display_path(&self.sandbox, &path);
        if count == 0 {
            let mut msg = format!("Error: old_text not found in {shown}.");
            let closest = closest_region(&content, &args.old_text);
            let causes = closest
                .as_ref()
                .map(|(_, _, region)| likely_causes(&args.old_text, region));
            let causes = causes.filter(|c| !c.is_empty()).map(|c| c.join(", "));
            match closest {
                Some((line, ratio, region)) if ratio > 0.5 => {
                    let diff = nanobot_util::text_diff::LineDiff::new(args.old_text.trim_end(), &region)
                        .unified(
                            3,
                            "old_text (provided)",
                            &format!("{shown} (actual, line {line})"),
                        );
                    if let Some(causes) = causes {
                        msg.push_str(&format!("\nPossible cause: {causes}."));
                    }
                    msg.push_str(&format!(
                        "\nBest match ({:.0}% similar) at line {line}:\n{diff}",
                        ratio * 100.0
                    ));
                }
                _ => match causes {
                    Some(causes) => msg.push_str(&format!(
                        " Possible cause: {causes}. Copy the exact text from read_file and try again."
                    )),
                    None => msg.push_str(" No similar text found; read the file to see its current content."),
                },
            }
            return Ok(ToolOutput::error(msg));
        }
        let starts: Vec<usize> = content
            .match_indices(args.old_text.as_str())
            .map(|(i, _)| i)
            .collect();
        let selected = match select_matches(&content, &args.old_text, &starts, &args) {
            Ok(selected) => selected,
            Err(msg) => return Ok(ToolOutput::error(format!("Error: {msg} ({shown})"))),
        };
        let mut updated = content;
        for &start in selected.iter().rev() {
            updated.replace_range(start..start + args.old_text.len(), &args.new_text);
        }
        write_atomic(&self.sandbox.for_call(ctx), &args.path, updated.into_bytes()).await?;
        Ok(ToolOutput::text(if selected.len() > 1 {
            format!("Successfully edited {shown} ({} replacements)", selected.len())
        } else {
            format!("Successfully edited {shown}")
        }))
    }
}

/// The byte offsets (among `starts`, the non-overlapping matches of `old` in `content`) that `edit_file` replaces,
/// by `replace_all`, `occurrence`, `line_hint` and `expected_replacements`; `Err` says why none may be.
fn select_matches(
    content: &str,
    old: &str,
    starts: &[usize],
    args: &EditFileArgs,
) -> Result<Vec<usize>, String> {
    let count = starts.len();
    let replace_all = args.replace_all.unwrap_or(false);
    let line_of = |byte: usize| content[..byte].matches('\n').count() + 1;
    let lines = |start: usize| {
        let first = line_of(start);
        let body = old.strip_suffix('\n').unwrap_or(old);
        (first, first + body.matches('\n').count())
    };
    let preview = || {
        let mut shown: Vec<String> = starts
            .iter()
            .take(3)
            .map(|&s| format!("line {}", line_of(s)))
            .collect();
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
        (true, None, None) => starts.to_vec(),
        (false, Some(n), None) => {
            let i = usize::try_from(n).unwrap_or(usize::MAX);
            match starts.get(i - 1) {
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
            let hits: Vec<usize> = starts
                .iter()
                .copied()
                .filter(|&s| {
                    let (first, last) = lines(s);
                    (first..=last).contains(&line)
                })
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
        (false, None, None) => starts.to_vec(),
    };
    match args.expected_replacements {
        Some(n) if usize::try_from(n).ok() != Some(selected.len()) => Err(format!(
            "expected {n} replacements but would make {}; nothing was changed",
            selected.len()
        )),
        _ => Ok(selected),
    }
}

/// Directories never descended into by `list_dir`, `glob` and `grep`.
pub const SKIP_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    "target",
    "__pycache__",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    ".idea",
];

/// Arguments of `list_dir` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ListDirArgs {
    /// The directory path to list (`.` for the workspace).
    pub path: String,
    /// List subdirectories recursively (default false).
    #[serde(default)]
    pub recursive: Option<bool>,
    /// Maximum number of entries to return (default 200).
    #[schemars(range(min = 1))]
    pub max_entries: Option<u64>,
}

/// `list_dir`: directory entries, optionally recursive, skipping noise directories.
#[derive(Debug, Clone)]
pub struct ListDirTool {
    sandbox: Arc<Sandbox>,
}

impl ListDirTool {
    /// A `list_dir` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for ListDirTool {
    type Args = ListDirArgs;

    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "List the contents of a directory. Set recursive=true to walk subdirectories \
         (.git, node_modules, target and similar are skipped)."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: ListDirArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let raw = if args.path.trim().is_empty() {
            ".".to_owned()
        } else {
            args.path
        };
        let max = args.max_entries.unwrap_or(200) as usize;
        let recursive = args.recursive.unwrap_or(false);
        let sandbox = self.sandbox.for_call(ctx);
        blocking(move || {
            let dir = match sandbox.open_dir(&raw) {
                Ok(Opened::Dir(d)) => d,
                Ok(Opened::File(_)) => return Err(ToolError::Failed(format!("{raw} is not a directory"))),
                Err(e) => return Err(not_found_or(&raw, "Directory", e)),
            };
            list(&dir, recursive, max, &raw)
        })
        .await
    }
}

fn list(root: &OpenedDir, recursive: bool, max: usize, raw: &str) -> Result<ToolOutput, ToolError> {
    let mut entries: Vec<String> = Vec::new();
    let mut total = 0usize;
    let first = root
        .dir
        .try_clone()
        .map_err(|e| ToolError::io("listing", &root.logical, e))?;
    let mut stack: Vec<(cap_std::fs::Dir, PathBuf)> = vec![(first, PathBuf::new())];
    while let Some((d, rel_dir)) = stack.pop() {
        let mut children: Vec<(std::ffi::OsString, bool)> = d
            .entries()
            .map_err(|e| ToolError::io("listing", root.logical.join(&rel_dir), e))?
            .filter_map(Result::ok)
            .map(|e| {
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                (e.file_name(), is_dir)
            })
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, is_dir) in children {
            let shown_name = name.to_string_lossy();
            if is_dir && SKIP_DIRS.contains(&shown_name.as_ref()) {
                continue;
            }
            total += 1;
            let rel = rel_dir.join(&name);
            if entries.len() < max {
                entries.push(if is_dir {
                    format!("📁 {}/", rel.display())
                } else {
                    format!("📄 {}", rel.display())
                });
            }
            if recursive && is_dir {
                // Opened without following symlinks; the data directory is not entered.
                if let Ok(sub) = open_child_dir(&d, &name)
                    && root.fence.may_enter(&sub)
                {
                    subdirs.push((sub, rel));
                }
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    if total == 0 {
        return Ok(ToolOutput::text(format!("Directory {raw} is empty")));
    }
    let mut out = entries.join("\n");
    if total > entries.len() {
        out.push_str(&format!(
            "\n\n(truncated: showing {} of {total} entries; raise max_entries or list a subdirectory)",
            entries.len()
        ));
    }
    Ok(ToolOutput::text(out))
}

/// The `path` argument of a call, as the model wrote it (none when missing: the call fails before writing).
pub(crate) fn path_arg(args: &serde_json::Value) -> Option<String> {
    args.get("path")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod closest_region_tests {
    use super::{closest_region, likely_causes};

    #[test]
    fn likely_causes_name_what_alone_differs() {
        assert_eq!(
            likely_causes("Hello World", "hello world"),
            ["letter case differs"]
        );
        assert_eq!(
            likely_causes("a  =  1\n\tb  ", "a = 1\n  b"),
            ["whitespace differs"]
        );
        assert_eq!(
            likely_causes("say \u{201c}hi\u{201d}, it\u{2019}s", "say \"hi\", it's"),
            ["quote style differs"]
        );
        assert_eq!(
            likely_causes("A  B", "a b"),
            Vec::<&str>::new(),
            "two differences at once"
        );
        assert_eq!(likely_causes("abc", "xyz"), Vec::<&str>::new());
        // Line endings and trailing breaks are not differences, so nothing is named.
        assert_eq!(likely_causes("a\r\nb\r\n", "a\nb"), Vec::<&str>::new());
    }

    fn numbered(lines: usize) -> String {
        (1..=lines)
            .map(|i| format!("    let value_{i} = compute(input_{i}, {});\n", i % 13))
            .collect()
    }

    #[test]
    fn finds_the_window_with_a_typo_and_says_how_close() {
        let content = numbered(300);
        let needle = "    let value_120 = compute(input_120, 3);\n    let valeu_121 = compute(input_121, 4);";
        let (line, similarity, region) = closest_region(&content, needle).unwrap();
        assert_eq!(line, 120);
        assert_eq!(
            region,
            "    let value_120 = compute(input_120, 3);\n    let value_121 = compute(input_121, 4);"
        );
        assert!(similarity > 0.9 && similarity < 1.0, "{similarity}");
    }

    #[test]
    fn unrelated_text_is_not_similar() {
        let (_, similarity, _) = closest_region(&numbered(50), "fn main() {}\n// nothing here").unwrap();
        assert!(similarity < 0.5, "{similarity}");
    }

    #[test]
    fn a_needle_longer_than_the_file_compares_the_whole_file() {
        let (line, similarity, region) = closest_region("a b c\nd e f", "a b c\nd e g\nh i j\nk").unwrap();
        assert_eq!((line, region.as_str()), (1, "a b c\nd e f"));
        assert!(similarity > 0.5 && similarity < 1.0, "{similarity}");
        assert_eq!(closest_region("", "x"), None);
    }

    #[test]
    fn characters_not_bytes_and_any_line_ending() {
        let content = "première ligne\r\ndeuxième ligne\r\ntroisième ligne\r\n";
        let (line, _, region) = closest_region(content, "deuxieme ligne").unwrap();
        assert_eq!((line, region.as_str()), (2, "deuxième ligne"));
    }

    /// 20,000 lines and a 200-line `old_text` with one typo near the end: one pass over the file finds it (a
    /// character diff per window, the previous search, would take hours here).
    #[test]
    fn a_large_file_with_a_large_old_text_is_one_pass() {
        let content = numbered(20_000);
        let lines: Vec<&str> = content.lines().collect();
        let mut needle = lines[19_700..19_900].join("\n");
        needle = needle.replacen("value_19800", "valeu_19800", 1);
        let (line, similarity, _) = closest_region(&content, &needle).unwrap();
        assert_eq!(line, 19_701);
        assert!(similarity > 0.99, "{similarity}");
    }
}
