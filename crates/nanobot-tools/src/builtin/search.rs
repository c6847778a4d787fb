//! `glob`, `grep` and `find_files`: in-process search (ignore + globset + grep-searcher), no shell-out.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use schemars::JsonSchema;
use serde::Deserialize;

use cap_std::fs::Dir;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::fs::{SKIP_DIRS, blocking, display_path, not_found_or};
use crate::error::ToolError;
use crate::sandbox::{Fence, Opened, OpenedDir, Sandbox, open_child_dir, open_child_file};
use crate::schema::TypedTool;
use crate::tool::{ToolContext, ToolOutput};

/// Most paths `glob` returns.
pub const GLOB_MAX_RESULTS: usize = 200;
/// Default `head_limit` of `grep`.
pub const GREP_DEFAULT_HEAD_LIMIT: usize = 250;

/// Most bytes of one `.gitignore`/`.ignore` file read.
const IGNORE_FILE_MAX: u64 = 1024 * 1024;

/// A file found by [`walk`]: its directory handle, name and path relative to the walk's root.
struct Found<'a> {
    dir: &'a Dir,
    name: &'a OsStr,
    rel: &'a Path,
    /// A directory (only when the walk was asked for them); else a regular file.
    is_dir: bool,
}

/// Most entries one walk looks at before it stops (a bound on a search of a huge tree).
const WALK_MAX_ENTRIES: usize = 200_000;

/// Loads `.gitignore` and `.ignore` of `dir` (opened by handle, without following symlinks).
fn ignore_rules(dir: &Dir, logical_dir: &Path) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(logical_dir);
    let mut any = false;
    for file in [".gitignore", ".ignore"] {
        let Ok(f) = open_child_file(dir, OsStr::new(file)) else {
            continue;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let mut text = String::new();
        if f.take(IGNORE_FILE_MAX).read_to_string(&mut text).is_err() {
            continue;
        }
        for line in text.lines() {
            if builder.add_line(None, line).is_ok() {
                any = true;
            }
        }
    }
    if any { builder.build().ok() } else { None }
}

fn ignored(rules: &[Gitignore], path: &Path, is_dir: bool) -> bool {
    for r in rules.iter().rev() {
        match r.matched(path, is_dir) {
            ignore::Match::Ignore(_) => return true,
            ignore::Match::Whitelist(_) => return false,
            ignore::Match::None => {}
        }
    }
    false
}

/// What `glob`, `grep` and `find_files` add to their answer when the walk stopped at [`WALK_MAX_ENTRIES`]
/// (empty when it was complete), so the model never takes a partial answer for the whole: files may be missing.
fn walk_stopped(complete: bool) -> String {
    if complete {
        return String::new();
    }
    tracing::info!(limit = WALK_MAX_ENTRIES, "a search stopped at its entry limit");
    format!(
        "\n\n(the search stopped after {WALK_MAX_ENTRIES} entries, so files may be missing; narrow the path, pattern, glob or type)"
    )
}

/// Walks the tree below `root` by handle: every subdirectory is opened without following symlinks
/// (so none can be swapped for a link to outside mid-walk), the noise directories and the data
/// directory are skipped, and `.gitignore`/`.ignore` rules are honoured. `visit` gets every regular
/// file (symlinks are not followed, as with `ignore`'s default walker), and every directory too with `dirs`.
/// Returns false when it stopped at [`WALK_MAX_ENTRIES`] entries (the tool then says so: [`walk_stopped`]).
fn walk(root: &OpenedDir, dirs: bool, mut visit: impl FnMut(Found<'_>)) -> bool {
    let Ok(first) = root.dir.try_clone() else {
        return true;
    };
    let mut seen = 0usize;
    let mut stack: Vec<(Dir, PathBuf, Vec<Gitignore>)> = vec![(first, PathBuf::new(), Vec::new())];
    while let Some((dir, rel_dir, mut rules)) = stack.pop() {
        let logical_dir = root.logical.join(&rel_dir);
        if let Some(r) = ignore_rules(&dir, &logical_dir) {
            rules.push(r);
        }
        let Ok(entries) = dir.entries() else {
            continue;
        };
        let mut children: Vec<(OsString, bool, bool)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let t = e.file_type().ok()?;
                Some((e.file_name(), t.is_dir(), t.is_file()))
            })
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, is_dir, is_file) in children {
            seen += 1;
            if seen > WALK_MAX_ENTRIES {
                return false;
            }
            let rel = rel_dir.join(&name);
            if ignored(&rules, &root.logical.join(&rel), is_dir) {
                continue;
            }
            if is_dir {
                if SKIP_DIRS.contains(&name.to_string_lossy().as_ref()) {
                    continue;
                }
                if let Ok(sub) = open_child_dir(&dir, &name)
                    && root.fence.may_enter(&sub)
                {
                    if dirs {
                        visit(Found {
                            dir: &dir,
                            name: &name,
                            rel: &rel,
                            is_dir: true,
                        });
                    }
                    subdirs.push((sub, rel, rules.clone()));
                }
            } else if is_file {
                visit(Found {
                    dir: &dir,
                    name: &name,
                    rel: &rel,
                    is_dir: false,
                });
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    true
}

fn looks_binary(file: &mut File) -> bool {
    let mut buf = [0u8; 8192];
    let binary = match file.read(&mut buf) {
        Ok(n) => buf[..n].contains(&0),
        Err(_) => true,
    };
    binary || file.seek(SeekFrom::Start(0)).is_err()
}

/// The modification time of `name` in `dir` (not following a symlink), for sorting.
fn mtime(dir: &Dir, name: &OsStr) -> (i64, i64) {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        Ok(st) => (st.st_mtime as i64, st.st_mtime_nsec as i64),
        Err(_) => (0, 0),
    }
}

fn compile_glob(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, ToolError> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::InvalidArguments(format!("invalid glob pattern '{pattern}': {e}")))
}

/// Opens the search root (default: the workspace) by handle.
fn open_root(sandbox: &Sandbox, raw: Option<&str>) -> Result<Opened, ToolError> {
    let raw = raw.filter(|s| !s.trim().is_empty()).unwrap_or(".");
    sandbox.open_dir(raw).map_err(|e| not_found_or(raw, "Path", e))
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

    async fn call(&self, args: GlobArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let pattern = args.pattern.trim().trim_start_matches("./").to_owned();
        let matcher = if pattern.contains('/') {
            compile_glob(&pattern, true)?
        } else {
            compile_glob(&format!("**/{pattern}"), true)?
        };
        let sandbox = self.sandbox.for_call(ctx);
        let raw = args.path.clone();
        blocking(move || {
            let root = match open_root(&sandbox, raw.as_deref())? {
                Opened::Dir(d) => d,
                Opened::File(f) => {
                    return Err(ToolError::Failed(format!(
                        "{} is not a directory",
                        display_path(&sandbox, &f.logical)
                    )));
                }
            };
            let mut hits: Vec<((i64, i64), PathBuf)> = Vec::new();
            let complete = walk(&root, false, |f| {
                if matcher.is_match(f.rel) {
                    hits.push((mtime(f.dir, f.name), root.logical.join(f.rel)));
                }
            });
            let stopped = walk_stopped(complete);
            hits.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            if hits.is_empty() {
                return Ok(ToolOutput::text(format!(
                    "No files matched pattern '{pattern}'{stopped}"
                )));
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
            Ok(ToolOutput::text(out.join("\n") + &stopped))
        })
        .await
    }
}

/// What `grep` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Matching lines (`path:line: text`) with context (default).
    #[default]
    Content,
    /// Only the paths of matching files.
    FilesWithMatches,
    /// Match counts per file.
    Count,
}

/// Context lines around a match when none are asked for (0.3.5's default).
const GREP_DEFAULT_CONTEXT: u32 = 5;

/// Arguments of `grep` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// Regular expression to search for (literal text with fixed_strings=true).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// File or directory to search in (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files matching this glob (e.g. `*.py`, `src/**/*.{ts,tsx}`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Only search files of this type, e.g. `py`, `ts`, `md` or `json` (ripgrep's type names).
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// PDF page number or range (PDFs cannot be searched yet: the call says so).
    #[serde(default)]
    pub pages: Option<String>,
    /// Case-insensitive search (default false).
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// Treat pattern as literal text (default false).
    #[serde(default)]
    pub fixed_strings: Option<bool>,
    /// content (default: matching lines with context), files_with_matches, or count.
    #[serde(default)]
    pub output_mode: Option<OutputMode>,
    /// Lines of context before and after each match (an older name; context_before/context_after win).
    #[schemars(skip)]
    #[serde(default)]
    pub context_lines: Option<u32>,
    /// Lines of context before each match (default 5; content mode only).
    #[schemars(range(min = 0, max = 20))]
    pub context_before: Option<u32>,
    /// Lines of context after each match (default 5; content mode only).
    #[schemars(range(min = 0, max = 20))]
    pub context_after: Option<u32>,
    /// Return at most this many lines/entries (default 250; 0 for all).
    #[schemars(range(min = 0, max = 1000))]
    pub head_limit: Option<u64>,
    /// Lines/entries to skip before head_limit applies (default 0).
    #[schemars(range(min = 0, max = 100_000))]
    pub offset: Option<u64>,
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
        "Search file contents with a regular expression (or literal text with fixed_strings). output_mode: \
         content (default: matching lines with line numbers and 5 lines of context), files_with_matches, or \
         count; page with head_limit and offset. Skips .git, node_modules, target, ignored and binary files. On \
         broad searches use output_mode=count first. Prefer this over exec grep."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: GrepArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.pages.is_some() {
            return Ok(ToolOutput::error(
                "Error: searching PDF pages is not supported here yet; convert the document to text with exec \
                 (for example `pdftotext`) and search the result.",
            ));
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive.unwrap_or(false))
            .fixed_strings(args.fixed_strings.unwrap_or(false))
            .build(&args.pattern)
            .map_err(|e| ToolError::InvalidArguments(format!("invalid regex '{}': {e}", args.pattern)))?;
        let filter = match args.glob.as_deref().filter(|g| !g.trim().is_empty()) {
            Some(g) => Some(compile_glob(g, false)?),
            None => None,
        };
        let types = TypeFilter::from_arg(args.file_type.as_deref())?;
        let mode = args.output_mode.unwrap_or_default();
        let ctx_n = args.context_lines.unwrap_or(GREP_DEFAULT_CONTEXT) as usize;
        let before = args.context_before.map_or(ctx_n, |n| n as usize);
        let after = args.context_after.map_or(ctx_n, |n| n as usize);
        let (limit, skip) = paging(args.head_limit, args.offset, GREP_DEFAULT_HEAD_LIMIT);
        let sandbox = self.sandbox.for_call(ctx);
        let pattern = args.pattern.clone();
        let raw = args.path.clone();
        blocking(move || {
            let content = mode == OutputMode::Content;
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .before_context(if content { before } else { 0 })
                .after_context(if content { after } else { 0 })
                .build();
            let mut results: Vec<(SystemTime, String, usize, Vec<String>)> = Vec::new();
            let mut search = |mut file: File, logical: PathBuf, rel: &Path, fence: &Fence| {
                if let Some(f) = &filter {
                    let name_hit = logical.file_name().is_some_and(|n| f.is_match(n));
                    if !f.is_match(rel) && !name_hit {
                        return;
                    }
                }
                if let Some(t) = &types
                    && !t.matches(&logical)
                {
                    return;
                }
                let Ok(meta) = file.metadata() else { return };
                if !meta.is_file() || !fence.may_read_file(&meta) || looks_binary(&mut file) {
                    return;
                }
                let shown = display_path(&sandbox, &logical);
                let mut sink = Collect {
                    shown: &shown,
                    lines: Vec::new(),
                    matches: 0,
                    content,
                };
                if searcher.search_file(&matcher, &file, &mut sink).is_err() {
                    return;
                }
                if sink.matches > 0 {
                    let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    let lines = sink.lines;
                    results.push((mtime, shown.clone(), sink.matches, lines));
                }
            };
            let complete = match open_root(&sandbox, raw.as_deref())? {
                Opened::File(f) => {
                    let rel = f.logical.file_name().map(PathBuf::from).unwrap_or_default();
                    search(f.file, f.logical.clone(), &rel, &f.fence);
                    true
                }
                Opened::Dir(root) => walk(&root, false, |found| {
                    if let Ok(file) = open_child_file(found.dir, found.name) {
                        search(file, root.logical.join(found.rel), found.rel, &root.fence);
                    }
                }),
            };
            let stopped = walk_stopped(complete);
            if results.is_empty() {
                return Ok(ToolOutput::text(format!(
                    "No matches found for pattern '{pattern}'{stopped}"
                )));
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
            if skip > 0 {
                out.drain(..skip.min(total));
                if out.is_empty() {
                    return Ok(ToolOutput::text(format!(
                        "No results after offset {skip} ({total} in all)"
                    )));
                }
            }
            if out.len() > limit {
                out.truncate(limit);
                let next = skip.saturating_add(limit);
                out.push(format!(
                    "\n(showing {} to {next} of {total} results; use offset={next} for more, or narrow the search)",
                    skip + 1
                ));
            }
            Ok(ToolOutput::text(out.join("\n") + &stopped))
        })
        .await
    }
}

/// `(head_limit, offset)` as 0.3.5 reads them: no limit given is `default`, 0 is no limit; no offset is 0.
fn paging(head_limit: Option<u64>, offset: Option<u64>, default: usize) -> (usize, usize) {
    let limit = match head_limit {
        None => default,
        Some(0) => usize::MAX,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    (
        limit,
        offset.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)),
    )
}

/// The file-type filter of `grep`'s and `find_files`' `type`: ripgrep's type names (`py`, `ts`, `md`, `json`,
/// `rust`, …); another name matches files ending in `.<name>`, as 0.3.5 does.
enum TypeFilter {
    Known(ignore::types::Types),
    Extension(String),
}

impl TypeFilter {
    /// The filter a tool's optional `type` argument asks for (`None`: none, or a blank one).
    fn from_arg(arg: Option<&str>) -> Result<Option<Self>, ToolError> {
        arg.map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Self::new)
            .transpose()
    }

    fn new(name: &str) -> Result<Self, ToolError> {
        let name = name.trim().to_lowercase();
        let mut builder = ignore::types::TypesBuilder::new();
        builder.add_defaults();
        if !builder.definitions().iter().any(|d| d.name() == name) {
            return Ok(Self::Extension(format!(".{name}")));
        }
        builder.select(&name);
        builder
            .build()
            .map(Self::Known)
            .map_err(|e| ToolError::InvalidArguments(format!("file type '{name}': {e}")))
    }

    fn matches(&self, path: &Path) -> bool {
        match self {
            Self::Known(t) => t.matched(path, false).is_whitelist(),
            Self::Extension(ext) => path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().to_lowercase().ends_with(ext.as_str())),
        }
    }
}

/// Default `head_limit` of `find_files`.
pub const FIND_FILES_DEFAULT_LIMIT: usize = 200;

/// How `find_files` orders what it finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FindSort {
    /// By path (default).
    #[default]
    Path,
    /// Most recently modified first.
    Modified,
}

/// Arguments of `find_files` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FindFilesArgs {
    /// Where to search (default `.`, the workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Words that must all occur in the path, case-insensitively.
    #[serde(default)]
    pub query: Option<String>,
    /// Path filter, e.g. `*.py` or `tests/**/test_*.py`.
    #[serde(default)]
    pub glob: Option<String>,
    /// File type, e.g. `py`, `ts`, `md` or `json`.
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// Include directories (default false).
    #[serde(default)]
    pub include_dirs: Option<bool>,
    /// path (default) or modified (newest first).
    #[serde(default)]
    pub sort: Option<FindSort>,
    /// Most paths returned (default 200; 0 for all).
    #[schemars(range(min = 0, max = 1000))]
    pub head_limit: Option<u64>,
    /// Paths to skip before head_limit applies.
    #[schemars(range(min = 0, max = 100_000))]
    pub offset: Option<u64>,
}

/// `find_files`: workspace paths by name terms, glob or file type, skipping dependency and build directories.
#[derive(Debug, Clone)]
pub struct FindFilesTool {
    sandbox: Arc<Sandbox>,
}

impl FindFilesTool {
    /// A `find_files` tool confined by `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for FindFilesTool {
    type Args = FindFilesArgs;

    fn name(&self) -> &str {
        "find_files"
    }

    fn description(&self) -> &str {
        "Find workspace paths by name terms (query), glob or file type. Returns paths relative to the workspace, \
         skipping dependency and build directories and ignored files; page with head_limit and offset."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, args: FindFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let glob = match args.glob.as_deref().map(str::trim).filter(|g| !g.is_empty()) {
            Some(g) => Some(compile_glob(g.trim_start_matches("./"), false)?),
            None => None,
        };
        let types = TypeFilter::from_arg(args.file_type.as_deref())?;
        let terms: Vec<String> = args
            .query
            .as_deref()
            .unwrap_or("")
            .to_lowercase()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let include_dirs = args.include_dirs.unwrap_or(false);
        let sort = args.sort.unwrap_or_default();
        let (limit, skip) = paging(args.head_limit, args.offset, FIND_FILES_DEFAULT_LIMIT);
        let sandbox = self.sandbox.for_call(ctx);
        let raw = args.path.clone();
        blocking(move || {
            let root = match open_root(&sandbox, raw.as_deref())? {
                Opened::Dir(d) => d,
                Opened::File(f) => {
                    let shown = display_path(&sandbox, &f.logical);
                    let ok = types.as_ref().is_none_or(|t| t.matches(&f.logical))
                        && terms.iter().all(|t| shown.to_lowercase().contains(t.as_str()));
                    return Ok(ToolOutput::text(if ok {
                        shown
                    } else {
                        "No files found".to_owned()
                    }));
                }
            };
            let mut found: Vec<((i64, i64), String)> = Vec::new();
            let complete = walk(&root, include_dirs, |f| {
                if let Some(g) = &glob
                    && !g.is_match(f.rel)
                    && !g.is_match(f.name)
                {
                    return;
                }
                let logical = root.logical.join(f.rel);
                if let Some(t) = &types
                    && (f.is_dir || !t.matches(&logical))
                {
                    return;
                }
                let mut shown = display_path(&sandbox, &logical);
                if !terms.iter().all(|t| shown.to_lowercase().contains(t.as_str())) {
                    return;
                }
                if f.is_dir {
                    shown.push('/');
                }
                let when = if sort == FindSort::Modified {
                    mtime(f.dir, f.name)
                } else {
                    (0, 0)
                };
                found.push((when, shown));
            });
            match sort {
                FindSort::Path => found.sort_by(|a, b| a.1.cmp(&b.1)),
                FindSort::Modified => found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1))),
            }
            let total = found.len();
            let page: Vec<String> = found.into_iter().skip(skip).take(limit).map(|(_, p)| p).collect();
            let stopped = walk_stopped(complete);
            if page.is_empty() {
                return Ok(ToolOutput::text(if total > 0 {
                    format!("No files after offset {skip} ({total} in all){stopped}")
                } else {
                    format!("No files found{stopped}")
                }));
            }
            let shown = page.len();
            let mut out = page.join("\n");
            if skip + shown < total {
                let next = skip + shown;
                out.push_str(&format!(
                    "\n\n(showing {} to {next} of {total}; use offset={next} for more, or narrow the search)",
                    skip + 1
                ));
            }
            out.push_str(&stopped);
            Ok(ToolOutput::text(out))
        })
        .await
    }
}
