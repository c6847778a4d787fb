//! Memory scopes: whose long-term memory a turn reads and writes.
//!
//! With one person, one memory is right (`shared`, the Python nanobot's only mode). When the agent serves a family,
//! a team or group chats, what one person told it must not show up in another person's prompt, so memory can be
//! divided ([`MemoryScope`], `agents.defaults.memoryScope`):
//!
//! | scope | a private chat uses | a group chat uses |
//! |---|---|---|
//! | `shared` | `memory/` | `memory/` |
//! | `per-chat` | the chat's memory | the group's memory |
//! | `per-user` | the person's memory (all their private chats on that channel) | the group's memory |
//!
//! A person's memory is never used in a group chat: it may hold what they said in private, and everyone in the
//! group would see it answered from. A chat whose adapter does not say whether it is a group is treated as one.
//!
//! A divided memory lives in `memory/scopes/<name>/` (its own `MEMORY.md`, `history.jsonl`, Dream cursor and Dream
//! records), where `<name>` is the scope's id (`chat:telegram:-1001`, `user:slack:U042`) under the same total,
//! injective file-name mapping session files use ([`nanobot_sessions::keyname::file_stem`]): no id can name a path
//! outside its folder, and two ids never share one.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::MEMORY_DIR;

/// The folder of divided memories, inside `memory/`.
pub const SCOPES_DIR: &str = "scopes";

/// How long-term memory is divided between the chats and people the agent serves (`agents.defaults.memoryScope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryScope {
    /// One memory for everyone (the Python nanobot's behaviour; right for one person).
    #[default]
    Shared,
    /// One memory per chat: each private chat and each group has its own.
    PerChat,
    /// One memory per person for their private chats; a group chat has the group's own.
    PerUser,
}

impl MemoryScope {
    /// The configuration value (`shared`, `per-chat`, `per-user`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::PerChat => "per-chat",
            Self::PerUser => "per-user",
        }
    }

    /// The memory a message uses: from `sender_id` in `chat_id` on `channel`; `is_group` is what the adapter says
    /// of the chat (`None`: it does not say, treated as a group). A sender id of the `id|username` form counts by
    /// its id (usernames change).
    pub fn resolve(self, channel: &str, chat_id: &str, sender_id: &str, is_group: Option<bool>) -> ScopeKey {
        match self {
            Self::Shared => ScopeKey::Shared,
            Self::PerUser if is_group == Some(false) => {
                let person = sender_id.split('|').next().unwrap_or(sender_id);
                ScopeKey::User(format!("{channel}:{person}"))
            }
            Self::PerChat | Self::PerUser => ScopeKey::Chat(format!("{channel}:{chat_id}")),
        }
    }
}

impl fmt::Display for MemoryScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The memory one turn reads and writes (see the [module docs](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum ScopeKey {
    /// `memory/`, shared by everyone.
    #[default]
    Shared,
    /// The memory of one chat (`channel:chat_id`).
    Chat(String),
    /// The memory of one person (`channel:sender id`).
    User(String),
}

impl ScopeKey {
    /// The id recorded with a session (`shared`, `chat:<channel:chat>`, `user:<channel:person>`);
    /// [`ScopeKey::parse`] reads it back.
    pub fn id(&self) -> String {
        match self {
            Self::Shared => "shared".to_owned(),
            Self::Chat(k) => format!("chat:{k}"),
            Self::User(k) => format!("user:{k}"),
        }
    }

    /// The scope an [`id`](ScopeKey::id) names, if it is one.
    pub fn parse(id: &str) -> Option<Self> {
        if id == "shared" {
            return Some(Self::Shared);
        }
        let (kind, key) = id.split_once(':')?;
        if key.is_empty() {
            return None;
        }
        match kind {
            "chat" => Some(Self::Chat(key.to_owned())),
            "user" => Some(Self::User(key.to_owned())),
            _ => None,
        }
    }

    /// Whether this is the shared memory.
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Shared)
    }

    /// The folder of this memory, relative to the workspace: `memory`, or `memory/scopes/<file-safe id>`.
    pub fn dir(&self) -> PathBuf {
        match self {
            Self::Shared => PathBuf::from(MEMORY_DIR),
            _ => Path::new(MEMORY_DIR)
                .join(SCOPES_DIR)
                .join(nanobot_sessions::keyname::file_stem(&self.id())),
        }
    }
}

impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}

/// The scope whose folder is `memory/scopes/<stem>` (for folders found on disk), when the stem is a plain one.
pub(crate) fn from_stem(stem: &str) -> Option<ScopeKey> {
    nanobot_sessions::keyname::key_from_stem(stem).and_then(|id| ScopeKey::parse(&id))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Component;

    use super::*;

    #[test]
    fn private_and_group_chats_resolve_by_the_table() {
        let r = |scope: MemoryScope, group| scope.resolve("telegram", "-100", "42|alice", group);
        assert_eq!(r(MemoryScope::Shared, Some(false)), ScopeKey::Shared);
        assert_eq!(
            r(MemoryScope::PerChat, Some(false)),
            ScopeKey::Chat("telegram:-100".into())
        );
        assert_eq!(
            r(MemoryScope::PerChat, Some(true)),
            ScopeKey::Chat("telegram:-100".into())
        );
        assert_eq!(
            r(MemoryScope::PerUser, Some(false)),
            ScopeKey::User("telegram:42".into())
        );
        // A group, or a chat nobody says is private, never gets a person's memory.
        assert_eq!(
            r(MemoryScope::PerUser, Some(true)),
            ScopeKey::Chat("telegram:-100".into())
        );
        assert_eq!(
            r(MemoryScope::PerUser, None),
            ScopeKey::Chat("telegram:-100".into())
        );
    }

    #[test]
    fn ids_round_trip_and_chat_and_user_never_share_a_folder() {
        // On Telegram a private chat's id is the person's id: the two scopes must still differ.
        let chat = ScopeKey::Chat("telegram:42".into());
        let user = ScopeKey::User("telegram:42".into());
        assert_ne!(chat.dir(), user.dir());
        for k in [ScopeKey::Shared, chat, user] {
            assert_eq!(ScopeKey::parse(&k.id()), Some(k.clone()));
            if !k.is_shared() {
                let stem = k.dir().file_name().unwrap().to_str().unwrap().to_owned();
                assert_eq!(from_stem(&stem), Some(k));
            }
        }
        for bad in ["", "chat:", "group:x", "shared:x"] {
            assert_eq!(ScopeKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn any_id_stays_one_folder_below_scopes() {
        let ids = [
            "../../etc",
            "/abs",
            "a/b\\c",
            "..",
            ".",
            "\u{0}nul",
            "日本語のチャット",
            &"x".repeat(10_000),
        ];
        let mut seen = HashSet::new();
        for (i, id) in ids.iter().enumerate() {
            for k in [ScopeKey::Chat((*id).to_owned()), ScopeKey::User((*id).to_owned())] {
                let dir = k.dir();
                let parts: Vec<Component> = dir.components().collect();
                assert_eq!(parts.len(), 3, "{dir:?}");
                assert!(parts.iter().all(|c| matches!(c, Component::Normal(_))), "{dir:?}");
                assert!(dir.starts_with("memory/scopes"));
                assert!(dir.file_name().unwrap().len() <= 180);
                assert!(seen.insert(dir), "scope {i} shares a folder");
            }
        }
    }
}
