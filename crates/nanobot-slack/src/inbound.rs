//! Pure helpers for received messages: DM detection, mentions, threads, text clean-up, safe file names.

/// True for a direct message: `channel_type` `im`, or (when Slack left the type out) a `D…` channel id.
pub(crate) fn is_direct(channel_type: Option<&str>, channel: &str) -> bool {
    match channel_type {
        Some(t) => t == "im",
        None => channel.starts_with('D'),
    }
}

/// True when `text` mentions the bot user (`<@U123>` or `<@U123|name>`).
pub(crate) fn mentions(text: &str, bot_user: &str) -> bool {
    !bot_user.is_empty()
        && (text.contains(&format!("<@{bot_user}>")) || text.contains(&format!("<@{bot_user}|")))
}

/// The text the agent sees: the bot's mention removed, Slack's three HTML escapes undone, whitespace trimmed.
pub(crate) fn clean_text(text: &str, bot_user: &str) -> String {
    let mut out = text.to_string();
    if !bot_user.is_empty() {
        out = out.replace(&format!("<@{bot_user}>"), "");
        while let Some(start) = out.find(&format!("<@{bot_user}|")) {
            let end = out[start..].find('>').map_or(out.len(), |e| start + e + 1);
            out.replace_range(start..end, "");
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .trim()
        .to_string()
}

/// The thread a reply goes to: the message's own thread if it is in one; otherwise, in channels with
/// `replyInThread`, a new thread under the message; direct messages are answered inline.
pub(crate) fn reply_thread(
    ts: &str,
    thread_ts: Option<&str>,
    direct: bool,
    reply_in_thread: bool,
) -> Option<String> {
    match thread_ts.filter(|t| !t.is_empty()) {
        Some(t) => Some(t.to_string()),
        None if reply_in_thread && !direct => Some(ts.to_string()),
        None => None,
    }
}

/// A file name that cannot leave the media directory (shared by every channel).
pub(crate) use nanobot_channels::safe_file_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_messages() {
        assert!(is_direct(Some("im"), "C1"));
        assert!(!is_direct(Some("channel"), "D1"));
        assert!(!is_direct(Some("mpim"), "G1"));
        assert!(is_direct(None, "D024BE91L"));
        assert!(!is_direct(None, "C024BE91L"));
    }

    #[test]
    fn mentions_and_clean_text() {
        assert!(mentions("<@UBOT> hi", "UBOT"));
        assert!(mentions("hey <@UBOT|nanobot>", "UBOT"));
        assert!(!mentions("<@UOTHER> hi", "UBOT"));
        assert!(!mentions("<@> hi", ""));
        assert_eq!(
            clean_text("<@UBOT> is 1 &lt; 2 &amp;&amp; <@U2>?", "UBOT"),
            "is 1 < 2 && <@U2>?"
        );
        assert_eq!(clean_text("hi <@UBOT|nanobot>", "UBOT"), "hi");
    }

    #[test]
    fn threads() {
        assert_eq!(reply_thread("1.1", None, false, true).as_deref(), Some("1.1"));
        assert_eq!(
            reply_thread("1.2", Some("1.0"), false, true).as_deref(),
            Some("1.0")
        );
        assert_eq!(
            reply_thread("1.2", Some("1.0"), true, false).as_deref(),
            Some("1.0")
        );
        assert_eq!(
            reply_thread("1.1", None, true, true),
            None,
            "DMs are answered inline"
        );
        assert_eq!(reply_thread("1.1", None, false, false), None);
    }

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert_eq!(safe_file_name("../../x.txt"), "_.._x.txt");
        assert_eq!(safe_file_name(""), "file");
    }
}
