//! Markdown (as LLMs write it) → the markup each platform understands.
//!
//! Both converters walk CommonMark events (pulldown-cmark), so code spans and blocks are never re-interpreted,
//! every tag they open is closed, intraword underscores (`snake_case_names`) stay text, and anything that
//! looks like HTML in the input is escaped rather than passed through.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Markdown → the HTML subset Telegram's `parse_mode=HTML` accepts (`b`, `i`, `s`, `code`, `pre`, `a`,
/// `blockquote`). Headings become bold lines, lists become `•`/`1.` lines, tables become `a | b` lines.
///
/// If Telegram still rejects the result, send the original Markdown as plain text.
pub fn markdown_to_telegram_html(markdown: &str) -> String {
    render(markdown, Flavor::TelegramHtml)
}

/// Markdown → Slack `mrkdwn` (`*bold*`, `_italic_`, `~strike~`, `<url|text>`, `•` lists; `&`, `<`, `>` escaped).
pub fn markdown_to_slack_mrkdwn(markdown: &str) -> String {
    render(markdown, Flavor::SlackMrkdwn)
}

/// Markdown → plain text: markup removed, links written as `text (url)`, code kept verbatim.
pub fn strip_markdown(markdown: &str) -> String {
    render(markdown, Flavor::Plain)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    TelegramHtml,
    SlackMrkdwn,
    Plain,
}

struct Renderer {
    flavor: Flavor,
    out: String,
    /// Numbering of the open lists (`None` = bullets).
    lists: Vec<Option<u64>>,
    /// Destinations of the open links (Slack and plain text write them at the end).
    links: Vec<(String, usize)>,
    in_code_block: bool,
    table_cell: usize,
}

fn render(markdown: &str, flavor: Flavor) -> String {
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    let mut r = Renderer {
        flavor,
        out: String::with_capacity(markdown.len() + markdown.len() / 4),
        lists: Vec::new(),
        links: Vec::new(),
        in_code_block: false,
        table_cell: 0,
    };
    for event in Parser::new_ext(markdown, options) {
        r.event(event);
    }
    let trimmed_len = r.out.trim_end().len();
    r.out.truncate(trimmed_len);
    r.out
}

impl Renderer {
    fn escape(&mut self, text: &str) {
        match self.flavor {
            Flavor::Plain => self.out.push_str(text),
            Flavor::TelegramHtml | Flavor::SlackMrkdwn => {
                for c in text.chars() {
                    match c {
                        '&' => self.out.push_str("&amp;"),
                        '<' => self.out.push_str("&lt;"),
                        '>' => self.out.push_str("&gt;"),
                        c => self.out.push(c),
                    }
                }
            }
        }
    }

    fn markup(&mut self, telegram: &str, slack: &str) {
        match self.flavor {
            Flavor::TelegramHtml => self.out.push_str(telegram),
            Flavor::SlackMrkdwn => self.out.push_str(slack),
            Flavor::Plain => {}
        }
    }

    /// Ends the current line and leaves one blank line, unless the output is empty or already ends so.
    fn block_break(&mut self) {
        if self.out.is_empty() || self.out.ends_with("<blockquote>") || self.out.ends_with("> ") {
            return;
        }
        while !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    fn line_break(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.escape(&text),
            Event::Code(code) => {
                self.markup("<code>", "`");
                if self.flavor == Flavor::Plain {
                    self.out.push_str(&code);
                } else {
                    self.escape(&code);
                }
                self.markup("</code>", "`");
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => self.escape(&t),
            // Raw HTML from the model is shown as text, never interpreted.
            Event::Html(t) | Event::InlineHtml(t) => self.escape(&t),
            Event::FootnoteReference(t) => {
                self.out.push('[');
                self.escape(&t);
                self.out.push(']');
            }
            Event::SoftBreak | Event::HardBreak => self.out.push('\n'),
            Event::Rule => {
                self.block_break();
                self.out.push_str("──────────");
                self.block_break();
            }
            Event::TaskListMarker(done) => self.out.push_str(if done { "☑ " } else { "☐ " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => {
                if self.lists.is_empty() {
                    self.block_break();
                }
            }
            Tag::Heading { .. } => {
                self.block_break();
                self.markup("<b>", "*");
            }
            Tag::BlockQuote(_) => {
                self.block_break();
                self.markup("<blockquote>", "> ");
            }
            Tag::CodeBlock(kind) => {
                self.block_break();
                self.in_code_block = true;
                let lang = match &kind {
                    CodeBlockKind::Fenced(lang) => lang.split_whitespace().next().unwrap_or(""),
                    CodeBlockKind::Indented => "",
                };
                match self.flavor {
                    Flavor::TelegramHtml if !lang.is_empty() => {
                        self.out.push_str("<pre><code class=\"language-");
                        let lang: String = lang
                            .chars()
                            .filter(|c| c.is_ascii_alphanumeric() || "+-_#.".contains(*c))
                            .collect();
                        self.out.push_str(&lang);
                        self.out.push_str("\">");
                    }
                    Flavor::TelegramHtml => self.out.push_str("<pre><code>"),
                    Flavor::SlackMrkdwn => self.out.push_str("```\n"),
                    Flavor::Plain => {}
                }
            }
            Tag::List(start) => {
                if self.lists.is_empty() {
                    self.block_break();
                } else {
                    self.line_break();
                }
                self.lists.push(start);
            }
            Tag::Item => {
                self.line_break();
                let depth = self.lists.len().saturating_sub(1);
                self.out.push_str(&"  ".repeat(depth));
                match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let label = format!("{n}. ");
                        *n += 1;
                        self.out.push_str(&label);
                    }
                    _ => self.out.push_str("• "),
                }
            }
            Tag::Emphasis => self.markup("<i>", "_"),
            Tag::Strong => self.markup("<b>", "*"),
            Tag::Strikethrough => self.markup("<s>", "~"),
            Tag::Link { dest_url, .. } => match self.flavor {
                Flavor::TelegramHtml => {
                    self.out.push_str("<a href=\"");
                    let url = dest_url
                        .replace('&', "&amp;")
                        .replace('"', "&quot;")
                        .replace('<', "&lt;");
                    self.out.push_str(&url);
                    self.out.push_str("\">");
                }
                Flavor::SlackMrkdwn | Flavor::Plain => {
                    let at = self.out.len();
                    self.links.push((dest_url.to_string(), at));
                }
            },
            Tag::Image { dest_url, .. } => {
                let at = self.out.len();
                self.links.push((dest_url.to_string(), at));
            }
            Tag::Table(_) => self.block_break(),
            Tag::TableHead | Tag::TableRow => {
                self.line_break();
                self.table_cell = 0;
            }
            Tag::TableCell => {
                if self.table_cell > 0 {
                    self.out.push_str(" | ");
                }
                self.table_cell += 1;
            }
            Tag::FootnoteDefinition(_)
            | Tag::HtmlBlock
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_)
            | Tag::Superscript
            | Tag::Subscript => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph if self.lists.is_empty() => self.block_break(),
            TagEnd::Heading(_) => {
                self.markup("</b>", "*");
                self.block_break();
            }
            TagEnd::BlockQuote(_) => {
                let trimmed = self.out.trim_end().len();
                self.out.truncate(trimmed);
                self.markup("</blockquote>", "");
                self.block_break();
            }
            TagEnd::CodeBlock => {
                self.in_code_block = false;
                if self.out.ends_with('\n') {
                    self.out.pop();
                }
                match self.flavor {
                    Flavor::TelegramHtml => self.out.push_str("</code></pre>"),
                    Flavor::SlackMrkdwn => self.out.push_str("\n```"),
                    Flavor::Plain => {}
                }
                self.block_break();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.block_break();
                }
            }
            TagEnd::Item => self.line_break(),
            TagEnd::Emphasis => self.markup("</i>", "_"),
            TagEnd::Strong => self.markup("</b>", "*"),
            TagEnd::Strikethrough => self.markup("</s>", "~"),
            TagEnd::Link => match self.flavor {
                Flavor::TelegramHtml => self.out.push_str("</a>"),
                Flavor::SlackMrkdwn | Flavor::Plain => self.close_link(),
            },
            TagEnd::Image => self.close_link(),
            TagEnd::Table => self.block_break(),
            TagEnd::TableHead | TagEnd::TableRow => self.line_break(),
            _ => {}
        }
    }

    /// Rewrites the text of the link that just closed as `<url|text>` (Slack) or `text (url)`.
    fn close_link(&mut self) {
        let Some((url, at)) = self.links.pop() else { return };
        let text = self.out.split_off(at);
        match self.flavor {
            Flavor::SlackMrkdwn => {
                self.out.push('<');
                self.out.push_str(
                    &url.replace('&', "&amp;")
                        .replace('<', "&lt;")
                        .replace('>', "&gt;"),
                );
                if !text.is_empty() && text != url {
                    self.out.push('|');
                    self.out.push_str(&text.replace('|', "¦"));
                }
                self.out.push('>');
            }
            Flavor::TelegramHtml => {
                // Images: Telegram cannot inline them, so show a link.
                self.out.push_str("<a href=\"");
                self.out.push_str(
                    &url.replace('&', "&amp;")
                        .replace('"', "&quot;")
                        .replace('<', "&lt;"),
                );
                self.out.push_str("\">");
                self.out.push_str(if text.is_empty() { "image" } else { &text });
                self.out.push_str("</a>");
            }
            Flavor::Plain => {
                if text.is_empty() || text == url {
                    self.out.push_str(&url);
                } else {
                    self.out.push_str(&text);
                    self.out.push_str(" (");
                    self.out.push_str(&url);
                    self.out.push(')');
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every tag opened in `html` is closed in order, that only Telegram's tags appear, and that no
    /// bare `<` or `&` is left (the same checks Telegram's parser makes).
    pub(crate) fn check_telegram_html(html: &str) -> Result<(), String> {
        const ALLOWED: &[&str] = &["b", "i", "s", "u", "code", "pre", "a", "blockquote", "tg-spoiler"];
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find(['<', '&']) {
            let tail = &rest[i..];
            if tail.starts_with('&') {
                let end = tail.find(';').ok_or_else(|| format!("bare & at {tail:?}"))?;
                let entity = &tail[1..end];
                if !matches!(entity, "amp" | "lt" | "gt" | "quot") {
                    return Err(format!("unknown entity &{entity};"));
                }
                rest = &tail[end + 1..];
                continue;
            }
            let end = tail
                .find('>')
                .ok_or_else(|| format!("unclosed tag at {tail:?}"))?;
            let inner = &tail[1..end];
            if let Some(name) = inner.strip_prefix('/') {
                let open = stack
                    .pop()
                    .ok_or_else(|| format!("</{name}> without opening tag"))?;
                if open != name {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
            } else {
                let name = inner.split_whitespace().next().unwrap_or("");
                if !ALLOWED.contains(&name) {
                    return Err(format!("tag <{name}> not allowed"));
                }
                if inner.contains('<') || inner.matches('"').count() % 2 == 1 {
                    return Err(format!("malformed tag <{inner}>"));
                }
                stack.push(name.to_string());
            }
            rest = &tail[end + 1..];
        }
        if let Some(open) = stack.pop() {
            return Err(format!("<{open}> never closed"));
        }
        Ok(())
    }

    #[test]
    fn telegram_table() {
        let cases: &[(&str, &str)] = &[
            ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
            ("*it* and _it_", "<i>it</i> and <i>it</i>"),
            (
                "call my_snake_case_fn and __init__ now",
                "call my_snake_case_fn and <b>init</b> now",
            ),
            (
                "use `a<b && c>d` here",
                "use <code>a&lt;b &amp;&amp; c&gt;d</code> here",
            ),
            ("x < y & z > w", "x &lt; y &amp; z &gt; w"),
            ("~~gone~~", "<s>gone</s>"),
            (
                "[site](https://e.com/?a=1&b=\"2\")",
                "<a href=\"https://e.com/?a=1&amp;b=&quot;2&quot;\">site</a>",
            ),
            ("# Title\ntext", "<b>Title</b>\n\ntext"),
            ("- one\n- two", "• one\n• two"),
            ("1. one\n2. two", "1. one\n2. two"),
            ("- a\n  - b", "• a\n  • b"),
            (
                "```rust\nfn f() -> Vec<u8> { **x** }\n```",
                "<pre><code class=\"language-rust\">fn f() -&gt; Vec&lt;u8&gt; { **x** }</code></pre>",
            ),
            (
                "```\n`nested` ``code``\n```",
                "<pre><code>`nested` ``code``</code></pre>",
            ),
            (
                "<script>alert(1)</script>",
                "&lt;script&gt;alert(1)&lt;/script&gt;",
            ),
            ("> quoted", "<blockquote>quoted</blockquote>"),
            ("line1\nline2", "line1\nline2"),
            ("**bold `code` _it_**", "<b>bold <code>code</code> <i>it</i></b>"),
        ];
        for (md, want) in cases {
            let got = markdown_to_telegram_html(md);
            assert_eq!(&got, want, "input {md:?}");
            check_telegram_html(&got).unwrap_or_else(|e| panic!("{md:?} → {got:?}: {e}"));
        }
    }

    #[test]
    fn telegram_html_stays_balanced_on_messy_input() {
        let inputs = [
            "**unclosed bold and `code",
            "_a_b_c_ **x*y** ***z***",
            "```\nunterminated fence <b> & stuff",
            "[link with **bold** and `code`](http://x?a<b)",
            "> quote\n> - list in quote\n> ```\n> code\n> ```",
            "| a | b |\n|---|---|\n| <1> | & |",
            "text with </b> stray closing and <i>opening",
            "nested *italic **bold** italic* done",
            "* item `x<y`\n\n  continued <&>\n* second",
            "![img](http://i.png) and <http://auto.link>",
        ];
        for md in inputs {
            let html = markdown_to_telegram_html(md);
            check_telegram_html(&html).unwrap_or_else(|e| panic!("{md:?} → {html:?}: {e}"));
        }
    }

    #[test]
    fn the_checker_rejects_bad_html() {
        assert!(check_telegram_html("<b>x").is_err());
        assert!(check_telegram_html("<b><i>x</b></i>").is_err());
        assert!(check_telegram_html("a & b").is_err());
        assert!(check_telegram_html("<div>x</div>").is_err());
        assert!(check_telegram_html("<b>a &amp; <a href=\"x\">l</a></b>").is_ok());
    }

    #[test]
    fn slack_table() {
        let cases: &[(&str, &str)] = &[
            ("**bold** _it_ ~~s~~", "*bold* _it_ ~s~"),
            ("my_var_name", "my_var_name"),
            ("[docs](https://d.io)", "<https://d.io|docs>"),
            ("<https://d.io>", "<https://d.io>"),
            ("a < b & c", "a &lt; b &amp; c"),
            ("# Head", "*Head*"),
            ("- x\n- y", "• x\n• y"),
            ("```js\nlet a = 1 < 2;\n```", "```\nlet a = 1 &lt; 2;\n```"),
            ("`x`", "`x`"),
        ];
        for (md, want) in cases {
            assert_eq!(&markdown_to_slack_mrkdwn(md), want, "input {md:?}");
        }
    }

    #[test]
    fn plain_text_drops_markup() {
        assert_eq!(strip_markdown("**a** [b](http://c) `d<e`"), "a b (http://c) d<e");
    }
}
