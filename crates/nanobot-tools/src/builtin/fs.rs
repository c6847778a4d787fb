//! `read_file`, `write_file`, `edit_file`, `list_dir`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::ToolError;
use crate::sandbox::Sandbox;
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

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFileArgs {
    /// The file path to read (relative to the workspace or absolute).
    pub path: String,
    /// Line number to start reading from (1-indexed, default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Maximum number of lines to read (default 2000).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
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

    async fn call(&self, args: ReadFileArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if is_blocked_device(&args.path) {
            return Err(ToolError::Failed(format!(
                "Reading {} is blocked (device file)",
                args.path
            )));
        }
        let path = self.sandbox.resolve_read(&args.path)?;
        if is_blocked_device(&path.to_string_lossy()) {
            return Err(ToolError::Failed(format!(
                "Reading {} is blocked (device file)",
                args.path
            )));
        }
        let meta = tokio::fs::metadata(&path).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ToolError::Failed(format!("File not found: {}", args.path))
            } else {
                ToolError::io("reading", &path, e)
            }
        })?;
        if meta.is_dir() {
            return Err(ToolError::Failed(format!(
                "{} is a directory; use list_dir",
                args.path
            )));
        }
        if !meta.is_file() {
            return Err(ToolError::Failed(format!(
                "Reading {} is blocked (not a regular file)",
                args.path
            )));
        }
        let len = meta.len();
        let mut head = vec![0u8; 16];
        {
            use tokio::io::AsyncReadExt;
            let mut f = tokio::fs::File::open(&path)
                .await
                .map_err(|e| ToolError::io("reading", &path, e))?;
            let n = f
                .read(&mut head)
                .await
                .map_err(|e| ToolError::io("reading", &path, e))?;
            head.truncate(n);
        }
        if let Some(mime) = image_mime(&path, &head) {
            if len > IMAGE_MAX_BYTES {
                return Err(ToolError::Failed(format!(
                    "Image {} is too large ({len} bytes, max {IMAGE_MAX_BYTES})",
                    args.path
                )));
            }
            return Ok(ToolOutput::text(format!(
                "[Image: {} ({mime}, {len} bytes)]",
                display_path(&self.sandbox, &path)
            ))
            .with_media(path));
        }
        if len > READ_MAX_BYTES {
            return Err(ToolError::Failed(format!(
                "File {} is too large ({len} bytes, max {READ_MAX_BYTES}); use grep or exec with head/tail",
                args.path
            )));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| ToolError::io("reading", &path, e))?;
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

async fn write_atomic(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| ToolError::io("creating directory", parent, e))?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    if let Err(e) = tokio::fs::write(&tmp, content).await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(ToolError::io("writing", path, e));
    }
    if let Ok(meta) = tokio::fs::metadata(path).await {
        let _ = tokio::fs::set_permissions(&tmp, meta.permissions()).await;
    }
    if let Err(e) = tokio::fs::rename(&tmp, path).await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(ToolError::io("writing", path, e));
    }
    Ok(())
}

#[async_trait]
impl TypedTool for WriteFileTool {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Write content to a file at the given path. Creates parent directories if needed and \
         replaces the whole file."
    }

    async fn call(&self, args: WriteFileArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = self.sandbox.resolve_write(&args.path)?;
        if path.is_dir() {
            return Err(ToolError::Failed(format!("{} is a directory", args.path)));
        }
        write_atomic(&path, args.content.as_bytes()).await?;
        Ok(ToolOutput::text(format!(
            "Successfully wrote {} bytes to {}",
            args.content.len(),
            display_path(&self.sandbox, &path)
        )))
    }
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditFileArgs {
    /// The file path to edit.
    pub path: String,
    /// The exact text to find and replace.
    pub old_text: String,
    /// The text to replace it with.
    pub new_text: String,
    /// Replace every occurrence (default false: old_text must be unique).
    #[serde(default)]
    pub replace_all: Option<bool>,
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

/// The region of `content` most similar to `needle` (same number of lines), as
/// `(first line 1-based, ratio, region)`.
pub(crate) fn closest_region(content: &str, needle: &str) -> Option<(usize, f32, String)> {
    let lines: Vec<&str> = content.lines().collect();
    let want = needle.lines().count().max(1);
    if lines.is_empty() {
        return None;
    }
    let window = want.min(lines.len());
    let mut best: Option<(usize, f32, String)> = None;
    for start in 0..=(lines.len() - window) {
        let region = lines[start..start + window].join("\n");
        let ratio = similar::TextDiff::from_chars(needle.trim_end(), region.as_str()).ratio();
        if best.as_ref().is_none_or(|b| ratio > b.1) {
            best = Some((start + 1, ratio, region));
        }
    }
    best
}

#[async_trait]
impl TypedTool for EditFileTool {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Edit a file by replacing old_text with new_text. old_text must match exactly and be \
         unique unless replace_all is true. Read the file first."
    }

    async fn call(&self, args: EditFileArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.old_text.is_empty() {
            return Err(ToolError::InvalidArguments("old_text must not be empty".into()));
        }
        let path = self.sandbox.resolve_write(&args.path)?;
        let content = match tokio::fs::read_to_string(&path).await {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ToolError::Failed(format!("File not found: {}", args.path)));
            }
            Err(e) => return Err(ToolError::io("reading", &path, e)),
        };
        let count = content.matches(args.old_text.as_str()).count();
        let shown = display_path(&self.sandbox, &path);
        if count == 0 {
            let mut msg = format!("Error: old_text not found in {shown}.");
            if let Some((line, ratio, region)) = closest_region(&content, &args.old_text)
                && ratio > 0.5
            {
                let diff = similar::TextDiff::from_lines(args.old_text.trim_end(), region.as_str())
                    .unified_diff()
                    .context_radius(3)
                    .header("old_text (provided)", &format!("{shown} (actual, line {line})"))
                    .to_string();
                msg.push_str(&format!(
                    "\nBest match ({:.0}% similar) at line {line}:\n{diff}",
                    ratio * 100.0
                ));
            } else {
                msg.push_str(" No similar text found; read the file to see its current content.");
            }
            return Ok(ToolOutput::error(msg));
        }
        let replace_all = args.replace_all.unwrap_or(false);
        if count > 1 && !replace_all {
            return Ok(ToolOutput::error(format!(
                "Error: old_text appears {count} times in {shown}. Provide more surrounding \
                 context to make it unique, or set replace_all=true."
            )));
        }
        let updated = if replace_all {
            content.replace(&args.old_text, &args.new_text)
        } else {
            content.replacen(&args.old_text, &args.new_text, 1)
        };
        write_atomic(&path, updated.as_bytes()).await?;
        Ok(ToolOutput::text(if count > 1 {
            format!("Successfully edited {shown} ({count} replacements)")
        } else {
            format!("Successfully edited {shown}")
        }))
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

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListDirArgs {
    /// The directory path to list (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
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

    async fn call(&self, args: ListDirArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let raw = args.path.unwrap_or_else(|| ".".to_owned());
        let dir = self.sandbox.resolve_read(&raw)?;
        if !dir.is_dir() {
            return Err(ToolError::Failed(if dir.exists() {
                format!("{raw} is not a directory")
            } else {
                format!("Directory not found: {raw}")
            }));
        }
        let max = args.max_entries.unwrap_or(200) as usize;
        let recursive = args.recursive.unwrap_or(false);
        let sandbox = self.sandbox.clone();
        tokio::task::spawn_blocking(move || list(&sandbox, &dir, recursive, max, &raw))
            .await
            .map_err(|e| ToolError::Failed(format!("list_dir task failed: {e}")))?
    }
}

fn list(
    sandbox: &Sandbox,
    dir: &Path,
    recursive: bool,
    max: usize,
    raw: &str,
) -> Result<ToolOutput, ToolError> {
    let mut entries: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut children: Vec<(String, bool, PathBuf)> = std::fs::read_dir(&d)
            .map_err(|e| ToolError::io("listing", &d, e))?
            .filter_map(Result::ok)
            .map(|e| {
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                (e.file_name().to_string_lossy().into_owned(), is_dir, e.path())
            })
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, is_dir, path) in children {
            if is_dir && SKIP_DIRS.contains(&name.as_str()) {
                continue;
            }
            total += 1;
            if entries.len() < max {
                let rel = path.strip_prefix(dir).unwrap_or(&path).display().to_string();
                entries.push(if is_dir {
                    format!("📁 {rel}/")
                } else {
                    format!("📄 {rel}")
                });
            }
            if recursive && is_dir {
                subdirs.push(path);
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    let _ = sandbox;
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
