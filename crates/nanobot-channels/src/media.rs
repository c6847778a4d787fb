//! Helpers for media that channels download next to the workspace.

/// A file name that cannot leave the media directory: every character other than an alphanumeric, `.`, `-` or
/// `_` becomes `_` (so path separators and control characters are gone), leading dots are dropped, at most 100
/// characters are kept, and an empty result becomes `file`.
///
/// ```
/// use nanobot_channels::safe_file_name;
///
/// assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
/// assert_eq!(safe_file_name(""), "file");
/// ```
pub fn safe_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        "file".to_string()
    } else {
        cleaned.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_file_name("report 2026.pdf"), "report_2026.pdf");
        assert_eq!(safe_file_name("a\nb\0c"), "a_b_c");
        assert_eq!(safe_file_name("..."), "file");
        assert_eq!(safe_file_name(".hidden"), "hidden");
        assert_eq!(safe_file_name(""), "file");
        assert_eq!(safe_file_name(&"a".repeat(300)).len(), 100);
    }
}
