//! Leases on a JetStream key-value bucket (`<STREAM>_LEASES`), and the routing of each channel's outbound
//! messages to the replica holding that channel.
//!
//! A lease is a key (`scheduler`, `channel.<name>`) whose value names its holder. Taking it is a `create` (which
//! fails while the key exists); keeping it is an `update` expecting the revision last written (which fails once
//! anyone else wrote it), every third of the lease time. The bucket's `max_age` is the lease time, so the server
//! deletes a key nobody renewed, by its own clock: a replica that died frees its roles within one lease time, and
//! no clocks are compared between machines. A holder that cannot renew for two thirds of the lease time (the
//! server unreachable) reports the lease lost before the server could give it to anyone else.
//!
//! With a deployment key the value is sealed (bound to its key in the bucket): a record that does not open, put
//! there by a client without the key to keep a role from every replica, is taken over as if it were free.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::{consumer, stream};
use async_trait::async_trait;
use nanobot_bus::{BusError, Lease, Leases, OutboundDelivery, Role};
use nanobot_util::Backoff;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{DeploymentKey, NatsBusError, NatsBusSettings, ensure_consumer, pull_outbound, wait_or_cancel};

/// What this replica writes in the lease records it holds: its name, sealed when there is a deployment key.
#[derive(Clone)]
struct Record {
    holder: String,
    key: Option<DeploymentKey>,
}

impl Record {
    /// The value of the record at `kv_key`.
    fn value(&self, kv_key: &str) -> Vec<u8> {
        match &self.key {
            Some(key) => key
                .seal(&sealed_as(kv_key), &self.holder, self.holder.as_bytes())
                .unwrap_or_else(|_| self.holder.clone().into_bytes()),
            None => self.holder.clone().into_bytes(),
        }
    }
}

/// What a lease record's seal binds it to.
fn sealed_as(kv_key: &str) -> String {
    format!("lease:{kv_key}")
}

/// The holder a lease record at `kv_key` names; `None` when, with a deployment key, it does not open with it
/// (not written by a replica of this deployment).
pub(crate) fn holder_of(key: Option<&DeploymentKey>, kv_key: &str, value: &[u8]) -> Option<String> {
    match key {
        Some(key) => key
            .open(&sealed_as(kv_key), value)
            .ok()
            .map(|opened| String::from_utf8_lossy(&opened.body).into_owned()),
        None if value.starts_with(crate::seal::MAGIC) => {
            Some("(sealed: a replica with a deployment key)".into())
        }
        None => Some(String::from_utf8_lossy(value).into_owned()),
    }
}

/// Waits until the key `watch` follows is let go (deleted or purged; the last change counts, so a release just
/// before the watch began is seen), at most `bound`. `true`: `closed` was cancelled meanwhile.
async fn until_let_go(mut watch: kv::Watch, bound: Duration, closed: &CancellationToken) -> bool {
    use futures::StreamExt as _;
    let let_go = async {
        while let Some(Ok(entry)) = watch.next().await {
            if matches!(entry.operation, kv::Operation::Delete | kv::Operation::Purge) {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = closed.cancelled() => true,
        () = let_go => false,
        () = tokio::time::sleep(bound) => false,
    }
}

/// The leases of one replica, and the outbound streams of the channels it holds.
pub(crate) struct NatsLeases {
    kv: kv::Store,
    record: Record,
    ttl: Duration,
    router: OutboundRouter,
    closed: CancellationToken,
    /// See [`Leases::session_waits`].
    session_waits: AtomicU64,
}

impl NatsLeases {
    /// Opens (or creates) the lease bucket.
    pub(crate) async fn open(
        js: &async_nats::jetstream::Context,
        settings: &NatsBusSettings,
        key: Option<DeploymentKey>,
        router: OutboundRouter,
        closed: CancellationToken,
    ) -> Result<Self, NatsBusError> {
        let bucket = settings.lease_bucket();
        let failed = |e: &dyn std::fmt::Display| NatsBusError::JetStream {
            what: format!("key-value bucket {bucket}"),
            reason: e.to_string(),
        };
        // The bucket's stream is made here, in the layout of a JetStream key-value bucket, rather than by the
        // client's `create_key_value`, which first asks for the account's details in a form servers before 2.10
        // (Debian's 2.9) do not answer in.
        let config = stream::Config {
            name: format!("KV_{bucket}"),
            description: Some("nanobot leases: which replica runs cron and holds each channel".into()),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_age: settings.lease_time,
            storage: stream::StorageType::File,
            num_replicas: settings.replicas,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            duplicate_window: settings.lease_time.min(Duration::from_secs(120)),
            ..Default::default()
        };
        let made = js.get_or_create_stream(config).await.map_err(|e| failed(&e))?;
        if made.cached_info().config.max_age != settings.lease_time {
            // Every replica must agree on one lease time: to change it, stop them all and delete the bucket.
            tracing::warn!(
                bucket,
                theirs = ?made.cached_info().config.max_age,
                ours = ?settings.lease_time,
                "NATS bus: the lease bucket has another lease time; using it as it is"
            );
        }
        let kv = js.get_key_value(bucket.as_str()).await.map_err(|e| failed(&e))?;
        let ttl = made.cached_info().config.max_age;
        Ok(Self {
            kv,
            record: Record {
                holder: settings.replica.clone(),
                key,
            },
            ttl,
            router,
            closed,
            session_waits: AtomicU64::new(0),
        })
    }

    /// Takes `key` once: `Ok(Some(revision))` when it is ours now, `Ok(None)` while someone else holds it.
    async fn try_take(&self, key: &str) -> Result<Option<u64>, String> {
        match self.kv.create(key, self.record.value(key).into()).await {
            Ok(revision) => Ok(Some(revision)),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(self.take_forged(key).await),
            Err(e) => Err(e.to_string()),
        }
    }

    /// With a deployment key, takes over the record at `key` when it does not open with the key; `None` when it
    /// is a replica's (or cannot be read, or another replica took it first).
    async fn take_forged(&self, key: &str) -> Option<u64> {
        let deployment = self.record.key.as_ref()?;
        let entry = self.kv.entry(key).await.ok()??;
        if entry.operation != kv::Operation::Put || holder_of(Some(deployment), key, &entry.value).is_some() {
            return None;
        }
        tracing::warn!(
            key,
            "NATS bus: a lease record not written by a replica of this deployment (no deployment key); taking \
             the role over"
        );
        self.kv
            .update(key, self.record.value(key).into(), entry.revision)
            .await
            .ok()
    }
}

#[async_trait]
impl Leases for NatsLeases {
    async fn acquire(&self, role: Role) -> Result<Box<dyn Lease>, BusError> {
        let key = lease_key(&role);
        let mut backoff = Backoff::exponential(Duration::from_millis(200), self.ttl);
        let mut waiting_logged = false;
        let revision = loop {
            if self.closed.is_cancelled() {
                return Err(BusError::Closed);
            }
            let delay = match self.try_take(&key).await {
                Ok(Some(revision)) => break revision,
                Ok(None) => {
                    if !waiting_logged {
                        tracing::info!(role = %role, "another replica holds this role; standing by");
                        waiting_logged = true;
                        if matches!(role, Role::Session(_)) {
                            self.session_waits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // A holder that lets go writes a delete marker: taken again the moment it does. One that died
                    // writes nothing, and its key ages out within one lease time of its last renewal: looked at
                    // again every quarter of it.
                    match self.kv.watch_with_history(&key).await {
                        Ok(watch) => {
                            if until_let_go(watch, self.ttl / 4, &self.closed).await {
                                return Err(BusError::Closed);
                            }
                            continue;
                        }
                        Err(_) => self.ttl / 4,
                    }
                }
                Err(e) => {
                    tracing::warn!(role = %role, error = %e, "NATS bus: cannot take a lease; retrying");
                    backoff.next_delay()
                }
            };
            if wait_or_cancel(&self.closed, delay).await {
                return Err(BusError::Closed);
            }
        };
        tracing::info!(role = %role, holder = %self.record.holder, "lease taken");
        let lost = CancellationToken::new();
        let release = self.closed.child_token();
        let ended = CancellationToken::new();
        let keeper = keep(
            self.kv.clone(),
            key,
            self.record.clone(),
            revision,
            self.ttl,
            lost.clone(),
            release.clone(),
        );
        let done = ended.clone();
        tokio::spawn(async move {
            keeper.await;
            done.cancel();
        });
        if let Role::Channel(name) = &role {
            // The channel's outbound messages come here for as long as the lease is held.
            self.router.serve(name, release.child_token());
        }
        Ok(Box::new(NatsLease {
            role,
            lost,
            release,
            ended,
        }))
    }

    fn holder(&self) -> &str {
        &self.record.holder
    }

    fn session_waits(&self) -> u64 {
        self.session_waits.load(Ordering::Relaxed)
    }
}

/// The key of `role` in the bucket. KV keys allow letters, digits, `-`, `_`, `/`, `=` and `.`: a role whose name
/// has anything else, or is long (a session key from an API client), is named by a hash of its name instead,
/// so two roles never share a key by accident.
fn lease_key(role: &Role) -> String {
    let key = role.key();
    let plain = key.len() <= 128
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !key.ends_with('.')
        && !key.contains("..");
    if plain {
        return key;
    }
    let kind = key.split('.').next().unwrap_or("role");
    let mut h = crate::Fnv1a::default();
    std::hash::Hasher::write(&mut h, key.as_bytes());
    format!("{kind}.h{:016x}", std::hash::Hasher::finish(&h))
}

/// Renews the lease every third of the lease time until it is released (then deletes the key, if it is still
/// ours) or lost (someone else wrote it, or no renewal succeeded for two thirds of the lease time).
async fn keep(
    kv: kv::Store,
    key: String,
    record: Record,
    mut revision: u64,
    ttl: Duration,
    lost: CancellationToken,
    release: CancellationToken,
) {
    let every = ttl / 3;
    // Measured from when a successful renewal was *sent*: the server's clock started no earlier.
    let mut valid_until = Instant::now() + ttl * 2 / 3;
    let mut next = Instant::now() + every;
    loop {
        let wake = next.min(valid_until);
        tokio::select! {
            () = release.cancelled() => {
                // Released: free it now rather than after it expires (bounded; it expires anyway).
                let _ = tokio::time::timeout(every, kv.delete_expect_revision(&key, Some(revision))).await;
                tracing::info!(key, "lease released");
                return;
            }
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        if now >= valid_until {
            tracing::warn!(key, "lease lost: it could not be renewed in time");
            lost.cancel();
            return;
        }
        let sent = now;
        match tokio::time::timeout(every, kv.update(&key, record.value(&key).into(), revision)).await {
            Ok(Ok(r)) => {
                revision = r;
                valid_until = sent + ttl * 2 / 3;
                next = sent + every;
            }
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                tracing::warn!(key, "lease lost: another replica holds it now");
                lost.cancel();
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(key, error = %e, "NATS bus: cannot renew a lease; retrying");
                next = Instant::now() + every / 4;
            }
            Err(_) => {
                tracing::warn!(key, "NATS bus: renewing a lease timed out; retrying");
                next = Instant::now();
            }
        }
    }
}

/// A held role (see [`Lease`]).
struct NatsLease {
    role: Role,
    lost: CancellationToken,
    release: CancellationToken,
    /// Cancelled when the keeper task has ended (after deleting the key on a release).
    ended: CancellationToken,
}

impl std::fmt::Debug for NatsLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsLease")
            .field("role", &self.role)
            .field("lost", &self.lost.is_cancelled())
            .finish()
    }
}

impl Drop for NatsLease {
    fn drop(&mut self) {
        self.release.cancel();
    }
}

#[async_trait]
impl Lease for NatsLease {
    fn role(&self) -> &Role {
        &self.role
    }

    async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// Deletes the key now and waits for it (the keeper bounds the delete by a third of the lease time).
    async fn release(self: Box<Self>) {
        self.release.cancel();
        self.ended.cancelled().await;
    }
}

/// Starts pulling a channel's outbound consumer when its lease is taken.
#[derive(Clone)]
pub(crate) struct OutboundRouter {
    pub(crate) opener: crate::Opener,
    pub(crate) stream: stream::Stream,
    pub(crate) settings: NatsBusSettings,
    pub(crate) tx: mpsc::Sender<OutboundDelivery>,
    pub(crate) waiting: Arc<AtomicUsize>,
}

impl OutboundRouter {
    /// Pulls `channel`'s outbound messages into this process until `stop` fires.
    pub(crate) fn serve(&self, channel: &str, stop: CancellationToken) {
        let router = self.clone();
        let channel = channel.to_owned();
        tokio::spawn(async move {
            let name = router.settings.outbound_consumer(&channel);
            let config = consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: router.settings.outbound_subject(&channel),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: router.settings.ack_wait,
                ..Default::default()
            };
            let mut backoff = Backoff::exponential(Duration::from_millis(200), Duration::from_secs(10));
            let consumer = loop {
                match ensure_consumer(&router.stream, &name, config.clone()).await {
                    Ok(c) => break c,
                    Err(e) => {
                        tracing::warn!(channel, error = %e, "NATS bus: cannot open a channel's outbound messages; retrying");
                        if wait_or_cancel(&stop, backoff.next_delay()).await {
                            return;
                        }
                    }
                }
            };
            pull_outbound(
                consumer,
                router.opener.clone(),
                router.tx.clone(),
                router.waiting.clone(),
                (router.settings.ack_wait, stop),
            )
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_are_valid_and_distinct() {
        assert_eq!(lease_key(&Role::Scheduler), "scheduler");
        assert_eq!(lease_key(&Role::Channel("telegram".into())), "channel.telegram");
        let a = lease_key(&Role::Session("api:a b".into()));
        let b = lease_key(&Role::Session("api:a_b".into()));
        assert_ne!(a, b, "names that would sanitise alike stay apart");
        assert!(a.starts_with("session.h") && a.len() < 40, "{a}");
        let long = lease_key(&Role::Session("x".repeat(500)));
        assert!(long.len() < 40, "{long}");
    }
}
