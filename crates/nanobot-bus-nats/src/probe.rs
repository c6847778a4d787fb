//! [`probe`]: what `nanobot doctor` says about the NATS server, the streams and the leases, without creating
//! anything.

use std::time::Duration;

use futures::StreamExt as _;

use crate::{NatsBusError, NatsBusSettings};

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Probe {
    /// The server's version.
    pub server_version: String,
    /// Each stream of the bus (inbound, outbound, the shared files, leases) and its message count; `None`: not
    /// created yet (the first gateway creates it; the shared files' stream, a gateway with
    /// `gateway.bus.nats.store: jetstream` or `nanobot store import`).
    pub streams: Vec<(String, Option<u64>)>,
    /// The leases held now: role (`scheduler`, `channel.<name>`) and holder (a replica's name).
    pub holders: Vec<(String, String)>,
    /// Whether the server asks its clients for credentials. `false`: anyone who reaches it can publish as any
    /// user of any channel and read every reply.
    pub auth_required: bool,
}

/// Connects (bounded by the settings' timeouts), and reads the streams and the lease holders.
pub async fn probe(settings: &NatsBusSettings) -> Result<Probe, NatsBusError> {
    settings.validate()?;
    let js = crate::jetstream_context(settings, &format!("{} (doctor)", settings.client_name), false).await?;
    let info = js.client().server_info();
    let (server_version, auth_required) = (info.version, info.auth_required);
    let mut streams = Vec::new();
    for name in [
        settings.inbound_stream(),
        settings.outbound_stream(),
        // The shared files of `nanobot-store-nats` (replicas with separate homes); the leases stay last.
        format!("{}_FILES", settings.stream),
        format!("KV_{}", settings.lease_bucket()),
    ] {
        let count = match js.get_stream(&name).await {
            Ok(mut s) => Some(
                s.info()
                    .await
                    .map_err(|e| jetstream_error(&name, &e))?
                    .state
                    .messages,
            ),
            // "stream not found" is an answer; JetStream being off, or no answer, is not.
            Err(e) if e.to_string().contains("not found") => None,
            Err(e) => return Err(jetstream_error(&name, &e)),
        };
        streams.push((name, count));
    }
    let mut holders = Vec::new();
    if streams.last().is_some_and(|(_, n)| n.is_some()) {
        let bucket = settings.lease_bucket();
        let kv = js
            .get_key_value(bucket.as_str())
            .await
            .map_err(|e| jetstream_error(&bucket, &e))?;
        let keys: Vec<String> = tokio::time::timeout(settings.request_timeout, async {
            match kv.keys().await {
                Ok(keys) => {
                    keys.filter_map(|k| async move { k.ok() })
                        .take(1024)
                        .collect()
                        .await
                }
                Err(_) => Vec::new(),
            }
        })
        .await
        .unwrap_or_default();
        for key in keys {
            if let Ok(Some(holder)) = tokio::time::timeout(Duration::from_secs(5), kv.get(key.as_str()))
                .await
                .unwrap_or(Ok(None))
            {
                holders.push((key, String::from_utf8_lossy(&holder).into_owned()));
            }
        }
    }
    Ok(Probe {
        server_version,
        streams,
        holders,
        auth_required,
    })
}

fn jetstream_error(what: &str, e: &dyn std::fmt::Display) -> NatsBusError {
    NatsBusError::JetStream {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}
