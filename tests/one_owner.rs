//! One owner per job, checked on the source: the small jobs `nanobot-util` owns are not done again by hand
//! elsewhere (docs/architecture.md, "What each floor holds").
//!
//! - A poisoned lock is handled in one place, `nanobot_util::{lock, read_lock, write_lock}`: no other file
//!   unwraps a poisoned guard or defines a lock helper of its own.
//! - A file is replaced whole in one place each for paths and for directory handles, `nanobot_util::write_atomic`
//!   and `nanobot_util::replace_in`: no other file writes a temporary file and renames it over another.
//!
//! The checks read every `.rs` file under `crates/`, `bins/` and `tests/` with whitespace removed (so a call
//! chain split over lines by rustfmt is seen as one).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

use std::path::{Path, PathBuf};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "target" | "node_modules" | ".git") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The largest source file read (the largest today is under 200 KB).
const MAX_SOURCE_BYTES: u64 = 4 * 1024 * 1024;

/// Every Rust source of ours, relative to the root, with its text stripped of whitespace.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    for top in ["crates", "bins", "tests"] {
        rust_files(&root.join(top), &mut files);
    }
    assert!(
        files.len() > 100,
        "found only {} Rust files under {}",
        files.len(),
        root.display()
    );
    files
        .into_iter()
        .map(|p| {
            let text = nanobot_util::read_to_string_bounded(&p, MAX_SOURCE_BYTES)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            (rel, text.split_whitespace().collect())
        })
        .collect()
}

/// The files (other than `owners`) whose stripped text holds one of `patterns`, with the pattern found.
fn offenders(patterns: &[&str], owners: &[&str]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|(rel, _)| !owners.contains(&rel.as_str()) && !rel.ends_with("tests/one_owner.rs"))
        .filter_map(|(rel, text)| {
            patterns
                .iter()
                .find(|p| text.contains(**p))
                .map(|p| format!("{rel}: `{p}`"))
        })
        .collect()
}

#[test]
fn poisoned_locks_are_handled_by_nanobot_util_only() {
    let found = offenders(
        &[
            "PoisonError",
            ".lock().unwrap_or_else(",
            ".read().unwrap_or_else(",
            ".write().unwrap_or_else(",
            "Err(poisoned)",
            "fnlock<T>(",
            "fnlock<T:?Sized>(",
        ],
        &["crates/nanobot-util/src/sync.rs"],
    );
    assert!(
        found.is_empty(),
        "use nanobot_util::{{lock, read_lock, write_lock}} instead:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn files_are_replaced_whole_by_nanobot_util_only() {
    let found = offenders(
        &[
            "rename(&tmp",
            "rename(tmp",
            "rename(&tmp_path",
            ".with_extension(\"tmp\")",
            ".with_extension(\"json.tmp\")",
        ],
        &[
            "crates/nanobot-util/src/fs.rs",
            "crates/nanobot-util/src/confined.rs",
        ],
    );
    assert!(
        found.is_empty(),
        "use nanobot_util::write_atomic (a path) or nanobot_util::replace_in (a directory handle) instead:\n  {}",
        found.join("\n  ")
    );
}

/// The checks see what they look for: a source with a hand-written poison handler or a rename of a temporary
/// file is found.
#[test]
fn the_patterns_find_what_they_look_for() {
    let strip = |s: &str| -> String { s.split_whitespace().collect() };
    let handler = strip("self.state\n    .lock()\n    .unwrap_or_else(|p| p.into_inner())");
    assert!(handler.contains(".lock().unwrap_or_else("));
    let helper = strip("fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {");
    assert!(helper.contains("fnlock<T>("));
    let rename = strip("std::fs::rename(&tmp, &path)?;");
    assert!(rename.contains("rename(&tmp"));
}
