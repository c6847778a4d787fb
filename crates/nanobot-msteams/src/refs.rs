//! The conversation references answers are sent with, kept where 0.3.5 keeps them
//! (`<workspace>/state/msteams_conversations.json`, the times in `msteams_conversations_meta.json`, writers
//! serialised by a lock on `msteams_conversations.lock`), so a home works with either program.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use nanobot_util::lock;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::settings::MsTeamsSettings;

const REFS_FILE: &str = "msteams_conversations.json";
const META_FILE: &str = "msteams_conversations_meta.json";
const LOCK_FILE: &str = "msteams_conversations.lock";
/// Largest references file read (a reference is a few hundred bytes).
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// The Bot Framework's Web Chat, which 0.3.5 does not answer (`pruneWebChatRefs`).
const WEB_CHAT_HOST: &str = "webchat.botframework.com";

/// Where and how to answer in one conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationRef {
    /// The Bot Connector to post to.
    pub service_url: String,
    /// The conversation.
    pub conversation_id: String,
    /// The bot's id in the conversation.
    #[serde(default)]
    pub bot_id: Option<String>,
    /// The last message's id (answers reply to it with `replyInThread`).
    #[serde(default)]
    pub activity_id: Option<String>,
    /// `personal`, `groupChat` or `channel`.
    #[serde(default)]
    pub conversation_type: Option<String>,
    /// The user's tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Seconds since the epoch when it was last used (kept in the sidecar file).
    #[serde(skip)]
    pub updated_at: f64,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The references, in memory and on disk.
pub(crate) struct RefStore {
    dir: PathBuf,
    settings: MsTeamsSettings,
    refs: Mutex<HashMap<String, ConversationRef>>,
}

impl RefStore {
    /// The references stored in `dir` (stale and unsupported ones dropped, and the files rewritten when some
    /// were). A missing or unreadable file is an empty store, as 0.3.5 treats it.
    pub(crate) fn open(dir: &Path, settings: &MsTeamsSettings) -> Self {
        let store = Self {
            dir: dir.to_path_buf(),
            settings: settings.clone(),
            refs: Mutex::new(HashMap::new()),
        };
        let mut refs = store.read_disk();
        if store.prune(&mut refs, now()) {
            *lock(&store.refs) = refs;
            store.save();
        } else {
            *lock(&store.refs) = refs;
        }
        store
    }

    /// The reference of `chat_id`.
    pub(crate) fn get(&self, chat_id: &str) -> Option<ConversationRef> {
        lock(&self.refs).get(chat_id).cloned()
    }

    /// Keeps `r` for its conversation and writes the files.
    pub(crate) fn remember(&self, mut r: ConversationRef) {
        r.updated_at = now();
        lock(&self.refs).insert(r.conversation_id.clone(), r);
        self.save();
    }

    /// Marks `chat_id`'s reference as used (written at most every `refTouchIntervalS`).
    pub(crate) fn touch(&self, chat_id: &str) {
        let now = now();
        {
            let mut refs = lock(&self.refs);
            let Some(r) = refs.get_mut(chat_id) else {
                return;
            };
            let interval = self.settings.ref_touch_interval_s as f64;
            if interval > 0.0 && r.updated_at > 0.0 && now - r.updated_at < interval {
                return;
            }
            r.updated_at = now;
        }
        self.save();
    }

    fn read_json(path: &Path) -> Option<serde_json::Map<String, Value>> {
        let text = match nanobot_util::read_to_string_bounded(path, MAX_FILE_BYTES) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "msteams: conversation references not read");
                return None;
            }
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Some(map),
            _ => {
                tracing::warn!(path = %path.display(), "msteams: conversation references are not a JSON object; ignored");
                None
            }
        }
    }

    fn read_disk(&self) -> HashMap<String, ConversationRef> {
        let Some(main) = Self::read_json(&self.dir.join(REFS_FILE)) else {
            return HashMap::new();
        };
        let meta = Self::read_json(&self.dir.join(META_FILE)).unwrap_or_default();
        let now = now();
        main.into_iter()
            .filter_map(|(key, value)| {
                let mut r: ConversationRef = serde_json::from_value(value).ok()?;
                if r.service_url.trim().is_empty() || r.conversation_id.trim().is_empty() {
                    return None;
                }
                let stamped = match meta.get(&key) {
                    Some(Value::Object(m)) => m.get("updated_at").and_then(Value::as_f64),
                    Some(v) => v.as_f64(),
                    None => None,
                }
                .filter(|t| *t > 0.0);
                // Without a time (files of an older 0.3.x have no sidecar) a reference starts fresh instead of
                // expiring at once, as 0.3.5 does.
                r.updated_at = stamped.unwrap_or(now);
                Some((key, r))
            })
            .collect()
    }

    /// Drops references that are stale, untrusted, Web Chat's, or not personal (as configured); true when some
    /// were.
    fn prune(&self, refs: &mut HashMap<String, ConversationRef>, now: f64) -> bool {
        let before = refs.len();
        let stale_before = now - f64::from(self.settings.ref_ttl_days) * 86_400.0;
        refs.retain(|_, r| {
            if !self.settings.is_trusted_service_url(&r.service_url) {
                return false;
            }
            let web_chat = url::Url::parse(&r.service_url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
                .is_some_and(|h| h == WEB_CHAT_HOST || h.ends_with(&format!(".{WEB_CHAT_HOST}")));
            if self.settings.prune_web_chat_refs && web_chat {
                return false;
            }
            let kind = r
                .conversation_type
                .as_deref()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if self.settings.prune_non_personal_refs && !kind.is_empty() && kind != "personal" {
                return false;
            }
            r.updated_at > 0.0 && r.updated_at >= stale_before
        });
        let dropped = before - refs.len();
        if dropped > 0 {
            tracing::info!(
                dropped,
                ttl_days = self.settings.ref_ttl_days,
                "msteams: stale or unsupported conversation references forgotten"
            );
        }
        dropped > 0
    }

    /// Writes the references under the lock, merged with what another process wrote (the newer of each wins).
    fn save(&self) {
        if let Err(e) = self.try_save() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "msteams: conversation references not saved");
        }
    }

    fn try_save(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let lock_file = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(LOCK_FILE))?;
        lock_file.lock()?;
        let disk = self.read_disk();
        let (main, meta) = {
            let mut refs = lock(&self.refs);
            for (key, theirs) in disk {
                match refs.get(&key) {
                    Some(ours) if ours.updated_at >= theirs.updated_at => {}
                    _ => {
                        refs.insert(key, theirs);
                    }
                }
            }
            self.prune(&mut refs, now());
            let mut keys: Vec<&String> = refs.keys().collect();
            keys.sort();
            let mut main = serde_json::Map::new();
            let mut meta = serde_json::Map::new();
            for key in keys {
                let r = &refs[key];
                main.insert(key.clone(), serde_json::to_value(r).unwrap_or(Value::Null));
                meta.insert(key.clone(), serde_json::json!({"updated_at": r.updated_at}));
            }
            (main, meta)
        };
        let pretty = |m: serde_json::Map<String, Value>| {
            serde_json::to_vec_pretty(&Value::Object(m)).unwrap_or_default()
        };
        nanobot_util::write_atomic(&self.dir.join(REFS_FILE), &pretty(main))?;
        nanobot_util::write_atomic(&self.dir.join(META_FILE), &pretty(meta))?;
        lock_file.unlock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(extra: Value) -> MsTeamsSettings {
        let mut block = json!({"appId": "a", "appPassword": "p", "trustedServiceUrlHosts": ["smba.trafficmanager.net", "*.botframework.com"]});
        if let (Value::Object(b), Value::Object(e)) = (&mut block, extra) {
            b.extend(e);
        }
        MsTeamsSettings::from_block(&block).unwrap()
    }

    fn r(conversation: &str, service: &str, kind: &str) -> ConversationRef {
        ConversationRef {
            service_url: service.into(),
            conversation_id: conversation.into(),
            bot_id: Some("28:bot".into()),
            activity_id: Some("act-1".into()),
            conversation_type: Some(kind.into()),
            tenant_id: Some("t".into()),
            updated_at: 0.0,
        }
    }

    #[test]
    fn references_are_written_as_0_3_5_writes_them_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = RefStore::open(dir.path(), &settings(json!({})));
        store.remember(r("a:1", "https://smba.trafficmanager.net/amer/", "personal"));
        let main: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(REFS_FILE)).unwrap()).unwrap();
        assert_eq!(
            main["a:1"]["service_url"],
            "https://smba.trafficmanager.net/amer/"
        );
        assert_eq!(main["a:1"]["activity_id"], "act-1");
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(META_FILE)).unwrap()).unwrap();
        assert!(meta["a:1"]["updated_at"].as_f64().unwrap() > 1.0e9);
        let again = RefStore::open(dir.path(), &settings(json!({})));
        assert_eq!(again.get("a:1").unwrap().conversation_id, "a:1");
    }

    #[test]
    fn stale_untrusted_web_chat_and_group_references_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let day = 86_400.0;
        let t = now();
        let main = json!({
            "fresh": r("fresh", "https://smba.trafficmanager.net/amer/", "personal"),
            "old": r("old", "https://smba.trafficmanager.net/amer/", "personal"),
            "evil": r("evil", "https://evil.example/", "personal"),
            "web": r("web", "https://webchat.botframework.com/", "personal"),
            "group": r("group", "https://smba.trafficmanager.net/amer/", "groupChat"),
        });
        let meta = json!({"fresh": {"updated_at": t - day}, "old": {"updated_at": t - 31.0 * day},
                          "evil": {"updated_at": t}, "web": {"updated_at": t}, "group": t});
        std::fs::write(dir.path().join(REFS_FILE), main.to_string()).unwrap();
        std::fs::write(dir.path().join(META_FILE), meta.to_string()).unwrap();
        let store = RefStore::open(dir.path(), &settings(json!({})));
        let mut kept: Vec<String> = lock(&store.refs).keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, ["fresh"]);
        let on_disk: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(REFS_FILE)).unwrap()).unwrap();
        assert_eq!(on_disk.as_object().unwrap().len(), 1, "{on_disk}");
        let store = RefStore::open(
            dir.path(),
            &settings(json!({"pruneNonPersonalRefs": false, "pruneWebChatRefs": false})),
        );
        store.remember(r("group", "https://smba.trafficmanager.net/amer/", "groupChat"));
        assert!(store.get("group").is_some());
    }

    #[test]
    fn files_without_the_sidecar_start_fresh_and_broken_files_are_empty() {
        let dir = tempfile::tempdir().unwrap();
        let main = json!({"a": r("a", "https://smba.trafficmanager.net/amer/", "personal")});
        std::fs::write(dir.path().join(REFS_FILE), main.to_string()).unwrap();
        assert!(
            RefStore::open(dir.path(), &settings(json!({})))
                .get("a")
                .is_some()
        );
        std::fs::write(dir.path().join(REFS_FILE), "{not json").unwrap();
        assert!(
            RefStore::open(dir.path(), &settings(json!({})))
                .get("a")
                .is_none()
        );
    }

    #[test]
    fn another_writer_s_newer_references_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let one = RefStore::open(dir.path(), &settings(json!({})));
        let two = RefStore::open(dir.path(), &settings(json!({})));
        one.remember(r("a:1", "https://smba.trafficmanager.net/amer/", "personal"));
        two.remember(r("a:2", "https://smba.trafficmanager.net/amer/", "personal"));
        let three = RefStore::open(dir.path(), &settings(json!({})));
        assert!(three.get("a:1").is_some() && three.get("a:2").is_some());
    }
}
