//! What the WebUI of the `websocket` channel may read: sessions (and delete one), `MEMORY.md`, `history.jsonl`
//! and the cron jobs, from this gateway's stores. The channel crate knows none of these paths.

use std::path::PathBuf;

use async_trait::async_trait;
use nanobot_sessions::SessionStore;
use nanobot_websocket::{SessionSummary, WebSocketError, WebUiStore};
use serde_json::Value;

/// Most sessions listed.
const MAX_SESSIONS: usize = 300;

/// The gateway's [`WebUiStore`].
pub(crate) struct GatewayWebUiStore {
    pub(crate) sessions: SessionStore,
    pub(crate) workspace: PathBuf,
    /// What `GET /api/settings` shows ([`settings_view`]).
    pub(crate) settings: Value,
}

/// The read-only settings view of 0.3.5's `GET /api/settings` (the fields this version has): the agent's model
/// settings and, per configured provider, whether it has a key. Never a key, header or URL credential.
pub(crate) fn settings_view(config: &nanobot_config::Config) -> Value {
    let d = &config.resolved_defaults();
    let has_key = |p: &nanobot_config::ProviderConfig| p.api_key.as_ref().is_some_and(|k| !k.is_empty());
    let providers: Vec<Value> = config
        .providers
        .0
        .iter()
        .map(|(name, p)| serde_json::json!({"name": name, "has_api_key": has_key(p), "api_type": p.api_type}))
        .collect();
    serde_json::json!({
        "agent": {
            "model": d.model,
            "provider": d.provider,
            "has_api_key": config.providers.get(&d.provider).is_some_and(has_key),
            "model_preset": d.model_preset.clone().unwrap_or_else(|| "default".into()),
            "max_tokens": d.max_tokens,
            "context_window_tokens": d.context_window_tokens,
            "temperature": d.temperature,
            "reasoning_effort": d.reasoning_effort,
            "timezone": d.timezone,
            "tool_hint_max_length": d.tool_hint_max_length,
        },
        "providers": providers,
        "requires_restart": false,
        "read_only": true,
    })
}

fn store_err(what: &'static str) -> impl FnOnce(nanobot_sessions::SessionError) -> WebSocketError {
    move |e| WebSocketError::Store {
        what,
        source: Box::new(e),
    }
}

async fn read_optional(path: PathBuf) -> Result<String, WebSocketError> {
    match tokio::fs::read_to_string(&path).await {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(WebSocketError::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Session metadata naming the websocket client a chat belongs to (nanobot-rs; 0.3.5 keeps it untouched).
const CHAT_OWNER_KEY: &str = "websocket_owner";

#[async_trait]
impl WebUiStore for GatewayWebUiStore {
    async fn sessions(&self) -> Result<Vec<SessionSummary>, WebSocketError> {
        let mut list = self
            .sessions
            .list_sessions()
            .await
            .map_err(store_err("sessions"))?;
        list.truncate(MAX_SESSIONS);
        let mut out = Vec::with_capacity(list.len());
        for info in list {
            let title = self
                .sessions
                .with_session(&info.key, |s| {
                    s.messages
                        .iter()
                        .find(|m| m.role() == Some("user"))
                        .and_then(|m| m.content_text())
                        .unwrap_or_default()
                })
                .await
                .unwrap_or_default();
            let title = nanobot_core::strip_runtime_context(&title);
            let title: String = title
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(80)
                .collect();
            let chat_id = info
                .key
                .strip_prefix("websocket:")
                .filter(|c| nanobot_websocket::is_valid_chat_id(c))
                .map(str::to_owned);
            out.push(SessionSummary {
                key: info.key,
                chat_id,
                title,
                updated_at: info.updated_at.format("%Y-%m-%dT%H:%M:%S").to_string(),
            });
        }
        Ok(out)
    }

    async fn messages(&self, key: &str) -> Result<Vec<Value>, WebSocketError> {
        if !self.sessions.exists(key).await.map_err(store_err("session"))? {
            return Ok(Vec::new());
        }
        self.sessions
            .with_session(key, |s| {
                s.messages
                    .iter()
                    .map(|m| {
                        let mut map = m.as_map().clone();
                        if m.role() == Some("user")
                            && let Some(Value::String(text)) = map.get_mut("content")
                        {
                            *text = nanobot_core::strip_runtime_context(text);
                        }
                        Value::Object(map)
                    })
                    .collect()
            })
            .await
            .map_err(store_err("session"))
    }

    async fn chat_owner(&self, key: &str) -> Result<nanobot_websocket::ChatOwner, WebSocketError> {
        use nanobot_websocket::ChatOwner;
        if !self.sessions.exists(key).await.map_err(store_err("session"))? {
            return Ok(ChatOwner::Nobody);
        }
        let meta = self.sessions.metadata(key).await.map_err(store_err("session"))?;
        Ok(match meta.get(CHAT_OWNER_KEY).and_then(Value::as_str) {
            Some(client) => ChatOwner::Client(client.to_owned()),
            None => ChatOwner::Unrecorded,
        })
    }

    async fn set_chat_owner(&self, key: &str, client: &str) -> Result<(), WebSocketError> {
        let client = Value::String(client.to_owned());
        let set = move |h: &mut nanobot_sessions::SessionHeader| {
            h.metadata.insert(CHAT_OWNER_KEY.into(), client);
        };
        if self.sessions.exists(key).await.map_err(store_err("session"))? {
            self.sessions.update_header(key, set).await.map(drop)
        } else {
            self.sessions.append_with_header(key, Vec::new(), set).await
        }
        .map_err(store_err("session"))
    }

    async fn delete(&self, key: &str) -> Result<bool, WebSocketError> {
        if !self.sessions.exists(key).await.map_err(store_err("session"))? {
            return Ok(false);
        }
        self.sessions.delete(key).await.map_err(store_err("session"))?;
        Ok(true)
    }

    async fn create(&self, key: &str, messages: Vec<Value>) -> Result<(), WebSocketError> {
        if self.sessions.exists(key).await.map_err(store_err("session"))? {
            return Err(WebSocketError::Unsupported("replace an existing session"));
        }
        let messages = messages
            .into_iter()
            .filter_map(|m| match m {
                Value::Object(map) => Some(nanobot_sessions::SessionMessage::from_map(map)),
                _ => None,
            })
            .collect();
        self.sessions
            .append(key, messages)
            .await
            .map_err(store_err("session"))
    }

    async fn settings(&self) -> Result<Value, WebSocketError> {
        Ok(self.settings.clone())
    }

    async fn memory(&self) -> Result<String, WebSocketError> {
        read_optional(nanobot_config::paths::workspace::memory_dir(&self.workspace).join("MEMORY.md")).await
    }

    async fn history(&self, limit: usize) -> Result<Vec<Value>, WebSocketError> {
        let text = read_optional(
            nanobot_config::paths::workspace::memory_dir(&self.workspace).join("history.jsonl"),
        )
        .await?;
        let entries: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let skip = entries.len().saturating_sub(limit);
        Ok(entries.into_iter().skip(skip).collect())
    }

    async fn cron_jobs(&self) -> Result<Vec<Value>, WebSocketError> {
        let text = read_optional(nanobot_config::paths::workspace::cron_jobs(&self.workspace)).await?;
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| WebSocketError::Store {
            what: "cron/jobs.json",
            source: Box::new(e),
        })?;
        Ok(v.get("jobs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }

    fn commands(&self) -> Vec<(String, String)> {
        nanobot_core::commands::COMMANDS
            .iter()
            .map(|(name, _, desc)| (format!("/{name}"), (*desc).to_owned()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_view_never_shows_a_key() {
        let mut config = nanobot_config::Config::default();
        config.agents.defaults.provider = "openrouter".into();
        config.agents.defaults.model = "some/model".into();
        config.providers.insert(
            "openrouter",
            nanobot_config::ProviderConfig {
                api_key: Some(nanobot_config::Secret::new("sk-or-very-secret")),
                api_base: Some("https://user:pw-secret@example.com/v1".into()),
                ..Default::default()
            },
        );
        let v = settings_view(&config);
        let text = v.to_string();
        assert!(
            !text.contains("very-secret") && !text.contains("pw-secret"),
            "{text}"
        );
        assert_eq!(v["agent"]["model"], "some/model");
        assert_eq!(v["agent"]["has_api_key"], true);
        assert_eq!(v["providers"][0]["name"], "openrouter");
    }
}
