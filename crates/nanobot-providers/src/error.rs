//! Turning HTTP transport failures and response headers into [`ProviderError`]s (the enum itself lives in
//! `nanobot-types`, beside the `Provider` trait).

use std::time::Duration;

use nanobot_types::ProviderError;

/// Classifies a transport error from reqwest (timeouts and connection failures are transient; an
/// undecodable body is a decode error). The URL is dropped so query-string keys never reach a message.
pub fn from_reqwest(provider: &str, err: reqwest::Error) -> ProviderError {
    let message = if err.is_timeout() {
        "request timed out".to_owned()
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else if err.is_decode() {
        return ProviderError::decode(
            provider,
            "invalid response body",
            Some(Box::new(err.without_url())),
        );
    } else {
        "connection failed".to_owned()
    };
    // `without_url` keeps query-string keys (Gemini `?key=`) out of messages and logs.
    ProviderError::transient(provider, message, Some(Box::new(err.without_url())))
}

/// Reads the delay a server asked for: `retry-after-ms` (milliseconds) or `Retry-After` (seconds, fractions
/// allowed).
pub fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    if let Some(ms) = number("retry-after-ms")
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = number("retry-after")?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}
