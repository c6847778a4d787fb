//! Session keys → file names: a total, injective mapping onto safe names.
//!
//! * An ordinary key is stored under its unpadded base64url encoding, exactly as the Python nanobot 0.3.5
//!   names it (`cli:direct` → `Y2xpOmRpcmVjdA`). That alphabet (`A–Z a–z 0–9 - _`) holds no separator, no dot
//!   and nothing a shell or file system treats specially, and decoding gives the key back, so distinct keys get
//!   distinct names.
//! * A key whose encoding is longer than [`MAX_PLAIN_STEM`] bytes (a file name is limited to 255 bytes, and a
//!   session file also has `.jsonl.checkpoint.json` and backup suffixes) is stored as
//!   `~<SHA-256 of the key, 64 hex digits>`. The `~` never occurs in base64url, so hashed names cannot meet plain
//!   ones; two hashed names meet only on a SHA-256 collision, and even then the key recorded in the file's first
//!   line is compared on load and a mismatch is refused rather than mixed (see `SessionError::KeyMismatch`).
//! * Nothing is trimmed or folded: `" a"`, `"a"` and `"a "` are three sessions.
//! * Keys with control characters (U+0000–U+001F, U+007F–U+009F), and the empty key, are refused by
//!   [`check_key`] with an error that names the character and its position, never a path.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::error::SessionError;

/// Longest stem stored as plain base64url; longer encodings are hashed (see the module docs).
pub const MAX_PLAIN_STEM: usize = 180;

/// First character of a hashed stem (outside the base64url alphabet).
pub const HASHED_PREFIX: char = '~';

/// Refuses keys that cannot name a session: empty, or holding a control character (NUL included).
pub fn check_key(key: &str) -> Result<(), SessionError> {
    if key.is_empty() {
        return Err(SessionError::EmptyKey);
    }
    if let Some((index, c)) = key.chars().enumerate().find(|(_, c)| c.is_control()) {
        return Err(SessionError::InvalidKey {
            what: format!(
                "session key must not contain control characters (U+{:04X} at character {index})",
                u32::from(c)
            ),
        });
    }
    Ok(())
}

/// The file stem of session `key` (without `.jsonl`). Total: any string has one, always a valid file name
/// of at most [`MAX_PLAIN_STEM`] bytes, made only of `A–Z a–z 0–9 - _ ~` (the empty key, refused by [`check_key`]
/// anyway, is hashed too).
pub fn file_stem(key: &str) -> String {
    let plain = URL_SAFE_NO_PAD.encode(key.as_bytes());
    if !plain.is_empty() && plain.len() <= MAX_PLAIN_STEM {
        return plain;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(65);
    out.push(HASHED_PREFIX);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The key a plain (not hashed) stem stands for, if it is one `file_stem` produces.
pub fn key_from_stem(stem: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(stem.as_bytes()).ok()?;
    let key = String::from_utf8(bytes).ok()?;
    (file_stem(&key) == stem).then_some(key)
}

/// Whether `stem` is a hashed one (its key is only known from the file's metadata line).
pub fn is_hashed_stem(stem: &str) -> bool {
    stem.len() == 65
        && stem.starts_with(HASHED_PREFIX)
        && stem[1..].bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_keys_keep_the_python_names() {
        assert_eq!(file_stem("cli:direct"), "Y2xpOmRpcmVjdA");
        assert_eq!(file_stem("cli:tooltest"), "Y2xpOnRvb2x0ZXN0");
        assert_eq!(file_stem("telegram:12345"), "dGVsZWdyYW06MTIzNDU");
        assert_eq!(key_from_stem("Y2xpOmRpcmVjdA").as_deref(), Some("cli:direct"));
    }

    #[test]
    fn long_keys_are_hashed_and_never_decode_as_plain() {
        let long = "x".repeat(1000);
        let stem = file_stem(&long);
        assert!(is_hashed_stem(&stem), "{stem}");
        assert_eq!(key_from_stem(&stem), None);
        assert_ne!(file_stem(&"x".repeat(1001)), stem);
    }

    #[test]
    fn control_characters_are_refused_by_position_without_a_path() {
        let e = check_key("api:a\0b").unwrap_err().to_string();
        assert!(e.contains("U+0000") && e.contains("character 5"), "{e}");
        assert!(!e.contains('/'), "{e}");
        assert!(check_key("api:\u{85}").is_err());
        assert!(check_key("").is_err());
        assert!(check_key(" api:é/..\\ ").is_ok());
    }
}
