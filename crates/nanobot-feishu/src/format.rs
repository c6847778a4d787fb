//! Which Feishu message type shows a reply best, as 0.3.5 chooses it: plain `text` for short unformatted text, a
//! `post` (rich text) for links and for longer unformatted text, an `interactive` card for Markdown that only a card
//! renders (code, tables, headings, emphasis, lists) and for long text.

use serde_json::{Value, json};

/// Longest reply sent as plain text (0.3.5's `_TEXT_MAX_LEN`).
const TEXT_MAX_CHARS: usize = 200;
/// Longest reply sent as a post (0.3.5's `_POST_MAX_LEN`); beyond it, a card.
const POST_MAX_CHARS: usize = 2000;

/// The message type of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Post,
    Card,
}

/// Chooses the message type for `text`.
pub(crate) fn detect(text: &str) -> Format {
    let t = text.trim();
    let lines: Vec<&str> = t.lines().collect();
    let heading = |l: &&str| {
        let hashes = l.chars().take_while(|c| *c == '#').count();
        (1..=6).contains(&hashes) && l[hashes..].starts_with(char::is_whitespace)
    };
    let table = lines.windows(2).any(|w| {
        let (head, rule) = (w[0].trim(), w[1].trim());
        head.starts_with('|')
            && head.len() > 1
            && rule.starts_with('|')
            && rule.contains('-')
            && rule.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ' | '\t'))
    });
    if t.contains("```") || lines.iter().any(heading) || table {
        return Format::Card;
    }
    if t.chars().count() > POST_MAX_CHARS {
        return Format::Card;
    }
    if has_emphasis(t) || lines.iter().any(|l| is_list_item(l)) {
        return Format::Card;
    }
    if !links(t).is_empty() {
        return Format::Post;
    }
    if t.chars().count() <= TEXT_MAX_CHARS {
        Format::Text
    } else {
        Format::Post
    }
}

/// `**bold**`, `__bold__`, `~~strike~~`, or `*italic*` with single stars.
fn has_emphasis(t: &str) -> bool {
    let paired = |marker: &str| {
        t.find(marker)
            .is_some_and(|i| t[i + marker.len()..].find(marker).is_some_and(|j| j > 0))
    };
    if paired("**") || paired("__") || paired("~~") {
        return true;
    }
    let chars: Vec<char> = t.chars().collect();
    let single = (0..chars.len())
        .filter(|&i| {
            chars[i] == '*' && (i == 0 || chars[i - 1] != '*') && chars.get(i + 1).is_some_and(|c| *c != '*')
        })
        .count();
    single >= 2
}

/// `- item`, `* item`, `+ item` or `1. item`.
fn is_list_item(line: &str) -> bool {
    let l = line.trim_start();
    if ["- ", "* ", "+ ", "-\t", "*\t", "+\t"]
        .iter()
        .any(|m| l.starts_with(m))
    {
        return true;
    }
    let digits = l.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && l[digits..].starts_with(". ")
}

/// The Markdown links `[text](http(s)://…)` of `line`: (start, end, text, url) by byte offsets.
fn links(line: &str) -> Vec<(usize, usize, &str, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = line[from..].find('[').map(|i| i + from) {
        let Some(close) = line[open + 1..].find(']').map(|i| i + open + 1) else {
            break;
        };
        let text = &line[open + 1..close];
        let rest = &line[close + 1..];
        let url_end = rest
            .strip_prefix('(')
            .and_then(|r| r.find(')').map(|i| (i, &r[..i])));
        match url_end {
            Some((len, url))
                if !text.is_empty()
                    && (url.starts_with("http://") || url.starts_with("https://"))
                    && url.len() > "https://".len() =>
            {
                let end = close + 1 + 1 + len + 1;
                out.push((open, end, text, url));
                from = end;
            }
            _ => from = open + 1,
        }
    }
    out
}

/// The content of a `post` message for `text`: one paragraph per line, links as `a` elements (0.3.5's
/// `_markdown_to_post`).
pub(crate) fn post_content(text: &str) -> String {
    let paragraphs: Vec<Value> = text
        .trim()
        .split('\n')
        .map(|line| {
            let mut elements = Vec::new();
            let mut last = 0;
            for (start, end, label, url) in links(line) {
                if start > last {
                    elements.push(json!({"tag": "text", "text": &line[last..start]}));
                }
                elements.push(json!({"tag": "a", "text": label, "href": url}));
                last = end;
            }
            if last < line.len() || elements.is_empty() {
                elements.push(json!({"tag": "text", "text": &line[last..]}));
            }
            Value::Array(elements)
        })
        .collect();
    json!({"zh_cn": {"content": paragraphs}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_nanobot() {
        assert_eq!(detect("hello there"), Format::Text);
        assert_eq!(
            detect(&"plain words ".repeat(30)),
            Format::Post,
            "longer plain text"
        );
        assert_eq!(detect(&"x".repeat(2001)), Format::Card, "long text");
        assert_eq!(detect("see [the docs](https://example.com/a)"), Format::Post);
        assert_eq!(
            detect("see [x](ftp://x) and [y](z)"),
            Format::Text,
            "not web links"
        );
        for card in [
            "**bold**",
            "a *word* here",
            "~~gone~~",
            "1. one\n2. two",
            "- a\n- b",
            "# Title\nbody",
            "```\ncode\n```",
            "| a | b |\n|---|---|\n| 1 | 2 |",
            "[link](https://x.io) and **bold**",
        ] {
            assert_eq!(detect(card), Format::Card, "{card:?}");
        }
        assert_eq!(detect("see chapter 2. then stop"), Format::Text);
        assert_eq!(detect("#hashtag and 3 * 4 = 12"), Format::Text);
    }

    #[test]
    fn posts_carry_links_as_anchors() {
        let post: Value = serde_json::from_str(&post_content(
            "Read [the guide](https://example.com/g) now.\n\nThen [ask](http://x.io/q).",
        ))
        .unwrap();
        assert_eq!(
            post["zh_cn"]["content"],
            json!([
                [{"tag": "text", "text": "Read "}, {"tag": "a", "text": "the guide", "href": "https://example.com/g"},
                 {"tag": "text", "text": " now."}],
                [{"tag": "text", "text": ""}],
                [{"tag": "text", "text": "Then "}, {"tag": "a", "text": "ask", "href": "http://x.io/q"},
                 {"tag": "text", "text": "."}]
            ])
        );
        let odd: Value = serde_json::from_str(&post_content("a [b] (c) [d](e) ]")).unwrap();
        assert_eq!(
            odd["zh_cn"]["content"],
            json!([[{"tag": "text", "text": "a [b] (c) [d](e) ]"}]])
        );
    }
}
