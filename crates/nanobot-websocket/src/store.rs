//! [`WebUiStore`]: what the WebUI may read (and the one thing it may delete) outside the bus.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::WebSocketError;

/// One row of the session list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    /// Session key (`websocket:<chat_id>` for WebUI chats).
    pub key: String,
    /// The chat id when the session belongs to this channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    /// A short title (the first user message).
    pub title: String,
    /// Last update, RFC 3339.
    pub updated_at: String,
}

/// Read access to the agent's stores, passed in by whoever composes the channel (the gateway). The channel never
/// opens `~/.nanobot` itself.
#[async_trait]
pub trait WebUiStore: Send + Sync {
    /// Sessions, newest first.
    async fn sessions(&self) -> Result<Vec<SessionSummary>, WebSocketError>;
    /// The messages of one session (`role`, `content`, … as stored), oldest first.
    async fn messages(&self, key: &str) -> Result<Vec<Value>, WebSocketError>;
    /// Deletes one session; `false` when it did not exist.
    async fn delete(&self, key: &str) -> Result<bool, WebSocketError>;
    /// The text of `MEMORY.md` (empty when absent).
    async fn memory(&self) -> Result<String, WebSocketError>;
    /// The newest entries of `history.jsonl`, newest last.
    async fn history(&self, limit: usize) -> Result<Vec<Value>, WebSocketError>;
    /// The cron jobs as stored in `cron/jobs.json`.
    async fn cron_jobs(&self) -> Result<Vec<Value>, WebSocketError>;
    /// Creates session `key` holding `messages` (a fork of another chat); an error when it exists already.
    /// The default refuses ([`WebSocketError::Unsupported`]).
    async fn create(&self, key: &str, messages: Vec<Value>) -> Result<(), WebSocketError> {
        let _ = (key, messages);
        Err(WebSocketError::Unsupported("create sessions"))
    }
    /// The settings the WebUI shows read-only (0.3.5's `GET /api/settings` shape: `agent`, `providers`, …); never
    /// a secret (say `has_api_key`, not the key). The default refuses ([`WebSocketError::Unsupported`]).
    async fn settings(&self) -> Result<Value, WebSocketError> {
        Err(WebSocketError::Unsupported("show settings"))
    }
    /// Which client owns the chat of session `key` ([`ChatOwner`]). The default says nobody (chats are then
    /// claimed per process only).
    async fn chat_owner(&self, key: &str) -> Result<ChatOwner, WebSocketError> {
        let _ = key;
        Ok(ChatOwner::Nobody)
    }
    /// Records that `client` owns the chat of session `key` (creating its record if the session is new). The
    /// default records nothing.
    async fn set_chat_owner(&self, key: &str, client: &str) -> Result<(), WebSocketError> {
        let _ = (key, client);
        Ok(())
    }
    /// The slash commands: `(name, description)`.
    fn commands(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Who owns a websocket chat, as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChatOwner {
    /// No session holds the chat yet: the first client to use it claims it.
    Nobody,
    /// The session exists and names no client (made before chats had owners): the machine's owner's alone.
    Unrecorded,
    /// This client.
    Client(String),
}
