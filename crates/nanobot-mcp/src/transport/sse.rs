//! The legacy HTTP+SSE transport (MCP protocol 2024-11-05), which rmcp no longer ships.
//!
//! The client opens `GET <url>` as an event stream. The server's first event is `endpoint`,
//! whose data is the (usually relative) URL to POST JSON-RPC messages to; every answer then
//! arrives on the stream as a `message` event. Some servers never answer a POST that names an
//! unknown session, so every POST carries a timeout.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Client, Url};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::McpError;

/// How many server messages may wait before the stream reader pauses.
const CHANNEL_CAPACITY: usize = 64;

/// A client [`Transport`] for legacy HTTP+SSE servers.
pub struct LegacySseTransport {
    server: String,
    client: Client,
    endpoint: Url,
    headers: HeaderMap,
    post_timeout: Duration,
    rx: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Weak, so the channel closes when the stream ends even while POSTs are in flight.
    tx: mpsc::WeakSender<ServerJsonRpcMessage>,
    reader: JoinHandle<()>,
}

impl std::fmt::Debug for LegacySseTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySseTransport")
            .field("server", &self.server)
            .field("endpoint", &self.endpoint.as_str())
            .field("post_timeout", &self.post_timeout)
            .finish_non_exhaustive()
    }
}

impl LegacySseTransport {
    /// Opens the event stream at `url` and waits (at most `handshake_timeout`) for the
    /// `endpoint` event. The endpoint must have the same origin as `url`.
    pub async fn connect(
        server: &str,
        client: Client,
        url: &str,
        headers: HeaderMap,
        handshake_timeout: Duration,
        post_timeout: Duration,
    ) -> Result<Self, McpError> {
        let handshake_err = |reason: String| McpError::SseHandshake {
            server: server.to_owned(),
            reason,
        };
        let base = Url::parse(url).map_err(|e| handshake_err(format!("bad URL {url:?}: {e}")))?;
        let http_err = |source| McpError::Http {
            server: server.to_owned(),
            url: url.to_owned(),
            source,
        };
        let open = async {
            let response = client
                .get(base.clone())
                .headers(headers.clone())
                .header(ACCEPT, "text/event-stream")
                .send()
                .await
                .map_err(http_err)?
                .error_for_status()
                .map_err(http_err)?;
            let mut events = SseStream::from_bytes_stream(response.bytes_stream());
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| handshake_err(format!("bad event stream: {e}")))?;
                if event.event.as_deref() == Some("endpoint") {
                    let data = event.data.unwrap_or_default();
                    return Ok((data, events));
                }
            }
            Err(handshake_err("stream ended before the `endpoint` event".into()))
        };
        let (data, mut events) = tokio::time::timeout(handshake_timeout, open)
            .await
            .map_err(|_| McpError::ConnectTimeout {
                server: server.to_owned(),
                timeout: handshake_timeout,
            })??;
        let endpoint = base
            .join(data.trim())
            .map_err(|e| handshake_err(format!("bad endpoint {data:?}: {e}")))?;
        if endpoint.origin() != base.origin() {
            return Err(handshake_err(format!(
                "endpoint {endpoint} is not on the same origin as {base}"
            )));
        }

        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let weak = tx.downgrade();
        let name = server.to_owned();
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(server = %name, "SSE stream broke: {e}");
                        break;
                    }
                };
                if !matches!(event.event.as_deref(), None | Some("message")) {
                    continue;
                }
                let Some(data) = event.data else { continue };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(msg) => {
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(server = %name, "ignoring a bad SSE message: {e}"),
                }
            }
            tracing::debug!(server = %name, "SSE stream ended");
        });
        Ok(Self {
            server: server.to_owned(),
            client,
            endpoint,
            headers,
            post_timeout,
            rx,
            tx: weak,
            reader,
        })
    }

    /// The URL messages are POSTed to (from the `endpoint` event).
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }
}

impl Drop for LegacySseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = McpError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        let timeout = self.post_timeout;
        let server = self.server.clone();
        let tx = self.tx.clone();
        async move {
            let url = endpoint.to_string();
            let http_err = |source| McpError::Http {
                server: server.clone(),
                url: url.clone(),
                source,
            };
            let response = client
                .post(endpoint)
                .headers(headers)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .timeout(timeout)
                .json(&item)
                .send()
                .await
                .map_err(http_err)?
                .error_for_status()
                .map_err(http_err)?;
            let is_json = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            if is_json {
                // Non-standard but seen in the wild: the answer in the POST response itself.
                let body = response.bytes().await.map_err(http_err)?;
                if let Ok(msg) = serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                    && let Some(tx) = tx.upgrade()
                {
                    let _ = tx.send(msg).await;
                }
            }
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.rx.close();
        Ok(())
    }
}
