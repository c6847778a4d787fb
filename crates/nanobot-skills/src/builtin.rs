//! The built-in skills, embedded at build time from this crate's `skills/` folder (inside the package, so a
//! packaged crate carries them).

use std::fs;
use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};

use crate::SkillsError;

static BUILTIN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/skills");

/// One embedded file of the built-in skills, relative to the skills root (`cron/SKILL.md`).
#[derive(Debug, Clone, Copy)]
pub struct BuiltinFile {
    /// Path relative to the skills root, `/`-separated.
    pub path: &'static str,
    /// File contents.
    pub contents: &'static [u8],
}

/// Names of the built-in skills (directories holding a `SKILL.md`), sorted.
pub fn builtin_skill_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILTIN
        .dirs()
        .filter(|d| d.get_file(d.path().join("SKILL.md")).is_some())
        .filter_map(|d| d.path().file_name().and_then(|n| n.to_str()))
        .collect();
    names.sort_unstable();
    names
}

/// The text of a built-in skill's SKILL.md, if there is such a skill.
pub fn builtin_skill(name: &str) -> Option<&'static str> {
    BUILTIN
        .get_file(Path::new(name).join("SKILL.md"))
        .and_then(|f| f.contents_utf8())
}

/// Every embedded file (SKILL.md and any scripts or references beside it).
pub fn builtin_files() -> Vec<BuiltinFile> {
    fn walk(dir: &'static Dir<'static>, out: &mut Vec<BuiltinFile>) {
        for f in dir.files() {
            if let Some(path) = f.path().to_str() {
                out.push(BuiltinFile {
                    path,
                    contents: f.contents(),
                });
            }
        }
        for d in dir.dirs() {
            walk(d, out);
        }
    }
    let mut out = Vec::new();
    walk(&BUILTIN, &mut out);
    out.sort_by_key(|f| f.path);
    out
}

/// Writes the built-in skills under `dir` (`dir/<name>/SKILL.md`, …) so that `read_file` can open
/// them at the location the summary shows. Files already holding the same bytes are left alone;
/// changed ones are replaced atomically (temp file + rename). Returns `dir`.
pub fn materialize_builtins(dir: &Path) -> Result<PathBuf, SkillsError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SkillsError::Io { path, source }
    };
    for file in builtin_files() {
        let target = dir.join(file.path);
        if fs::read(&target).is_ok_and(|existing| existing == file.contents) {
            continue;
        }
        let parent = target.parent().unwrap_or(dir);
        fs::create_dir_all(parent).map_err(io(parent))?;
        nanobot_util::write_atomic(&target, file.contents).map_err(|e| SkillsError::Io {
            path: e.path,
            source: e.source,
        })?;
    }
    Ok(dir.to_path_buf())
}
