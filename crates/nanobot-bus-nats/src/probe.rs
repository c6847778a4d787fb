//! [`probe`]: what `nanobot doctor` says about the NATS server, the streams and the leases, without creating
//! anything (the anonymous check's probe message is purged at once).

use std::time::Duration;

use futures::StreamExt as _;

use crate::{AnonymousAccess, NatsBusError, NatsBusSettings};

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
    /// What a client without credentials can do there ([`crate::anonymous_access`]).
    pub anonymous: AnonymousAccess,
}

/// Connects (bounded by the settings' timeouts), and reads the streams and the lease holders.
pub async fn probe(settings: &NatsBusSettings) -> Result<Probe, NatsBusError> {
    settings.validate()?;
    let deployment = settings.deployment_key()?;
    let js = crate::jetstream_context(settings, &format!("{} (doctor)", settings.client_name), false).await?;
    let info = js.client().server_info();
    let server_version = info.version;
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
                let named = crate::lease::holder_of(deployment.as_ref(), &key, &holder)
                    .unwrap_or_else(|| "(not a replica of this deployment)".into());
                holders.push((key, named));
            }
        }
    }
    let inbound = if streams.first().is_some_and(|(_, n)| n.is_some()) {
        js.get_stream(settings.inbound_stream()).await.ok()
    } else {
        None
    };
    let anonymous = crate::anonymous_access(settings, inbound.as_ref()).await?;
    Ok(Probe {
        server_version,
        streams,
        holders,
        anonymous,
    })
}

fn jetstream_error(what: &str, e: &dyn std::fmt::Display) -> NatsBusError {
    NatsBusError::JetStream {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}
