//! `glob` and `grep`: in-process search (ignore + globset + grep-searcher), no shell-out.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use schemars::JsonSchema;
use serde::Deserialize;

use super::fs::{SKIP_DIRS, display_path};
use crate::error::ToolError;
use crate::sandbox::Sandbox;
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// Most paths `glob` returns.
pub const GLOB_MAX_RESULTS: usize = 200;
/// Default `head_limit` of `grep`.
pub const GREP_DEFAULT_HEAD_LIMIT: usize = 250;

fn walker(root: &Path) -> ignore::Walk {
    ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .filter_entry(|e| {
            !(e.file_type().is_some_and(|t| t.is_dir())
                && e.depth() > 0
                && SKIP_DIRS.contains(&e.file_name().to_string_lossy().as_ref()))
        })
        .build()
}

fn looks_binary(path: &Path) -> bool {
    let mut buf = [0u8; 8192];
    match std::fs::File::open(path).and_then(|mut f| f.read(&mut buf)) {
        Ok(n) => buf[..n].contains(&0),
        Err(_) => true,
    }
}

fn compile_glob(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, ToolError> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::InvalidArguments(format!("invalid glob pattern '{pattern}': {e}")))
}

fn resolve_dir(sandbox: &Sandbox, raw: Option<&str>) -> Result<PathBuf, ToolError> {
    let raw = raw.filter(|s| !s.trim().is_empty()).unwrap_or(".");
    let dir = sandbox.resolve_read(raw)?;
    if !dir.exists() {
        return Err(ToolError::Failed(format!("Path not found: {raw}")));
    }
    Ok(dir)
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GlobArgs {
    /// Glob pattern, e.g. `**/*.py` or `src/*.rs`. A pattern without `/` matches file names at
    /// any depth.
    pub pattern: String,
    /// Directory to search in (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
}

/// `glob`: files matching a pattern, most recently modified first.
#[derive(Debug, Clone)]
pub struct GlobTool {
    sandbox: Arc<Sandbox>,
}

impl GlobTool {
    /// A `glob` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for GlobTool {
    type Args = GlobArgs;

    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files by glob pattern (e.g. `**/*.py`), most recently modified first. Skips .git, \
         node_modules, target and ignored files. Prefer this over exec find."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: GlobArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = resolve_dir(&self.sandbox, args.path.as_deref())?;
        let pattern = args.pattern.trim().trim_start_matches("./").to_owned();
        let matcher = if pattern.contains('/') {
            compile_glob(&pattern, true)?
        } else {
            compile_glob(&format!("**/{pattern}"), true)?
        };
        let sandbox = self.sandbox.clone();
        tokio::task::spawn_blocking(move || {
            let mut hits: Vec<(SystemTime, PathBuf)> = Vec::new();
            for entry in walker(&root).filter_map(Result::ok) {
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let rel = entry.path().strip_prefix(&root).unwrap_or(entry.path());
                if matcher.is_match(rel) {
                    let mtime = entry
                        .metadata()
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    hits.push((mtime, entry.path().to_path_buf()));
                }
            }
            hits.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            if hits.is_empty() {
                return ToolOutput::text(format!("No files matched pattern '{pattern}'"));
            }
            let total = hits.len();
            let mut out: Vec<String> = hits
                .iter()
                .take(GLOB_MAX_RESULTS)
                .map(|(_, p)| display_path(&sandbox, p))
                .collect();
            if total > GLOB_MAX_RESULTS {
                out.push(format!(
                    "\n(showing {GLOB_MAX_RESULTS} of {total} matches; narrow the pattern)"
                ));
            }
            ToolOutput::text(out.join("\n"))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("glob task failed: {e}")))
    }
}

/// What `grep` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Only the paths of matching files (default).
    #[default]
    FilesWithMatches,
    /// Matching lines (`path:line: text`) with optional context.
    Content,
    /// Match counts per file.
    Count,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// Regular expression to search for.
    pub pattern: String,
    /// File or directory to search in (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files matching this glob (e.g. `*.py`, `src/**/*.{ts,tsx}`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Case-insensitive search (default false).
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// files_with_matches (default), content, or count.
    #[serde(default)]
    pub output_mode: Option<OutputMode>,
    /// Lines of context before and after each match (content mode only).
    #[schemars(range(min = 0, max = 50))]
    pub context_lines: Option<u32>,
    /// Lines of context before each match (content mode only).
    #[schemars(range(min = 0, max = 50))]
    pub context_before: Option<u32>,
    /// Lines of context after each match (content mode only).
    #[schemars(range(min = 0, max = 50))]
    pub context_after: Option<u32>,
    /// Return at most this many lines/entries (default 250).
    #[schemars(range(min = 1))]
    pub head_limit: Option<u64>,
}

/// `grep`: regex search over files, in-process, skipping binary files and noise directories.
#[derive(Debug, Clone)]
pub struct GrepTool {
    sandbox: Arc<Sandbox>,
}

impl GrepTool {
    /// A `grep` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

struct Collect<'a> {
    shown: &'a str,
    lines: Vec<String>,
    matches: usize,
    content: bool,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.matches += 1;
        if self.content {
            let text = String::from_utf8_lossy(m.bytes());
            self.lines.push(format!(
                "{}:{}: {}",
                self.shown,
                m.line_number().unwrap_or(0),
                text.trim_end_matches(['\n', '\r'])
            ));
        }
        Ok(true)
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if self.content {
            let text = String::from_utf8_lossy(c.bytes());
            self.lines.push(format!(
                "{}-{}- {}",
                self.shown,
                c.line_number().unwrap_or(0),
                text.trim_end_matches(['\n', '\r'])
            ));
        }
        Ok(true)
    }

    fn context_break(&mut self, _s: &Searcher) -> Result<bool, Self::Error> {
        if self.content {
            self.lines.push("--".to_owned());
        }
        Ok(true)
    }
}

#[async_trait]
impl TypedTool for GrepTool {
    type Args = GrepArgs;

    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents with a regular expression. output_mode: files_with_matches \
         (default), content (matching lines with line numbers and optional context), or count. \
         Skips .git, node_modules, target, ignored and binary files. On broad searches use \
         output_mode=count first. Prefer this over exec grep."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: GrepArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = resolve_dir(&self.sandbox, args.path.as_deref())?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive.unwrap_or(false))
            .build(&args.pattern)
            .map_err(|e| ToolError::InvalidArguments(format!("invalid regex '{}': {e}", args.pattern)))?;
        let filter = match args.glob.as_deref().filter(|g| !g.trim().is_empty()) {
            Some(g) => Some(compile_glob(g, false)?),
            None => None,
        };
        let mode = args.output_mode.unwrap_or_default();
        let ctx_n = args.context_lines.unwrap_or(0) as usize;
        let before = args.context_before.map_or(ctx_n, |n| n as usize);
        let after = args.context_after.map_or(ctx_n, |n| n as usize);
        let limit = args.head_limit.map_or(GREP_DEFAULT_HEAD_LIMIT, |n| n as usize);
        let sandbox = self.sandbox.clone();
        let pattern = args.pattern.clone();
        tokio::task::spawn_blocking(move || {
            let content = mode == OutputMode::Content;
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .before_context(if content { before } else { 0 })
                .after_context(if content { after } else { 0 })
                .build();
            let files: Vec<PathBuf> = if root.is_file() {
                vec![root.clone()]
            } else {
                walker(&root)
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
                    .map(|e| e.into_path())
                    .collect()
            };
            let mut results: Vec<(SystemTime, String, usize, Vec<String>)> = Vec::new();
            for file in files {
                if let Some(f) = &filter {
                    let rel = file.strip_prefix(&root).unwrap_or(&file);
                    let name_hit = file.file_name().is_some_and(|n| f.is_match(n));
                    if !f.is_match(rel) && !name_hit {
                        continue;
                    }
                }
                if looks_binary(&file) {
                    continue;
                }
                let shown = display_path(&sandbox, &file);
                let mut sink = Collect {
                    shown: &shown,
                    lines: Vec::new(),
                    matches: 0,
                    content,
                };
                if searcher.search_path(&matcher, &file, &mut sink).is_err() {
                    continue;
                }
                if sink.matches > 0 {
                    let mtime = std::fs::metadata(&file)
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    let lines = sink.lines;
                    results.push((mtime, shown.clone(), sink.matches, lines));
                }
            }
            if results.is_empty() {
                return ToolOutput::text(format!("No matches found for pattern '{pattern}'"));
            }
            let mut out: Vec<String> = Vec::new();
            match mode {
                OutputMode::FilesWithMatches => {
                    results.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
                    out.extend(results.iter().map(|r| r.1.clone()));
                }
                OutputMode::Count => {
                    results.sort_by(|a, b| a.1.cmp(&b.1));
                    out.extend(results.iter().map(|r| format!("{}: {}", r.1, r.2)));
                }
                OutputMode::Content => {
                    results.sort_by(|a, b| a.1.cmp(&b.1));
                    for (i, r) in results.iter().enumerate() {
                        if i > 0 && (before > 0 || after > 0) {
                            out.push("--".to_owned());
                        }
                        out.extend(r.3.iter().cloned());
                    }
                }
            }
            let total = out.len();
            if total > limit {
                out.truncate(limit);
                out.push(format!(
                    "\n(showing first {limit} of {total} results; raise head_limit or narrow the search)"
                ));
            }
            ToolOutput::text(out.join("\n"))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("grep task failed: {e}")))
    }
}
