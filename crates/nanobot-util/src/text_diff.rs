//! Line diffs of text for messages the model and the user read: how many lines a change adds and removes, and a
//! unified diff.
//!
//! It runs `similar`'s Myers algorithm directly. `similar::TextDiff` chooses among six algorithms at run time, so
//! every program that used it carried all six for each element type it diffed: 0.6 MiB of machine code, the
//! largest crate in the core-only embedding (docs/benchmarks.md). The output is the same as `TextDiff`'s with its
//! default algorithm, Myers: the same operations, the same hunks, the same "\ No newline at end of file" lines
//! (tests below compare the two).

use std::fmt::Write as _;

use similar::algorithms::{Capture, Compact, Replace, myers};
use similar::{ChangeTag, DiffOp};

/// Myers' operations from `old` to `new`, compacted and with delete-then-insert runs as replacements (as
/// `similar::TextDiff` captures them).
fn ops<T: Eq + std::hash::Hash>(old: &[T], new: &[T]) -> Vec<DiffOp> {
    let mut hook = Compact::new(Replace::new(Capture::new()), old, new);
    match myers::diff(&mut hook, old, 0..old.len(), new, 0..new.len()) {
        Ok(()) => {}
        Err(never) => match never {},
    }
    hook.into_inner().into_inner().into_ops()
}

fn counts(ops: &[DiffOp]) -> (usize, usize) {
    let changed = ops.iter().filter(|op| !matches!(op, DiffOp::Equal { .. }));
    changed.fold((0, 0), |(added, deleted), op| {
        (added + op.new_range().len(), deleted + op.old_range().len())
    })
}

/// `(added, deleted)` lines from `old` to `new`, by the lines' text alone: a line ending (`\n` or `\r\n`) or a
/// missing final line break is no change. This is how 0.3.5 counts the lines of an edit summary
/// (`- update PATH (+added/-deleted)`).
pub fn text_line_counts(old: &str, new: &str) -> (usize, usize) {
    let (old, new): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    counts(&ops(&old, &new))
}

/// The lines of `text`, each with its line ending (`\n`, `\r\n` or a lone `\r`); the last may have none.
fn lines(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let end = match bytes[i] {
            b'\r' if bytes.get(i + 1) == Some(&b'\n') => i + 2,
            b'\r' | b'\n' => i + 1,
            _ => {
                i += 1;
                continue;
            }
        };
        lines.push(&text[start..end]);
        (start, i) = (end, end);
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// A hunk's line range as a unified diff writes it: `start,length` (1-based), `start` alone for one line, and
/// the line before for none.
struct HunkRange(std::ops::Range<usize>);

impl std::fmt::Display for HunkRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.len() {
            0 => write!(f, "{},0", self.0.start),
            1 => write!(f, "{}", self.0.start + 1),
            len => write!(f, "{},{len}", self.0.start + 1),
        }
    }
}

/// A line-by-line diff of two texts.
#[derive(Debug)]
pub struct LineDiff<'a> {
    old: Vec<&'a str>,
    new: Vec<&'a str>,
    ops: Vec<DiffOp>,
}

impl<'a> LineDiff<'a> {
    /// The diff from `old` to `new`, line by line.
    pub fn new(old: &'a str, new: &'a str) -> Self {
        let (old, new) = (lines(old), lines(new));
        let ops = ops(&old, &new);
        Self { old, new, ops }
    }

    /// `(added, deleted)`: the lines only `new` has and the lines only `old` has.
    pub fn counts(&self) -> (usize, usize) {
        counts(&self.ops)
    }

    /// A unified diff with `context` unchanged lines around each change, headed `--- old_name` and
    /// `+++ new_name`; empty when the texts are equal.
    pub fn unified(self, context: usize, old_name: &str, new_name: &str) -> String {
        let mut out = String::new();
        for hunk in similar::group_diff_ops(self.ops, context) {
            if hunk.is_empty() {
                continue;
            }
            if out.is_empty() {
                let _ = writeln!(out, "--- {old_name}\n+++ {new_name}");
            }
            let (first, last) = (&hunk[0], &hunk[hunk.len() - 1]);
            let old = first.old_range().start..last.old_range().end;
            let new = first.new_range().start..last.new_range().end;
            let _ = writeln!(out, "@@ -{} +{} @@", HunkRange(old), HunkRange(new));
            for change in hunk.iter().flat_map(|op| op.iter_changes(&self.old, &self.new)) {
                let mark = match change.tag() {
                    ChangeTag::Equal => ' ',
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                };
                let line = change.value();
                out.push(mark);
                out.push_str(line);
                if !line.ends_with(['\r', '\n']) {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts whose diffs exercise what the formatting must get right: no trailing newline on either side,
    /// `\r\n` and lone `\r` endings, changes far apart (two hunks), at the start and end, empty sides.
    const CASES: &[(&str, &str)] = &[
        ("", ""),
        ("", "a\n"),
        ("a\n", ""),
        ("a\nb\nc\n", "a\nb\nc\n"),
        ("a\nb\nc", "a\nB\nc"),
        ("a\nb\nc\n", "a\nb\nc"),
        ("a\r\nb\r\n", "a\r\nc\r\n"),
        ("a\rb\rc", "a\rx\rc\r"),
        (
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n",
            "0\n1\n2\n3\n4\n5\n6\nseven\n8\n9\n10\n11\n12\n13\n",
        ),
        ("x\ny\nz\n", "p\nq\nr\ns\n"),
        (
            "fn main() {\n    println!(\"hi\");\n}\n",
            "fn main() {\n    println!(\"hello\");\n    return;\n}\n",
        ),
    ];

    #[test]
    fn unified_diffs_match_similar_text_diff() {
        for &(old, new) in CASES {
            for context in [0, 2, 3] {
                let ours = LineDiff::new(old, new).unified(context, "a/f", "b/f");
                let theirs = similar::TextDiff::from_lines(old, new)
                    .unified_diff()
                    .context_radius(context)
                    .header("a/f", "b/f")
                    .to_string();
                assert_eq!(ours, theirs, "{old:?} -> {new:?}, context {context}");
            }
        }
    }

    /// 500 pairs of texts built from a few lines (so that many repeat), edited at random: the same output as
    /// `TextDiff` for each.
    #[test]
    fn generated_edits_match_similar_text_diff() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        let pool = [
            "a\n",
            "b\n",
            "fn x() {\n",
            "}\n",
            "\n",
            "  let y = 1;\r\n",
            "tail",
            "é\n",
        ];
        for _ in 0..500 {
            let old: Vec<&str> = (0..next(20)).map(|_| pool[next(8)]).collect();
            let mut new = old.clone();
            for _ in 0..next(5) {
                match next(3) {
                    0 if !new.is_empty() => drop(new.remove(next(new.len() as u64))),
                    _ => new.insert(next(new.len() as u64 + 1), pool[next(8)]),
                }
            }
            let (old, new) = (old.concat(), new.concat());
            let theirs = similar::TextDiff::from_lines(&old, &new);
            let context = next(4);
            let want = theirs
                .unified_diff()
                .context_radius(context)
                .header("a", "b")
                .to_string();
            assert_eq!(
                LineDiff::new(&old, &new).unified(context, "a", "b"),
                want,
                "{old:?} -> {new:?}"
            );
        }
    }

    #[test]
    fn counts_match_similar_text_diff() {
        for &(old, new) in CASES {
            let theirs = similar::TextDiff::from_lines(old, new);
            let (mut added, mut deleted) = (0, 0);
            for change in theirs.iter_all_changes() {
                match change.tag() {
                    ChangeTag::Insert => added += 1,
                    ChangeTag::Delete => deleted += 1,
                    ChangeTag::Equal => {}
                }
            }
            assert_eq!(
                LineDiff::new(old, new).counts(),
                (added, deleted),
                "{old:?} -> {new:?}"
            );
        }
    }

    #[test]
    fn text_line_counts_ignore_line_endings() {
        assert_eq!(text_line_counts("a\r\nb\r\n", "a\nb"), (0, 0));
        assert_eq!(text_line_counts("first\nlast", "first\nlast\nmore"), (1, 0));
        assert_eq!(text_line_counts("", "x\ny\n"), (2, 0));
        assert_eq!(text_line_counts("a\nb\nc\n", "a\nc\nd\n"), (1, 1));
    }

    #[test]
    fn lines_keep_their_endings() {
        assert_eq!(lines("a\nb\r\nc\rd"), ["a\n", "b\r\n", "c\r", "d"]);
        assert_eq!(lines(""), Vec::<&str>::new());
        assert_eq!(lines("\n\n"), ["\n", "\n"]);
    }
}
