//! Pure helpers for received messages: mention detection, mention stripping, safe file names.

use serenity::all::{Message, UserId};

/// True when `msg` mentions the bot (`<@id>`) or replies to one of the bot's messages.
pub(crate) fn is_mentioned(msg: &Message, bot: UserId) -> bool {
    msg.mentions.iter().any(|u| u.id == bot)
        || msg.content.contains(&format!("<@{bot}>"))
        || msg.content.contains(&format!("<@!{bot}>"))
        || msg
            .referenced_message
            .as_ref()
            .is_some_and(|m| m.author.id == bot)
}

/// The text the agent sees: the bot's own mention removed, whitespace trimmed.
pub(crate) fn clean_content(content: &str, bot: Option<UserId>) -> String {
    let mut text = content.to_string();
    if let Some(bot) = bot {
        for tag in [format!("<@{bot}>"), format!("<@!{bot}>")] {
            text = text.replace(&tag, "");
        }
    }
    text.trim().to_string()
}

/// A file name that cannot leave the media directory (shared by every channel).
pub(crate) use nanobot_channels::safe_file_name;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(content: &str, mentions: serde_json::Value, referenced: serde_json::Value) -> Message {
        serde_json::from_value(json!({
            "id": "10", "channel_id": "20", "guild_id": "30",
            "author": {"id": "40", "username": "alice", "discriminator": "0", "avatar": null, "global_name": null},
            "content": content, "timestamp": "2026-11-22T07:00:00+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": mentions, "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
            "referenced_message": referenced,
        }))
        .unwrap()
    }

    #[test]
    fn mentions_and_replies_count_as_mentions() {
        let bot = UserId::new(99);
        let bot_user =
            json!([{"id": "99", "username": "nanobot", "discriminator": "0", "avatar": null, "bot": true}]);
        assert!(is_mentioned(&message("<@99> hi", bot_user, json!(null)), bot));
        assert!(!is_mentioned(&message("hi all", json!([]), json!(null)), bot));
        assert!(is_mentioned(&message("<@!99> hi", json!([]), json!(null)), bot));
        let reply_to_bot = message(
            "and then?",
            json!([]),
            json!({
                "id": "9", "channel_id": "20",
                "author": {"id": "99", "username": "nanobot", "discriminator": "0", "avatar": null, "bot": true},
                "content": "earlier answer", "timestamp": "2026-11-22T06:59:00+00:00", "edited_timestamp": null,
                "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
                "attachments": [], "embeds": [], "pinned": false, "type": 0,
            }),
        );
        assert!(is_mentioned(&reply_to_bot, bot));
    }

    #[test]
    fn clean_content_strips_only_the_bot_mention() {
        let bot = Some(UserId::new(99));
        assert_eq!(clean_content("<@99> what is <@12>?", bot), "what is <@12>?");
        assert_eq!(clean_content("  <@!99>  ", bot), "");
        assert_eq!(clean_content("<@99> hi", None), "<@99> hi");
    }

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_file_name("report 2026.pdf"), "report_2026.pdf");
        assert_eq!(safe_file_name("..."), "file");
        assert_eq!(safe_file_name(&"a".repeat(300)).len(), 100);
    }
}
