//! The context budget: token estimates (`cl100k_base` as 0.3.5 counts, loaded lazily, with a character heuristic) and trimming a
//! conversation so it fits, without ever separating a tool call from its result.

use std::borrow::Borrow;
use std::collections::HashSet;

use nanobot_providers::{ChatMessage, Content, ContentPart, ToolSpec};

use crate::tokenizer::Cl100k;

/// Tokens charged per message for role and framing.
const PER_MESSAGE_OVERHEAD: usize = 4;
/// Tokens charged per image part (a rough, provider-independent figure).
const IMAGE_TOKENS: usize = 800;
/// Tool results shorter than this many characters are never replaced by a placeholder.
const LARGE_RESULT_CHARS: usize = 400;

/// Texts up to this many bytes are counted exactly; longer ones on samples ([`TokenEstimator::count_text`]).
const EXACT_BYTES: usize = 256 * 1024;
/// The tokenizer is run on pieces of at most this many bytes.
const PIECE_BYTES: usize = 8 * 1024;

/// The consecutive pieces of `text[from..to]` of at most [`PIECE_BYTES`], cut at character boundaries (`from`
/// is moved forward to one). A cut inside a word costs at most one token of accuracy per piece.
fn pieces(text: &str, from: usize, to: usize) -> impl Iterator<Item = &str> {
    let mut at = (from..=to).find(|&i| text.is_char_boundary(i)).unwrap_or(to);
    std::iter::from_fn(move || {
        if at >= to {
            return None;
        }
        let mut end = (at + PIECE_BYTES).min(to);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == at {
            // A character longer than a piece cannot happen (4 bytes at most); end at the next boundary anyway.
            end = (at + 1..=to).find(|&i| text.is_char_boundary(i)).unwrap_or(to);
        }
        let piece = &text[at..end];
        at = end;
        Some(piece)
    })
}

/// A cheap upper-bound-ish estimate: one token per 3 bytes (tokens are ~4 bytes for English, fewer for code and
/// non-Latin scripts).
fn heuristic_tokens(text: &str) -> usize {
    text.len().div_ceil(3)
}

/// The bytes of text in `m` (what [`message_text_len`] would gather) and its images, without copying the text:
/// the heuristic needs only the length, and it runs over the whole history at every model call.
fn message_len(m: &ChatMessage) -> (usize, usize) {
    let content_len = |c: &Content, images: &mut usize| match c {
        Content::Text(t) => t.len(),
        Content::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => text.len(),
                ContentPart::ImageUrl { .. } => {
                    *images += 1;
                    0
                }
                ContentPart::Other(v) => v.to_string().len(),
            })
            .sum(),
    };
    let mut images = 0;
    let len = match m {
        ChatMessage::System { content } | ChatMessage::User { content } => content_len(content, &mut images),
        ChatMessage::Tool { content, name, .. } => {
            content_len(content, &mut images) + name.as_ref().map_or(0, String::len)
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
            reasoning_content,
            ..
        } => {
            content.as_ref().map_or(0, String::len)
                + reasoning_content.as_ref().map_or(0, String::len)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments_json().len())
                    .sum::<usize>()
        }
    };
    (len, images)
}

fn message_text_len(m: &ChatMessage) -> (String, usize) {
    let mut images = 0;
    let mut text = String::new();
    let push_content = |c: &Content, text: &mut String, images: &mut usize| match c {
        Content::Text(t) => text.push_str(t),
        Content::Parts(parts) => {
            for p in parts {
                match p {
                    ContentPart::Text { text: t } => text.push_str(t),
                    ContentPart::ImageUrl { .. } => *images += 1,
                    ContentPart::Other(v) => text.push_str(&v.to_string()),
                }
            }
        }
    };
    match m {
        ChatMessage::System { content } | ChatMessage::User { content } => {
            push_content(content, &mut text, &mut images)
        }
        ChatMessage::Tool { content, name, .. } => {
            push_content(content, &mut text, &mut images);
            if let Some(n) = name {
                text.push_str(n);
            }
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
            reasoning_content,
            ..
        } => {
            if let Some(c) = content {
                text.push_str(c);
            }
            if let Some(r) = reasoning_content {
                text.push_str(r);
            }
            for c in tool_calls {
                text.push_str(&c.name);
                text.push_str(&c.arguments_json());
            }
        }
    }
    (text, images)
}

/// Token estimator: the character heuristic when it is clearly enough, `cl100k_base` otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokenEstimator;

impl TokenEstimator {
    /// Heuristic token count of the messages and tool definitions (never loads the tokenizer).
    pub(crate) fn rough(&self, messages: &[ChatMessage], tools: &[impl Borrow<ToolSpec>]) -> usize {
        self.rough_messages(messages) + self.rough_tools(tools)
    }

    /// Heuristic token count of the messages alone.
    pub(crate) fn rough_messages(&self, messages: &[ChatMessage]) -> usize {
        messages
            .iter()
            .map(|m| {
                let (len, images) = message_len(m);
                len.div_ceil(3) + images * IMAGE_TOKENS + PER_MESSAGE_OVERHEAD
            })
            .sum()
    }

    /// Heuristic token count of tool definitions (serialises every schema: callers holding a registry use
    /// `ToolRegistry::definitions_rough_tokens`, which measures each schema once).
    pub(crate) fn rough_tools(&self, tools: &[impl Borrow<ToolSpec>]) -> usize {
        tools
            .iter()
            .map(|t| {
                let t = t.borrow();
                heuristic_tokens(&t.name)
                    + heuristic_tokens(&t.description)
                    + serde_json::to_vec(&t.parameters)
                        .map_or(0, |v| v.len())
                        .div_ceil(3)
            })
            .sum()
    }

    /// Tokens of one text with the tokenizer (falls back to the heuristic). The cost is bounded whatever the
    /// text: it is tokenized in pieces of at most 8 KiB (byte-pair merging slows down more than linearly on a long
    /// run without spaces: 19 MB of one letter took 23 s whole), and a text longer than 256 KiB is counted on 32
    /// evenly spaced pieces, scaled to its length.
    pub(crate) fn count_text(&self, text: &str) -> usize {
        match Cl100k::get() {
            Some(bpe) => {
                let count = |piece: &str| bpe.count(piece);
                if text.len() <= EXACT_BYTES {
                    return pieces(text, 0, text.len()).map(count).sum();
                }
                let n = EXACT_BYTES / PIECE_BYTES;
                let stride = text.len() / n;
                let (mut bytes, mut tokens) = (0usize, 0usize);
                for i in 0..n {
                    if let Some(piece) = pieces(text, i * stride, text.len()).next() {
                        bytes += piece.len();
                        tokens += count(piece);
                    }
                }
                if bytes == 0 {
                    return heuristic_tokens(text);
                }
                // Scaled in u128: len × tokens cannot overflow.
                usize::try_from((text.len() as u128 * tokens as u128).div_ceil(bytes as u128))
                    .unwrap_or(usize::MAX)
            }
            None => heuristic_tokens(text),
        }
    }

    /// Tokens of one message (tokenizer; heuristic fallback).
    pub(crate) fn message(&self, m: &ChatMessage) -> usize {
        let (text, images) = message_text_len(m);
        self.count_text(&text) + images * IMAGE_TOKENS + PER_MESSAGE_OVERHEAD
    }

    /// Tokens of the tool definitions.
    pub(crate) fn tools(&self, tools: &[impl Borrow<ToolSpec>]) -> usize {
        tools
            .iter()
            .map(|t| {
                let t = t.borrow();
                self.count_text(&t.name)
                    + self.count_text(&t.description)
                    + self.count_text(&t.parameters.to_string())
            })
            .sum()
    }
}

/// How many input tokens a request may use: `contextWindowTokens − maxTokens − safety margin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextBudget {
    /// The model's context window.
    pub context_window_tokens: usize,
    /// Tokens reserved for the answer.
    pub max_output_tokens: usize,
    /// Extra headroom for estimation error.
    pub safety_margin: usize,
}

impl ContextBudget {
    /// A budget with a safety margin of 5 % of the window (at least 256 tokens).
    pub fn new(context_window_tokens: usize, max_output_tokens: usize) -> Self {
        Self {
            context_window_tokens,
            max_output_tokens,
            safety_margin: (context_window_tokens / 20).max(256),
        }
    }

    /// Tokens available for the input.
    pub fn input_budget(&self) -> usize {
        self.context_window_tokens
            .saturating_sub(self.max_output_tokens)
            .saturating_sub(self.safety_margin)
            .max(1)
    }

    /// `messages` made to fit: first the oldest large results of read-only tools (named in `read_only`) are
    /// replaced by a one-line placeholder, then the oldest history is dropped down to a legal tail (the system
    /// message stays, the tail starts at a user message, no tool result is separated from its call). The last
    /// user message and everything after it are always kept. Returns the messages unchanged when they fit.
    pub fn fit(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        read_only: &HashSet<String>,
    ) -> Vec<ChatMessage> {
        self.fit_with_rough_tools(messages, tools, TokenEstimator.rough_tools(tools), read_only)
    }

    /// [`ContextBudget::fit`] with the tools' heuristic token count given (`tools_rough`, e.g. from
    /// `ToolRegistry::definitions_rough_tokens`), so the schemas are not serialised again for the cheap check.
    /// `tools` are specs or shared specs (`Arc<ToolSpec>`, as `ToolRegistry::definitions` gives them).
    pub fn fit_with_rough_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[impl Borrow<ToolSpec>],
        tools_rough: usize,
        read_only: &HashSet<String>,
    ) -> Vec<ChatMessage> {
        if self.fits_roughly(messages, tools_rough) {
            return messages.to_vec();
        }
        self.fit_owned(messages.to_vec(), tools, read_only)
    }

    /// True when `messages` and tools of `tools_rough` heuristic tokens fit by the character heuristic, which
    /// over-estimates: such messages need no trimming, and the tokenizer is never loaded for them.
    pub fn fits_roughly(&self, messages: &[ChatMessage], tools_rough: usize) -> bool {
        TokenEstimator.rough_messages(messages) + tools_rough <= self.input_budget()
    }

    /// [`ContextBudget::fit`] of messages the caller owns (no copy of them), past the cheap check
    /// ([`ContextBudget::fits_roughly`]): counted with the tokenizer, then trimmed if they do not fit.
    pub fn fit_owned(
        &self,
        mut out: Vec<ChatMessage>,
        tools: &[impl Borrow<ToolSpec>],
        read_only: &HashSet<String>,
    ) -> Vec<ChatMessage> {
        let budget = self.input_budget();
        let est = TokenEstimator;
        let tool_tokens = est.tools(tools);
        let mut sizes: Vec<usize> = out.iter().map(|m| est.message(m)).collect();
        let total = |sizes: &[usize]| sizes.iter().sum::<usize>() + tool_tokens;
        if total(&sizes) <= budget {
            return out;
        }
        let protect_from = last_user_index(&out).unwrap_or(out.len());
        // 1. Placeholders for old, large read-only results (oldest first, never in the current turn).
        for i in 0..protect_from {
            if total(&sizes) <= budget {
                return out;
            }
            if let ChatMessage::Tool {
                tool_call_id,
                name,
                content,
            } = &out[i]
            {
                let tool = name.clone().unwrap_or_default();
                if read_only.contains(&tool) && content.text().chars().count() > LARGE_RESULT_CHARS {
                    let placeholder = ChatMessage::Tool {
                        tool_call_id: tool_call_id.clone(),
                        name: name.clone(),
                        content: Content::Text(format!(
                            "[{tool} result omitted to fit the context window; call the tool again if you need it]"
                        )),
                    };
                    sizes[i] = est.message(&placeholder);
                    out[i] = placeholder;
                }
            }
        }
        if total(&sizes) <= budget {
            return out;
        }
        // 2. Drop the oldest history: find the earliest legal start (a user message) that fits.
        let system_end = out
            .iter()
            .take_while(|m| matches!(m, ChatMessage::System { .. }))
            .count();
        let system_tokens: usize = sizes[..system_end].iter().sum();
        let mut start = system_end;
        let mut tail_tokens: usize = sizes[system_end..].iter().sum();
        let candidates: Vec<usize> = (system_end..out.len())
            .filter(|&i| matches!(out[i], ChatMessage::User { .. }))
            .collect();
        for &cand in &candidates {
            if cand > protect_from {
                break;
            }
            tail_tokens -= sizes[start..cand].iter().sum::<usize>();
            start = cand;
            if system_tokens + tail_tokens + tool_tokens <= budget {
                break;
            }
        }
        out.drain(system_end..start);
        drop_orphan_results(out)
    }
}

fn last_user_index(messages: &[ChatMessage]) -> Option<usize> {
    messages
        .iter()
        .rposition(|m| matches!(m, ChatMessage::User { .. }))
}

/// Removes tool results whose call is not in the assistant message directly before their run of results.
pub(crate) fn drop_orphan_results(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut open: HashSet<String> = HashSet::new();
    for m in messages {
        match &m {
            ChatMessage::Assistant { tool_calls, .. } => {
                open = tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(m);
            }
            ChatMessage::Tool { tool_call_id, .. } => {
                if open.remove(tool_call_id) {
                    out.push(m);
                }
            }
            _ => {
                open.clear();
                out.push(m);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_without_copies_is_the_length_of_the_gathered_text() {
        let msgs = [
            ChatMessage::system("sys ü"),
            ChatMessage::user("hello"),
            ChatMessage::user_parts(vec![
                ContentPart::text("look"),
                ContentPart::ImageUrl {
                    url: "data:image/png;base64,AAAA".into(),
                    detail: None,
                },
                ContentPart::Other(serde_json::json!({"type": "input_audio", "x": 1})),
            ]),
            ChatMessage::tool_result("c1", "read_file", "contents".to_owned()),
            ChatMessage::assistant("done"),
        ];
        for m in &msgs {
            let (text, images) = message_text_len(m);
            assert_eq!(message_len(m), (text.len(), images), "{m:?}");
        }
    }
    use nanobot_providers::ToolCall;
    use serde_json::json;

    /// Text of about `chars` characters that tokenizes like prose (repeated letters would compress).
    fn words(chars: usize) -> String {
        let mut s = String::new();
        let mut k = 0;
        while s.len() < chars {
            s.push_str(&format!("w{k} "));
            k += 1;
        }
        s
    }

    fn turn(i: usize, big: usize) -> Vec<ChatMessage> {
        vec![
            ChatMessage::user(format!("question {i}")),
            ChatMessage::assistant_tool_calls(
                None,
                vec![ToolCall::new(format!("c{i}"), "read_file", json!({"path": "a"}))],
            ),
            ChatMessage::tool_result(format!("c{i}"), "read_file", words(big)),
            ChatMessage::assistant(format!("answer {i}")),
        ]
    }

    fn assert_no_orphans(msgs: &[ChatMessage]) {
        let mut open: HashSet<String> = HashSet::new();
        for m in msgs {
            match m {
                ChatMessage::Assistant { tool_calls, .. } => {
                    open = tool_calls.iter().map(|c| c.id.clone()).collect()
                }
                ChatMessage::Tool { tool_call_id, .. } => {
                    assert!(open.remove(tool_call_id), "orphan {tool_call_id}")
                }
                _ => open.clear(),
            }
        }
    }

    #[test]
    fn pieces_cover_the_text_at_character_boundaries() {
        let text = format!("{}é{}", "a".repeat(PIECE_BYTES - 1), "日本".repeat(5000));
        let parts: Vec<&str> = pieces(&text, 0, text.len()).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= PIECE_BYTES));
        // From inside a character: starts at the next boundary.
        let from = PIECE_BYTES; // inside "é"
        assert!(!text.is_char_boundary(from));
        assert_eq!(
            pieces(&text, from, text.len()).collect::<String>(),
            &text[from + 1..]
        );
    }

    #[test]
    fn long_texts_are_counted_close_to_the_exact_count() {
        let bpe = tiktoken_rs::cl100k_base().unwrap();
        for text in [
            words(3 * EXACT_BYTES),
            format!(
                "{}{}",
                words(EXACT_BYTES),
                "Grüße aus Köln. 東京の天気 ".repeat(40_000)
            ),
            words(EXACT_BYTES - 10),
        ] {
            let exact = bpe.encode_ordinary(&text).len();
            let counted = TokenEstimator.count_text(&text);
            let off = exact.abs_diff(counted) as f64 / exact as f64;
            assert!(
                off < 0.05,
                "{} bytes: exact {exact}, counted {counted}",
                text.len()
            );
        }
        assert_eq!(TokenEstimator.count_text(""), 0);
    }

    #[test]
    fn fitting_conversation_is_untouched_and_tokenizer_not_needed() {
        let mut msgs = vec![ChatMessage::system("sys")];
        msgs.extend(turn(0, 10));
        let b = ContextBudget::new(100_000, 1000);
        assert_eq!(b.fit(&msgs, &[], &HashSet::new()), msgs);
    }

    #[test]
    fn large_read_only_results_become_placeholders_first() {
        let mut msgs = vec![ChatMessage::system("sys")];
        for i in 0..4 {
            msgs.extend(turn(i, 6000));
        }
        msgs.push(ChatMessage::user("now"));
        let ro: HashSet<String> = ["read_file".to_string()].into();
        let b = ContextBudget {
            context_window_tokens: 6000,
            max_output_tokens: 500,
            safety_margin: 100,
        };
        let out = b.fit(&msgs, &[], &ro);
        assert_eq!(out.len(), msgs.len(), "placeholders suffice, nothing dropped");
        assert!(out.iter().any(|m| m.text().contains("omitted to fit")));
        assert_no_orphans(&out);
    }

    #[test]
    fn trimming_keeps_a_legal_tail() {
        let mut msgs = vec![ChatMessage::system("sys")];
        for i in 0..6 {
            msgs.extend(turn(i, 3000));
        }
        msgs.push(ChatMessage::user("current"));
        // Not read-only: placeholders are not allowed, history must be dropped.
        let b = ContextBudget {
            context_window_tokens: 3000,
            max_output_tokens: 200,
            safety_margin: 100,
        };
        let out = b.fit(&msgs, &[], &HashSet::new());
        assert!(out.len() < msgs.len());
        assert!(matches!(out[0], ChatMessage::System { .. }));
        assert!(
            matches!(out[1], ChatMessage::User { .. }),
            "tail starts at a user message"
        );
        assert_eq!(out.last().map(ChatMessage::text).as_deref(), Some("current"));
        assert_no_orphans(&out);
    }

    #[test]
    fn orphan_results_are_dropped() {
        let msgs = vec![
            ChatMessage::user("q"),
            ChatMessage::tool_result("ghost", "exec", "x"),
            ChatMessage::assistant_tool_calls(None, vec![ToolCall::new("a", "exec", json!({}))]),
            ChatMessage::tool_result("a", "exec", "ok"),
            ChatMessage::tool_result("a", "exec", "dup"),
        ];
        let out = drop_orphan_results(msgs);
        assert_eq!(out.len(), 3);
        assert_no_orphans(&out);
    }
}
