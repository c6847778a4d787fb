//! Voice to text for channels: OpenAI-style Whisper endpoints (Groq, OpenAI) behind [`Transcriber`].

use std::fmt;

use async_trait::async_trait;
use nanobot_config::Config;
use nanobot_util::EnvMap;
use serde_json::Value;

use crate::ProviderError;
use crate::Timeouts;
use crate::registry::find_spec;

/// Turns audio into text.
#[async_trait]
pub trait Transcriber: Send + Sync + fmt::Debug {
    /// Transcribes `audio` (the bytes of `file_name`, e.g. `voice.ogg`, of MIME type `mime`).
    async fn transcribe(&self, audio: Vec<u8>, file_name: &str, mime: &str) -> Result<String, ProviderError>;
}

/// A Whisper-compatible `POST {base}/audio/transcriptions` (multipart) client. `Debug` redacts the key.
#[derive(Clone)]
pub struct WhisperTranscriber {
    provider: String,
    base_url: String,
    api_key: String,
    model: String,
    language: Option<String>,
    http: reqwest::Client,
    timeouts: Timeouts,
}

impl fmt::Debug for WhisperTranscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WhisperTranscriber")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &"[REDACTED]")
            .field("model", &self.model)
            .field("language", &self.language)
            .finish()
    }
}

impl WhisperTranscriber {
    /// A client for any Whisper-compatible endpoint.
    pub fn new(
        provider: impl Into<String>,
        base_url: impl Into<String>,
        api_key: impl Into<String>,
        model: impl Into<String>,
    ) -> Result<Self, ProviderError> {
        let http = crate::http::http_client()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            provider: provider.into(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.into(),
            model: model.into(),
            language: None,
            http,
            timeouts: Timeouts::default(),
        })
    }

    /// Groq (`whisper-large-v3`).
    pub fn groq(api_key: impl Into<String>) -> Result<Self, ProviderError> {
        Self::new(
            "groq",
            "https://api.groq.com/openai/v1",
            api_key,
            "whisper-large-v3",
        )
    }

    /// OpenAI (`whisper-1`).
    pub fn openai(api_key: impl Into<String>) -> Result<Self, ProviderError> {
        Self::new("openai", "https://api.openai.com/v1", api_key, "whisper-1")
    }

    /// Sets the spoken language hint (ISO-639-1).
    pub fn with_language(mut self, language: Option<String>) -> Self {
        self.language = language.filter(|l| !l.is_empty());
        self
    }

    /// Sets the model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }
}

#[async_trait]
impl Transcriber for WhisperTranscriber {
    async fn transcribe(&self, audio: Vec<u8>, file_name: &str, mime: &str) -> Result<String, ProviderError> {
        let provider = self.provider.as_str();
        let part = reqwest::multipart::Part::bytes(audio)
            .file_name(file_name.to_owned())
            .mime_str(mime)
            .map_err(|e| ProviderError::Config(format!("{provider}: bad MIME type `{mime}`: {e}")))?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", part)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if let Some(l) = &self.language {
            form = form.text("language", l.clone());
        }
        let url = format!("{}/audio/transcriptions", self.base_url);
        tracing::debug!(provider, url, model = %self.model, "transcription request");
        let send = self
            .http
            .post(&url)
            .bearer_auth(&self.api_key)
            .multipart(form)
            .send();
        let resp = match tokio::time::timeout(self.timeouts.request, send).await {
            Err(_) => {
                return Err(ProviderError::transient(
                    provider,
                    "transcription timed out",
                    None,
                ));
            }
            Ok(Err(e)) => return Err(crate::error::from_reqwest(provider, e)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let retry_after = crate::parse_retry_after(resp.headers());
        let body = resp
            .text()
            .await
            .map_err(|e| crate::error::from_reqwest(provider, e))?;
        if !status.is_success() {
            return Err(ProviderError::from_http(
                provider,
                status.as_u16(),
                retry_after,
                &body,
            ));
        }
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| ProviderError::decode(provider, "transcription is not JSON", Some(Box::new(e))))?;
        v.get("text")
            .and_then(Value::as_str)
            .map(|t| t.trim().to_owned())
            .ok_or_else(|| ProviderError::decode(provider, "transcription has no `text`", None))
    }
}

/// The transcriber the config asks for (`transcription.provider`, else `channels.transcriptionProvider`,
/// default Groq), with the key from `providers.<name>.apiKey` or the environment. `Ok(None)` when
/// transcription is disabled or no key is available.
pub fn transcriber_from_config(
    config: &Config,
    env: &EnvMap,
) -> Result<Option<WhisperTranscriber>, ProviderError> {
    let t = &config.transcription;
    if !t.enabled {
        return Ok(None);
    }
    let name = t
        .provider
        .clone()
        .or_else(|| config.channels.transcription_provider.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "groq".to_owned());
    let block = config.providers.get(&name);
    let spec = find_spec(&name);
    let key = block
        .and_then(|b| b.api_key.as_ref())
        .filter(|k| !k.is_empty())
        .map(|k| k.expose().to_owned())
        .or_else(|| spec.and_then(|s| s.env_keys.iter().find_map(|v| env.get(v).map(str::to_owned))));
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    let mut tr = match name.as_str() {
        "openai" => WhisperTranscriber::openai(key)?,
        _ => WhisperTranscriber::groq(key)?,
    };
    if let Some(base) = block.and_then(|b| b.api_base.clone()).filter(|b| !b.is_empty()) {
        tr = tr.with_base_url(base);
    }
    if let Some(m) = t.model.clone().filter(|m| !m.is_empty()) {
        tr = tr.with_model(m);
    }
    let language = t
        .language
        .clone()
        .or_else(|| config.channels.transcription_language.clone());
    Ok(Some(tr.with_language(language)))
}
