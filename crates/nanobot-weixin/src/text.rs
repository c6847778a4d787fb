//! The text of answers as 0.3.5 prepares it for WeChat: cleaned of what the client renders badly
//! ([`sanitize`]) and split at [`MAX_MESSAGE_CHARS`] ([`split_text`]), keeping code fences balanced per message.
//!
//! The cuts are 0.3.5's (`split_weixin_message`), not the shared splitter's: the last blank line, else the last
//! line break, else just after the last of `。！？；.!?;` or a space, else a hard cut. Chinese text has no spaces, so
//! its sentence marks matter.

use std::sync::LazyLock;

use regex::Regex;

/// The most characters (Unicode scalar values) of one text message (0.3.5's `WEIXIN_MAX_MESSAGE_LEN`).
pub const MAX_MESSAGE_CHARS: usize = 1800;

/// A fenced block, or an inline code span: left as they are.
#[allow(clippy::expect_used, reason = "a literal pattern")]
static CODE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(```[\s\S]*?```|`[^`\n]*`)").expect("a valid pattern"));
#[allow(clippy::expect_used, reason = "a literal pattern")]
static IMAGE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"!\[[^\]]*\]\([^)]*\)").expect("a valid pattern"));
#[allow(clippy::expect_used, reason = "a literal pattern")]
static DEEP_HEADING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^#{5,6}\s+").expect("a valid pattern"));

const FENCE: &str = "```";
const REOPEN: &str = "```\n";
const CLOSE: &str = "\n```";
/// Where a cut may fall after, when a piece has no line break (0.3.5's marks).
const SENTENCE_MARKS: [char; 9] = ['。', '！', '？', '；', '.', '!', '?', ';', ' '];

fn clean(text: &str) -> String {
    let text = IMAGE.replace_all(text, "");
    let text = text.replace('<', "＜").replace('>', "＞").replace("~~", "");
    DEEP_HEADING.replace_all(&text, "").into_owned()
}

/// `content` without what the WeChat client renders badly, outside code spans and fenced blocks (kept byte for
/// byte): Markdown images are removed, `<` and `>` become `＜` and `＞` (a bare angle bracket can hide the rest of
/// a message), `~~` is removed, and `#####` / `######` heading marks are dropped.
///
/// ```
/// use nanobot_weixin::sanitize;
///
/// assert_eq!(sanitize("a <b> ~~c~~ `<d>` ![x](y.png)"), "a ＜b＞ c `<d>` ");
/// ```
pub fn sanitize(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut last = 0;
    for m in CODE.find_iter(content) {
        out.push_str(&clean(&content[last..m.start()]));
        out.push_str(m.as_str());
        last = m.end();
    }
    out.push_str(&clean(&content[last..]));
    out
}

fn rfind(hay: &[char], needle: &[char]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| hay[i..i + needle.len()] == *needle)
}

/// Where 0.3.5 cuts `text` (longer than `available` characters): a character index within `1..=available`.
pub(crate) fn cut_index(text: &[char], available: usize) -> usize {
    let candidate = &text[..available.min(text.len())];
    if let Some(cut) = rfind(candidate, &['\n', '\n']).filter(|c| *c > 0) {
        return cut;
    }
    if let Some(cut) = rfind(candidate, &['\n']).filter(|c| *c > 0) {
        return cut;
    }
    candidate
        .iter()
        .rposition(|c| SENTENCE_MARKS.contains(c))
        .map_or(available, |p| p + 1)
}

fn count_fences(chars: &[char]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i + 3 <= chars.len() {
        if chars[i..i + 3] == ['`', '`', '`'] {
            n += 1;
            i += 3;
        } else {
            i += 1;
        }
    }
    n
}

/// `content` [`sanitize`]d, trimmed and split into messages of at most `max_chars` characters as 0.3.5 splits it:
/// at the last blank line, else the last line break, else just after the last of `。！？；.!?;` or a space, else a
/// hard cut (Chinese text has no spaces, so its sentence marks matter). A code fence left open by a cut is closed at
/// the end of its message and opened again at the start of the next. Nothing to send: no messages.
///
/// ```
/// use nanobot_weixin::split_text;
///
/// let text = format!("{}\n\n{}", "a".repeat(1000), "b".repeat(1000));
/// assert_eq!(split_text(&text, 1800), ["a".repeat(1000), "b".repeat(1000)]);
/// assert!(split_text("  ", 1800).is_empty());
/// ```
pub fn split_text(content: &str, max_chars: usize) -> Vec<String> {
    let content = sanitize(content);
    let content = content.trim();
    if content.is_empty() {
        return Vec::new();
    }
    let chars: Vec<char> = content.chars().collect();
    if max_chars == 0 || chars.len() <= max_chars {
        return vec![content.to_owned()];
    }
    let mut pieces = Vec::new();
    let mut rest: &[char] = &chars;
    let mut in_fence = false;
    while !rest.is_empty() {
        let prefix = if in_fence { REOPEN } else { "" };
        // Room for the "\n```" that closes a fence left open.
        let Some(available) = max_chars
            .checked_sub(prefix.len() + CLOSE.len())
            .filter(|a| *a > 0)
        else {
            return vec![content.to_owned()];
        };
        let raw = if rest.len() <= available {
            rest
        } else {
            &rest[..cut_index(rest, available)]
        };
        let after = &rest[raw.len()..];
        let skip = after.iter().take_while(|c| c.is_whitespace()).count();
        rest = &after[skip..];
        let next_in_fence = in_fence ^ (count_fences(raw) % 2 == 1);
        let mut rendered = String::from(prefix);
        rendered.push_str(raw.iter().collect::<String>().trim_end());
        if next_in_fence {
            rendered.push_str(CLOSE);
        }
        pieces.push(rendered);
        in_fence = next_in_fence;
    }
    pieces
}

/// Whether `text` leaves a code fence open (an odd number of ```` ``` ````).
pub(crate) fn leaves_fence_open(text: &str) -> bool {
    text.matches(FENCE).count() % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_keeps_code_and_cleans_the_rest() {
        assert_eq!(
            sanitize("x <y> `a<b>` ```\n<tag> ~~s~~\n``` ~~z~~"),
            "x ＜y＞ `a<b>` ```\n<tag> ~~s~~\n``` z"
        );
        assert_eq!(sanitize("see ![chart](c.png) now"), "see  now");
        assert_eq!(
            sanitize("##### five\n###### six\n#### four"),
            "five\nsix\n#### four"
        );
        assert_eq!(
            sanitize("`x`##### y"),
            "`x`y",
            "each part is cleaned on its own, as re.split gives it"
        );
        assert_eq!(sanitize(""), "");
    }

    #[test]
    fn short_text_is_one_trimmed_message() {
        assert_eq!(split_text("  hello \n", 1800), ["hello"]);
        assert!(split_text(" \n ", 1800).is_empty());
        assert_eq!(split_text("abc", 0), ["abc"], "no limit");
    }

    #[test]
    fn cuts_prefer_blank_lines_then_lines_then_sentence_marks() {
        let paragraphs = format!("{}\n\n{}\n{}", "a".repeat(10), "b".repeat(5), "c".repeat(5));
        assert_eq!(
            split_text(&paragraphs, 20),
            ["a".repeat(10), format!("{}\n{}", "b".repeat(5), "c".repeat(5))]
        );
        let lines = format!("{}\n{}", "a".repeat(10), "b".repeat(10));
        assert_eq!(split_text(&lines, 16), ["a".repeat(10), "b".repeat(10)]);
        let chinese = "这是第一句。这是第二句。这是第三句。";
        let cut = split_text(chinese, 12);
        assert_eq!(
            cut,
            ["这是第一句。", "这是第二句。", "这是第三句。"],
            "after the full stop"
        );
        assert_eq!(cut.concat(), chinese);
        let words = "one two three four five six";
        // Four characters stay free for a fence's closing line, as in 0.3.5.
        assert_eq!(split_text(words, 12), ["one two", "three", "four", "five six"]);
        let hard = "x".repeat(25);
        let cut = split_text(&hard, 12);
        assert_eq!(cut, ["x".repeat(8), "x".repeat(8), "x".repeat(8), "x".to_owned()]);
    }

    #[test]
    fn fences_are_closed_and_reopened() {
        let code: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let text = format!("intro\n```\n{code}```\nafter");
        let pieces = split_text(&text, 60);
        assert!(pieces.len() > 2, "{pieces:?}");
        for p in &pieces {
            assert!(p.chars().count() <= 60, "{p:?}");
            assert_eq!(p.matches("```").count() % 2, 0, "balanced: {p:?}");
        }
        // Exactly what 0.3.5's split_weixin_message gives for this text.
        assert_eq!(
            pieces[0],
            "intro\n```\nline 0\nline 1\nline 2\nline 3\nline 4\nline 5\n```"
        );
        assert_eq!(
            pieces[1],
            "```\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\n```"
        );
        assert_eq!(
            pieces[4],
            "```\nline 25\nline 26\nline 27\nline 28\nline 29\n```\nafter"
        );
        assert_eq!(pieces.len(), 5);
        let joined = pieces.join("\n");
        for i in 0..30 {
            assert!(joined.contains(&format!("line {i}")), "{i}");
        }
        assert!(leaves_fence_open("a ``` b") && !leaves_fence_open("```a```"));
    }

    #[test]
    fn long_text_within_the_limit_loses_nothing() {
        let para = "word ".repeat(300);
        let text = [para.trim(), para.trim(), para.trim()].join("\n\n");
        let pieces = split_text(&text, MAX_MESSAGE_CHARS);
        assert!(pieces.iter().all(|p| p.chars().count() <= MAX_MESSAGE_CHARS));
        assert_eq!(pieces.join(" ").split_whitespace().count(), 900);
    }
}
