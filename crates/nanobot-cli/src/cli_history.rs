//! The interactive chat's line history, in the file 0.3.5 keeps it in and its format (prompt_toolkit's
//! `FileHistory`), so that either program's up-arrow finds what was typed in the other:
//!
//! ```text
//!
//! # 2026-11-30 12:00:00.000000
//! +first line of an entry
//! +its second line
//! ```
//!
//! Each entry is appended when it is entered, never rewritten or cut: the file keeps every entry of both programs.
//! A file in the format earlier nanobot-rs wrote (rustyline's, first line `#V2`) is converted once, entries kept.

use std::io::Write as _;
use std::path::Path;

/// The first line of a history file written by rustyline (earlier nanobot-rs).
const RUSTYLINE_HEADER: &str = "#V2";

/// The entries in `path`, oldest first (none when it does not exist or cannot be read). A file in rustyline's
/// format is rewritten in 0.3.5's first.
pub(crate) fn load(path: &Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    if text.lines().next() == Some(RUSTYLINE_HEADER) {
        let entries = from_rustyline(&text);
        let converted: String = entries.iter().map(|e| block(e, "")).collect();
        if let Err(e) = nanobot_util::write_atomic(path, converted.as_bytes()) {
            tracing::warn!(path = %path.display(), error = %e, "could not convert the line history to 0.3.5's format");
        }
        return entries;
    }
    parse(&text)
}

/// Appends `entry` to `path` as 0.3.5 does (a time comment, then each line after `+`).
pub(crate) fn append(path: &Path, entry: &str) -> std::io::Result<()> {
    let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(block(entry, &now).as_bytes())
}

/// One entry as prompt_toolkit writes it; `time` empty for a converted entry (its time is not known).
fn block(entry: &str, time: &str) -> String {
    let mut out = format!("\n# {time}\n");
    for line in entry.split('\n') {
        out.push('+');
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// prompt_toolkit's reading: runs of `+` lines are entries (joined, without the last line break); any other line
/// ends one.
fn parse(text: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut current: Option<String> = None;
    for line in text.split_inclusive('\n') {
        match line.strip_prefix('+') {
            Some(rest) => current.get_or_insert_with(String::new).push_str(rest),
            None => {
                if let Some(entry) = current.take() {
                    entries.push(without_last_break(entry));
                }
            }
        }
    }
    if let Some(entry) = current {
        entries.push(without_last_break(entry));
    }
    entries
}

fn without_last_break(mut entry: String) -> String {
    if entry.ends_with('\n') {
        entry.pop();
    }
    entry
}

/// rustyline's format: after the header, one entry per line, `\\` and `\n` escaped.
fn from_rustyline(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut entry = String::with_capacity(line.len());
            let mut chars = line.chars();
            while let Some(c) = chars.next() {
                match (c, chars.clone().next()) {
                    ('\\', Some('\\')) => {
                        entry.push('\\');
                        chars.next();
                    }
                    ('\\', Some('n')) => {
                        entry.push('\n');
                        chars.next();
                    }
                    _ => entry.push(c),
                }
            }
            entry
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_it_appends_and_what_prompt_toolkit_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli_history");
        // As prompt_toolkit writes: a multi-line entry, a backslash, a line that is only `+`.
        std::fs::write(
            &path,
            "\n# 2026-01-01 10:00:00.000001\n+hello\n\n# 2026-01-01 10:00:01.000001\n+two\n+lines \\ here\n\n# x\n+\n",
        )
        .unwrap();
        assert_eq!(load(&path), ["hello", "two\nlines \\ here", ""]);
        append(&path, "new one").unwrap();
        assert_eq!(load(&path), ["hello", "two\nlines \\ here", "", "new one"]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("\n# 2026-01-01 10:00:00.000001\n+hello\n"),
            "never rewritten: {text:?}"
        );
        assert!(text.ends_with("\n+new one\n"), "{text:?}");
    }

    #[test]
    fn converts_rustyline_files_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli_history");
        std::fs::write(&path, "#V2\nfirst\nback\\\\slash\nmulti\\nline\n").unwrap();
        assert_eq!(load(&path), ["first", "back\\slash", "multi\nline"]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("#V2"), "{text:?}");
        assert_eq!(parse(&text), ["first", "back\\slash", "multi\nline"]);
        assert_eq!(load(&dir.path().join("missing")), Vec::<String>::new());
    }
}
