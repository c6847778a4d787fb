//! Markdown as Signal shows it: plain text plus text styles (`start:length:STYLE`, in UTF-16 code units as Signal's
//! body ranges count), and the styles of each piece of a split message.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const BOLD: &str = "BOLD";
const ITALIC: &str = "ITALIC";
const STRIKE: &str = "STRIKETHROUGH";
const MONO: &str = "MONOSPACE";

/// A style over `[start, end)` of the text, in UTF-16 code units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) style: &'static str,
}

impl Range {
    /// As signal-cli's `textStyle` takes it.
    pub(crate) fn param(&self) -> String {
        format!("{}:{}:{}", self.start, self.end - self.start, self.style)
    }
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

#[derive(Default)]
struct Out {
    text: String,
    at: usize,
    ranges: Vec<Range>,
    styles: Vec<&'static str>,
}

impl Out {
    fn push(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        let len = utf16_len(s);
        for style in &self.styles {
            match self.ranges.iter_mut().rev().find(|r| r.style == *style) {
                Some(r) if r.end == self.at => r.end += len,
                _ => self.ranges.push(Range {
                    start: self.at,
                    end: self.at + len,
                    style,
                }),
            }
        }
        self.text.push_str(s);
        self.at += len;
    }

    fn plain(&mut self, s: &str) {
        let styles = std::mem::take(&mut self.styles);
        self.push(s);
        self.styles = styles;
    }

    fn open(&mut self, style: &'static str) {
        self.styles.push(style);
    }

    fn close(&mut self, style: &'static str) {
        if let Some(i) = self.styles.iter().rposition(|s| *s == style) {
            self.styles.remove(i);
        }
    }

    /// Ends a block: a line break (two after a paragraph), none at the start.
    fn block_end(&mut self, breaks: usize) {
        if self.text.is_empty() {
            return;
        }
        let have = self.text.chars().rev().take_while(|c| *c == '\n').count();
        for _ in have..breaks {
            self.plain("\n");
        }
    }
}

/// `markdown` as Signal shows it: the text and its styles (bold and headings `BOLD`, emphasis `ITALIC`,
/// strikethrough, code spans, code blocks and tables `MONOSPACE`; links as `text (url)`, list items with `• ` or
/// their number).
pub(crate) fn to_signal(markdown: &str) -> (String, Vec<Range>) {
    let mut out = Out::default();
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut link: Option<(String, usize)> = None;
    let mut cells = 0usize;
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Strong => out.open(BOLD),
                Tag::Heading { .. } => {
                    out.block_end(1);
                    out.open(BOLD);
                }
                Tag::Emphasis => out.open(ITALIC),
                Tag::Strikethrough => out.open(STRIKE),
                Tag::CodeBlock(_) => {
                    out.block_end(1);
                    out.open(MONO);
                }
                Tag::Table(_) => {
                    out.block_end(1);
                    out.open(MONO);
                }
                Tag::TableRow | Tag::TableHead => cells = 0,
                Tag::TableCell => {
                    if cells > 0 {
                        out.push(" | ");
                    }
                    cells += 1;
                }
                Tag::List(first) => {
                    out.block_end(1);
                    lists.push(first);
                }
                Tag::Item => {
                    out.block_end(1);
                    let depth = lists.len().saturating_sub(1);
                    out.plain(&"  ".repeat(depth));
                    match lists.last_mut() {
                        Some(Some(n)) => {
                            let marker = format!("{n}. ");
                            *n += 1;
                            out.plain(&marker);
                        }
                        _ => out.plain("• "),
                    }
                }
                Tag::Link { dest_url, .. } => link = Some((dest_url.to_string(), out.text.len())),
                Tag::Image { dest_url, .. } => link = Some((dest_url.to_string(), out.text.len())),
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Strong => out.close(BOLD),
                TagEnd::Heading(_) => {
                    out.close(BOLD);
                    out.block_end(1);
                }
                TagEnd::Emphasis => out.close(ITALIC),
                TagEnd::Strikethrough => out.close(STRIKE),
                TagEnd::CodeBlock => {
                    out.close(MONO);
                    out.block_end(1);
                }
                TagEnd::Table => {
                    out.close(MONO);
                    out.block_end(1);
                }
                TagEnd::TableRow | TagEnd::TableHead => out.push("\n"),
                TagEnd::List(_) => {
                    lists.pop();
                    out.block_end(1);
                }
                TagEnd::Item => out.block_end(1),
                TagEnd::Paragraph => out.block_end(if lists.is_empty() { 2 } else { 1 }),
                TagEnd::BlockQuote(_) => out.block_end(1),
                TagEnd::Link | TagEnd::Image => {
                    if let Some((url, from)) = link.take() {
                        let shown = out.text[from..].to_owned();
                        let bare = |u: &str| {
                            u.trim_start_matches("https://")
                                .trim_start_matches("http://")
                                .trim_start_matches("www.")
                                .trim_end_matches('/')
                                .to_lowercase()
                        };
                        if shown.is_empty() {
                            out.plain(&url);
                        } else if bare(&shown) != bare(&url) {
                            out.plain(&format!(" ({url})"));
                        }
                    }
                }
                _ => {}
            },
            Event::Text(t) => out.push(&t),
            Event::Code(t) => {
                out.open(MONO);
                out.push(&t);
                out.close(MONO);
            }
            Event::Html(t) | Event::InlineHtml(t) => out.push(&t),
            Event::SoftBreak | Event::HardBreak => out.push("\n"),
            Event::Rule => {
                out.block_end(1);
                out.plain("———\n");
            }
            Event::TaskListMarker(done) => out.plain(if done { "[x] " } else { "[ ] " }),
            _ => {}
        }
    }
    let trimmed_len = out.text.trim_end().len();
    let cut = utf16_len(&out.text[trimmed_len..]);
    out.text.truncate(trimmed_len);
    let end = out.at - cut;
    let mut ranges: Vec<Range> = out
        .ranges
        .into_iter()
        .filter_map(|mut r| {
            r.end = r.end.min(end);
            (r.end > r.start).then_some(r)
        })
        .collect();
    ranges.sort_by_key(|r| (r.start, r.style));
    (out.text, ranges)
}

/// The styles of each of `pieces` (consecutive parts of `text`, as a splitter cut it, blanks at the cuts
/// dropped), re-based to the piece: a style over a cut is split.
pub(crate) fn per_piece(text: &str, pieces: &[String], ranges: &[Range]) -> Vec<Vec<Range>> {
    let mut cursor = 0;
    let mut spans = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let at = text[cursor..].find(piece.as_str()).map_or(cursor, |i| cursor + i);
        let start = utf16_len(&text[..at]);
        spans.push((start, start + utf16_len(piece)));
        cursor = at + piece.len();
    }
    spans
        .into_iter()
        .map(|(from, to)| {
            ranges
                .iter()
                .filter(|r| r.end > from && r.start < to)
                .map(|r| Range {
                    start: r.start.max(from) - from,
                    end: r.end.min(to) - from,
                    style: r.style,
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(md: &str) -> (String, Vec<String>) {
        let (text, ranges) = to_signal(md);
        (text, ranges.iter().map(Range::param).collect())
    }

    #[test]
    fn markdown_becomes_text_and_styles() {
        assert_eq!(
            shown("**bold** reply"),
            ("bold reply".into(), vec!["0:4:BOLD".into()])
        );
        assert_eq!(
            shown("a *b* ~~c~~ `d`"),
            (
                "a b c d".into(),
                vec![
                    "2:1:ITALIC".into(),
                    "4:1:STRIKETHROUGH".into(),
                    "6:1:MONOSPACE".into()
                ]
            )
        );
        assert_eq!(shown("***both***").1, ["0:4:BOLD", "0:4:ITALIC"]);
        assert_eq!(
            shown("# Title\n\ntext"),
            ("Title\ntext".into(), vec!["0:5:BOLD".into()])
        );
        assert_eq!(shown("- one\n- two").0, "• one\n• two");
        assert_eq!(shown("3. a\n4. b").0, "3. a\n4. b");
        assert_eq!(shown("[docs](https://x.org/d)").0, "docs (https://x.org/d)");
        assert_eq!(shown("[https://x.org](https://x.org/)").0, "https://x.org");
        assert_eq!(shown("```\nlet a = 1;\n```").1, ["0:10:MONOSPACE"]);
        assert_eq!(shown("para one\n\npara two").0, "para one\n\npara two");
        assert_eq!(shown("").0, "");
    }

    #[test]
    fn offsets_count_utf16_units() {
        // An emoji outside the BMP is two UTF-16 units.
        assert_eq!(shown("😀 **b**").1, ["3:1:BOLD"]);
    }

    #[test]
    fn styles_follow_their_pieces() {
        let (text, ranges) = to_signal("**aaaa bbbb** cccc");
        let pieces = vec!["aaaa".to_owned(), "bbbb cccc".to_owned()];
        let per = per_piece(&text, &pieces, &ranges);
        assert_eq!(per[0].iter().map(Range::param).collect::<Vec<_>>(), ["0:4:BOLD"]);
        assert_eq!(per[1].iter().map(Range::param).collect::<Vec<_>>(), ["0:4:BOLD"]);
    }
}
