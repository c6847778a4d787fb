//! Text helpers: `<think>` stripping (whole and streamed), tool hints, truncation.

use std::sync::LazyLock;

use nanobot_providers::ToolCall;
use regex::Regex;
use serde_json::Value;

static THINK_BLOCK: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?is)<think(?:ing)?>.*?</think(?:ing)?>").ok());
static THINK_OPEN_TO_END: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?is)<think(?:ing)?>.*\z").ok());
static THINK_ORPHAN_CLOSE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?is)\A.*?</think(?:ing)?>").ok());

/// Removes `<think>…</think>` blocks (also `<thinking>`), an unclosed `<think>` and everything after it, and an
/// orphan `</think>` with everything before it; trims the result.
pub(crate) fn strip_think(text: &str) -> String {
    // Every pattern needs a `think` tag: most answers have none, and then the regexes are never compiled.
    if !contains_ignore_ascii_case(text, b"think") {
        return text.trim().to_owned();
    }
    let mut out = text.to_owned();
    if let Some(re) = THINK_BLOCK.as_ref() {
        out = re.replace_all(&out, "").into_owned();
    }
    if let Some(re) = THINK_ORPHAN_CLOSE.as_ref() {
        out = re.replace(&out, "").into_owned();
    }
    if let Some(re) = THINK_OPEN_TO_END.as_ref() {
        out = re.replace(&out, "").into_owned();
    }
    out.trim().to_owned()
}

fn contains_ignore_ascii_case(haystack: &str, needle: &[u8]) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Strips think blocks from a stream of text deltas, holding back only what could be the start of a tag.
#[derive(Debug, Default)]
pub(crate) struct StreamThinkFilter {
    pending: String,
    in_think: bool,
    emitted_any: bool,
}

const OPEN_TAGS: [&str; 2] = ["<think>", "<thinking>"];
const CLOSE_TAGS: [&str; 2] = ["</think>", "</thinking>"];

impl StreamThinkFilter {
    /// Feeds a delta; returns the visible text it releases (possibly empty).
    pub(crate) fn push(&mut self, delta: &str) -> String {
        self.pending.push_str(delta);
        let mut out = String::new();
        loop {
            if self.in_think {
                match find_any(&self.pending, &CLOSE_TAGS) {
                    Some((pos, len)) => {
                        self.pending.drain(..pos + len);
                        self.in_think = false;
                    }
                    None => {
                        let keep = partial_suffix(&self.pending, &CLOSE_TAGS);
                        let cut = self.pending.len() - keep;
                        self.pending.drain(..cut);
                        break;
                    }
                }
            } else {
                match find_any(&self.pending, &OPEN_TAGS) {
                    Some((pos, len)) => {
                        out.push_str(&self.pending[..pos]);
                        self.pending.drain(..pos + len);
                        self.in_think = true;
                    }
                    None => {
                        // An orphan closing tag: drop everything seen before it.
                        if let Some((pos, len)) = find_any(&self.pending, &CLOSE_TAGS) {
                            self.pending.drain(..pos + len);
                            out.clear();
                            continue;
                        }
                        let keep = partial_suffix(&self.pending, &OPEN_TAGS)
                            .max(partial_suffix(&self.pending, &CLOSE_TAGS));
                        let cut = self.pending.len() - keep;
                        out.push_str(&self.pending[..cut]);
                        self.pending.drain(..cut);
                        break;
                    }
                }
            }
        }
        if !self.emitted_any {
            let trimmed = out.trim_start();
            if trimmed.is_empty() {
                return String::new();
            }
            out = trimmed.to_owned();
            self.emitted_any = true;
        }
        out
    }

    /// Releases whatever was held back at the end of the stream (never text inside an unclosed think).
    pub(crate) fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        if self.in_think { String::new() } else { rest }
    }
}

fn find_any(hay: &str, needles: &[&str]) -> Option<(usize, usize)> {
    let lower = hay.to_ascii_lowercase();
    needles
        .iter()
        .filter_map(|n| lower.find(n).map(|p| (p, n.len())))
        .min_by_key(|(p, _)| *p)
}

/// Length of the longest suffix of `hay` that is a proper prefix of one of `needles`.
fn partial_suffix(hay: &str, needles: &[&str]) -> usize {
    let lower = hay.to_ascii_lowercase();
    let mut best = 0;
    for n in needles {
        for len in (1..n.len()).rev() {
            if len <= lower.len()
                && lower.is_char_boundary(lower.len() - len)
                && n.starts_with(&lower[lower.len() - len..])
            {
                best = best.max(len);
                break;
            }
        }
    }
    best
}

/// `name("first argument")`, the argument cut to `max_len` characters: what users see while a tool runs.
///
/// ```
/// use nanobot_core::tool_hint;
/// use nanobot_providers::ToolCall;
/// let call = ToolCall::new("c1", "web_search", serde_json::json!({"query": "rust async"}));
/// assert_eq!(tool_hint(&call, 40), "web_search(\"rust async\")");
/// ```
pub fn tool_hint(call: &ToolCall, max_len: usize) -> String {
    let first = match &call.arguments {
        Value::Object(map) => map.values().find_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }),
        _ => None,
    };
    match first {
        Some(arg) => {
            let arg = arg.replace('\n', " ");
            let shown = truncate_chars(&arg, max_len.max(1));
            format!("{}(\"{}\")", call.name, shown)
        }
        None => call.name.clone(),
    }
}

/// `text` cut to at most `max` characters, with `…` when cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_blocks_unclosed_and_orphans() {
        assert_eq!(strip_think("a<think>x</think>b<THINK>y</THINK>c"), "abc");
        assert_eq!(strip_think("<thinking>\nlong\n</thinking>\n\nAnswer"), "Answer");
        assert_eq!(strip_think("start <think> dangling"), "start");
        assert_eq!(strip_think("leak </think>real"), "real");
        assert_eq!(strip_think("plain"), "plain");
        // The no-tag shortcut: mixed case still reaches the regexes; text without a tag is only trimmed.
        assert_eq!(strip_think("<ThInKiNg>x</tHiNkInG> Hi"), "Hi");
        assert_eq!(strip_think("x </Think> y"), "y");
        assert_eq!(strip_think("  I think so.  "), "I think so.");
        assert_eq!(strip_think("  thin  "), "thin");
    }

    #[test]
    fn stream_filter_handles_split_tags() {
        let mut f = StreamThinkFilter::default();
        let mut out = String::new();
        for piece in ["<th", "ink>sec", "ret</thi", "nk>Hel", "lo <", "b>x"] {
            out.push_str(&f.push(piece));
        }
        out.push_str(&f.finish());
        assert_eq!(out, "Hello <b>x");
    }

    #[test]
    fn stream_filter_never_leaks_unclosed_think() {
        let mut f = StreamThinkFilter::default();
        let mut out = f.push("Hi <think>secret");
        out.push_str(&f.push(" more"));
        out.push_str(&f.finish());
        assert_eq!(out, "Hi ");
    }

    #[test]
    fn hints_are_cut() {
        let call = ToolCall::new(
            "c",
            "exec",
            serde_json::json!({"command": "a very long command line here"}),
        );
        assert_eq!(tool_hint(&call, 6), "exec(\"a very…\")");
        let bare = ToolCall::new("c", "list_dir", serde_json::json!({}));
        assert_eq!(tool_hint(&bare, 6), "list_dir");
    }
}
