//! Near misses of `edit_file`: the file's region most like an `old_text` not found, shown as a diff with what
//! alone may tell them apart; and for a missing file, the names beside it most like its own.

use std::collections::HashMap;

use super::matching::straighten;

/// Why `old_text` may differ from the closest `region` of the file, in 0.3.5's words: letter case, whitespace
/// within lines, or quote style (curly for straight) alone. Line endings (`\r\n`) and trailing line breaks are
/// not differences.
fn likely_causes(old_text: &str, region: &str) -> Vec<&'static str> {
    let old = old_text.replace("\r\n", "\n");
    let (old, actual) = (old.trim_end_matches('\n'), region.trim_end_matches('\n'));
    if old == actual {
        return Vec::new();
    }
    let collapse = |s: &str| {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    let mut causes = Vec::new();
    if old.to_lowercase() == actual.to_lowercase() {
        causes.push("letter case differs");
    }
    if collapse(old) == collapse(actual) {
        causes.push("whitespace differs");
    }
    if straighten(old) == straighten(actual) {
        causes.push("quote style differs");
    }
    causes
}

/// The pairs of neighbouring characters in `line` between two line breaks, each as one number. The breaks make
/// a line's first and last characters count as much as the others, which matters for short lines.
fn line_bigrams(line: &str) -> impl Iterator<Item = u64> + '_ {
    let chars = std::iter::once('\n').chain(line.chars()).chain(['\n']);
    chars
        .clone()
        .zip(chars.skip(1))
        .map(|(a, b)| (u64::from(a) << 32) | u64::from(b))
}

/// The pairs of neighbouring characters in a sliding window of lines, against those of the text looked for.
struct Overlap {
    /// The looked-for text's pairs, with how often each occurs.
    wanted: HashMap<u64, i64>,
    wanted_total: i64,
    /// How often each wanted pair occurs in the window.
    held: HashMap<u64, i64>,
    /// The pairs both have: `min(held, wanted)` summed over the wanted pairs.
    shared: i64,
    /// All the window's pairs.
    total: i64,
}

impl Overlap {
    /// Adds (`sign` 1) or removes (`sign` -1) a line of the window.
    fn slide(&mut self, line: &str, sign: i64) {
        for pair in line_bigrams(line) {
            self.total += sign;
            let Some(&want) = self.wanted.get(&pair) else {
                continue;
            };
            let count = self.held.entry(pair).or_default();
            let before = (*count).min(want);
            *count += sign;
            self.shared += (*count).min(want) - before;
        }
    }

    /// The Dice coefficient of the two multisets of pairs.
    fn similarity(&self) -> f32 {
        let all = self.wanted_total + self.total;
        if all == 0 {
            0.0
        } else {
            (2 * self.shared) as f32 / all as f32
        }
    }
}

/// The region of `content` most like `needle`: of the windows of as many lines as `needle` has, the one whose
/// pairs of neighbouring characters overlap most with the needle's, as `(first line 1-based, similarity, region)`.
/// The similarity is the Dice coefficient of the two multisets of pairs (twice the shared pairs over all pairs,
/// 0.0 to 1.0): a typo or a changed indent costs a few pairs, not the line. Linear in the size of `content`: each
/// line's pairs enter and leave the sliding window once (a character diff per window took seconds for a 40-line
/// `old_text` in a 2,000-line file).
fn closest_region(content: &str, needle: &str) -> Option<(usize, f32, String)> {
    let lines: Vec<&str> = content.lines().collect();
    if lines.is_empty() {
        return None;
    }
    let window = needle.lines().count().clamp(1, lines.len());
    let mut wanted: HashMap<u64, i64> = HashMap::new();
    for pair in needle.lines().flat_map(line_bigrams) {
        *wanted.entry(pair).or_default() += 1;
    }
    let mut overlap = Overlap {
        wanted_total: wanted.values().sum(),
        wanted,
        held: HashMap::new(),
        shared: 0,
        total: 0,
    };
    let mut best: Option<(usize, f32)> = None;
    for end in 0..lines.len() {
        overlap.slide(lines[end], 1);
        if end >= window {
            overlap.slide(lines[end - window], -1);
        }
        if end + 1 >= window {
            let similarity = overlap.similarity();
            if best.is_none_or(|(_, b)| similarity > b) {
                best = Some((end + 2 - window, similarity));
            }
        }
    }
    let (first, similarity) = best?;
    Some((first, similarity, lines[first - 1..first - 1 + window].join("\n")))
}

/// The answer when `old_text` is not in `content` (as 0.3.5 words it): the closest region as a unified diff when it
/// is more than half similar, and the likely cause when one alone tells them apart.
pub(super) fn not_found_message(content: &str, old_text: &str, shown: &str) -> String {
    let mut msg = format!("Error: old_text not found in {shown}.");
    let closest = closest_region(content, old_text);
    let causes = closest
        .as_ref()
        .map(|(_, _, region)| likely_causes(old_text, region))
        .filter(|c| !c.is_empty())
        .map(|c| c.join(", "));
    match closest {
        Some((line, ratio, region)) if ratio > 0.5 => {
            let diff = nanobot_util::text_diff::LineDiff::new(old_text.trim_end(), &region).unified(
                3,
                "old_text (provided)",
                &format!("{shown} (actual, line {line})"),
            );
            if let Some(causes) = causes {
                msg.push_str(&format!("\nPossible cause: {causes}."));
            }
            msg.push_str(&format!(
                "\nBest match ({:.0}% similar) at line {line}:\n{diff}",
                ratio * 100.0
            ));
        }
        _ => match causes {
            Some(causes) => msg.push_str(&format!(
                " Possible cause: {causes}. Copy the exact text from read_file and try again."
            )),
            None => msg.push_str(" No similar text found; read the file to see its current content."),
        },
    }
    msg
}

/// Up to three of `names` most like `wanted`, most alike first, each at least 0.6 alike by Python's
/// `difflib.SequenceMatcher` ratio (what 0.3.5's "Did you mean" uses): twice the characters in common blocks over
/// both lengths.
pub(super) fn similar_names(wanted: &str, names: impl IntoIterator<Item = String>) -> Vec<String> {
    let wanted: Vec<char> = wanted.chars().collect();
    let mut scored: Vec<(f64, String)> = names
        .into_iter()
        .filter_map(|name| {
            let chars: Vec<char> = name.chars().collect();
            let ratio = match wanted.len() + chars.len() {
                0 => 1.0,
                all => 2.0 * common_blocks(&wanted, &chars) as f64 / all as f64,
            };
            (ratio >= 0.6).then_some((ratio, name))
        })
        .collect();
    // As `heapq.nlargest` on (ratio, name): higher ratio first, then the greater name.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    scored.into_iter().take(3).map(|(_, name)| name).collect()
}

/// The characters `a` and `b` share in difflib's matching blocks: the longest common run (the earliest in `a`,
/// then in `b`), then the same on each side of it.
fn common_blocks(a: &[char], b: &[char]) -> usize {
    let (mut len, mut at_a, mut at_b) = (0, 0, 0);
    let mut previous = vec![0usize; b.len() + 1];
    let mut current = vec![0usize; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        for (j, cb) in b.iter().enumerate() {
            current[j + 1] = if ca == cb { previous[j] + 1 } else { 0 };
            if current[j + 1] > len {
                (len, at_a, at_b) = (current[j + 1], i + 1 - current[j + 1], j + 1 - current[j + 1]);
            }
        }
        std::mem::swap(&mut previous, &mut current);
    }
    if len == 0 {
        return 0;
    }
    len + common_blocks(&a[..at_a], &b[..at_b]) + common_blocks(&a[at_a + len..], &b[at_b + len..])
}

#[cfg(test)]
mod closest_region_tests {
    use super::{closest_region, common_blocks, likely_causes, similar_names};

    #[test]
    fn likely_causes_name_what_alone_differs() {
        assert_eq!(
            likely_causes("Hello World", "hello world"),
            ["letter case differs"]
        );
        assert_eq!(
            likely_causes("a  =  1\n\tb  ", "a = 1\n  b"),
            ["whitespace differs"]
        );
        assert_eq!(
            likely_causes("say \u{201c}hi\u{201d}, it\u{2019}s", "say \"hi\", it's"),
            ["quote style differs"]
        );
        assert_eq!(
            likely_causes("A  B", "a b"),
            Vec::<&str>::new(),
            "two differences at once"
        );
        assert_eq!(likely_causes("abc", "xyz"), Vec::<&str>::new());
        // Line endings and trailing breaks are not differences, so nothing is named.
        assert_eq!(likely_causes("a\r\nb\r\n", "a\nb"), Vec::<&str>::new());
    }

    #[test]
    fn names_alike_as_difflib_rates_them() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        // difflib.SequenceMatcher(None, a, b): "abxcd"/"abcd" share 4, "qabxcd"/"abycdf" 4 (ab, cd).
        assert_eq!(common_blocks(&chars("abxcd"), &chars("abcd")), 4);
        assert_eq!(common_blocks(&chars("qabxcd"), &chars("abycdf")), 4);
        assert_eq!(common_blocks(&chars(""), &chars("abc")), 0);
        let names = [
            "config.yaml",
            "confg.json",
            "config.json",
            "readme.md",
            "cfg.json",
        ]
        .map(String::from);
        assert_eq!(
            similar_names("config.jsn", names),
            ["config.json", "confg.json", "cfg.json"]
        );
        assert_eq!(similar_names("zzz", ["abc".to_owned()]), Vec::<String>::new());
    }

    fn numbered(lines: usize) -> String {
        (1..=lines)
            .map(|i| format!("    let value_{i} = compute(input_{i}, {});\n", i % 13))
            .collect()
    }

    #[test]
    fn finds_the_window_with_a_typo_and_says_how_close() {
        let content = numbered(300);
        let needle = "    let value_120 = compute(input_120, 3);\n    let valeu_121 = compute(input_121, 4);";
        let (line, similarity, region) = closest_region(&content, needle).unwrap();
        assert_eq!(line, 120);
        assert_eq!(
            region,
            "    let value_120 = compute(input_120, 3);\n    let value_121 = compute(input_121, 4);"
        );
        assert!(similarity > 0.9 && similarity < 1.0, "{similarity}");
    }

    #[test]
    fn unrelated_text_is_not_similar() {
        let (_, similarity, _) = closest_region(&numbered(50), "fn main() {}\n// nothing here").unwrap();
        assert!(similarity < 0.5, "{similarity}");
    }

    #[test]
    fn a_needle_longer_than_the_file_compares_the_whole_file() {
        let (line, similarity, region) = closest_region("a b c\nd e f", "a b c\nd e g\nh i j\nk").unwrap();
        assert_eq!((line, region.as_str()), (1, "a b c\nd e f"));
        assert!(similarity > 0.5 && similarity < 1.0, "{similarity}");
        assert_eq!(closest_region("", "x"), None);
    }

    #[test]
    fn characters_not_bytes_and_any_line_ending() {
        let content = "première ligne\r\ndeuxième ligne\r\ntroisième ligne\r\n";
        let (line, _, region) = closest_region(content, "deuxieme ligne").unwrap();
        assert_eq!((line, region.as_str()), (2, "deuxième ligne"));
    }

    /// 20,000 lines and a 200-line `old_text` with one typo near the end: one pass over the file finds it (a
    /// character diff per window, the previous search, would take hours here).
    #[test]
    fn a_large_file_with_a_large_old_text_is_one_pass() {
        let content = numbered(20_000);
        let lines: Vec<&str> = content.lines().collect();
        let mut needle = lines[19_700..19_900].join("\n");
        needle = needle.replacen("value_19800", "valeu_19800", 1);
        let (line, similarity, _) = closest_region(&content, &needle).unwrap();
        assert_eq!(line, 19_701);
        assert!(similarity > 0.99, "{similarity}");
    }
}
