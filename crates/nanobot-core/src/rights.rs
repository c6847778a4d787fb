//! What a turn may do beyond its own chat: the rights the bus-aware tools (`message`, `cron`) check.
//!
//! A turn acts for the chat it came from. It may always answer that chat; it may reach another chat only
//! where that channel's access control (`channels.<name>.allowFrom`) names the target chat (or is `"*"`-open),
//! so a message smuggled into one chat cannot make the agent write to people the owner never allowed. Cron
//! jobs belong to the chat that made them: a chat lists and removes only its own. The local CLI (channel
//! [`OWNER_CHANNEL`]) is the owner at the machine and may do all of it.

use std::collections::HashMap;

#[cfg(feature = "cron")]
use nanobot_cron::CronJob;

/// The channel of the local CLI, whose turns act with the owner's rights.
pub const OWNER_CHANNEL: &str = "cli";

/// Each channel's allow-list, as the targets a turn may send to.
#[derive(Debug, Clone, Default)]
pub struct ChatRights {
    allow: HashMap<String, Vec<String>>,
}

impl ChatRights {
    /// No cross-chat targets at all (a turn may message only its own chat; the CLI anywhere).
    pub fn own_chat_only() -> Self {
        Self::default()
    }

    /// Allows sending to `channel` chats named in `entries` (`allowFrom` entries: ids, `id|name`, `"*"`).
    #[must_use]
    pub fn with_channel<I, S>(mut self, channel: impl Into<String>, entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list = entries
            .into_iter()
            .map(|e| e.as_ref().trim().trim_start_matches('@').to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        self.allow.insert(channel.into(), list);
        self
    }

    /// Whether a turn in `from_channel:from_chat` may send to `to_channel:to_chat`; `Err` says why not.
    pub fn may_send(
        &self,
        from_channel: &str,
        from_chat: &str,
        to_channel: &str,
        to_chat: &str,
    ) -> Result<(), String> {
        if from_channel == OWNER_CHANNEL || (from_channel == to_channel && from_chat == to_chat) {
            return Ok(());
        }
        let Some(list) = self.allow.get(to_channel) else {
            return Err(format!(
                "this chat may not send to channel {to_channel:?} (no such channel is configured)"
            ));
        };
        // Entries and ids may have the `id|username` form; any part naming the target is enough.
        let named = list.iter().any(|e| {
            e == "*"
                || e.split('|')
                    .any(|ep| !ep.is_empty() && to_chat.split('|').any(|tp| tp.trim_start_matches('@') == ep))
        });
        if named {
            Ok(())
        } else {
            Err(format!(
                "this chat may not send to {to_channel}:{to_chat}: that chat is not on channels.{to_channel}.allowFrom"
            ))
        }
    }
}

impl ChatRights {
    /// Whether `sender` is an owner on `channel`: the local CLI, or a sender that channel's `allowFrom` names
    /// explicitly (`"*"` makes everyone allowed, not everyone an owner), as the pairing commands judge it.
    pub fn is_owner(&self, channel: &str, sender: &str) -> bool {
        if channel == OWNER_CHANNEL {
            return true;
        }
        let Some(list) = self.allow.get(channel) else {
            return false;
        };
        let sender = sender.trim();
        !sender.is_empty()
            && list.iter().any(|e| {
                e != "*"
                    && (e == sender
                        || sender
                            .split('|')
                            .any(|part| !part.is_empty() && part.trim_start_matches('@') == e))
            })
    }
}

/// Whether the turn in `channel:chat_id` (session `session_key`) owns cron job `job`: it made it (the job is
/// bound to its session or chat), or the turn is the CLI's. The protected system jobs (`dream`, `heartbeat`)
/// are everyone's to see, as in the Python nanobot, and nobody's to remove through the tool.
#[cfg(feature = "cron")]
pub fn owns_job(job: &CronJob, channel: &str, chat_id: &str, session_key: &str) -> bool {
    if channel == OWNER_CHANNEL {
        return true;
    }
    if job.is_protected() {
        return true;
    }
    let p = &job.payload;
    let by_session = !session_key.is_empty() && p.session_key.as_deref() == Some(session_key);
    let by_origin =
        p.origin_channel.as_deref() == Some(channel) && p.origin_chat_id.as_deref() == Some(chat_id);
    let by_old_delivery = p.origin_channel.is_none()
        && p.session_key.is_none()
        && p.channel.as_deref() == Some(channel)
        && p.to.as_deref() == Some(chat_id);
    by_session || by_origin || by_old_delivery
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_the_allow_list() {
        let r = ChatRights::own_chat_only()
            .with_channel("telegram", ["111", "222|bob", "@carol"])
            .with_channel("open", ["*"])
            .with_channel("closed", Vec::<String>::new());
        assert!(r.may_send("telegram", "111", "telegram", "111").is_ok());
        assert!(r.may_send("telegram", "111", "telegram", "222").is_ok());
        assert!(r.may_send("telegram", "111", "telegram", "carol").is_ok());
        assert!(r.may_send("telegram", "111", "open", "anyone").is_ok());
        let e = r.may_send("telegram", "111", "telegram", "666").unwrap_err();
        assert!(e.contains("allowFrom"), "{e}");
        assert!(r.may_send("telegram", "111", "closed", "1").is_err());
        assert!(r.may_send("telegram", "111", "slack", "C1").is_err());
        assert!(r.may_send("cli", "direct", "telegram", "666").is_ok());
        assert!(
            ChatRights::default()
                .may_send("api", "x", "telegram", "1")
                .is_err()
        );
        assert!(r.is_owner("telegram", "222|bob") && r.is_owner("telegram", "999|carol"));
        assert!(!r.is_owner("telegram", "666") && !r.is_owner("open", "anyone") && !r.is_owner("api", "x"));
        assert!(r.is_owner("cli", "user"));
    }
}
