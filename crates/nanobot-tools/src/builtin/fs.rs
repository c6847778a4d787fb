//! `read_file`, `write_file`, `list_dir` (`edit_file` is in [`super::edit`]).

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

/// The text of the file `raw` that an edit is to change, opened where writes are allowed, with its path as resolved;
/// `None` when it does not exist yet (the path then as a write would resolve it). Refuses a directory, anything but
/// a regular file, a file over `max` bytes (`verb` says what was to be done: "edit", "patch"), also when it grows
/// past that while being read (a cut read written back would lose the rest), and text that is not UTF-8.
pub(crate) fn read_text_to_change(
    sandbox: &Sandbox,
    raw: &str,
    max: u64,
    verb: &str,
) -> Result<(PathBuf, Option<String>), ToolError> {
    use std::io::Read as _;
    let mut f = match sandbox.open_for_edit(raw) {
        Ok(Opened::File(f)) if f.meta.is_file() => f,
        Ok(Opened::File(_)) => return Err(ToolError::Failed(format!("{raw} is not a regular file"))),
        Ok(Opened::Dir(_)) => return Err(ToolError::Failed(format!("{raw} is a directory"))),
        Err(e) if e.is_not_found() => return Ok((sandbox.resolve_write(raw)?, None)),
        Err(e) => return Err(not_found_or(raw, "File", e)),
    };
    let too_large = || ToolError::Failed(format!("{raw} is too large to {verb} (over {max} bytes)"));
    if f.meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    (&mut f.file)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::io("reading", &f.logical, e))?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    let text = String::from_utf8(bytes).map_err(|_| ToolError::Failed(format!("{raw} is not UTF-8 text")))?;
    Ok((f.logical, Some(text)))
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
