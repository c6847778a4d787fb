//! Markdown for the terminal, rendered as it streams. pulldown-cmark parses (CommonMark, with GFM tables,
//! strikethrough and task lists); this module only turns its events into ANSI styles: headings, bullets and
//! numbers, quotes, rules, fenced code blocks, tables with aligned columns, links as `text (url)`, bold, italic,
//! struck and `code` text.
//!
//! Streaming works line by line: a complete line is parsed and printed; a table waits for its last row (to align
//! the columns); inside a fenced code block text is printed as it comes. A paragraph line that starts with a
//! letter is printed as it comes up to its first character that could start Markdown (`*`, `_`, `` ` ``, `[`, …),
//! and the rest when the line is complete. Output does not depend on how the text was split into deltas. A
//! construct spanning lines (emphasis opened on one line and closed on the next) is shown as written.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const RESET: &str = "\x1b[0m";
/// Style of a line of a fenced code block.
const CODE_BLOCK: &str = "\x1b[2m";

/// A streaming Markdown → ANSI renderer. With `ansi == false` it passes text through unchanged.
///
/// ```
/// use nanobot_cli::MarkdownStream;
/// let mut md = MarkdownStream::new(true);
/// let mut out = md.push("# Ti");
/// out += &md.push("tle\nSome **bo");
/// out += &md.push("ld** text\n");
/// out += &md.finish();
/// assert!(out.contains("\x1b[1;4mTitle"), "headings are bold and underlined");
/// assert!(!out.contains("**"));
/// assert_eq!(MarkdownStream::render_all("**x**", false), "**x**");
/// ```
#[derive(Debug, Clone)]
pub struct MarkdownStream {
    ansi: bool,
    /// Text not yet handled: the current line, incomplete.
    pending: String,
    /// Bytes of the current line already printed (code lines and the plain start of paragraph lines).
    emitted: usize,
    /// Inside a fenced code block: its fence (the character and how many).
    fence: Option<(char, usize)>,
    /// Rows of a table being collected.
    table: Vec<String>,
    /// Whether an escape sequence was printed since the last reset at the end.
    styled: bool,
}

impl MarkdownStream {
    /// A renderer; `ansi` false means plain pass-through.
    pub fn new(ansi: bool) -> Self {
        MarkdownStream {
            ansi,
            pending: String::new(),
            emitted: 0,
            fence: None,
            table: Vec::new(),
            styled: false,
        }
    }

    /// Renders a whole text at once.
    pub fn render_all(text: &str, ansi: bool) -> String {
        let mut md = MarkdownStream::new(ansi);
        let mut out = md.push(text);
        out.push_str(&md.finish());
        out
    }

    /// Adds a delta; returns what can be printed now.
    pub fn push(&mut self, delta: &str) -> String {
        if !self.ansi {
            return delta.to_owned();
        }
        self.pending.push_str(delta);
        let mut out = String::new();
        while let Some(nl) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=nl).collect();
            self.complete_line(&line[..nl], true, &mut out);
        }
        self.partial_line(&mut out);
        self.note_style(&out);
        out
    }

    /// Flushes what is left and resets the styles.
    pub fn finish(&mut self) -> String {
        if !self.ansi {
            return String::new();
        }
        let mut out = String::new();
        let line = std::mem::take(&mut self.pending);
        if !line.is_empty() {
            self.complete_line(&line, false, &mut out);
        }
        self.flush_table(&mut out);
        self.note_style(&out);
        if self.styled {
            out.push_str(RESET);
        }
        *self = MarkdownStream::new(self.ansi);
        out
    }

    fn note_style(&mut self, out: &str) {
        self.styled |= out.contains('\x1b');
    }

    /// A whole line (without its newline; `newline` says whether one followed).
    fn complete_line(&mut self, line: &str, newline: bool, out: &mut String) {
        let eol = if newline { "\n" } else { "" };
        if let Some(fence) = self.fence {
            if closes_fence(line, fence) {
                self.fence = None;
                self.emitted = 0;
                return;
            }
            if self.emitted == 0 {
                out.push_str(CODE_BLOCK);
                out.push_str("  ");
            }
            out.push_str(&line[self.emitted.min(line.len())..]);
            out.push_str(RESET);
            out.push_str(eol);
            self.emitted = 0;
            return;
        }
        if is_table_row(line) {
            self.table.push(line.to_owned());
            return;
        }
        self.flush_table(out);
        if let Some(fence) = opens_fence(line) {
            self.fence = Some(fence);
            self.emitted = 0;
            return;
        }
        let rendered = render_line(line);
        let already = self.emitted.min(line.len());
        match rendered.strip_prefix(&line[..already]) {
            Some(rest) => out.push_str(rest),
            // Not expected (the printed start is plain text): print the whole line again on its own.
            None => {
                out.push('\n');
                out.push_str(&rendered);
            }
        }
        out.push_str(eol);
        self.emitted = 0;
    }

    /// Prints what is already certain of the incomplete line in `pending`.
    fn partial_line(&mut self, out: &mut String) {
        let line = self.pending.as_str();
        if let Some(fence) = self.fence {
            // A line that may still become the closing fence waits.
            let t = line.trim_start_matches(' ');
            if t.is_empty() || t.chars().all(|c| c == fence.0) {
                return;
            }
            if self.emitted == 0 {
                out.push_str(CODE_BLOCK);
                out.push_str("  ");
            }
            out.push_str(&line[self.emitted..]);
            self.emitted = line.len();
            return;
        }
        if !self.table.is_empty() {
            let t = line.trim_start();
            if t.is_empty() || t.starts_with('|') {
                return;
            }
            self.flush_table(out);
        }
        let line = self.pending.as_str();
        if !line.chars().next().is_some_and(char::is_alphabetic) {
            return;
        }
        let safe = line.find(is_markdown_char).unwrap_or(line.len());
        let safe = line[..safe].trim_end().len();
        if safe > self.emitted {
            out.push_str(&line[self.emitted..safe]);
            self.emitted = safe;
        }
    }

    fn flush_table(&mut self, out: &mut String) {
        if self.table.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.table);
        out.push_str(&render_table(&rows));
    }
}

/// Characters that may start or end Markdown inline syntax (a paragraph line is printed early only up to the
/// first of them).
fn is_markdown_char(c: char) -> bool {
    matches!(
        c,
        '*' | '_' | '`' | '[' | ']' | '!' | '<' | '>' | '&' | '\\' | '~' | '|' | '$' | '^' | '{' | '}'
    )
}

fn is_table_row(line: &str) -> bool {
    line.trim_start().starts_with('|')
}

/// ```` ``` ```` or `~~~` (three or more, at most three spaces in): the fence.
fn opens_fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let t = &line[indent..];
    let c = t.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let n = t.len() - t.trim_start_matches(c).len();
    (n >= 3 && !(c == '`' && t[n..].contains('`'))).then_some((c, n))
}

/// Whether `line` closes a block opened with `fence`.
fn closes_fence(line: &str, (c, n): (char, usize)) -> bool {
    let t = line.trim_start_matches(' ');
    let count = t.len() - t.trim_start_matches(c).len();
    line.len() - t.len() <= 3 && count >= n && t[count..].trim().is_empty()
}

/// The ANSI styles in effect.
#[derive(Debug, Clone, Copy, Default)]
struct Style {
    heading: bool,
    quote: bool,
    bold: bool,
    italic: bool,
    code: bool,
    link: bool,
    strike: bool,
}

impl Style {
    /// A reset, then the codes of this style.
    fn sgr(self) -> String {
        let mut codes: Vec<&str> = Vec::new();
        if self.heading || self.bold {
            codes.push("1");
        }
        if self.heading || self.link {
            codes.push("4");
        }
        if self.italic || self.quote {
            codes.push("3");
        }
        if self.strike {
            codes.push("9");
        }
        if self.code {
            codes.push("36");
        }
        let mut s = String::from(RESET);
        if !codes.is_empty() {
            s.push_str(&format!("\x1b[{}m", codes.join(";")));
        }
        s
    }
}

/// One line (outside code blocks and tables) parsed on its own and styled. Leading spaces are kept as they are
/// (a nested bullet stays indented, four spaces never make a code block).
fn render_line(line: &str) -> String {
    let indent_len = line.len() - line.trim_start_matches(' ').len();
    let (indent, rest) = line.split_at(indent_len);
    let mut out = String::from(indent);
    let mut style = Style::default();
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut links: Vec<(String, usize)> = Vec::new();
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(rest, options) {
        match event {
            Event::Start(Tag::Heading { .. }) => {
                style.heading = true;
                out.push_str(&style.sgr());
            }
            Event::End(TagEnd::Heading(_)) => {
                style.heading = false;
                out.push_str(&style.sgr());
            }
            Event::Start(Tag::BlockQuote(_)) => {
                out.push_str("\x1b[2m│\x1b[0m ");
                style.quote = true;
                out.push_str(&style.sgr());
            }
            Event::End(TagEnd::BlockQuote(_)) => {
                style.quote = false;
                out.push_str(&style.sgr());
            }
            Event::Start(Tag::List(start)) => lists.push(start),
            Event::End(TagEnd::List(_)) => {
                lists.pop();
            }
            Event::Start(Tag::Item) => match lists.last_mut() {
                Some(Some(n)) => {
                    out.push_str(&format!("{n}. "));
                    *n += 1;
                }
                _ => out.push_str("• "),
            },
            Event::Start(Tag::Strong) | Event::End(TagEnd::Strong) => {
                style.bold = matches!(event, Event::Start(_));
                out.push_str(&style.sgr());
            }
            Event::Start(Tag::Emphasis) | Event::End(TagEnd::Emphasis) => {
                style.italic = matches!(event, Event::Start(_));
                out.push_str(&style.sgr());
            }
            Event::Start(Tag::Strikethrough) | Event::End(TagEnd::Strikethrough) => {
                style.strike = matches!(event, Event::Start(_));
                out.push_str(&style.sgr());
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                style.link = true;
                out.push_str(&style.sgr());
                links.push((dest_url.into_string(), out.len()));
            }
            Event::End(TagEnd::Link) => {
                style.link = false;
                out.push_str(&style.sgr());
                if let Some((url, start)) = links.pop() {
                    // An autolink (`<https://…>`) shows its address once.
                    if !url.is_empty() && strip_ansi(&out[start..]) != url {
                        out.push_str(&format!(" ({url})"));
                    }
                }
            }
            Event::Start(Tag::Image { dest_url, .. }) => {
                out.push_str("[image: ");
                links.push((dest_url.into_string(), out.len()));
            }
            Event::End(TagEnd::Image) => {
                out.push(']');
                if let Some((url, _)) = links.pop() {
                    out.push_str(&format!(" ({url})"));
                }
            }
            Event::Code(text) => {
                style.code = true;
                out.push_str(&style.sgr());
                out.push_str(&text);
                style.code = false;
                out.push_str(&style.sgr());
            }
            Event::Text(text) | Event::InlineHtml(text) => out.push_str(&text),
            // An HTML block keeps its own line end; the caller adds the line's.
            Event::Html(text) => out.push_str(text.trim_end_matches('\n')),
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            Event::Rule => out.push_str(&format!("\x1b[2m{}{RESET}", "─".repeat(40))),
            Event::TaskListMarker(done) => out.push_str(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(label) => out.push_str(&format!("[^{label}]")),
            _ => {}
        }
    }
    out
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        match (esc, c) {
            (false, '\x1b') => esc = true,
            (true, 'm') => esc = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// The cells of a table (rows of plain text, inline Markdown resolved) and whether its first row is a header,
/// as pulldown-cmark reads it; rows it does not take as a table are split at `|`.
fn table_cells(rows: &[String]) -> (Vec<Vec<String>>, bool) {
    let text = rows.join("\n");
    let mut parsed: Vec<Vec<String>> = Vec::new();
    let mut header = false;
    let mut cell: Option<String> = None;
    let mut links: Vec<String> = Vec::new();
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        match event {
            Event::Start(Tag::TableHead) => {
                header = true;
                parsed.push(Vec::new());
            }
            Event::Start(Tag::TableRow) => parsed.push(Vec::new()),
            Event::Start(Tag::TableCell) => cell = Some(String::new()),
            Event::End(TagEnd::TableCell) => {
                if let (Some(c), Some(row)) = (cell.take(), parsed.last_mut()) {
                    row.push(c.trim().to_owned());
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.into_string()),
            Event::End(TagEnd::Link) => {
                if let (Some(url), Some(c)) = (links.pop(), cell.as_mut())
                    && !url.is_empty()
                    && *c != url
                {
                    c.push_str(&format!(" ({url})"));
                }
            }
            Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => {
                if let Some(c) = cell.as_mut() {
                    c.push_str(&t);
                }
            }
            _ => {}
        }
    }
    if parsed.is_empty() {
        // Not a table to CommonMark (no delimiter row): the rows as written, split at `|`.
        let split = rows
            .iter()
            .map(|row| {
                let t = row.trim();
                let t = t.strip_prefix('|').unwrap_or(t);
                let t = t.strip_suffix('|').unwrap_or(t);
                t.split('|').map(|c| c.trim().to_owned()).collect()
            })
            .collect();
        return (split, false);
    }
    (parsed, header)
}

/// A Markdown table with aligned columns: the header bold, a rule under it, `│` between columns.
fn render_table(rows: &[String]) -> String {
    let (body, has_header) = table_cells(rows);
    let columns = body.iter().map(Vec::len).max().unwrap_or(0);
    let width = |s: &str| unicode_width::UnicodeWidthStr::width(s);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            body.iter()
                .filter_map(|r| r.get(i))
                .map(|c| width(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (n, row) in body.iter().enumerate() {
        let header = has_header && n == 0;
        if header {
            out.push_str("\x1b[1m");
        }
        let line: Vec<String> = (0..columns)
            .map(|i| {
                let c = row.get(i).map_or("", String::as_str);
                format!("{c}{}", " ".repeat(widths[i].saturating_sub(width(c))))
            })
            .collect();
        out.push_str(line.join(" │ ").trim_end());
        if header {
            out.push_str(RESET);
            out.push('\n');
            let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
            out.push_str(&rule.join("─┼─"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# Plan\n\nSome **bold** and *italic* and `code` here.\n\n- one\n  * two\n> quoted **x**\n\n---\n```rust\nlet a = 2 * 3 * 4;\n```\n1. first\nA lone * star and 5 * 6.\nlast **unterminated";

    fn chunked(text: &str, size: usize) -> String {
        let mut md = MarkdownStream::new(true);
        let mut out = String::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(size) {
            out.push_str(&md.push(&piece.iter().collect::<String>()));
        }
        out.push_str(&md.finish());
        out
    }

    #[test]
    fn output_does_not_depend_on_chunking() {
        let whole = MarkdownStream::render_all(SAMPLE, true);
        for size in [1, 2, 3, 5, 7, 64] {
            assert_eq!(chunked(SAMPLE, size), whole, "chunk size {size}");
        }
    }

    #[test]
    fn markers_become_styles() {
        let out = MarkdownStream::render_all(SAMPLE, true);
        assert!(out.contains("\x1b[0m\x1b[1;4mPlan"), "{out:?}");
        assert!(out.contains("• one"), "{out:?}");
        assert!(out.contains("  • two"), "{out:?}");
        assert!(!out.contains("**bold**"));
        assert!(out.contains("let a = 2 * 3 * 4;"), "code kept verbatim: {out:?}");
        assert!(!out.contains("```"));
        assert!(out.contains("─────"));
        assert!(out.contains("A lone * star"), "{out:?}");
        assert!(out.ends_with(RESET), "styles are reset at the end");
    }

    #[test]
    fn plain_mode_passes_text_through() {
        assert_eq!(MarkdownStream::render_all(SAMPLE, false), SAMPLE);
    }
}

#[cfg(test)]
mod table_and_link_tests {
    use super::*;

    fn plain(s: &str) -> String {
        let mut out = String::new();
        let mut esc = false;
        for c in s.chars() {
            match (esc, c) {
                (false, '\x1b') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                (false, c) => out.push(c),
            }
        }
        out
    }

    #[test]
    fn tables_are_aligned_whatever_the_deltas() {
        let text = "Results:\n| name | size |\n|---|---:|\n| a.txt | 12 |\n| **longer.md** | 3 |\nDone.\n";
        let whole = MarkdownStream::render_all(text, true);
        let mut md = MarkdownStream::new(true);
        let mut pieces = String::new();
        for ch in text.chars() {
            pieces.push_str(&md.push(&ch.to_string()));
        }
        pieces.push_str(&md.finish());
        assert_eq!(plain(&whole), plain(&pieces));
        let p = plain(&whole);
        assert!(
            p.contains("name      │ size\n──────────┼─────\na.txt     │ 12\nlonger.md │ 3\nDone."),
            "{p}"
        );
        assert!(!p.contains("|---"), "{p}");
    }

    #[test]
    fn links_show_text_and_address() {
        let text = "See [the docs](https://example.org/docs) and [1] here, [x](not closed\n";
        let mut md = MarkdownStream::new(true);
        let mut out = String::new();
        for ch in text.chars() {
            out.push_str(&md.push(&ch.to_string()));
        }
        out.push_str(&md.finish());
        let p = plain(&out);
        assert!(
            p.contains("See the docs (https://example.org/docs) and [1] here, [x](not closed"),
            "{p}"
        );
        assert!(out.contains("\x1b[4mthe docs"), "{out:?}");
        assert_eq!(MarkdownStream::render_all("[a](b)", false), "[a](b)");
    }

    #[test]
    fn plain_paragraph_text_streams_before_the_line_ends() {
        let mut md = MarkdownStream::new(true);
        assert_eq!(md.push("Hello wor"), "Hello wor");
        assert_eq!(
            md.push("ld, see **th"),
            "ld, see",
            "up to the first marker, trailing spaces held back"
        );
        let rest = md.push("is** now\n");
        assert_eq!(plain(&rest), " this now\n");
        assert!(rest.contains("\x1b[1mthis"), "{rest:?}");
        // A line that may be a heading, list, quote or table waits for its end.
        assert_eq!(md.push("# Head"), "");
        assert_eq!(md.push("- item"), "");
    }

    #[test]
    fn commonmark_details_come_from_the_parser() {
        let text = "<div>block</div>\n<b>html</b> stays\n3. third\n4. fourth\n- [x] done\n- [ ] todo\nVisit <https://example.org> or \\*not italic\\*.\n\
                    ~~old~~ new\n~~~\nraw *text*\n~~~\n| a | `b` |\n|---|---|\n| [x](https://x.org) | 2 |\n";
        let out = MarkdownStream::render_all(text, true);
        let p = plain(&out);
        assert!(
            p.starts_with("<div>block</div>\n<b>html</b> stays\n3. third\n4. fourth\n"),
            "{p}"
        );
        assert!(p.contains("• [x] done\n• [ ] todo\n"), "{p}");
        assert!(p.contains("Visit https://example.org or *not italic*."), "{p}");
        assert!(
            !p.contains("(https://example.org)"),
            "an autolink shows its address once: {p}"
        );
        assert!(out.contains("\x1b[9mold"), "{out:?}");
        assert!(p.contains("  raw *text*\n"), "code is verbatim: {p}");
        assert!(!p.contains("~~~"), "{p}");
        assert!(p.contains(&format!("a{} │ b\n", " ".repeat(16))), "{p}");
        assert!(p.contains("x (https://x.org) │ 2"), "{p}");
        for size in [1, 2, 5] {
            let mut md = MarkdownStream::new(true);
            let mut pieces = String::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                pieces.push_str(&md.push(&piece.iter().collect::<String>()));
            }
            pieces.push_str(&md.finish());
            assert_eq!(pieces, out, "chunk size {size}");
        }
    }
}
