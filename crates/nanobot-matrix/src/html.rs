//! Markdown → the HTML Matrix clients show (`format: org.matrix.custom.html`).
//!
//! 0.3.5 renders with mistune and then cleans the result with nh3 (a tag and scheme allow-list). Here the HTML is
//! written from the Markdown's events, so it can only ever contain the allowed tags: text is always escaped, raw
//! HTML in the Markdown is shown as text, links keep only `http`, `https`, `matrix` and `mailto` targets, and
//! images only `mxc://` sources (an image elsewhere becomes a link to it).

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// The `format` of a message with a `formatted_body`.
pub const MATRIX_HTML_FORMAT: &str = "org.matrix.custom.html";

fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

fn link_allowed(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["https://", "http://", "matrix:", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
}

/// A code block's `class`, as nh3 keeps it: `language-<name>` of a safe name.
fn language_class(info: &str) -> Option<String> {
    let lang = info.split_whitespace().next()?;
    (!lang.starts_with('_')
        && lang
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '.' | '#')))
    .then(|| format!("language-{lang}"))
}

/// What an open link or image turned into, so its end closes it right.
enum Open {
    /// `<a href>` written: close with `</a>`.
    Anchor,
    /// The link's target was refused: only its text is shown.
    Bare,
    /// `<img>`: its alt text is collected, nothing is written until the end.
    Image { src: String, title: String, alt: String },
    /// An image that is not on the homeserver: a link to it, with the alt text.
    ImageLink,
}

struct Writer {
    out: String,
    links: Vec<Open>,
    in_table_head: bool,
    table_body_open: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        if let Some(Open::Image { alt, .. }) = self.links.last_mut() {
            alt.push_str(text);
        } else {
            escape(&mut self.out, text);
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        let out = &mut self.out;
        match tag {
            Tag::Paragraph => out.push_str("<p>"),
            Tag::Heading { level, .. } => {
                out.push_str(&format!("<{level}>"));
            }
            Tag::BlockQuote(_) => out.push_str("<blockquote>\n"),
            Tag::CodeBlock(kind) => {
                let class = match kind {
                    CodeBlockKind::Fenced(info) => language_class(&info),
                    CodeBlockKind::Indented => None,
                };
                match class {
                    Some(class) => {
                        out.push_str("<pre><code class=\"");
                        escape(out, &class);
                        out.push_str("\">");
                    }
                    None => out.push_str("<pre><code>"),
                }
            }
            Tag::List(Some(1)) => out.push_str("<ol>\n"),
            Tag::List(Some(start)) => out.push_str(&format!("<ol start=\"{start}\">\n")),
            Tag::List(None) => out.push_str("<ul>\n"),
            Tag::Item => out.push_str("<li>"),
            Tag::Table(_) => {
                self.table_body_open = false;
                out.push_str("<table>\n");
            }
            Tag::TableHead => {
                self.in_table_head = true;
                out.push_str("<thead>\n<tr>");
            }
            Tag::TableRow => {
                if !self.table_body_open {
                    self.table_body_open = true;
                    out.push_str("<tbody>\n");
                }
                out.push_str("<tr>");
            }
            Tag::TableCell => out.push_str(if self.in_table_head { "<th>" } else { "<td>" }),
            Tag::Emphasis => out.push_str("<em>"),
            Tag::Strong => out.push_str("<strong>"),
            Tag::Strikethrough => out.push_str("<del>"),
            Tag::Superscript => out.push_str("<sup>"),
            Tag::Subscript => out.push_str("<sub>"),
            Tag::Link { dest_url, .. } => {
                if link_allowed(&dest_url) {
                    out.push_str("<a href=\"");
                    escape(out, dest_url.trim());
                    out.push_str("\">");
                    self.links.push(Open::Anchor);
                } else {
                    self.links.push(Open::Bare);
                }
            }
            Tag::Image { dest_url, title, .. } => {
                if dest_url.trim().to_ascii_lowercase().starts_with("mxc://") {
                    self.links.push(Open::Image {
                        src: dest_url.trim().to_owned(),
                        title: title.to_string(),
                        alt: String::new(),
                    });
                } else if link_allowed(&dest_url) {
                    out.push_str("<a href=\"");
                    escape(out, dest_url.trim());
                    out.push_str("\">");
                    self.links.push(Open::ImageLink);
                } else {
                    self.links.push(Open::Bare);
                }
            }
            // Footnotes, definition lists, metadata and raw HTML blocks: their text only.
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        let out = &mut self.out;
        match tag {
            TagEnd::Paragraph => out.push_str("</p>\n"),
            TagEnd::Heading(level) => out.push_str(&format!("</{level}>\n")),
            TagEnd::BlockQuote(_) => out.push_str("</blockquote>\n"),
            TagEnd::CodeBlock => out.push_str("</code></pre>\n"),
            TagEnd::List(true) => out.push_str("</ol>\n"),
            TagEnd::List(false) => out.push_str("</ul>\n"),
            TagEnd::Item => out.push_str("</li>\n"),
            TagEnd::Table => {
                if self.table_body_open {
                    out.push_str("</tbody>\n");
                }
                out.push_str("</table>\n");
            }
            TagEnd::TableHead => {
                self.in_table_head = false;
                out.push_str("</tr>\n</thead>\n");
            }
            TagEnd::TableRow => out.push_str("</tr>\n"),
            TagEnd::TableCell => out.push_str(if self.in_table_head { "</th>" } else { "</td>" }),
            TagEnd::Emphasis => out.push_str("</em>"),
            TagEnd::Strong => out.push_str("</strong>"),
            TagEnd::Strikethrough => out.push_str("</del>"),
            TagEnd::Superscript => out.push_str("</sup>"),
            TagEnd::Subscript => out.push_str("</sub>"),
            TagEnd::Link | TagEnd::Image => match self.links.pop() {
                Some(Open::Anchor | Open::ImageLink) => out.push_str("</a>"),
                Some(Open::Image { src, title, alt }) => {
                    out.push_str("<img src=\"");
                    escape(out, &src);
                    out.push_str("\" alt=\"");
                    escape(out, &alt);
                    if !title.is_empty() {
                        out.push_str("\" title=\"");
                        escape(out, &title);
                    }
                    out.push_str("\" />");
                }
                Some(Open::Bare) | None => {}
            },
            _ => {}
        }
    }
}

/// The Markdown `text` as Matrix HTML, or `None` when it is plain text (one paragraph without markup), as 0.3.5
/// leaves `formatted_body` out then.
///
/// ```
/// use nanobot_matrix::render_html;
///
/// assert_eq!(render_html("just words"), None);
/// assert_eq!(render_html("**bold** <b>raw</b>").as_deref(), Some("<p><strong>bold</strong> &lt;b&gt;raw&lt;/b&gt;</p>"));
/// assert_eq!(render_html("[x](javascript:alert(1))"), None, "a refused link is its text");
/// ```
pub fn render_html(text: &str) -> Option<String> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_SUPERSCRIPT
        | Options::ENABLE_SUBSCRIPT;
    let mut w = Writer {
        out: String::with_capacity(text.len() + text.len() / 4),
        links: Vec::new(),
        in_table_head: false,
        table_body_open: false,
    };
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(tag) => w.start(tag),
            Event::End(tag) => w.end(tag),
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => w.text(&t),
            Event::InlineMath(t) | Event::DisplayMath(t) => w.text(&t),
            Event::Code(code) => {
                w.out.push_str("<code>");
                escape(&mut w.out, &code);
                w.out.push_str("</code>");
            }
            Event::SoftBreak => w.text("\n"),
            Event::HardBreak => w.out.push_str("<br />\n"),
            Event::Rule => w.out.push_str("<hr />\n"),
            Event::TaskListMarker(done) => w.text(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(name) => {
                w.text("[");
                w.text(&name);
                w.text("]");
            }
        }
    }
    let html = w.out.trim().to_owned();
    let plain = html
        .strip_prefix("<p>")
        .and_then(|h| h.strip_suffix("</p>"))
        .is_some_and(|inner| !inner.contains(['<', '>']));
    (!html.is_empty() && !plain).then_some(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_has_no_html() {
        assert_eq!(render_html(""), None);
        assert_eq!(render_html("hello there"), None);
        assert_eq!(
            render_html("a & b"),
            None,
            "an entity is no markup (as 0.3.5 decides)"
        );
    }

    #[test]
    fn the_allowed_markup_is_rendered() {
        let html = render_html(
            "# Title\n\n*it* **bold** ~~gone~~ `x<y` water ~two~ and ^ten^\n\n> quoted\n\n3. three\n4. four\n\n- a\n- b\n\n\
             ```rust\nfn main() {}\n```\n\n---\n\n[site](https://example.org) ![pic](mxc://h/abc \"t\")",
        )
        .unwrap();
        for part in [
            "<h1>Title</h1>",
            "<em>it</em>",
            "<strong>bold</strong>",
            "<del>gone</del>",
            "<code>x&lt;y</code>",
            "<sub>two</sub>",
            "<sup>ten</sup>",
            "<blockquote>\n<p>quoted</p>\n</blockquote>",
            "<ol start=\"3\">",
            "<ul>\n<li>a</li>",
            "<pre><code class=\"language-rust\">fn main() {}\n</code></pre>",
            "<hr />",
            "<a href=\"https://example.org\">site</a>",
            "<img src=\"mxc://h/abc\" alt=\"pic\" title=\"t\" />",
        ] {
            assert!(html.contains(part), "{part} missing in {html}");
        }
    }

    #[test]
    fn tables_have_a_head_and_a_body() {
        let html = render_html("| a | b |\n|---|---|\n| 1 | 2 |\n").unwrap();
        assert_eq!(
            html,
            "<table>\n<thead>\n<tr><th>a</th><th>b</th></tr>\n</thead>\n<tbody>\n<tr><td>1</td><td>2</td></tr>\n\
             </tbody>\n</table>"
        );
    }

    #[test]
    fn nothing_unsafe_gets_through() {
        let html = render_html(
            "<script>alert(1)</script>\n\n[a](javascript:alert(1)) [b](data:text/html,x) ![c](https://evil/x.png) \
             ![d](file:///etc/passwd) <img src=x onerror=alert(1)> [e](\"onclick=x)\n\n```\"><script>\nx\n```",
        )
        .unwrap();
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(
            !html.contains("javascript:") || !html.contains("href=\"javascript"),
            "{html}"
        );
        assert!(!html.contains("href=\"data:"), "{html}");
        assert!(!html.contains("file:///etc/passwd\""), "{html}");
        assert!(
            html.contains("<a href=\"https://evil/x.png\">c</a>"),
            "a remote image is a link: {html}"
        );
        let tags: Vec<&str> = html
            .split('<')
            .skip(1)
            .map(|t| {
                t.trim_start_matches('/')
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .next()
                    .unwrap_or_default()
            })
            .collect();
        const ALLOWED: &[&str] = &[
            "p",
            "a",
            "strong",
            "em",
            "del",
            "code",
            "pre",
            "blockquote",
            "ul",
            "ol",
            "li",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "hr",
            "br",
            "table",
            "thead",
            "tbody",
            "tr",
            "th",
            "td",
            "caption",
            "sup",
            "sub",
            "img",
        ];
        for tag in tags {
            assert!(ALLOWED.contains(&tag), "<{tag}> in {html}");
        }
    }
}
