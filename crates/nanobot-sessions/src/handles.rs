//! Session handles: short, pronounceable public names (`@kevu`) for sessions, so the model can name another
//! conversation without seeing its private key (`telegram:12345`).
//!
//! A handle is kept in the session's metadata as `"session_handle"`, the key and the allocation the Python
//! nanobot 0.3.5 uses: the sessions are taken oldest first (creation time, then key), a session without a valid
//! handle (or with one an older session already holds) gets the first free name of a fixed sequence, and names
//! are written back at once. The sequence is the same as 0.3.5's (two syllables, then three, then four, each
//! tier visited in one stable, non-alphabetical order; names repeating a syllable and a few offensive words
//! skipped), so a home gives the same handles whichever program named its sessions.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

/// The metadata key holding a session's handle (without the `@`).
pub const HANDLE_METADATA_KEY: &str = "session_handle";

/// Longest handle, in letters.
const MAX_HANDLE_CHARS: usize = 16;

/// Syllables for every position but the last (64 of them).
const SYLLABLES: [&str; 64] = [
    "ba", "be", "bi", "bo", "da", "de", "di", "do", "fa", "fe", "fi", "fo", "ga", "ge", "gi", "go", "ha",
    "he", "hi", "ho", "ja", "je", "ji", "jo", "ka", "ke", "ki", "ko", "ku", "la", "le", "li", "lo", "lu",
    "ma", "me", "mi", "mo", "mu", "na", "ne", "ni", "no", "nu", "pa", "pe", "pi", "po", "ra", "re", "ri",
    "ro", "ru", "sa", "se", "si", "so", "su", "ta", "te", "ti", "to", "tu", "va",
];

/// Syllables a name may end with (40 of them).
const END_SYLLABLES: [&str; 40] = [
    "la", "le", "li", "lo", "lu", "ma", "me", "mi", "mo", "mu", "na", "ne", "ni", "no", "nu", "ra", "re",
    "ri", "ro", "ru", "sa", "se", "si", "so", "su", "ta", "te", "ti", "to", "tu", "va", "ve", "vi", "vo",
    "vu", "ya", "ye", "yi", "yo", "yu",
];

const BLOCKED: [&str; 5] = ["dago", "homo", "kike", "pedo", "rape"];

/// Why a handle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session handle {0:?} is invalid: 4 to 16 letters a-z, optionally after @")]
pub struct InvalidHandle(pub String);

/// The canonical form of a handle given by the model or a user: `@` dropped, lower case, 4 to 16 letters a-z.
pub fn normalize_handle(value: &str) -> Result<String, InvalidHandle> {
    let name = value.trim();
    let name = name.strip_prefix('@').unwrap_or(name).to_lowercase();
    let ok = (4..=MAX_HANDLE_CHARS).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase());
    if ok {
        Ok(name)
    } else {
        Err(InvalidHandle(shown(value)))
    }
}

/// At most 40 characters of a refused value, for the error.
fn shown(value: &str) -> String {
    value.chars().take(40).collect()
}

fn tier_size(syllables: u32) -> u64 {
    (SYLLABLES.len() as u64).pow(syllables - 1) * END_SYLLABLES.len() as u64
}

/// The name at `index` of the tier with `syllables` syllables, as its parts (first syllable first).
fn name_parts(syllables: u32, index: u64) -> Vec<&'static str> {
    let (mut rest, end) = (
        index / END_SYLLABLES.len() as u64,
        index % END_SYLLABLES.len() as u64,
    );
    let mut parts = vec![END_SYLLABLES[end as usize]];
    for _ in 1..syllables {
        parts.push(SYLLABLES[(rest % SYLLABLES.len() as u64) as usize]);
        rest /= SYLLABLES.len() as u64;
    }
    parts.reverse();
    parts
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Every index of a tier once, in the stable order derived from a digest of the tier's name.
fn tier_order(syllables: u32) -> impl Iterator<Item = u64> {
    let size = tier_size(syllables);
    let seed = Sha256::digest(format!("nanobot-handle-v1:{syllables}").as_bytes());
    let word = |range: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&seed[range]);
        u64::from_be_bytes(b)
    };
    let start = word(0..8) % size;
    let mut step = match word(8..16) % size {
        0 => 1,
        s => s,
    };
    while gcd(step, size) != 1 {
        step += 1;
    }
    (0..size).map(move |offset| (start + (offset as u128 * step as u128 % size as u128) as u64) % size)
}

/// The first name of the sequence not in `used`.
pub fn allocate_handle(used: &HashSet<String>) -> String {
    for syllables in [2, 3, 4] {
        for index in tier_order(syllables) {
            let parts = name_parts(syllables, index);
            let distinct: HashSet<&str> = parts.iter().copied().collect();
            if distinct.len() != parts.len() {
                continue;
            }
            let name = parts.concat();
            if !used.contains(&name) && !BLOCKED.contains(&name.as_str()) {
                return name;
            }
        }
    }
    // Beyond ten million sessions: random letters, as 0.3.5 does.
    loop {
        let id = uuid::Uuid::new_v4();
        let name: String = id.as_bytes()[..12]
            .iter()
            .map(|b| char::from(b'a' + b % 26))
            .collect();
        if !used.contains(&name) {
            return name;
        }
    }
}

/// A session's handle.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionHandle {
    /// The handle, without the `@`.
    pub name: String,
    /// The session's private key.
    pub key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_the_python_nanobots() {
        // The first five names 0.3.5's `_allocate_name` gives on an empty home, one after another.
        let mut used = HashSet::new();
        let mut names = Vec::new();
        for _ in 0..5 {
            let n = allocate_handle(&used);
            used.insert(n.clone());
            names.push(n);
        }
        assert_eq!(names, ["kevu", "peti", "besa", "jeno", "nime"]);
        assert_eq!(
            [tier_size(2), tier_size(3), tier_size(4)],
            [2560, 163_840, 10_485_760]
        );
        assert_eq!(tier_order(2).take(3).collect::<Vec<_>>(), [1034, 1827, 60]);
    }

    #[test]
    fn every_index_of_a_tier_is_visited_once() {
        let seen: HashSet<u64> = tier_order(2).collect();
        assert_eq!(seen.len() as u64, tier_size(2));
    }

    #[test]
    fn handles_are_normalised_or_refused() {
        assert_eq!(normalize_handle(" @KeVu ").unwrap(), "kevu");
        for bad in ["@abc", "ab1cd", "", "@", "telegram:123", &"a".repeat(17), "kévu"] {
            assert!(normalize_handle(bad).is_err(), "{bad}");
        }
    }
}
