//! `transcription`: speech-to-text for voice messages.

use serde::{Deserialize, Serialize};

use super::extra::Extra;

/// `transcription`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TranscriptionConfig {
    /// Whether voice messages are transcribed.
    pub enabled: bool,
    /// Provider name (`null` = `channels.transcriptionProvider`).
    pub provider: Option<String>,
    /// Model id (`null` = the provider's default, e.g. `whisper-large-v3`).
    pub model: Option<String>,
    /// Language hint (ISO 639-1).
    pub language: Option<String>,
    /// Longer recordings are not transcribed.
    #[serde(alias = "max_duration_sec")]
    pub max_duration_sec: u32,
    /// Larger uploads are not transcribed.
    #[serde(alias = "max_upload_mb")]
    pub max_upload_mb: u32,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            provider: None,
            model: None,
            language: None,
            max_duration_sec: 120,
            max_upload_mb: 25,
            extra: Extra::default(),
        }
    }
}
