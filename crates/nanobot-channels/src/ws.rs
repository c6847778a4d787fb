//! WebSocket clients of the adapters (`websocket` feature): [`connect`] opens one with the HTTP/1.1 upgrade sent by
//! reqwest, so a credential in the request (an `Authorization` header, a token in the query) is never logged: the
//! WebSocket library's own client handshake logs the whole request at TRACE level.

use std::time::Duration;

use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::ChannelError;

/// An open WebSocket to a platform.
pub type Socket = tokio_tungstenite::WebSocketStream<reqwest::Upgraded>;

/// `url` as shown in errors and logs: without its query and fragment (where a token may sit).
pub fn shown_url(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// An HTTP client for WebSocket upgrades: HTTP/1.1 only, the system's roots, `connect_timeout`, no proxy of the
/// environment when `direct` (a server on the user's own network).
pub fn upgrade_client(
    channel: &str,
    connect_timeout: Duration,
    direct: bool,
) -> Result<reqwest::Client, ChannelError> {
    crate::api_client(channel, |b| {
        let b = b.http1_only().connect_timeout(connect_timeout);
        if direct { b.no_proxy() } else { b }
    })
}

/// A WebSocket for [`connect`] to open, and the settings its errors name.
#[derive(Debug, Clone, Copy)]
pub struct Upgrade<'a> {
    /// `ws://` or `wss://` address (a ticket in its query is never shown).
    pub url: &'a str,
    /// Sent as `Authorization: Bearer …` when given and not empty.
    pub bearer: Option<&'a str>,
    /// Bound of the connection, the handshake and the upgrade, each.
    pub timeout: Duration,
    /// The setting that holds the address (`channels.napcat.wsUrl`).
    pub url_key: &'a str,
    /// The setting a refusal (HTTP 401 or 403) is blamed on, as [`ChannelError::Auth`]; `None`: a refusal is
    /// transient (a short-lived ticket in the URL, asked for again on the next connection).
    pub credential_key: Option<&'a str>,
}

/// Opens `target` for `channel` through `client` (see [`upgrade_client`]). A refusal is
/// [`ChannelError::Auth`] naming [`Upgrade::credential_key`] (or transient without one); a server that does not
/// upgrade, or a network failure, is [`ChannelError::Transient`]. Errors show the URL without its query and
/// never the bearer.
pub async fn connect(
    channel: &str,
    client: &reqwest::Client,
    target: &Upgrade<'_>,
) -> Result<Socket, ChannelError> {
    let Upgrade {
        url,
        bearer,
        timeout,
        url_key: key,
        credential_key,
    } = *target;
    let shown = shown_url(url);
    let transient = |message: String| ChannelError::transient(channel, message);
    let http_url = if let Some(rest) = url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else if let Some(rest) = url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else {
        return Err(ChannelError::Config {
            channel: channel.to_owned(),
            message: format!("{key} {shown} is not a ws:// or wss:// URL"),
        });
    };
    let nonce = generate_key();
    let mut request = client
        .get(&http_url)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", &nonce);
    let secret = bearer.unwrap_or_default();
    if !secret.is_empty() {
        request = request.bearer_auth(secret);
    }
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Err(_) => return Err(transient(format!("connecting to {shown} timed out"))),
        Ok(Err(e)) => {
            return Err(transient(format!(
                "cannot connect to {shown}: {}",
                crate::server_text(&e.without_url().to_string(), &[secret])
            )));
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status().as_u16();
    if matches!(status, 401 | 403) {
        return Err(match credential_key {
            Some(token_key) => ChannelError::auth(
                channel,
                format!("{shown} refused the connection (HTTP {status}): check {token_key}"),
            ),
            None => transient(format!("{shown} refused the connection (HTTP {status})")),
        });
    }
    if status != 101 {
        return Err(transient(format!(
            "{shown} answered HTTP {status} instead of opening a WebSocket"
        )));
    }
    let accept = response
        .headers()
        .get("Sec-WebSocket-Accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept != derive_accept_key(nonce.as_bytes()) {
        return Err(transient(format!(
            "{shown} did not accept the WebSocket handshake"
        )));
    }
    let upgraded = tokio::time::timeout(timeout, response.upgrade())
        .await
        .map_err(|_| transient(format!("{shown}: the WebSocket upgrade timed out")))?
        .map_err(|e| {
            transient(format!(
                "{shown}: the WebSocket upgrade failed: {}",
                e.without_url()
            ))
        })?;
    Ok(tokio_tungstenite::WebSocketStream::from_raw_socket(upgraded, Role::Client, None).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_query() {
        assert_eq!(shown_url("ws://h:1/p?access_token=SEKRIT#x"), "ws://h:1/p");
        assert_eq!(shown_url("wss://h/api/v4/websocket"), "wss://h/api/v4/websocket");
    }
}
