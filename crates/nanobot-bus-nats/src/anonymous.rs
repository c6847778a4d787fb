//! [`anonymous_access`]: what a client without credentials can do on the bus's server. Anyone who can publish
//! on the inbound subjects can make a message look as if any user of any channel sent it, so the bus refuses
//! such a server unless [`NatsBusSettings::allow_anonymous`] says to run anyway.
//!
//! The answer is found the way an intruder would find it: a client with no credentials (and no client
//! certificate) connects and publishes one probe message on `<prefix>.in.probe`, a subject of the inbound stream
//! that no partition's consumer reads. A JetStream acknowledgement, or "no responders" before the stream exists,
//! means it may publish; the server's "Permissions Violation" means it may not. The probe is purged from the
//! stream at once through the authenticated connection.

use std::time::Duration;

use async_nats::jetstream::{self, stream::Stream};

use crate::{NatsBusError, NatsBusSettings};

/// What a client without credentials can do on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnonymousAccess {
    /// The server turns it away: it asks for credentials (or a client certificate).
    Refused,
    /// It connects, but may not publish on the bus's inbound subjects (users with permissions, a
    /// `no_auth_user` that may publish nowhere the bus listens).
    CannotPublish,
    /// It connects and may publish on the bus's inbound subjects: anyone who reaches the server can act as any
    /// user of any channel.
    Publishes,
}

impl AnonymousAccess {
    /// Words for logs and `nanobot doctor`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Refused => "clients without credentials are turned away",
            Self::CannotPublish => {
                "clients without credentials connect but may not publish on the bus's subjects"
            }
            Self::Publishes => {
                "OPEN: clients without credentials may publish on the bus's subjects, so anyone who reaches the \
                 server can act as any user"
            }
        }
    }
}

/// The subject of the probe: in the inbound stream, read by no partition.
pub(crate) fn probe_subject(settings: &NatsBusSettings) -> String {
    format!("{}.in.probe", settings.subject_prefix)
}

/// Tries the server as a client without credentials would (see the module docs). `inbound` is the inbound
/// stream when it exists, to purge the probe from; every wait is bounded by the settings' timeouts.
pub async fn anonymous_access(
    settings: &NatsBusSettings,
    inbound: Option<&Stream>,
) -> Result<AnonymousAccess, NatsBusError> {
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("{} (anonymous check)", settings.client_name))
        .connection_timeout(settings.connect_timeout)
        .request_timeout(Some(settings.request_timeout))
        .max_reconnects(Some(1))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    tx.send(e.to_string()).ok();
                }
            }
        });
    // The server's certificate is trusted as the bus trusts it: the question is the server's door, not ours.
    if let Some(ca) = &settings.tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    let url = settings.url_without_credentials();
    let client = match tokio::time::timeout(settings.connect_timeout, options.connect(url.as_str())).await {
        Ok(Ok(client)) => client,
        // The authenticated client got in a moment ago: turned away (credentials asked for, a client
        // certificate required, or the connection closed on it).
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "NATS: a client without credentials is turned away");
            return Ok(AnonymousAccess::Refused);
        }
        Err(_) => return Ok(AnonymousAccess::Refused),
    };
    let subject = probe_subject(settings);
    let mut js = jetstream::new(client.clone());
    js.set_timeout(settings.request_timeout);
    let published = async {
        let ack = js
            .publish(subject.clone(), "nanobot anonymous check".into())
            .await?;
        ack.await
    };
    let denied = async {
        while let Some(e) = errors.recv().await {
            let e = e.to_ascii_lowercase();
            if e.contains("permissions violation") && e.contains("publish") {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    // Bounded here as well as by the context's request timeout: no answer at all counts as published.
    let access = tokio::select! {
        () = tokio::time::sleep(settings.request_timeout) => {
            tracing::debug!("NATS: no answer to the anonymous check in time; counted as published");
            AnonymousAccess::Publishes
        }
        () = denied => AnonymousAccess::CannotPublish,
        r = published => match r {
            Ok(_) => AnonymousAccess::Publishes,
            // No stream on the subject yet: the publish got through to the server, which no one answered.
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound => AnonymousAccess::Publishes,
            // No acknowledgement within the bound: the message may have been stored all the same (a client
            // that may publish but not receive the answer), so it counts as published.
            Err(e) => {
                tracing::debug!(error = %e, "NATS: no answer to the anonymous check; counted as published");
                AnonymousAccess::Publishes
            }
        },
    };
    drop(client);
    if access == AnonymousAccess::Publishes
        && let Some(stream) = inbound
    {
        purge_probe(stream, &subject, settings.request_timeout).await;
    }
    Ok(access)
}

/// Removes the probe messages from the inbound stream (logged when it cannot: no consumer reads them).
async fn purge_probe(stream: &Stream, subject: &str, bound: Duration) {
    match tokio::time::timeout(bound, stream.purge().filter(subject)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(subject, error = %e, "NATS: cannot purge the anonymous check's message"),
        Err(_) => tracing::warn!(subject, "NATS: no answer purging the anonymous check's message"),
    }
}
