//! [`ProviderError`]: every failure of a model call, classified once at the boundary by what the caller does
//! next. (The HTTP clients in `nanobot-providers` build it from transport errors and responses.)

use std::time::Duration;

/// A boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a model call (or setting up a provider) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The key was missing, wrong or not allowed (HTTP 401/403).
    #[error("{provider}: authentication failed (HTTP {status}): {message}")]
    Auth {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// Too many requests (HTTP 429); retry after the given delay when known.
    #[error("{provider}: rate limited{}: {message}", retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    RateLimited {
        /// Provider name.
        provider: String,
        /// The `Retry-After` delay, when the provider sent one.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The account is out of quota/credit (HTTP 429 `insufficient_quota`, 402): retrying will not help.
    #[error("{provider}: quota or credit exhausted: {message}")]
    QuotaExceeded {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// The prompt is longer than the model's context window.
    #[error("{provider}: context length exceeded: {message}")]
    ContextLengthExceeded {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// A passing failure: timeouts, connection resets, dropped or stalled streams, 408/409/5xx, empty answers.
    #[error("{provider}: transient failure: {message}")]
    Transient {
        /// Provider name.
        provider: String,
        /// HTTP status, when there was one.
        status: Option<u16>,
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The provider rejected the request itself (other 4xx): retrying the same request will not help.
    #[error("{provider}: invalid request (HTTP {status}): {message}")]
    InvalidRequest {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The answer could not be understood.
    #[error("{provider}: could not decode the response: {message}")]
    Decode {
        /// Provider name.
        provider: String,
        /// What was wrong.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// No API key for the chosen provider.
    #[error(
        "no API key for provider `{provider}` (model `{model}`): set `providers.{config_key}.apiKey` in config.json{}",
        env_var.as_ref().map(|v| format!(" or the environment variable {v}")).unwrap_or_default()
    )]
    MissingApiKey {
        /// Provider name.
        provider: String,
        /// The model that was being resolved.
        model: String,
        /// The camelCase key under `providers`.
        config_key: String,
        /// The environment variable that would also do.
        env_var: Option<String>,
    },
    /// The configuration does not say how to reach a model.
    #[error("configuration: {0}")]
    Config(String),
    /// The server could not be reached at all: nothing listening, a host name that does not resolve, a failed
    /// TLS handshake. Not retried: the server or the configuration has to change, and `hint` says what.
    #[error("{provider}: cannot reach {endpoint}: {cause}; {hint}")]
    Unreachable {
        /// Provider name.
        provider: String,
        /// The base URL, without user, password or query.
        endpoint: String,
        /// What went wrong.
        cause: String,
        /// What to change.
        hint: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A wait passed its bound (see `Timeouts`): connecting, the response head, a gap in the body, or the
    /// deadline of the whole call. Names the endpoint (base URL without credentials or query) and how long.
    #[error("{provider}: {}", what.describe(endpoint, *after))]
    TimedOut {
        /// Provider name.
        provider: String,
        /// The base URL, without user, password or query.
        endpoint: String,
        /// Which wait.
        what: WaitKind,
        /// How long was waited.
        after: Duration,
    },
}

/// Which wait of a model call passed its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitKind {
    /// Opening the connection (TCP, TLS).
    Connect,
    /// The response head after the request was sent.
    Head,
    /// The next byte of the body (the stream stalled).
    Idle,
    /// The whole call, retries included.
    Deadline,
}

impl WaitKind {
    /// One sentence naming `endpoint` and `after`.
    pub fn describe(self, endpoint: &str, after: Duration) -> String {
        let after = human(after);
        match self {
            Self::Connect => format!("could not connect to {endpoint} within {after}"),
            Self::Head => format!("{endpoint} stalled: no response for {after} after the request was sent"),
            Self::Idle => format!("{endpoint} stalled: nothing received for {after}"),
            Self::Deadline => {
                format!("{endpoint} did not finish the answer within the call deadline of {after}")
            }
        }
    }
}

/// `1.5s`, `200ms`, `10m 0s`.
fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else {
        format!("{d:?}")
    }
}

impl ProviderError {
    /// A short name of the kind of failure (`rate_limited`, `timed_out`, …), for metrics and trace attributes:
    /// never the provider's words, which may echo the request.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Auth { .. } => "auth",
            Self::RateLimited { .. } => "rate_limited",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::ContextLengthExceeded { .. } => "context_length_exceeded",
            Self::Transient { .. } => "transient",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::Decode { .. } => "decode",
            Self::MissingApiKey { .. } => "missing_api_key",
            Self::Config(_) => "config",
            Self::Unreachable { .. } => "unreachable",
            Self::TimedOut { .. } => "timed_out",
        }
    }

    /// True when the same request may succeed if tried again (rate limits and transient failures).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. } | Self::Transient { .. } => true,
            Self::TimedOut { what, .. } => *what != WaitKind::Deadline,
            _ => false,
        }
    }

    /// The delay the provider asked for, when it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A transient error without an HTTP status.
    pub fn transient(provider: &str, message: impl Into<String>, source: Option<BoxError>) -> Self {
        Self::Transient {
            provider: provider.to_owned(),
            status: None,
            message: message.into(),
            source,
        }
    }

    /// A decode error.
    pub fn decode(provider: &str, message: impl Into<String>, source: Option<BoxError>) -> Self {
        Self::Decode {
            provider: provider.to_owned(),
            message: message.into(),
            source,
        }
    }

    /// Classifies an HTTP error answer (status, headers, body) once. A web page (HTML) is not a model API's
    /// error: it is named as such (never shown), and only a gateway's 502/503/504 page is taken as temporary.
    pub fn from_http(provider: &str, status: u16, retry_after: Option<Duration>, body: &str) -> Self {
        if is_web_page(body) {
            let message = format!("{WEB_PAGE_ANSWER} (HTTP {status})");
            return match status {
                502..=504 => Self::Transient {
                    provider: provider.to_owned(),
                    status: Some(status),
                    message,
                    source: None,
                },
                _ => Self::InvalidRequest {
                    provider: provider.to_owned(),
                    status,
                    message,
                },
            };
        }
        let message = error_message(body);
        let lower = body.to_ascii_lowercase();
        let provider = provider.to_owned();
        let context = [
            "context_length_exceeded",
            "context length",
            "context window",
            "maximum context",
            "prompt is too long",
            "too many tokens",
            "input is too long",
            "reduce the length",
            // llama.cpp's server: `exceed_context_size_error`, "exceeds the available context size".
            "context size",
        ]
        .iter()
        .any(|p| lower.contains(p));
        match status {
            401 | 403 => Self::Auth {
                provider,
                status,
                message,
            },
            402 => Self::QuotaExceeded { provider, message },
            429 if lower.contains("insufficient_quota") || lower.contains("quota exceeded") => {
                Self::QuotaExceeded { provider, message }
            }
            429 => Self::RateLimited {
                provider,
                retry_after,
                message,
            },
            400 | 413 | 422 if context => {
                // llama.cpp's server gives its context size beside the message: keep it where it can be read.
                let n_ctx = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.pointer("/error/n_ctx").and_then(serde_json::Value::as_u64));
                let message = match n_ctx {
                    Some(n) if served_window(&message).is_none() => {
                        format!("{message} (the server's context size is {n} tokens)")
                    }
                    _ => message,
                };
                Self::ContextLengthExceeded { provider, message }
            }
            408 | 409 | 425 | 500..=599 => Self::Transient {
                provider,
                status: Some(status),
                message,
                source: None,
            },
            _ => Self::InvalidRequest {
                provider,
                status,
                message,
            },
        }
    }
}

impl ProviderError {
    /// For a context-length error, the context window the server says it serves, read from its message
    /// (OpenAI, vLLM and llama-cpp-python: "maximum context length is N tokens"; llama.cpp: its `n_ctx`;
    /// LM Studio: "loaded with context length of only N tokens"; "exceed context window of N").
    pub fn served_context_window(&self) -> Option<u64> {
        match self {
            Self::ContextLengthExceeded { message, .. } => served_window(message),
            _ => None,
        }
    }
}

/// The number after the first phrase that states a context size.
fn served_window(message: &str) -> Option<u64> {
    let lower = message.to_ascii_lowercase();
    [
        "maximum context length is",
        "context window of",
        "context size is",
        "context length of only",
        "context length of",
    ]
    .iter()
    .find_map(|phrase| {
        let rest = &lower[lower.find(phrase)? + phrase.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok().filter(|n| *n > 0)
    })
}

/// How an error answer that is a web page starts its message ([`ProviderError::from_http`]).
pub const WEB_PAGE_ANSWER: &str = "the server answered with a web page, not a model API";

/// Whether `body` is an HTML page.
fn is_web_page(body: &str) -> bool {
    let head: String = body
        .trim_start()
        .chars()
        .take(256)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html")
        || head.starts_with("<html")
        || (head.starts_with('<') && head.contains("<body"))
}

/// Pulls a readable message out of an error body (`{"error":{"message":…}}`, `{"message":…}`, or the text).
fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let m = v
            .pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("detail"));
        if let Some(serde_json::Value::String(s)) = m {
            return s.clone();
        }
    }
    let mut s: String = body.chars().take(500).collect();
    if s.is_empty() {
        s = "(empty body)".to_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_window_a_server_states_is_read_from_its_context_error() {
        let cases = [
            // llama-cpp-python and vLLM (OpenAI's wording).
            (
                r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, you requested 5210 tokens (5210 in the messages, None in the completion).","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
                Some(2048),
            ),
            // llama.cpp's server: the size beside the message.
            (
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5210,"n_ctx":4096}}"#,
                Some(4096),
            ),
            // LM Studio.
            (
                r#"{"error":"Trying to keep the first 9000 tokens when context the overflows. However, the model is loaded with context length of only 8,192 tokens, which is not enough."}"#,
                Some(8192),
            ),
            (r#"{"error":{"message":"prompt is too long"}}"#, None),
        ];
        for (body, window) in cases {
            let e = ProviderError::from_http("p", 400, None, body);
            assert!(matches!(e, ProviderError::ContextLengthExceeded { .. }), "{body}");
            assert_eq!(e.served_context_window(), window, "{body}");
        }
        let other = ProviderError::from_http(
            "p",
            400,
            None,
            r#"{"error":{"message":"context window of 5 bad"}}"#,
        );
        assert_eq!(other.served_context_window(), Some(5));
        let transient = ProviderError::from_http("p", 500, None, "maximum context length is 9 tokens");
        assert_eq!(transient.served_context_window(), None);
    }

    #[test]
    fn a_web_page_is_named_not_shown_and_not_retried_unless_a_gateway_page() {
        let page =
            "<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body><h1>It works</h1></body></html>";
        for status in [404, 405, 500] {
            let e = ProviderError::from_http("p", status, None, page);
            assert!(!e.is_retryable(), "{status}: {e:?}");
            let text = e.to_string();
            assert!(
                text.contains(WEB_PAGE_ANSWER) && !text.contains("It works"),
                "{text}"
            );
        }
        let proxy = ProviderError::from_http("p", 502, None, "<html><body>Bad Gateway</body></html>");
        assert!(proxy.is_retryable());
        // A JSON error mentioning tags is not a page.
        let json = ProviderError::from_http("p", 500, None, r#"{"error":{"message":"bad <b>tag</b>"}}"#);
        assert!(json.to_string().contains("bad <b>tag</b>"));
    }

    #[test]
    fn classification() {
        assert!(matches!(
            ProviderError::from_http("p", 401, None, "{}"),
            ProviderError::Auth { .. }
        ));
        let rl = ProviderError::from_http(
            "p",
            429,
            Some(Duration::from_secs(2)),
            r#"{"error":{"message":"slow down"}}"#,
        );
        assert!(rl.is_retryable());
        assert_eq!(rl.retry_after(), Some(Duration::from_secs(2)));
        assert!(rl.to_string().contains("slow down"));
        let q = ProviderError::from_http("p", 429, None, r#"{"error":{"code":"insufficient_quota"}}"#);
        assert!(!q.is_retryable());
        let ctx = ProviderError::from_http(
            "p",
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens"}}"#,
        );
        assert!(matches!(ctx, ProviderError::ContextLengthExceeded { .. }));
        let llama = ProviderError::from_http(
            "p",
            400,
            None,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5210,"n_ctx":4096}}"#,
        );
        assert!(
            matches!(llama, ProviderError::ContextLengthExceeded { .. }),
            "{llama:?}"
        );
        assert!(ProviderError::from_http("p", 503, None, "").is_retryable());
        assert!(ProviderError::from_http("p", 529, None, "").is_retryable());
        assert!(ProviderError::from_http("p", 408, None, "").is_retryable());
        assert!(!ProviderError::from_http("p", 400, None, "bad").is_retryable());
    }

    #[test]
    fn missing_key_names_the_fix() {
        let e = ProviderError::MissingApiKey {
            provider: "openrouter".into(),
            model: "openrouter/x".into(),
            config_key: "openrouter".into(),
            env_var: Some("OPENROUTER_API_KEY".into()),
        };
        let s = e.to_string();
        assert!(
            s.contains("providers.openrouter.apiKey") && s.contains("OPENROUTER_API_KEY"),
            "{s}"
        );
    }
}
