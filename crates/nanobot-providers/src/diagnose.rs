//! Errors that name their cause: a failed connection is told apart (nothing listening, a name that does not
//! resolve, a TLS failure), and HTTP errors (401/403, 404, 5xx) get the endpoint and what to change in
//! `config.json`. Keys never appear: endpoints are shown without credentials or query, bodies were redacted.

use std::error::Error as StdError;

use crate::ProviderError;
use crate::endpoint::Endpoint;
use crate::registry::config_key;

/// Why a connection could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Refused,
    Dns,
    Tls,
}

/// Finds the cause of a failed request in the error chain.
fn cause(err: &reqwest::Error) -> Option<Cause> {
    let mut text = String::new();
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return Some(Cause::Refused);
            }
            // `io::Error::source` skips the wrapped error itself, which may be another `io::Error`.
            let mut inner = io.get_ref();
            while let Some(i) = inner {
                if i.downcast_ref::<rustls::Error>().is_some() {
                    return Some(Cause::Tls);
                }
                inner = i
                    .downcast_ref::<std::io::Error>()
                    .and_then(std::io::Error::get_ref);
            }
        }
        if e.downcast_ref::<rustls::Error>().is_some() {
            return Some(Cause::Tls);
        }
        text.push_str(&e.to_string().to_ascii_lowercase());
        text.push('\n');
        next = e.source();
    }
    if text.contains("connection refused") {
        Some(Cause::Refused)
    } else if text.contains("dns error")
        || text.contains("failed to lookup address")
        || text.contains("name or service not known")
        || text.contains("no such host")
    {
        Some(Cause::Dns)
    } else if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
        Some(Cause::Tls)
    } else {
        None
    }
}

/// How the message of a request the server dropped starts (its process ended, or it restarted): a retry may
/// find it back, and when the retry is refused, [`after_drop`] says the server has stopped.
pub(crate) const SERVER_DROPPED: &str = "the server closed the connection";

/// Whether the error chain says the connection closed before the answer was complete.
fn dropped(err: &reqwest::Error) -> bool {
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if [
            "connection closed before message completed",
            "connection reset",
            "broken pipe",
            "unexpected eof",
            "end of file before message length reached",
            "incomplete message",
        ]
        .iter()
        .any(|p| text.contains(p))
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The request to `ep` ended by the server closing the connection: before any answer, or (`mid_answer`) in the
/// middle of one. Retried (a restarting server comes back, a stale pooled connection is replaced); the message
/// says what it most likely was and where to look.
fn dropped_error(ep: &Endpoint, err: reqwest::Error, mid_answer: bool) -> ProviderError {
    let when = if mid_answer {
        "in the middle of its answer"
    } else {
        "without answering"
    };
    ProviderError::transient(
        &ep.provider,
        format!(
            "{SERVER_DROPPED} {when} [endpoint {}: did the model server crash or restart? its own log says; a \
             local server that runs out of memory, or fails on a request it cannot compile, ends this way]",
            ep.display_url()
        ),
        Some(Box::new(err.without_url())),
    )
}

/// A failure reading the body of an answer from `ep` (the head had arrived).
pub(crate) fn body_error(ep: &Endpoint, err: reqwest::Error) -> ProviderError {
    if dropped(&err) {
        dropped_error(ep, err, true)
    } else {
        crate::error::from_reqwest(&ep.provider, err)
    }
}

/// The error that ends a call, told apart when an earlier attempt was dropped by the server (`dropped_before`)
/// and this one is refused: the server did not come back, it stopped.
pub(crate) fn after_drop(err: ProviderError, dropped_before: bool) -> ProviderError {
    match err {
        ProviderError::Unreachable {
            provider,
            endpoint,
            cause,
            hint,
            source,
        } if dropped_before => ProviderError::Unreachable {
            provider,
            endpoint,
            cause: format!(
                "{cause}, after the server closed the connection of an earlier attempt: the model server stopped \
                 (did it crash? its own log says)"
            ),
            hint,
            source,
        },
        other => other,
    }
}

/// Whether `err` is a request the server dropped ([`SERVER_DROPPED`]).
pub(crate) fn was_dropped(err: &ProviderError) -> bool {
    matches!(err, ProviderError::Transient { message, .. } if message.starts_with(SERVER_DROPPED))
}

/// A transport failure of a request to `ep`: [`ProviderError::Unreachable`] when the cause is known (not
/// retried: the server or the configuration must change), a dropped connection named as such, else the generic
/// classification.
pub(crate) fn transport_error(ep: &Endpoint, err: reqwest::Error) -> ProviderError {
    let Some(c) = cause(&err) else {
        if dropped(&err) {
            return dropped_error(ep, err, false);
        }
        return crate::error::from_reqwest(&ep.provider, err);
    };
    let key = config_key(&ep.provider);
    let (what, hint) = match c {
        Cause::Refused => (
            "connection refused (nothing is listening there)",
            format!(
                "start the model server (llama.cpp `llama-server`, LM Studio, `ollama serve`, vLLM) or correct \
                 `providers.{key}.apiBase` in config.json"
            ),
        ),
        Cause::Dns => (
            "the host name does not resolve",
            format!("check the spelling of `providers.{key}.apiBase` in config.json and the network"),
        ),
        Cause::Tls => (
            "the TLS handshake failed (untrusted certificate, or a plain-HTTP server addressed with https://)",
            format!(
                "use http:// in `providers.{key}.apiBase` for a local server without TLS, or trust its CA with \
                 SSL_CERT_FILE"
            ),
        ),
    };
    let err = ProviderError::Unreachable {
        provider: ep.provider.clone(),
        endpoint: ep.display_url(),
        cause: what.to_owned(),
        hint,
        source: Some(Box::new(err.without_url())),
    };
    tracing::debug!(provider = %ep.provider, error = %err, "LLM endpoint unreachable");
    err
}

/// Adds the endpoint and what to change to an HTTP error answer from `ep` for `model`.
pub(crate) fn explain_http(ep: &Endpoint, model: Option<&str>, mut err: ProviderError) -> ProviderError {
    let key = config_key(&ep.provider);
    let at = ep.display_url();
    let env = ep.spec.env_keys.first();
    match &mut err {
        ProviderError::Auth { message, .. } => {
            let env = env.map(|v| format!(" (or {v})")).unwrap_or_default();
            message.push_str(&format!(
                " [endpoint {at}; check `providers.{key}.apiKey`{env} in config.json, and that this key may use \
                 the model]"
            ));
        }
        ProviderError::InvalidRequest { message, .. } | ProviderError::Transient { message, .. }
            if message.starts_with(nanobot_types::WEB_PAGE_ANSWER) =>
        {
            message.push_str(&format!(
                " [endpoint {at}: is a model server listening there? check `providers.{key}.apiBase` (an \
                 OpenAI-compatible server usually ends in /v1)]"
            ));
        }
        ProviderError::InvalidRequest {
            status: 404, message, ..
        } => {
            let model = model.map(|m| format!("model `{m}` or ")).unwrap_or_default();
            message.push_str(&format!(
                " [endpoint {at} answered 404: the {model}path is not served there; check \
                 `agents.defaults.model` and `providers.{key}.apiBase` (OpenAI-compatible servers usually end \
                 in /v1)]"
            ));
        }
        ProviderError::Transient {
            status: Some(s @ 500..=599),
            message,
            ..
        } => {
            message.push_str(&format!(
                " [endpoint {at} had a server error (HTTP {s}); if it persists, the server's own log says why]"
            ));
        }
        _ => {}
    }
    err
}
