//! Token counts with OpenAI's `cl100k_base` byte-pair encoding, the one nanobot 0.3.5 counts with (its
//! `tiktoken.get_encoding("cl100k_base")`), so both decide alike when a prompt nears the context window.
//!
//! Only counting is needed, so the table is kept lean: the 100,256 tokens are one embedded blob
//! (`data/cl100k_base.bin`: for each rank in order, a length byte and the token's bytes, 727 KiB, taken from
//! OpenAI's published `cl100k_base.tiktoken`, MIT), and the rank lookup is one hash map of slices into it, built on
//! first use in about 14 ms and 4 MiB (measured alone, release build). The pieces are split by the `regex` crate
//! (tiktoken's pattern without its look-ahead, which is applied by hand; 1.4 MiB more). tiktoken-rs, which builds a
//! map of owned byte strings, an inverse map and a sorted copy, held 24 MiB for this table (46 MiB for
//! `o200k_base`) and took 160–370 ms to load: a step in a turn's memory and time the first time a prompt came near
//! the window. The counts are tiktoken's exactly: `tests` compare the table with tiktoken-rs's, rank by rank, and
//! the counts on varied text.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use regex::Regex;
use rustc_hash::FxHasher;

/// The tokens of `cl100k_base`, in rank order: a length byte, then the token's bytes.
static TABLE: &[u8] = include_bytes!("../data/cl100k_base.bin");

/// How `cl100k_base` splits text into pieces before merging: tiktoken's pattern
/// `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s`
/// without its look-ahead, so that the `regex` crate's automata run it (the possessive quantifiers match as the
/// greedy ones here: nothing after them could take back what they took). `\s+(?!\S)`, a run of blanks but the
/// last one before a non-blank, is matched as `\s+` and shortened by [`Cl100k::count`].
const PATTERN: &str =
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]|\s+";

/// A pair that is no token.
const NONE: u32 = u32::MAX;

/// The counter: rank of each token, and the splitting pattern.
pub(crate) struct Cl100k {
    ranks: HashMap<&'static [u8], u32, BuildHasherDefault<FxHasher>>,
    pattern: Regex,
}

impl std::fmt::Debug for Cl100k {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cl100k")
            .field("tokens", &self.ranks.len())
            .finish_non_exhaustive()
    }
}

impl Cl100k {
    /// The counter, built on first use; `None` if the embedded table or the pattern is unusable (then callers
    /// estimate from characters).
    pub(crate) fn get() -> Option<&'static Self> {
        static COUNTER: OnceLock<Option<Cl100k>> = OnceLock::new();
        COUNTER
            .get_or_init(|| match Self::build() {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "tokenizer unavailable; estimating tokens from characters");
                    None
                }
            })
            .as_ref()
    }

    fn build() -> Result<Self, String> {
        let mut ranks = HashMap::with_capacity_and_hasher(100_256, BuildHasherDefault::default());
        let mut rest = TABLE;
        while let Some((&len, after)) = rest.split_first() {
            let len = usize::from(len);
            if len == 0 || after.len() < len {
                return Err(format!("the token table is damaged at token {}", ranks.len()));
            }
            let (token, after) = after.split_at(len);
            let rank = u32::try_from(ranks.len()).map_err(|_| "the token table is too long".to_owned())?;
            ranks.insert(token, rank);
            rest = after;
        }
        let pattern =
            Regex::new(PATTERN).map_err(|e| format!("the splitting pattern does not compile: {e}"))?;
        Ok(Self { ranks, pattern })
    }

    /// The number of tokens of `text` (special tokens are ordinary text, as tiktoken's `encode_ordinary`).
    pub(crate) fn count(&self, text: &str) -> usize {
        let mut tokens = 0;
        let mut at = 0;
        while let Some(m) = self.pattern.find_at(text, at) {
            let mut piece = m.as_str();
            // `\s+(?!\S)`: a run of two or more blanks without a line end, followed by a non-blank, leaves its
            // last blank to the piece after it (` word`).
            if m.end() < text.len()
                && piece.chars().nth(1).is_some()
                && piece.chars().all(char::is_whitespace)
                && let Some((last, c)) = piece.char_indices().next_back()
                && c != '\r'
                && c != '\n'
            {
                piece = &piece[..last];
            }
            tokens += self.count_piece(piece.as_bytes());
            at = m.start() + piece.len();
            if piece.is_empty() {
                // Not reached (every alternative takes at least one character); never loop on it.
                break;
            }
        }
        tokens
    }

    fn rank(&self, bytes: &[u8]) -> u32 {
        self.ranks.get(bytes).copied().unwrap_or(NONE)
    }

    /// The tokens of one piece: its bytes merged pair by pair, the pair of lowest rank first, until no adjacent
    /// pair is a token (byte-pair encoding as tiktoken does it).
    fn count_piece(&self, piece: &[u8]) -> usize {
        if piece.len() <= 1 || self.ranks.contains_key(piece) {
            return piece.len().min(1);
        }
        // `parts[i]` is where the i-th part starts and the rank of it merged with the next part.
        let mut parts: Vec<(usize, u32)> = (0..piece.len() - 1)
            .map(|i| (i, self.rank(&piece[i..i + 2])))
            .collect();
        parts.push((piece.len() - 1, NONE));
        parts.push((piece.len(), NONE));
        // The rank of part `i` merged with the next one, once part `i + 1` is merged into it.
        let merged = |parts: &[(usize, u32)], i: usize| {
            if i + 3 < parts.len() {
                self.rank(&piece[parts[i].0..parts[i + 3].0])
            } else {
                NONE
            }
        };
        let lowest = |parts: &[(usize, u32)]| {
            parts[..parts.len() - 1]
                .iter()
                .enumerate()
                .filter(|(_, p)| p.1 != NONE)
                .min_by_key(|(_, p)| p.1)
                .map(|(i, _)| i)
        };
        while let Some(i) = lowest(&parts) {
            parts[i].1 = merged(&parts, i);
            if i > 0 {
                parts[i - 1].1 = merged(&parts, i - 1);
            }
            parts.remove(i + 1);
        }
        parts.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> tiktoken_rs::CoreBPE {
        tiktoken_rs::cl100k_base().unwrap()
    }

    #[test]
    fn the_table_is_tiktoken_s_cl100k_rank_by_rank() {
        let bpe = reference();
        let ours = Cl100k::get().unwrap();
        assert_eq!(ours.ranks.len(), 100_256);
        let mut rebuilt = Vec::with_capacity(TABLE.len());
        for rank in 0..100_256u32 {
            let token = bpe.decode_bytes(&[rank]).unwrap();
            rebuilt.push(u8::try_from(token.len()).unwrap());
            rebuilt.extend_from_slice(&token);
        }
        assert!(
            rebuilt == TABLE,
            "data/cl100k_base.bin differs from tiktoken-rs's cl100k_base"
        );
    }

    #[test]
    fn counts_equal_tiktoken_s_on_every_kind_of_text() {
        let bpe = reference();
        let ours = Cl100k::get().unwrap();
        let samples = [
            String::new(),
            "a".into(),
            "Hello, world!".into(),
            "The quick brown fox jumps over the lazy dog. ".repeat(50),
            "fn main() {\n    let x: Vec<u8> = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n".repeat(10),
            "東京の天気は晴れです。Grüße aus Köln! Привет, мир. مرحبا بالعالم 🐈🚀👍🏽".repeat(7),
            "   leading and trailing spaces   \n\n\n\t\ttabs\r\n\r\nCRLF   ".into(),
            "1234567890 3.14159 1e10 0x1F 1,000,000 -42".into(),
            "I'm you're we've they'll she'd IT'S DON'T".into(),
            "<|endoftext|> special tokens are plain text here <|fim_prefix|>".into(),
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".repeat(20),
            "{\"role\":\"user\",\"content\":\"hi\",\"tool_calls\":[{\"id\":\"c1\"}]}".repeat(30),
            (0..2000u32).filter_map(char::from_u32).collect::<String>(),
            "x".repeat(5000) + &" ".repeat(300) + "end",
        ];
        for text in &samples {
            assert_eq!(
                ours.count(text),
                bpe.encode_ordinary(text).len(),
                "{:?}",
                text.chars().take(60).collect::<String>()
            );
        }
    }

    #[test]
    fn counts_equal_tiktoken_s_on_random_mixtures() {
        let bpe = reference();
        let ours = Cl100k::get().unwrap();
        // Pieces a text is made of, drawn by a fixed pseudo-random sequence: words, digits, punctuation, spaces
        // and line ends of every kind, scripts, emoji and its modifiers.
        let atoms = [
            "the",
            " The",
            "tokenizer",
            "ing",
            "'s",
            "'LL",
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            "\n\n",
            "0",
            "42",
            "12345",
            ".",
            ",",
            "!?",
            "...",
            "()",
            "{}",
            "=>",
            "::",
            "//",
            "#",
            "日本語",
            "한국어",
            "ü",
            "é",
            "ß",
            "Ωμέγα",
            "🐈",
            "👍🏽",
            "\u{200d}",
            "\u{301}",
            "_",
            "-",
            "—",
            "€",
            "$x",
            "\"",
            "'",
            "`",
            "<|endoftext|>",
            "   ",
            " \t ",
            "\u{a0}",
            "\u{3000}",
            "\u{2028}",
            " \n ",
            "\r",
            "\u{85}",
            "\u{b}",
        ];
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(seed >> 33).unwrap() % n
        };
        for _ in 0..1000 {
            let len = 1 + next(60);
            let text: String = (0..len).map(|_| atoms[next(atoms.len())]).collect();
            assert_eq!(ours.count(&text), bpe.encode_ordinary(&text).len(), "{text:?}");
        }
    }
}
