//! Splitting long replies into messages a platform accepts.

/// Telegram's limit we split at (the API allows 4096 UTF-16 units; the margin leaves room for markup).
pub const TELEGRAM_LIMIT: usize = 4000;
/// Discord's message limit.
pub const DISCORD_LIMIT: usize = 2000;
/// Slack's practical limit for one `chat.postMessage` text.
pub const SLACK_LIMIT: usize = 39_000;

/// Below this limit code fences are not re-opened (there would be no room for the fence lines).
const MIN_FENCE_AWARE_LIMIT: usize = 32;
const FENCE_CLOSE: &str = "\n```";

/// Splits `text` into pieces of at most `limit` characters (Unicode scalar values).
///
/// Each cut prefers the last newline within the limit, then the last space, then a hard cut. A cut that would
/// fall inside a fenced code block (```` ``` ````) moves to just before the block when that leaves something
/// to send; when a block alone is longer than the limit it is cut at a line break and the fence is closed at
/// the end of one piece and re-opened (with its language) at the start of the next, so every piece renders on
/// its own. Whitespace at a cut is dropped; empty pieces are never returned.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let mut pieces = Vec::new();
    let mut rest = text.trim_end().to_string();
    loop {
        let trimmed = rest.trim_start_matches(['\n', '\r']);
        if trimmed.len() != rest.len() {
            rest = trimmed.to_string();
        }
        if rest.is_empty() {
            break;
        }
        if rest.chars().count() <= limit {
            pieces.push(rest);
            break;
        }
        let (piece, next) = cut_once(&rest, limit);
        if !piece.trim().is_empty() {
            pieces.push(piece);
        }
        rest = next;
    }
    pieces
}

/// Cuts one piece off the front of `s` (which is longer than `limit` characters).
fn cut_once(s: &str, limit: usize) -> (String, String) {
    let end = byte_index_of_char(s, limit);
    let (cut, skip) = preferred_cut(s, end);
    if limit < MIN_FENCE_AWARE_LIMIT {
        return plain_cut(s, cut, skip);
    }
    match open_fence_at(s, cut) {
        None => plain_cut(s, cut, skip),
        Some(fence) if fence.start > 0 => {
            // Send what precedes the code block; the block starts the next piece.
            (
                s[..fence.start].trim_end().to_string(),
                s[fence.start..].to_string(),
            )
        }
        Some(fence) if fence.line.chars().count() + 1 < limit / 2 => {
            // The block alone is too long: cut inside it, leaving room to close the fence.
            let end = byte_index_of_char(s, limit - FENCE_CLOSE.len());
            let (mut cut, mut skip) = preferred_cut(s, end);
            if cut <= fence.line.len() {
                (cut, skip) = (end, 0);
            }
            let mut piece = s[..cut].trim_end().to_string();
            piece.push_str(FENCE_CLOSE);
            let mut next = fence.line.clone();
            next.push('\n');
            next.push_str(&s[cut + skip..]);
            (piece, next)
        }
        Some(_) => plain_cut(s, cut, skip),
    }
}

fn plain_cut(s: &str, cut: usize, skip: usize) -> (String, String) {
    (s[..cut].trim_end().to_string(), s[cut + skip..].to_string())
}

/// The best cut at or before byte `end`: `(cut, bytes to skip after it)`.
///
/// A newline is preferred, then a space, but only in the second half of the window: cutting at a newline near
/// the start would send a tiny first piece ("Heading" alone) followed by a full one.
fn preferred_cut(s: &str, end: usize) -> (usize, usize) {
    let window = &s[..end];
    let half = end / 2;
    if let Some(i) = window.rfind('\n').filter(|&i| i > 0 && i >= half) {
        return (i, 1);
    }
    if let Some(i) = window.rfind(' ').filter(|&i| i > 0 && i >= half) {
        return (i, 1);
    }
    if let Some(i) = window.rfind('\n').filter(|&i| i > 0) {
        return (i, 1);
    }
    (end, 0)
}

fn byte_index_of_char(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// A code fence that is open at some position.
struct OpenFence {
    /// Byte offset of the line that opened it.
    start: usize,
    /// That line (```` ```lang ````), used to re-open the block.
    line: String,
}

/// The fenced code block open at byte `pos` of `s`, if any.
fn open_fence_at(s: &str, pos: usize) -> Option<OpenFence> {
    let mut open: Option<OpenFence> = None;
    let mut offset = 0;
    for line in s[..pos].split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let stripped = body.trim_start_matches(' ');
        let is_fence = body.len() - stripped.len() <= 3 && stripped.starts_with("```");
        // Only a whole line counts: a fence cut in half at `pos` is not a fence yet.
        if is_fence && (line.ends_with('\n') || offset + line.len() < pos) {
            open = match open {
                None => Some(OpenFence {
                    start: offset,
                    line: stripped.trim_end().to_string(),
                }),
                Some(_) => None,
            };
        }
        offset += line.len();
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_within(pieces: &[String], limit: usize) {
        for p in pieces {
            assert!(
                p.chars().count() <= limit,
                "piece of {} chars > {limit}: {p:?}",
                p.chars().count()
            );
            assert!(!p.trim().is_empty());
        }
    }

    #[test]
    fn short_text_is_one_piece_and_empty_is_none() {
        assert_eq!(split_message("hello", 10), ["hello"]);
        assert!(split_message("", 10).is_empty());
        assert!(split_message("  \n ", 10).is_empty());
    }

    #[test]
    fn prefers_newline_then_space_then_hard_cut() {
        assert_eq!(
            split_message("aaaa bbbb\ncccc dddd", 12),
            ["aaaa bbbb", "cccc dddd"]
        );
        assert_eq!(split_message("aaaa bbbb cccc", 10), ["aaaa bbbb", "cccc"]);
        assert_eq!(split_message("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn an_early_newline_does_not_make_a_tiny_first_piece() {
        let text = format!("Heading\n{}", "word ".repeat(40));
        let pieces = split_message(&text, 100);
        assert_within(&pieces, 100);
        assert!(
            pieces[0].chars().count() > 50,
            "first piece too small: {:?}",
            pieces[0]
        );
        assert_eq!(
            pieces.join(" ").split_whitespace().count(),
            text.split_whitespace().count()
        );
    }

    #[test]
    fn counts_characters_not_bytes() {
        let text = "é".repeat(10);
        let pieces = split_message(&text, 4);
        assert_eq!(pieces, ["éééé", "éééé", "éé"]);
    }

    #[test]
    fn no_text_is_lost_when_splitting_on_whitespace() {
        let words: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
        let text = words.join(" ");
        let pieces = split_message(&text, 100);
        assert_within(&pieces, 100);
        let rejoined: Vec<&str> = pieces.iter().flat_map(|p| p.split(' ')).collect();
        assert_eq!(rejoined, words.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn moves_the_cut_before_a_code_block() {
        let code = format!("```rust\n{}```", "let x = 1;\n".repeat(5));
        let text = format!("{}\n{code}", "intro ".repeat(10).trim_end());
        let pieces = split_message(&text, 100);
        assert_within(&pieces, 100);
        assert_eq!(pieces.len(), 2);
        assert!(pieces[0].starts_with("intro") && !pieces[0].contains("```"));
        assert_eq!(pieces[1], code);
    }

    #[test]
    fn reopens_a_code_block_longer_than_the_limit() {
        let body: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let text = format!("```python\n{body}```");
        let pieces = split_message(&text, 80);
        assert!(pieces.len() > 2);
        assert_within(&pieces, 80);
        for p in &pieces {
            assert!(p.starts_with("```python\n"), "{p:?}");
            assert!(p.ends_with("```"), "{p:?}");
            assert_eq!(p.matches("```").count(), 2, "balanced fences in {p:?}");
        }
        let lines: Vec<&str> = pieces
            .iter()
            .flat_map(|p| p.lines())
            .filter(|l| !l.starts_with("```"))
            .collect();
        assert_eq!(lines, (0..40).map(|i| format!("line {i}")).collect::<Vec<_>>());
    }

    #[test]
    fn five_thousand_chars_make_two_telegram_messages() {
        let text = "word ".repeat(1000);
        let pieces = split_message(&text, TELEGRAM_LIMIT);
        assert_eq!(pieces.len(), 2);
        assert_within(&pieces, TELEGRAM_LIMIT);
    }
}
