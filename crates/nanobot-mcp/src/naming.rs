//! Tool names as the model sees them: `mcp_<server>_<tool>`, sanitised and bounded.

use sha2::{Digest, Sha256};

/// The longest tool name providers accept (OpenAI and Anthropic both cap at 64).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Length of the hex hash suffix added when a name had to be shortened or de-duplicated.
const HASH_LEN: usize = 8;

/// Replaces every character outside `[A-Za-z0-9_-]` with `_`.
pub fn sanitize(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A short, stable hash of `raw` (8 hex characters).
fn short_hash(raw: &str) -> String {
    let digest = Sha256::digest(raw.as_bytes());
    hex::encode(digest)[..HASH_LEN].to_owned()
}

/// Builds a model-facing name from its raw parts: sanitised, and if longer than
/// [`MAX_TOOL_NAME_LEN`], cut and suffixed with a short hash of the raw name so that two long
/// names with the same prefix stay distinct.
pub fn bounded_name(raw: &str) -> String {
    let clean = sanitize(raw);
    if clean.len() <= MAX_TOOL_NAME_LEN {
        return clean;
    }
    with_hash_suffix(&clean, raw)
}

/// `clean` cut so that `_<hash of raw>` fits in [`MAX_TOOL_NAME_LEN`].
pub(crate) fn with_hash_suffix(clean: &str, raw: &str) -> String {
    let keep = MAX_TOOL_NAME_LEN - HASH_LEN - 1;
    // `clean` is ASCII only, so byte slicing is safe.
    let prefix = &clean[..clean.len().min(keep)];
    format!("{prefix}_{}", short_hash(raw))
}

/// `mcp_<server>_<tool>`: the name a server tool is registered under.
pub fn tool_name(server: &str, tool: &str) -> String {
    bounded_name(&format!("mcp_{server}_{tool}"))
}

/// `mcp_<server>_resource_<resource>`: the name a server resource is registered under.
pub fn resource_name(server: &str, resource: &str) -> String {
    bounded_name(&format!("mcp_{server}_resource_{resource}"))
}

/// `mcp_<server>_prompt_<prompt>`: the name a server prompt is registered under.
pub fn prompt_name(server: &str, prompt: &str) -> String {
    bounded_name(&format!("mcp_{server}_prompt_{prompt}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_through() {
        assert_eq!(tool_name("everything", "echo"), "mcp_everything_echo");
        assert_eq!(tool_name("everything", "get-sum"), "mcp_everything_get-sum");
    }

    #[test]
    fn odd_characters_become_underscores() {
        assert_eq!(tool_name("my server", "a.b/c"), "mcp_my_server_a_b_c");
        assert_eq!(resource_name("s", "über.md"), "mcp_s_resource__ber_md");
        assert_eq!(prompt_name("s", "args-prompt"), "mcp_s_prompt_args-prompt");
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = "x".repeat(100);
        let a = tool_name("srv", &format!("{long}a"));
        let b = tool_name("srv", &format!("{long}b"));
        assert_eq!(a.len(), MAX_TOOL_NAME_LEN);
        assert_eq!(b.len(), MAX_TOOL_NAME_LEN);
        assert_ne!(a, b, "same prefix, different tools");
        assert_eq!(a, tool_name("srv", &format!("{long}a")), "stable");
        assert!(a.starts_with("mcp_srv_xxx"));
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn exactly_64_is_kept() {
        let tool = "t".repeat(MAX_TOOL_NAME_LEN - "mcp_s_".len());
        let name = tool_name("s", &tool);
        assert_eq!(name.len(), MAX_TOOL_NAME_LEN);
        assert_eq!(name, format!("mcp_s_{tool}"));
    }
}
