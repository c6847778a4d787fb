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

/// How much of the end of the file is read at start: the line editor keeps only the latest entries anyway, and the
/// file, shared with 0.3.5 and never cut, grows for as long as the user chats.
const LOAD_MAX_BYTES: u64 = 1 << 20;

/// The entries in `path` (its last [`LOAD_MAX_BYTES`]), oldest first; none when it does not exist or cannot be
/// read. A file in rustyline's format is rewritten in 0.3.5's first.
pub(crate) fn load(path: &Path) -> Vec<String> {
    let Ok((text, whole)) = read_tail(path, LOAD_MAX_BYTES) else {
        return Vec::new();
    };
    if !whole {
        // The read began inside an entry: start at the first entry's comment line.
        return text
            .find("\n#")
            .map(|i| parse(&text[i + 1..]))
            .unwrap_or_default();
    }
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

/// The last `max` bytes of `path` as text, and whether that is the whole file.
fn read_tail(path: &Path, max: u64) -> std::io::Result<(String, bool)> {
    use std::io::{Read as _, Seek as _};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(std::io::SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), start == 0))
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

    #[test]
    fn a_long_file_is_read_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli_history");
        let entries = 20_000;
        for i in 0..entries {
            append(
                &path,
                &format!("entry {i} with some words to make it longer\nand a second line"),
            )
            .unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() > LOAD_MAX_BYTES);
        let loaded = load(&path);
        assert!(loaded.len() > 100 && loaded.len() < entries, "{}", loaded.len());
        assert_eq!(
            loaded.last().unwrap(),
            &format!(
                "entry {} with some words to make it longer\nand a second line",
                entries - 1
            )
        );
        assert!(
            loaded
                .iter()
                .all(|e| e.starts_with("entry ") && e.ends_with("\nand a second line")),
            "no cut entry"
        );
    }
}
