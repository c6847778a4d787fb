//! Where `old_text` occurs in a file's text, tried from exact to looser as 0.3.5 does, and how `new_text` is
//! shaped to a looser match (the file's indentation and quote style).
//!
//! The strategies, the first that finds anything wins:
//! 1. the exact text;
//! 2. whole lines equal once each line's leading and trailing whitespace is ignored;
//! 3. the same with curly quotes read as straight ones;
//! 4. the exact text with curly quotes read as straight ones.
//!
//! The looser ones (2 to 4) need some non-whitespace in `old_text`: blank lines are not a place to edit by guess.
//! Matches never overlap, and each is found in one pass over the text (lines are compared by number with
//! Knuth-Morris-Pratt, so a file of repeated lines costs no more than any other).

use std::borrow::Cow;
use std::collections::HashMap;

/// Where one match lies: its byte range in the text and its first line (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) line: usize,
}

impl Span {
    /// The last line (1-based) the match covers; a line break that ends it does not start another.
    pub(super) fn last_line(&self, text: &str) -> usize {
        let body = &text[self.start..self.end];
        let body = body.strip_suffix('\n').unwrap_or(body);
        self.line + body.matches('\n').count()
    }
}

/// How the matches of [`find`] were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strategy {
    Exact,
    TrimmedLines,
    TrimmedLinesStraightQuotes,
    StraightQuotes,
}

/// The matches of `old` in `text` by the first strategy that finds any (module docs); empty when none does.
pub(super) fn find(text: &str, old: &str) -> (Strategy, Vec<Span>) {
    let exact = exact_matches(text, old);
    if !exact.is_empty() || old.trim().is_empty() {
        return (Strategy::Exact, exact);
    }
    let trimmed = line_matches(text, old, false);
    if !trimmed.is_empty() {
        return (Strategy::TrimmedLines, trimmed);
    }
    let quoted = line_matches(text, old, true);
    if !quoted.is_empty() {
        return (Strategy::TrimmedLinesStraightQuotes, quoted);
    }
    (Strategy::StraightQuotes, straight_quote_matches(text, old))
}

/// The line numbers of byte offsets asked for in increasing order, counted once over the text.
struct LineCounter<'a> {
    text: &'a str,
    at: usize,
    line: usize,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, at: 0, line: 1 }
    }

    fn line_of(&mut self, byte: usize) -> usize {
        self.line += self.text[self.at..byte].matches('\n').count();
        self.at = byte;
        self.line
    }
}

fn exact_matches(text: &str, old: &str) -> Vec<Span> {
    if old.is_empty() {
        return Vec::new();
    }
    let mut lines = LineCounter::new(text);
    text.match_indices(old)
        .map(|(start, m)| Span {
            start,
            end: start + m.len(),
            line: lines.line_of(start),
        })
        .collect()
}

const CURLY_QUOTES: [char; 4] = ['\u{2018}', '\u{2019}', '\u{201c}', '\u{201d}'];

/// `text` with curly quotes as straight ones, one character for one (borrowed when it has none).
pub(super) fn straighten(text: &str) -> Cow<'_, str> {
    if !text.contains(CURLY_QUOTES) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| match c {
                '\u{2018}' | '\u{2019}' => '\'',
                '\u{201c}' | '\u{201d}' => '"',
                c => c,
            })
            .collect(),
    )
}

/// A line of the text: where it starts, where its content ends (before `\n` or `\r\n`) and where the next starts.
struct Line {
    start: usize,
    content_end: usize,
    next: usize,
}

fn lines_of(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut start = 0;
    for piece in text.split_inclusive('\n') {
        let body = piece
            .strip_suffix('\n')
            .map_or(piece, |b| b.strip_suffix('\r').unwrap_or(b));
        out.push(Line {
            start,
            content_end: start + body.len(),
            next: start + piece.len(),
        });
        start += piece.len();
    }
    out
}

/// Strategies 2 and 3: runs of whole lines equal to `old`'s lines with surrounding whitespace ignored (and curly
/// quotes read as straight with `straight`). A match ends where its last line's content ends, or after its line
/// break when `old` ends with one.
fn line_matches(text: &str, old: &str, straight: bool) -> Vec<Span> {
    fn key(line: &str, straight: bool) -> Cow<'_, str> {
        let line = line.trim();
        if straight {
            straighten(line)
        } else {
            Cow::Borrowed(line)
        }
    }
    // Each distinct wanted line gets a number; a text line no wanted line equals gets none (never matches).
    let mut ids: HashMap<Cow<str>, u32> = HashMap::new();
    let pattern: Vec<u32> = old
        .lines()
        .map(|l| {
            let next = ids.len() as u32;
            *ids.entry(key(l, straight)).or_insert(next)
        })
        .collect();
    if pattern.is_empty() {
        return Vec::new();
    }
    let lines = lines_of(text);
    let numbers = lines.iter().map(|l| {
        ids.get(key(&text[l.start..l.content_end], straight).as_ref())
            .copied()
    });
    let keep_break = old.ends_with('\n');
    let mut counter = LineCounter::new(text);
    kmp_runs(&pattern, numbers)
        .into_iter()
        .map(|first| {
            let last = &lines[first + pattern.len() - 1];
            let start = lines[first].start;
            Span {
                start,
                end: if keep_break { last.next } else { last.content_end },
                line: counter.line_of(start),
            }
        })
        .collect()
}

/// The starting indices of the non-overlapping runs of `pattern` in `items` (Knuth-Morris-Pratt: linear in both).
fn kmp_runs(pattern: &[u32], items: impl Iterator<Item = Option<u32>>) -> Vec<usize> {
    let mut fallback = vec![0usize; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = fallback[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        fallback[i] = k;
    }
    let mut runs = Vec::new();
    let mut matched = 0;
    for (i, item) in items.enumerate() {
        let Some(item) = item else {
            matched = 0;
            continue;
        };
        while matched > 0 && pattern[matched] != item {
            matched = fallback[matched - 1];
        }
        if pattern[matched] == item {
            matched += 1;
        }
        if matched == pattern.len() {
            runs.push(i + 1 - pattern.len());
            matched = 0;
        }
    }
    runs
}

/// Strategy 4: `old` in `text` with curly quotes read as straight in both. A curly quote is three bytes and a
/// straight one one, so the offsets found in the straightened text are mapped back, in one walk.
fn straight_quote_matches(text: &str, old: &str) -> Vec<Span> {
    let (plain_text, plain_old) = (straighten(text), straighten(old));
    if matches!((&plain_text, &plain_old), (Cow::Borrowed(_), Cow::Borrowed(_))) {
        return Vec::new(); // no curly quote anywhere: strategy 1 already answered
    }
    let found: Vec<(usize, usize)> = plain_text
        .match_indices(plain_old.as_ref())
        .map(|(i, m)| (i, i + m.len()))
        .collect();
    // (offset in the straightened text, offset in the original) for each character, then the ends.
    let mut walk = plain_text
        .char_indices()
        .map(|(i, _)| i)
        .chain([plain_text.len()])
        .zip(text.char_indices().map(|(i, _)| i).chain([text.len()]))
        .peekable();
    // Offsets are asked for in increasing order (matches do not overlap), so one walk maps them all.
    let mut map = |wanted: usize| -> usize {
        while let Some(&(plain, original)) = walk.peek() {
            if plain >= wanted {
                return original;
            }
            walk.next();
        }
        text.len()
    };
    let mut counter = LineCounter::new(text);
    let mut spans = Vec::with_capacity(found.len());
    for (start, end) in found {
        let (start, end) = (map(start), map(end));
        spans.push(Span {
            start,
            end,
            line: counter.line_of(start),
        });
    }
    spans
}

/// `new` shaped to the `matched` text of the file: in its quote style when only quotes (and surrounding
/// whitespace) tell `old` from it, and indented like it when its lines differ from `old`'s by indentation alone.
pub(super) fn shape_replacement(old: &str, matched: &str, new: &str) -> String {
    let styled = keep_quote_style(old, matched, new);
    reindent_like(old, matched, &styled).unwrap_or(styled)
}

/// 0.3.5's quote preservation: when `old` matched only with its quotes straightened, `new`'s straight quotes are
/// written curly, as the file has them (opening and closing in turn; an apostrophe between letters is `’`).
fn keep_quote_style(old: &str, matched: &str, new: &str) -> String {
    if old == matched || straighten(old.trim()) != straighten(matched.trim()) {
        return new.to_owned();
    }
    let mut styled = new.to_owned();
    if matched.contains(['\u{201c}', '\u{201d}']) && styled.contains('"') {
        styled = curly_doubles(&styled);
    }
    if matched.contains(['\u{2018}', '\u{2019}']) && styled.contains('\'') {
        styled = curly_singles(&styled);
    }
    styled
}

fn curly_doubles(text: &str) -> String {
    let mut opening = true;
    text.chars()
        .map(|c| {
            if c != '"' {
                return c;
            }
            let curly = if opening { '\u{201c}' } else { '\u{201d}' };
            opening = !opening;
            curly
        })
        .collect()
}

fn curly_singles(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut opening = true;
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if c != '\'' {
            out.push(c);
            continue;
        }
        let between_letters =
            i > 0 && chars[i - 1].is_alphanumeric() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if between_letters {
            out.push('\u{2019}');
            continue;
        }
        out.push(if opening { '\u{2018}' } else { '\u{2019}' });
        opening = !opening;
    }
    out
}

fn leading_whitespace(line: &str) -> &str {
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// `new` indented like `matched` when `old` and `matched` have the same lines but for indentation (and quote
/// style): the first non-blank lines' indentation differs by a prefix, which is added to (or, where `old` was
/// indented deeper, taken from) each of `new`'s non-empty lines. `None` when there is nothing to change.
fn reindent_like(old: &str, matched: &str, new: &str) -> Option<String> {
    let old_lines: Vec<&str> = old.trim_end_matches('\n').split('\n').collect();
    let matched_lines: Vec<&str> = matched.trim_end_matches('\n').split('\n').collect();
    if old_lines.len() != matched_lines.len() {
        return None;
    }
    let mut pairs = old_lines
        .iter()
        .zip(&matched_lines)
        .filter(|(o, m)| !o.trim().is_empty() && !m.trim().is_empty())
        .peekable();
    let &(first_old, first_matched) = pairs.peek()?;
    if pairs.any(|(o, m)| straighten(o.trim()) != straighten(m.trim())) {
        return None;
    }
    let (old_ws, matched_ws) = (leading_whitespace(first_old), leading_whitespace(first_matched));
    let lines = new.split('\n');
    let shaped: Vec<Cow<str>> = if let Some(extra) = matched_ws.strip_prefix(old_ws).filter(|e| !e.is_empty())
    {
        lines
            .map(|l| {
                if l.is_empty() {
                    Cow::Borrowed(l)
                } else {
                    Cow::Owned(format!("{extra}{l}"))
                }
            })
            .collect()
    } else if let Some(extra) = old_ws.strip_prefix(matched_ws).filter(|e| !e.is_empty()) {
        lines
            .map(|l| Cow::Borrowed(l.strip_prefix(extra).unwrap_or(l)))
            .collect()
    } else {
        return None;
    };
    Some(shaped.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(text: &'a str, spans: &[Span]) -> Vec<(&'a str, usize)> {
        spans.iter().map(|s| (&text[s.start..s.end], s.line)).collect()
    }

    #[test]
    fn exact_matches_first_and_never_overlapping() {
        let text = "aaa\nb aa\n";
        let (how, spans) = find(text, "aa");
        assert_eq!(how, Strategy::Exact);
        assert_eq!(texts(text, &spans), [("aa", 1), ("aa", 2)]);
        // Whitespace-only text is matched exactly or not at all.
        assert_eq!(find("a\n\n  \nb", "\t").1, []);
    }

    #[test]
    fn lines_match_with_their_indentation_ignored() {
        let text = "fn f() {\n        let x = 1;\n        let y = 2;\n}\n";
        let (how, spans) = find(text, "    let x = 1;\n    let y = 2;");
        assert_eq!(how, Strategy::TrimmedLines);
        assert_eq!(
            texts(text, &spans),
            [("        let x = 1;\n        let y = 2;", 2)]
        );
        // With a final line break, the match takes the line's break too.
        let (_, spans) = find(text, "let x = 1;\nlet y = 2;\n");
        assert_eq!(
            texts(text, &spans),
            [("        let x = 1;\n        let y = 2;\n", 2)]
        );
        // Whole lines only: part of a line is not a trimmed match.
        assert_eq!(find(text, " let x = 1; // one").1, []);
    }

    #[test]
    fn repeated_lines_give_separate_matches_in_one_pass() {
        let text = "x\n".repeat(5);
        let (how, spans) = find(&text, " x\n x");
        assert_eq!(how, Strategy::TrimmedLines);
        assert_eq!(texts(&text, &spans), [("x\nx", 1), ("x\nx", 3)]);
        // A partial run followed by a full one (the KMP fallback): a a b after a.
        let text = "a\na\na\nb\n";
        let (_, spans) = find(text, " a\n a\n b");
        assert_eq!(texts(text, &spans), [("a\na\nb", 2)]);
    }

    #[test]
    fn crlf_lines_end_before_the_carriage_return() {
        let text = "one\r\n  two\r\nthree\r\n";
        let (_, spans) = find(text, "two\nthree");
        assert_eq!(texts(text, &spans), [("  two\r\nthree", 2)]);
    }

    #[test]
    fn curly_quotes_match_straight_ones() {
        let text = "  say \u{201c}hi\u{201d}\nok\n";
        let (how, spans) = find(text, "say \"hi\"\nok");
        assert_eq!(how, Strategy::TrimmedLinesStraightQuotes);
        assert_eq!(texts(text, &spans), [("  say \u{201c}hi\u{201d}\nok", 1)]);
        // Inside a line: the straightened text, with offsets back in the original's bytes.
        let text = "é \u{2018}a\u{2019} then \u{201c}b\u{201d} and \u{201c}b\u{201d}\n";
        let (how, spans) = find(text, "\"b\"");
        assert_eq!(how, Strategy::StraightQuotes);
        assert_eq!(
            texts(text, &spans),
            [("\u{201c}b\u{201d}", 1), ("\u{201c}b\u{201d}", 1)]
        );
        let (_, spans) = find(text, "'a' then");
        assert_eq!(texts(text, &spans), [("\u{2018}a\u{2019} then", 1)]);
        assert_eq!(find("plain \"x\"", "'x'").1, []);
        // Adjacent matches map to adjacent ranges.
        let text = "\u{201c}b\u{201d}\u{201c}b\u{201d}";
        let (_, spans) = find(text, "\"b\"");
        assert_eq!(
            texts(text, &spans),
            [("\u{201c}b\u{201d}", 1), ("\u{201c}b\u{201d}", 1)]
        );
    }

    #[test]
    fn the_file_quote_style_is_kept() {
        let matched = "print(\u{201c}it\u{2019}s\u{201d})";
        assert_eq!(
            shape_replacement("print(\"it's\")", matched, "print(\"it's 'new'\")"),
            "print(\u{201c}it\u{2019}s \u{2018}new\u{2019}\u{201d})"
        );
        // An exact match, or one that differs by more than quotes, leaves the new text alone.
        assert_eq!(shape_replacement(matched, matched, "\"x\""), "\"x\"");
        assert_eq!(
            shape_replacement("Print(\"a\")", "print(\u{201c}a\u{201d})", "\"x\""),
            "\"x\""
        );
    }

    #[test]
    fn new_text_takes_the_match_indentation() {
        let old = "if a:\n    b()";
        let matched = "        if a:\n            b()";
        assert_eq!(
            shape_replacement(old, matched, "if a:\n    c()\n\n    d()"),
            "        if a:\n            c()\n\n            d()"
        );
        // Deeper in old_text than in the file: the extra is taken off.
        assert_eq!(
            shape_replacement(
                "        x = 1\n        y = 2",
                "    x = 1\n    y = 2",
                "        x = 3\n        y = 4"
            ),
            "    x = 3\n    y = 4"
        );
        // Lines that differ in more than indentation, or in number: unchanged.
        assert_eq!(shape_replacement("a\nb", "  a\n  c", "z"), "z");
        assert_eq!(shape_replacement("a", "  a\n  b", "z"), "z");
        // Tabs against spaces: neither is a prefix of the other, so unchanged.
        assert_eq!(shape_replacement("\tx", "    x", "\ty"), "\ty");
    }
}
