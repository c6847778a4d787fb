//! Markdown for the terminal, rendered as it streams: headings, bullets, quotes, rules, fenced code blocks,
//! tables (aligned columns), links (`text (url)`), `**bold**`, `*italic*` and `` `code` `` become ANSI styles. Output does not depend on how the text was
//! split into deltas (a line's prefix and a lone `*` wait for the next character when needed).

const RESET: &str = "\x1b[0m";

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
    pending: String,
    at_line_start: bool,
    code_block: bool,
    heading: bool,
    quote: bool,
    bold: bool,
    italic: bool,
    code: bool,
}

impl MarkdownStream {
    /// A renderer; `ansi` false means plain pass-through.
    pub fn new(ansi: bool) -> Self {
        MarkdownStream {
            ansi,
            pending: String::new(),
            at_line_start: true,
            code_block: false,
            heading: false,
            quote: false,
            bold: false,
            italic: false,
            code: false,
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
        self.process(false)
    }

    /// Flushes what is left and resets the styles.
    pub fn finish(&mut self) -> String {
        if !self.ansi {
            return String::new();
        }
        let mut out = self.process(true);
        if self.any_style() {
            out.push_str(RESET);
        }
        *self = MarkdownStream::new(self.ansi);
        out
    }

    fn any_style(&self) -> bool {
        self.code_block || self.heading || self.quote || self.bold || self.italic || self.code
    }

    fn sgr(&self) -> String {
        let mut codes: Vec<&str> = Vec::new();
        if self.code_block {
            codes.push("2");
        }
        if self.heading || self.bold {
            codes.push("1");
        }
        if self.heading {
            codes.push("4");
        }
        if self.italic || self.quote {
            codes.push("3");
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

    fn consume(&mut self, n_bytes: usize) {
        self.pending.drain(..n_bytes);
    }

    fn process(&mut self, last: bool) -> String {
        let mut out = String::new();
        while !self.pending.is_empty() {
            if self.at_line_start {
                if !self.line_prefix(last, &mut out) {
                    break;
                }
                continue;
            }
            let Some(c) = self.pending.chars().next() else {
                break;
            };
            if c == '\n' {
                let styled = self.any_style() && !self.code_block;
                self.heading = false;
                self.quote = false;
                self.bold = false;
                self.italic = false;
                self.code = false;
                if styled {
                    out.push_str(RESET);
                }
                if self.code_block {
                    out.push_str(RESET);
                }
                out.push('\n');
                self.at_line_start = true;
                self.consume(1);
                continue;
            }
            if self.code_block {
                out.push(c);
                self.consume(c.len_utf8());
                continue;
            }
            match c {
                '[' if !self.code => {
                    let line_end = self.pending.find('\n');
                    let line = &self.pending[..line_end.unwrap_or(self.pending.len())];
                    if let Some((text, url, len)) = parse_link(line) {
                        let (text, url) = (text.to_owned(), url.to_owned());
                        out.push_str("\x1b[4m");
                        out.push_str(&text);
                        out.push_str(&self.sgr());
                        out.push_str(&format!(" ({url})"));
                        self.consume(len);
                    } else if line_end.is_none() && !last && may_become_link(line) {
                        break;
                    } else {
                        out.push('[');
                        self.consume(1);
                    }
                }
                '`' => {
                    self.code = !self.code;
                    out.push_str(&self.sgr());
                    self.consume(1);
                }
                '*' if !self.code => {
                    if self.pending.starts_with("**") {
                        self.bold = !self.bold;
                        out.push_str(&self.sgr());
                        self.consume(2);
                    } else if self.pending.len() == 1 && !last {
                        break;
                    } else {
                        let next = self.pending[1..].chars().next();
                        let opens = !self.italic && next.is_some_and(|n| !n.is_whitespace());
                        if opens || self.italic {
                            self.italic = !self.italic;
                            out.push_str(&self.sgr());
                        } else {
                            out.push('*');
                        }
                        self.consume(1);
                    }
                }
                _ => {
                    out.push(c);
                    self.consume(c.len_utf8());
                }
            }
        }
        out
    }

    /// Handles the start of a line. Returns false when more text is needed to decide.
    fn line_prefix(&mut self, last: bool, out: &mut String) -> bool {
        let line_end = self.pending.find('\n');
        let line = match line_end {
            Some(i) => &self.pending[..i],
            None => self.pending.as_str(),
        };
        let complete = line_end.is_some() || last;
        let indent_len = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[indent_len..];
        let indent = line[..indent_len].to_owned();

        if !self.code_block && rest.starts_with('|') {
            // A table: wait for the whole block (up to the first line that is not a row), then align it.
            let mut end = 0;
            let mut rows = Vec::new();
            loop {
                let rest_text = &self.pending[end..];
                match rest_text.find('\n') {
                    Some(i) if rest_text[..i].trim_start().starts_with('|') => {
                        rows.push(rest_text[..i].to_owned());
                        end += i + 1;
                    }
                    Some(_) => break,
                    None if last => {
                        if rest_text.trim_start().starts_with('|') {
                            rows.push(rest_text.to_owned());
                            end += rest_text.len();
                        }
                        break;
                    }
                    None if rest_text.is_empty()
                        || rest_text.trim_start().starts_with('|')
                        || rest_text.trim().is_empty() =>
                    {
                        return false;
                    }
                    None => break,
                }
            }
            out.push_str(&render_table(&rows));
            self.consume(end);
            self.at_line_start = true;
            return true;
        }
        if self.code_block {
            if rest.starts_with("```") {
                if !complete {
                    return false;
                }
                let n = line.len();
                self.code_block = false;
                out.push_str(RESET);
                self.consume(n);
                // The newline (if any) is handled as a plain line end.
                self.at_line_start = false;
                return true;
            }
            if !complete && "```".starts_with(rest) {
                return false;
            }
            out.push_str(&self.sgr());
            out.push_str("  ");
            self.at_line_start = false;
            return true;
        }

        let only_markers = rest.chars().all(|c| {
            matches!(c, '#' | '-' | '*' | '+' | '>' | '`' | '_' | '.' | ')' | ' ') || c.is_ascii_digit()
        });
        if !complete && only_markers && line.len() < 12 {
            return false;
        }
        if rest.starts_with("```") {
            if !complete {
                return false;
            }
            let n = line.len();
            self.code_block = true;
            out.push_str(&self.sgr());
            self.consume(n);
            self.at_line_start = false;
            // Swallow the fence's newline so the block starts on the next line without a blank one.
            if self.pending.starts_with('\n') {
                self.consume(1);
                self.at_line_start = true;
            }
            return true;
        }
        let trimmed = rest.trim_end();
        if complete
            && trimmed.len() >= 3
            && (trimmed.chars().all(|c| c == '-')
                || trimmed.chars().all(|c| c == '*')
                || trimmed.chars().all(|c| c == '_'))
        {
            let n = line.len();
            out.push_str(&format!("\x1b[2m{}{RESET}", "─".repeat(40)));
            self.consume(n);
            self.at_line_start = false;
            return true;
        }
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        if (1..=6).contains(&hashes) && rest[hashes..].starts_with(' ') {
            self.heading = true;
            out.push_str(&indent);
            out.push_str(&self.sgr());
            self.consume(indent_len + hashes + 1);
            self.at_line_start = false;
            return true;
        }
        for bullet in ["- ", "* ", "+ "] {
            if rest.starts_with(bullet) {
                out.push_str(&indent);
                out.push_str("• ");
                self.consume(indent_len + 2);
                self.at_line_start = false;
                return true;
            }
        }
        if let Some(q) = rest.strip_prefix('>') {
            let skip = if q.starts_with(' ') { 2 } else { 1 };
            self.quote = true;
            out.push_str(&indent);
            out.push_str("\x1b[2m│\x1b[0m ");
            out.push_str(&self.sgr());
            self.consume(indent_len + skip);
            self.at_line_start = false;
            return true;
        }
        self.at_line_start = false;
        true
    }
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

/// `[text](url)` at the start of `line`: the text, the URL and the bytes taken.
fn parse_link(line: &str) -> Option<(&str, &str, usize)> {
    let close = line.find("](")?;
    let text = &line[1..close];
    if text.contains('[') || text.contains(']') {
        return None;
    }
    let url_start = close + 2;
    let url_len = line[url_start..].find(')')?;
    let url = &line[url_start..url_start + url_len];
    if url.is_empty() || url.contains(char::is_whitespace) {
        return None;
    }
    Some((text, url, url_start + url_len + 1))
}

/// True while an unfinished line starting with `[` could still turn out to be a link.
fn may_become_link(line: &str) -> bool {
    match line.find(']') {
        None => true,
        Some(i) => match line[i + 1..].chars().next() {
            None => true,
            Some('(') => !line[i + 1..].contains(')'),
            Some(_) => false,
        },
    }
}

/// The cells of a table row (`| a | b |`).
fn cells(row: &str) -> Vec<String> {
    let t = row.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|')
        .map(|c| c.trim().replace("**", "").replace('`', ""))
        .collect()
}

/// A Markdown table with aligned columns: the header bold, a rule under it, `│` between columns.
fn render_table(rows: &[String]) -> String {
    let is_rule = |r: &[String]| {
        !r.is_empty()
            && r.iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
    };
    let parsed: Vec<Vec<String>> = rows.iter().map(|r| cells(r)).collect();
    let has_header = parsed.get(1).is_some_and(|r| is_rule(r));
    let body: Vec<&Vec<String>> = parsed.iter().filter(|r| !is_rule(r)).collect();
    let columns = body.iter().map(|r| r.len()).max().unwrap_or(0);
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
}
